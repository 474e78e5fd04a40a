// ESP32-S3 target of the FORGE application core: app_main only. The model, the
// images, the arena size and the mode (adapt, frozen, gated) are what
// `forge_tflm export-firmware` wrote into generated/; the markers, cycle counter and console are esp32s3_platform.cc.
#include "esp32s3_platform.h"
#include "forge_app.h"
#include "forge_app_data.h"
#include "sdkconfig.h"

extern "C" void app_main(void) {
  ForgeAppConfig config;
  config.model = forge_app_model;
  config.model_size = forge_app_model_size;
  config.arena_size = FORGE_APP_ARENA_BYTES;
  config.arena = forge_esp32s3::AllocateArena(config.arena_size);
  config.images = forge_app_images;
  config.num_images = forge_app_num_images;
  // The mode export-firmware exported (and expected.json describes).
#if defined(FORGE_APP_EXPORT_MODE_FROZEN)
  config.adapt = false;
#elif defined(FORGE_APP_EXPORT_MODE_GATED)
  config.gate = true;
  FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(config.gate_settings);
#endif
#if defined(CONFIG_FORGE_APP_TRACE_NONE)
  config.trace = FORGE_APP_TRACE_NONE;
#elif defined(CONFIG_FORGE_APP_TRACE_ALL)
  config.trace = FORGE_APP_TRACE_ALL;
#else
  config.trace = FORGE_APP_TRACE_FORGE;
#endif
  if (config.arena != nullptr) ForgeAppRun(forge_esp32s3::Platform(), config);
  forge_esp32s3::Finish();
}
