/* ESP-NN's ESP32-S3 fully-connected kernels against its _ansi C reference
 * (which the host parity tests check against TFLM's reference arithmetic),
 * over output widths that are and are not multiples of 8 (espressif/esp-nn
 * issue 34), on both of the S3 dispatcher's paths: the s8 SIMD dot product
 * (row_len >= 16, 16-byte aligned input, filter_offset 0) and the s16
 * assembly fallback (any other case). Each case also checks that nothing is
 * written past the output (canary bytes). One line per case:
 *   fc kind=per_ch|per_tensor row_len=R width=W path=s8|s16 misalign=0|1 input_offset=O
 *      mismatches=M canary=ok|bad
 * (misalign=1: the input 1 byte off 16-byte alignment; TFLM's arena tensors are
 * 16-byte aligned, so only misalign=0 is what a model runs)
 * then "fc_done cases=N failures=F". Built by `make fc-check`. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "esp_nn.h"

#define MAX_ROW 128
#define MAX_W 64
#define CANARY 16

static uint32_t s_rng = 12345u;
static uint32_t rnd(void) {
  s_rng ^= s_rng << 13, s_rng ^= s_rng >> 17, s_rng ^= s_rng << 5;
  return s_rng;
}

static int8_t s_in[MAX_ROW + 16] __attribute__((aligned(16)));
static int8_t s_filter[MAX_ROW * MAX_W] __attribute__((aligned(16)));
static int32_t s_bias[MAX_W], s_mult[MAX_W], s_shift[MAX_W];
static int8_t s_out_ref[MAX_W + CANARY], s_out_s3[MAX_W + CANARY];

static void fill(int row_len, int width) {
  for (int i = 0; i < row_len + 16; ++i) s_in[i] = (int8_t)rnd();
  for (int i = 0; i < row_len * width; ++i) s_filter[i] = (int8_t)rnd();
  for (int c = 0; c < width; ++c) {
    s_bias[c] = (int32_t)(rnd() % 20001) - 10000;
    s_mult[c] = (int32_t)(0x40000000u + rnd() % 0x3FFFFFFFu);
    s_shift[c] = -(int32_t)(rnd() % 12) + (c % 5 == 0 ? 1 : 0);
  }
}

/* Runs one case; returns 1 when the S3 kernel differs or overruns. */
static int run_case(int per_ch, int row_len, int width, int misalign, int input_offset) {
  fill(row_len, width);
  const int8_t* in = s_in + misalign;
  const int32_t out_offset = -5, act_min = -128, act_max = 127;
  memset(s_out_ref, 0x5A, sizeof(s_out_ref));
  memset(s_out_s3, 0x5A, sizeof(s_out_s3));
  if (per_ch) {
    esp_nn_fully_connected_per_ch_s8_ansi(in, input_offset, row_len, s_filter, 0, s_bias,
                                          s_out_ref, width, out_offset, s_shift, s_mult,
                                          act_min, act_max);
    esp_nn_fully_connected_per_ch_s8_esp32s3(in, input_offset, row_len, s_filter, 0, s_bias,
                                             s_out_s3, width, out_offset, s_shift, s_mult,
                                             act_min, act_max);
  } else {
    esp_nn_fully_connected_s8_ansi(in, input_offset, row_len, s_filter, 0, s_bias, s_out_ref,
                                   width, out_offset, s_shift[0], s_mult[0], act_min, act_max);
    esp_nn_fully_connected_s8_esp32s3(in, input_offset, row_len, s_filter, 0, s_bias, s_out_s3,
                                      width, out_offset, s_shift[0], s_mult[0], act_min,
                                      act_max);
  }
  int mismatches = 0, canary_ok = 1;
  for (int c = 0; c < width; ++c) mismatches += s_out_ref[c] != s_out_s3[c];
  for (int c = width; c < width + CANARY; ++c) canary_ok &= s_out_s3[c] == 0x5A;
  const int s8_path = row_len >= 16 && misalign == 0;
  printf("fc kind=%s row_len=%d width=%d path=%s misalign=%d input_offset=%d mismatches=%d "
         "canary=%s\n", per_ch ? "per_ch" : "per_tensor", row_len, width, s8_path ? "s8" : "s16",
         misalign, (int)input_offset, mismatches, canary_ok ? "ok" : "bad");
  return mismatches != 0 || !canary_ok;
}

int main(void) {
  static const int kRows[] = {8, 15, 16, 17, 32, 64, 100};
  static const int kWidths[] = {1, 2, 3, 4, 5, 7, 8, 9, 10, 12, 15, 16, 17, 24, 31, 33, 64};
  int cases = 0, failures = 0;
  for (int per_ch = 1; per_ch >= 0; --per_ch) {
    for (unsigned r = 0; r < sizeof(kRows) / sizeof(kRows[0]); ++r) {
      for (unsigned w = 0; w < sizeof(kWidths) / sizeof(kWidths[0]); ++w) {
        for (int misalign = 0; misalign <= 1; ++misalign) {
          failures += run_case(per_ch, kRows[r], kWidths[w], misalign, 128);
          ++cases;
        }
      }
    }
  }
  printf("fc_done cases=%d failures=%d\n", cases, failures);
  return 0;
}
