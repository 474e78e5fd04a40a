/* FORGE_RECALIB C core: BatchNorm re-estimation on a BN-folded int8 conv output.
 *
 * Framework-free C99 (no allocation, float32 only, no double). The contract,
 * including the exact float32 operation order, is custom_ops/forge_recalib/
 * SPEC.md; the numpy reference forge_tflm/ops/reference.py is its executable
 * definition and this file must match it bit for bit (outputs and state).
 *
 * Build with -ffp-contract=off (no FMA) and without -ffast-math; on a target
 * with FLT_EVAL_METHOD != 0 the results would differ, so that is an error.
 *
 * Typical use (a framework kernel does the same in Init/Prepare/Eval/Reset):
 *   forge_recalib_options opts;  forge_recalib_options_default(&opts);
 *   ... fill opts (or parse the flexbuffer, see forge_recalib_options.h) ...
 *   forge_recalib_validate_options(&opts, &msg);
 *   forge_recalib_prepare_quant(&opts, s_x, z_x, s_y, z_y, &quant, &msg);
 *   forge_recalib_state_reset(beta, gamma_abs, C, state, &msg);  // 2*C floats
 *   scratch = buffer of forge_recalib_scratch_bytes(C) bytes, 8-byte aligned
 *   forge_recalib_args args = {x, y, N, HW, C, beta, gamma_abs, state, &opts,
 *                              &quant, FORGE_RECALIB_MODE_ADAPT,
 *                              FORGE_RECALIB_PATH_AUTO, scratch, scratch_bytes};
 *   forge_recalib_s8_ansi(&args, &msg);
 * Every function returns a forge_recalib_status; on error `*msg` (when msg is
 * not NULL) points to a static, NUL-terminated description and no output or
 * state byte has been written.
 */
#ifndef FORGE_RECALIB_H_
#define FORGE_RECALIB_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  FORGE_RECALIB_OK = 0,
  FORGE_RECALIB_ERR_NULL = 1,     /* a required pointer is NULL */
  FORGE_RECALIB_ERR_SHAPE = 2,    /* N, HW, C out of range */
  FORGE_RECALIB_ERR_OPTIONS = 3,  /* invalid options */
  FORGE_RECALIB_ERR_QUANT = 4,    /* invalid scales / zero points */
  FORGE_RECALIB_ERR_TARGETS = 5,  /* invalid beta / gamma_abs */
  FORGE_RECALIB_ERR_SCRATCH = 6,  /* scratch too small or misaligned */
  FORGE_RECALIB_ERR_MODE = 7,     /* unknown mode or per-element path */
  FORGE_RECALIB_ERR_TYPE = 8      /* wrong tensor type (framework layers) */
} forge_recalib_status;

typedef enum {
  FORGE_RECALIB_ACT_NONE = 0,
  FORGE_RECALIB_ACT_RELU = 1,
  FORGE_RECALIB_ACT_RELU6 = 2,
  FORGE_RECALIB_ACT_COUNT
} forge_recalib_activation;

typedef enum {
  FORGE_RECALIB_VAR_BATCH = 0,
  FORGE_RECALIB_VAR_RUNNING = 1,
  FORGE_RECALIB_VAR_COUNT
} forge_recalib_variance;

/* Option `arithmetic` (SPEC.md "Integer arithmetic"): the float32 SPEC or the
 * integer one (fixed-point state, quantized multipliers; no float operation). */
typedef enum {
  FORGE_RECALIB_ARITH_FLOAT = 0,
  FORGE_RECALIB_ARITH_INT = 1,
  FORGE_RECALIB_ARITH_COUNT
} forge_recalib_arithmetic;

typedef enum {
  FORGE_RECALIB_MODE_ADAPT = 0,  /* update statistics, then renormalize */
  FORGE_RECALIB_MODE_FROZEN = 1, /* renormalize with the current state */
  FORGE_RECALIB_MODE_SOURCE = 2, /* renormalize with the clean targets
                                    (beta, gamma_abs^2); state untouched */
  FORGE_RECALIB_MODE_ADAPT_SAFE = 3, /* the statistics safe under correlated
                                        labels: ADAPT where option label_safe
                                        is 1, else SOURCE
                                        (forge_recalib_mode_for) */
  FORGE_RECALIB_MODE_COUNT
} forge_recalib_mode;

/* How the per-element pass is evaluated; all are bit-identical. */
typedef enum {
  FORGE_RECALIB_PATH_AUTO = 0,
  FORGE_RECALIB_PATH_AFFINE = 1,  /* per-channel A, B per element */
  FORGE_RECALIB_PATH_LUT = 2,     /* per-channel 256-entry int8 table */
  FORGE_RECALIB_PATH_COUNT
} forge_recalib_path;

/* The one spelling of each enum value (index = code; NULL for an unknown
 * code): the strings of custom_options (SPEC.md "Options"), which the option
 * parser and every binding use instead of repeating them. */
const char* forge_recalib_activation_name(int32_t code);
const char* forge_recalib_variance_name(int32_t code);
const char* forge_recalib_arithmetic_name(int32_t code);
const char* forge_recalib_mode_name(int32_t code);
const char* forge_recalib_path_name(int32_t code);

/* Limits (SPEC.md "Validation"). */
#define FORGE_RECALIB_MAX_M (1 << 22)      /* N*HW per channel */
#define FORGE_RECALIB_MAX_C 65536
/* Powers of two written in decimal (exact) so C++11 can include this. */
#define FORGE_RECALIB_SCALE_MIN 9.094947017729282379150390625e-13f /* 2^-40 */
#define FORGE_RECALIB_SCALE_MAX 1099511627776.0f /* 2^40 */
#define FORGE_RECALIB_TARGET_MAX 1099511627776.0f /* |beta|, gamma_abs */
#define FORGE_RECALIB_DEFAULT_EPS 1e-5f
/* Larger custom_options are rejected (a valid map is about 100 bytes). */
#define FORGE_RECALIB_MAX_OPTIONS_BYTES 512
/* AUTO uses the table when a channel has at least this many elements (and the
 * scratch holds it). 1024 suits scalar FPUs (MCUs, -O2: the table is 2x
 * faster); the host extension builds with INT32_MAX (always affine) since
 * vectorized (-O3) the affine pass is as fast or faster there. Both paths are
 * bit-identical. See README.md "Performance". */
#ifndef FORGE_RECALIB_LUT_MIN_M
#define FORGE_RECALIB_LUT_MIN_M 1024
#endif

/* Arena bytes per FORGE_RECALIB node on 32-bit TFLM targets besides its 8*C
 * state: the kernel's op data (persistent), and TFLM's own bookkeeping for the
 * node (NodeAndRegistration, the TfLiteEvalTensors of y, beta and gamma_abs, one
 * ScratchBufferHandle). micro/forge_recalib_kernel.cc checks both against the
 * real layouts on every 32-bit build; the manifest's memory figures use them.
 * TFLM rounds each persistent buffer up to FORGE_RECALIB_ARENA_ALIGN. */
#define FORGE_RECALIB_OP_DATA_BYTES_ILP32 120
#define FORGE_RECALIB_TFLM_NODE_BYTES_ILP32 72
#define FORGE_RECALIB_ARENA_ALIGN 16

/* The options a model carries, in SPEC.md order, as X(field, kind) with kind
 * FLOAT, INT or the enum whose names the value takes (ACTIVATION, VARIANCE,
 * ARITHMETIC).
 * Bindings walk this list instead of naming fields, so a new option is a new
 * struct field, a line here and its case in the parser. use_window is derived:
 * window given (1) or momentum given (0). */
#define FORGE_RECALIB_OPTION_FIELDS(X) \
  X(momentum, FLOAT)                   \
  X(window, INT)                       \
  X(eps, FLOAT)                        \
  X(activation, ACTIVATION)            \
  X(variance, VARIANCE)                \
  X(arithmetic, ARITHMETIC)            \
  X(label_safe, INT)

typedef struct {
  int32_t use_window; /* 0: fixed momentum, 1: window (m = min(1, N/W)) */
  float momentum;     /* in [0, 1] when use_window == 0 */
  int32_t window;     /* >= 1 when use_window == 1 */
  float eps;          /* finite, > 0 */
  int32_t activation; /* forge_recalib_activation */
  int32_t variance;   /* forge_recalib_variance */
  int32_t arithmetic;   /* forge_recalib_arithmetic */
  int32_t label_safe;   /* 0 or 1: adapts in mode ADAPT_SAFE (SPEC "Adapt-safe mode") */
} forge_recalib_options;

/* The mode an op with these options runs for the mode it is given: ADAPT_SAFE
 * becomes ADAPT where label_safe is set, else SOURCE; other modes stay. Every caller (the TFLM
 * kernel, the Python binding) resolves through this. */
int32_t forge_recalib_mode_for(const forge_recalib_options* opts, int32_t mode);

/* forge_recalib_quant.magic once forge_recalib_prepare_quant has filled it. */
#define FORGE_RECALIB_QUANT_MAGIC 0x46524351u /* "FRCQ" */

/* Quantization constants, computed once by forge_recalib_prepare_quant. */
typedef struct {
  float s_x, s_y;
  int32_t z_x, z_y;
  float r;       /* s_x / s_y */
  float inv_sy;  /* 1 / s_y */
  float sx2;     /* s_x * s_x */
  float zy_f;    /* (float)z_y */
  int32_t qmin, qmax;
  float qmin_f, qmax_f;
  int32_t activation; /* the activation qmin/qmax were computed for */
  uint32_t magic;     /* set by prepare_quant; guards uninitialized use */
} forge_recalib_quant;

const char* forge_recalib_status_string(int status);

/* momentum 0.1 would be arbitrary, so defaults leave the rate unset
 * (use_window = -1, rejected by validation): the caller must choose one. */
void forge_recalib_options_default(forge_recalib_options* opts);
int forge_recalib_validate_options(const forge_recalib_options* opts,
                                   const char** msg);

int forge_recalib_prepare_quant(const forge_recalib_options* opts, float s_x,
                                int32_t z_x, float s_y, int32_t z_y,
                                forge_recalib_quant* quant, const char** msg);

/* Prepare's integer part alone: validation, zero points, qmin/qmax (the
 * float32 relu6 bound emulated on integers), magic; the float constants (r,
 * inv_sy, sx2, zy_f, qmin_f, qmax_f) stay 0. No float operation: what the
 * integer arithmetic needs, and all an FPU-less build of it
 * (FORGE_RECALIB_INT_ONLY) links. forge_recalib_prepare_quant = this + those. */
int forge_recalib_prepare_quant_int(const forge_recalib_options* opts, float s_x,
                                    int32_t z_x, float s_y, int32_t z_y,
                                    forge_recalib_quant* quant, const char** msg);

/* Validates beta/gamma_abs (finite, |beta| <= 2^40, 0 <= gamma_abs <= 2^40). */
int forge_recalib_check_targets(const float* beta, const float* gamma_abs,
                                int32_t C, const char** msg);

/* state[0..C) = beta, state[C..2C) = gamma_abs * gamma_abs. Validates targets. */
int forge_recalib_state_reset(const float* beta, const float* gamma_abs,
                              int32_t C, float* state, const char** msg);

/* Scratch bytes for any path (the LUT path is the largest); 0 if C invalid. */
size_t forge_recalib_scratch_bytes(int32_t C);
/* Scratch bytes enough for the affine path only (AUTO then never uses LUT). */
size_t forge_recalib_scratch_bytes_affine(int32_t C);
/* Bytes of an op's state block (SPEC "State": [mu, var], 8 per channel; the
 * integer arithmetic's int32 state is the same size); 0 if C invalid. */
size_t forge_recalib_state_bytes(int32_t C);

/* One invocation's operands: x[n][hw][c] -> y (same layout). y may equal x
 * (in place) but must not otherwise overlap x; state (2*c floats, or 2*c int32
 * with arithmetic int) must not overlap anything. beta/gamma_abs are assumed
 * validated (forge_recalib_state_reset or forge_recalib_check_targets); they are
 * not re-checked per call. path is FORGE_RECALIB_PATH_AUTO (0) unless a test or
 * benchmark forces the per-element path. */
typedef struct {
  const int8_t* x;
  int8_t* y;
  int32_t n, hw, c;
  const float* beta;
  const float* gamma_abs;
  void* state;
  const forge_recalib_options* opts;
  const forge_recalib_quant* quant;
  int32_t mode; /* forge_recalib_mode */
  int32_t path; /* forge_recalib_path */
  void* scratch;
  size_t scratch_bytes;
} forge_recalib_args;

/* One invocation: the plain C core every build compiles; each target variant
 * below has this signature and these results, bit for bit. */
int forge_recalib_s8_ansi(const forge_recalib_args* args, const char** msg);

/* ------------------------------------------ Integer arithmetic (option int)
 * SPEC.md "Integer arithmetic": src/forge_recalib_int.c, integer operations only
 * (float32 constants are read from their bits). The state is then 2*C int32,
 * [mu (Q16), var (Q12)] in x's quantized units, in the same 8 bytes per channel;
 * forge_recalib_s8_ansi and every variant run it for this option, with the
 * variant's stats pass and its int_elementwise hook where it has one. */
#define FORGE_RECALIB_INT_MU_MAX (1 << 30)       /* |mu|, Q16: 16384 units */
#define FORGE_RECALIB_INT_VAR_MAX ((1 << 30) - 1) /* var, Q12: 2^18 units^2 */
#define FORGE_RECALIB_INT_MULT_MAX (1 << 22) /* per-element multiplier (I6) */
#define FORGE_RECALIB_INT_BIAS_MAX (1 << 30) /* folded bias, saturated (I7) */

/* state = the reset values beta / s_x (Q16) and (gamma_abs / s_x)^2 (Q12),
 * saturated; validates the targets (as forge_recalib_check_targets, on their
 * bits) and needs a quant from forge_recalib_prepare_quant. */
int forge_recalib_int_state_reset(const forge_recalib_quant* quant,
                                  const float* beta, const float* gamma_abs,
                                  int32_t C, int32_t* state, const char** msg);

/* One invocation of the integer arithmetic (opts->arithmetic must be
 * FORGE_RECALIB_ARITH_INT), state int32 [2 c]. The per-element pass is the affine
 * one (scratch: forge_recalib_scratch_bytes_affine). */
int forge_recalib_s8_int(const forge_recalib_args* args, const char** msg);

/* Internal: the hot loops a target variant may replace (forge_recalib_s8_hooked
 * runs the whole invocation, validation and every float32 step of the SPEC
 * included, and calls these where set). Each returns 1 when it did the work,
 * 0 (touching nothing) to let the ansi loop run.
 *   stats:       S1/S2 of x[M][C] into s1/s2 (s2_blk: C int32 of scratch).
 *   elementwise: y from x with the coefficients a/b; lut is the [C][256]
 *                table area when the table path was chosen, else NULL.
 *   int_elementwise (arithmetic int, SPEC I8; NULL: the ansi loop):
 *                y = clamp((q * mult[c] + bias[c]) >> shift, qmin, qmax). */
typedef struct {
  int (*stats)(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
               int32_t* s1, int32_t* s2_blk);
  int (*elementwise)(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                     const float* a, const float* b,
                     const forge_recalib_quant* quant, int8_t* lut);
  int32_t lut_min_m; /* AUTO takes the table from this M on */
  int (*int_elementwise)(const int8_t* x, int8_t* y, int32_t M, int32_t C,
                         const int32_t* mult, const int32_t* bias,
                         int32_t shift, const forge_recalib_quant* quant);
} forge_recalib_hooks;

int forge_recalib_s8_hooked(const forge_recalib_args* args,
                            const forge_recalib_hooks* hooks, const char** msg);

/* ------------------------------------------------- MCU target variants
 * Same contract and results, bit for bit (outputs and state), as
 * forge_recalib_s8_ansi: the integer sums and the table lookups are
 * reorganized, every float32 step is the SPEC's, in its order. Each lives in
 * its own file, which compiles to nothing off its target, so every build
 * compiles the one list of the op's sources (custom_ops/forge_recalib/
 * sources.txt); forge_recalib.c (ansi) always runs.
 *
 *   forge_recalib_s8_cortexm  src/forge_recalib_cortexm.c  Armv7E-M / v8-M
 *       with the DSP extension (Cortex-M4/M7/M33/M55): SIMD32 stats pass,
 *       integer-clamped scalar affine pass, 256-entry table path; arithmetic
 *       int: its SPEC I8 loop with SSAT.
 *   forge_recalib_s8_mve      src/forge_recalib_mve.c  Armv8.1-M with Helium
 *       floating point (Cortex-M55/M85): vector stats and affine passes,
 *       gather-load table path; arithmetic int: I8 on int32 vectors.
 *   forge_recalib_s8_esp32s3  src/forge_recalib_esp32s3.c  ESP32-S3 (Xtensa
 *       LX7 + PIE, FORGE_RECALIB_ESP32S3 defined by the build): PIE stats
 *       pass, scalar-FPU affine pass, table path with its clamped runs found
 *       by binary search.
 *
 * FORGE_RECALIB_*_AVAILABLE: the compiler targets that extension (the S3's
 * PIE is invisible to the preprocessor: Xtensa plus the build's
 * FORGE_RECALIB_ESP32S3, which also selects it).
 * FORGE_RECALIB_CORTEXM (set by a build that compiles the variant files):
 * FORGE_RECALIB_S8_TARGET names the best variant available, which the TFLM
 * kernel calls; without it (ESP-IDF, hosts, other builds) it is the ansi core. */
#if defined(__ARM_FEATURE_DSP) && defined(__ARM_ARCH_PROFILE) && \
    __ARM_ARCH_PROFILE == 'M'
#define FORGE_RECALIB_CORTEXM_AVAILABLE 1
#endif
#if defined(__ARM_FEATURE_MVE) && (__ARM_FEATURE_MVE & 2)
#define FORGE_RECALIB_MVE_AVAILABLE 1
#endif
#if defined(__XTENSA__) && defined(FORGE_RECALIB_ESP32S3)
#define FORGE_RECALIB_ESP32S3_AVAILABLE 1
#endif

#if defined(FORGE_RECALIB_CORTEXM_AVAILABLE)
int forge_recalib_s8_cortexm(const forge_recalib_args* args, const char** msg);
#endif
#if defined(FORGE_RECALIB_MVE_AVAILABLE)
int forge_recalib_s8_mve(const forge_recalib_args* args, const char** msg);
#endif
#if defined(FORGE_RECALIB_ESP32S3_AVAILABLE)
int forge_recalib_s8_esp32s3(const forge_recalib_args* args, const char** msg);
#endif

#if defined(FORGE_RECALIB_CORTEXM) && defined(FORGE_RECALIB_MVE_AVAILABLE)
#define FORGE_RECALIB_S8_TARGET forge_recalib_s8_mve
#elif defined(FORGE_RECALIB_CORTEXM) && defined(FORGE_RECALIB_CORTEXM_AVAILABLE)
#define FORGE_RECALIB_S8_TARGET forge_recalib_s8_cortexm
#elif defined(FORGE_RECALIB_ESP32S3_AVAILABLE)
#define FORGE_RECALIB_S8_TARGET forge_recalib_s8_esp32s3
#else
#define FORGE_RECALIB_S8_TARGET forge_recalib_s8_ansi
#endif

#ifdef FORGE_RECALIB_X86
/* Host-only variant (the Python extension defines FORGE_RECALIB_X86; MCU and
 * TFLM builds compile src/forge_recalib_x86.c to nothing): same contract and
 * results, bit for bit, as forge_recalib_s8_ansi. On x86-64 its hooks run the
 * stats and affine passes in AVX2 / AVX-512F loops when the CPU has them
 * (checked at run time); elsewhere, for channel counts those loops do not cover
 * and on the LUT path the ansi loops run. */
int forge_recalib_s8_x86(const forge_recalib_args* args, const char** msg);

/* Instruction sets of the x86 loops, in order. */
#define FORGE_RECALIB_X86_NONE 0
#define FORGE_RECALIB_X86_AVX2 1
#define FORGE_RECALIB_X86_AVX512 2

/* The x86 hooks with the instruction set capped at max_isa (the best the CPU
 * has below it is used), for forge_recalib_s8_hooked: tests and benchmarks. */
const forge_recalib_hooks* forge_recalib_x86_hooks(int32_t max_isa);
/* The best FORGE_RECALIB_X86_* this machine runs (0 off x86 / without AVX2). */
int forge_recalib_x86_active(void);
#endif  /* FORGE_RECALIB_X86 */

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FORGE_RECALIB_H_ */
