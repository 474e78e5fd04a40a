// What export-firmware decided for one model, compiled per export (GEN_DIR) beside
// its data object by the bare-metal targets (cortexm/, esp32s3/), so that nothing
// else depends on the export. Not a core source (sources.txt): the ESP-IDF app
// reads the same defines in main.cc.
#include "forge_app_data.h"
#include "forge_app_export.h"

bool ForgeAppExportGateSettings(ForgeControllerSettings* settings) {
#ifdef FORGE_APP_GATE_PROBE_IMAGES
  FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(*settings);
  return true;
#else
  (void)settings;
  return false;
#endif
}
