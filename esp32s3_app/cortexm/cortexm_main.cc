// Cortex-M emulation target of the FORGE application core (qemu-system-arm
// mps2-an386 Cortex-M4F, mps3-an547 Cortex-M55): the model and the int8 images
// are compiled in (forge_app_data.cc from forge_tflm.deploy.write_c_arrays),
// lines go out through semihosting, the clock is SysTick.
//
// Clock: SysTick runs at the board's processor clock; under
// `qemu-system-arm -icount shift=0` every instruction advances virtual time by
// 1 ns, so one SysTick tick is a fixed number of instructions (40 on the an386
// at 25 MHz, 31.25 on the an547 at 32 MHz). At boot the target times a loop of
// known length (2 instructions per iteration), prints the measured ratio in a
// "cortexm" line and from then on reports time in instructions
// (ticks * ratio), with clock_hz=1000000000 (1 instruction = 1 virtual ns).
// Without -icount the same numbers are only wall-time estimates.
//
// Arguments (semihosting command line, e.g. qemu's -append):
//   --trace=none|forge|all  (default forge)   --frozen   --images=N
//   --gate  (the gate with the export's settings, core/export/forge_app_export.cc)
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "forge_app.h"
#include "forge_app_cmdline.h"

// forge_app_data.cc (forge_tflm.deploy.write_c_arrays, linked in per run); the
// declarations of its forge_app_data.h, repeated so that this file does not
// depend on a generated folder.
extern const uint8_t forge_app_model[];
extern const size_t forge_app_model_size;
extern const int8_t forge_app_images[];
extern const size_t forge_app_num_images;

extern "C" {
void cortexm_write0(const char* s);
const char* cortexm_cmdline(char* buf, int size);
void cortexm_systick_start(void);
uint64_t cortexm_systick_ticks(void);
}

#ifndef FORGE_CORTEXM_BOARD
#define FORGE_CORTEXM_BOARD "unknown"
#endif
#ifndef FORGE_CORTEXM_ARENA_BYTES
#define FORGE_CORTEXM_ARENA_BYTES (256 * 1024)
#endif

namespace {

constexpr uint32_t kCalibIterations = 5000000;  // 10M instructions

alignas(16) uint8_t g_arena[FORGE_CORTEXM_ARENA_BYTES];
uint64_t g_ratio_x1000 = 1000;  // instructions per SysTick tick, x1000
char g_cmdline[256];

uint64_t ClockInstructions(void*) { return cortexm_systick_ticks() * g_ratio_x1000 / 1000u; }

void WriteLine(void*, const char* line) { cortexm_write0(line); }

void Calibrate() {
  cortexm_systick_start();
  const uint64_t t0 = cortexm_systick_ticks();
  uint32_t n = kCalibIterations;
  __asm__ volatile("1: subs %0, %0, #1\n bne 1b" : "+r"(n));
  const uint64_t ticks = cortexm_systick_ticks() - t0;
  const uint64_t instructions = 2ull * kCalibIterations;
  if (ticks > 0) g_ratio_x1000 = (instructions * 1000u + ticks / 2) / ticks;
  ForgeAppWriteCalibration(cortexm_write0, "cortexm board=" FORGE_CORTEXM_BOARD, instructions,
                           ticks, g_ratio_x1000);
}

}  // namespace

int main() {
  const char* cmdline = cortexm_cmdline(g_cmdline, sizeof(g_cmdline));
  Calibrate();
  ForgeAppConfig config;
  config.model = forge_app_model;
  config.model_size = forge_app_model_size;
  config.arena = g_arena;
  config.arena_size = sizeof(g_arena);
  config.images = forge_app_images;
  config.num_images = forge_app_num_images;
  config.trace = FORGE_APP_TRACE_FORGE;
  ForgeAppApplyArgs(cmdline, &config);
  if (!ForgeAppApplyGate(cmdline, &config, cortexm_write0)) return 1;
  ForgeAppPlatform platform = {ClockInstructions, 1000000000ull, WriteLine, nullptr, nullptr};
  return ForgeAppRun(platform, config) == 0 ? 0 : 1;
}
