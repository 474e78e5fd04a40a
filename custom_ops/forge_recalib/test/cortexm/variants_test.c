/* Bit-exactness test and instruction counts of the Cortex-M variants of the
 * FORGE_RECALIB C core against forge_recalib_s8_ansi, bare metal under
 * qemu-system-arm (mps2-an386 Cortex-M4F, mps3-an547 Cortex-M55); see
 * Makefile and tests/custom_ops/test_cortexm_variants.py. The same file tests
 * the ESP32-S3 variant under qemu-system-xtensa (../esp32s3/Makefile,
 * tests/custom_ops/test_esp32s3_variants.py).
 *
 * Test (default): random cases (C in 1..70, 96, 128, 256; M = N*HW from 1 to
 * a few thousand; adapt/frozen; every activation and variance estimator;
 * window and momentum; several steps per case so the state evolves;
 * saturated and constant inputs, extreme scales, gamma 0 / tiny eps for
 * inf/NaN coefficients, in place). Each variant runs with paths auto, affine
 * and table, each with its own state; outputs and state bytes are compared
 * with ansi after every step. Output lines:
 *   FAIL variant=<v> path=<p> case=<i> step=<s> what=<output|state|status> ...
 *   summary board=<b> variant=<v> cases=<n> checks=<k> failures=<f> result=PASS|FAIL
 *   done result=PASS|FAIL
 * Bench (--bench, run with -icount shift=0): the ResNet-20 site shapes at
 * batch 1, adapting, per variant and path (path=int: arithmetic int, its I8
 * loop); SysTick ticks converted to
 * instructions with the calibration printed by the test:
 *   bench board=<b> variant=<v> path=<p> shape=HxWxC instructions=<n> per_element=<x.xx>
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "forge_recalib.h"

#if defined(__XTENSA__)
/* The ESP32-S3 build (../esp32s3/Makefile): esp32s3_app/esp32s3/startup.c,
 * CCOUNT as the clock, lines through UART0. */
extern uint64_t esp32s3_ccount64(void);
extern const char* esp32s3_cmdline(char* buf, int size);
extern void esp32s3_write0(const char* s);
#define cortexm_systick_start() ((void)0)
#define cortexm_systick_ticks esp32s3_ccount64
#define cortexm_cmdline esp32s3_cmdline
#define cortexm_write0 esp32s3_write0
#else
extern void cortexm_systick_start(void);
extern uint64_t cortexm_systick_ticks(void);
extern const char* cortexm_cmdline(char* buf, int size);
extern void cortexm_write0(const char* s);
#endif

/* Lines go out through SYS_WRITE0 (QEMU's semihosting console, which a
 * chardev can send to a file), as esp32s3_app/cortexm does. */
static void out(const char* fmt, ...) {
  char line[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  cortexm_write0(line);
}

#ifndef BOARD_NAME
#define BOARD_NAME "unknown"
#endif

/* ------------------------------------------------------------- variants */

typedef struct {
  const char* name;
  int (*fn)(const forge_recalib_args*, const char**);
} Variant;

static const Variant kVariants[] = {
    {"ansi", forge_recalib_s8_ansi},
#ifdef FORGE_RECALIB_CORTEXM_AVAILABLE
    {"cortexm", forge_recalib_s8_cortexm},
#endif
#ifdef FORGE_RECALIB_MVE_AVAILABLE
    {"mve", forge_recalib_s8_mve},
#endif
#ifdef FORGE_RECALIB_ESP32S3_AVAILABLE
    {"esp32s3", forge_recalib_s8_esp32s3},
#endif
};
#define NUM_VARIANTS ((int)(sizeof(kVariants) / sizeof(kVariants[0])))
static const char* const kPathNames[4] = {"auto", "affine", "lut", "int"};

/* ------------------------------------------------------------------ rng */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static int32_t rnd_int(int32_t lo, int32_t hi) { /* [lo, hi] */
  return lo + (int32_t)(rnd() % (uint32_t)(hi - lo + 1));
}
static float rnd_unit(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f; }
static float pow2f(int32_t e) {
  float v = 1.0f;
  while (e > 0) v *= 2.0f, --e;
  while (e < 0) v *= 0.5f, ++e;
  return v;
}
static float rnd_log(int32_t e_lo, int32_t e_hi) { /* ~ 2^[e_lo, e_hi] */
  return pow2f(rnd_int(e_lo, e_hi - 1)) * (1.0f + rnd_unit());
}

/* ---------------------------------------------------------------- buffers */

#ifndef MAX_ELEMS /* the S3's 480 KB of data RAM holds 3072 * 32 */
#define MAX_ELEMS (3072 * 70)
#endif
#define MAX_C 256
#define NUM_SLOTS (1 + 3 * 2) /* ansi + (variant x path), at most 2 variants */
/* 16-byte aligned as every TFLM arena tensor: the ESP32-S3 PIE statistics pass runs
 * only on 8-byte aligned input (it was never reached here before). */
static int8_t g_x[MAX_ELEMS] __attribute__((aligned(16)));
static int8_t g_y_ref[MAX_ELEMS] __attribute__((aligned(16)));
static int8_t g_y[MAX_ELEMS] __attribute__((aligned(16)));
static float g_beta[MAX_C], g_gamma[MAX_C];
static float g_state[NUM_SLOTS][2 * MAX_C];
static uint64_t g_scratch[(280 * MAX_C) / 8];

static const int32_t kChannelPool[] = {96, 128, 256};

static void fill_input(int8_t* x, int32_t n, int32_t kind, int32_t center,
                       int32_t spread) {
  int32_t i;
  for (i = 0; i < n; ++i) {
    int32_t v;
    switch (kind) {
      case 0: /* uniform int8 */
        v = rnd_int(-128, 127);
        break;
      case 1: /* saturated */
        v = (rnd() & 1) ? 127 : -128;
        break;
      case 2: /* constant */
        v = center;
        break;
      case 4: /* rectified (a ReLU conv output at zero point -128): mostly -128 */
        v = (rnd() % 4) != 0 ? -128 : rnd_int(-128, 127);
        break;
      case 5: /* dead ReLU channels: every value -128 (long runs of the minimum) */
        v = -128;
        break;
      default: { /* bell around center */
        int32_t s = (int32_t)(rnd() % (uint32_t)(spread + 1)) +
                    (int32_t)(rnd() % (uint32_t)(spread + 1)) - spread;
        v = center + s;
      }
    }
    x[i] = (int8_t)(v < -128 ? -128 : v > 127 ? 127 : v);
  }
}

static int g_failures[4];
static int g_checks[4];

static void report(int var, int path, int icase, int step, const char* what,
                   int32_t C, int32_t N, int32_t HW, int32_t idx) {
  if (g_failures[var] < 20) {
    out("FAIL variant=%s path=%s case=%d step=%d what=%s C=%ld N=%ld HW=%ld "
           "index=%ld\n",
           kVariants[var].name, kPathNames[path], icase, step, what, (long)C,
           (long)N, (long)HW, (long)idx);
  }
  g_failures[var]++;
}

static int32_t first_diff(const void* a, const void* b, size_t n) {
  const uint8_t *p = a, *q = b;
  size_t i;
  for (i = 0; i < n; ++i)
    if (p[i] != q[i]) return (int32_t)i;
  return -1;
}

static void run_case(int icase) {
  forge_recalib_options opts;
  forge_recalib_quant quant;
  const char* msg = "";
  int32_t C, N, HW, M, steps, step, i, kind, v, p;
  float s_x, s_y;
  int32_t z_x, z_y;
  int extreme = (rnd() % 8) == 0;
  const int32_t pick = rnd_int(0, 9);
  C = pick < 8 ? rnd_int(1, 70) : kChannelPool[rnd_int(0, 2)];
  if (icase < 70) C = icase + 1; /* every small C at least once */
  do {
    N = (rnd() % 4) == 0 ? rnd_int(1, 8) : 1;
    HW = (rnd() % 3) == 0 ? rnd_int(1, 40) : rnd_int(1, 3072);
  } while ((int64_t)N * HW * C > MAX_ELEMS || (int64_t)N * HW > 3072);
  M = N * HW;

  forge_recalib_options_default(&opts);
  if (rnd() & 1) {
    opts.use_window = 1;
    opts.window = rnd_int(1, 2000);
  } else {
    opts.use_window = 0;
    opts.momentum = (rnd() % 5) == 0 ? (float)rnd_int(0, 1) : rnd_unit();
  }
  opts.eps = (rnd() % 6) == 0 ? rnd_log(-149, -100) : 1e-5f;
  opts.activation = rnd_int(0, FORGE_RECALIB_ACT_COUNT - 1);
  opts.variance = rnd_int(0, FORGE_RECALIB_VAR_COUNT - 1);
  /* One case in three: the integer arithmetic (int32 state, SPEC I8 loops). */
  if (rnd() % 3 == 0) opts.arithmetic = FORGE_RECALIB_ARITH_INT;
  s_x = extreme ? rnd_log(-40, 39) : rnd_log(-10, 2);
  s_y = extreme ? rnd_log(-40, 39) : rnd_log(-10, 2);
  z_x = rnd_int(-128, 127);
  z_y = rnd_int(-128, 127);
  if (forge_recalib_prepare_quant(&opts, s_x, z_x, s_y, z_y, &quant, &msg) !=
      FORGE_RECALIB_OK) {
    out("FAIL variant=setup case=%d what=prepare msg=%s\n", icase, msg);
    g_failures[0]++;
    return;
  }
  for (i = 0; i < C; ++i) {
    const float mag = extreme ? rnd_log(-40, 39) : rnd_log(-6, 3);
    g_beta[i] = (rnd() & 1) ? mag : -mag;
    g_gamma[i] = (rnd() % 10) == 0 ? 0.0f
                                   : (extreme ? rnd_log(-40, 39) : rnd_log(-6, 3));
  }
  for (i = 0; i < NUM_SLOTS; ++i) {
    if (opts.arithmetic == FORGE_RECALIB_ARITH_INT) {
      forge_recalib_int_state_reset(&quant, g_beta, g_gamma, C,
                                    (int32_t*)(void*)g_state[i], &msg);
    } else {
      forge_recalib_state_reset(g_beta, g_gamma, C, g_state[i], &msg);
    }
  }
  steps = rnd_int(2, 5);
  kind = rnd_int(0, 6);
  for (step = 0; step < steps; ++step) {
    const uint32_t pick = rnd() % 8;
    const int32_t mode = pick < 2   ? FORGE_RECALIB_MODE_FROZEN
                         : pick < 3 ? FORGE_RECALIB_MODE_SOURCE
                                    : FORGE_RECALIB_MODE_ADAPT;
    const int32_t total = M * C;
    const int in_place = (rnd() % 6) == 0;
    int st;
    fill_input(g_x, total, kind > 5 ? 3 : kind, rnd_int(-128, 127),
               rnd_int(0, 100));
    {
      const forge_recalib_args ref = {g_x, g_y_ref, N, HW, C, g_beta, g_gamma,
                                      g_state[0], &opts, &quant, mode,
                                      FORGE_RECALIB_PATH_AUTO, g_scratch,
                                      sizeof(g_scratch)};
      st = forge_recalib_s8_ansi(&ref, &msg);
    }
    if (st != FORGE_RECALIB_OK) {
      out("FAIL variant=ansi case=%d what=status msg=%s\n", icase, msg);
      g_failures[0]++;
      return;
    }
    for (v = 1; v < NUM_VARIANTS; ++v) {
      for (p = 0; p < 3; ++p) {
        float* state = g_state[1 + (v - 1) * 3 + p];
        int8_t* out = g_y;
        int32_t d;
        const forge_recalib_args args = {in_place ? g_y : g_x, out, N, HW, C,
                                         g_beta, g_gamma, state, &opts, &quant,
                                         mode, p /* AUTO, AFFINE, LUT */,
                                         g_scratch, sizeof(g_scratch)};
        if (in_place) memcpy(g_y, g_x, (size_t)total);
        st = kVariants[v].fn(&args, &msg);
        g_checks[v] += 2;
        if (st != FORGE_RECALIB_OK) {
          report(v, p, icase, step, "status", C, N, HW, st);
          continue;
        }
        d = first_diff(out, g_y_ref, (size_t)total);
        if (d >= 0) report(v, p, icase, step, "output", C, N, HW, d);
        d = first_diff(state, g_state[0], sizeof(float) * 2 * (size_t)C);
        if (d >= 0) report(v, p, icase, step, "state", C, N, HW, d);
      }
    }
  }
}

/* ------------------------------------------------------------------ bench */

static void bench(void) {
  static const int32_t kShapes[3][3] = {{32, 32, 16}, {16, 16, 32}, {8, 8, 64}};
  const int32_t reps = 8;
  /* SysTick counts the processor clock; -icount shift=0: 1 instruction/ns. */
  const uint32_t ipt_x1000 = BOARD_IPT_X1000;
  forge_recalib_options opts;
  forge_recalib_quant quant;
  const char* msg;
  int32_t s, i, v, p;
  forge_recalib_options_default(&opts);
  opts.use_window = 1;
  opts.window = 640;
  opts.activation = FORGE_RECALIB_ACT_RELU;
  opts.variance = FORGE_RECALIB_VAR_RUNNING;
  forge_recalib_prepare_quant(&opts, 0.05f, -10, 0.03f, -128, &quant, &msg);
  cortexm_systick_start();
  for (s = 0; s < 3; ++s) {
    const int32_t H = kShapes[s][0], W = kShapes[s][1], C = kShapes[s][2];
    const int32_t total = H * W * C;
    for (i = 0; i < C; ++i) {
      g_beta[i] = 0.1f * (float)(i % 7) - 0.2f;
      g_gamma[i] = 0.5f + 0.05f * (float)(i % 5);
    }
    fill_input(g_x, total, 3, -10, 40);
    for (v = 0; v < NUM_VARIANTS; ++v) {
      for (p = 0; p < 4; ++p) { /* paths auto, affine, lut; 3: arithmetic int */
        uint64_t t0, t1, instr;
        const forge_recalib_args args = {g_x, g_y, 1, H * W, C, g_beta, g_gamma,
                                         g_state[0], &opts, &quant,
                                         FORGE_RECALIB_MODE_ADAPT, p % 3,
                                         g_scratch, sizeof(g_scratch)};
        opts.arithmetic = p == 3 ? FORGE_RECALIB_ARITH_INT : FORGE_RECALIB_ARITH_FLOAT;
        if (p == 3) {
          forge_recalib_int_state_reset(&quant, g_beta, g_gamma, C,
                                        (int32_t*)(void*)g_state[0], &msg);
        } else {
          forge_recalib_state_reset(g_beta, g_gamma, C, g_state[0], &msg);
        }
        /* warm-up call (same work) */
        kVariants[v].fn(&args, &msg);
        t0 = cortexm_systick_ticks();
        for (i = 0; i < reps; ++i) {
          kVariants[v].fn(&args, &msg);
        }
        t1 = cortexm_systick_ticks();
        instr = (t1 - t0) * ipt_x1000 / 1000u / (uint64_t)reps;
        out("bench board=%s variant=%s path=%s shape=%ldx%ldx%ld "
               "instructions=%lu per_element=%lu.%02lu\n",
               BOARD_NAME, kVariants[v].name, kPathNames[p], (long)H, (long)W,
               (long)C, (unsigned long)instr,
               (unsigned long)(instr / (uint64_t)total),
               (unsigned long)((instr * 100u / (uint64_t)total) % 100u));
      }
    }
  }
}

int main(void) {
  char cmd[128];
  int32_t cases = 400, icase, v, all_ok = 1;
  const char* args = cortexm_cmdline(cmd, sizeof(cmd));
  if (strstr(args, "--bench") != NULL) {
    bench();
    out("done result=PASS\n");
    return 0;
  }
  {
    const char* c = strstr(args, "--cases=");
    if (c != NULL) {
      cases = 0;
      for (c += 8; *c >= '0' && *c <= '9'; ++c) cases = cases * 10 + (*c - '0');
    }
  }
  for (icase = 0; icase < cases; ++icase) run_case(icase);
  if (g_failures[0] != 0) all_ok = 0;
  for (v = 1; v < NUM_VARIANTS; ++v) {
    out("summary board=%s variant=%s cases=%ld checks=%d failures=%d "
           "result=%s\n",
           BOARD_NAME, kVariants[v].name, (long)cases, g_checks[v],
           g_failures[v], g_failures[v] == 0 ? "PASS" : "FAIL");
    if (g_failures[v] != 0) all_ok = 0;
  }
  if (NUM_VARIANTS < 2) all_ok = 0; /* nothing was tested */
  out("done result=%s\n", all_ok ? "PASS" : "FAIL");
  return all_ok ? 0 : 1;
}
