// What export-firmware decides per model, compiled per GEN_DIR beside the data
// object (so that nothing else depends on the export): the gate's settings for
// cortexm_main.cc's --gate. The arena stays the Makefile's ARENA_BYTES.
#include "forge_app.h"
#include "forge_app_data.h"
#include "forge_app_export.h"

bool CortexmGateSettings(ForgeControllerSettings* settings) {
  return ForgeAppExportGateSettings(settings);
}
