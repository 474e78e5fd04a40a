// The gate's settings as export-firmware wrote them (forge_app_data.h's
// FORGE_APP_GATE_* defines), for esp32s3_main.cc's --gate. Compiled per
// GEN_DIR beside the data object, so that nothing else depends on the export.
// Data written without export-firmware (forge_tflm.deploy.write_c_arrays
// alone) has no gate settings: false, and --gate is refused.
#include "forge_app.h"
#include "forge_app_data.h"

bool Esp32s3GateSettings(ForgeControllerSettings* settings) {
#ifdef FORGE_APP_GATE_PROBE_IMAGES
  FORGE_CONTROLLER_SETTINGS_FROM_DEFINES(*settings);
  return true;
#else
  (void)settings;
  return false;
#endif
}
