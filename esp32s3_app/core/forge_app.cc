// FORGE application core: see forge_app.h for the interface and output format.
//
// How it measures without touching the kernels: every registration handed to
// the resolver is a copy of the kernel's own with `invoke` (and for
// FORGE_RECALIB also `init`/`prepare`) replaced by a thin wrapper that
//   - calls the target's markers around each FORGE op,
//   - checksums the op's output tensor after Eval (trace modes),
//   - counts FORGE's persistent and scratch arena requests by forwarding
//     TfLiteContext::AllocatePersistentBuffer / RequestScratchBufferInArena
//     through counting shims while FORGE's Init/Prepare run.
// Per-operator time comes from a MicroProfilerInterface that TFLM calls around
// every op's Eval, reading the platform clock.
//
// The core runs one stream at a time (file-scope state, no threads).
//
// One file of ~850 lines, past the ~600 the rest of the tree keeps: the kernel
// wrappers, the profiler and the run loop all read and write the one RunState
// below, which stays private to this unit; split, it would become a global
// shared across files (its functions stay under ~60 lines each).
#include "forge_app.h"
#include "forge_app_cmdline.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forge_recalib.h"
#include "forge_recalib_kernel.h"
#include "tensorflow/compiler/mlir/lite/schema/schema_utils.h"
#include "tensorflow/lite/c/common.h"
#include "tensorflow/lite/micro/memory_helpers.h"
#include "tensorflow/lite/micro/micro_interpreter.h"
#include "tensorflow/lite/micro/micro_mutable_op_resolver.h"
#include "tensorflow/lite/micro/micro_profiler_interface.h"
#include "tensorflow/lite/schema/schema_generated.h"

#if ESP_NN  // ESP-NN builds (the S3 targets): the depthwise scratch guard below.
#if defined(__has_include)
#if __has_include("sdkconfig.h")
#include "sdkconfig.h"  // ESP-IDF: CONFIG_NN_OPTIMIZED, CONFIG_IDF_TARGET_* for esp_nn.h
#endif
#endif
#include <esp_nn.h>

#include "tensorflow/lite/c/builtin_op_data.h"
#include "tensorflow/lite/kernels/padding.h"

// ESP-NN's S3 depthwise kernel (esp_nn_depthwise_conv_s8_esp32s3, d45b843) writes
// more scratch than its size function asks for (docs/decisions/
// esp-nn-s3-depthwise-scratch.md), on 3x3, ch_mult 1, channels % 16 == 0 shapes:
//  - padding (0, 0) with a right/bottom edge to pad (SAME, stride 2, even input):
//    the kernel pads the whole input, the size function assumes row tiles once
//    the padded input exceeds 40 KB (MobileNetV2-0.5's op 8: asks 5,344 B, writes
//    55,936 B);
//  - padding other than (0, 0) and (1, 1) (one axis padded): the kernel's
//    channel-padding path (padded input + padded output), sized by the size
//    function as the (1, 1) path.
// Returns what the kernel writes there, ESP-NN's own size everywhere else; the app's
// depthwise Prepare requests it and esp32s3/dw_scratch_check.c checks it.
extern "C" int forge_esp_nn_dw_scratch_bytes(const data_dims_t* in, const data_dims_t* filter,
                                             const data_dims_t* out,
                                             const dw_conv_params_t* p) {
  const int asked = esp_nn_get_depthwise_conv_scratch_size(in, filter, out, p);
#if defined(CONFIG_NN_OPTIMIZED) && defined(CONFIG_IDF_TARGET_ESP32S3)
  const int ch = in->channels, pw = p->padding.width, ph = p->padding.height;
  if (p->ch_mult != 1 || ch % 16 != 0 || filter->width != 3 || filter->height != 3 ||
      (pw == 1 && ph == 1)) {
    return asked;
  }
  const int w = in->width + 2 * pw, h = in->height + 2 * ph;  // 16 | 9*ch: filter, 16 B gap
  const int pad_right = out->width * p->stride.width + 2 - w;
  const int pad_bottom = out->height * p->stride.height + 2 - h;
  int written;
  if (pw == 0 && ph == 0) {
    if (pad_right <= 0 && pad_bottom <= 0) return asked;  // the input is used in place
    written = 9 * ch + 16 + (w + pad_right) * (h + pad_bottom) * ch;
  } else {
    written = 9 * ch + 16 + (w + (pad_right > 0 ? pad_right : 0)) *
                                (h + (pad_bottom > 0 ? pad_bottom : 0)) * ch +
              out->width * out->height * ch;
  }
  return written > asked ? written : asked;
#else
  return asked;
#endif
}
#endif  // ESP_NN

namespace {

constexpr int kMaxOps = 256;      // operators per model the tables can hold
constexpr size_t kLineBytes = 4096;
constexpr char kForgeName[] = "FORGE_RECALIB";

// ---------------------------------------------------------------- run state

struct OpCost {
  uint64_t ticks;
  uint32_t calls;
};

struct RunState {
  const ForgeAppPlatform* platform = nullptr;
  int trace = FORGE_APP_TRACE_NONE;
  bool in_invoke = false;
  uint32_t op_counter = 0;   // index of the op being evaluated (wrappers)
  bool record = true;        // this pass's outputs are the image's (checksums, dumps)
  size_t image = 0;          // index of the image being evaluated
  long dump_op = -1;         // ForgeAppConfig.dump_op / dump_image
  size_t dump_image = 0;
  uint32_t event_counter = 0;  // index of the op being profiled
  uint32_t num_ops = 0;
  bool is_forge[kMaxOps] = {};
  uint32_t checksum[kMaxOps] = {};
  OpCost cost[kMaxOps] = {};
  uint64_t event_start[kMaxOps] = {};
  size_t forge_persistent = 0;
  size_t forge_scratch = 0;
  // FORGE state buffers, found in Prepare (see FindState): op data -> state.
  uint32_t num_states = 0;
  const void* state_owner[kMaxOps] = {};
  const void* state_data[kMaxOps] = {};
  size_t state_bytes[kMaxOps] = {};  // the buffer (forge_state)
  uint32_t state_checksum[kMaxOps] = {};
  // Persistent allocations of the FORGE Prepare in progress.
  uint32_t num_recent = 0;
  void* recent_ptr[4] = {};
  size_t recent_bytes[4] = {};
  char line[kLineBytes];
};

RunState g_run;

uint64_t Now() {
  const ForgeAppPlatform* p = g_run.platform;
  return (p != nullptr && p->clock != nullptr) ? p->clock(p->user) : 0;
}

void Marker(int what, int begin, uint32_t index) {
  const ForgeAppPlatform* p = g_run.platform;
  if (p != nullptr && p->marker != nullptr) p->marker(p->user, what, begin, index);
}

// uint64 -> decimal without printf's %llu (newlib-nano's printf lacks it).
struct U64 {
  explicit U64(uint64_t v) { ForgeAppDecimal(v, s); }
  char s[24];
};

// Appends to g_run.line (always NUL-terminated, truncated when full).
class Line {
 public:
  Line() : len_(0) { g_run.line[0] = '\0'; }
  void Add(const char* fmt, ...) {
    if (len_ >= kLineBytes - 2) return;
    va_list args;
    va_start(args, fmt);
    const int n = vsnprintf(g_run.line + len_, kLineBytes - 1 - len_, fmt, args);
    va_end(args);
    if (n > 0) len_ += static_cast<size_t>(n);
    if (len_ > kLineBytes - 2) len_ = kLineBytes - 2;
  }
  void Emit() {
    g_run.line[len_] = '\n';
    g_run.line[len_ + 1] = '\0';
    const ForgeAppPlatform* p = g_run.platform;
    if (p != nullptr && p->write != nullptr) p->write(p->user, g_run.line);
  }

 private:
  size_t len_;
};

// Profiler: TFLM brackets every op's Eval with BeginEvent/EndEvent (and some
// Init/Prepare work, which is ignored: only events inside Invoke count).
class OpProfiler : public tflite::MicroProfilerInterface {
 public:
  uint32_t BeginEvent(const char* tag) override {
    (void)tag;
    if (!g_run.in_invoke || g_run.event_counter >= kMaxOps) return kMaxOps;
    const uint32_t i = g_run.event_counter++;
    g_run.event_start[i] = Now();
    return i;
  }
  void EndEvent(uint32_t handle) override {
    if (handle >= kMaxOps) return;
    const uint64_t t = Now();
    g_run.cost[handle].ticks += t - g_run.event_start[handle];
    g_run.cost[handle].calls++;
  }
};

// ---------------------------------------------------------- kernel wrappers

struct Wrapped {
  TFLMRegistration original;
  TFLMRegistration wrapped;
};

// Slot 0: FORGE_RECALIB; 1..: builtins (one per resolver entry).
constexpr int kMaxSlots = 16;
Wrapped g_slots[kMaxSlots];

void* (*g_orig_persistent)(TfLiteContext*, size_t) = nullptr;
TfLiteStatus (*g_orig_scratch)(TfLiteContext*, size_t, int*) = nullptr;

void* CountingPersistent(TfLiteContext* ctx, size_t bytes) {
  g_run.forge_persistent += bytes;
  void* p = g_orig_persistent(ctx, bytes);
  if (g_run.num_recent < 4) {
    g_run.recent_ptr[g_run.num_recent] = p;
    g_run.recent_bytes[g_run.num_recent++] = bytes;
  }
  return p;
}

TfLiteStatus CountingScratch(TfLiteContext* ctx, size_t bytes, int* index) {
  g_run.forge_scratch += bytes;
  return g_orig_scratch(ctx, bytes, index);
}

// Routes FORGE's arena requests through the counters while `fn` runs.
template <typename Fn>
auto Counted(TfLiteContext* ctx, Fn fn) -> decltype(fn()) {
  g_orig_persistent = ctx->AllocatePersistentBuffer;
  g_orig_scratch = ctx->RequestScratchBufferInArena;
  if (g_orig_persistent != nullptr) ctx->AllocatePersistentBuffer = CountingPersistent;
  if (g_orig_scratch != nullptr) ctx->RequestScratchBufferInArena = CountingScratch;
  auto result = fn();
  ctx->AllocatePersistentBuffer = g_orig_persistent;
  ctx->RequestScratchBufferInArena = g_orig_scratch;
  return result;
}

void ChecksumOutput(TfLiteContext* ctx, TfLiteNode* node, uint32_t op) {
  if (node->outputs == nullptr || node->outputs->size < 1) return;
  const TfLiteEvalTensor* t = ctx->GetEvalTensor(ctx, node->outputs->data[0]);
  size_t bytes = 0;
  if (t == nullptr || tflite::TfLiteEvalTensorByteLength(t, &bytes) != kTfLiteOk) return;
  g_run.checksum[op] = ForgeAppChecksum(t->data.raw, bytes);
}

void ChecksumState(TfLiteNode* node, uint32_t op);  // below
void DumpOutput(TfLiteContext* ctx, TfLiteNode* node, uint32_t op);

template <int kSlot>
TfLiteStatus WrappedInvoke(TfLiteContext* ctx, TfLiteNode* node) {
  const uint32_t op = g_run.op_counter++;
  const bool forge = (kSlot == 0);
  if (forge) Marker(FORGE_APP_MARKER_FORGE_OP, 1, op);
  const TfLiteStatus status = g_slots[kSlot].original.invoke(ctx, node);
  if (forge) Marker(FORGE_APP_MARKER_FORGE_OP, 0, op);
  if (op < kMaxOps && g_run.record && (g_run.trace == FORGE_APP_TRACE_ALL ||
                                       (g_run.trace == FORGE_APP_TRACE_FORGE && forge))) {
    ChecksumOutput(ctx, node, op);
    if (forge) ChecksumState(node, op);
  }
  if (g_run.record && g_run.dump_op == static_cast<long>(op) &&
      g_run.dump_image == g_run.image) {
    DumpOutput(ctx, node, op);
  }
  return status;
}

void* ForgeInit(TfLiteContext* ctx, const char* buffer, size_t length) {
  return Counted(ctx, [&]() { return g_slots[0].original.init(ctx, buffer, length); });
}

// The op's state (SPEC: float32 [mu_0..mu_{C-1}, var_0..var_{C-1}], 8*C bytes of
// persistent arena) is the one persistent buffer of exactly that size that its
// Prepare allocates. Found that way (the kernel does not export it), the state
// checksum is best effort: omitted when the match is not unique.
void FindState(TfLiteContext* ctx, TfLiteNode* node) {
  if (node->inputs == nullptr || node->inputs->size < 1) return;
  const TfLiteEvalTensor* x = ctx->GetEvalTensor(ctx, node->inputs->data[0]);
  if (x == nullptr || x->dims == nullptr || x->dims->size < 1) return;
  const int32_t c = x->dims->data[x->dims->size - 1];
  const size_t want = forge_recalib_state_bytes(c);
  void* found = nullptr;
  int matches = 0;
  for (uint32_t i = 0; i < g_run.num_recent; ++i) {
    if (g_run.recent_bytes[i] == want) {
      found = g_run.recent_ptr[i];
      ++matches;
    }
  }
  if (matches != 1 || g_run.num_states >= static_cast<uint32_t>(kMaxOps)) return;
  g_run.state_owner[g_run.num_states] = node->user_data;
  g_run.state_data[g_run.num_states] = found;
  g_run.state_bytes[g_run.num_states++] = want;
}

TfLiteStatus ForgePrepare(TfLiteContext* ctx, TfLiteNode* node) {
  g_run.num_recent = 0;
  const TfLiteStatus s =
      Counted(ctx, [&]() { return g_slots[0].original.prepare(ctx, node); });
  if (s == kTfLiteOk) FindState(ctx, node);
  return s;
}

// "tensor image=n op=k offset=o bytes=B values=..." lines, 512 int8 values each.
void DumpOutput(TfLiteContext* ctx, TfLiteNode* node, uint32_t op) {
  if (node->outputs == nullptr || node->outputs->size < 1) return;
  const TfLiteEvalTensor* t = ctx->GetEvalTensor(ctx, node->outputs->data[0]);
  size_t bytes = 0;
  if (t == nullptr || tflite::TfLiteEvalTensorByteLength(t, &bytes) != kTfLiteOk) return;
  const int8_t* v = static_cast<const int8_t*>(t->data.data);
  for (size_t start = 0; start < bytes; start += 512) {
    Line line;
    line.Add("tensor image=%lu op=%lu offset=%lu bytes=%lu values=",
             static_cast<unsigned long>(g_run.image), static_cast<unsigned long>(op),
             static_cast<unsigned long>(start), static_cast<unsigned long>(bytes));
    for (size_t i = start; i < bytes && i < start + 512; ++i) {
      line.Add(i > start ? ",%d" : "%d", v[i]);
    }
    line.Emit();
  }
}

void ChecksumState(TfLiteNode* node, uint32_t op) {
  for (uint32_t i = 0; i < g_run.num_states; ++i) {
    if (g_run.state_owner[i] == node->user_data) {
      g_run.state_checksum[op] =
          ForgeAppChecksum(g_run.state_data[i], g_run.state_bytes[i]);
      return;
    }
  }
}

#ifdef FORGE_APP_OP_DEPTHWISE_CONV_2D
constexpr int kDepthwiseSlot = 2;
#if ESP_NN
// DEPTHWISE_CONV_2D's Prepare: esp-tflite-micro's, with its scratch request
// (esp_nn_get_depthwise_conv_scratch_size's bytes) raised to what ESP-NN's S3 kernel
// writes (forge_esp_nn_dw_scratch_bytes); Eval hands the kernel that buffer.
int g_dw_asked = 0, g_dw_needed = 0;

TfLiteStatus DepthwiseScratch(TfLiteContext* ctx, size_t bytes, int* index) {
  if (bytes == static_cast<size_t>(g_dw_asked)) bytes = static_cast<size_t>(g_dw_needed);
  return g_orig_scratch(ctx, bytes, index);
}

TfLiteStatus DepthwisePrepare(TfLiteContext* ctx, TfLiteNode* node) {
  const TfLiteEvalTensor* in = ctx->GetEvalTensor(ctx, node->inputs->data[0]);
  const TfLiteEvalTensor* f = ctx->GetEvalTensor(ctx, node->inputs->data[1]);
  const TfLiteEvalTensor* out = ctx->GetEvalTensor(ctx, node->outputs->data[0]);
  const auto* params = static_cast<const TfLiteDepthwiseConvParams*>(node->builtin_data);
  g_dw_asked = g_dw_needed = 0;
  if (in != nullptr && f != nullptr && out != nullptr && params != nullptr &&
      in->type == kTfLiteInt8 && in->dims->size == 4 && f->dims->size == 4 &&
      out->dims->size == 4) {
    int out_h = 0, out_w = 0;  // the padding TFLM passes the kernel (depthwise_conv_common)
    const TfLitePaddingValues pad = tflite::ComputePaddingHeightWidth(
        params->stride_height, params->stride_width, params->dilation_height_factor,
        params->dilation_width_factor, in->dims->data[1], in->dims->data[2], f->dims->data[1],
        f->dims->data[2], params->padding, &out_h, &out_w);
    const data_dims_t in_dims = {in->dims->data[2], in->dims->data[1], in->dims->data[3], 1};
    const data_dims_t f_dims = {f->dims->data[2], f->dims->data[1], f->dims->data[3], 0};
    const data_dims_t out_dims = {out->dims->data[2], out->dims->data[1], out->dims->data[3], 1};
    dw_conv_params_t conv = {};
    conv.ch_mult = params->depth_multiplier;
    conv.stride = {params->stride_width, params->stride_height};
    conv.padding = {pad.width, pad.height};
    conv.activation = {-128, 127};
    g_dw_asked = esp_nn_get_depthwise_conv_scratch_size(&in_dims, &f_dims, &out_dims, &conv);
    g_dw_needed = forge_esp_nn_dw_scratch_bytes(&in_dims, &f_dims, &out_dims, &conv);
  }
  g_orig_scratch = ctx->RequestScratchBufferInArena;
  if (g_dw_needed > g_dw_asked) ctx->RequestScratchBufferInArena = DepthwiseScratch;
  const TfLiteStatus s = g_slots[kDepthwiseSlot].original.prepare(ctx, node);
  ctx->RequestScratchBufferInArena = g_orig_scratch;
  return s;
}
#endif  // ESP_NN
#endif  // FORGE_APP_OP_DEPTHWISE_CONV_2D

template <int kSlot>
const TFLMRegistration& Wrap(const TFLMRegistration& original) {
  static_assert(kSlot < kMaxSlots, "raise kMaxSlots");
  Wrapped& w = g_slots[kSlot];
  w.original = original;
  w.wrapped = original;
  w.wrapped.invoke = WrappedInvoke<kSlot>;
  if (kSlot == 0) {
    if (original.init != nullptr) w.wrapped.init = ForgeInit;
    if (original.prepare != nullptr) w.wrapped.prepare = ForgePrepare;
  }
#if ESP_NN && defined(FORGE_APP_OP_DEPTHWISE_CONV_2D)
  if (kSlot == kDepthwiseSlot && original.prepare != nullptr) {
    w.wrapped.prepare = DepthwisePrepare;  // ESP-NN's S3 depthwise scratch (above)
  }
#endif
  return w.wrapped;
}

// --------------------------------------------------------------- resolver

constexpr int kNumBuiltins = 0
#ifdef FORGE_APP_OP_CONV_2D
    + 1
#endif
#ifdef FORGE_APP_OP_DEPTHWISE_CONV_2D
    + 1
#endif
#ifdef FORGE_APP_OP_ADD
    + 1
#endif
#ifdef FORGE_APP_OP_MEAN
    + 1
#endif
#ifdef FORGE_APP_OP_AVERAGE_POOL_2D
    + 1
#endif
#ifdef FORGE_APP_OP_FULLY_CONNECTED
    + 1
#endif
#ifdef FORGE_APP_OP_RESHAPE
    + 1
#endif
#ifdef FORGE_APP_OP_SOFTMAX
    + 1
#endif
    ;

using Resolver = tflite::MicroMutableOpResolver<kNumBuiltins + 1>;

// Sets FORGE's mode for one interpreter through the kernel's external context.
class ModeScope {
 public:
  ModeScope(tflite::MicroInterpreter* interpreter, bool adapt) {
    control_.SetMode(adapt ? FORGE_RECALIB_MODE_ADAPT : FORGE_RECALIB_MODE_FROZEN);
    ok_ = interpreter->SetMicroExternalContext(&control_) == kTfLiteOk;
  }
  bool ok() const { return ok_; }
  bool Set(int32_t mode) { return control_.SetMode(mode); }  // the gate, per invoke

 private:
  forge_tflm::ForgeRecalibControl control_{};
  bool ok_ = false;
};

const TFLMRegistration* ForgeRegistration() { return forge_tflm::Register_FORGE_RECALIB(); }

TfLiteStatus FillResolver(Resolver* r) {
  TfLiteStatus s = r->AddCustom(kForgeName, &Wrap<0>(*ForgeRegistration()));
#ifdef FORGE_APP_OP_CONV_2D
  if (s == kTfLiteOk) s = r->AddConv2D(Wrap<1>(tflite::Register_CONV_2D()));
#endif
#ifdef FORGE_APP_OP_DEPTHWISE_CONV_2D
  if (s == kTfLiteOk) {
    s = r->AddDepthwiseConv2D(Wrap<kDepthwiseSlot>(tflite::Register_DEPTHWISE_CONV_2D()));
  }
#endif
#ifdef FORGE_APP_OP_ADD
  if (s == kTfLiteOk) s = r->AddAdd(Wrap<3>(tflite::Register_ADD()));
#endif
#ifdef FORGE_APP_OP_MEAN
  if (s == kTfLiteOk) s = r->AddMean(Wrap<4>(tflite::Register_MEAN()));
#endif
#ifdef FORGE_APP_OP_AVERAGE_POOL_2D
  if (s == kTfLiteOk) s = r->AddAveragePool2D(Wrap<5>(tflite::Register_AVERAGE_POOL_2D()));
#endif
#ifdef FORGE_APP_OP_FULLY_CONNECTED
  // ESP-NN builds too: its S3 FC is exact at every width for TFLM's 16-byte aligned
  // tensors (docs/decisions/esp-nn-fc-guard.md).
  if (s == kTfLiteOk) s = r->AddFullyConnected(Wrap<6>(tflite::Register_FULLY_CONNECTED()));
#endif
#ifdef FORGE_APP_OP_RESHAPE
  if (s == kTfLiteOk) s = r->AddReshape(Wrap<7>(tflite::Register_RESHAPE()));
#endif
#ifdef FORGE_APP_OP_SOFTMAX
  if (s == kTfLiteOk) s = r->AddSoftmax(Wrap<8>(tflite::Register_SOFTMAX()));
#endif
  return s;
}

// ---------------------------------------------------------------- helpers

const char* OpName(const tflite::Model* model, const tflite::Operator* op) {
  const auto* codes = model->operator_codes();
  if (codes == nullptr || op->opcode_index() >= codes->size()) return "?";
  const tflite::OperatorCode* code = codes->Get(op->opcode_index());
  const tflite::BuiltinOperator builtin = tflite::GetBuiltinCode(code);
  if (builtin == tflite::BuiltinOperator_CUSTOM) {
    return code->custom_code() != nullptr ? code->custom_code()->c_str() : "CUSTOM";
  }
  return tflite::EnumNameBuiltinOperator(builtin);
}

void AddShape(Line* line, const TfLiteTensor* t) {
  for (int i = 0; t->dims != nullptr && i < t->dims->size; ++i) {
    line->Add(i ? "x%d" : "%d", t->dims->data[i]);
  }
}

int Fail(const char* what, int code) {
  Line line;
  line.Add("error what=%s", what);
  line.Emit();
  Line done;
  done.Add("done images=0 status=error ticks=0");
  done.Emit();
  return code;
}

}  // namespace

uint32_t ForgeAppChecksum(const void* data, size_t n) {
  // sum_i byte_i * w_i mod 2^32, w_i = (i * 2654435761 mod 2^32) | 1: any change
  // of one byte changes it (w_i is odd), and numpy computes it vectorized
  // (forge_tflm.deploy.checksum).
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t h = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t w = (static_cast<uint32_t>(i) * 2654435761u) | 1u;
    h += static_cast<uint32_t>(p[i]) * w;
  }
  return h;
}

namespace {

using OpList = flatbuffers::Vector<flatbuffers::Offset<tflite::Operator>>;

// One run: what its steps share.
struct Session {
  const ForgeAppConfig* config = nullptr;
  const tflite::Model* model = nullptr;
  const OpList* ops = nullptr;
  uint32_t num_forge = 0;
  tflite::MicroInterpreter* interpreter = nullptr;
  ModeScope* mode = nullptr;
  TfLiteTensor* input = nullptr;
  TfLiteTensor* output = nullptr;
  size_t input_bytes = 0;
  size_t num_classes = 0;
  ForgeController gate;  // config->gate only
  int8_t source_logits[FORGE_CONTROLLER_MAX_CLASSES] = {};
  // The probe's second pass needs the image again: TFLM's memory plan may reuse
  // the input tensor's bytes for later tensors during the first.
  int8_t* probe_input = nullptr;
};

void ResetRunState(const ForgeAppPlatform& platform, const ForgeAppConfig& config) {
  g_run.platform = &platform;
  g_run.trace = config.trace;
  g_run.in_invoke = false;
  g_run.forge_persistent = g_run.forge_scratch = 0;
  g_run.num_states = 0;
  g_run.dump_op = config.dump_op;
  g_run.dump_image = config.dump_image;
  memset(g_run.cost, 0, sizeof(g_run.cost));
  memset(g_run.checksum, 0, sizeof(g_run.checksum));
}

// The model's structure, checked; marks the FORGE ops. 0 or a Fail() code.
int ReadModel(const ForgeAppConfig& config, Session* s) {
  if (config.model == nullptr || config.arena == nullptr) return Fail("no_model_or_arena", -1);
  if (config.images == nullptr && config.read_image == nullptr) return Fail("no_images", -1);
  // TFLM trusts the flatbuffer's offsets; a corrupt one is refused here, not read.
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(config.model),
                                 config.model_size);
  if (config.model_size == 0 || !tflite::VerifyModelBuffer(verifier)) {
    return Fail("model_flatbuffer", -2);
  }
  s->model = tflite::GetModel(config.model);
  if (s->model->version() != TFLITE_SCHEMA_VERSION) return Fail("schema_version", -2);
  if (s->model->subgraphs() == nullptr || s->model->subgraphs()->size() != 1) {
    return Fail("needs_one_subgraph", -2);
  }
  s->ops = s->model->subgraphs()->Get(0)->operators();
  g_run.num_ops = s->ops == nullptr ? 0 : s->ops->size();
  if (g_run.num_ops > static_cast<uint32_t>(kMaxOps)) return Fail("too_many_ops", -2);
  for (uint32_t i = 0; i < g_run.num_ops; ++i) {
    g_run.is_forge[i] = strcmp(OpName(s->model, s->ops->Get(i)), kForgeName) == 0;
    s->num_forge += g_run.is_forge[i] ? 1 : 0;
  }
  return 0;
}

// Tensors, the controller and the probe's input copy. 0 or a Fail() code.
int SetUp(Session* s) {
  const ForgeAppConfig& config = *s->config;
  if (!s->mode->ok()) return Fail("forge_mode", -3);
  if (config.gate && !config.adapt) {
    return Fail("gate_needs_adapt", -3);
  }
  if (s->interpreter->AllocateTensors() != kTfLiteOk) return Fail("allocate_tensors", -4);
  s->input = s->interpreter->input(0);
  s->output = s->interpreter->output(0);
  if (s->input == nullptr || s->output == nullptr || s->input->type != kTfLiteInt8 ||
      s->output->type != kTfLiteInt8) {
    return Fail("needs_int8_input_and_output", -5);
  }
  s->input_bytes = s->input->bytes;
  s->num_classes = s->output->bytes;
  if (!config.gate) return 0;
  const float scale = s->output->params.scale > 0.0f ? s->output->params.scale : 1.0f;
  const int32_t zero_point = s->output->params.scale > 0.0f ? s->output->params.zero_point : 0;
  if (!forge_controller_init(&s->gate, &config.gate_settings,
                             static_cast<int>(s->num_classes), scale, zero_point)) {
    return Fail("gate_config", -5);
  }
  s->probe_input = static_cast<int8_t*>(malloc(s->input_bytes));
  if (s->probe_input == nullptr) return Fail("gate_input_copy_alloc", -5);
  return 0;
}

void PrintHeader(const Session& s) {
  const ForgeAppConfig& config = *s.config;
  Line line;
  line.Add("forge_app version=1 model_bytes=%lu ops=%lu forge_ops=%lu input=",
           static_cast<unsigned long>(config.model_size),
           static_cast<unsigned long>(g_run.num_ops),
           static_cast<unsigned long>(s.num_forge));
  AddShape(&line, s.input);
  line.Add(" input_bytes=%lu output=", static_cast<unsigned long>(s.input_bytes));
  AddShape(&line, s.output);
  static const char* const kTraceNames[] = {"none", "forge", "all"};
  line.Add(" clock_hz=%s mode=%s trace=%s", U64(g_run.platform->clock_hz).s,
           config.gate ? "gated" : config.adapt ? "adapt" : "frozen",
           kTraceNames[config.trace < 0 || config.trace > 2 ? 0 : config.trace]);
  line.Emit();
  for (uint32_t i = 0; i < g_run.num_ops; ++i) {
    Line op;
    op.Add("op index=%lu name=%s forge=%d", static_cast<unsigned long>(i),
           OpName(s.model, s.ops->Get(i)), g_run.is_forge[i] ? 1 : 0);
    op.Emit();
  }
}

void PrintMemory(const Session& s) {
  Line line;
  size_t state_total = 0;
  for (uint32_t i = 0; i < g_run.num_states; ++i) state_total += g_run.state_bytes[i];
  // forge_state: the state buffers found (forge_persistent minus the op data
  // when every op's was found: states == FORGE ops).
  line.Add("mem arena_size=%lu arena_used=%lu forge_persistent=%lu forge_scratch=%lu "
           "forge_state=%lu states=%lu",
           static_cast<unsigned long>(s.config->arena_size),
           static_cast<unsigned long>(s.interpreter->arena_used_bytes()),
           static_cast<unsigned long>(g_run.forge_persistent),
           static_cast<unsigned long>(g_run.forge_scratch),
           static_cast<unsigned long>(state_total),
           static_cast<unsigned long>(g_run.num_states));
  line.Emit();
}

// Image n into the input tensor; false at the end of the stream.
bool LoadImage(const Session& s, size_t n) {
  int8_t* dst = s.input->data.int8;
  if (s.config->images != nullptr) {
    memcpy(dst, s.config->images + n * s.input_bytes, s.input_bytes);
    return true;
  }
  return s.config->read_image(s.config->read_image_user, n, dst, s.input_bytes);
}

// One pass over the loaded image. Each pass's ops are counted from 0 (the profiler's
// per-op cost counts both passes of a probe); only the pass whose output the image
// keeps records checksums and dumps.
TfLiteStatus Pass(Session* s, bool kept) {
  g_run.op_counter = 0;
  g_run.event_counter = 0;
  g_run.record = kept;
  const TfLiteStatus status = s->interpreter->Invoke();
  g_run.record = true;
  return status;
}

// A probed image: the source pass, then the adapting one on the same image; the
// output tensor ends up holding the path chosen before the probe's decision (the
// source before the first decision).
TfLiteStatus RunProbe(Session* s, ForgeControllerEvent* event) {
  const bool adapting = forge_controller_adapting(&s->gate);
  memcpy(s->probe_input, s->input->data.int8, s->input_bytes);
  if (!s->mode->Set(FORGE_RECALIB_MODE_SOURCE)) return kTfLiteError;
  TfLiteStatus status = Pass(s, !adapting);
  if (status != kTfLiteOk) return status;
  memcpy(s->source_logits, s->output->data.int8, s->num_classes);
  memcpy(s->input->data.int8, s->probe_input, s->input_bytes);
  s->mode->Set(forge_controller_op_mode(&s->gate, FORGE_CONTROLLER_PROBE));
  status = Pass(s, adapting);
  if (status != kTfLiteOk) return status;
  *event = forge_controller_probed(&s->gate, s->source_logits, s->output->data.int8, 1);
  if (!adapting) memcpy(s->output->data.int8, s->source_logits, s->num_classes);
  if (*event == FORGE_CONTROLLER_OFF) s->interpreter->Reset();  // clean targets
  return kTfLiteOk;
}

// One image as the controller says; *path names the pass whose output is kept.
TfLiteStatus RunGated(Session* s, const char** path, ForgeControllerEvent* event) {
  const ForgeControllerStep step = forge_controller_next(&s->gate);
  if (step == FORGE_CONTROLLER_PROBE) {
    *path = forge_controller_adapting(&s->gate) ? "adapt" : "source";
    return RunProbe(s, event);
  }
  static const char* const kPaths[] = {"adapt", "adapt", "adapt", "frozen"};
  s->mode->Set(forge_controller_op_mode(&s->gate, step));
  *path = kPaths[step];
  const TfLiteStatus status = Pass(s, true);
  if (status == kTfLiteOk) forge_controller_ran(&s->gate, s->output->data.int8, 1);
  return status;
}

TfLiteStatus RunImage(Session* s, const char** path, ForgeControllerEvent* event) {
  if (s->config->gate) return RunGated(s, path, event);
  return Pass(s, true);
}

// " name=h0,h1,..." over the FORGE ops (forge_only) or every op.
void AddChecksums(Line* line, const char* name, const uint32_t* values, bool forge_only) {
  line->Add(" %s=", name);
  bool first = true;
  for (uint32_t i = 0; i < g_run.num_ops; ++i) {
    if (forge_only && !g_run.is_forge[i]) continue;
    line->Add(first ? "%08lx" : ",%08lx", static_cast<unsigned long>(values[i]));
    first = false;
  }
}

void PrintImage(const Session& s, size_t n, uint64_t ticks, const char* path) {
  const int8_t* logits = s.output->data.int8;
  size_t best = 0;
  for (size_t c = 1; c < s.num_classes; ++c) {
    if (logits[c] > logits[best]) best = c;  // first maximum, as numpy argmax
  }
  Line line;
  line.Add("img index=%lu pred=%lu", static_cast<unsigned long>(n),
           static_cast<unsigned long>(best));
  if (s.config->print_logits) {
    line.Add(" logits=");
    for (size_t c = 0; c < s.num_classes; ++c) line.Add(c ? ",%d" : "%d", logits[c]);
  }
  line.Add(" ticks=%s", U64(ticks).s);
  if (path != nullptr) line.Add(" path=%s", path);
  const int trace = s.config->trace;
  if (trace == FORGE_APP_TRACE_FORGE || trace == FORGE_APP_TRACE_ALL) {
    AddChecksums(&line, "forge", g_run.checksum, true);
    if (s.num_forge > 0 && g_run.num_states == s.num_forge) {
      AddChecksums(&line, "state", g_run.state_checksum, true);
    }
  }
  if (trace == FORGE_APP_TRACE_ALL) AddChecksums(&line, "trace", g_run.checksum, false);
  line.Emit();
}

void PrintDecision(const Session& s, size_t n, ForgeControllerEvent event) {
  Line line;
  // Integers (micro-units): newlib-nano's printf has no %f.
  line.Add("gate image=%lu decision=%s score_e6=%ld correlated=%d agreement_e6=%ld"
           " chance_e6=%ld",
           static_cast<unsigned long>(n), event == FORGE_CONTROLLER_ON ? "on" : "off",
           lround(forge_controller_score(&s.gate) * 1e6),
           forge_controller_correlated(&s.gate) ? 1 : 0,
           lround(forge_controller_agreement(&s.gate) * 1e6),
           lround(forge_controller_chance(&s.gate) * 1e6));
  line.Emit();
}

// Image n: loaded, run, printed. 1: done, 0: end of the stream, <0: failed.
int Step(Session* s, size_t n, uint64_t* total_ticks) {
  if (!LoadImage(*s, n)) return 0;
  g_run.image = n;
  g_run.in_invoke = true;
  Marker(FORGE_APP_MARKER_INFERENCE, 1, static_cast<uint32_t>(n));
  const uint64_t t0 = Now();
  const char* path = nullptr;
  ForgeControllerEvent event = FORGE_CONTROLLER_NONE;
  const TfLiteStatus status = RunImage(s, &path, &event);
  const uint64_t ticks = Now() - t0;
  Marker(FORGE_APP_MARKER_INFERENCE, 0, static_cast<uint32_t>(n));
  g_run.in_invoke = false;
  if (status != kTfLiteOk) {
    Line line;
    line.Add("error what=invoke image=%lu", static_cast<unsigned long>(n));
    line.Emit();
    return -7;
  }
  *total_ticks += ticks;
  PrintImage(*s, n, ticks, path);
  if (event != FORGE_CONTROLLER_NONE) PrintDecision(*s, n, event);
  return 1;
}

// Per-operator and per-type cost (summed over the images that ran).
void PrintCosts(const Session& s) {
  for (uint32_t i = 0; i < g_run.num_ops; ++i) {
    Line line;
    line.Add("cost index=%lu name=%s calls=%lu ticks=%s", static_cast<unsigned long>(i),
             OpName(s.model, s.ops->Get(i)), static_cast<unsigned long>(g_run.cost[i].calls),
             U64(g_run.cost[i].ticks).s);
    line.Emit();
  }
  for (uint32_t i = 0; i < g_run.num_ops; ++i) {
    const char* name = OpName(s.model, s.ops->Get(i));
    bool seen = false;
    for (uint32_t j = 0; j < i && !seen; ++j) {
      seen = strcmp(OpName(s.model, s.ops->Get(j)), name) == 0;
    }
    if (seen) continue;
    uint64_t ticks = 0;
    uint32_t count = 0;
    for (uint32_t j = i; j < g_run.num_ops; ++j) {
      if (strcmp(OpName(s.model, s.ops->Get(j)), name) == 0) {
        ticks += g_run.cost[j].ticks;
        ++count;
      }
    }
    Line line;
    line.Add("cost_type name=%s ops=%lu ticks=%s", name, static_cast<unsigned long>(count),
             U64(ticks).s);
    line.Emit();
  }
}

}  // namespace

int ForgeAppRun(const ForgeAppPlatform& platform, const ForgeAppConfig& config) {
  ResetRunState(platform, config);
  Session s;
  s.config = &config;
  int rc = ReadModel(config, &s);
  if (rc != 0) return rc;
  static Resolver resolver;  // static: registrations must outlive the run
  static bool resolver_ready = false;
  if (!resolver_ready) {
    if (FillResolver(&resolver) != kTfLiteOk) return Fail("resolver", -3);
    resolver_ready = true;
  }
  OpProfiler profiler;
  tflite::MicroInterpreter interpreter(s.model, resolver, config.arena, config.arena_size,
                                       nullptr, &profiler);
  ModeScope mode(&interpreter, config.adapt);  // before AllocateTensors/Invoke
  s.interpreter = &interpreter;
  s.mode = &mode;
  rc = SetUp(&s);
  struct FreeOnExit {
    void* p;
    ~FreeOnExit() { free(p); }
  } free_probe_input{s.probe_input};
  if (rc != 0) return rc;
  PrintHeader(s);
  PrintMemory(s);
  uint64_t total_ticks = 0;
  size_t done = 0;
  for (size_t n = 0; n < config.num_images; ++n) {
    const int step = Step(&s, n, &total_ticks);
    if (step <= 0) {
      rc = step;
      break;
    }
    ++done;
  }
  PrintCosts(s);
  Line line;
  line.Add("done images=%lu status=%s ticks=%s", static_cast<unsigned long>(done),
           rc == 0 ? "ok" : "error", U64(total_ticks).s);
  line.Emit();
  g_run.platform = nullptr;
  return rc;
}
