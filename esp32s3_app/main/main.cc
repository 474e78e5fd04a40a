// ESP32-S3 target of the FORGE application core: app_main only. The model, the
// images and the arena size are the arrays `forge_tflm export-firmware` wrote into
// generated/; the markers, cycle counter and console are esp32s3_platform.cc.
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
#ifdef CONFIG_FORGE_APP_ADAPT
  config.adapt = true;
#else
  config.adapt = false;
#endif
#ifdef CONFIG_FORGE_APP_GATE
  // The gate as evaluated: its settings come from export-firmware (gate.py).
  config.gate = true;
  config.gate_config.probe_images = FORGE_APP_GATE_PROBE_IMAGES;
  config.gate_config.period = FORGE_APP_GATE_PERIOD;
  config.gate_config.delta = FORGE_APP_GATE_DELTA;
  config.gate_config.max_autocorrelation = FORGE_APP_GATE_MAX_AUTOCORRELATION;
  config.gate_config.concealed_veto = FORGE_APP_GATE_CONCEALED_VETO;
  config.gate_config.keep_state = FORGE_APP_GATE_KEEP_STATE;
  config.gate_config.inert_score = FORGE_APP_GATE_INERT_SCORE;
  config.gate_config.early_images = FORGE_APP_GATE_EARLY_IMAGES;
  config.gate_config.early_delta = FORGE_APP_GATE_EARLY_DELTA;
  config.gate_config.early_max_autocorrelation =
      FORGE_APP_GATE_EARLY_MAX_AUTOCORRELATION;
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
