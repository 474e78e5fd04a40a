// FORGE_RECALIB TFLite-Micro custom kernel: registration and app controls.
//
//   tflite::MicroMutableOpResolver<N> resolver;
//   resolver.AddCustom("FORGE_RECALIB", tflite::Register_FORGE_RECALIB());
//
//   ForgeRecalibSetMode(FORGE_RECALIB_MODE_FROZEN);  // stop adapting
//   ForgeRecalibSetMode(FORGE_RECALIB_MODE_ADAPT);   // resume (default)
//   ForgeRecalibRequestReset();  // every FORGE_RECALIB op restores its clean
//                                // targets (mu = beta, var = gamma_abs^2) at
//                                // its next Eval
//   interpreter.Reset();  // also restores them, through the TFLM reset hook
//
// The controls are process-wide (all FORGE_RECALIB ops of all interpreters);
// call them between invocations, not concurrently with Invoke().
// Equations and state layout: forge_recalib_kernel.cc and ../SPEC.md.
#ifndef FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_
#define FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_

#include <stdint.h>

#include "forge_recalib.h"  // FORGE_RECALIB_MODE_ADAPT / _FROZEN
#include "tensorflow/lite/micro/micro_common.h"

// mode: FORGE_RECALIB_MODE_ADAPT or FORGE_RECALIB_MODE_FROZEN; other values
// are ignored and return false.
bool ForgeRecalibSetMode(int32_t mode);
int32_t ForgeRecalibGetMode();
// Bumps a generation counter that each op compares with the one it last saw.
void ForgeRecalibRequestReset();
uint32_t ForgeRecalibResetGeneration();

namespace tflite {

// Custom op name in the model: "FORGE_RECALIB".
const TFLMRegistration* Register_FORGE_RECALIB();

}  // namespace tflite

#endif  // FORGE_RECALIB_MICRO_FORGE_RECALIB_KERNEL_H_
