// FORGE_RECALIB TFLite-Micro custom kernel: registration and per-interpreter
// controls.
//
//   tflite::MicroMutableOpResolver<N> resolver;
//   resolver.AddCustom("FORGE_RECALIB", forge_tflm::Register_FORGE_RECALIB());
//   tflite::MicroInterpreter interpreter(model, resolver, arena, arena_size);
//
//   forge_tflm::ForgeRecalibControl control;    // outlives the interpreter
//   interpreter.SetMicroExternalContext(&control);  // before the first Invoke
//
//   control.SetMode(FORGE_RECALIB_MODE_FROZEN);  // stop adapting
//   control.SetMode(FORGE_RECALIB_MODE_ADAPT);   // resume (the default)
//   control.SetMode(FORGE_RECALIB_MODE_SOURCE);  // one pass as the int8 source
//                    // (clean targets), state kept: the gate's probe
//   control.SetMode(FORGE_RECALIB_MODE_ADAPT_SAFE);  // while labels look
//                    // correlated: label-safe ops adapt, the others run
//                    // source mode (SPEC "Adapt-safe mode")
//   control.RequestReset();  // every FORGE_RECALIB op of this interpreter
//                            // restores its clean targets (mu = beta,
//                            // var = gamma_abs^2) at its next Eval
//   interpreter.Reset();     // also restores them, at once (TFLM reset hook)
//
// The kernel keeps no process-wide mutable state: each interpreter (and each
// op's state) is independent, so one program can run several models, or the
// same model twice, with different modes. The control is read through TFLM's
// per-interpreter external-context slot (MicroContext::external_context());
// an interpreter without one attached always adapts and resets only through
// interpreter.Reset(). One control may be attached to several interpreters to
// drive them together. Change it between invocations, not during Invoke().
// The slot holds one payload per interpreter: an application that already
// uses it for something else (e.g. the Ethos-U driver) cannot attach a
// control, and Eval fails if the payload is not a ForgeRecalibControl.
// Equations and state layout: forge_recalib_kernel.cc and ../SPEC.md.
#ifndef FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_
#define FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_

#include <stdint.h>

#include "forge_recalib.h"  // FORGE_RECALIB_MODE_ADAPT / _FROZEN / _SOURCE
#include "tensorflow/lite/micro/micro_common.h"

namespace forge_tflm {

// First word of every ForgeRecalibControl: the external-context slot is an
// untyped void*, so the kernel checks it before trusting the payload.
constexpr uint32_t kForgeRecalibControlMagic = 0x43524746u;  // "FGRC"

struct ForgeRecalibControl {
  uint32_t magic = kForgeRecalibControlMagic;
  int32_t mode = FORGE_RECALIB_MODE_ADAPT;
  // Each op remembers the generation it last applied; a different value
  // means "reset at your next Eval", so one bump reaches every op.
  uint32_t reset_generation = 0;

  // mode: FORGE_RECALIB_MODE_ADAPT, _FROZEN, _SOURCE or _ADAPT_SAFE
  // (forge_recalib_mode_for: adapt where the op's option label_safe is set, else
  // source mode); other values
  // are ignored and return false.
  bool SetMode(int32_t new_mode) {
    if (new_mode < 0 || new_mode >= FORGE_RECALIB_MODE_COUNT) return false;
    mode = new_mode;
    return true;
  }
  void RequestReset() { ++reset_generation; }
};

// Custom op name in the model: "FORGE_RECALIB".
const TFLMRegistration* Register_FORGE_RECALIB();

}  // namespace forge_tflm

#endif  // FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_
