// What export-firmware decided for one model (export/forge_app_export.cc, compiled per
// export beside the data object by the bare-metal targets).
#ifndef ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_
#define ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_

#include "forge_controller.h"

// The gate's settings (forge_app_data.h's FORGE_APP_GATE_* defines); false for data
// without them (forge_tflm.deploy.write_c_arrays alone): --gate is then refused.
bool ForgeAppExportGateSettings(ForgeControllerSettings* settings);

#endif  // ESP32S3_APP_CORE_FORGE_APP_EXPORT_H_
