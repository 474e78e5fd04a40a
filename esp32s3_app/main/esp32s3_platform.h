// The ESP32-S3's side of the FORGE application core (core/forge_app_platform.h):
// the CPU cycle counter as the clock, the console UART for the output lines, two
// GPIO markers (Kconfig: FORGE_APP_INFERENCE_GPIO, FORGE_APP_FORGE_GPIO) and the
// arena (internal SRAM, or PSRAM above FORGE_APP_ARENA_INTERNAL_MAX).
#ifndef ESP32S3_APP_MAIN_ESP32S3_PLATFORM_H_
#define ESP32S3_APP_MAIN_ESP32S3_PLATFORM_H_

#include <stddef.h>
#include <stdint.h>

#include "forge_app_platform.h"

namespace forge_esp32s3 {

// Configures the marker pins (low) and returns the platform callbacks.
ForgeAppPlatform Platform();

// A 16-byte aligned arena of `bytes`; nullptr (after an "error" line) if it cannot
// be had.
uint8_t* AllocateArena(size_t bytes);

// Flushes the console and parks the task (the run is over; reset to run again).
void Finish();

}  // namespace forge_esp32s3

#endif  // ESP32S3_APP_MAIN_ESP32S3_PLATFORM_H_
