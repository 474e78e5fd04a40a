/* FORGE_RECALIB hot loops for x86-64 hosts: stats pass (AVX2), affine pass
 * (AVX-512F or AVX2).
 *
 * Host build only (FORGE_RECALIB_X86, set by setup.py; every other build
 * compiles this file to nothing): hooks for forge_recalib_s8_hooked, like the
 * MCU variants'. The loops carry target attributes and run only when the CPU
 * reports the instruction set, so the extension still loads on any x86-64 (and
 * off x86 the hooks leave every loop to the ansi core).
 *
 * Bit-exact to forge_recalib_s8_ansi: the integer sums are exact in any order,
 * and every float step is the same IEEE float32 operation per lane, in SPEC
 * order, round to nearest: vcvtdq2ps, vmulps, vaddps, vaddps, vminps,
 * vcvttps2dq (no FMA: neither -mfma nor contraction is enabled).
 *
 * Layout: x[M][C] is one stream of M*C bytes and byte i belongs to channel
 * i % C, so over a period of P = lcm(C, 32) (AVX-512: lcm(C, 64)) bytes every
 * vector lane keeps one channel. The loops run over whole periods with
 * per-lane sums/coefficients (P == C when C is a multiple: the lanes are the
 * channels) and finish the < P/C remaining rows in scalar code.
 */
#include "forge_recalib.h"

#ifdef FORGE_RECALIB_X86

#if defined(__x86_64__) && defined(__GNUC__)
#define FORGE_RECALIB_X86_SIMD 1
#include <immintrin.h>
#endif

#ifdef FORGE_RECALIB_X86_SIMD

/* Largest period kept in stack lane arrays (C not a multiple of the vector
 * width): the AVX2 period lcm(C, 32) fits for every C <= 64; beyond (e.g. odd
 * C > 64) the ansi loops run, and the AVX-512 loop falls back to AVX2 when
 * lcm(C, 64) does not fit. */
#define X86_MAX_PERIOD 2048

int forge_recalib_x86_active(void) {
  static int cached = -1; /* Benign race: every thread computes the same. */
  if (cached < 0) {
    __builtin_cpu_init();
    cached = __builtin_cpu_supports("avx512f")  ? FORGE_RECALIB_X86_AVX512
             : __builtin_cpu_supports("avx2") ? FORGE_RECALIB_X86_AVX2
                                               : FORGE_RECALIB_X86_NONE;
  }
  return cached;
}

static int x86_isa(int max_isa) {
  const int have = forge_recalib_x86_active();
  return have < max_isa ? have : max_isa;
}

/* lcm(C, lanes) (lanes: a power of two <= 64) if it fits the lane arrays,
 * else 0. */
static int32_t period(int32_t C, int32_t lanes) {
  int32_t low = C & -C; /* largest power of two dividing C */
  int32_t p;
  if (C % lanes == 0) return C;
  p = C * (lanes / low);
  return p <= X86_MAX_PERIOD ? p : 0;
}

/* Lane sums over `nper` periods of P bytes: l1 += q, l2 += q*q per lane.
 * Periods go in groups that stay in L1 while each 32-byte column is summed
 * in registers; int16 sums of q hold 256 periods (|256 * -128| = 2^15) and
 * int32 sums of q*q (<= 2^14 each) far more, then they are added to l1/l2. */
__attribute__((target("avx2"))) static void stats_avx2(
    const int8_t* x, size_t nper, int32_t P, int32_t* l1, int64_t* l2) {
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  size_t group = (size_t)(16384 / P), p0;
  if (group < 1) group = 1;
  if (group > 256) group = 256;
  for (p0 = 0; p0 < nper; p0 += group) {
    const size_t g = nper - p0 < group ? nper - p0 : group;
    const int8_t* base = x + p0 * (size_t)P;
    int32_t j;
    for (j = 0; j < P; j += 32) {
      __m256i s1a = _mm256_setzero_si256(), s1b = _mm256_setzero_si256();
      __m256i eva = _mm256_setzero_si256(), oda = _mm256_setzero_si256();
      __m256i evb = _mm256_setzero_si256(), odb = _mm256_setzero_si256();
      const int8_t* p = base + j;
      int32_t t1[32], t2[32];
      size_t i;
      int k;
      for (i = 0; i < g; ++i, p += P) {
        const __m256i qa = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)p));
        const __m256i qb =
            _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(p + 16)));
        /* q*q <= 2^14 fits an int16 lane; its 32-bit pair splits into the
         * even element (low half) and the odd one (high half). */
        const __m256i sqa = _mm256_mullo_epi16(qa, qa);
        const __m256i sqb = _mm256_mullo_epi16(qb, qb);
        s1a = _mm256_add_epi16(s1a, qa);
        s1b = _mm256_add_epi16(s1b, qb);
        eva = _mm256_add_epi32(eva, _mm256_and_si256(sqa, low16));
        oda = _mm256_add_epi32(oda, _mm256_srli_epi32(sqa, 16));
        evb = _mm256_add_epi32(evb, _mm256_and_si256(sqb, low16));
        odb = _mm256_add_epi32(odb, _mm256_srli_epi32(sqb, 16));
      }
      /* Back to byte order: q sums widen per half; even/odd squares
       * interleave (unpack works per 128-bit lane, permute2x128 fixes it). */
      _mm256_storeu_si256((__m256i*)(t1 + 0),
                          _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s1a)));
      _mm256_storeu_si256((__m256i*)(t1 + 8),
                          _mm256_cvtepi16_epi32(_mm256_extracti128_si256(s1a, 1)));
      _mm256_storeu_si256((__m256i*)(t1 + 16),
                          _mm256_cvtepi16_epi32(_mm256_castsi256_si128(s1b)));
      _mm256_storeu_si256((__m256i*)(t1 + 24),
                          _mm256_cvtepi16_epi32(_mm256_extracti128_si256(s1b, 1)));
      {
        const __m256i la = _mm256_unpacklo_epi32(eva, oda);
        const __m256i ha = _mm256_unpackhi_epi32(eva, oda);
        const __m256i lb = _mm256_unpacklo_epi32(evb, odb);
        const __m256i hb = _mm256_unpackhi_epi32(evb, odb);
        _mm256_storeu_si256((__m256i*)(t2 + 0), _mm256_permute2x128_si256(la, ha, 0x20));
        _mm256_storeu_si256((__m256i*)(t2 + 8), _mm256_permute2x128_si256(la, ha, 0x31));
        _mm256_storeu_si256((__m256i*)(t2 + 16), _mm256_permute2x128_si256(lb, hb, 0x20));
        _mm256_storeu_si256((__m256i*)(t2 + 24), _mm256_permute2x128_si256(lb, hb, 0x31));
      }
      for (k = 0; k < 32; ++k) {
        l1[j + k] += t1[k];
        l2[j + k] += t2[k];
      }
    }
  }
}

static int x86_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                     int32_t* s1, int32_t* s2_blk, int max_isa) {
  /* AVX2 only: the affine pass dominates (~2/3 of adapt); a 512-bit stats
   * loop was not tried. */
  const int32_t P =
      x86_isa(max_isa) >= FORGE_RECALIB_X86_AVX2 ? period(C, 32) : 0;
  const size_t total = (size_t)M * (size_t)C;
  size_t nper, idx;
  int32_t c, k;
  (void)s2_blk; /* Lane sums of q*q go to int64 every <= 256 periods. */
  if (P == 0) return 0;
  nper = total / (size_t)P;
  for (c = 0; c < C; ++c) {
    s1[c] = 0;
    s2[c] = 0;
  }
  if (P == C) {
    stats_avx2(x, nper, P, s1, s2);
  } else {
    /* |lane sum of q| <= 128 * M <= 2^29: int32 is exact. */
    int32_t l1[X86_MAX_PERIOD];
    int64_t l2[X86_MAX_PERIOD];
    for (k = 0; k < P; ++k) {
      l1[k] = 0;
      l2[k] = 0;
    }
    stats_avx2(x, nper, P, l1, l2);
    for (k = 0; k < P; ++k) {
      s1[k % C] += l1[k];
      s2[k % C] += l2[k];
    }
  }
  /* Remaining rows (the periods cover whole rows: P is a multiple of C). */
  for (idx = nper * (size_t)P; idx < total; idx += (size_t)C) {
    for (c = 0; c < C; ++c) {
      const int32_t q = x[idx + (size_t)c];
      s1[c] += q;
      s2[c] += q * q;
    }
  }
  return 1;
}

/* SPEC per-element rule on 8 lanes, with the clamp moved after the + 128.5f
 * (same result: rounding is monotonic and qmin + 128.5f, qmax + 128.5f are
 * exact, so w = fl(v + 128.5f) is <= / >= them exactly when v is <= qmin /
 * >= qmax). vminps returns its second operand when either is NaN, so
 * min(hi, w) keeps a NaN; vcvttps2dq maps NaN and anything below -2^31 to
 * INT32_MIN, which the integer max with qmin + 128 turns into qmin, as the
 * SPEC's `!(v >= qmin_f)` does. The integer max also eases the FP ports. */
__attribute__((target("avx2"), always_inline)) static inline __m256i requant8(
    const int8_t* x, const float* a, const float* b, __m256i zx, __m256i lo,
    __m256 hi, __m256 half) {
  const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)x));
  const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(q, zx)); /* exact */
  const __m256 prod = _mm256_mul_ps(f, _mm256_loadu_ps(a));
  const __m256 v = _mm256_add_ps(prod, _mm256_loadu_ps(b));
  const __m256 w = _mm256_min_ps(hi, _mm256_add_ps(v, half));
  return _mm256_max_epi32(_mm256_cvttps_epi32(w), lo); /* in [0, 255] */
}

/* y = requantized x over `nper` periods of P bytes; a/b hold P lanes. y may
 * be x: each 32-byte block is loaded before it is stored. */
__attribute__((target("avx2"))) static void affine_avx2(
    const int8_t* x, int8_t* y, size_t nper, int32_t P, const float* a,
    const float* b, int32_t z_x, float qmin_f, float qmax_f) {
  const __m256i zx = _mm256_set1_epi32(z_x);
  const __m256 hi = _mm256_set1_ps(qmax_f + 128.5f); /* exact: |qmax| <= 128 */
  const __m256i lo = _mm256_set1_epi32((int32_t)qmin_f + 128);
  const __m256 half = _mm256_set1_ps(128.5f);
  /* packs/packus interleave per 128-bit lane; this restores element order. */
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i flip = _mm256_set1_epi8((char)0x80);
  size_t i;
  for (i = 0; i < nper; ++i) {
    const int8_t* xp = x + i * (size_t)P;
    int8_t* yp = y + i * (size_t)P;
    int32_t j;
    for (j = 0; j < P; j += 32) {
      const __m256i r0 = requant8(xp + j, a + j, b + j, zx, lo, hi, half);
      const __m256i r1 = requant8(xp + j + 8, a + j + 8, b + j + 8, zx, lo, hi, half);
      const __m256i r2 =
          requant8(xp + j + 16, a + j + 16, b + j + 16, zx, lo, hi, half);
      const __m256i r3 =
          requant8(xp + j + 24, a + j + 24, b + j + 24, zx, lo, hi, half);
      __m256i u = _mm256_packus_epi16(_mm256_packs_epi32(r0, r1),
                                      _mm256_packs_epi32(r2, r3));
      /* (int32)(v + 128.5f) - 128 as int8 == that uint8 value XOR 0x80. */
      u = _mm256_xor_si256(_mm256_permutevar8x32_epi32(u, order), flip);
      _mm256_storeu_si256((__m256i*)(yp + j), u);
    }
  }
}

/* affine_avx2 with 16 lanes per vector (P a multiple of 64; ~25% faster on a
 * Zen 4 host, measured); vpmovdb narrows without the pack shuffles. */
__attribute__((target("avx512f"))) static void affine_avx512(
    const int8_t* x, int8_t* y, size_t nper, int32_t P, const float* a,
    const float* b, int32_t z_x, float qmin_f, float qmax_f) {
  const __m512i zx = _mm512_set1_epi32(z_x);
  const __m512 hi = _mm512_set1_ps(qmax_f + 128.5f);
  const __m512i lo = _mm512_set1_epi32((int32_t)qmin_f + 128);
  const __m512 half = _mm512_set1_ps(128.5f);
  const __m128i flip = _mm_set1_epi8((char)0x80);
  size_t i;
  for (i = 0; i < nper; ++i) {
    const int8_t* xp = x + i * (size_t)P;
    int8_t* yp = y + i * (size_t)P;
    int32_t j;
    for (j = 0; j < P; j += 16) {
      const __m512i q =
          _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)(xp + j)));
      const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(q, zx));
      const __m512 prod = _mm512_mul_ps(f, _mm512_loadu_ps(a + j));
      const __m512 v = _mm512_add_ps(prod, _mm512_loadu_ps(b + j));
      const __m512 w = _mm512_min_ps(hi, _mm512_add_ps(v, half));
      const __m512i t = _mm512_max_epi32(_mm512_cvttps_epi32(w), lo);
      _mm_storeu_si128((__m128i*)(yp + j),
                       _mm_xor_si128(_mm512_cvtepi32_epi8(t), flip));
    }
  }
}

/* Same formula as requantize() in forge_recalib.c (scalar tail). */
static int8_t requantize1(int32_t q, int32_t z_x, float a, float b,
                          float qmin_f, float qmax_f) {
  float prod = (float)(q - z_x) * a;
  float v = prod + b;
  if (!(v >= qmin_f)) v = qmin_f;
  if (v > qmax_f) v = qmax_f;
  return (int8_t)((int32_t)(v + 128.5f) - 128);
}

static int x86_affine(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                      const float* a, const float* b,
                      const forge_recalib_quant* quant, int max_isa) {
  const int isa = x86_isa(max_isa);
  const size_t total = (size_t)M * (size_t)C;
  size_t nper, idx;
  int32_t c, k, P = 0;
  int wide = 0;
  float ea[X86_MAX_PERIOD], eb[X86_MAX_PERIOD];
  const float *pa = a, *pb = b;
  if (isa >= FORGE_RECALIB_X86_AVX512) {
    P = period(C, 64);
    wide = P != 0;
  }
  if (!wide && isa >= FORGE_RECALIB_X86_AVX2) P = period(C, 32);
  if (P == 0) return 0;
  nper = total / (size_t)P;
  if (P != C) { /* Coefficients per lane of one period. */
    for (k = 0; k < P; ++k) {
      ea[k] = a[k % C];
      eb[k] = b[k % C];
    }
    pa = ea;
    pb = eb;
  }
  if (wide) {
    affine_avx512(x, y, nper, P, pa, pb, quant->z_x, quant->qmin_f,
                  quant->qmax_f);
  } else {
    affine_avx2(x, y, nper, P, pa, pb, quant->z_x, quant->qmin_f,
                quant->qmax_f);
  }
  for (idx = nper * (size_t)P; idx < total; idx += (size_t)C) {
    for (c = 0; c < C; ++c) {
      y[idx + (size_t)c] = requantize1(x[idx + (size_t)c], quant->z_x, a[c],
                                       b[c], quant->qmin_f, quant->qmax_f);
    }
  }
  return 1;
}

/* The hooks per instruction-set cap: the stats loop is AVX2 at either cap. */
static int hook_stats(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                      int32_t* s1, int32_t* s2_blk) {
  return x86_stats(x, M, C, s2, s1, s2_blk, FORGE_RECALIB_X86_AVX2);
}

static int affine_cap(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                      const float* a, const float* b,
                      const forge_recalib_quant* quant, const int8_t* lut,
                      int max_isa) {
  return lut == NULL && x86_affine(x, y, M, C, a, b, quant, max_isa);
}

static int hook_affine_avx2(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                            const float* a, const float* b,
                            const forge_recalib_quant* quant, int8_t* lut) {
  return affine_cap(x, y, M, C, a, b, quant, lut, FORGE_RECALIB_X86_AVX2);
}

static int hook_affine_avx512(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                              const float* a, const float* b,
                              const forge_recalib_quant* quant, int8_t* lut) {
  return affine_cap(x, y, M, C, a, b, quant, lut, FORGE_RECALIB_X86_AVX512);
}

static const forge_recalib_hooks kX86Hooks[] = {
    {NULL, NULL, FORGE_RECALIB_LUT_MIN_M, NULL},
    {hook_stats, hook_affine_avx2, FORGE_RECALIB_LUT_MIN_M, NULL},
    {hook_stats, hook_affine_avx512, FORGE_RECALIB_LUT_MIN_M, NULL},
};

#else  /* !FORGE_RECALIB_X86_SIMD: nothing to dispatch to. */

int forge_recalib_x86_active(void) { return FORGE_RECALIB_X86_NONE; }

static const forge_recalib_hooks kX86Hooks[] = {
    {NULL, NULL, FORGE_RECALIB_LUT_MIN_M, NULL},
    {NULL, NULL, FORGE_RECALIB_LUT_MIN_M, NULL},
    {NULL, NULL, FORGE_RECALIB_LUT_MIN_M, NULL},
};

#endif  /* FORGE_RECALIB_X86_SIMD */

const forge_recalib_hooks* forge_recalib_x86_hooks(int32_t max_isa) {
  if (max_isa < FORGE_RECALIB_X86_NONE) max_isa = FORGE_RECALIB_X86_NONE;
  if (max_isa > FORGE_RECALIB_X86_AVX512) max_isa = FORGE_RECALIB_X86_AVX512;
  return &kX86Hooks[max_isa];
}

int forge_recalib_s8_x86(const forge_recalib_args* args, const char** msg) {
  return forge_recalib_s8_hooked(args, forge_recalib_x86_hooks(FORGE_RECALIB_X86_AVX512),
                                 msg);
}

#endif  /* FORGE_RECALIB_X86 */

/* ISO C forbids an empty translation unit. */
typedef int forge_recalib_x86_translation_unit_not_empty;
