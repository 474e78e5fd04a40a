/* FORGE_RECALIB for Cortex-M with Helium (Armv8.1-M MVE with floating point:
 * Cortex-M55/M85): forge_recalib_s8_mve.
 *
 * Compiles to nothing unless the compiler targets MVE-F
 * (FORGE_RECALIB_MVE_AVAILABLE, forge_recalib.h). Validation and every
 * per-channel float32 step are forge_recalib.c's (forge_recalib_s8_hooked);
 * this file replaces the hot loops: the float arithmetic's two on groups of 8
 * channels (full groups unpredicated, two per row step where C % 16 == 0; the
 * last group, when C % 8 != 0, predicated with VCTP, so any C works), and the
 * integer arithmetic's per-element loop:
 *
 *   stats: VLDRB.S16 loads 8 channels of a row; VADD.I16 keeps int16 lane sums
 *     of q (exact for <= 256 rows), VMULLB/VMULLT.S16 the even/odd lanes'
 *     q*q as int32, added into int32 lane sums (exact for 65536 rows); both
 *     flushed every 256 rows. Exact integers: S1/S2 are the ansi ones.
 *
 *   per element, affine: VLDRB.S16 + VSUB (d = q - z_x exact in int16),
 *     VCVT.F16.S16 (exact: |d| <= 255 < 2^11) and VCVTB/VCVTT.F32.F16 (exact)
 *     give (float)d in even/odd int32 lanes, then per lane exactly the SPEC
 *     float32 steps in order: VMUL A, VADD B, VADD 128.5f (separate
 *     instructions: no FMA), VCVT toward zero (saturating; NaN -> 0). The clamp
 *     to [qmin, qmax] is done after the + 128.5f in the integer domain:
 *     rounding is monotonic and qmin + 128.5f, qmax + 128.5f are exact, so
 *     this equals the SPEC's clamp-then-add, NaN mapping to qmin included
 *     (same argument as forge_recalib_x86.c). VQMOVNB/VQMOVNT (saturating to
 *     int16) and VQMOVUNB (saturating to [0, 255], which contains [lo, hi] =
 *     [qmin + 128, qmax + 128]) narrow it; when [lo, hi] != [0, 255],
 *     VQSUB/VQADD with scalars clamp the bytes (max(u, lo) = sat(u - lo) + lo,
 *     min(.., hi) likewise). y = u - 128.
 *
 *   per element, table (AUTO from M >= FORGE_RECALIB_MVE_LUT_MIN_M): each
 *     channel's 256 entries by the same formula, 16 entries per step (four
 *     float32x4 of d, narrowed to one uint8x16 by VQMOVN(U)B/T), then per 8
 *     channels of a row one gather load (VLDRB.U16 with offsets lane * 256 +
 *     q + 128) from the group's tables. With A >= 0 finite and B finite
 *     (always, but for overflowed coefficients) an entry is a nondecreasing
 *     function of q (every step is monotonic), so the blocks of 16 entries
 *     whose last entry is lo (first entry is hi) are lo (hi) throughout and
 *     are filled without evaluation (the blocks are counted on their 16 last
 *     / first entries, four per vector).
 *
 *   arithmetic int (forge_recalib_int.c runs the invocation with mve_stats and
 *     this file's SPEC I8 loop, mve_int_elementwise): four channels per vector
 *     in int32 lanes (below).
 *
 * Subnormals: should the vector unit flush them to zero (MVE may run with
 * the standard FPSCR value), the outputs do not change: flushing a subnormal
 * A, B, d * A (|d| <= 255) or v changes v = fl(d * A + B) only when v is
 * below 2^-90 in magnitude with and without flushing (otherwise the flushed
 * value is under half an ulp of the other operand), and then
 * w = fl(v + 128.5f) = 128.5f either way (ulp(128.5f) = 2^-16).
 */
#include "forge_recalib.h"

#if defined(FORGE_RECALIB_MVE_AVAILABLE)

#include <arm_mve.h>
#include <float.h>
#include <string.h>

#ifndef FORGE_RECALIB_MVE_LUT_MIN_M
#define FORGE_RECALIB_MVE_LUT_MIN_M 512
#endif

/* The inner loops are inline asm with explicit Q registers (listed as
 * clobbers): GCC 12 spills the accumulators and coefficient vectors of these
 * loops to the stack (8 Q registers), and the assembler of this toolchain
 * (GNU as 2.40) encodes VCVTB/VCVTT.F32.F16 with the Q register numbers
 * doubled (vcvtbq_f32_f16 from C included: wrong results), so those two are
 * emitted as .inst words, encoding 0xFE3F0E01 | Qd << 13 | T << 12 | Qm << 1
 * (Armv8.1-M ARM; what QEMU decodes). */
#define MVE_VCVTB_F32_F16_Q1_Q0 ".inst.w 0xFE3F2E01\n\t"
#define MVE_VCVTT_F32_F16_Q2_Q0 ".inst.w 0xFE3F5E01\n\t"
#define MVE_QCLOBBERS "q0", "q1", "q2", "q3", "q4", "q5", "q6", "q7"

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* ----------------------------------------------------------------- stats */

/* Adds lane sums t1 (q), te/to (q*q of even/odd lanes) of `lanes` channels. */
static void stats_flush(const int16_t* t1, const int32_t* te,
                        const int32_t* to, int32_t lanes, int32_t* s1,
                        int64_t* s2) {
  int32_t k;
  for (k = 0; k < lanes; ++k) {
    s1[k] += t1[k];
    s2[k] += (k & 1) ? to[k >> 1] : te[k >> 1];
  }
}

/* 16 channels at p (two groups of 8: loads at p and p + 8, one pointer step
 * per row; C == 16: rows contiguous, post-increment), 1 <= n <= 256 rows. */
#define MVE_STATS16(LOAD_A, LOAD_B, STEP)                                     \
  __asm__ volatile(                                                           \
      "vmov.i32 q0, #0\n\t"                                                   \
      "vmov.i32 q1, #0\n\t"                                                   \
      "vmov.i32 q2, #0\n\t"                                                   \
      "vmov.i32 q3, #0\n\t"                                                   \
      "vmov.i32 q4, #0\n\t"                                                   \
      "vmov.i32 q5, #0\n\t"                                                   \
      "dls lr, %[n]\n"                                                        \
      "1:\n\t" LOAD_B                                                         \
      "vadd.i16 q3, q3, q6\n\t"                                               \
      "vmullb.s16 q7, q6, q6\n\t"                                             \
      "vadd.i32 q4, q4, q7\n\t"                                               \
      "vmullt.s16 q7, q6, q6\n\t"                                             \
      "vadd.i32 q5, q5, q7\n\t" LOAD_A STEP                                   \
      "vadd.i16 q0, q0, q6\n\t"                                               \
      "vmullb.s16 q7, q6, q6\n\t"                                             \
      "vadd.i32 q1, q1, q7\n\t"                                               \
      "vmullt.s16 q7, q6, q6\n\t"                                             \
      "vadd.i32 q2, q2, q7\n\t"                                               \
      "le lr, 1b\n\t"                                                         \
      "vstrh.16 q0, [%[o1]]\n\t"                                              \
      "vstrh.16 q3, [%[o1], #16]\n\t"                                         \
      "vstrw.32 q1, [%[oe]]\n\t"                                              \
      "vstrw.32 q4, [%[oe], #16]\n\t"                                         \
      "vstrw.32 q2, [%[oo]]\n\t"                                              \
      "vstrw.32 q5, [%[oo], #16]\n\t"                                         \
      : [p] "+r"(p)                                                           \
      : [n] "r"(n), [st] "r"(stride), [o1] "r"(t1), [oe] "r"(te),             \
        [oo] "r"(to)                                                          \
      : "memory", "lr", MVE_QCLOBBERS)

static void stats16_block(const int8_t* p, int32_t n, int32_t stride,
                          int32_t* s1, int64_t* s2) {
  int16_t t1[16];
  int32_t te[8], to[8];
  if (stride == 16) {
    MVE_STATS16("vldrb.s16 q6, [%[p]], #16\n\t", "vldrb.s16 q6, [%[p], #8]\n\t",
                "");
  } else {
    MVE_STATS16("vldrb.s16 q6, [%[p]]\n\t", "vldrb.s16 q6, [%[p], #8]\n\t",
                "add %[p], %[p], %[st]\n\t");
  }
  stats_flush(t1, te, to, 8, s1, s2);
  stats_flush(t1 + 8, te + 4, to + 4, 8, s1 + 8, s2 + 8);
}

/* 8 channels at p, 1 <= n <= 256 rows. */
static void stats8_block(const int8_t* p, int32_t n, int32_t stride,
                         int32_t* s1, int64_t* s2) {
  int16_t t1[8];
  int32_t te[4], to[4];
  __asm__ volatile(
      "vmov.i32 q0, #0\n\t"
      "vmov.i32 q1, #0\n\t"
      "vmov.i32 q2, #0\n\t"
      "dls lr, %[n]\n"
      "1:\n\t"
      "vldrb.s16 q6, [%[p]]\n\t"
      "add %[p], %[p], %[st]\n\t"
      "vadd.i16 q0, q0, q6\n\t"
      "vmullb.s16 q7, q6, q6\n\t"
      "vadd.i32 q1, q1, q7\n\t"
      "vmullt.s16 q7, q6, q6\n\t"
      "vadd.i32 q2, q2, q7\n\t"
      "le lr, 1b\n\t"
      "vstrh.16 q0, [%[o1]]\n\t"
      "vstrw.32 q1, [%[oe]]\n\t"
      "vstrw.32 q2, [%[oo]]\n\t"
      : [p] "+r"(p)
      : [n] "r"(n), [st] "r"(stride), [o1] "r"(t1), [oe] "r"(te),
        [oo] "r"(to)
      : "memory", "lr", MVE_QCLOBBERS);
  stats_flush(t1, te, to, 8, s1, s2);
}

/* The last, partial group (lanes < 8 channels), predicated; n <= 256 rows. */
static void stats_tail_block(const int8_t* p, int32_t n, size_t stride,
                             int32_t lanes, int32_t* s1, int64_t* s2) {
  const mve_pred16_t pred = vctp16q((uint32_t)lanes);
  int16x8_t acc1 = vdupq_n_s16(0);
  int32x4_t acc_ev = vdupq_n_s32(0), acc_od = vdupq_n_s32(0);
  int16_t t1[8];
  int32_t te[4], to[4];
  int32_t k;
  for (k = 0; k < n; ++k, p += stride) {
    const int16x8_t q = vldrbq_z_s16(p, pred); /* inactive lanes: 0 */
    acc1 = vaddq_s16(acc1, q);
    acc_ev = vaddq_s32(acc_ev, vmullbq_int_s16(q, q));
    acc_od = vaddq_s32(acc_od, vmulltq_int_s16(q, q));
  }
  vst1q_s16(t1, acc1);
  vst1q_s32(te, acc_ev);
  vst1q_s32(to, acc_od);
  stats_flush(t1, te, to, lanes, s1, s2);
}

static int mve_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                     int32_t* s1, int32_t* s2_blk) {
  const int32_t c16 = C & ~15, c8 = C & ~7;
  int32_t c0, c, row;
  (void)s2_blk;
  for (c = 0; c < C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
  }
  for (c0 = 0; c0 < C; c0 += c0 < c16 ? 16 : 8) {
    for (row = 0; row < M; row += 256) {
      const int32_t n = M - row > 256 ? 256 : M - row;
      const int8_t* p = x + (size_t)row * (size_t)C + (size_t)c0;
      if (c0 < c16) {
        stats16_block(p, n, C, s1 + c0, s2 + c0);
      } else if (c0 < c8) {
        stats8_block(p, n, C, s1 + c0, s2 + c0);
      } else {
        stats_tail_block(p, n, (size_t)C, C - c0, s1 + c0, s2 + c0);
      }
    }
  }
  return 1;
}

/* ------------------------------------------------------ per element: affine */

/* Coefficients of channels c0..c0+lanes-1 as {A even, B even, A odd, B odd}
 * lanes (0 beyond `lanes`). */
static void load_coeffs(const float* a, const float* b, int32_t c0,
                        int32_t lanes, float* cf) {
  int32_t k;
  for (k = 0; k < 16; ++k) cf[k] = 0.0f;
  for (k = 0; k < lanes; ++k) {
    const int32_t o = (k & 1) ? 8 : 0;
    cf[o + (k >> 1)] = a[c0 + k];
    cf[o + 4 + (k >> 1)] = b[c0 + k];
  }
}

/* One full group of 8 channels, M >= 1 rows: q0 = d = q - z_x (int16),
 * VCVT.F16.S16 (exact), VCVTB/T to float32 (exact), the SPEC steps, VCVT
 * toward zero, VQMOVNB/T (int16), VQMOVUNB ([0, 255]), then CLAMP and the
 * bias (y = u - 128, or the clamped form, see affine_pass). */
#define MVE_AFFINE8(CLAMP)                                                    \
  __asm__ volatile(                                                           \
      "vldrw.u32 q4, [%[cf]]\n\t"                                             \
      "vldrw.u32 q5, [%[cf], #16]\n\t"                                        \
      "vldrw.u32 q6, [%[cf], #32]\n\t"                                        \
      "vldrw.u32 q7, [%[cf], #48]\n\t"                                        \
      "dls lr, %[n]\n"                                                        \
      "1:\n\t"                                                                \
      "vldrb.s16 q0, [%[x]]\n\t"                                              \
      "add %[x], %[x], %[st]\n\t"                                             \
      "vsub.i16 q0, q0, %[zx]\n\t"                                            \
      "vcvt.f16.s16 q0, q0\n\t" MVE_VCVTB_F32_F16_Q1_Q0                       \
          MVE_VCVTT_F32_F16_Q2_Q0                                             \
      "vmul.f32 q1, q1, q4\n\t"                                               \
      "vmul.f32 q2, q2, q6\n\t"                                               \
      "vadd.f32 q1, q1, q5\n\t"                                               \
      "vadd.f32 q2, q2, q7\n\t"                                               \
      "vadd.f32 q1, q1, %[k]\n\t"                                             \
      "vadd.f32 q2, q2, %[k]\n\t"                                             \
      "vcvt.s32.f32 q1, q1\n\t"                                               \
      "vcvt.s32.f32 q2, q2\n\t"                                               \
      "vqmovnb.s32 q3, q1\n\t"                                                \
      "vqmovnt.s32 q3, q2\n\t"                                                \
      "vqmovunb.s16 q0, q3\n\t" CLAMP                                         \
      "vadd.i8 q0, q0, %[bias]\n\t"                                           \
      "vstrb.16 q0, [%[y]]\n\t"                                               \
      "add %[y], %[y], %[st]\n\t"                                             \
      "le lr, 1b\n\t"                                                         \
      : [x] "+r"(xp), [y] "+r"(yp)                                            \
      : [n] "r"(M), [st] "r"(stride), [zx] "r"(z_x), [k] "r"(k128),           \
        [cf] "r"(cf), [lo] "r"(lo), [ha] "r"(hi_add), [bias] "r"(bias)        \
      : "memory", "lr", MVE_QCLOBBERS)

#define MVE_CLAMP_U8                \
  "vqsub.u8 q0, q0, %[lo]\n\t"      \
  "vqadd.u8 q0, q0, %[ha]\n\t"

static void affine8_full(const int8_t* xp, int8_t* yp, int32_t M,
                         int32_t stride, int32_t z_x, const float* cf,
                         int clamp, uint32_t lo, uint32_t hi_add,
                         uint32_t bias) {
  const uint32_t k128 = f32_bits(128.5f);
  if (clamp) {
    MVE_AFFINE8(MVE_CLAMP_U8);
  } else {
    MVE_AFFINE8("");
  }
}

/* The partial group (lanes < 8), predicated, C intrinsics: (float)d by
 * VMOVLB/VMOVLT + VCVT (exact), then the same steps as MVE_AFFINE8. */
static void affine_tail(const int8_t* xp, int8_t* yp, int32_t M,
                        size_t stride, int16_t z_x, const float* cf,
                        int32_t lanes, uint8_t lo, uint8_t hi_add,
                        uint8_t bias) {
  const mve_pred16_t pred = vctp16q((uint32_t)lanes);
  const float32x4_t a_ev = vld1q_f32(cf), b_ev = vld1q_f32(cf + 4);
  const float32x4_t a_od = vld1q_f32(cf + 8), b_od = vld1q_f32(cf + 12);
  int32_t row;
  for (row = 0; row < M; ++row, xp += stride, yp += stride) {
    const int16x8_t d = vsubq_n_s16(vldrbq_z_s16(xp, pred), z_x);
    const float32x4_t fe = vcvtq_f32_s32(vmovlbq_s16(d)); /* exact */
    const float32x4_t fo = vcvtq_f32_s32(vmovltq_s16(d));
    const float32x4_t ve = vaddq_f32(vmulq_f32(fe, a_ev), b_ev);
    const float32x4_t vo = vaddq_f32(vmulq_f32(fo, a_od), b_od);
    const int32x4_t te = vcvtq_s32_f32(vaddq_n_f32(ve, 128.5f));
    const int32x4_t to = vcvtq_s32_f32(vaddq_n_f32(vo, 128.5f));
    int16x8_t t = vqmovnbq_s32(vdupq_n_s16(0), te); /* saturating */
    uint8x16_t u;
    t = vqmovntq_s32(t, to);
    u = vqmovunbq_s16(vdupq_n_u8(0), t); /* [0, 255] */
    u = vqaddq_n_u8(vqsubq_n_u8(u, lo), hi_add);
    vstrbq_p_s16(yp, vreinterpretq_s16_u8(vaddq_n_u8(u, bias)), pred);
  }
}

static void affine_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                        const float* a, const float* b,
                        const forge_recalib_quant* quant) {
  const int32_t lo = quant->qmin + 128, hi = quant->qmax + 128;
  const int clamp = lo != 0 || hi != 255;
  /* u in [0, 255]. Clamp: sat(u - lo) = max(u, lo) - lo, then sat(. +
   * 255 - (hi - lo)) = min(max(u, lo), hi) - lo + 255 - (hi - lo), so y =
   * min(max(u, lo), hi) - 128 = that + hi - 383 (mod 256). No clamp:
   * y = u - 128 = u + 128 (mod 256). */
  const uint8_t hi_add = (uint8_t)(255 - (hi - lo));
  const uint8_t bias_clamp = (uint8_t)((hi - 383) & 0xFF);
  const uint8_t bias = clamp ? bias_clamp : 128;
  int32_t c0;
  for (c0 = 0; c0 < C; c0 += 8) {
    const int32_t lanes = C - c0 < 8 ? C - c0 : 8;
    float cf[16];
    load_coeffs(a, b, c0, lanes, cf);
    if (lanes == 8) {
      affine8_full(x + c0, y + c0, M, C, quant->z_x, cf, clamp, (uint32_t)lo,
                   hi_add, bias);
    } else {
      affine_tail(x + c0, y + c0, M, (size_t)C, (int16_t)quant->z_x, cf,
                  lanes, (uint8_t)lo, hi_add, bias_clamp);
    }
  }
}

/* ------------------------------------------------------- per element: table */

/* `blocks` >= 1 blocks of 16 entries from t; the first block's entries have
 * d = d0 + {0, ..., 15}, in the lane order below. Lanes: D0 = entries {0, 4, 8, 12},
 * D1 = {2, 6, 10, 14}, D2 = {1, 5, 9, 13}, D3 = {3, 7, 11, 15}: VQMOVNB/T of
 * (D0, D1) gives the even entries in order, of (D2, D3) the odd ones, and
 * VQMOVUNB/T interleaves them into the block's 16 bytes. */
#define MVE_TABLE_CHAIN(Q, D)                 \
  "vmul.f32 " Q ", " D ", %[a]\n\t"           \
  "vadd.f32 " Q ", " Q ", %[b]\n\t"           \
  "vadd.f32 " Q ", " Q ", %[k]\n\t"           \
  "vcvt.s32.f32 " Q ", " Q "\n\t"

/* pp: {d0, A, B, 128.5f, 16.0f, blocks} (float bits / int). */
#define MVE_TABLE(CLAMP)                                                      \
  __asm__ volatile(                                                           \
      "ldr %[a], [%[pp]]\n\t"                                                 \
      "vldrw.u32 q4, [%[dv]]\n\t"                                             \
      "vldrw.u32 q5, [%[dv], #16]\n\t"                                        \
      "vldrw.u32 q6, [%[dv], #32]\n\t"                                        \
      "vldrw.u32 q7, [%[dv], #48]\n\t"                                        \
      "vadd.f32 q4, q4, %[a]\n\t" /* exact: small integers */                 \
      "vadd.f32 q5, q5, %[a]\n\t"                                             \
      "vadd.f32 q6, q6, %[a]\n\t"                                             \
      "vadd.f32 q7, q7, %[a]\n\t"                                             \
      "ldrd %[a], %[b], [%[pp], #4]\n\t"                                      \
      "ldrd %[k], %[s16], [%[pp], #12]\n\t"                                   \
      "ldr lr, [%[pp], #20]\n\t"                                              \
      "dls lr, lr\n"                                                          \
      "1:\n\t" MVE_TABLE_CHAIN("q0", "q4") MVE_TABLE_CHAIN("q1", "q5")        \
      "vqmovnb.s32 q2, q0\n\t"                                                \
      "vqmovnt.s32 q2, q1\n\t" MVE_TABLE_CHAIN("q0", "q6")                    \
          MVE_TABLE_CHAIN("q1", "q7")                                         \
      "vqmovnb.s32 q3, q0\n\t"                                                \
      "vqmovnt.s32 q3, q1\n\t"                                                \
      "vqmovunb.s16 q0, q2\n\t"                                               \
      "vqmovunt.s16 q0, q3\n\t" CLAMP                                         \
      "vadd.i8 q0, q0, %[bias]\n\t"                                           \
      "vstrb.8 q0, [%[t]], #16\n\t"                                           \
      "vadd.f32 q4, q4, %[s16]\n\t"                                           \
      "vadd.f32 q5, q5, %[s16]\n\t"                                           \
      "vadd.f32 q6, q6, %[s16]\n\t"                                           \
      "vadd.f32 q7, q7, %[s16]\n\t"                                           \
      "le lr, 1b\n\t"                                                         \
      : [t] "+r"(t), [a] "=&r"(ra), [b] "=&r"(rb), [k] "=&r"(rk),             \
        [s16] "=&r"(rs)                                                       \
      : [pp] "r"(pp), [dv] "r"(kTableRamp), [lo] "r"(lo), [ha] "r"(hi_add),   \
        [bias] "r"(bias)                                                      \
      : "memory", "lr", MVE_QCLOBBERS)

static const float kTableRamp[16] = {0, 4, 8,  12, 2, 6, 10, 14,
                                     1, 5, 9,  13, 3, 7, 11, 15};

static void table_blocks(int8_t* t, int32_t blocks, float d0, float a,
                         float b, int clamp, uint32_t lo, uint32_t hi_add,
                         uint32_t bias) {
  uint32_t pp[6] __attribute__((aligned(8)));
  uint32_t ra, rb, rk, rs;
  pp[0] = f32_bits(d0);
  pp[1] = f32_bits(a);
  pp[2] = f32_bits(b);
  pp[3] = f32_bits(128.5f);
  pp[4] = f32_bits(16.0f);
  pp[5] = (uint32_t)blocks;
  if (clamp) {
    MVE_TABLE(MVE_CLAMP_U8);
  } else {
    MVE_TABLE("");
  }
}

static void fill16(int8_t* t, int32_t blocks, uint8_t v) {
  const uint8x16_t vv = vdupq_n_u8(v);
  for (; blocks > 0; --blocks, t += 16) vstrbq_u8((uint8_t*)t, vv);
}

/* Number of the 16 values d0 + kd[i] whose SPEC truncation t (before the
 * clamp) is <= lo (le) or >= hi (!le). */
static inline __attribute__((always_inline)) int32_t probe_count(
    const float* kd, float d0, float a, float b, int32_t lim, int le) {
  const int32x4_t ones = vdupq_n_s32(1);
  int32_t n = 0, j;
  for (j = 0; j < 16; j += 4) {
    const float32x4_t d = vaddq_n_f32(vld1q_f32(kd + j), d0);
    const int32x4_t t = vcvtq_s32_f32(
        vaddq_n_f32(vaddq_n_f32(vmulq_n_f32(d, a), b), 128.5f));
    n = vaddvaq_p_s32(n, ones,
                      le ? vcmpleq_n_s32(t, lim) : vcmpgeq_n_s32(t, lim));
  }
  return n;
}

/* d of the last / first entry of each block of 16 (i = 16 j + 15 / 16 j). */
static const float kBlockLast[16] = {15,  31,  47,  63,  79,  95,  111, 127,
                                     143, 159, 175, 191, 207, 223, 239, 255};
static const float kBlockFirst[16] = {0,   16,  32,  48,  64,  80,  96,  112,
                                      128, 144, 160, 176, 192, 208, 224, 240};

/* Table of one channel: t[i] = y(q = i - 128), d = q - z_x exact
 * (|d| <= 255). In the monotonic case (see the top of the file) the entry's
 * truncation is nondecreasing in i, so the blocks of 16 whose last entry is
 * <= lo are the leading ones and are lo throughout, those whose first entry
 * is >= hi the trailing ones, hi throughout: both are filled without
 * evaluation (their number is counted on the 16 last / first entries). */
static __attribute__((noinline)) void build_table(int8_t* t, int32_t z_x,
                                                  float a, float b, int32_t lo,
                                                  int32_t hi) {
  const int clamp = lo != 0 || hi != 255;
  const uint8_t hi_add = (uint8_t)(255 - (hi - lo));
  const uint8_t bias = (uint8_t)(clamp ? (hi - 383) & 0xFF : 128);
  const float d_first = (float)(-128 - z_x);
  int32_t blo = 0, bhi = 16;
  if (lo == hi) { /* every entry is qmin = qmax */
    fill16(t, 16, (uint8_t)(lo ^ 0x80));
    return;
  }
  if (a >= 0.0f && a <= FLT_MAX && b >= -FLT_MAX && b <= FLT_MAX) {
    blo = probe_count(kBlockLast, d_first, a, b, lo, 1);
    bhi = 16 - probe_count(kBlockFirst, d_first, a, b, hi, 0);
  }
  fill16(t, blo, (uint8_t)(lo ^ 0x80));
  if (bhi > blo) {
    table_blocks(t + 16 * blo, bhi - blo, d_first + (float)(16 * blo), a, b,
                 clamp, (uint32_t)lo, hi_add, bias);
  }
  fill16(t + 16 * bhi, 16 - bhi, (uint8_t)(hi ^ 0x80));
}

/* Lane k of a group reads table k: offset k * 256 + (q + 128). */
static const uint16_t kLaneBase[8] = {128,        256 + 128,  512 + 128,
                                      768 + 128,  1024 + 128, 1280 + 128,
                                      1536 + 128, 1792 + 128};

/* Two full groups (16 channels, tables tg and tg + 2048), M >= 1 rows
 * (C == 16: rows contiguous, post-increment). */
#define MVE_LUT16(LOAD_A, STORE_A, STEP_X, STEP_Y)                            \
  __asm__ volatile(                                                           \
      "vldrh.u16 q7, [%[base]]\n\t"                                           \
      "dls lr, %[n]\n"                                                        \
      "1:\n\t"                                                                \
      "vldrb.s16 q1, [%[x], #8]\n\t" LOAD_A STEP_X                            \
      "vadd.i16 q0, q0, q7\n\t"                                               \
      "vadd.i16 q1, q1, q7\n\t"                                               \
      "vldrb.u16 q2, [%[t0], q0]\n\t"                                         \
      "vldrb.u16 q3, [%[t1], q1]\n\t"                                         \
      "vstrb.16 q3, [%[y], #8]\n\t" STORE_A STEP_Y                            \
      "le lr, 1b\n\t"                                                         \
      : [x] "+r"(xp), [y] "+r"(yp)                                            \
      : [n] "r"(M), [st] "r"(stride), [t0] "r"(tg), [t1] "r"(tg + 2048),      \
        [base] "r"(kLaneBase)                                                 \
      : "memory", "lr", MVE_QCLOBBERS)

static void lut16_full(const int8_t* xp, int8_t* yp, int32_t M,
                       int32_t stride, const uint8_t* tg) {
  if (stride == 16) {
    MVE_LUT16("vldrb.s16 q0, [%[x]], #16\n\t", "vstrb.16 q2, [%[y]], #16\n\t",
              "", "");
  } else {
    MVE_LUT16("vldrb.s16 q0, [%[x]]\n\t", "vstrb.16 q2, [%[y]]\n\t",
              "add %[x], %[x], %[st]\n\t", "add %[y], %[y], %[st]\n\t");
  }
}

/* One full group (8 channels), M >= 1 rows. */
static void lut8_full(const int8_t* xp, int8_t* yp, int32_t M, int32_t stride,
                      const uint8_t* tg) {
  __asm__ volatile(
      "vldrh.u16 q7, [%[base]]\n\t"
      "dls lr, %[n]\n"
      "1:\n\t"
      "vldrb.s16 q0, [%[x]]\n\t"
      "add %[x], %[x], %[st]\n\t"
      "vadd.i16 q0, q0, q7\n\t"
      "vldrb.u16 q2, [%[t0], q0]\n\t"
      "vstrb.16 q2, [%[y]]\n\t"
      "add %[y], %[y], %[st]\n\t"
      "le lr, 1b\n\t"
      : [x] "+r"(xp), [y] "+r"(yp)
      : [n] "r"(M), [st] "r"(stride), [t0] "r"(tg), [base] "r"(kLaneBase)
      : "memory", "lr", MVE_QCLOBBERS);
}

static void lut_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                     const float* a, const float* b,
                     const forge_recalib_quant* quant, int8_t* lut) {
  const int32_t lo = quant->qmin + 128, hi = quant->qmax + 128;
  int32_t c0, c;
  for (c = 0; c < C; ++c) {
    build_table(lut + (size_t)c * 256u, quant->z_x, a[c], b[c], lo, hi);
  }
  for (c0 = 0; c0 < C; c0 += 8) {
    const uint8_t* tg = (const uint8_t*)lut + (size_t)c0 * 256u;
    if (c0 + 16 <= C) {
      lut16_full(x + c0, y + c0, M, C, tg);
      c0 += 8;
    } else if (c0 + 8 <= C) {
      lut8_full(x + c0, y + c0, M, C, tg);
    } else { /* partial group, predicated */
      const mve_pred16_t pred = vctp16q((uint32_t)(C - c0));
      const uint16x8_t base = vld1q_u16(kLaneBase);
      const int8_t* xp = x + c0;
      int8_t* yp = y + c0;
      int32_t row;
      for (row = 0; row < M; ++row, xp += C, yp += C) {
        const uint16x8_t off = vaddq_u16(
            vreinterpretq_u16_s16(vldrbq_z_s16(xp, pred)), base);
        const uint16x8_t v = vldrbq_gather_offset_z_u16(tg, off, pred);
        vstrbq_p_u16((uint8_t*)yp, v, pred);
      }
    }
  }
}

static int mve_elementwise(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                           const float* a, const float* b,
                           const forge_recalib_quant* quant, int8_t* lut) {
  if (lut != NULL) {
    lut_pass(x, y, M, C, a, b, quant, lut);
  } else {
    affine_pass(x, y, M, C, a, b, quant);
  }
  return 1;
}

/* ------------------------------------------- per element: arithmetic int
 * SPEC I8, y = clamp((q * mult + bias) >> S, qmin, qmax), rows inner so a
 * group's multipliers, biases and bounds stay in registers: 8 channels of a
 * row per step (two VLDRB.S32), then per vector VMUL.I32 and VADD.I32 (exact:
 * |q * mult + bias| < 2^31), VSHL.S32 by -S (a truncating arithmetic shift:
 * the SPEC's >>), VMAX/VMIN, VSTRB.32 (the low byte of each lane). Channels
 * past the last full group of 8 go four at a time, predicated with VCTP. */
static void int_group8(const int8_t* xp, int8_t* yp, int32_t M, int32_t C,
                       const int32_t* mult, const int32_t* bias, int32_t rs,
                       int32x4_t lo, int32x4_t hi) {
  const int32x4_t m0 = vldrwq_s32(mult), m1 = vldrwq_s32(mult + 4);
  const int32x4_t b0 = vldrwq_s32(bias), b1 = vldrwq_s32(bias + 4);
  int32_t r;
  for (r = 0; r < M; ++r, xp += C, yp += C) {
    int32x4_t v0 = vldrbq_s32(xp), v1 = vldrbq_s32(xp + 4);
    v0 = vshlq_r_s32(vaddq_s32(vmulq_s32(v0, m0), b0), rs);
    v1 = vshlq_r_s32(vaddq_s32(vmulq_s32(v1, m1), b1), rs);
    vstrbq_s32(yp, vminq_s32(vmaxq_s32(v0, lo), hi));
    vstrbq_s32(yp + 4, vminq_s32(vmaxq_s32(v1, lo), hi));
  }
}

static void int_group4(const int8_t* xp, int8_t* yp, int32_t M, int32_t C,
                       const int32_t* mult, const int32_t* bias, int32_t rs,
                       int32x4_t lo, int32x4_t hi, int32_t lanes) {
  const mve_pred16_t p = vctp32q((uint32_t)lanes);
  const int32x4_t m = vldrwq_z_s32(mult, p), b = vldrwq_z_s32(bias, p);
  int32_t r;
  for (r = 0; r < M; ++r, xp += C, yp += C) {
    int32x4_t v = vldrbq_z_s32(xp, p);
    v = vshlq_r_s32(vaddq_s32(vmulq_s32(v, m), b), rs);
    vstrbq_p_s32(yp, vminq_s32(vmaxq_s32(v, lo), hi), p);
  }
}

static int mve_int_elementwise(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                               const int32_t* mult, const int32_t* bias,
                               int32_t shift, const forge_recalib_quant* quant) {
  const int32x4_t lo = vdupq_n_s32(quant->qmin), hi = vdupq_n_s32(quant->qmax);
  int32_t c = 0;
  for (; c + 8 <= C; c += 8) {
    int_group8(x + c, y + c, M, C, mult + c, bias + c, -shift, lo, hi);
  }
  for (; c < C; c += 4) {
    int_group4(x + c, y + c, M, C, mult + c, bias + c, -shift, lo, hi,
               C - c < 4 ? C - c : 4);
  }
  return 1;
}

static const forge_recalib_hooks kMveHooks = {
    mve_stats, mve_elementwise, FORGE_RECALIB_MVE_LUT_MIN_M, mve_int_elementwise};

int forge_recalib_s8_mve(const forge_recalib_args* args, const char** msg) {
  return forge_recalib_s8_hooked(args, &kMveHooks, msg);
}

#endif /* FORGE_RECALIB_MVE_AVAILABLE */

/* ISO C forbids an empty translation unit. */
typedef int forge_recalib_mve_translation_unit_not_empty;
