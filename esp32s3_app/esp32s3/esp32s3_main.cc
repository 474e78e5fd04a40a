// ESP32-S3 emulation target of the FORGE application core (qemu-system-xtensa
// -machine esp32s3): the model and the int8 images are compiled in
// (forge_app_data.cc from forge_tflm.deploy.write_c_arrays, in flash behind
// the cache), lines go out through UART0, the clock is CCOUNT.
//
// Clock: QEMU's CCOUNT runs at the core clock of its virtual time; under
// `-icount shift=0` every instruction advances virtual time by 1 ns, so one
// CCOUNT tick is a fixed number of instructions. At boot the target times a
// loop of known length (2 instructions per iteration), prints the ratio in an
// "esp32s3" line and from then on reports time in instructions
// (ticks * ratio), with clock_hz=1000000000 (1 instruction = 1 virtual ns).
// Without -icount the same numbers are only wall-time estimates.
//
// Arguments (QEMU's -append, read through Xtensa semihosting, -semihosting):
//   --trace=none|forge|all  (default forge)   --frozen   --images=N
//   --gate  (the gate with the export's settings, core/export/forge_app_export.cc)
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forge_app.h"
#include "forge_app_cmdline.h"

// forge_app_data.cc (linked in per run); its forge_app_data.h declarations.
extern const uint8_t forge_app_model[];
extern const size_t forge_app_model_size;
extern const int8_t forge_app_images[];
extern const size_t forge_app_num_images;

extern "C" {
void esp32s3_write0(const char* s);
const char* esp32s3_cmdline(char* buf, int size);
uint64_t esp32s3_ccount64(void);
}
extern uint8_t g_esp32s3_arena[];
extern const size_t g_esp32s3_arena_bytes;

namespace {

constexpr uint32_t kCalibIterations = 5000000;  // 10M instructions

uint64_t g_ratio_x1000 = 1000;  // instructions per CCOUNT tick, x1000
char g_cmdline[256];

uint64_t ClockInstructions(void*) { return esp32s3_ccount64() * g_ratio_x1000 / 1000u; }

void WriteLine(void*, const char* line) { esp32s3_write0(line); }

void Calibrate() {
  const uint64_t t0 = esp32s3_ccount64();
  uint32_t n = kCalibIterations;
  // addi + bnez: 2 instructions per iteration (no zero-overhead loop: counted).
  __asm__ volatile("1: addi %0, %0, -1\n bnez %0, 1b" : "+r"(n));
  const uint64_t ticks = esp32s3_ccount64() - t0;
  const uint64_t instructions = 2ull * kCalibIterations;
  if (ticks > 0) g_ratio_x1000 = (instructions * 1000u + ticks / 2) / ticks;
  ForgeAppWriteCalibration(esp32s3_write0, "esp32s3 board=qemu", instructions, ticks,
                           g_ratio_x1000);
}

}  // namespace

int main() {
  const char* cmdline = esp32s3_cmdline(g_cmdline, sizeof(g_cmdline));
  Calibrate();
  ForgeAppConfig config;
  config.model = forge_app_model;
  config.model_size = forge_app_model_size;
  config.arena = g_esp32s3_arena;
  config.arena_size = g_esp32s3_arena_bytes;
  config.images = forge_app_images;
  config.num_images = forge_app_num_images;
  config.trace = FORGE_APP_TRACE_FORGE;
  ForgeAppApplyArgs(cmdline, &config);
  if (!ForgeAppApplyGate(cmdline, &config, esp32s3_write0)) return 1;
  ForgeAppPlatform platform = {ClockInstructions, 1000000000ull, WriteLine, nullptr, nullptr};
  return ForgeAppRun(platform, config) == 0 ? 0 : 1;
}
