// Fuzz harness: FORGE_RECALIB option parsing + validation + every C path that
// consumes the options.
//
// The input is the custom_options byte string. Parsed options must validate;
// quantization parameters and targets are then drawn
// from a hash of the input (including NaN, +-inf, zero, out-of-range scales
// and zero points) and the C core runs on heap tensors of exact size, so
// AddressSanitizer catches any out-of-bounds access: the plain-C path
// (forge_recalib_s8_ansi), the host x86 variant where built
// (FORGE_RECALIB_X86: its hooks at each instruction-set cap, bit-exact to ansi).
// Invariants violated -> abort().
//
// Builds two ways (tests/custom_ops/test_fuzz_options.py does both):
//  * libFuzzer: clang++ -fsanitize=fuzzer,address,undefined ...
//  * no libFuzzer: g++ -fsanitize=address,undefined -DFORGE_RECALIB_FUZZ_DRIVER
//    adds main() below: a deterministic mutation driver taking the libFuzzer
//    flags -runs=N -seed=S and corpus files/directories, and -stream=FILE: run
//    each input of FILE (records of a 2-byte little-endian length and the
//    bytes) once, in order (forge_tflm/testing/options_crosscheck.py writes them).
// With FORGE_RECALIB_FUZZ_PRINT=1 in the environment each input's parse result
// is printed ("<fnv1a64 of input> OK use_window=<int> momentum=<float32 bits>
// ..." with every field of FORGE_RECALIB_OPTION_FIELDS, or "<fnv1a64> ERR
// <message>") for cross-checks against the Python decoder.
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forge_recalib.h"
#include "forge_recalib_options.h"

namespace {

// Valid values first (kValid* of them): Pick draws only among those half the
// time, so that the C paths past validation run often.
const float kScales[] = {0.05f, 1.0f, 9.094947017729282e-13f /* 2^-40 */,
                         1099511627776.0f /* 2^40 */,
                         0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-45f,
                         4.5e-13f /* < 2^-40 */, 2.2e12f /* > 2^40 */, -1.0f, FLT_MAX};
const size_t kValidScales = 4;
const int32_t kZeroPoints[] = {-128, -1, 0, 5, 127, -129, 128, INT32_MIN, INT32_MAX};
const size_t kValidZeroPoints = 5;
// The first kValidTargets are valid as beta and as gamma_abs.
const float kTargets[] = {0.0f, -0.0f, 1.0f, 1e-30f, 1099511627776.0f, 1e-45f, 0.25f,
                          -3.0f, -1099511627776.0f, NAN, INFINITY, -INFINITY, 2.2e12f};
const size_t kValidTargets = 7;

void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "FORGE_RECALIB fuzz invariant violated: %s\n", what);
    abort();
  }
}

uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

// Picks from the input's hash so that runs are reproducible per input.
struct Picker {
  uint64_t h;
  uint32_t Next(uint32_t n) {
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<uint32_t>(h % n);
  }
};

template <typename T, size_t N>
T Pick(const T (&values)[N], size_t valid, Picker* pick) {
  return values[pick->Next(2) ? pick->Next(static_cast<uint32_t>(valid))
                              : pick->Next(static_cast<uint32_t>(N))];
}

uint64_t Fnv1a(const uint8_t* d, size_t n) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (size_t i = 0; i < n; ++i) h = (h ^ d[i]) * 0x100000001b3ULL;
  return h;
}

// Inputs that parsed and reached the C core (reported by the driver).
long long g_parsed_ok = 0;
// Raw option structs (unparseable inputs) that validated and reached the core.
long long g_raw_ok = 0;

bool PrintMode() {
  static const int mode = [] {
    const char* v = getenv("FORGE_RECALIB_FUZZ_PRINT");
    return v != nullptr && v[0] == '1' ? 1 : 0;
  }();
  return mode == 1;
}

void CheckOutputs(const int8_t* y, size_t count, const float* state, int32_t c,
                  const forge_recalib_quant& quant, bool integer) {
  for (size_t i = 0; i < count; ++i) {
    Check(y[i] >= quant.qmin && y[i] <= quant.qmax, "output in [qmin, qmax]");
  }
  if (integer) {  // SPEC "Integer arithmetic": int32 mu, var in their ranges
    int32_t v[2];
    for (int32_t i = 0; i < c; ++i) {
      memcpy(&v[0], &state[i], sizeof(int32_t));
      memcpy(&v[1], &state[c + i], sizeof(int32_t));
      Check(v[0] >= -FORGE_RECALIB_INT_MU_MAX && v[0] <= FORGE_RECALIB_INT_MU_MAX &&
                v[1] >= 0 && v[1] <= FORGE_RECALIB_INT_VAR_MAX,
            "integer state stays in range");
    }
    return;
  }
  for (int32_t i = 0; i < 2 * c; ++i) {
    Check(state[i] == state[i] && fabsf(state[i]) <= FLT_MAX, "state stays finite");
  }
}

// One node's tensors, each an exact-size heap block: one element past the end
// is an ASan report.
struct Node {
  const forge_recalib_options* opts;
  forge_recalib_quant quant;
  int32_t n, hw, c;
  size_t count;
  int8_t *x, *y;
  float *beta, *gamma, *state;
};

// The host x86 variant must give the ansi path's output and state, bit for bit.
void RunX86Twin(const Node& d, const int8_t* y_ansi, const float* state_before,
                int32_t mode, int32_t path, void* scratch, size_t bytes,
                Picker* pick) {
#ifdef FORGE_RECALIB_X86
  int8_t* y = new int8_t[d.count];
  float* state = new float[2 * d.c];
  memcpy(state, state_before, sizeof(float) * 2 * d.c);
  const char* msg = nullptr;
  const int32_t isa = static_cast<int32_t>(pick->Next(3));
  const forge_recalib_args args = {d.x, y, d.n, d.hw, d.c, d.beta, d.gamma, state,
                                   d.opts, &d.quant, mode, path, scratch, bytes};
  const int status =
      forge_recalib_s8_hooked(&args, forge_recalib_x86_hooks(isa), &msg);
  Check(status == FORGE_RECALIB_OK, "valid x86 call succeeds");
  Check(memcmp(y, y_ansi, d.count) == 0, "x86 output equals ansi");
  Check(memcmp(state, d.state, sizeof(float) * 2 * d.c) == 0, "x86 state equals ansi");
  delete[] y;
  delete[] state;
#else
  (void)d, (void)y_ansi, (void)state_before, (void)mode, (void)path;
  (void)scratch, (void)bytes, (void)pick;
#endif
}

// The per-channel op: plain C (and its x86 twin), adapt twice then frozen.
void RunPlain(const Node& d, Picker* pick) {
  const int32_t path = static_cast<int32_t>(pick->Next(3));
  // AUTO sometimes gets only the affine scratch size (must then use affine).
  const size_t bytes = (path == FORGE_RECALIB_PATH_LUT || pick->Next(2))
                           ? forge_recalib_scratch_bytes(d.c)
                           : forge_recalib_scratch_bytes_affine(d.c);
  void* scratch = malloc(bytes);
  float* before = new float[2 * d.c];
  const char* msg = nullptr;
  for (int step = 0; step < 3; ++step) {
    const int32_t mode = step == 2 ? FORGE_RECALIB_MODE_FROZEN : FORGE_RECALIB_MODE_ADAPT;
    memcpy(before, d.state, sizeof(float) * 2 * d.c);
    const forge_recalib_args args = {d.x, d.y, d.n, d.hw, d.c, d.beta, d.gamma,
                                     d.state, d.opts, &d.quant, mode, path, scratch,
                                     bytes};
    const int status = forge_recalib_s8_ansi(&args, &msg);
    Check(status == FORGE_RECALIB_OK, "valid call succeeds");
    CheckOutputs(d.y, d.count, d.state, d.c, d.quant,
                 d.opts->arithmetic == FORGE_RECALIB_ARITH_INT);
    RunX86Twin(d, d.y, before, mode, path, scratch, bytes, pick);
  }
  // Too little scratch must be refused, not overrun.
  const forge_recalib_args short_scratch = {
      d.x, d.y, d.n, d.hw, d.c, d.beta, d.gamma, d.state, d.opts, &d.quant,
      FORGE_RECALIB_MODE_ADAPT, FORGE_RECALIB_PATH_LUT, scratch,
      forge_recalib_scratch_bytes(d.c) - 1};
  const int status = forge_recalib_s8_ansi(&short_scratch, &msg);
  Check(status == FORGE_RECALIB_ERR_SCRATCH, "short scratch refused");
  delete[] before;
  free(scratch);
}

void RunCore(const forge_recalib_options& opts, Picker* pick) {
  const float s_x = Pick(kScales, kValidScales, pick);
  const float s_y = Pick(kScales, kValidScales, pick);
  const int32_t z_x = Pick(kZeroPoints, kValidZeroPoints, pick);
  const int32_t z_y = Pick(kZeroPoints, kValidZeroPoints, pick);
  Node d;
  d.opts = &opts;
  const char* msg = nullptr;
  int status = forge_recalib_prepare_quant(&opts, s_x, z_x, s_y, z_y, &d.quant, &msg);
  const bool scales_ok = s_x >= FORGE_RECALIB_SCALE_MIN &&
                         s_x <= FORGE_RECALIB_SCALE_MAX &&
                         s_y >= FORGE_RECALIB_SCALE_MIN &&
                         s_y <= FORGE_RECALIB_SCALE_MAX;
  const bool zeros_ok = z_x >= -128 && z_x <= 127 && z_y >= -128 && z_y <= 127;
  Check(msg != nullptr, "prepare_quant sets a message");
  Check((status == FORGE_RECALIB_OK) == (scales_ok && zeros_ok),
        "prepare_quant accepts exactly the valid scales/zero points");
  if (status != FORGE_RECALIB_OK) return;
  Check(d.quant.qmin >= -128 && d.quant.qmin <= d.quant.qmax && d.quant.qmax <= 127,
        "activation range inside int8");

  d.n = 1 + static_cast<int32_t>(pick->Next(3));
  d.hw = 1 + static_cast<int32_t>(pick->Next(3));
  d.c = 1 + static_cast<int32_t>(pick->Next(4));
  d.count = static_cast<size_t>(d.n) * d.hw * d.c;
  d.x = new int8_t[d.count];
  d.y = new int8_t[d.count];
  d.beta = new float[d.c];
  d.gamma = new float[d.c];
  d.state = new float[2 * d.c];
  bool targets_ok = true;
  for (size_t i = 0; i < d.count; ++i) {
    d.x[i] = static_cast<int8_t>(static_cast<int32_t>(pick->Next(256)) - 128);
  }
  for (int32_t i = 0; i < d.c; ++i) {
    d.beta[i] = Pick(kTargets, kValidTargets, pick);
    d.gamma[i] = Pick(kTargets, kValidTargets, pick);
    targets_ok = targets_ok && fabsf(d.beta[i]) <= FORGE_RECALIB_TARGET_MAX &&
                 d.gamma[i] >= 0.0f && d.gamma[i] <= FORGE_RECALIB_TARGET_MAX;
  }
  status = forge_recalib_state_reset(d.beta, d.gamma, d.c, d.state, &msg);
  Check((status == FORGE_RECALIB_OK) == targets_ok,
        "state_reset accepts exactly the valid targets");
  if (status == FORGE_RECALIB_OK && opts.arithmetic == FORGE_RECALIB_ARITH_INT) {
    status = forge_recalib_int_state_reset(&d.quant, d.beta, d.gamma, d.c,
                                           reinterpret_cast<int32_t*>(d.state), &msg);
    Check(status == FORGE_RECALIB_OK, "int_state_reset accepts the valid targets");
  }
  if (status == FORGE_RECALIB_OK) {
    RunPlain(d, pick);
  }
  delete[] d.x;
  delete[] d.y;
  delete[] d.beta;
  delete[] d.gamma;
  delete[] d.state;
}

// Unparseable inputs still exercise the C core's own validation: the last
// bytes are taken as a raw options struct (any NaN, range, enum value).
void RunRawOptions(const uint8_t* data, size_t size) {
  forge_recalib_options raw;
  if (size < sizeof(raw)) return;
  memcpy(&raw, data + size - sizeof(raw), sizeof(raw));
  const char* msg = nullptr;
  if (forge_recalib_validate_options(&raw, &msg) != FORGE_RECALIB_OK) {
    Check(msg != nullptr, "validation sets a message");
    return;
  }
  Check(raw.use_window == 1 ? raw.window >= 1
                            : raw.use_window == 0 && raw.momentum >= 0.0f &&
                                  raw.momentum <= 1.0f,
        "validated rate");
  Check(raw.eps > 0.0f && raw.eps <= FLT_MAX, "validated eps");
  Check(raw.activation >= 0 && raw.activation <= 2 && raw.variance >= 0 &&
            raw.variance <= 1,
        "validated enums");
  Check(raw.label_safe == 0 || raw.label_safe == 1, "validated label_safe");
  Check(forge_recalib_mode_for(&raw, FORGE_RECALIB_MODE_ADAPT_SAFE) ==
            (raw.label_safe ? FORGE_RECALIB_MODE_ADAPT : FORGE_RECALIB_MODE_SOURCE),
        "adapt_safe resolves by label_safe");
  ++g_raw_ok;
  Picker pick{Fnv1a(data, size) ^ 0x5bd1e995u};
  RunCore(raw, &pick);
}

// "<hash> OK use_window=1 momentum=<bits> window=8 ..." (every option field,
// floats as float32 bits) or "<hash> ERR <message>": compared line by line
// with the Python decoder's verdict (forge_tflm/testing/options_crosscheck.py).
void PrintVerdict(const uint8_t* data, size_t size, int status,
                  const forge_recalib_options& opts, const char* msg) {
  printf("%016llx ", static_cast<unsigned long long>(Fnv1a(data, size)));
  if (status != FORGE_RECALIB_OK) {
    printf("ERR %s\n", msg);
  } else {
    printf("OK use_window=%d", static_cast<int>(opts.use_window));
#define PRINT_FLOAT(field) printf(" " #field "=%08x", FloatBits(opts.field))
#define PRINT_INT(field) printf(" " #field "=%d", static_cast<int>(opts.field))
#define PRINT_ACTIVATION PRINT_INT
#define PRINT_VARIANCE PRINT_INT
#define PRINT_ARITHMETIC PRINT_INT
#define X(field, kind) PRINT_##kind(field);
    FORGE_RECALIB_OPTION_FIELDS(X)
#undef X
#undef PRINT_FLOAT
#undef PRINT_INT
#undef PRINT_ACTIVATION
#undef PRINT_VARIANCE
#undef PRINT_ARITHMETIC
    printf("\n");
  }
  fflush(stdout);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  forge_recalib_options opts;
  const char* msg = nullptr;
  const int status = forge_recalib::ParseOptions(data, size, &opts, &msg);
  Check(msg != nullptr && msg[0] != '\0', "parser sets a message");
  if (PrintMode()) PrintVerdict(data, size, status, opts, msg);
  if (status != FORGE_RECALIB_OK) {
    Check(status == FORGE_RECALIB_ERR_OPTIONS, "parse errors are option errors");
    RunRawOptions(data, size);
    return 0;
  }
  Check(forge_recalib_validate_options(&opts, &msg) == FORGE_RECALIB_OK,
        "parsed options validate");
  ++g_parsed_ok;
  Picker pick{Fnv1a(data, size)};
  RunCore(opts, &pick);
  return 0;
}

#ifdef FORGE_RECALIB_FUZZ_DRIVER
// Deterministic mutation driver for toolchains without libFuzzer.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

typedef std::vector<uint8_t> Bytes;

struct Rng {
  uint64_t s;
  uint64_t Next() {  // xorshift64*
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 2685821657736338717ULL;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }
};

bool ReadFile(const std::string& path, Bytes* out) {
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  uint8_t chunk[4096];
  size_t got;
  while ((got = fread(chunk, 1, sizeof(chunk), f)) > 0) {
    out->insert(out->end(), chunk, chunk + got);
  }
  fclose(f);
  return true;
}

void CollectInputs(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    files->push_back(path);
    return;
  }
  std::vector<std::string> names;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] != '.') names.push_back(path + "/" + e->d_name);
    }
    closedir(dir);
  }
  std::sort(names.begin(), names.end());
  files->insert(files->end(), names.begin(), names.end());
}

void Mutate(Rng* rng, const std::vector<Bytes>& corpus, Bytes* b) {
  static const uint8_t kBytes[] = {0, 1, 2, 3, 4, 8, 0x24, 0x25, 0x0e, 0x14,
                                   0x0c, 0x7f, 0x80, 0xfe, 0xff};
  static const float kFloats[] = {NAN, INFINITY, -1.0f, 2.0f, 1e-45f,
                                  FLT_MAX, 0.0f, 1.0000001f};
  // Mostly single mutations: flexbuffers are fragile, and valid-but-odd
  // options (reaching the C core) need inputs close to the seeds.
  const size_t n_mut = rng->Below(2) ? 1 : 1 + rng->Below(4);
  for (size_t k = 0; k < n_mut; ++k) {
    switch (rng->Below(8)) {
      case 0:
        if (!b->empty()) (*b)[rng->Below(b->size())] ^= uint8_t(1u << rng->Below(8));
        break;
      case 1:
        if (!b->empty()) (*b)[rng->Below(b->size())] = kBytes[rng->Below(sizeof(kBytes))];
        break;
      case 2:
        b->insert(b->begin() + rng->Below(b->size() + 1), uint8_t(rng->Next()));
        break;
      case 3:
        if (!b->empty()) b->erase(b->begin() + rng->Below(b->size()));
        break;
      case 4:
        b->resize(rng->Below(b->size() + 1));
        break;
      case 5: {  // Splice with another corpus entry.
        const Bytes& o = corpus[rng->Below(corpus.size())];
        const size_t cut = rng->Below(b->size() + 1), from = rng->Below(o.size() + 1);
        b->resize(cut);
        b->insert(b->end(), o.begin() + from, o.end());
        break;
      }
      case 6:
        if (!b->empty()) {
          const size_t at = rng->Below(b->size()), len = 1 + rng->Below(16);
          Bytes chunk(b->begin() + at, b->begin() + std::min(b->size(), at + len));
          b->insert(b->begin() + rng->Below(b->size() + 1), chunk.begin(), chunk.end());
        }
        break;
      default:
        if (b->size() >= 4) {
          const float f = kFloats[rng->Below(sizeof(kFloats) / sizeof(kFloats[0]))];
          memcpy(b->data() + rng->Below(b->size() - 3), &f, 4);
        }
        break;
    }
  }
  if (b->size() > 2 * forge_recalib::kMaxOptionsBytes) {
    b->resize(2 * forge_recalib::kMaxOptionsBytes);
  }
}

// -stream=FILE: records of a 2-byte little-endian length and that many bytes.
bool ReadStream(const std::string& path, std::vector<Bytes>* out) {
  Bytes all;
  if (!ReadFile(path, &all)) return false;
  size_t at = 0;
  while (at + 2 <= all.size()) {
    const size_t n = all[at] | (static_cast<size_t>(all[at + 1]) << 8);
    if (at + 2 + n > all.size()) return false;
    out->push_back(Bytes(all.begin() + at + 2, all.begin() + at + 2 + n));
    at += 2 + n;
  }
  return at == all.size();
}

void RunExact(const Bytes& b) {
  // Exact-size heap copy so reads past `size` are ASan reports.
  uint8_t* copy = static_cast<uint8_t*>(malloc(b.empty() ? 1 : b.size()));
  if (!b.empty()) memcpy(copy, b.data(), b.size());
  LLVMFuzzerTestOneInput(copy, b.size());
  free(copy);
}

}  // namespace

int main(int argc, char** argv) {
  long long runs = -1;
  uint64_t seed = 1;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (strncmp(argv[i], "-stream=", 8) == 0) {
      std::vector<Bytes> inputs;
      if (!ReadStream(argv[i] + 8, &inputs)) {
        fprintf(stderr, "cannot read the input stream %s\n", argv[i] + 8);
        return 2;
      }
      for (const Bytes& b : inputs) RunExact(b);
      fprintf(stderr, "Executed %zu inputs: %lld parsed, %lld raw option structs valid\n",
              inputs.size(), g_parsed_ok, g_raw_ok);
      return 0;
    } else if (strncmp(argv[i], "-runs=", 6) == 0) {
      runs = atoll(argv[i] + 6);
    } else if (strncmp(argv[i], "-seed=", 6) == 0) {
      seed = strtoull(argv[i] + 6, nullptr, 10);
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "ignoring flag %s\n", argv[i]);
    } else {
      CollectInputs(argv[i], &files);
    }
  }
  std::vector<Bytes> corpus;
  for (const std::string& f : files) {
    Bytes b;
    if (ReadFile(f, &b)) corpus.push_back(b);
  }
  if (runs < 0) {  // Like libFuzzer given files: run each once, in order.
    for (const Bytes& b : corpus) RunExact(b);
    fprintf(stderr, "Executed %zu inputs\n", corpus.size());
    return 0;
  }
  if (corpus.empty()) corpus.push_back(Bytes());
  Rng rng{seed * 0x9E3779B97F4A7C15ULL + 1};
  Bytes current = corpus[0];
  for (long long i = 0; i < runs; ++i) {
    // A quarter of the time keep mutating the last input (deeper changes).
    if (rng.Below(4) != 0) current = corpus[rng.Below(corpus.size())];
    Mutate(&rng, corpus, &current);
    RunExact(current);
  }
  fprintf(stderr,
          "Done %lld runs (deterministic driver, seed %llu): %lld parsed, "
          "%lld raw option structs valid\n",
          runs, static_cast<unsigned long long>(seed), g_parsed_ok, g_raw_ok);
  return 0;
}
#endif  // FORGE_RECALIB_FUZZ_DRIVER
