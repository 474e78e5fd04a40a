/* FORGE_RECALIB for the ESP32-S3 (Xtensa LX7: scalar single-precision FPU and
 * the PIE 128-bit integer SIMD unit): forge_recalib_s8_esp32s3.
 *
 * Compiles to nothing unless the compiler targets Xtensa and the build defines
 * FORGE_RECALIB_ESP32S3 (FORGE_RECALIB_ESP32S3_AVAILABLE, forge_recalib.h):
 * the PIE is not visible to the preprocessor, and an ESP32 (LX6) has none.
 * Validation and every per-channel float32 step are forge_recalib.c's
 * (forge_recalib_s8_hooked); this file replaces the two hot loops:
 *
 *   stats (PIE, C % 8 == 0 and x 8-byte aligned: every TFLM arena tensor is
 *     16-byte aligned): eight channels per 64-bit load (EE.VLD.L.64.XP, one
 *     row, the pointer stepping by C), sign-extended to int16 lanes
 *     (EE.VCMP.LT.S8 + EE.VZIP.8, ESP-NN's idiom); EE.VADDS.S16 keeps the q
 *     sums over blocks of 128 rows (|128 * -128| = 2^14: it saturates to
 *     +-32767, so 256 rows of -128, a dead ReLU channel, summed to -32767),
 *     EE.VMUL.S16 with SAR 0 gives q*q exactly (<= 2^14), zipped with
 *     zero to int32 lanes and summed by EE.VADDS.S32. Integer sums are exact in
 *     any order: S1/S2 are the ansi ones. Other shapes: the ansi loop.
 *
 *   per element (scalar FPU; the PIE has no float lanes): the SPEC formula of
 *     forge_recalib.c's requantize, op for op (-ffp-contract=off), one channel
 *     at a time with its A, B in registers (an integer clamp after the
 *     conversion, as the Cortex-M loop does, measured slower here: GCC then
 *     drops the zero-overhead LOOP and branches for the min). The table path builds each
 *     channel's 256 entries the same way but, when the entry is a
 *     nondecreasing function of q (A >= 0 finite, B finite: every step
 *     rounds monotonically), finds the runs clamped to qmin / qmax by binary
 *     search and fills them without evaluation (ReLU sites clamp about half).
 *     AUTO takes the table from M >= FORGE_RECALIB_ESP32S3_LUT_MIN_M (512:
 *     measured crossover between the 16x16 and 32x32 ResNet-20 sites).
 */
#include "forge_recalib.h"

#if defined(FORGE_RECALIB_ESP32S3_AVAILABLE)

#include <float.h>
#include <string.h>

#ifndef FORGE_RECALIB_ESP32S3_LUT_MIN_M
#define FORGE_RECALIB_ESP32S3_LUT_MIN_M 512
#endif

/* ----------------------------------------------------------------- stats */

/* Sums of one 8-channel column block over n rows (1..kRowBlock) from p (8-byte
 * aligned) at stride: out = int16 s1[8], then int32 s2[8] (16-byte aligned).
 * q0 zero, q1 row, q2 sign / zero, q3 s1, q4 s2[0..3], q5 s2[4..7]; GCC never
 * allocates the q registers, and it sets SAR right before each shift that
 * reads it (no clobber name exists for it), so none is clobbered behind its
 * back. */
static void pie_sums8(const int8_t* p, int32_t stride, int32_t n, void* out) {
  __asm__ volatile(
      "ee.zero.q q0\n\t"
      "ee.zero.q q3\n\t"
      "ee.zero.q q4\n\t"
      "ee.zero.q q5\n\t"
      "ssai 0\n\t"
      "1:\n\t"
      "ee.vld.l.64.xp q1, %[p], %[st]\n\t"
      "ee.vcmp.lt.s8 q2, q1, q0\n\t"
      "ee.vzip.8 q1, q2\n\t" /* q1: int16 lanes of the 8 channels */
      "ee.vadds.s16 q3, q3, q1\n\t"
      "ee.vmul.s16 q1, q1, q1\n\t"
      "ee.zero.q q2\n\t"
      "ee.vzip.16 q1, q2\n\t" /* q*q as int32: channels 0..3 in q1, 4..7 q2 */
      "ee.vadds.s32 q4, q4, q1\n\t"
      "ee.vadds.s32 q5, q5, q2\n\t"
      "addi %[n], %[n], -1\n\t"
      "bnez %[n], 1b\n\t"
      "ee.vst.128.ip q3, %[o], 16\n\t"
      "ee.vst.128.ip q4, %[o], 16\n\t"
      "ee.vst.128.ip q5, %[o], 16\n\t"
      : [p] "+r"(p), [n] "+r"(n), [o] "+r"(out)
      : [st] "r"(stride)
      : "memory");
}

/* Rows per PIE block: the int16 q sums stay within +-2^14, inside EE.VADDS.S16's
 * saturation (+-32767). */
enum { kRowBlock = 128 };

static int s3_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                    int32_t* s1, int32_t* s2_blk) {
  int32_t c, row, k;
  int32_t buf[12] __attribute__((aligned(16)));
  const int16_t* b1 = (const int16_t*)buf;
  (void)s2_blk;
  if ((C & 7) != 0 || ((uintptr_t)x & 7u) != 0) return 0;
  for (c = 0; c < C; ++c) {
    s1[c] = 0; /* |S1| <= 128 * 2^22 */
    s2[c] = 0;
  }
  for (row = 0; row < M; row += kRowBlock) {
    const int32_t n = M - row > kRowBlock ? kRowBlock : M - row;
    const int8_t* p = x + (size_t)row * (size_t)C;
    for (c = 0; c < C; c += 8) {
      pie_sums8(p + c, C, n, buf);
      for (k = 0; k < 8; ++k) {
        s1[c + k] += b1[k];
        s2[c + k] += buf[4 + k];
      }
    }
  }
  return 1;
}

/* ----------------------------------------------------------- per element */

/* SPEC step 6, op for op as forge_recalib.c's requantize (NaN -> qmin). */
static inline int8_t s3_requant(int32_t d, float a, float b, float qmin_f,
                                float qmax_f) {
  const float prod = (float)d * a;
  float v = prod + b;
  if (!(v >= qmin_f)) v = qmin_f;
  if (v > qmax_f) v = qmax_f;
  return (int8_t)((int32_t)(v + 128.5f) - 128);
}

/* One channel, affine: `M` rows at stride, A and B in registers. */
static void affine_channel(const int8_t* xp, int8_t* yp, int32_t M,
                           size_t stride, int32_t z_x, float a, float b,
                           float qmin_f, float qmax_f) {
  int32_t i;
  for (i = 0; i < M; ++i, xp += stride, yp += stride) {
    *yp = s3_requant(*xp - z_x, a, b, qmin_f, qmax_f);
  }
}

/* Table of one channel, t[i] = y(q = i - 128). With a nondecreasing entry
 * (A >= 0 finite, B finite) the leading run equal to t[0] and the trailing
 * run equal to t[255] are found by binary search and filled. */
static void build_table(int8_t* t, int32_t z_x, float a, float b,
                        float qmin_f, float qmax_f) {
  const int32_t d0 = -128 - z_x;
  int32_t first = 0, last = 256, i;
  if (a >= 0.0f && a <= FLT_MAX && b >= -FLT_MAX && b <= FLT_MAX) {
    const int8_t ymin = s3_requant(d0, a, b, qmin_f, qmax_f);
    const int8_t ymax = s3_requant(d0 + 255, a, b, qmin_f, qmax_f);
    int32_t lo = 0, hi = 256; /* t[lo] == ymin; t[hi] > ymin (hi 256: none) */
    while (hi - lo > 1) {
      const int32_t mid = (lo + hi) >> 1;
      if (s3_requant(d0 + mid, a, b, qmin_f, qmax_f) > ymin) hi = mid;
      else lo = mid;
    }
    first = hi;
    lo = first - 1, hi = 255; /* t[lo] < ymax or lo < first; t[hi] == ymax */
    while (hi - lo > 1) {
      const int32_t mid = (lo + hi) >> 1;
      if (s3_requant(d0 + mid, a, b, qmin_f, qmax_f) < ymax) lo = mid;
      else hi = mid;
    }
    last = first < 256 ? hi : 256;
    memset(t, ymin, (size_t)first);
    memset(t + last, ymax, (size_t)(256 - last));
  }
  for (i = first; i < last; ++i) t[i] = s3_requant(d0 + i, a, b, qmin_f, qmax_f);
}

static void lut_channel(const int8_t* xp, int8_t* yp, int32_t M, size_t stride,
                        const int8_t* t128) {
  int32_t i;
  for (i = 0; i < M; ++i, xp += stride, yp += stride) *yp = t128[*xp];
}

static int s3_elementwise(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                          const float* a, const float* b,
                          const forge_recalib_quant* quant, int8_t* lut) {
  const float qmin_f = quant->qmin_f, qmax_f = quant->qmax_f;
  const int32_t z_x = quant->z_x;
  const size_t stride = (size_t)C;
  int32_t c;
  for (c = 0; c < C; ++c) {
    if (lut != NULL) {
      int8_t* t = lut + (size_t)c * 256u;
      build_table(t, z_x, a[c], b[c], qmin_f, qmax_f);
      lut_channel(x + c, y + c, M, stride, t + 128);
    } else {
      affine_channel(x + c, y + c, M, stride, z_x, a[c], b[c], qmin_f, qmax_f);
    }
  }
  return 1;
}

/* No int_elementwise: the integer option runs the generic loop here. */
static const forge_recalib_hooks kEsp32s3Hooks = {
    s3_stats, s3_elementwise, FORGE_RECALIB_ESP32S3_LUT_MIN_M, NULL};

int forge_recalib_s8_esp32s3(const forge_recalib_args* args, const char** msg) {
  return forge_recalib_s8_hooked(args, &kEsp32s3Hooks, msg);
}

#endif /* FORGE_RECALIB_ESP32S3_AVAILABLE */

/* ISO C forbids an empty translation unit. */
typedef int forge_recalib_esp32s3_translation_unit_not_empty;
