// The TFLM arena export-firmware decides per model, compiled per GEN_DIR beside the
// data object (so that nothing else depends on the export): forge_app_data.h's
// FORGE_APP_ARENA_BYTES (export-firmware's estimate, as the ESP-IDF app sizes it)
// when the header has one, else the Makefile's ARENA_BYTES (FORGE_ESP32S3_ARENA_BYTES;
// data written by forge_tflm.deploy.write_c_arrays alone). The linker script's
// ASSERT stops a link whose arena does not fit the chip's SRAM. (The gate's
// settings: core/export/forge_app_export.cc.)
#include "forge_app.h"
#include "forge_app_data.h"

#ifdef FORGE_APP_ARENA_BYTES
#define FORGE_ESP32S3_ARENA (FORGE_APP_ARENA_BYTES)
#elif defined(FORGE_ESP32S3_ARENA_BYTES)
#define FORGE_ESP32S3_ARENA (FORGE_ESP32S3_ARENA_BYTES)
#else
#define FORGE_ESP32S3_ARENA (160 * 1024)
#endif

alignas(16) uint8_t g_esp32s3_arena[FORGE_ESP32S3_ARENA];
extern const size_t g_esp32s3_arena_bytes = sizeof(g_esp32s3_arena);
