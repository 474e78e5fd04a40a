// What the bare-metal targets (cortexm/, esp32s3/) share around ForgeAppRun: the
// command line the emulator passes (semihosting) applied to a ForgeAppConfig, and
// uint64 decimals without printf's %llu (newlib-nano lacks it). Header-only, so
// every build's source list (core/sources.txt) stays as it is.
#ifndef ESP32S3_APP_CORE_FORGE_APP_CMDLINE_H_
#define ESP32S3_APP_CORE_FORGE_APP_CMDLINE_H_

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forge_app.h"
#include "forge_app_export.h"

// Decimal of v into buf (at least 21 bytes); returns buf.
inline const char* ForgeAppDecimal(uint64_t v, char* buf) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) buf[i] = tmp[n - 1 - i];
  buf[n] = '\0';
  return buf;
}

// The boot line "<prefix> calib_instructions=I calib_ticks=T
// instructions_per_tick_x1000=R" through the target's console `write`.
inline void ForgeAppWriteCalibration(void (*write)(const char*), const char* prefix,
                                     uint64_t instructions, uint64_t ticks,
                                     uint64_t ratio_x1000) {
  char a[24], b[24], c[24];
  write(prefix);
  write(" calib_instructions=");
  write(ForgeAppDecimal(instructions, a));
  write(" calib_ticks=");
  write(ForgeAppDecimal(ticks, b));
  write(" instructions_per_tick_x1000=");
  write(ForgeAppDecimal(ratio_x1000, c));
  write("\n");
}

// True when `arg` is a whole space-separated word of cmdline.
inline bool ForgeAppHasArg(const char* cmdline, const char* arg) {
  const size_t n = strlen(arg);
  for (const char* p = strstr(cmdline, arg); p != nullptr; p = strstr(p + 1, arg)) {
    const bool start = (p == cmdline || p[-1] == ' ');
    const bool end = (p[n] == '\0' || p[n] == ' ');
    if (start && end) return true;
  }
  return false;
}

// --trace=none|all, --frozen and --images=N (at most the images compiled in).
inline void ForgeAppApplyArgs(const char* cmdline, ForgeAppConfig* config) {
  if (ForgeAppHasArg(cmdline, "--trace=none")) config->trace = FORGE_APP_TRACE_NONE;
  if (ForgeAppHasArg(cmdline, "--trace=all")) config->trace = FORGE_APP_TRACE_ALL;
  if (ForgeAppHasArg(cmdline, "--frozen")) config->adapt = false;
  const char* images = strstr(cmdline, "--images=");
  if (images != nullptr) {
    const unsigned long n = strtoul(images + 9, nullptr, 10);
    if (n < config->num_images) config->num_images = n;
  }
}

// --gate: the gate with the export's settings (export/forge_app_export.cc; for data not
// written by export-firmware an error line through `write`, and false).
inline bool ForgeAppApplyGate(const char* cmdline, ForgeAppConfig* config,
                              void (*write)(const char*)) {
  if (!ForgeAppHasArg(cmdline, "--gate")) return true;
  if (!ForgeAppExportGateSettings(&config->gate_settings)) {
    write("error what=gate_settings (data not from export-firmware)\n");
    return false;
  }
  config->gate = true;
  return true;
}

#endif  // ESP32S3_APP_CORE_FORGE_APP_CMDLINE_H_
