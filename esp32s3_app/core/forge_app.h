// FORGE application core: runs one int8 .tflite (with or without FORGE_RECALIB)
// over a stream of int8 input images at batch 1 in TFLite-Micro and prints
// machine-readable lines. Shared by the host targets (esp32s3_app/host), the
// ESP-IDF app (esp32s3_app/main) and the Cortex-M emulation target; the
// target-specific parts are in forge_app_platform.h.
//
//   ForgeAppPlatform platform = {my_clock, 240000000, my_write, my_marker, NULL};
//   ForgeAppConfig config = {};
//   config.model = g_model_data;          // alignas(16) flatbuffer bytes
//   config.model_size = g_model_data_size;
//   config.arena = g_arena; config.arena_size = sizeof(g_arena);
//   config.images = g_images;             // num_images * input bytes, int8
//   config.num_images = 200;
//   int rc = ForgeAppRun(platform, config); // 0: all images ran
//
// FORGE adapts with the options stored in the model (its own momentum/window,
// variance estimator, eps); state starts at the clean targets (beta, gamma^2)
// and is never reset during the run (one stream). A model without
// FORGE_RECALIB runs the same way (the plain int8 control).
//
// Output lines (one record per line, "key=value" fields separated by spaces;
// lists are comma-separated; checksums (ForgeAppChecksum) are over the bytes of
// an operator's output tensor, as 8 hex digits):
//   forge_app version=1 model_bytes=B ops=K forge_ops=F input=1x32x32x3
//       input_bytes=N output=1x10 clock_hz=H mode=adapt|frozen|gated
//       trace=none|forge|all
//   op index=i name=CONV_2D forge=0|1                       (K lines, model order)
//   mem arena_size=A arena_used=U forge_persistent=P forge_scratch=S
//       forge_state=S8 states=F   (the state buffers found, and how many)
//   img index=n pred=c logits=l0,l1,... ticks=T [forge=h0,...] [state=h0,...]
//       [trace=h0,...]   forge=: one checksum per FORGE op's output (trace>=forge);
//       state=: per FORGE op, its float32 [mu..., var...] state after the image
//       (trace>=forge; omitted if the state buffers could not be identified);
//       trace=: one checksum per op's output (trace=all)
//   tensor image=n op=k offset=o bytes=B values=v0,...  (dump_op; 512 per line)
//   cost index=i name=CONV_2D calls=n ticks=T    (per operator, summed over every
//       pass: with config.gate a probed image runs twice, calls = images + probed)
//   cost_type name=CONV_2D ops=k ticks=T                    (per operator type)
//   gate image=n decision=on|off score_e6=S correlated=0|1 agreement_e6=A
//       chance_e6=C  (a probe ended: its score, the label-correlation detector's
//       flag and rates, in millionths); with config.gate the img line also has
//       path=source|adapt|frozen: the pass whose logits (and checksums) it prints
//   done images=n status=ok|error ticks=T
//   error what=...                                          (on failure)
// The per-operator ticks come from TFLM's MicroProfiler interface with the
// platform clock (TFLM calls it only when built without
// TF_LITE_STRIP_ERROR_STRINGS; otherwise the cost lines read 0); they include
// the checksum pass when trace != none, so time with trace=none. The core
// prints through its own uint64 formatting (no %llu), so newlib-nano works.
#ifndef ESP32S3_APP_CORE_FORGE_APP_H_
#define ESP32S3_APP_CORE_FORGE_APP_H_

#include <stddef.h>
#include <stdint.h>

#include "forge_app_platform.h"
#include "forge_controller.h"

// The operators the resolver knows (the ResNet-20 set by default). Define
// FORGE_APP_OPS_CUSTOM and then any of the FORGE_APP_OP_* macros below to
// change the set; the build must then compile the matching kernels.
#ifndef FORGE_APP_OPS_CUSTOM
#define FORGE_APP_OP_CONV_2D 1
#define FORGE_APP_OP_ADD 1
#define FORGE_APP_OP_MEAN 1
#define FORGE_APP_OP_FULLY_CONNECTED 1
#endif

inline ForgeControllerSettings ForgeControllerDefaults() {
  ForgeControllerSettings s;
  forge_controller_default_settings(&s);
  return s;
}

enum ForgeAppTrace {
  FORGE_APP_TRACE_NONE = 0,   // logits only (timing runs)
  FORGE_APP_TRACE_FORGE = 1,  // + checksum of each FORGE op's output
  FORGE_APP_TRACE_ALL = 2     // + checksum of every op's output
};

struct ForgeAppConfig {
  const uint8_t* model = nullptr;  // flatbuffer, 16-byte aligned
  size_t model_size = 0;
  uint8_t* arena = nullptr;  // tensor arena, 16-byte aligned, owned by the target
  size_t arena_size = 0;
  // Images: either `images` (num_images * input_bytes int8, e.g. a const
  // array in flash) or, when it is null, `read_image` copies image `index`
  // into the interpreter's input tensor `dst` (files, a camera, ...) and
  // returns false at the end of the stream (the run then ends normally).
  const int8_t* images = nullptr;
  bool (*read_image)(void* user, size_t index, int8_t* dst, size_t bytes) = nullptr;
  void* read_image_user = nullptr;
  size_t num_images = 0;
  bool adapt = true;  // false: FORGE frozen at the clean targets ("source")
  // The gate (forge_controller.h, the code `forge_tflm eval --methods=forge-gated`
  // runs): while probing, each image runs twice (source mode, then adapt); the
  // classes and output quantization come from the model. Needs `adapt`.
  bool gate = false;
  ForgeControllerSettings gate_settings = ForgeControllerDefaults();
  int trace = FORGE_APP_TRACE_FORGE;
  bool print_logits = true;
  // Debugging: print the whole int8 output of op `dump_op` at image
  // `dump_image` ("tensor" lines); -1: none.
  long dump_op = -1;
  size_t dump_image = 0;
};

// Runs the stream; returns 0 on success, a negative code on failure (an
// "error what=..." line says why).
int ForgeAppRun(const ForgeAppPlatform& platform, const ForgeAppConfig& config);

// The checksum in "forge=" and "trace=": sum over i of byte_i * w_i mod 2^32,
// w_i = ((i * 2654435761) mod 2^32) | 1 (bytes as uint8).
uint32_t ForgeAppChecksum(const void* data, size_t n);

#endif  // ESP32S3_APP_CORE_FORGE_APP_H_
