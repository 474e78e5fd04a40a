// See esp_nn_fc_guard.h.
#include "esp_nn_fc_guard.h"

#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/kernels/internal/reference/integer_ops/fully_connected.h"
#include "tensorflow/lite/micro/kernels/fully_connected.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"

namespace forge_app {
namespace {

// ESP-NN's S3 kernel processes output channels 8 at a time.
constexpr int kEspNnFcOutputMultiple = 8;

struct GuardData {
  void* inner;         // the ESP-NN kernel's own OpDataFullyConnected
  bool use_reference;  // per-channel int8 with a width ESP-NN cannot take
};

// The wrapped registration; set once by GuardedFullyConnected (registrations
// are built at startup, before any interpreter runs).
TFLMRegistration g_inner = {};
int g_guarded = 0;

// Calls the inner kernel with its own user_data in the node.
template <typename Fn>
TfLiteStatus WithInner(TfLiteNode* node, Fn fn) {
  GuardData* guard = static_cast<GuardData*>(node->user_data);
  node->user_data = guard->inner;
  const TfLiteStatus status = fn();
  node->user_data = guard;
  return status;
}

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  void* raw = context->AllocatePersistentBuffer(context, sizeof(GuardData));
  if (raw == nullptr) return nullptr;
  GuardData* guard = static_cast<GuardData*>(raw);
  guard->inner = g_inner.init != nullptr ? g_inner.init(context, buffer, length) : nullptr;
  guard->use_reference = false;
  return guard;
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  TF_LITE_ENSURE(context, node->user_data != nullptr);
  TF_LITE_ENSURE_OK(context, WithInner(node, [&]() { return g_inner.prepare(context, node); }));
  GuardData* guard = static_cast<GuardData*>(node->user_data);
  const auto* data = static_cast<const tflite::OpDataFullyConnected*>(guard->inner);
  tflite::MicroContext* micro_context = tflite::GetMicroContext(context);
  TfLiteTensor* input = micro_context->AllocateTempInputTensor(node, 0);
  TfLiteTensor* filter = micro_context->AllocateTempInputTensor(node, 1);
  TfLiteTensor* output = micro_context->AllocateTempOutputTensor(node, 0);
  TF_LITE_ENSURE(context, input != nullptr && filter != nullptr && output != nullptr);
  const int depth = output->dims->data[output->dims->size - 1];
  guard->use_reference = data->is_per_channel && input->type == kTfLiteInt8 &&
                         filter->type == kTfLiteInt8 &&
                         depth % kEspNnFcOutputMultiple != 0;
  if (guard->use_reference) ++g_guarded;
  micro_context->DeallocateTempTfLiteTensor(input);
  micro_context->DeallocateTempTfLiteTensor(filter);
  micro_context->DeallocateTempTfLiteTensor(output);
  return kTfLiteOk;
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  const GuardData* guard = static_cast<const GuardData*>(node->user_data);
  if (!guard->use_reference) {
    return WithInner(node, [&]() { return g_inner.invoke(context, node); });
  }
  const auto& data = *static_cast<const tflite::OpDataFullyConnected*>(guard->inner);
  const TfLiteEvalTensor* input = tflite::micro::GetEvalInput(context, node, 0);
  const TfLiteEvalTensor* filter = tflite::micro::GetEvalInput(context, node, 1);
  const TfLiteEvalTensor* bias =
      node->inputs->size > 2 ? tflite::micro::GetEvalInput(context, node, 2) : nullptr;
  TfLiteEvalTensor* output = tflite::micro::GetEvalOutput(context, node, 0);
  // Exactly the #else branch of esp-tflite-micro's kernels/esp_nn/fully_connected.cc.
  tflite::reference_integer_ops::FullyConnectedPerChannel(
      tflite::FullyConnectedParamsQuantized(data), data.per_channel_output_multiplier,
      reinterpret_cast<const int*>(data.per_channel_output_shift),
      tflite::micro::GetTensorShape(input), tflite::micro::GetTensorData<int8_t>(input),
      tflite::micro::GetTensorShape(filter), tflite::micro::GetTensorData<int8_t>(filter),
      tflite::micro::GetTensorShape(bias), tflite::micro::GetOptionalTensorData<int32_t>(bias),
      tflite::micro::GetTensorShape(output), tflite::micro::GetTensorData<int8_t>(output));
  return kTfLiteOk;
}

void Reset(TfLiteContext* context, void* buffer) {
  GuardData* guard = static_cast<GuardData*>(buffer);
  if (guard != nullptr && g_inner.reset != nullptr) g_inner.reset(context, guard->inner);
}

}  // namespace

TFLMRegistration GuardedFullyConnected(const TFLMRegistration& inner) {
  g_inner = inner;
  TFLMRegistration r = inner;
  r.init = Init;
  r.prepare = Prepare;
  r.invoke = Eval;
  r.reset = inner.reset != nullptr ? Reset : nullptr;
  r.free = nullptr;  // TFLM never frees persistent op data
  return r;
}

int TakeGuardedFullyConnectedCount() {
  const int n = g_guarded;
  g_guarded = 0;
  return n;
}

}  // namespace forge_app
