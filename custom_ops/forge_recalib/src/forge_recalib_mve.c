/* FORGE_RECALIB for Cortex-M with Helium (Armv8.1-M MVE with floating point:
 * Cortex-M55/M85): forge_recalib_s8_mve.
 *
 * Compiles to nothing unless the compiler targets MVE-F
 * (FORGE_RECALIB_MVE_AVAILABLE, forge_recalib.h). Validation and every
 * per-channel float32 step are forge_recalib.c's (forge_recalib_s8_hooked);
 * this file replaces the two hot loops, on groups of 8 channels (the last
 * group predicated with VCTP, so any C works):
 *
 *   stats: VLDRB.S16 loads 8 channels of a row; VADD.I16 keeps int16 lane sums
 *     of q (exact for <= 256 rows), VMULLB/VMULLT.S16 the even/odd lanes'
 *     q*q as int32, added into int32 lane sums (exact for 65536 rows); both
 *     flushed every 256 rows. Exact integers: S1/S2 are the ansi ones.
 *
 *   per element, affine: VLDRB.S16 + VSUB (q - z_x exact in int16), widened
 *     to even/odd int32 lanes (VMOVLB/VMOVLT), then per lane exactly the SPEC
 *     float32 steps in order: VCVT (exact), VMUL A, VADD B, VADD 128.5f, VCVT
 *     toward zero (saturating; NaN -> 0). The clamp to [qmin, qmax] is done
 *     after the + 128.5f in the integer domain (VQMOVN to int16, VMAX/VMIN):
 *     rounding is monotonic and qmin + 128.5f, qmax + 128.5f are exact, so
 *     this equals the SPEC's clamp-then-add, NaN mapping to qmin included
 *     (same argument as forge_recalib_x86.c). No FMA: VFMA is never emitted
 *     with -ffp-contract=off and the intrinsics used are separate ops.
 *
 *   per element, table (AUTO from M >= 512): each channel's 256 entries by
 *     the same vector formula (4 entries per step, d = q - z_x exact), then
 *     per 8 channels of a row one gather load (VLDRB.U16 with offsets
 *     lane * 256 + q + 128) from the group's tables.
 */
#include "forge_recalib.h"

#if defined(FORGE_RECALIB_MVE_AVAILABLE)

#include <arm_mve.h>

#ifndef FORGE_RECALIB_MVE_LUT_MIN_M
#define FORGE_RECALIB_MVE_LUT_MIN_M 512
#endif

static int mve_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                     int32_t* s1, int32_t* s2_blk) {
  const size_t stride = (size_t)C;
  int32_t c0, c, row;
  (void)s2_blk;
  for (c = 0; c < C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
  }
  for (c0 = 0; c0 < C; c0 += 8) {
    const int32_t lanes = C - c0 < 8 ? C - c0 : 8;
    const mve_pred16_t pred = vctp16q((uint32_t)lanes);
    row = 0;
    while (row < M) {
      const int32_t end = M - row > 256 ? row + 256 : M;
      const int8_t* p = x + (size_t)row * stride + (size_t)c0;
      int16x8_t acc1 = vdupq_n_s16(0);
      int32x4_t acc_ev = vdupq_n_s32(0), acc_od = vdupq_n_s32(0);
      int16_t t1[8];
      int32_t te[4], to[4];
      int32_t k;
      for (; row < end; ++row, p += stride) {
        const int16x8_t q = vldrbq_z_s16(p, pred); /* inactive lanes: 0 */
        acc1 = vaddq_s16(acc1, q);
        acc_ev = vaddq_s32(acc_ev, vmullbq_int_s16(q, q));
        acc_od = vaddq_s32(acc_od, vmulltq_int_s16(q, q));
      }
      vst1q_s16(t1, acc1);
      vst1q_s32(te, acc_ev);
      vst1q_s32(to, acc_od);
      for (k = 0; k < lanes; ++k) {
        s1[c0 + k] += t1[k];
        s2[c0 + k] += (k & 1) ? to[k >> 1] : te[k >> 1];
      }
    }
  }
  return 1;
}

/* Requantizes 8 int16 lanes d = q - z_x with even/odd coefficient vectors;
 * returns y (int16 lanes, in [qmin, qmax]). */
static inline int16x8_t requant8(int16x8_t d, float32x4_t a_ev,
                                 float32x4_t b_ev, float32x4_t a_od,
                                 float32x4_t b_od, int16x8_t lo, int16x8_t hi) {
  const float32x4_t fe = vcvtq_f32_s32(vmovlbq_s16(d)); /* exact */
  const float32x4_t fo = vcvtq_f32_s32(vmovltq_s16(d));
  const float32x4_t ve = vaddq_f32(vmulq_f32(fe, a_ev), b_ev);
  const float32x4_t vo = vaddq_f32(vmulq_f32(fo, a_od), b_od);
  const int32x4_t te = vcvtq_s32_f32(vaddq_n_f32(ve, 128.5f));
  const int32x4_t to = vcvtq_s32_f32(vaddq_n_f32(vo, 128.5f));
  int16x8_t t = vqmovnbq_s32(vdupq_n_s16(0), te); /* saturating, even lanes */
  t = vqmovntq_s32(t, to);                         /* odd lanes */
  t = vminq_s16(vmaxq_s16(t, lo), hi);
  return vsubq_n_s16(t, 128);
}

static void load_coeffs(const float* a, const float* b, int32_t c0,
                        int32_t lanes, float32x4_t* a_ev, float32x4_t* b_ev,
                        float32x4_t* a_od, float32x4_t* b_od) {
  float ae[4] = {0, 0, 0, 0}, ao[4] = {0, 0, 0, 0};
  float be[4] = {0, 0, 0, 0}, bo[4] = {0, 0, 0, 0};
  int32_t k;
  for (k = 0; k < lanes; ++k) {
    if (k & 1) {
      ao[k >> 1] = a[c0 + k];
      bo[k >> 1] = b[c0 + k];
    } else {
      ae[k >> 1] = a[c0 + k];
      be[k >> 1] = b[c0 + k];
    }
  }
  *a_ev = vld1q_f32(ae);
  *b_ev = vld1q_f32(be);
  *a_od = vld1q_f32(ao);
  *b_od = vld1q_f32(bo);
}

static void affine_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                        const float* a, const float* b,
                        const forge_recalib_quant* quant) {
  const size_t stride = (size_t)C;
  const int16x8_t lo = vdupq_n_s16((int16_t)(quant->qmin + 128));
  const int16x8_t hi = vdupq_n_s16((int16_t)(quant->qmax + 128));
  const int16_t z_x = (int16_t)quant->z_x;
  int32_t c0;
  for (c0 = 0; c0 < C; c0 += 8) {
    const int32_t lanes = C - c0 < 8 ? C - c0 : 8;
    const mve_pred16_t pred = vctp16q((uint32_t)lanes);
    float32x4_t a_ev, b_ev, a_od, b_od;
    const int8_t* xp = x + c0;
    int8_t* yp = y + c0;
    int32_t row;
    load_coeffs(a, b, c0, lanes, &a_ev, &b_ev, &a_od, &b_od);
    for (row = 0; row < M; ++row, xp += stride, yp += stride) {
      const int16x8_t d = vsubq_n_s16(vldrbq_z_s16(xp, pred), z_x);
      vstrbq_p_s16(yp, requant8(d, a_ev, b_ev, a_od, b_od, lo, hi), pred);
    }
  }
}

/* Tables of channels [c0, c0 + lanes): t[c][i] = y(q = i - 128). */
static void build_tables(int8_t* lut, int32_t c0, int32_t lanes,
                         const float* a, const float* b,
                         const forge_recalib_quant* quant) {
  const int32x4_t lo = vdupq_n_s32(quant->qmin + 128);
  const int32x4_t hi = vdupq_n_s32(quant->qmax + 128);
  const float32x4_t step = vdupq_n_f32(4.0f);
  static const float kRamp[4] = {0.0f, 1.0f, 2.0f, 3.0f};
  int32_t k, i;
  for (k = 0; k < lanes; ++k) {
    const float ac = a[c0 + k], bc = b[c0 + k];
    int8_t* t = lut + (size_t)(c0 + k) * 256u;
    /* d = i - 128 - z_x, exact floats (|d| <= 255, steps of 1). */
    float32x4_t d =
        vaddq_n_f32(vld1q_f32(kRamp), (float)(-128 - quant->z_x));
    for (i = 0; i < 256; i += 4, d = vaddq_f32(d, step)) {
      const float32x4_t v = vaddq_n_f32(vmulq_n_f32(d, ac), bc);
      int32x4_t u = vcvtq_s32_f32(vaddq_n_f32(v, 128.5f));
      u = vminq_s32(vmaxq_s32(u, lo), hi);
      vstrbq_s32(t + i, vsubq_n_s32(u, 128));
    }
  }
}

static void lut_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                     const float* a, const float* b,
                     const forge_recalib_quant* quant, int8_t* lut) {
  const size_t stride = (size_t)C;
  /* lane k of a group reads table k: offset k*256 + (q + 128). */
  static const uint16_t kLaneBase[8] = {128,        256 + 128,  512 + 128,
                                        768 + 128,  1024 + 128, 1280 + 128,
                                        1536 + 128, 1792 + 128};
  const uint16x8_t base = vld1q_u16(kLaneBase);
  int32_t c0;
  for (c0 = 0; c0 < C; c0 += 8) {
    const int32_t lanes = C - c0 < 8 ? C - c0 : 8;
    const mve_pred16_t pred = vctp16q((uint32_t)lanes);
    const uint8_t* tg = (const uint8_t*)lut + (size_t)c0 * 256u;
    const int8_t* xp = x + c0;
    int8_t* yp = y + c0;
    int32_t row;
    build_tables(lut, c0, lanes, a, b, quant);
    for (row = 0; row < M; ++row, xp += stride, yp += stride) {
      const uint16x8_t off = vaddq_u16(
          vreinterpretq_u16_s16(vldrbq_z_s16(xp, pred)), base);
      const uint16x8_t v = vldrbq_gather_offset_z_u16(tg, off, pred);
      vstrbq_p_u16((uint8_t*)yp, v, pred);
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

static const forge_recalib_hooks kMveHooks = {mve_stats, mve_elementwise,
                                              FORGE_RECALIB_MVE_LUT_MIN_M};

int forge_recalib_s8_mve_path(const int8_t* x, int8_t* y, int32_t N,
                              int32_t HW, int32_t C, const float* beta,
                              const float* gamma_abs, float* state,
                              const forge_recalib_options* opts,
                              const forge_recalib_quant* quant, int32_t mode,
                              int32_t path, void* scratch,
                              size_t scratch_bytes, const char** msg) {
  return forge_recalib_s8_hooked(x, y, N, HW, C, beta, gamma_abs, state, opts,
                                 quant, mode, path, &kMveHooks, scratch,
                                 scratch_bytes, msg);
}

int forge_recalib_s8_mve(const int8_t* x, int8_t* y, int32_t N, int32_t HW,
                         int32_t C, const float* beta, const float* gamma_abs,
                         float* state, const forge_recalib_options* opts,
                         const forge_recalib_quant* quant, int32_t mode,
                         void* scratch, size_t scratch_bytes,
                         const char** msg) {
  return forge_recalib_s8_mve_path(x, y, N, HW, C, beta, gamma_abs, state,
                                   opts, quant, mode, FORGE_RECALIB_PATH_AUTO,
                                   scratch, scratch_bytes, msg);
}

#endif /* FORGE_RECALIB_MVE_AVAILABLE */

/* ISO C forbids an empty translation unit. */
typedef int forge_recalib_mve_translation_unit_not_empty;
