// Host target of the FORGE application core (x86, tests): the model and the
// int8 images come from files, the clock is steady_clock in ns, lines go to
// stdout, markers are no-ops.
//
//   forge_app_host MODEL.tflite IMAGES.bin [--images=N] [--trace=none|forge|all]
//                  [--frozen] [--arena=BYTES] [--no_logits] [--dump=OP:IMAGE]
//                  [--gate] [--gate_<setting>=V ...]
//
// --gate_<setting>=V: any setting of forge_controller_settings.h
// (forge_tflm.evaluation.gate.host_arguments writes them all).
//
// IMAGES.bin: N * input_bytes int8 values, image after image (the model's
// quantized input, e.g. from forge_tflm.deploy.write_image_stream). Without
// --images all images in the file run. Exit code 0 when every image ran.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <vector>

#include "forge_app.h"

namespace {

uint64_t ClockNs(void*) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}

void WriteLine(void*, const char* line) { fputs(line, stdout); }

bool ReadFile(const char* path, std::vector<uint8_t>* out) {
  FILE* f = fopen(path, "rb");
  if (f == nullptr) return false;
  fseek(f, 0, SEEK_END);
  const long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  out->resize(n > 0 ? static_cast<size_t>(n) : 0);
  const bool ok = n >= 0 && fread(out->data(), 1, out->size(), f) == out->size();
  fclose(f);
  return ok;
}

struct ImageFile {
  const std::vector<uint8_t>* bytes;
};

bool ReadImage(void* user, size_t index, int8_t* dst, size_t n) {
  const ImageFile* f = static_cast<const ImageFile*>(user);
  if ((index + 1) * n > f->bytes->size()) return false;
  memcpy(dst, f->bytes->data() + index * n, n);
  return true;
}

// --gate_<name>=V for one setting of forge_controller_settings.h.
bool ParseValue(const char* text, uint32_t* out) {
  char* end = nullptr;
  const unsigned long v = strtoul(text, &end, 10);
  *out = static_cast<uint32_t>(v);
  return *text != '\0' && *end == '\0' && v <= UINT32_MAX;
}

bool ParseValue(const char* text, double* out) {
  char* end = nullptr;
  *out = strtod(text, &end);
  return *text != '\0' && *end == '\0';
}

bool ParseGateSetting(const char* arg, ForgeControllerSettings* s) {
#define FORGE_CONTROLLER_PARSE(type, name, macro, value, help)                     \
  if (strncmp(arg, "--gate_" #name "=", sizeof("--gate_" #name "=") - 1) == 0) { \
    return ParseValue(arg + sizeof("--gate_" #name "=") - 1, &s->name);          \
  }
  FORGE_CONTROLLER_SETTINGS(FORGE_CONTROLLER_PARSE)
#undef FORGE_CONTROLLER_PARSE
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL.tflite IMAGES.bin [--images=N] [--trace=none|forge|all]"
                    " [--frozen] [--arena=BYTES] [--no_logits] [--dump=OP:IMAGE] [--gate]"
                    " [--gate_<setting>=V ...]\n",
            argv[0]);
    return 2;
  }
  long num_images = -1;
  size_t arena_bytes = 512 * 1024;
  ForgeAppConfig config;
  for (int i = 3; i < argc; ++i) {
    const char* a = argv[i];
    if (strncmp(a, "--images=", 9) == 0) {
      num_images = atol(a + 9);
    } else if (strcmp(a, "--trace=none") == 0) {
      config.trace = FORGE_APP_TRACE_NONE;
    } else if (strcmp(a, "--trace=forge") == 0) {
      config.trace = FORGE_APP_TRACE_FORGE;
    } else if (strcmp(a, "--trace=all") == 0) {
      config.trace = FORGE_APP_TRACE_ALL;
    } else if (strcmp(a, "--frozen") == 0) {
      config.adapt = false;
    } else if (strcmp(a, "--gate") == 0) {
      config.gate = true;
    } else if (ParseGateSetting(a, &config.gate_settings)) {  // --gate_<setting>=V
    } else if (strncmp(a, "--arena=", 8) == 0) {
      arena_bytes = static_cast<size_t>(atol(a + 8));
    } else if (strncmp(a, "--dump=", 7) == 0) {  // --dump=OP:IMAGE
      config.dump_op = atol(a + 7);
      const char* colon = strchr(a + 7, ':');
      config.dump_image = colon != nullptr ? static_cast<size_t>(atol(colon + 1)) : 0;
    } else if (strcmp(a, "--no_logits") == 0) {
      config.print_logits = false;
    } else {
      fprintf(stderr, "unknown argument %s\n", a);
      return 2;
    }
  }
  std::vector<uint8_t> model_file, images;
  if (!ReadFile(argv[1], &model_file)) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  if (!ReadFile(argv[2], &images)) {
    fprintf(stderr, "cannot read %s\n", argv[2]);
    return 2;
  }
  // Model and arena 16-byte aligned, as on the device (alignas(16) arrays).
  std::vector<uint64_t> model_words((model_file.size() + 7) / 8 + 2);
  uint8_t* model = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(model_words.data()) + 15) & ~uintptr_t{15});
  memcpy(model, model_file.data(), model_file.size());
  std::vector<uint64_t> arena_words(arena_bytes / 8 + 2);
  uint8_t* arena = reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(arena_words.data()) + 15) & ~uintptr_t{15});

  ImageFile file{&images};
  config.model = model;
  config.model_size = model_file.size();
  config.arena = arena;
  config.arena_size = arena_bytes;
  config.read_image = ReadImage;
  config.read_image_user = &file;
  // The input size is only known after AllocateTensors: read_image stops at
  // the end of the file, so "all images" = as many as the file holds.
  config.num_images = num_images >= 0 ? static_cast<size_t>(num_images) : SIZE_MAX;
  ForgeAppPlatform platform = {ClockNs, 1000000000ull, WriteLine, nullptr, nullptr};
  const int rc = ForgeAppRun(platform, config);
  fflush(stdout);
  return rc == 0 ? 0 : 1;
}
