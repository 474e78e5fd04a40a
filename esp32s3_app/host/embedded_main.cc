// Host target with the model and images compiled in as C arrays, the form the
// firmware targets use (forge_tflm.deploy.write_c_arrays writes
// forge_app_data.{h,cc}). Same platform as host_main.cc; takes no arguments
// except an optional --trace=none|forge|all, --frozen and --gate (the gate with the
// settings export-firmware wrote, as esp32s3_app/main does for a gated export).
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <chrono>

#include "forge_app.h"
#include "forge_app_data.h"

namespace {

uint64_t ClockNs(void*) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count());
}

void WriteLine(void*, const char* line) { fputs(line, stdout); }

alignas(16) uint8_t g_arena[256 * 1024];

}  // namespace

int main(int argc, char** argv) {
  ForgeAppConfig config;
  config.model = forge_app_model;
  config.model_size = forge_app_model_size;
  config.arena = g_arena;
  config.arena_size = sizeof(g_arena);
  config.images = forge_app_images;
  config.num_images = forge_app_num_images;
  config.trace = FORGE_APP_TRACE_FORGE;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--trace=none") == 0) config.trace = FORGE_APP_TRACE_NONE;
    if (strcmp(argv[i], "--trace=all") == 0) config.trace = FORGE_APP_TRACE_ALL;
    if (strcmp(argv[i], "--frozen") == 0) config.adapt = false;
    if (strcmp(argv[i], "--gate") == 0) {
      config.gate = true;
      FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(config.gate_settings);
    }
  }
  ForgeAppPlatform platform = {ClockNs, 1000000000ull, WriteLine, nullptr, nullptr};
  const int rc = ForgeAppRun(platform, config);
  fflush(stdout);
  return rc == 0 ? 0 : 1;
}
