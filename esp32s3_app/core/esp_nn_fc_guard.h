// FULLY_CONNECTED for builds with ESP-NN (esp-tflite-micro's kernels/esp_nn/),
// guarded against a known ESP-NN bug.
//
// ESP-NN's ESP32-S3 per-channel fully-connected kernel
// (esp_nn_fully_connected_per_ch_s8, assembly) assumes an output width that is
// a multiple of 8, and esp-tflite-micro calls it without checking
// (espressif/esp-nn issue 34; esp-tflite-micro issue 108: a model returning
// zeros from the same path). A CIFAR-10 classifier has 10 outputs. The guard
// wraps esp-tflite-micro's registration: Init and Prepare are its own; a node
// with int8 per-channel weights and an output width not a multiple of 8 is
// evaluated with TFLM's reference FullyConnectedPerChannel on the OpData that
// Prepare computed (the arithmetic the evaluator's reference mode and the
// host targets use, so results stay bit-exact); every other node runs ESP-NN.
//
//   resolver.AddFullyConnected(
//       forge_app::GuardedFullyConnected(tflite::Register_FULLY_CONNECTED()));
#ifndef ESP32S3_APP_CORE_ESP_NN_FC_GUARD_H_
#define ESP32S3_APP_CORE_ESP_NN_FC_GUARD_H_

#include "tensorflow/lite/micro/micro_common.h"

namespace forge_app {

// `inner` is copied (registrations are values in TFLM); the returned one
// forwards to it. Only one inner registration per program (the wrapper's
// callbacks are not templated on it).
TFLMRegistration GuardedFullyConnected(const TFLMRegistration& inner);

// Nodes prepared since the last call that were routed to the reference kernel
// (the app prints it: fc_guard=N in its header line).
int TakeGuardedFullyConnectedCount();

}  // namespace forge_app

#endif  // ESP32S3_APP_CORE_ESP_NN_FC_GUARD_H_
