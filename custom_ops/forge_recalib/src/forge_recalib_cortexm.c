/* FORGE_RECALIB for Cortex-M with the DSP extension (Armv7E-M: M4/M7;
 * Armv8-M mainline + DSP: M33/M55): forge_recalib_s8_cortexm.
 *
 * Compiles to nothing unless the compiler targets an M-profile core with the
 * DSP extension (FORGE_RECALIB_CORTEXM_AVAILABLE, forge_recalib.h), so every
 * build may list it. Validation and every per-channel float32 step are
 * forge_recalib.c's (forge_recalib_s8_hooked); this file replaces the two
 * hot loops:
 *
 *   stats: four channels per 32-bit load (unaligned LDR), four rows per
 *     iteration; SXTB16 splits the word into channels {c, c+2} and
 *     {c+1, c+3}; SADD16 keeps int16 lane sums of q (exact for <= 256 rows:
 *     |256 * -128| = 2^15), SMLABB/SMLATT int32 sums of q*q (flushed to int64
 *     with the q sums every 256 rows). Integer sums are exact in any order:
 *     S1/S2 are the ansi ones.
 *
 *   per element, affine: four adjacent channels per step (C % 4 == 0; other
 *     channels one at a time), A and B of the four in FPU registers. Per
 *     element, in SPEC order: d = q - z_x (SXTAB), prod = (float)d * A;
 *     v = prod + B; w = v + 128.5f; then the clamp, moved after the + 128.5f
 *     and into the integer domain as in the x86 loops: rounding is monotonic
 *     and qmin + 128.5f, qmax + 128.5f are exact, so fl(v + 128.5f) is <= / >=
 *     them exactly when v is <= qmin / >= qmax. w is truncated toward zero by
 *     VCVT.S16.F32 #0 (fixed point, 0 fraction bits: saturates to int16, NaN
 *     -> 0), USAT16 #8 clamps to [0, 255], which contains [lo, hi] = [qmin +
 *     128, qmax + 128], so the result is clamp(trunc(w), lo, hi): NaN gives 0,
 *     then lo, i.e. qmin as the SPEC's `!(v >= qmin_f)`. The four bytes are
 *     packed (PKHBT, ORR), clamped to [lo, hi] bytewise (USUB8/SEL, only when
 *     [lo, hi] != [0, 255]), XORed with 0x80 (y = u - 128) and stored with one
 *     STR. (The conversions are issued by inline asm: in C a NaN or
 *     out-of-range conversion is undefined.)
 *
 *   per element, table: the same formula per entry (256 per channel, eight
 *     per step), then one LDRB per element, four channels per loaded word.
 *     With A >= 0 finite and B finite (always, but for overflowed
 *     coefficients) the entry is a nondecreasing function of q (every step is
 *     monotonic), so blocks of 8 entries whose last entry is lo (first entry
 *     is hi) are lo (hi) throughout and are filled without evaluation.
 *     Chosen by AUTO from M >= FORGE_RECALIB_CORTEXM_LUT_MIN_M (the crossover
 *     measured on the QEMU Cortex-M4; test/cortexm/README.md).
 *
 *   arithmetic int (forge_recalib_int.c runs the invocation with cm_stats and
 *     this file's SPEC I8 loop, cm_int_elementwise): LDRSB, MLA,
 *     SSAT-with-shift, STRB per element.
 */
#include "forge_recalib.h"

#if defined(FORGE_RECALIB_CORTEXM_AVAILABLE)

#include <arm_acle.h>
#include <float.h>
#include <string.h>

#if !(defined(__ARM_FP) && (__ARM_FP & 4))
#error "forge_recalib_cortexm.c needs a single-precision FPU"
#endif

#ifndef FORGE_RECALIB_CORTEXM_LUT_MIN_M
#define FORGE_RECALIB_CORTEXM_LUT_MIN_M 384
#endif

static inline int16x2_t sxtb16_ror8(uint32_t w) {
  int16x2_t r;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(w));
  return r;
}

/* ----------------------------------------------------------------- stats */

/* Sums of 4 channels (c0..c0+3) over a block of rows: the even and odd
 * channels' 16-bit sums in two SIMD32 registers, the squares in four. */
typedef struct {
  int16x2_t ev, od;
  int32_t q0, q1, q2, q3;
} cm_acc;

/* One row's 4 bytes of channels c0..c0+3 into the sums. */
static inline __attribute__((always_inline)) void cm_add(cm_acc* a, uint32_t w) {
  const int16x2_t e = __sxtb16(w);    /* channels c0, c0+2 */
  const int16x2_t o = sxtb16_ror8(w); /* channels c0+1, c0+3 */
  a->ev = __sadd16(a->ev, e);
  a->od = __sadd16(a->od, o);
  a->q0 = __smlabb(e, e, a->q0);
  a->q2 = __smlatt(e, e, a->q2);
  a->q1 = __smlabb(o, o, a->q1);
  a->q3 = __smlatt(o, o, a->q3);
}

/* Channels c0..c0+3 over n <= 256 rows from p (16-bit sums stay exact). */
static inline __attribute__((always_inline)) void cm_block4(const int8_t* p,
                                                            int32_t n, size_t stride,
                                                            int32_t* s1, int64_t* s2) {
  const int8_t* const end4 = p + (size_t)(n & ~3) * stride;
  cm_acc a = {0, 0, 0, 0, 0, 0};
  int32_t k;
  for (; p != end4; p += 4 * stride) {
    uint32_t w0, w1, w2, w3;
    memcpy(&w0, p, 4); /* one (unaligned) LDR */
    memcpy(&w1, p + stride, 4);
    memcpy(&w2, p + 2 * stride, 4);
    memcpy(&w3, p + 3 * stride, 4);
    cm_add(&a, w0);
    cm_add(&a, w1);
    cm_add(&a, w2);
    cm_add(&a, w3);
  }
  for (k = n & 3; k > 0; --k, p += stride) {
    uint32_t w;
    memcpy(&w, p, 4);
    cm_add(&a, w);
  }
  s1[0] += (int16_t)(a.ev & 0xFFFF);
  s1[2] += (int16_t)((uint32_t)a.ev >> 16);
  s1[1] += (int16_t)(a.od & 0xFFFF);
  s1[3] += (int16_t)((uint32_t)a.od >> 16);
  s2[0] += a.q0;
  s2[1] += a.q1;
  s2[2] += a.q2;
  s2[3] += a.q3;
}

/* One channel (the C % 4 left over) over all M rows, scalar. */
static void cm_channel(const int8_t* p, int32_t M, size_t stride, int32_t* s1,
                       int64_t* s2) {
  int32_t t1 = 0, t2 = 0, n = 0, row;
  for (row = 0; row < M; ++row, p += stride) {
    const int32_t q = *p;
    t1 += q;
    t2 += q * q;
    if (++n == 65536) { /* int32 sums of q*q: exact for 2^16 rows */
      *s2 += t2;
      t2 = 0;
      n = 0;
    }
  }
  *s1 = t1;
  *s2 += t2;
}

static int cm_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                    int32_t* s1, int32_t* s2_blk) {
  int32_t c0, c, row;
  const size_t stride = (size_t)C;
  (void)s2_blk;
  for (c = 0; c < C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
  }
  for (c0 = 0; c0 + 4 <= C; c0 += 4) {
    for (row = 0; row < M; row += 256) {
      cm_block4(x + (size_t)row * stride + (size_t)c0, M - row > 256 ? 256 : M - row,
                stride, &s1[c0], &s2[c0]);
    }
  }
  for (; c0 < C; ++c0) cm_channel(x + c0, M, stride, &s1[c0], &s2[c0]);
  return 1;
}

/* ------------------------------------------------------- per element: affine
 * The asm blocks below name FPU registers explicitly (s0-s15 work, s16-s23
 * coefficients, s24 = 128.5f, s25 = ramp step) and list them as clobbers. */

/* One row of four channels: word %[w] of q bytes -> packed u bytes in %[d0]
 * (u = clamp(trunc(fl(fl(fl((float)(q - z_x) * A) + B) + 128.5f)), 0, 255)).
 * Uses s0-s3, %[w], %[t], %[d0], %[d1]; %[nzx] = -z_x. */
#define CM_AFFINE4_U8                                   \
  "sxtab %[d0], %[nzx], %[w]\n\t"                       \
  "sxtab %[d1], %[nzx], %[w], ror #8\n\t"               \
  "vmov s0, s1, %[d0], %[d1]\n\t"                       \
  "sxtab %[d0], %[nzx], %[w], ror #16\n\t"              \
  "sxtab %[d1], %[nzx], %[w], ror #24\n\t"              \
  "vmov s2, s3, %[d0], %[d1]\n\t"                       \
  "vcvt.f32.s32 s0, s0\n\t"                             \
  "vcvt.f32.s32 s1, s1\n\t"                             \
  "vcvt.f32.s32 s2, s2\n\t"                             \
  "vcvt.f32.s32 s3, s3\n\t"                             \
  "vmul.f32 s0, s0, s16\n\t"                            \
  "vmul.f32 s1, s1, s17\n\t"                            \
  "vmul.f32 s2, s2, s18\n\t"                            \
  "vmul.f32 s3, s3, s19\n\t"                            \
  "vadd.f32 s0, s0, s20\n\t"                            \
  "vadd.f32 s1, s1, s21\n\t"                            \
  "vadd.f32 s2, s2, s22\n\t"                            \
  "vadd.f32 s3, s3, s23\n\t"                            \
  "vadd.f32 s0, s0, s24\n\t"                            \
  "vadd.f32 s1, s1, s24\n\t"                            \
  "vadd.f32 s2, s2, s24\n\t"                            \
  "vadd.f32 s3, s3, s24\n\t"                            \
  "vcvt.s16.f32 s0, s0, #0\n\t"                         \
  "vcvt.s16.f32 s1, s1, #0\n\t"                         \
  "vcvt.s16.f32 s2, s2, #0\n\t"                         \
  "vcvt.s16.f32 s3, s3, #0\n\t"                         \
  "vmov %[d0], %[d1], s0, s1\n\t"                       \
  "vmov %[w], %[t], s2, s3\n\t"                         \
  "pkhbt %[d0], %[d0], %[w], lsl #16\n\t" /* u0, u2 */  \
  "pkhbt %[d1], %[d1], %[t], lsl #16\n\t" /* u1, u3 */  \
  "usat16 %[d0], #8, %[d0]\n\t"                         \
  "usat16 %[d1], #8, %[d1]\n\t"                         \
  "orr %[d0], %[d0], %[d1], lsl #8\n\t"

#define CM_FPU_CLOBBERS                                                       \
  "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11",   \
      "s12", "s13", "s14", "s15", "s16", "s17", "s18", "s19", "s20", "s21",   \
      "s22", "s23", "s24", "s25"

/* Channels c..c+3 (ab: A[c..c+3], B[c..c+3], 128.5f) of `rows` rows from xp,
 * yp at stride; output u - 128 with u in [0, 255] (no activation clamp). */
static void affine4_sat(const int8_t* xp, int8_t* yp, int32_t rows,
                        int32_t stride, int32_t z_x, const float* ab) {
  const int8_t* p = xp;
  const int32_t yd = (int32_t)(yp - xp);
  const int32_t yd2 = yd + stride;
  const int32_t stride2 = 2 * stride;
  int32_t pairs = rows >> 1;
  uint32_t w, t, d0, d1;
  if (pairs > 0) {
    __asm__ volatile(
        "vldmia %[ab], {s16-s24}\n\t"
        "1:\n\t"
        "ldr %[w], [%[p]]\n\t" CM_AFFINE4_U8
        "eor %[d0], %[d0], #0x80808080\n\t"
        "str %[d0], [%[p], %[yd]]\n\t"
        "ldr %[w], [%[p], %[st]]\n\t" CM_AFFINE4_U8
        "eor %[d0], %[d0], #0x80808080\n\t"
        "str %[d0], [%[p], %[yd2]]\n\t"
        "add %[p], %[p], %[st2]\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b\n\t"
        : [p] "+r"(p), [n] "+r"(pairs), [w] "=&r"(w), [t] "=&r"(t),
          [d0] "=&r"(d0), [d1] "=&r"(d1)
        : [yd] "r"(yd), [yd2] "r"(yd2), [st] "r"(stride), [st2] "r"(stride2),
          [nzx] "r"(-z_x), [ab] "r"(ab)
        : "cc", "memory", CM_FPU_CLOBBERS);
  }
  if (rows & 1) {
    __asm__ volatile(
        "vldmia %[ab], {s16-s24}\n\t"
        "ldr %[w], [%[p]]\n\t" CM_AFFINE4_U8
        "eor %[d0], %[d0], #0x80808080\n\t"
        "str %[d0], [%[p], %[yd]]\n\t"
        : [w] "=&r"(w), [t] "=&r"(t), [d0] "=&r"(d0), [d1] "=&r"(d1)
        : [p] "r"(p), [yd] "r"(yd), [nzx] "r"(-z_x), [ab] "r"(ab)
        : "cc", "memory", CM_FPU_CLOBBERS);
  }
}

/* Same with the bytewise clamp to [lo, hi] (lo4/hi4: lo/hi in every byte). */
static void affine4_clamp(const int8_t* xp, int8_t* yp, int32_t rows,
                          int32_t stride, int32_t z_x, const float* ab,
                          uint32_t lo4, uint32_t hi4) {
  const int8_t* p = xp;
  const int32_t yd = (int32_t)(yp - xp);
  int32_t n = rows;
  uint32_t w, t, d0, d1;
  __asm__ volatile(
      "vldmia %[ab], {s16-s24}\n\t"
      "1:\n\t"
      "ldr %[w], [%[p]]\n\t" CM_AFFINE4_U8
      "usub8 %[w], %[d0], %[lo]\n\t" /* max(u, lo) */
      "sel %[d0], %[d0], %[lo]\n\t"
      "usub8 %[w], %[hi], %[d0]\n\t" /* min(u, hi) */
      "sel %[d0], %[d0], %[hi]\n\t"
      "eor %[d0], %[d0], #0x80808080\n\t"
      "str %[d0], [%[p], %[yd]]\n\t"
      "add %[p], %[p], %[st]\n\t"
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      : [p] "+r"(p), [n] "+r"(n), [w] "=&r"(w), [t] "=&r"(t), [d0] "=&r"(d0),
        [d1] "=&r"(d1)
      : [yd] "r"(yd), [st] "r"(stride), [nzx] "r"(-z_x), [lo] "r"(lo4),
        [hi] "r"(hi4), [ab] "r"(ab)
      : "cc", "memory", CM_FPU_CLOBBERS);
}

static inline int32_t f2i_trunc(float w) {
  float t;
  int32_t r;
  __asm__("vcvt.s32.f32 %0, %1" : "=t"(t) : "t"(w));
  __asm__("vmov %0, %1" : "=r"(r) : "t"(t));
  return r;
}

/* SPEC per-element rule: returns y + 128 in [lo, hi] = [qmin+128, qmax+128]. */
static inline int32_t requant_u(int32_t d, float a, float b, int32_t lo,
                                int32_t hi) {
  const float prod = (float)d * a;
  const float v = prod + b;
  int32_t t = f2i_trunc(v + 128.5f);
  t = t < lo ? lo : t;
  return t > hi ? hi : t;
}

/* One channel, affine (the C % 4 channels): rows at stride, 4 per iteration. */
static void affine_channel(const int8_t* xp, int8_t* yp, int32_t M,
                           size_t stride, int32_t z_x, float a, float b,
                           int32_t lo, int32_t hi) {
  const size_t s2 = 2 * stride, s3 = 3 * stride, s4 = 4 * stride;
  int32_t i = 0;
  for (; i + 4 <= M; i += 4, xp += s4, yp += s4) {
    const int32_t d0 = xp[0] - z_x, d1 = xp[stride] - z_x;
    const int32_t d2 = xp[s2] - z_x, d3 = xp[s3] - z_x;
    yp[0] = (int8_t)(requant_u(d0, a, b, lo, hi) ^ 0x80);
    yp[stride] = (int8_t)(requant_u(d1, a, b, lo, hi) ^ 0x80);
    yp[s2] = (int8_t)(requant_u(d2, a, b, lo, hi) ^ 0x80);
    yp[s3] = (int8_t)(requant_u(d3, a, b, lo, hi) ^ 0x80);
  }
  for (; i < M; ++i, xp += stride, yp += stride) {
    yp[0] = (int8_t)(requant_u(xp[0] - z_x, a, b, lo, hi) ^ 0x80);
  }
}

/* -------------------------------------------------------- per element: table */

/* Entry u (before the [lo, hi] clamp) for d = q - z_x, scalar. */
static inline uint32_t entry_u8(float d, float a, float b) {
  const float prod = d * a;
  const float v = prod + b;
  return (uint32_t)__usat(f2i_trunc(v + 128.5f), 8);
}

static inline uint32_t entry_u(float d, float a, float b, int32_t lo,
                               int32_t hi) {
  int32_t u = (int32_t)entry_u8(d, a, b);
  u = u < lo ? lo : u;
  return (uint32_t)(u > hi ? hi : u);
}

/* Entries [8 * blk0, 8 * blk1) of a channel's table t (t[i] = y(q = i -
 * 128)); s8-s15 hold d for the first eight, s16 = A, s17 = B, s25 = 8.0f.
 * Eight entries per step: the SPEC formula, USAT16 to [0, 255], bytewise
 * clamp to [lo, hi], XOR 0x80. */
#define CM_TABLE_HALF(S0, S1, S2, S3, D0, D1, D2, D3)          \
  "vmul.f32 " S0 ", " D0 ", s16\n\t"                          \
  "vmul.f32 " S1 ", " D1 ", s16\n\t"                          \
  "vmul.f32 " S2 ", " D2 ", s16\n\t"                          \
  "vmul.f32 " S3 ", " D3 ", s16\n\t"                          \
  "vadd.f32 " S0 ", " S0 ", s17\n\t"                          \
  "vadd.f32 " S1 ", " S1 ", s17\n\t"                          \
  "vadd.f32 " S2 ", " S2 ", s17\n\t"                          \
  "vadd.f32 " S3 ", " S3 ", s17\n\t"                          \
  "vadd.f32 " S0 ", " S0 ", s24\n\t"                          \
  "vadd.f32 " S1 ", " S1 ", s24\n\t"                          \
  "vadd.f32 " S2 ", " S2 ", s24\n\t"                          \
  "vadd.f32 " S3 ", " S3 ", s24\n\t"                          \
  "vcvt.s16.f32 " S0 ", " S0 ", #0\n\t"                       \
  "vcvt.s16.f32 " S1 ", " S1 ", #0\n\t"                       \
  "vcvt.s16.f32 " S2 ", " S2 ", #0\n\t"                       \
  "vcvt.s16.f32 " S3 ", " S3 ", #0\n\t"                       \
  "vadd.f32 " D0 ", " D0 ", s25\n\t"                          \
  "vadd.f32 " D1 ", " D1 ", s25\n\t"                          \
  "vadd.f32 " D2 ", " D2 ", s25\n\t"                          \
  "vadd.f32 " D3 ", " D3 ", s25\n\t"

#define CM_TABLE_PACK(S0, S1, S2, S3, R)                   \
  "vmov %[d0], %[d1], " S0 ", " S1 "\n\t"                  \
  "vmov %[w], %[t], " S2 ", " S3 "\n\t"                    \
  "pkhbt %[d0], %[d0], %[w], lsl #16\n\t"                  \
  "pkhbt %[d1], %[d1], %[t], lsl #16\n\t"                  \
  "usat16 %[d0], #8, %[d0]\n\t"                            \
  "usat16 %[d1], #8, %[d1]\n\t"                            \
  "orr " R ", %[d0], %[d1], lsl #8\n\t"

/* k: d of the first eight entries, A, B, 128.5f, 8.0f. */
#define CM_TABLE_BLOCKS(CLAMP)                                                \
  __asm__ volatile(                                                           \
      "vldmia %[k], {s8-s17}\n\t"                                             \
      "vldr s24, [%[k], #40]\n\t"                                             \
      "vldr s25, [%[k], #44]\n\t"                                             \
      "1:\n\t" CM_TABLE_HALF("s0", "s1", "s2", "s3", "s8", "s9", "s10", "s11") \
          CM_TABLE_HALF("s4", "s5", "s6", "s7", "s12", "s13", "s14", "s15")   \
              CM_TABLE_PACK("s0", "s1", "s2", "s3", "%[r0]")                  \
                  CM_TABLE_PACK("s4", "s5", "s6", "s7", "%[r1]") CLAMP        \
      "eor %[r0], %[r0], #0x80808080\n\t"                                     \
      "eor %[r1], %[r1], #0x80808080\n\t"                                     \
      "str %[r0], [%[tp]], #4\n\t"                                            \
      "str %[r1], [%[tp]], #4\n\t"                                            \
      "subs %[n], %[n], #1\n\t"                                               \
      "bne 1b\n\t"                                                            \
      : [tp] "+r"(t), [n] "+r"(blocks), [w] "=&r"(w), [t] "=&r"(tt),         \
        [d0] "=&r"(d0), [d1] "=&r"(d1), [r0] "=&r"(r0), [r1] "=&r"(r1)        \
      : [k] "r"(k), [lo] "r"(lo4), [hi] "r"(hi4)                              \
      : "cc", "memory", CM_FPU_CLOBBERS)

#define CM_TABLE_CLAMP                  \
  "usub8 %[w], %[r0], %[lo]\n\t"       \
  "sel %[r0], %[r0], %[lo]\n\t"        \
  "usub8 %[w], %[hi], %[r0]\n\t"       \
  "sel %[r0], %[r0], %[hi]\n\t"        \
  "usub8 %[w], %[r1], %[lo]\n\t"       \
  "sel %[r1], %[r1], %[lo]\n\t"        \
  "usub8 %[w], %[hi], %[r1]\n\t"       \
  "sel %[r1], %[r1], %[hi]\n\t"

static void table_blocks(int8_t* t, int32_t blocks, float d_first, float a,
                         float b, uint32_t lo4, uint32_t hi4) {
  float k[12];
  uint32_t w, tt, d0, d1, r0, r1;
  int32_t i;
  for (i = 0; i < 8; ++i) k[i] = d_first + (float)i; /* exact integers */
  k[8] = a;
  k[9] = b;
  k[10] = 128.5f;
  k[11] = 8.0f;
  if (lo4 == 0 && hi4 == 0xFFFFFFFFu) {
    CM_TABLE_BLOCKS("");
  } else {
    CM_TABLE_BLOCKS(CM_TABLE_CLAMP);
  }
}

/* n bytes (a multiple of 8) of t (4-byte aligned) set to v. */
static void fill8(int8_t* t, uint32_t v, int32_t n) {
  const uint32_t v4 = v * 0x01010101u;
  for (; n > 0; n -= 8, t += 8) {
    memcpy(t, &v4, 4); /* STR */
    memcpy(t + 4, &v4, 4);
  }
}

/* Table of one channel: t[i] = y(q = i - 128), d = q - z_x exact in float
 * (|d| <= 255). */
static void build_table(int8_t* t, int32_t z_x, float a, float b, int32_t lo,
                        int32_t hi) {
  const uint32_t lo4 = (uint32_t)lo * 0x01010101u;
  const uint32_t hi4 = (uint32_t)hi * 0x01010101u;
  const float d0 = (float)(-128 - z_x);
  int32_t blo = 0, bhi = 32;
  /* Monotonic in d when A >= 0 (or -0) finite and B finite: skip the
   * blocks of 8 that are lo (last entry lo) or hi (first entry hi). */
  if (a >= 0.0f && a <= FLT_MAX && b >= -FLT_MAX && b <= FLT_MAX) {
    while (blo < 32 &&
           entry_u(d0 + (float)(8 * blo + 7), a, b, lo, hi) == (uint32_t)lo)
      ++blo;
    while (bhi > blo &&
           entry_u(d0 + (float)(8 * bhi - 8), a, b, lo, hi) == (uint32_t)hi)
      --bhi;
  }
  fill8(t, (uint32_t)lo ^ 0x80u, 8 * blo);
  if (bhi > blo) {
    table_blocks(t + 8 * blo, bhi - blo, d0 + (float)(8 * blo), a, b, lo4,
                 hi4);
  }
  fill8(t + 8 * bhi, (uint32_t)hi ^ 0x80u, 8 * (32 - bhi));
}

/* One row of channels c..c+3 through their tables (%[t0]: table of c + 128;
 * the next channels' tables follow at 256-byte steps): word %[w] of q bytes
 * -> packed y bytes in %[b0]. */
#define CM_LUT4                                \
  "sxtab %[i], %[t0], %[w]\n\t"               \
  "ldrb %[b0], [%[i]]\n\t"                    \
  "sxtab %[i], %[t0], %[w], ror #8\n\t"       \
  "ldrb %[b1], [%[i], #256]\n\t"              \
  "sxtab %[i], %[t0], %[w], ror #16\n\t"      \
  "orr %[b0], %[b0], %[b1], lsl #8\n\t"       \
  "ldrb %[b1], [%[i], #512]\n\t"              \
  "sxtab %[i], %[t0], %[w], ror #24\n\t"      \
  "orr %[b0], %[b0], %[b1], lsl #16\n\t"      \
  "ldrb %[b1], [%[i], #768]\n\t"              \
  "orr %[b0], %[b0], %[b1], lsl #24\n\t"

/* Channels c..c+3 through their tables (t128: table of c, + 128), `rows`
 * rows at stride, two per iteration. */
static void lut4(const int8_t* xp, int8_t* yp, int32_t rows, int32_t stride,
                 const uint8_t* t128) {
  const int8_t* p = xp;
  const int32_t yd = (int32_t)(yp - xp);
  const int32_t yd2 = yd + stride;
  const int32_t stride2 = 2 * stride;
  int32_t pairs = rows >> 1;
  uint32_t w, i, b0, b1;
  if (pairs > 0) {
    __asm__ volatile(
        "1:\n\t"
        "ldr %[w], [%[p]]\n\t" CM_LUT4
        "str %[b0], [%[p], %[yd]]\n\t"
        "ldr %[w], [%[p], %[st]]\n\t" CM_LUT4
        "str %[b0], [%[p], %[yd2]]\n\t"
        "add %[p], %[p], %[st2]\n\t"
        "subs %[n], %[n], #1\n\t"
        "bne 1b\n\t"
        : [p] "+r"(p), [n] "+r"(pairs), [w] "=&r"(w), [i] "=&r"(i),
          [b0] "=&r"(b0), [b1] "=&r"(b1)
        : [yd] "r"(yd), [yd2] "r"(yd2), [st] "r"(stride), [st2] "r"(stride2),
          [t0] "r"(t128)
        : "cc", "memory");
  }
  if (rows & 1) {
    __asm__ volatile(
        "ldr %[w], [%[p]]\n\t" CM_LUT4
        "str %[b0], [%[p], %[yd]]\n\t"
        : [w] "=&r"(w), [i] "=&r"(i), [b0] "=&r"(b0), [b1] "=&r"(b1)
        : [p] "r"(p), [yd] "r"(yd), [t0] "r"(t128)
        : "cc", "memory");
  }
}

static void lut_channel(const int8_t* xp, int8_t* yp, int32_t M,
                        size_t stride, const int8_t* t128) {
  const size_t s2 = 2 * stride, s3 = 3 * stride, s4 = 4 * stride;
  int32_t i = 0;
  for (; i + 4 <= M; i += 4, xp += s4, yp += s4) {
    const int8_t q0 = xp[0], q1 = xp[stride], q2 = xp[s2], q3 = xp[s3];
    yp[0] = t128[q0];
    yp[stride] = t128[q1];
    yp[s2] = t128[q2];
    yp[s3] = t128[q3];
  }
  for (; i < M; ++i, xp += stride, yp += stride) yp[0] = t128[xp[0]];
}

static int cm_elementwise(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                          const float* a, const float* b,
                          const forge_recalib_quant* quant, int8_t* lut) {
  const int32_t lo = quant->qmin + 128, hi = quant->qmax + 128;
  const size_t stride = (size_t)C;
  const int32_t c4 = C & ~3;
  int32_t c;
  if (lut != NULL) {
    for (c = 0; c < C; ++c) {
      build_table(lut + (size_t)c * 256u, quant->z_x, a[c], b[c], lo, hi);
    }
    for (c = 0; c < c4; c += 4) {
      lut4(x + c, y + c, M, C, (const uint8_t*)lut + (size_t)c * 256u + 128u);
    }
    for (; c < C; ++c) {
      lut_channel(x + c, y + c, M, stride, lut + (size_t)c * 256u + 128u);
    }
    return 1;
  }
  for (c = 0; c < c4; c += 4) {
    float ab[9];
    int32_t k;
    for (k = 0; k < 4; ++k) {
      ab[k] = a[c + k];
      ab[4 + k] = b[c + k];
    }
    ab[8] = 128.5f;
    if (lo == 0 && hi == 255) {
      affine4_sat(x + c, y + c, M, C, quant->z_x, ab);
    } else {
      affine4_clamp(x + c, y + c, M, C, quant->z_x, ab,
                    (uint32_t)lo * 0x01010101u, (uint32_t)hi * 0x01010101u);
    }
  }
  for (; c < C; ++c) {
    affine_channel(x + c, y + c, M, stride, quant->z_x, a[c], b[c], lo, hi);
  }
  return 1;
}

/* ------------------------------------------- per element: arithmetic int
 * SPEC I8, y = clamp((q * mult + bias) >> S, qmin, qmax): two adjacent
 * channels by two rows per step, their multipliers and biases in registers
 * (four channels would need 13 registers with the pointers). Per element
 * LDRSB, MLA, SSAT #8 with ASR #S (S is the tensor's, an immediate: one loop
 * per S in [15, 22]), STRB: exact int32 as the ansi loop (|q * mult + bias|
 * < 2^31). SSAT's [-128, 127] is the whole clamp when [qmin, qmax] is; other
 * ranges take the C loop below. */
#define CM_INT_ELEM(OFF, MK, BK)                    \
  "ldrsb %[t], [%[p]" OFF "]\n\t"                 \
  "mla %[t], %[t], %[" MK "], %[" BK "]\n\t"     \
  "ssat %[t], #8, %[t], asr %[s]\n\t"             \
  "strb %[t], [%[py]" OFF "]\n\t"

static inline __attribute__((always_inline)) void int2x2_sat(
    const int8_t* xp, int8_t* yp, int32_t pairs, int32_t stride,
    const int32_t* mult, const int32_t* bias, const int32_t S) {
  const int8_t* p = xp;
  int8_t* py = yp;
  int32_t n = pairs, t;
  __asm__ volatile(
      "1:\n\t" CM_INT_ELEM("", "m0", "b0") CM_INT_ELEM(", #1", "m1", "b1")
          CM_INT_ELEM(", %[st]", "m0", "b0") CM_INT_ELEM(", %[st1]", "m1", "b1")
      "add %[p], %[p], %[st2]\n\t"
      "add %[py], %[py], %[st2]\n\t"
      "subs %[n], %[n], #1\n\t"
      "bne 1b\n\t"
      : [p] "+r"(p), [py] "+r"(py), [n] "+r"(n), [t] "=&r"(t)
      : [st] "r"(stride), [st1] "r"(stride + 1), [st2] "r"(2 * stride),
        [m0] "r"(mult[0]), [m1] "r"(mult[1]), [b0] "r"(bias[0]),
        [b1] "r"(bias[1]), [s] "i"(S)
      : "cc", "memory");
}

/* Channels c, c+1, full range, `pairs` pairs of rows, at the shift s. */
static void int2x2_sat_any(const int8_t* xp, int8_t* yp, int32_t pairs,
                           int32_t stride, const int32_t* mult,
                           const int32_t* bias, int32_t s) {
  switch (s) {
    case 15: int2x2_sat(xp, yp, pairs, stride, mult, bias, 15); break;
    case 16: int2x2_sat(xp, yp, pairs, stride, mult, bias, 16); break;
    case 17: int2x2_sat(xp, yp, pairs, stride, mult, bias, 17); break;
    case 18: int2x2_sat(xp, yp, pairs, stride, mult, bias, 18); break;
    case 19: int2x2_sat(xp, yp, pairs, stride, mult, bias, 19); break;
    case 20: int2x2_sat(xp, yp, pairs, stride, mult, bias, 20); break;
    case 21: int2x2_sat(xp, yp, pairs, stride, mult, bias, 21); break;
    default: int2x2_sat(xp, yp, pairs, stride, mult, bias, 22); break;
  }
}

/* One channel, any [qmin, qmax]: rows at stride. */
static void int_channel_c(const int8_t* xp, int8_t* yp, int32_t M, size_t stride,
                          int32_t m, int32_t b, int32_t s, int32_t qmin,
                          int32_t qmax) {
  int32_t i;
  for (i = 0; i < M; ++i, xp += stride, yp += stride) {
    int32_t v = ((int32_t)xp[0] * m + b) >> s;
    v = v < qmin ? qmin : v > qmax ? qmax : v;
    yp[0] = (int8_t)v;
  }
}

static int cm_int_elementwise(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                              const int32_t* mult, const int32_t* bias,
                              int32_t shift, const forge_recalib_quant* quant) {
  const int full = quant->qmin == -128 && quant->qmax == 127;
  const size_t last = (size_t)(M - 1) * (size_t)C; /* the odd row, if any */
  int32_t c = 0;
  if (M < 1 || shift < 15 || shift > 22) return 0; /* not I8's: the ansi loop */
  if (full && M >= 2) {
    for (; c + 2 <= C; c += 2) {
      int2x2_sat_any(x + c, y + c, M >> 1, C, mult + c, bias + c, shift);
      if (M & 1) {
        int_channel_c(x + last + c, y + last + c, 1, 1, mult[c], bias[c], shift,
                      -128, 127);
        int_channel_c(x + last + c + 1, y + last + c + 1, 1, 1, mult[c + 1],
                      bias[c + 1], shift, -128, 127);
      }
    }
  }
  for (; c < C; ++c) {
    int_channel_c(x + c, y + c, M, (size_t)C, mult[c], bias[c], shift,
                  quant->qmin, quant->qmax);
  }
  return 1;
}

static const forge_recalib_hooks kCortexmHooks = {
    cm_stats, cm_elementwise, FORGE_RECALIB_CORTEXM_LUT_MIN_M,
    cm_int_elementwise};

int forge_recalib_s8_cortexm(const forge_recalib_args* args, const char** msg) {
  return forge_recalib_s8_hooked(args, &kCortexmHooks, msg);
}

#endif /* FORGE_RECALIB_CORTEXM_AVAILABLE */

/* ISO C forbids an empty translation unit. */
typedef int forge_recalib_cortexm_translation_unit_not_empty;
