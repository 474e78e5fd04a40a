/* FORGE_RECALIB integer arithmetic (option arithmetic = "int") and the integer
 * statistics pass both arithmetics share.
 *
 * Normative: custom_ops/forge_recalib/SPEC.md "Integer arithmetic"; the numpy
 * reference (forge_tflm/ops/reference.py, int_*) is its executable definition
 * and this file must match it bit for bit (outputs and state). Integer
 * operations only: float32 constants (scales, targets, eps, momentum) are read
 * from their bits, so a core without an FPU runs it without soft-float calls
 * (tests/custom_ops/test_int_arithmetic.py checks a Cortex-M0 object of this
 * file). int64 products and divisions are exact; on Armv6-M they are libgcc's
 * integer helpers. Right shifts of negative values are arithmetic (as in
 * gemmlowp/TFLite, which every target compiler here provides).
 */
#include <string.h>

#include "forge_recalib.h"
#include "forge_recalib_internal.h"

/* Rows per block of the statistics pass: a block's C channels stay in cache while
 * each channel's rows are summed in registers (int32: 256 * 128^2 = 2^22). */
#define FORGE_RECALIB_STATS_ROWS 256
#define INT_MU_FRAC 16  /* fraction bits of mu and the batch mean */
#define INT_VAR_FRAC 12 /* of var and the batch variance */
#define INT_NEWTON_STEPS 4

/* The per-channel steps inline their fx helpers (about 60 instructions per channel
 * on a Cortex-M4) and count leading zeros in one instruction where the compiler
 * says how; other C99 compilers get the same results from the fallbacks. */
#if defined(__GNUC__) || defined(__clang__)
#define INT_INLINE static inline __attribute__((always_inline))
static int32_t int_clz(uint32_t v) { return __builtin_clz(v); } /* v != 0 */
#else
#define INT_INLINE static
static int32_t int_clz(uint32_t v) { /* v != 0 */
  int32_t n = 0;
  if (v <= 0xFFFFu) { n += 16; v <<= 16; }
  if (v <= 0xFFFFFFu) { n += 8; v <<= 8; }
  if (v <= 0xFFFFFFFu) { n += 4; v <<= 4; }
  if (v <= 0x3FFFFFFFu) { n += 2; v <<= 2; }
  if (v <= 0x7FFFFFFFu) n += 1;
  return n;
}
#endif

/* Integer statistics over M rows of C channels: exact (SPEC step 1). Channel by
 * channel within blocks of rows, so that a core without SIMD keeps both sums in
 * registers (s2_blk, the variants' scratch, is not needed here). */
void forge_recalib_stats_ansi(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                              int32_t* s1, int32_t* s2_blk) {
  int32_t c, row;
  (void)s2_blk;
  for (c = 0; c < C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
  }
  for (row = 0; row < M; row += FORGE_RECALIB_STATS_ROWS) {
    const int32_t n = M - row < FORGE_RECALIB_STATS_ROWS ? M - row
                                                         : FORGE_RECALIB_STATS_ROWS;
    for (c = 0; c < C; ++c) {
      const int8_t* p = x + (size_t)row * (size_t)C + (size_t)c;
      int32_t a = 0, b = 0, i = 0;
      for (; i + 4 <= n; i += 4, p += 4 * (size_t)C) { /* loads at register offsets */
        const int32_t q0 = p[0], q1 = p[C], q2 = p[2 * C], q3 = p[3 * C];
        a += q0 + q1 + q2 + q3;
        b += q0 * q0 + q1 * q1 + q2 * q2 + q3 * q3;
      }
      for (; i < n; ++i, p += C) {
        const int32_t q = *p;
        a += q;
        b += q * q;
      }
      s1[c] += a;
      s2[c] += b;
    }
  }
}

static int int_msg(const char** msg, int status, const char* text) {
  if (msg != NULL) *msg = text;
  return status;
}

/* An exact float32 value: (-1)^neg * mant * 2^(exp - 30), mant in [2^30, 2^31)
 * or 0 (SPEC "fx numbers"). */
typedef struct {
  uint32_t neg;
  uint32_t mant;
  int32_t exp;
} fx_t;

static const fx_t kFxOne = {0u, 1u << 30, 0};

/* gemmlowp RoundingDivideByPOT: x / 2^e rounded half away from zero. */
static int64_t rdbpot64(int64_t x, int32_t e) {
  const int64_t mask = (int64_t)(((uint64_t)1 << e) - 1u);
  const int64_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
  return (x >> e) + ((x & mask) > thr ? 1 : 0);
}

/* gemmlowp SaturatingRoundingDoublingHighMul. */
static int32_t srdhm(int32_t a, int32_t b) {
  int64_t ab, nudge;
  if (a == INT32_MIN && b == INT32_MIN) return INT32_MAX;
  ab = (int64_t)a * (int64_t)b;
  nudge = ab >= 0 ? (int64_t)1 << 30 : 1 - ((int64_t)1 << 30);
  return (int32_t)((ab + nudge) / ((int64_t)1 << 31));
}

/* n / d rounded half away from zero, d > 0. */
static int64_t div_round(int64_t n, int64_t d) {
  const uint64_t q = ((n < 0 ? (uint64_t)0 - (uint64_t)n : (uint64_t)n) +
                      (uint64_t)(d >> 1)) / (uint64_t)d;
  return n < 0 ? -(int64_t)q : (int64_t)q;
}

/* floor(n / d) and n % d for 0 < d < 2^16 with the core's 32-bit divide (one
 * instruction on Armv7-M, Armv8-M mainline and RV32IM) instead of a 64-bit
 * library division: base-2^16 long division, every partial dividend < 2^32. */
static uint64_t udiv_small(uint64_t n, uint32_t d, uint32_t* rem) {
  uint32_t hi = (uint32_t)(n >> 32), lo = (uint32_t)n, qh, q1, q0, r, t;
  if (hi == 0) {
    q0 = lo / d;
    *rem = lo - q0 * d;
    return q0;
  }
  qh = hi / d;
  r = hi - qh * d;
  t = (r << 16) | (lo >> 16);
  q1 = t / d;
  r = t - q1 * d;
  t = (r << 16) | (lo & 0xFFFFu);
  q0 = t / d;
  *rem = t - q0 * d;
  return ((uint64_t)qh << 32) | ((uint64_t)q1 << 16) | q0;
}

/* floor(n / d) and n % d, n >= 0, d > 0: udiv_small where d allows. */
static uint64_t udiv_rem(uint64_t n, uint32_t d, uint32_t* rem) {
  uint64_t q;
  if (d < 65536u) return udiv_small(n, d, rem);
  q = n / d;
  *rem = (uint32_t)(n - q * d);
  return q;
}

/* x / 2^e rounded half away from zero for x >= 0 (rdbpot64's value there). */
static uint64_t rshift_round(uint64_t x, int32_t e) {
  return (x + ((uint64_t)1 << (e - 1))) >> e;
}

uint32_t forge_recalib_bits_of(const float* f) {
  uint32_t b;
  memcpy(&b, f, sizeof(b)); /* an integer load: no float operation */
  return b;
}

INT_INLINE fx_t fx_of(uint32_t bits) {
  fx_t r;
  uint32_t biased = (bits >> 23) & 255u, frac = bits & 0x7FFFFFu;
  r.neg = bits >> 31;
  r.exp = 0;
  if (biased == 0 && frac == 0) {
    r.mant = 0;
    return r;
  }
  if (biased == 0) { /* subnormal */
    r.exp = -126;
    while (frac < (1u << 23)) {
      frac <<= 1;
      --r.exp;
    }
  } else {
    r.exp = (int32_t)biased - 127;
    frac |= 1u << 23;
  }
  r.mant = frac << 7;
  return r;
}

static fx_t fx_make(uint32_t neg, uint64_t mant, int32_t exp) {
  fx_t r;
  r.neg = neg;
  r.mant = mant == ((uint64_t)1 << 31) ? 1u << 30 : (uint32_t)mant;
  r.exp = mant == ((uint64_t)1 << 31) ? exp + 1 : exp;
  return r;
}

INT_INLINE fx_t fx_mul(fx_t a, fx_t b) {
  uint64_t p;
  if (a.mant == 0 || b.mant == 0) return fx_make(a.neg ^ b.neg, 0, 0);
  p = (uint64_t)a.mant * (uint64_t)b.mant;
  if (p >= (uint64_t)1 << 61) {
    return fx_make(a.neg ^ b.neg, rshift_round(p, 31), a.exp + b.exp + 1);
  }
  return fx_make(a.neg ^ b.neg, rshift_round(p, 30), a.exp + b.exp);
}

/* a / b, b != 0 (a scale, which validation keeps in [2^-40, 2^40]). */
static fx_t fx_div(fx_t a, fx_t b) {
  if (a.mant == 0) return fx_make(a.neg ^ b.neg, 0, 0);
  if (a.mant >= b.mant) {
    return fx_make(a.neg ^ b.neg,
                   (uint64_t)div_round((int64_t)a.mant << 30, b.mant), a.exp - b.exp);
  }
  return fx_make(a.neg ^ b.neg, (uint64_t)div_round((int64_t)a.mant << 31, b.mant),
                 a.exp - b.exp - 1);
}

/* round(a * 2^frac), ties away from zero, clamped to [lo, hi]. */
INT_INLINE int64_t fx_fixed(fx_t a, int32_t frac, int64_t lo, int64_t hi) {
  const int32_t sh = a.exp - 30 + frac;
  int64_t v;
  if (a.mant == 0 || sh < -62) {
    v = 0;
  } else if (sh > 32) {
    v = INT64_MAX;
  } else if (sh >= 0) {
    v = (int64_t)a.mant << sh;
  } else {
    v = (int64_t)rshift_round(a.mant, -sh);
  }
  if (a.neg) v = -v;
  return v < lo ? lo : v > hi ? hi : v;
}

/* Per-tensor constants (SPEC "Integer arithmetic", I0). */
typedef struct {
  fx_t inv_sx, inv_sy;
  int32_t eps_v;
} int_tensor;

static int_tensor int_tensor_of(const forge_recalib_quant* quant,
                                const forge_recalib_options* opts) {
  int_tensor t;
  t.inv_sx = fx_div(kFxOne, fx_of(forge_recalib_bits_of(&quant->s_x)));
  t.inv_sy = fx_div(kFxOne, fx_of(forge_recalib_bits_of(&quant->s_y)));
  t.eps_v = (int32_t)fx_fixed(fx_mul(fx_of(forge_recalib_bits_of(&opts->eps)),
                                     fx_mul(t.inv_sx, t.inv_sx)),
                              INT_VAR_FRAC, 1, FORGE_RECALIB_INT_VAR_MAX);
  return t;
}

/* The EMA rate m in Q31 (step I3). */
static int32_t int_rate(const forge_recalib_options* opts, int32_t N) {
  if (opts->use_window) {
    const int64_t m = div_round((int64_t)N << 31, opts->window);
    return m > INT32_MAX ? INT32_MAX : (int32_t)m;
  }
  return (int32_t)fx_fixed(fx_of(forge_recalib_bits_of(&opts->momentum)), 31, 0, INT32_MAX);
}

/* Channel c's reset values (I1): beta / s_x (Q16), (gamma_abs / s_x)^2 (Q12). */
static void int_reset_channel(const float* beta, const float* gamma_abs,
                              int32_t c, fx_t inv_sx, int32_t* mu, int32_t* var) {
  const fx_t gx = fx_mul(fx_of(forge_recalib_bits_of(&gamma_abs[c])), inv_sx);
  *mu = (int32_t)fx_fixed(fx_mul(fx_of(forge_recalib_bits_of(&beta[c])), inv_sx), INT_MU_FRAC,
                          -FORGE_RECALIB_INT_MU_MAX, FORGE_RECALIB_INT_MU_MAX);
  *var = (int32_t)fx_fixed(fx_mul(gx, gx), INT_VAR_FRAC, 0,
                           FORGE_RECALIB_INT_VAR_MAX);
}

/* 1 / sqrt(v / 2^12), v in [1, VAR_MAX]: Newton's iteration in Q29 on v shifted
 * by an even count into [2^28, 2^30) (step I5). Every quantity is positive and
 * fits 32 bits (y <= 2^30; y^2 / 2^29 <= 2^31; t < 3 * 2^29, so 3 * 2^29 - t
 * does not wrap; the products < 2^62; checked for every v): the products are
 * single 32x32->64 multiplies and rshift_round (rdbpot64 for x >= 0) rounds. */
static fx_t int_inv_sqrt(int32_t v) {
  const int32_t j = (int_clz((uint32_t)v) - 2) >> 1; /* (30 - bits) >> 1 */
  const uint32_t n = (uint32_t)v << (2 * j);
  uint32_t y = 1207959552u - 5u * (n >> 3); /* 2.25 - 1.25 X in Q29, X = n / 2^30 */
  int32_t k;
  for (k = 0; k < INT_NEWTON_STEPS; ++k) {
    const uint32_t y2 = (uint32_t)rshift_round((uint64_t)y * y, 29);
    const uint32_t t = (uint32_t)rshift_round((uint64_t)n * y2, 30);
    y = (uint32_t)rshift_round((uint64_t)y * (3u * (1u << 29) - t), 30);
  }
  if (y >= 1u << 30) return fx_make(0, y, j - 8);
  return fx_make(0, (uint64_t)2 * y, j - 9);
}

/* Step I6's gain A = gamma_abs / s_y / sqrt(var + eps) (output steps per x
 * step) of one channel. */
static fx_t int_gain(int32_t var, const float* gamma_abs, int32_t c,
                     const int_tensor* t) {
  int64_t vpe = (int64_t)var + t->eps_v;
  if (vpe > FORGE_RECALIB_INT_VAR_MAX) vpe = FORGE_RECALIB_INT_VAR_MAX;
  return fx_mul(fx_mul(fx_of(forge_recalib_bits_of(&gamma_abs[c])), t->inv_sy),
                int_inv_sqrt((int32_t)vpe));
}

/* The exponent I6 takes from a gain for the tensor's shift. */
static int32_t int_gain_exp(fx_t a) {
  if (a.mant == 0) return -1;
  return a.exp < -1 ? -1 : a.exp > 6 ? 6 : a.exp;
}

/* Step I7 for one channel: the multiplier and the folded bias (rounding
 * constant, zero points and -mu * A), from its gain at the tensor's shift. */
static void int_fold(fx_t a, int32_t mu, const float* beta, int32_t c,
                     const int_tensor* t, int32_t z_x, int32_t z_y, int32_t s,
                     int32_t* mult, int32_t* bias) {
  const int64_t m = fx_fixed(a, s, 0, FORGE_RECALIB_INT_MULT_MAX);
  const int64_t by = fx_fixed(fx_mul(fx_of(forge_recalib_bits_of(&beta[c])), t->inv_sy), s,
                              -((int64_t)1 << 40), (int64_t)1 << 40);
  int64_t b = by + (int64_t)z_y * ((int64_t)1 << s) + ((int64_t)1 << (s - 1)) -
              (int64_t)z_x * m - rdbpot64((int64_t)mu * m, INT_MU_FRAC);
  if (b > FORGE_RECALIB_INT_BIAS_MAX) b = FORGE_RECALIB_INT_BIAS_MAX;
  if (b < -FORGE_RECALIB_INT_BIAS_MAX) b = -FORGE_RECALIB_INT_BIAS_MAX;
  *mult = (int32_t)m;
  *bias = (int32_t)b;
}

/* Step I2 for one channel from its sums: the batch mean (Q16) and variance
 * (Q12), exact as the SPEC's int64 divisions by M. */
static void int_moments(int32_t s1, int64_t s2, int32_t M, int32_t z_x,
                        int32_t* mean, int32_t* var_b) {
  const int64_t n = (int64_t)s1 - (int64_t)M * z_x;
  const uint64_t an = n < 0 ? (uint64_t)(-n) : (uint64_t)n;
  /* round(D * 2^12 / M^2), D = M*S2 - S1^2 >= 0: floor(D * 2^13 / M^2) as two
   * exact floor divisions by M (D * 2^13 itself may pass 2^63). */
  const uint64_t d = (uint64_t)((int64_t)M * s2 - (int64_t)s1 * s1);
  uint32_t r;
  const uint64_t qd = udiv_rem(d, (uint32_t)M, &r);
  const uint64_t f = (qd << (INT_VAR_FRAC + 1)) +
                     udiv_rem((uint64_t)r << (INT_VAR_FRAC + 1), (uint32_t)M, &r);
  const uint64_t m = udiv_rem((an << INT_MU_FRAC) + (uint32_t)(M >> 1), (uint32_t)M, &r);
  *mean = n < 0 ? -(int32_t)m : (int32_t)m;
  *var_b = (int32_t)((udiv_rem(f, (uint32_t)M, &r) + 1) >> 1);
}

/* Steps I2-I4 for one channel from its sums: the state's EMA update. */
static void int_update(int32_t s1, int64_t s2, int32_t M, int32_t z_x,
                       int32_t m31, int running, int32_t* mu, int32_t* var) {
  int32_t mean, var_b, mu_new;
  int64_t v_used;
  int_moments(s1, s2, M, z_x, &mean, &var_b);
  mu_new = *mu + srdhm(mean - *mu, m31);
  v_used = var_b;
  if (running) {
    const int64_t dm = (int64_t)mean - mu_new;
    int64_t d2 = rdbpot64(dm * dm, 2 * INT_MU_FRAC - INT_VAR_FRAC);
    if (d2 > FORGE_RECALIB_INT_VAR_MAX) d2 = FORGE_RECALIB_INT_VAR_MAX;
    v_used += d2;
  }
  if (v_used > FORGE_RECALIB_INT_VAR_MAX) v_used = FORGE_RECALIB_INT_VAR_MAX;
  *mu = mu_new;
  *var = *var + srdhm((int32_t)(v_used - *var), m31);
}

/* Step I8: y = clamp((q * mult + bias) >> s): int32 throughout, since
 * |q * mult| <= 2^29 and |bias| <= 2^30. Rows outer, channels inner: the form
 * compilers vectorize on hosts (the evaluator's x86 build at -O3); cores with
 * their own loop have an int_elementwise hook. */
static void int_affine_pass(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                            const int32_t* mult, const int32_t* bias, int32_t s,
                            int32_t qmin, int32_t qmax) {
  int32_t row, c;
  for (row = 0; row < M; ++row) {
    const int8_t* xp = x + (size_t)row * (size_t)C;
    int8_t* yp = y + (size_t)row * (size_t)C;
    for (c = 0; c < C; ++c) {
      int32_t v = ((int32_t)xp[c] * mult[c] + bias[c]) >> s;
      v = v < qmin ? qmin : v > qmax ? qmax : v;
      yp[c] = (int8_t)v;
    }
  }
}

/* |beta| <= 2^40 and 0 <= gamma_abs <= 2^40 (SPEC "Validation") on the bits
 * (0x53800000: 2^40; NaN and inf are above it; -0.0 is a zero gamma_abs), so
 * forge_recalib_check_targets shares it without a float comparison. */
int forge_recalib_check_target_bits(const float* beta, const float* gamma_abs, int32_t C,
                             const char** msg) {
  int32_t c;
  for (c = 0; c < C; ++c) {
    const uint32_t b = forge_recalib_bits_of(&beta[c]), g = forge_recalib_bits_of(&gamma_abs[c]);
    if ((b & 0x7FFFFFFFu) > 0x53800000u) {
      return int_msg(msg, FORGE_RECALIB_ERR_TARGETS,
                     "beta must be finite with |beta| <= 2^40");
    }
    if (g > 0x53800000u && g != 0x80000000u) {
      return int_msg(msg, FORGE_RECALIB_ERR_TARGETS,
                     "gamma_abs must be finite with 0 <= gamma_abs <= 2^40");
    }
  }
  return int_msg(msg, FORGE_RECALIB_OK, "ok");
}

/* momentum in [0, 1] (-0.0 included, NaN not) and eps finite and > 0, on their
 * bits: the sets the float comparisons accept, without a float operation. */
int forge_recalib_momentum_ok(const float* m) {
  const uint32_t b = forge_recalib_bits_of(m);
  return b <= 0x3F800000u || b == 0x80000000u;
}

int forge_recalib_eps_ok(const float* e) {
  const uint32_t b = forge_recalib_bits_of(e);
  return b > 0u && b < 0x7F800000u;
}

/* The checks forge_recalib_validate_options makes of what this arithmetic
 * reads, on integers and bits (momentum in [0, 1], eps finite and > 0). */
static int int_options_ok(const forge_recalib_options* opts) {
  if (opts->arithmetic != FORGE_RECALIB_ARITH_INT) return 0;
  if (opts->variance != FORGE_RECALIB_VAR_BATCH &&
      opts->variance != FORGE_RECALIB_VAR_RUNNING) {
    return 0;
  }
  if (!forge_recalib_eps_ok(&opts->eps)) return 0;
  if (opts->use_window == 1) return opts->window >= 1;
  return opts->use_window == 0 && forge_recalib_momentum_ok(&opts->momentum);
}

int forge_recalib_int_state_reset(const forge_recalib_quant* quant,
                                  const float* beta, const float* gamma_abs,
                                  int32_t C, int32_t* state, const char** msg) {
  int_tensor t;
  int32_t c;
  if (quant == NULL || beta == NULL || gamma_abs == NULL || state == NULL) {
    return int_msg(msg, FORGE_RECALIB_ERR_NULL, "a required pointer is NULL");
  }
  if (C < 1 || C > FORGE_RECALIB_MAX_C) {
    return int_msg(msg, FORGE_RECALIB_ERR_SHAPE, "channel count must be in [1, 65536]");
  }
  if (quant->magic != FORGE_RECALIB_QUANT_MAGIC) {
    return int_msg(msg, FORGE_RECALIB_ERR_QUANT,
                   "quant was not built by forge_recalib_prepare_quant");
  }
  if (forge_recalib_check_target_bits(beta, gamma_abs, C, msg) != FORGE_RECALIB_OK) {
    return FORGE_RECALIB_ERR_TARGETS;
  }
  t.inv_sx = fx_div(kFxOne, fx_of(forge_recalib_bits_of(&quant->s_x)));
  for (c = 0; c < C; ++c) {
    int_reset_channel(beta, gamma_abs, c, t.inv_sx, &state[c], &state[C + c]);
  }
  return int_msg(msg, FORGE_RECALIB_OK, "ok");
}

/* Validates one call of forge_recalib_s8_int. */
static int int_check(const forge_recalib_args* a, const char** msg) {
  const forge_recalib_options* opts;
  if (a == NULL || a->x == NULL || a->y == NULL || a->beta == NULL ||
      a->gamma_abs == NULL || a->state == NULL || a->opts == NULL ||
      a->quant == NULL || a->scratch == NULL) {
    return int_msg(msg, FORGE_RECALIB_ERR_NULL, "a required pointer is NULL");
  }
  opts = a->opts;
  if (a->n < 1 || a->hw < 1 || a->n > FORGE_RECALIB_MAX_M ||
      a->hw > FORGE_RECALIB_MAX_M || (int64_t)a->n * a->hw > FORGE_RECALIB_MAX_M ||
      a->c < 1 || a->c > FORGE_RECALIB_MAX_C) {
    return int_msg(msg, FORGE_RECALIB_ERR_SHAPE, "N*H*W or C out of range");
  }
  if (!int_options_ok(opts)) {
    return int_msg(msg, FORGE_RECALIB_ERR_OPTIONS, "invalid options for arithmetic int");
  }
  if (a->quant->magic != FORGE_RECALIB_QUANT_MAGIC ||
      a->quant->activation != opts->activation) {
    return int_msg(msg, FORGE_RECALIB_ERR_QUANT, "quant not prepared for these options");
  }
  if (a->mode != FORGE_RECALIB_MODE_ADAPT && a->mode != FORGE_RECALIB_MODE_FROZEN &&
      a->mode != FORGE_RECALIB_MODE_SOURCE) {
    return int_msg(msg, FORGE_RECALIB_ERR_MODE, "unknown mode");
  }
  if (((uintptr_t)a->scratch & 7u) != 0 || a->scratch_bytes < (size_t)24 * (size_t)a->c) {
    return int_msg(msg, FORGE_RECALIB_ERR_SCRATCH,
                   "scratch too small or not 8-byte aligned");
  }
  return FORGE_RECALIB_OK;
}

/* Repair, I2-I4 and I5-I6 for channel c: updates the state (unless source
 * mode) and returns the channel's gain; *mu_out: the mean the bias folds. */
static fx_t int_channel(int32_t c, int32_t C, const int32_t* s1, const int64_t* s2,
                        int32_t M, const float* beta, const float* gamma_abs,
                        int32_t* state, const forge_recalib_options* opts,
                        const forge_recalib_quant* quant, int32_t mode,
                        const int_tensor* t, int32_t m31, int32_t* mu_out) {
  int32_t mu = 0, var = 0;
  int fresh = mode == FORGE_RECALIB_MODE_SOURCE;
  if (!fresh) {
    mu = state[c];
    var = state[C + c];
    /* SPEC "Repair": a channel outside the state's range restarts. */
    fresh = mu < -FORGE_RECALIB_INT_MU_MAX || mu > FORGE_RECALIB_INT_MU_MAX ||
            var < 0 || var > FORGE_RECALIB_INT_VAR_MAX;
  }
  /* The reset values cost ~100 instructions: only where they are used. */
  if (fresh) int_reset_channel(beta, gamma_abs, c, t->inv_sx, &mu, &var);
  if (mode == FORGE_RECALIB_MODE_ADAPT) {
    int_update(s1[c], s2[c], M, quant->z_x, m31,
               opts->variance == FORGE_RECALIB_VAR_RUNNING, &mu, &var);
  }
  if (mode != FORGE_RECALIB_MODE_SOURCE) {
    state[c] = mu;
    state[C + c] = var;
  }
  *mu_out = mu;
  return int_gain(var, gamma_abs, c, t);
}

/* The invocation; hooks (may be NULL) choose the target's stats pass and
 * per-element loop (integer results are the same). */
int forge_recalib_int_run(const forge_recalib_args* a, const forge_recalib_hooks* hooks,
                          const char** msg) {
  /* Scratch as the float path's (SPEC "Scratch"): S2, S1, then the S2 block
   * sums' area holds the gains' exponents once the sums are read, A the
   * multipliers (first the gains' mantissas) and B the biases (first mu). */
  const int status = int_check(a, msg);
  const int32_t C = status == FORGE_RECALIB_OK ? a->c : 0, M = C ? a->n * a->hw : 0;
  uint8_t* base;
  int64_t* s2;
  int32_t *s1, *aexp, *mult, *bias, c, e = -1, s, m31;
  int_tensor t;
  if (status != FORGE_RECALIB_OK) return status;
  base = (uint8_t*)a->scratch;
  s2 = (int64_t*)base;
  s1 = (int32_t*)(base + (size_t)8 * (size_t)C);
  aexp = (int32_t*)(base + (size_t)12 * (size_t)C);
  mult = (int32_t*)(base + (size_t)16 * (size_t)C);
  bias = (int32_t*)(base + (size_t)20 * (size_t)C);
  t = int_tensor_of(a->quant, a->opts);
  m31 = int_rate(a->opts, a->n);
  if (a->mode == FORGE_RECALIB_MODE_ADAPT &&
      !(hooks != NULL && hooks->stats != NULL &&
        hooks->stats(a->x, M, C, s2, s1, aexp))) {
    forge_recalib_stats_ansi(a->x, M, C, s2, s1, aexp);
  }
  for (c = 0; c < C; ++c) {
    const fx_t g = int_channel(c, C, s1, s2, M, a->beta, a->gamma_abs,
                               (int32_t*)a->state, a->opts, a->quant, a->mode, &t,
                               m31, &bias[c]);
    const int32_t ec = int_gain_exp(g);
    mult[c] = (int32_t)g.mant; /* A >= 0: gamma_abs >= 0 (or -0: mant 0) */
    aexp[c] = g.exp;
    if (ec > e) e = ec;
  }
  s = 21 - e; /* I6: every multiplier <= 2^22 */
  for (c = 0; c < C; ++c) {
    fx_t g;
    g.neg = 0;
    g.mant = (uint32_t)mult[c];
    g.exp = aexp[c];
    int_fold(g, bias[c], a->beta, c, &t, a->quant->z_x, a->quant->z_y, s, &mult[c],
             &bias[c]);
  }
  if (!(hooks != NULL && hooks->int_elementwise != NULL &&
        hooks->int_elementwise(a->x, a->y, M, C, mult, bias, s, a->quant))) {
    int_affine_pass(a->x, a->y, M, C, mult, bias, s, a->quant->qmin, a->quant->qmax);
  }
  return int_msg(msg, FORGE_RECALIB_OK, "ok");
}

int forge_recalib_s8_int(const forge_recalib_args* args, const char** msg) {
  return forge_recalib_int_run(args, NULL, msg);
}
