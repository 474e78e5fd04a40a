// What export-firmware decided for one model, read where forge_app_data.h is
// visible: include this after it, in a file compiled per export (GEN_DIR), so that
// nothing else depends on the export (esp32s3/esp32s3_export.cc,
// cortexm/cortexm_export.cc).
#ifndef ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_
#define ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_

#include "forge_controller.h"

// The gate's settings (the FORGE_APP_GATE_* defines); false for data without them
// (forge_tflm.deploy.write_c_arrays alone), and --gate is refused. Internal linkage:
// its body depends on the includer's forge_app_data.h.
static inline bool ForgeAppExportGateSettings(ForgeControllerSettings* settings) {
#ifdef FORGE_APP_GATE_PROBE_IMAGES
  FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(*settings);
  return true;
#else
  (void)settings;
  return false;
#endif
}

#endif  // ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_
