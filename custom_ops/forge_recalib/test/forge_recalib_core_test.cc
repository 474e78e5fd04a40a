// FORGE_RECALIB C core test without any framework (Bazel cc_test, CMake
// ctest): forge_recalib_s8_ansi on the kernel test's vectors
// (../micro/forge_recalib_test_vectors.h, generated from the numpy reference),
// on every per-element path, plus the errors that must leave output and state
// untouched. The vectors carry their options as flexbuffer bytes; the core
// takes the parsed struct, so the options are restated here (from the
// header's comments) and a mismatch with the generator shows up as a failure.
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "forge_recalib.h"
#include "forge_recalib_test_vectors.h"

namespace {

int g_failures = 0;

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++g_failures;                                                  \
    }                                                                \
  } while (0)

struct Case {
  const char* name;
  const int* dims;  // {rank, d0, ..., d_{rank-1}}
  int channels, elements, steps;
  float s_x, s_y;
  int z_x, z_y;
  forge_recalib_options opts;
  const float* beta;
  const float* gamma_abs;
  const int8_t* input;
  const int8_t* expected_adapt;
  const int8_t* expected_frozen_adapted;
  const int8_t* expected_frozen_clean;
};

forge_recalib_options Options(int use_window, float momentum, int window,
                              float eps, int activation, int variance) {
  forge_recalib_options o;
  forge_recalib_options_default(&o);
  o.use_window = use_window;
  o.momentum = momentum;
  o.window = window;
  o.eps = eps;
  o.activation = activation;
  o.variance = variance;
  return o;
}

#define CASE(P, OPTS)                                                         \
  Case {                                                                      \
    #P, forge_recalib_test::k##P##Dims, forge_recalib_test::k##P##Channels,   \
        forge_recalib_test::k##P##Elements, forge_recalib_test::k##P##Steps,  \
        forge_recalib_test::k##P##ScaleX, forge_recalib_test::k##P##ScaleY,   \
        forge_recalib_test::k##P##ZeroX, forge_recalib_test::k##P##ZeroY,     \
        OPTS, forge_recalib_test::k##P##Beta, forge_recalib_test::k##P##GammaAbs, \
        forge_recalib_test::k##P##Input, forge_recalib_test::k##P##ExpectedAdapt, \
        forge_recalib_test::k##P##ExpectedFrozenAdapted,                      \
        forge_recalib_test::k##P##ExpectedFrozenClean                         \
  }

constexpr int kMaxElements = 1024;
constexpr int kMaxChannels = 8;
alignas(8) uint8_t g_scratch[280 * kMaxChannels + 64];

void RunCase(const Case& k, int32_t path) {
  const char* msg = "";
  const int32_t n = k.dims[1];
  const int32_t hw = k.elements / k.channels / n;
  forge_recalib_quant quant;
  CHECK(k.channels <= kMaxChannels && k.elements <= kMaxElements);
  CHECK(forge_recalib_validate_options(&k.opts, &msg) == FORGE_RECALIB_OK);
  CHECK(forge_recalib_prepare_quant(&k.opts, k.s_x, k.z_x, k.s_y, k.z_y, &quant,
                                    &msg) == FORGE_RECALIB_OK);
  float state[2 * kMaxChannels];
  CHECK(forge_recalib_state_reset(k.beta, k.gamma_abs, k.channels, state, &msg) ==
        FORGE_RECALIB_OK);
  const size_t scratch_bytes = forge_recalib_scratch_bytes(k.channels);
  CHECK(scratch_bytes <= sizeof(g_scratch));
  int8_t y[kMaxElements];
  auto run = [&](const int8_t* x, int32_t mode, const int8_t* expected) {
    memset(y, 0x55, sizeof(y));
    const forge_recalib_args args = {x, y, n, hw, k.channels, k.beta, k.gamma_abs,
                                     state, &k.opts, &quant, mode, path, g_scratch,
                                     scratch_bytes};
    const int s = forge_recalib_s8_ansi(&args, &msg);
    if (s != FORGE_RECALIB_OK) fprintf(stderr, "%s: %s\n", k.name, msg);
    CHECK(s == FORGE_RECALIB_OK);
    if (memcmp(y, expected, k.elements) != 0) {
      fprintf(stderr, "%s (path %d): output differs from the reference\n",
              k.name, (int)path);
      ++g_failures;
    }
  };
  for (int s = 0; s < k.steps; ++s) {  // State carried across calls.
    run(k.input + s * k.elements, FORGE_RECALIB_MODE_ADAPT,
        k.expected_adapt + s * k.elements);
  }
  run(k.input, FORGE_RECALIB_MODE_FROZEN, k.expected_frozen_adapted);
  // Source: the clean targets' output; the adapted state is left as it was.
  run(k.input, FORGE_RECALIB_MODE_SOURCE, k.expected_frozen_clean);
  run(k.input, FORGE_RECALIB_MODE_FROZEN, k.expected_frozen_adapted);
  CHECK(forge_recalib_state_reset(k.beta, k.gamma_abs, k.channels, state, &msg) ==
        FORGE_RECALIB_OK);
  run(k.input, FORGE_RECALIB_MODE_FROZEN, k.expected_frozen_clean);

  // Errors: a status and a message, output and state untouched.
  float before[2 * kMaxChannels];
  memcpy(before, state, sizeof(state));
  memset(y, 0x55, sizeof(y));
  int8_t untouched[kMaxElements];
  memset(untouched, 0x55, sizeof(untouched));
  msg = nullptr;
  const forge_recalib_args ok = {k.input, y, n, hw, k.channels, k.beta, k.gamma_abs,
                                 state, &k.opts, &quant, FORGE_RECALIB_MODE_ADAPT,
                                 FORGE_RECALIB_PATH_AUTO, g_scratch, scratch_bytes};
  forge_recalib_args bad = ok;
  bad.mode = 7;
  CHECK(forge_recalib_s8_ansi(&bad, &msg) == FORGE_RECALIB_ERR_MODE);
  CHECK(msg != nullptr && msg[0] != '\0');
  bad = ok;
  bad.path = 3;
  CHECK(forge_recalib_s8_ansi(&bad, &msg) == FORGE_RECALIB_ERR_MODE);
  bad = ok;
  bad.scratch_bytes = 1;
  CHECK(forge_recalib_s8_ansi(&bad, &msg) == FORGE_RECALIB_ERR_SCRATCH);
  bad = ok;
  bad.x = nullptr;
  CHECK(forge_recalib_s8_ansi(&bad, &msg) == FORGE_RECALIB_ERR_NULL);
  CHECK(forge_recalib_s8_ansi(nullptr, &msg) == FORGE_RECALIB_ERR_NULL);
  CHECK(memcmp(before, state, sizeof(state)) == 0);
  CHECK(memcmp(y, untouched, sizeof(y)) == 0);
}

}  // namespace

int main() {
  const Case cases[] = {
      CASE(Stream, Options(0, 0.25f, 0, 1e-3f, FORGE_RECALIB_ACT_RELU6,
                           FORGE_RECALIB_VAR_RUNNING)),
      CASE(Window, Options(1, 0.0f, 16, 1e-5f, FORGE_RECALIB_ACT_RELU,
                           FORGE_RECALIB_VAR_BATCH)),
      CASE(Lut, Options(0, 0.5f, 0, 1e-5f, FORGE_RECALIB_ACT_NONE,
                        FORGE_RECALIB_VAR_RUNNING)),
  };
  const int32_t paths[] = {FORGE_RECALIB_PATH_AUTO, FORGE_RECALIB_PATH_AFFINE,
                           FORGE_RECALIB_PATH_LUT};
  for (const Case& k : cases) {
    for (int32_t path : paths) RunCase(k, path);
  }
  if (g_failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("forge_recalib_core_test: all passed\n");
  return 0;
}
