/* FORGE_RECALIB C core, plain C variant (ESP-NN naming: *_ansi).
 *
 * Arithmetic is normative (custom_ops/forge_recalib/SPEC.md); every float
 * expression below is a separately rounded float32 operation in the spec's
 * order. Target variants (forge_recalib_<target>.c) hand their hot loops to
 * forge_recalib_s8_hooked and must be bit-exact to this file.
 */
#include "forge_recalib.h"
#include "forge_recalib_internal.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "FORGE_RECALIB needs FLT_EVAL_METHOD == 0 (float math in float32)"
#endif

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
    if (!forge_recalib_momentum_ok(&opts->momentum)) {
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
  if (!forge_recalib_eps_ok(&opts->eps)) {
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
  const uint32_t b = forge_recalib_bits_of(&s);
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
    const int32_t six_q = int_six_over_scale(forge_recalib_bits_of(&s_y));
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
  return forge_recalib_check_target_bits(beta, gamma_abs, C, msg); /* on bits: no float op */
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


/* Validates one invocation and chooses its per-element path (*use_lut). */
static int check_call(const forge_recalib_args* a, const forge_recalib_hooks* hooks,
                      int* use_lut, const char** msg) {
  int status;
  if (a == NULL || a->x == NULL || a->y == NULL || a->beta == NULL ||
      a->gamma_abs == NULL || a->state == NULL || a->opts == NULL ||
      a->quant == NULL || a->scratch == NULL) {
    return set_msg(msg, FORGE_RECALIB_ERR_NULL, "a required pointer is NULL");
  }
  status = check_shape(a->n, a->hw, a->c, msg);
  if (status != FORGE_RECALIB_OK) return status;
  status = forge_recalib_validate_options(a->opts, msg);
  if (status != FORGE_RECALIB_OK) return status;
  if (a->quant->magic != FORGE_RECALIB_QUANT_MAGIC) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "quant was not built by forge_recalib_prepare_quant");
  }
  if (a->quant->activation != a->opts->activation) {
    return set_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "quant was prepared for a different activation");
  }
  if (a->mode != FORGE_RECALIB_MODE_ADAPT && a->mode != FORGE_RECALIB_MODE_FROZEN &&
      a->mode != FORGE_RECALIB_MODE_SOURCE) {
    return set_msg(msg, FORGE_RECALIB_ERR_MODE, "unknown mode");
  }
  if (a->path != FORGE_RECALIB_PATH_AUTO && a->path != FORGE_RECALIB_PATH_AFFINE &&
      a->path != FORGE_RECALIB_PATH_LUT) {
    return set_msg(msg, FORGE_RECALIB_ERR_MODE, "unknown per-element path");
  }
  if (((uintptr_t)a->scratch & 7u) != 0) {
    return set_msg(msg, FORGE_RECALIB_ERR_SCRATCH,
                   "scratch must be 8-byte aligned");
  }
  if (a->path == FORGE_RECALIB_PATH_AUTO) {
    *use_lut = a->n * a->hw >=
                   (hooks != NULL ? hooks->lut_min_m : FORGE_RECALIB_LUT_MIN_M) &&
               a->scratch_bytes >= forge_recalib_scratch_bytes(a->c);
  } else {
    *use_lut = a->path == FORGE_RECALIB_PATH_LUT;
  }
  if (a->scratch_bytes < (*use_lut ? forge_recalib_scratch_bytes(a->c)
                                   : forge_recalib_scratch_bytes_affine(a->c))) {
    return set_msg(msg, FORGE_RECALIB_ERR_SCRATCH, "scratch too small");
  }
  return FORGE_RECALIB_OK;
}

/* SPEC "Repair": a channel whose state is not usable restarts from its targets
 * (is_finite_f is false for NaN; !(v >= 0) too). */
static void repair_state(const forge_recalib_args* a, float* state) {
  int32_t c;
  for (c = 0; c < a->c; ++c) {
    const float v = state[a->c + c];
    if (!is_finite_f(state[c]) || !(v >= 0.0f && v <= FLT_MAX)) {
      state[c] = a->beta[c];
      state[a->c + c] = a->gamma_abs[c] * a->gamma_abs[c];
    }
  }
}

/* SPEC steps 1-4: the batch's exact sums (the target's stats loop where it has
 * one), its mean and variance, and the EMA update of the state. */
static void update_state(const forge_recalib_args* a, const forge_recalib_hooks* hooks,
                         float* state, uint8_t* base) {
  const int32_t C = a->c, M = a->n * a->hw;
  int64_t* s2 = (int64_t*)base;
  int32_t* s1 = (int32_t*)(base + (size_t)8 * (size_t)C);
  int32_t* s2_blk = (int32_t*)(base + (size_t)12 * (size_t)C);
  const int64_t m64 = M;
  const float m_f = (float)M;
  const float mm_f = i64_to_f32(m64 * m64);
  const int32_t m_zx = M * a->quant->z_x; /* |M * z_x| <= 2^22 * 128 */
  const float s_x = a->quant->s_x, sx2 = a->quant->sx2;
  const int running = a->opts->variance == FORGE_RECALIB_VAR_RUNNING;
  float m, om;
  int32_t c;
  if (a->opts->use_window) {
    m = (float)a->n / (float)a->opts->window;
    if (m > 1.0f) m = 1.0f;
  } else {
    m = a->opts->momentum;
  }
  om = 1.0f - m;
  if (!(hooks != NULL && hooks->stats != NULL &&
        hooks->stats(a->x, M, C, s2, s1, s2_blk))) {
    forge_recalib_stats_ansi(a->x, M, C, s2, s1, s2_blk);
  }
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

/* SPEC step 5 per channel into a/b; source mode uses the reset state's values,
 * (beta, gamma_abs * gamma_abs): bit for bit a reset followed by a frozen call. */
static void fill_coefficients(const forge_recalib_args* a, const float* state,
                              float* ca, float* cb) {
  /* Loop invariants in locals: the stores to ca/cb may alias *quant, *opts. */
  const float eps = a->opts->eps, r = a->quant->r, inv_sy = a->quant->inv_sy,
              zy_f = a->quant->zy_f;
  const int32_t C = a->c;
  int32_t c;
  for (c = 0; c < C; ++c) {
    const float g = a->gamma_abs[c];
    if (a->mode == FORGE_RECALIB_MODE_SOURCE) {
      coefficients(a->beta[c], g * g, a->beta[c], g, eps, r, inv_sy, zy_f, &ca[c],
                   &cb[c]);
    } else {
      coefficients(state[c], state[C + c], a->beta[c], g, eps, r, inv_sy, zy_f,
                   &ca[c], &cb[c]);
    }
  }
}

/* The whole invocation; hooks (NULL: none) are a target variant's hot loops. */
static int s8_run(const forge_recalib_args* a, const forge_recalib_hooks* hooks,
                  const char** msg) {
  int use_lut = 0;
  uint8_t* base;
  float *state, *ca, *cb;
  int8_t* lut;
  const int status = check_call(a, hooks, &use_lut, msg);
  if (status != FORGE_RECALIB_OK) return status;
  if (a->opts->arithmetic == FORGE_RECALIB_ARITH_INT) {
    /* The integer arithmetic, with this target's stats pass and int loop. */
    return forge_recalib_int_run(a, hooks, msg);
  }
  base = (uint8_t*)a->scratch;
  state = (float*)a->state;
  ca = (float*)(base + (size_t)16 * (size_t)a->c);
  cb = (float*)(base + (size_t)20 * (size_t)a->c);
  lut = use_lut ? (int8_t*)(base + (size_t)24 * (size_t)a->c) : NULL;
  if (a->mode != FORGE_RECALIB_MODE_SOURCE) repair_state(a, state);
  if (a->mode == FORGE_RECALIB_MODE_ADAPT) update_state(a, hooks, state, base);
  fill_coefficients(a, state, ca, cb);
  if (hooks != NULL && hooks->elementwise != NULL &&
      hooks->elementwise(a->x, a->y, a->n * a->hw, a->c, ca, cb, a->quant, lut)) {
    /* Target variant's per-element pass (SPEC float32 order per element). */
  } else if (use_lut) {
    lut_pass(a->x, a->y, a->n * a->hw, a->c, ca, cb, a->quant, lut);
  } else {
    affine_pass(a->x, a->y, a->n * a->hw, a->c, ca, cb, a->quant);
  }
  return set_msg(msg, FORGE_RECALIB_OK, "ok");
}

int forge_recalib_s8_ansi(const forge_recalib_args* args, const char** msg) {
  return s8_run(args, NULL, msg);
}

int forge_recalib_s8_hooked(const forge_recalib_args* args,
                            const forge_recalib_hooks* hooks, const char** msg) {
  return s8_run(args, hooks, msg);
}
