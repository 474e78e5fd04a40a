/* ESP-NN's ESP32-S3 depthwise kernel (esp_nn_depthwise_conv_s8_esp32s3) and its
 * scratch: does it stay inside what esp_nn_get_depthwise_conv_scratch_size asks
 * for, and inside what the app's guard requests (forge_esp_nn_dw_scratch_bytes in
 * ../core/forge_app.cc, linked from the app's own object)?
 * Per shape and per scratch size S (ESP-NN's `asked`, the guard's `guard`): the
 * scratch is S bytes, 16-byte aligned as TFLM's arena gives it, followed by a canary
 * region to the end of a 192 KB buffer; the kernel runs twice with two canary
 * patterns (each byte's complement), so a written byte differs from at least one:
 * `past` is how far beyond S the last byte the kernel wrote lies (0: none). The
 * output is compared with ESP-NN's _ansi kernel (which the host parity tests hold
 * to TFLM's reference arithmetic). Padding is what TFLM passes the kernel
 * (ComputePaddingHeightWidth: SAME stride 2 on an even input gives 0, the extra
 * right/bottom row left to the kernel). One line per shape:
 *   dw name=N in=HxWxC filter=3x3 mult=M stride=S pad=PHxPW out=OHxOW asked=A
 *      asked_past=P guard=G guard_past=Q mismatches=X guard_mismatches=Y
 * then "dw_done cases=N overflows=K failures=F" (overflows: asked_past > 0;
 * failures: guard_past > 0 or any output mismatch). Built by `make dw-check`. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "esp_nn.h"

/* The app's guard (../core/forge_app.cc, ESP_NN builds). */
int forge_esp_nn_dw_scratch_bytes(const data_dims_t* in, const data_dims_t* filter,
                                  const data_dims_t* out, const dw_conv_params_t* p);

#define MAX_IN (48 * 48 * 32)
#define MAX_OUT (32 * 32 * 48)
#define MAX_CH 480
#define SCRATCH_BYTES (192 * 1024)

static uint32_t s_rng = 2024u;
static uint32_t rnd(void) {
  s_rng ^= s_rng << 13, s_rng ^= s_rng >> 17, s_rng ^= s_rng << 5;
  return s_rng;
}

static int8_t s_in[MAX_IN] __attribute__((aligned(16)));
static int8_t s_filter[25 * MAX_CH] __attribute__((aligned(16)));
static int32_t s_bias[MAX_CH], s_mult[MAX_CH], s_shift[MAX_CH];
static int8_t s_ref[MAX_OUT] __attribute__((aligned(16)));
static int8_t s_out[MAX_OUT] __attribute__((aligned(16)));
static uint8_t s_scratch[SCRATCH_BYTES] __attribute__((aligned(16)));

struct Shape {
  const char* name;
  int h, w, c, k, stride, mult;
  int same; /* 1: SAME (TFLM's padding), 0: VALID */
};

/* TFLM's ComputePaddingHeightWidth for dilation 1. */
static void tflm_padding(int in, int k, int stride, int same, int* out, int* pad) {
  *out = same ? (in + stride - 1) / stride : (in - k + stride) / stride;
  const int total = ((*out - 1) * stride + k) - in;
  *pad = same && total > 0 ? total / 2 : 0;
}

static uint8_t canary(int i, int pattern) {
  const uint8_t b = (uint8_t)(i * 131u + 77u);
  return pattern ? (uint8_t)~b : b;
}

/* Runs the S3 kernel with S bytes of scratch; returns the bytes written past S. */
static int run_s3(const data_dims_t* in_d, const data_dims_t* f_d, const data_dims_t* out_d,
                  const dw_conv_params_t* p, const quant_data_t* q, int scratch, int out_n,
                  int* mismatches) {
  int past = 0;
  *mismatches = 0;
  for (int pattern = 0; pattern < 2; ++pattern) {
    memset(s_scratch, 0, (size_t)scratch);
    for (int i = scratch; i < SCRATCH_BYTES; ++i) s_scratch[i] = canary(i, pattern);
    memset(s_out, 0x5A, (size_t)out_n);
    esp_nn_set_depthwise_conv_scratch_buf_esp32s3(s_scratch);
    esp_nn_depthwise_conv_s8_esp32s3(in_d, s_in, f_d, s_filter, s_bias, out_d, s_out, p, q);
    for (int i = SCRATCH_BYTES - 1; i >= scratch; --i) {
      if (s_scratch[i] != canary(i, pattern)) {
        if (i + 1 - scratch > past) past = i + 1 - scratch;
        break;
      }
    }
    int m = 0;
    for (int i = 0; i < out_n; ++i) m += s_out[i] != s_ref[i];
    if (m > *mismatches) *mismatches = m;
  }
  return past;
}

/* Returns 1 when the guard's size is overrun or an output differs from _ansi. */
static int run_shape(const struct Shape* s, int* overflow) {
  int oh, ow, ph, pw;
  tflm_padding(s->h, s->k, s->stride, s->same, &oh, &ph);
  tflm_padding(s->w, s->k, s->stride, s->same, &ow, &pw);
  const int out_c = s->c * s->mult;
  const int in_n = s->h * s->w * s->c, out_n = oh * ow * out_c;
  if (in_n > MAX_IN || out_n > MAX_OUT || out_c > MAX_CH) {
    printf("dw name=%s error=too_large\n", s->name);
    return 1;
  }
  for (int i = 0; i < in_n; ++i) s_in[i] = (int8_t)rnd();
  for (int i = 0; i < s->k * s->k * out_c; ++i) s_filter[i] = (int8_t)rnd();
  for (int c = 0; c < out_c; ++c) {
    s_bias[c] = (int32_t)(rnd() % 20001) - 10000;
    s_mult[c] = (int32_t)(0x40000000u + rnd() % 0x3FFFFFFFu);
    s_shift[c] = -(int32_t)(rnd() % 10) - 1;
  }
  const data_dims_t in_d = {s->w, s->h, s->c, 1}, f_d = {s->k, s->k, out_c, 0};
  const data_dims_t out_d = {ow, oh, out_c, 1};
  const int32_t zero_point = (int32_t)(rnd() % 256) - 128;
  const dw_conv_params_t p = {.in_offset = -zero_point, .out_offset = -3, .ch_mult = s->mult,
                              .stride = {s->stride, s->stride}, .padding = {pw, ph},
                              .dilation = {1, 1}, .activation = {-128, 127}};
  const quant_data_t q = {.shift = s_shift, .mult = s_mult};

  esp_nn_set_depthwise_conv_scratch_buf_ansi(s_scratch);
  esp_nn_depthwise_conv_s8_ansi(&in_d, s_in, &f_d, s_filter, s_bias, &out_d, s_ref, &p, &q);

  const int asked = esp_nn_get_depthwise_conv_scratch_size_esp32s3(&in_d, &f_d, &out_d, &p);
  const int guard = forge_esp_nn_dw_scratch_bytes(&in_d, &f_d, &out_d, &p);
  if (guard + 4096 > SCRATCH_BYTES) {
    printf("dw name=%s error=scratch_too_large guard=%d\n", s->name, guard);
    return 1;
  }
  int mism_asked, mism_guard;
  const int past_asked = run_s3(&in_d, &f_d, &out_d, &p, &q, asked, out_n, &mism_asked);
  const int past_guard = run_s3(&in_d, &f_d, &out_d, &p, &q, guard, out_n, &mism_guard);
  printf("dw name=%s in=%dx%dx%d filter=%dx%d mult=%d stride=%d pad=%dx%d out=%dx%d asked=%d "
         "asked_past=%d guard=%d guard_past=%d mismatches=%d guard_mismatches=%d\n",
         s->name, s->h, s->w, s->c, s->k, s->k, s->mult, s->stride, ph, pw, oh, ow, asked,
         past_asked, guard, past_guard, mism_asked, mism_guard);
  *overflow = past_asked > 0;
  return past_guard > 0 || mism_asked != 0 || mism_guard != 0;
}

int main(void) {
  static const struct Shape kShapes[] = {
      /* MobileNetV2-0.5's depthwise ops (models/mobilenet_v2_0.5_cifar10.keras as
       * converted with FORGE at 52 sites; op index, all SAME) */
      {"mnv2_op8", 32, 32, 48, 3, 2, 1, 1},    /* pad 0, padded 34x34x48 > 40 KB */
      {"mnv2_op2", 32, 32, 16, 3, 1, 1, 1},    /* pad 1, 34x34x16 <= 40 KB: full pad */
      {"mnv2_op14", 16, 16, 96, 3, 1, 1, 1},
      {"mnv2_op21", 16, 16, 96, 3, 2, 1, 1},   /* pad 0, 18x18x96 <= 40 KB */
      {"mnv2_op27", 8, 8, 96, 3, 1, 1, 1},     /* and op 34 */
      {"mnv2_op41", 8, 8, 96, 3, 2, 1, 1},
      {"mnv2_op47", 4, 4, 192, 3, 1, 1, 1},    /* and ops 54, 61, 68 */
      {"mnv2_op74", 4, 4, 288, 3, 1, 1, 1},    /* and ops 81, 88 */
      {"mnv2_op94", 4, 4, 480, 3, 1, 1, 1},    /* and ops 101, 108 */
      /* around the 40 KB threshold and the other dispatch paths */
      {"s1_32x32x48_tiled", 32, 32, 48, 3, 1, 1, 1},  /* pad 1, 34x34x48 > 40 KB: row tiles */
      {"s2_32x32x32", 32, 32, 32, 3, 2, 1, 1},        /* pad 0, 34x34x32 = 36,992 B */
      {"s2_48x48x32", 48, 48, 32, 3, 2, 1, 1},        /* pad 0, 50x50x32 > 40 KB: overflows */
      {"s2_33x32x16_pad_h_only", 33, 32, 16, 3, 2, 1, 1}, /* pad 1x0: channel-pad path */
      {"valid_s1_32x32x48", 32, 32, 48, 3, 1, 1, 0},  /* pad 0, nothing to pad */
      {"s2_16x16x24", 16, 16, 24, 3, 2, 1, 1},        /* ch % 16 != 0: 24 -> 16-padded */
      {"s1_16x16x8", 16, 16, 8, 3, 1, 1, 1},          /* ch 8: s16 3x3 */
      {"k5_s1_32x32x32", 32, 32, 32, 5, 1, 1, 1},     /* 5x5 SAME: s16 row tiles (> 48 KB) */
      {"k5_valid_s1_32x32x32", 32, 32, 32, 5, 1, 1, 0}, /* the same tiles, no pad rows */
      {"k5_s1_16x16x32", 16, 16, 32, 5, 1, 1, 1},     /* 5x5 SAME, <= 48 KB: no tiles */
      {"s1_16x16x20", 16, 16, 20, 3, 1, 1, 1},        /* ch % 8 != 0: channel-padded s16 */
      {"mult4_s1_8x8x8", 8, 8, 8, 3, 1, 4, 1},        /* ch_mult 4 */
  };
  int cases = 0, overflows = 0, failures = 0;
  for (unsigned i = 0; i < sizeof(kShapes) / sizeof(kShapes[0]); ++i) {
    int overflow = 0;
    failures += run_shape(&kShapes[i], &overflow);
    overflows += overflow;
    ++cases;
  }
  printf("dw_done cases=%d overflows=%d failures=%d\n", cases, overflows, failures);
  return 0;
}
