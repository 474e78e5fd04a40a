/* FORGE_RECALIB C core, plain C variant (ESP-NN naming: *_ansi).
 *
 * Arithmetic is normative (custom_ops/forge_recalib/SPEC.md); every float
 * expression below is a separately rounded float32 operation in the spec's
 * order. Optimized variants (e.g. forge_recalib_s8_esp32s3) must be bit-exact
 * to this file. With FORGE_RECALIB_X86 (host build, setup.py) it also defines
 * forge_recalib_s8_x86*, the same invocation with the hot loops of
 * forge_recalib_x86.c; without it this file is plain C99 as before.
 */
#include "forge_recalib.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "FORGE_RECALIB needs FLT_EVAL_METHOD == 0 (float math in float32)"
#endif

/* The integer arithmetic and the integer statistics pass (stats_pass), one
 * translation unit with this one: every build's source list stays as it is, and
 * the file alone is the object the FPU-less check inspects. */
#define FORGE_RECALIB_INT_TU 1
#include "forge_recalib_int.c"

static int set_msg(const char** msg, int status, const char* text) {
  if (msg != NULL) *msg = text;
  return status;
}

/* Finite test without libm (NaN fails both compares; no -ffast-math). */
static int is_finite_f(float v) { return v <= FLT_MAX && v >= -FLT_MAX; }

const char* forge_recalib_status_string(int status) {
  switch (status) {
    case FORGE_RECALIB_OK: return "ok";
    case FORGE_RECALIB_ERR_NULL: return "null pointer";
    case FORGE_RECALIB_ERR_SHAPE: return "invalid shape";
    case FORGE_RECALIB_ERR_OPTIONS: return "invalid options";
    case FORGE_RECALIB_ERR_QUANT: return "invalid quantization parameters";
    case FORGE_RECALIB_ERR_TARGETS: return "invalid beta/gamma_abs";
    case FORGE_RECALIB_ERR_SCRATCH: return "invalid scratch buffer";
    case FORGE_RECALIB_ERR_MODE: return "invalid mode";
    case FORGE_RECALIB_ERR_TYPE: return "invalid tensor type";
    default: return "unknown status";
  }
}

static const char* name_of(const char* const* names, int32_t count,
                           int32_t code) {
  return code >= 0 && code < count ? names[code] : NULL;
}

const char* forge_recalib_activation_name(int32_t code) {
  static const char* const kNames[FORGE_RECALIB_ACT_COUNT] = {"none", "relu",
                                                              "relu6"};
  return name_of(kNames, FORGE_RECALIB_ACT_COUNT, code);
}

const char* forge_recalib_variance_name(int32_t code) {
  static const char* const kNames[FORGE_RECALIB_VAR_COUNT] = {"batch",
                                                              "running"};
  return name_of(kNames, FORGE_RECALIB_VAR_COUNT, code);
}

const char* forge_recalib_arithmetic_name(int32_t code) {
  static const char* const kNames[FORGE_RECALIB_ARITH_COUNT] = {"float", "int"};
  return name_of(kNames, FORGE_RECALIB_ARITH_COUNT, code);
}

const char* forge_recalib_mode_name(int32_t code) {
  static const char* const kNames[FORGE_RECALIB_MODE_COUNT] = {
      "adapt", "frozen", "source", "adapt_safe"};
  return name_of(kNames, FORGE_RECALIB_MODE_COUNT, code);
}

const char* forge_recalib_path_name(int32_t code) {
  static const char* const kNames[FORGE_RECALIB_PATH_COUNT] = {"auto", "affine",
                                                               "lut"};
  return name_of(kNames, FORGE_RECALIB_PATH_COUNT, code);
}

void forge_recalib_options_default(forge_recalib_options* opts) {
  if (opts == NULL) return;
  opts->use_window = -1;
  opts->momentum = 0.0f;
  opts->window = 0;
  opts->eps = FORGE_RECALIB_DEFAULT_EPS;
  opts->activation = FORGE_RECALIB_ACT_NONE;
  opts->variance = FORGE_RECALIB_VAR_RUNNING;
  opts->arithmetic = FORGE_RECALIB_ARITH_FLOAT;
  opts->label_safe = 0;
}

int32_t forge_recalib_mode_for(const forge_recalib_options* opts, int32_t mode) {
  if (mode != FORGE_RECALIB_MODE_ADAPT_SAFE || opts == NULL) return mode;
  return opts->label_safe ? FORGE_RECALIB_MODE_ADAPT : FORGE_RECALIB_MODE_SOURCE;
}

int forge_recalib_validate_options(const forge_recalib_options* opts,
                                   const char** msg) {
  if (opts == NULL) return set_msg(msg, FORGE_RECALIB_ERR_NULL, "options is NULL");
  if (opts->use_window == 0) {
    if (!int_momentum_ok(opts->momentum)) {
      return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS,
                     "momentum must be a number in [0, 1]");
    }
  } else if (opts->use_window == 1) {
    if (opts->window < 1) {
      return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS, "window must be >= 1");
    }
  } else {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS,
                   "exactly one of momentum or window must be set");
  }
  if (!int_eps_ok(opts->eps)) {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS,
                   "eps must be finite and > 0");
  }
  if (opts->activation != FORGE_RECALIB_ACT_NONE &&
      opts->activation != FORGE_RECALIB_ACT_RELU &&
      opts->activation != FORGE_RECALIB_ACT_RELU6) {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS, "unknown activation");
  }
  if (opts->variance != FORGE_RECALIB_VAR_BATCH &&
      opts->variance != FORGE_RECALIB_VAR_RUNNING) {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS,
                   "unknown variance estimator");
  }
  if (opts->arithmetic != FORGE_RECALIB_ARITH_FLOAT &&
      opts->arithmetic != FORGE_RECALIB_ARITH_INT) {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS, "unknown arithmetic");
  }
  if (opts->label_safe != 0 && opts->label_safe != 1) {
    return set_msg(msg, FORGE_RECALIB_ERR_OPTIONS, "label_safe must be 0 or 1");
  }
  return set_msg(msg, FORGE_RECALIB_OK, "ok");
}

/* round_half_away(fl32(6.0f / s_y)) for a validated scale s_y (normal, > 0),
 * or -1 when that quotient is >= 256 (qmax saturates): the float32 division,
 * correctly rounded to nearest even, emulated on integers. */
static int32_t int_six_over_scale(uint32_t sy_bits) {
  const uint64_t m = (sy_bits & 0x7FFFFFu) | 0x800000u; /* s_y = m 2^(e-23) */
  const int32_t e = (int32_t)((sy_bits >> 23) & 255u) - 127;
  const uint64_t num = (uint64_t)0xC00000u << 26;       /* 6 = 0xC00000 2^-21 */
  uint64_t q = num / m, low, half, mant;
  const int sticky = num % m != 0;
  int32_t drop = 0, exp2, sh;
  while ((q >> drop) >= (1u << 24)) ++drop; /* q has 26 or 27 bits */
  low = q & (((uint64_t)1 << drop) - 1u);
  half = (uint64_t)1 << (drop - 1);
  mant = q >> drop;
  if (low > half || (low == half && (sticky || (mant & 1u)))) ++mant;
  exp2 = 2 - e - 26 + drop; /* the quotient is mant * 2^exp2 */
  if (exp2 >= 0) return -1;  /* mant >= 2^23: far above 256 */
  sh = -exp2;
  if (sh <= 16 && mant >= ((uint64_t)256 << sh)) return -1;
  if (sh > 40) return 0;
  return (int32_t)((mant + ((uint64_t)1 << (sh - 1))) >> sh);
}

/* s in [2^-40, 2^40] (0x2B800000 .. 0x53800000), on its bits: NaN, negative
 * values and -0.0 are outside, as the float comparisons have them. */
static int scale_ok(float s) {
  const uint32_t b = bits_of(&s);
  return b >= 0x2B800000u && b <= 0x53800000u;
}

int forge_recalib_prepare_quant_int(const forge_recalib_options* opts, float s_x,
                                    int32_t z_x, float s_y, int32_t z_y,
                                    forge_recalib_quant* quant, const char** msg) {
  int32_t qmin = -128, qmax = 127;
  int status;
  if (quant == NULL) return set_msg(msg, FORGE_RECALIB_ERR_NULL, "quant is NULL");
  quant->magic = 0;
  status = forge_recalib_validate_options(opts, msg);
  if (status != FORGE_RECALIB_OK) return status;
  /* NaN fails both comparisons in scale_ok. */
  if (!scale_ok(s_x)) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "input scale must be in [2^-40, 2^40]");
  }
  if (!scale_ok(s_y)) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "output scale must be in [2^-40, 2^40]");
  }
  if (z_x < -128 || z_x > 127) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "input zero point must be in [-128, 127]");
  }
  if (z_y < -128 || z_y > 127) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "output zero point must be in [-128, 127]");
  }
  /* TFLite CalculateActivationRangeQuantized: quantize(0) = z_y and
   * quantize(6) = z_y + round_half_away(6.0f / s_y), that float32 division
   * emulated on integers (int_six_over_scale). */
  if (opts->activation == FORGE_RECALIB_ACT_RELU ||
      opts->activation == FORGE_RECALIB_ACT_RELU6) {
    qmin = z_y; /* max(-128, z_y) */
  }
  if (opts->activation == FORGE_RECALIB_ACT_RELU6) {
    const int32_t six_q = int_six_over_scale(bits_of(&s_y));
    if (six_q >= 0 && z_y + six_q < qmax) qmax = z_y + six_q;
  }
  memset(quant, 0, sizeof(*quant)); /* the float constants stay 0.0f */
  quant->s_x = s_x;
  quant->s_y = s_y;
  quant->z_x = z_x;
  quant->z_y = z_y;
  quant->qmin = qmin;
  quant->qmax = qmax;
  quant->activation = opts->activation;
  quant->magic = FORGE_RECALIB_QUANT_MAGIC;
  return set_msg(msg, FORGE_RECALIB_OK, "ok");
}

int forge_recalib_prepare_quant(const forge_recalib_options* opts, float s_x,
                                int32_t z_x, float s_y, int32_t z_y,
                                forge_recalib_quant* quant, const char** msg) {
  const int status =
      forge_recalib_prepare_quant_int(opts, s_x, z_x, s_y, z_y, quant, msg);
  if (status != FORGE_RECALIB_OK) return status;
  quant->r = s_x / s_y;
  quant->inv_sy = 1.0f / s_y;
  quant->sx2 = s_x * s_x;
  quant->zy_f = (float)z_y;
  quant->qmin_f = (float)quant->qmin;
  quant->qmax_f = (float)quant->qmax;
  return FORGE_RECALIB_OK;
}

int forge_recalib_check_targets(const float* beta, const float* gamma_abs,
                                int32_t C, const char** msg) {
  if (beta == NULL || gamma_abs == NULL) {
    return set_msg(msg, FORGE_RECALIB_ERR_NULL, "beta/gamma_abs is NULL");
  }
  if (C < 1 || C > FORGE_RECALIB_MAX_C) {
    return set_msg(msg, FORGE_RECALIB_ERR_SHAPE,
                   "channel count must be in [1, 65536]");
  }
  return int_check_targets(beta, gamma_abs, C, msg); /* on bits: no float op */
}

int forge_recalib_state_reset(const float* beta, const float* gamma_abs,
                              int32_t C, float* state, const char** msg) {
  int32_t c;
  int status = forge_recalib_check_targets(beta, gamma_abs, C, msg);
  if (status != FORGE_RECALIB_OK) return status;
  if (state == NULL) return set_msg(msg, FORGE_RECALIB_ERR_NULL, "state is NULL");
  for (c = 0; c < C; ++c) {
    state[c] = beta[c];
    state[C + c] = gamma_abs[c] * gamma_abs[c];
  }
  return set_msg(msg, FORGE_RECALIB_OK, "ok");
}

/* Scratch layout (byte offsets, C channels, base 8-byte aligned):
 *   [0, 8C)     int64 S2[C]        stats pass (adapt only)
 *   [8C, 12C)   int32 S1[C]
 *   [12C, 16C)  int32 S2 block[C]
 *   [16C, 20C)  float A[C]         per-element coefficients
 *   [20C, 24C)  float B[C]
 *   [24C, 280C) int8 LUT[C][256]   LUT path only
 */
size_t forge_recalib_state_bytes(int32_t C) {
  if (C < 1 || C > FORGE_RECALIB_MAX_C) return 0;
  return 2 * sizeof(float) * (size_t)C;
}

size_t forge_recalib_scratch_bytes_affine(int32_t C) {
  if (C < 1 || C > FORGE_RECALIB_MAX_C) return 0;
  return (size_t)24 * (size_t)C;
}

size_t forge_recalib_scratch_bytes(int32_t C) {
  if (C < 1 || C > FORGE_RECALIB_MAX_C) return 0;
  return (size_t)280 * (size_t)C;
}

/* SPEC "Validation": N, HW, N*HW per channel and C in range. */
static int check_shape(int32_t N, int32_t HW, int32_t C, const char** msg) {
  if (N < 1 || HW < 1 || N > FORGE_RECALIB_MAX_M || HW > FORGE_RECALIB_MAX_M ||
      (int64_t)N * (int64_t)HW > FORGE_RECALIB_MAX_M) {
    return set_msg(msg, FORGE_RECALIB_ERR_SHAPE,
                   "N*H*W per channel must be in [1, 2^22]");
  }
  if (C < 1 || C > FORGE_RECALIB_MAX_C) {
    return set_msg(msg, FORGE_RECALIB_ERR_SHAPE,
                   "channel count must be in [1, 65536]");
  }
  return FORGE_RECALIB_OK;
}

/* (float)v of an int64, correctly rounded (SPEC). A value that fits int32
 * converts through int32 (one VCVT on 32-bit cores instead of libgcc's
 * __aeabi_l2f): the same integer, the same correctly rounded float32. */
static float i64_to_f32(int64_t v) {
  if (v >= INT32_MIN && v <= INT32_MAX) return (float)(int32_t)v;
  return (float)v;
}

/* SPEC step 5: A = gamma_abs/sqrt(var+eps) * r, B = (beta - mu*gs)/s_y + z_y. */
static void coefficients(float mu, float var, float beta, float gamma_abs,
                         float eps, float r, float inv_sy, float zy_f, float* a,
                         float* b) {
  float inv_std = 1.0f / sqrtf(var + eps);
  float gs = gamma_abs * inv_std;
  float mu_gs = mu * gs;
  float centered = beta - mu_gs;
  float scaled = centered * inv_sy;
  *a = gs * r;
  *b = scaled + zy_f;
}

/* SPEC step 6 for one element; the clamp maps NaN to qmin. */
static int8_t requantize(int32_t q, int32_t z_x, float a, float b, float qmin_f,
                         float qmax_f) {
  float prod = (float)(q - z_x) * a;
  float v = prod + b;
  if (!(v >= qmin_f)) v = qmin_f;
  if (v > qmax_f) v = qmax_f;
  return (int8_t)((int32_t)(v + 128.5f) - 128);
}

static void affine_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                        const float* a, const float* b,
                        const forge_recalib_quant* quant) {
  const int32_t z_x = quant->z_x;
  const float qmin_f = quant->qmin_f, qmax_f = quant->qmax_f;
  int32_t row, c;
  for (row = 0; row < M; ++row) {
    const int8_t* xp = x + (size_t)row * (size_t)C;
    int8_t* yp = y + (size_t)row * (size_t)C;
    for (c = 0; c < C; ++c) {
      yp[c] = requantize(xp[c], z_x, a[c], b[c], qmin_f, qmax_f);
    }
  }
}

static void lut_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                     const float* a, const float* b,
                     const forge_recalib_quant* quant, int8_t* lut) {
  int32_t row, c, i;
  /* Same requantize() per table entry: bit-identical to the affine pass. */
  for (c = 0; c < C; ++c) {
    int8_t* t = lut + (size_t)c * 256u;
    for (i = 0; i < 256; ++i) {
      t[i] = requantize(i - 128, quant->z_x, a[c], b[c], quant->qmin_f,
                        quant->qmax_f);
    }
  }
  for (row = 0; row < M; ++row) {
    const int8_t* xp = x + (size_t)row * (size_t)C;
    int8_t* yp = y + (size_t)row * (size_t)C;
    const int8_t* t = lut;
    for (c = 0; c < C; ++c, t += 256) {
      yp[c] = t[(int32_t)xp[c] + 128];
    }
  }
}

/* The whole invocation; `simd` > 0 (a FORGE_RECALIB_X86_* cap) lets the host
 * build's x86 loops (forge_recalib_x86.c) replace stats_pass/affine_pass when
 * they apply. */
static int s8_run(const int8_t* x, int8_t* y, int32_t N, int32_t HW, int32_t C,
                  const float* beta, const float* gamma_abs, float* state,
                  const forge_recalib_options* opts,
                  const forge_recalib_quant* quant, int32_t mode, int32_t path,
                  void* scratch, size_t scratch_bytes, const char** msg,
                  int simd, const forge_recalib_hooks* hooks) {
  int32_t M, c;
  int status;
  int use_lut;
  int64_t* s2;
  int32_t *s1, *s2_blk;
  float *a, *b;
  uint8_t* base = (uint8_t*)scratch;
  (void)simd; /* Unused without FORGE_RECALIB_X86. */

  if (x == NULL || y == NULL || beta == NULL || gamma_abs == NULL ||
      state == NULL || opts == NULL || quant == NULL || scratch == NULL) {
    return set_msg(msg, FORGE_RECALIB_ERR_NULL, "a required pointer is NULL");
  }
  status = check_shape(N, HW, C, msg);
  if (status != FORGE_RECALIB_OK) return status;
  status = forge_recalib_validate_options(opts, msg);
  if (status != FORGE_RECALIB_OK) return status;
  if (quant->magic != FORGE_RECALIB_QUANT_MAGIC) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "quant was not built by forge_recalib_prepare_quant");
  }
  if (quant->activation != opts->activation) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "quant was prepared for a different activation");
  }
  if (mode != FORGE_RECALIB_MODE_ADAPT && mode != FORGE_RECALIB_MODE_FROZEN &&
      mode != FORGE_RECALIB_MODE_SOURCE) {
    return set_msg(msg, FORGE_RECALIB_ERR_MODE, "unknown mode");
  }
  if (path != FORGE_RECALIB_PATH_AUTO && path != FORGE_RECALIB_PATH_AFFINE &&
      path != FORGE_RECALIB_PATH_LUT) {
    return set_msg(msg, FORGE_RECALIB_ERR_MODE, "unknown per-element path");
  }
  if (((uintptr_t)scratch & 7u) != 0) {
    return set_msg(msg, FORGE_RECALIB_ERR_SCRATCH,
                   "scratch must be 8-byte aligned");
  }
  M = N * HW;
  if (path == FORGE_RECALIB_PATH_AUTO) {
    use_lut = M >= (hooks != NULL ? hooks->lut_min_m : FORGE_RECALIB_LUT_MIN_M) &&
              scratch_bytes >= forge_recalib_scratch_bytes(C);
  } else {
    use_lut = path == FORGE_RECALIB_PATH_LUT;
  }
  if (scratch_bytes < (use_lut ? forge_recalib_scratch_bytes(C)
                               : forge_recalib_scratch_bytes_affine(C))) {
    return set_msg(msg, FORGE_RECALIB_ERR_SCRATCH, "scratch too small");
  }
  if (opts->arithmetic == FORGE_RECALIB_ARITH_INT) {
    /* The integer arithmetic, with this target's stats pass and int loop. */
    return int_run(x, y, N, HW, C, beta, gamma_abs, (int32_t*)state, opts, quant,
                   mode, scratch, scratch_bytes, msg, hooks, simd);
  }

  /* SPEC "Repair": a channel whose state is not usable restarts from its targets
   * (is_finite_f is false for NaN; !(v >= 0) too). Source mode never reads it. */
  for (c = 0; c < C && mode != FORGE_RECALIB_MODE_SOURCE; ++c) {
    const float v = state[C + c];
    if (!is_finite_f(state[c]) || !(v >= 0.0f && v <= FLT_MAX)) {
      state[c] = beta[c];
      state[C + c] = gamma_abs[c] * gamma_abs[c];
    }
  }

  s2 = (int64_t*)base;
  s1 = (int32_t*)(base + (size_t)8 * (size_t)C);
  s2_blk = (int32_t*)(base + (size_t)12 * (size_t)C);
  a = (float*)(base + (size_t)16 * (size_t)C);
  b = (float*)(base + (size_t)20 * (size_t)C);

  if (mode == FORGE_RECALIB_MODE_ADAPT) {
    const int64_t m64 = M;
    const float m_f = (float)M;
    const float mm_f = i64_to_f32(m64 * m64);
    const int32_t m_zx = M * quant->z_x; /* |M * z_x| <= 2^22 * 128 */
    const float s_x = quant->s_x, sx2 = quant->sx2;
    const int running = opts->variance == FORGE_RECALIB_VAR_RUNNING;
    float m, om;
    if (opts->use_window) {
      m = (float)N / (float)opts->window;
      if (m > 1.0f) m = 1.0f;
    } else {
      m = opts->momentum;
    }
    om = 1.0f - m;
    if (hooks != NULL && hooks->stats != NULL &&
        hooks->stats(x, M, C, s2, s1, s2_blk)) {
      /* Target variant's integer sums (exact: same S1/S2). */
    } else
#ifdef FORGE_RECALIB_X86
    if (!(simd > 0 && forge_recalib_x86_stats(x, M, C, s2, s1, s2_blk, simd)))
#endif
      stats_pass(x, M, C, s2, s1, s2_blk);
    for (c = 0; c < C; ++c) {
      const int64_t s1c = s1[c];
      /* S1 - M*z_x in int32: |S1 - M*z_x| <= 255 * M <= 255 * 2^22 < 2^31,
       * so it is the SPEC's int64 value, converted the same (see i64_to_f32). */
      const float mq = (float)(s1[c] - m_zx) / m_f;
      const float mean_b = s_x * mq;
      const float var_q = i64_to_f32(m64 * s2[c] - s1c * s1c) / mm_f;
      const float var_b = sx2 * var_q;
      const float mu_keep = om * state[c];
      const float mu_add = m * mean_b;
      const float mu_new = mu_keep + mu_add;
      float v_used = var_b;
      float var_keep, var_add;
      if (running) {
        const float d = mean_b - mu_new;
        const float d2 = d * d;
        v_used = var_b + d2;
      }
      var_keep = om * state[C + c];
      var_add = m * v_used;
      state[c] = mu_new;
      state[C + c] = var_keep + var_add;
    }
  }
  {
    /* Loop invariants in locals: the stores to a/b may alias *quant, *opts. */
    const float eps = opts->eps, r = quant->r, inv_sy = quant->inv_sy,
                zy_f = quant->zy_f;
    if (mode == FORGE_RECALIB_MODE_SOURCE) {
      /* The reset state's values, (beta, gamma_abs * gamma_abs): bit for bit
       * what a reset followed by a frozen invocation gives. */
      for (c = 0; c < C; ++c) {
        coefficients(beta[c], gamma_abs[c] * gamma_abs[c], beta[c], gamma_abs[c],
                     eps, r, inv_sy, zy_f, &a[c], &b[c]);
      }
    } else {
      for (c = 0; c < C; ++c) {
        coefficients(state[c], state[C + c], beta[c], gamma_abs[c], eps, r,
                     inv_sy, zy_f, &a[c], &b[c]);
      }
    }
  }
  if (hooks != NULL && hooks->elementwise != NULL &&
      hooks->elementwise(x, y, M, C, a, b, quant,
                         use_lut ? (int8_t*)(base + (size_t)24 * (size_t)C)
                                 : NULL)) {
    /* Target variant's per-element pass (SPEC float32 order per element). */
  } else if (use_lut) {
    lut_pass(x, y, M, C, a, b, quant, (int8_t*)(base + (size_t)24 * (size_t)C));
  } else {
#ifdef FORGE_RECALIB_X86
    if (!(simd > 0 && forge_recalib_x86_affine(x, y, M, C, a, b, quant, simd)))
#endif
      affine_pass(x, y, M, C, a, b, quant);
  }
  return set_msg(msg, FORGE_RECALIB_OK, "ok");
}

int forge_recalib_s8_ansi_path(const int8_t* x, int8_t* y, int32_t N,
                               int32_t HW, int32_t C, const float* beta,
                               const float* gamma_abs, float* state,
                               const forge_recalib_options* opts,
                               const forge_recalib_quant* quant, int32_t mode,
                               int32_t path, void* scratch,
                               size_t scratch_bytes, const char** msg) {
  return s8_run(x, y, N, HW, C, beta, gamma_abs, state, opts, quant, mode,
                path, scratch, scratch_bytes, msg, 0, NULL);
}

int forge_recalib_s8_ansi(const int8_t* x, int8_t* y, int32_t N, int32_t HW,
                          int32_t C, const float* beta, const float* gamma_abs,
                          float* state, const forge_recalib_options* opts,
                          const forge_recalib_quant* quant, int32_t mode,
                          void* scratch, size_t scratch_bytes,
                          const char** msg) {
  return forge_recalib_s8_ansi_path(x, y, N, HW, C, beta, gamma_abs, state,
                                    opts, quant, mode, FORGE_RECALIB_PATH_AUTO,
                                    scratch, scratch_bytes, msg);
}

int forge_recalib_s8_hooked(const int8_t* x, int8_t* y, int32_t N, int32_t HW,
                            int32_t C, const float* beta,
                            const float* gamma_abs, float* state,
                            const forge_recalib_options* opts,
                            const forge_recalib_quant* quant, int32_t mode,
                            int32_t path, const forge_recalib_hooks* hooks,
                            void* scratch, size_t scratch_bytes,
                            const char** msg) {
  return s8_run(x, y, N, HW, C, beta, gamma_abs, state, opts, quant, mode,
                path, scratch, scratch_bytes, msg, 0, hooks);
}

#ifdef FORGE_RECALIB_X86
int forge_recalib_s8_x86_path(const int8_t* x, int8_t* y, int32_t N,
                              int32_t HW, int32_t C, const float* beta,
                              const float* gamma_abs, float* state,
                              const forge_recalib_options* opts,
                              const forge_recalib_quant* quant, int32_t mode,
                              int32_t path, int32_t max_isa, void* scratch,
                              size_t scratch_bytes, const char** msg) {
  return s8_run(x, y, N, HW, C, beta, gamma_abs, state, opts, quant, mode,
                path, scratch, scratch_bytes, msg,
                max_isa > 0 ? max_isa : FORGE_RECALIB_X86_NONE, NULL);
}

int forge_recalib_s8_x86(const int8_t* x, int8_t* y, int32_t N, int32_t HW,
                         int32_t C, const float* beta, const float* gamma_abs,
                         float* state, const forge_recalib_options* opts,
                         const forge_recalib_quant* quant, int32_t mode,
                         void* scratch, size_t scratch_bytes,
                         const char** msg) {
  return s8_run(x, y, N, HW, C, beta, gamma_abs, state, opts, quant, mode,
                FORGE_RECALIB_PATH_AUTO, scratch, scratch_bytes, msg,
                FORGE_RECALIB_X86_AVX512, NULL);
}
#endif  /* FORGE_RECALIB_X86 */
