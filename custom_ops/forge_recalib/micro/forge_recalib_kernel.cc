/* FORGE_RECALIB: BatchNorm re-estimation at a former Conv->BN site (TFLM).
 *
 * Inputs:  0 x         int8 [N, ..., C] channels last (rank 2..4), per-tensor
 *                      quantized (s_x, z_x)
 *          1 beta      float32 [C], constant (clean BN shift)
 *          2 gamma_abs float32 [C], constant (|BN scale|)
 * Output:  0 y         int8, shape of x, per-tensor quantized (s_y, z_y)
 * Options: flexbuffer map {momentum | window, eps, activation, variance,
 *          arithmetic, label_safe}.
 *
 * Per invocation, M = N * (product of the middle dims) elements per channel c:
 *   adapt mode (statistics of the int8 values q, exact integer sums):
 *     S1 = sum q (int32), S2 = sum q*q (int64)
 *     mean_b = s_x * ((float)(S1 - M*z_x) / (float)M)
 *     var_b  = (s_x*s_x) * ((float)(M*S2 - S1*S1) / (float)(M*M))
 *     m = momentum, or min(1, (float)N / (float)window);  om = 1 - m
 *     mu  <- om*mu + m*mean_b
 *     var <- om*var + m*v_used, v_used = var_b ("batch") or
 *                               var_b + (mean_b - mu)^2 ("running", new mu)
 *   both modes (frozen skips the update):
 *     inv_std = 1/sqrtf(var + eps);  gs = gamma_abs * inv_std
 *     A = gs * (s_x/s_y);  B = (beta - mu*gs) * (1/s_y) + z_y
 *     y = clamp((float)(q - z_x)*A + B, qmin, qmax) rounded half up
 *   i.e. y = (x - mu)/sqrt(var + eps) * |gamma| + beta, fused activation
 *   (qmin/qmax as TFLite's CalculateActivationRangeQuantized), requantized.
 *   Every float op is a separately rounded float32 op in SPEC.md's order.
 *
 * State (persistent arena, 8 bytes/channel, one block per op instance):
 *   float32 [mu_0..mu_{C-1}, var_0..var_{C-1}], reset to [beta, gamma_abs^2]
 *   in Prepare, by the TFLM reset hook (MicroInterpreter::Reset) and at the
 *   first Eval after the interpreter's control asked for it. Targets
 *   beta/gamma_abs stay in flash.
 * Controls (per interpreter, no globals): the forge_tflm::ForgeRecalibControl
 *   attached with MicroInterpreter::SetMicroExternalContext, read at every
 *   Eval: mode (adapt / frozen / source / adapt_safe, resolved per op by
 *   forge_recalib_mode_for) and reset_generation (an op resets when it
 *   differs from the generation it last applied, then records it). No
 *   control attached: adapt, reset only by the reset hook. Another payload
 *   in the slot: Eval fails (it would be misread).
 * Op data (persistent, per node): options, quantization constants, state and
 *   target pointers, shape: FORGE_RECALIB_OP_DATA_BYTES_ILP32 (120 B) on 32-bit
 *   targets, checked below. Invalid options are logged by Init, which then
 *   allocates nothing and Prepare fails.
 * Scratch (non-persistent arena): forge_recalib_scratch_bytes(C) = 280 B/ch
 *   (stats accumulators, A/B, per-channel 256-entry LUT); define
 *   FORGE_RECALIB_NO_LUT to request only the 24 B/ch of the affine path.
 *
 * Init parses the options once, Prepare validates tensors and does the
 * quantization math once, Eval calls the framework-free C core
 * FORGE_RECALIB_S8_TARGET (../src/forge_recalib.h: the build's best variant).
 *
 * FORGE_RECALIB_INT_ONLY=1 (builds for cores without an FPU): the kernel runs
 * the integer arithmetic alone. Init refuses arithmetic float, Prepare does
 * only the integer quantization math and Eval calls forge_recalib_s8_int; the
 * float paths are compile-time dead, so the link takes no float operation and
 * no soft-float call from FORGE's objects.
 */
#include "forge_recalib_kernel.h"

#include <stddef.h>
#include <stdint.h>

#include "forge_recalib.h"
#include "forge_recalib_options.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/kernels/kernel_util.h"
#include "tensorflow/lite/micro/kernels/kernel_util.h"
#include "tensorflow/lite/micro/micro_allocator.h"  // sizes checked below
#include "tensorflow/lite/micro/micro_context.h"
#include "tensorflow/lite/micro/micro_log.h"

#ifndef FORGE_RECALIB_INT_ONLY
#define FORGE_RECALIB_INT_ONLY 0
#endif

namespace {

// False in an integer-only build: every float-only branch tests it first, so
// the compiler drops those branches and the calls in them.
constexpr bool kFloatArith = !FORGE_RECALIB_INT_ONLY;

constexpr int kInputX = 0;
constexpr int kInputBeta = 1;
constexpr int kInputGamma = 2;
constexpr int kOutputY = 0;

// Only what Eval and the reset hook need: every node pays for it (an option
// parse error is logged by Init, which then allocates nothing).
struct OpData {
  forge_recalib_options opts;
  forge_recalib_quant quant;
  float* state;             // 2*C floats, persistent
  const float* beta;        // constant tensor data (flatbuffer / flash), for
  const float* gamma_abs;   // the reset hook, which has no node
  int32_t n, hw, c;
  int scratch_index;
  uint32_t seen_generation;  // control->reset_generation last applied
};

// Every reset (Prepare, the reset hook, a control request).
void ResetState(OpData* d, const float* beta, const float* gamma_abs) {
  const char* msg;
  if (!kFloatArith || d->opts.arithmetic == FORGE_RECALIB_ARITH_INT) {  // SPEC "Integer arithmetic"
    forge_recalib_int_state_reset(&d->quant, beta, gamma_abs, d->c,
                                  reinterpret_cast<int32_t*>(d->state), &msg);
    return;
  }
  forge_recalib_state_reset(beta, gamma_abs, d->c, d->state, &msg);
}

// The manifest's memory figures (forge_tflm.artifact) come from these
// constants; a 32-bit build checks them against the real layouts.
#if UINTPTR_MAX == 0xFFFFFFFFu
static_assert(sizeof(OpData) == FORGE_RECALIB_OP_DATA_BYTES_ILP32,
              "update FORGE_RECALIB_OP_DATA_BYTES_ILP32 in forge_recalib.h");
static_assert(sizeof(tflite::NodeAndRegistration) +
                      3 * sizeof(TfLiteEvalTensor) +
                      sizeof(tflite::ScratchBufferHandle) ==
                  FORGE_RECALIB_TFLM_NODE_BYTES_ILP32,
              "update FORGE_RECALIB_TFLM_NODE_BYTES_ILP32 in forge_recalib.h");
#endif

// The interpreter's control, or nullptr when none is attached; *foreign is
// set when the external-context slot holds something else.
const forge_tflm::ForgeRecalibControl* GetControl(TfLiteContext* context,
                                                  bool* foreign) {
  *foreign = false;
  const void* payload = tflite::GetMicroContext(context)->external_context();
  if (payload == nullptr) return nullptr;
  const auto* control =
      static_cast<const forge_tflm::ForgeRecalibControl*>(payload);
  if (control->magic != forge_tflm::kForgeRecalibControlMagic) {
    *foreign = true;
    return nullptr;
  }
  return control;
}

TfLiteStatus Fail(const char* what) {
  MicroPrintf("FORGE_RECALIB: %s", what);
  return kTfLiteError;
}

size_t ScratchBytes(int32_t c) {
#ifdef FORGE_RECALIB_NO_LUT
  return forge_recalib_scratch_bytes_affine(c);
#else
  return forge_recalib_scratch_bytes(c);
#endif
}

// Per-tensor int8 quantization: (scale, zero point) or an error message.
const char* PerTensorParams(const TfLiteTensor* t, float* scale, int32_t* zero) {
  if (t->quantization.type != kTfLiteAffineQuantization) {
    return "x and y must be int8 with affine quantization";
  }
  const auto* affine =
      static_cast<const TfLiteAffineQuantization*>(t->quantization.params);
  if (affine != nullptr) {
    if (affine->scale == nullptr || affine->scale->size != 1 ||
        (affine->zero_point != nullptr && affine->zero_point->size != 1)) {
      return "per-channel quantized x/y is not supported (per-tensor only)";
    }
  }
  *scale = t->params.scale;
  *zero = t->params.zero_point;
  return nullptr;
}

void* Init(TfLiteContext* context, const char* buffer, size_t length) {
  forge_recalib_options opts;
  const char* msg = "";
  if (forge_recalib::ParseOptions(reinterpret_cast<const uint8_t*>(buffer),
                                  length, &opts, &msg) != FORGE_RECALIB_OK) {
    Fail(msg);
    return nullptr;
  }
  if (!kFloatArith && opts.arithmetic != FORGE_RECALIB_ARITH_INT) {
    Fail("this build runs arithmetic int only (FORGE_RECALIB_INT_ONLY)");
    return nullptr;
  }
  void* raw = context->AllocatePersistentBuffer(context, sizeof(OpData));
  if (raw == nullptr) return nullptr;
  OpData* data = static_cast<OpData*>(raw);
  *data = OpData{};
  data->opts = opts;
  return data;
}

TfLiteStatus PrepareTensors(TfLiteContext* context, TfLiteNode* node,
                            OpData* data, const TfLiteTensor* x,
                            const TfLiteTensor* beta, const TfLiteTensor* gamma,
                            const TfLiteTensor* y) {
  if (x->type != kTfLiteInt8) return Fail("x must be int8");
  if (y->type != kTfLiteInt8) return Fail("y must be int8");
  if (beta->type != kTfLiteFloat32 || gamma->type != kTfLiteFloat32) {
    return Fail("beta and gamma_abs must be float32");
  }
  const int rank = tflite::NumDimensions(x);
  if (rank < 2 || rank > 4) return Fail("x must have rank 2..4 (channels last)");
  if (!tflite::HaveSameShapes(x, y)) return Fail("y must have the shape of x");
  int64_t m = 1;
  for (int i = 0; i < rank - 1; ++i) {
    const int d = x->dims->data[i];
    if (d < 1 || d > FORGE_RECALIB_MAX_M) {
      return Fail("N*H*W per channel must be in [1, 2^22]");
    }
    m *= d;
    if (m > FORGE_RECALIB_MAX_M) return Fail("N*H*W per channel must be in [1, 2^22]");
  }
  const int c = x->dims->data[rank - 1];
  if (c < 1 || c > FORGE_RECALIB_MAX_C) return Fail("channel count must be in [1, 65536]");
  if (tflite::NumDimensions(beta) != 1 || beta->dims->data[0] != c ||
      tflite::NumDimensions(gamma) != 1 || gamma->dims->data[0] != c) {
    return Fail("beta and gamma_abs must have shape [C] with C = x's last dim");
  }
  if (!tflite::IsConstantTensor(beta) || !tflite::IsConstantTensor(gamma)) {
    return Fail("beta and gamma_abs must be constant tensors");
  }
  float s_x, s_y;
  int32_t z_x, z_y;
  const char* why = PerTensorParams(x, &s_x, &z_x);
  if (why == nullptr) why = PerTensorParams(y, &s_y, &z_y);
  if (why != nullptr) return Fail(why);

  const char* msg = "";
  const int quant_status =
      kFloatArith ? forge_recalib_prepare_quant(&data->opts, s_x, z_x, s_y, z_y,
                                                &data->quant, &msg)
                  : forge_recalib_prepare_quant_int(&data->opts, s_x, z_x, s_y, z_y,
                                                    &data->quant, &msg);
  if (quant_status != FORGE_RECALIB_OK) return Fail(msg);
  data->beta = tflite::GetTensorData<float>(beta);
  data->gamma_abs = tflite::GetTensorData<float>(gamma);
  if (forge_recalib_check_targets(data->beta, data->gamma_abs, c, &msg) !=
      FORGE_RECALIB_OK) {
    return Fail(msg);
  }
  data->n = x->dims->data[0];
  data->hw = static_cast<int32_t>(m / data->n);
  if (data->state == nullptr || data->c != c) {
    data->state = static_cast<float*>(context->AllocatePersistentBuffer(
        context, forge_recalib_state_bytes(c)));
    if (data->state == nullptr) return Fail("cannot allocate state");
  }
  data->c = c;
  ResetState(data, data->beta, data->gamma_abs);
  // Requests made before Prepare are satisfied by this reset. A foreign
  // payload is reported by Eval (it may be attached after Prepare anyway).
  bool foreign;
  const forge_tflm::ForgeRecalibControl* control = GetControl(context, &foreign);
  data->seen_generation = control != nullptr ? control->reset_generation : 0;
  if (context->RequestScratchBufferInArena(context, ScratchBytes(c),
                                           &data->scratch_index) != kTfLiteOk) {
    return Fail("cannot request scratch buffer");
  }
  (void)node;
  return kTfLiteOk;
}

TfLiteStatus Prepare(TfLiteContext* context, TfLiteNode* node) {
  OpData* data = static_cast<OpData*>(node->user_data);
  if (data == nullptr) {
    return Fail("no op data: invalid options (logged by Init) or arena full");
  }
  if (tflite::NumInputs(node) != 3) return Fail("expects 3 inputs (x, beta, gamma_abs)");
  if (tflite::NumOutputs(node) != 1) return Fail("expects 1 output");

  tflite::MicroContext* micro_context = tflite::GetMicroContext(context);
  TfLiteTensor* x = micro_context->AllocateTempInputTensor(node, kInputX);
  TfLiteTensor* beta = micro_context->AllocateTempInputTensor(node, kInputBeta);
  TfLiteTensor* gamma = micro_context->AllocateTempInputTensor(node, kInputGamma);
  TfLiteTensor* y = micro_context->AllocateTempOutputTensor(node, kOutputY);
  TfLiteStatus status = kTfLiteError;
  if (x == nullptr || beta == nullptr || gamma == nullptr || y == nullptr) {
    status = Fail("missing input or output tensor");
  } else {
    status = PrepareTensors(context, node, data, x, beta, gamma, y);
  }
  if (x != nullptr) micro_context->DeallocateTempTfLiteTensor(x);
  if (beta != nullptr) micro_context->DeallocateTempTfLiteTensor(beta);
  if (gamma != nullptr) micro_context->DeallocateTempTfLiteTensor(gamma);
  if (y != nullptr) micro_context->DeallocateTempTfLiteTensor(y);
  return status;
}

TfLiteStatus Eval(TfLiteContext* context, TfLiteNode* node) {
  OpData* data = static_cast<OpData*>(node->user_data);
  if (data == nullptr || data->state == nullptr) return Fail("not prepared");
  const TfLiteEvalTensor* x = tflite::micro::GetEvalInput(context, node, kInputX);
  const TfLiteEvalTensor* beta_t =
      tflite::micro::GetEvalInput(context, node, kInputBeta);
  const TfLiteEvalTensor* gamma_t =
      tflite::micro::GetEvalInput(context, node, kInputGamma);
  TfLiteEvalTensor* y = tflite::micro::GetEvalOutput(context, node, kOutputY);
  // Eval reads the targets through the eval tensors (the pointers kept from
  // Prepare serve only the reset hook, which has no node).
  const float* beta = tflite::micro::GetTensorData<float>(beta_t);
  const float* gamma_abs = tflite::micro::GetTensorData<float>(gamma_t);
  const char* msg = "";
  bool foreign;
  const forge_tflm::ForgeRecalibControl* control = GetControl(context, &foreign);
  if (foreign) {
    return Fail("the interpreter's external context is not a "
                "forge_tflm::ForgeRecalibControl");
  }
  int32_t mode = FORGE_RECALIB_MODE_ADAPT;
  if (control != nullptr) {
    mode = forge_recalib_mode_for(&data->opts, control->mode);
    if (data->seen_generation != control->reset_generation) {
      ResetState(data, beta, gamma_abs);
      data->seen_generation = control->reset_generation;
    }
  }
  void* scratch = context->GetScratchBuffer(context, data->scratch_index);
  const forge_recalib_args args = {
      tflite::micro::GetTensorData<int8_t>(x), tflite::micro::GetTensorData<int8_t>(y),
      data->n, data->hw, data->c, beta, gamma_abs, data->state, &data->opts,
      &data->quant, mode, FORGE_RECALIB_PATH_AUTO, scratch, ScratchBytes(data->c)};
  // The integer arithmetic alone (FORGE_RECALIB_INT_ONLY), else the best
  // variant this build compiles (forge_recalib.h: the Cortex-M DSP or Helium
  // one when the build defines FORGE_RECALIB_CORTEXM, the S3's with
  // FORGE_RECALIB_ESP32S3, else ansi).
  const int status = kFloatArith ? FORGE_RECALIB_S8_TARGET(&args, &msg)
                                 : forge_recalib_s8_int(&args, &msg);
  if (status != FORGE_RECALIB_OK) return Fail(msg);
  return kTfLiteOk;
}

void Reset(TfLiteContext* context, void* buffer) {
  OpData* data = static_cast<OpData*>(buffer);
  if (data == nullptr || data->state == nullptr) return;  // Not prepared.
  ResetState(data, data->beta, data->gamma_abs);
  // A pending request is satisfied by this reset too.
  bool foreign;
  const forge_tflm::ForgeRecalibControl* control = GetControl(context, &foreign);
  if (control != nullptr) data->seen_generation = control->reset_generation;
}

}  // namespace

namespace forge_tflm {

const TFLMRegistration* Register_FORGE_RECALIB() {
  static const TFLMRegistration registration =
      tflite::micro::RegisterOp(Init, Prepare, Eval, /*free=*/nullptr, Reset);
  return &registration;
}

}  // namespace forge_tflm
