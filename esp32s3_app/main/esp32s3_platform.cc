// See esp32s3_platform.h.
#include "esp32s3_platform.h"

#include <stdio.h>

#include "driver/gpio.h"
#include "esp_cpu.h"
#include "esp_heap_caps.h"
#include "forge_app_data.h"  // FORGE_APP_ARENA_BYTES (export-firmware)
#include "freertos/FreeRTOS.h"
#include "freertos/task.h"
#include "sdkconfig.h"
#include "soc/gpio_reg.h"
#include "soc/soc.h"

namespace forge_esp32s3 {
namespace {

// CCOUNT is 32-bit (wraps every ~17.9 s at 240 MHz): extended in software. The
// core reads the clock around every operator, far more often than it wraps.
struct CycleClock {
  uint32_t last = 0;
  uint64_t high = 0;
};

uint64_t ReadCycles(void* user) {
  CycleClock* c = static_cast<CycleClock*>(user);
  const uint32_t now = esp_cpu_get_cycle_count();
  if (now < c->last) c->high += 1ull << 32;
  c->last = now;
  return c->high | now;
}

void WriteLine(void*, const char* line) { fputs(line, stdout); }

// One register write per edge (gpio_set_level costs more and would sit inside
// the FORGE op's timed region).
inline void SetPin(int pin, int level) {
  if (pin < 0) return;
  if (pin < 32) {
    REG_WRITE(level ? GPIO_OUT_W1TS_REG : GPIO_OUT_W1TC_REG, 1u << pin);
  } else {
    REG_WRITE(level ? GPIO_OUT1_W1TS_REG : GPIO_OUT1_W1TC_REG, 1u << (pin - 32));
  }
}

void Marker(void*, int what, int begin, uint32_t) {
  SetPin(what == FORGE_APP_MARKER_INFERENCE ? CONFIG_FORGE_APP_INFERENCE_GPIO
                                            : CONFIG_FORGE_APP_FORGE_GPIO,
         begin);
}

void ConfigurePin(int pin) {
  if (pin < 0) return;
  gpio_reset_pin(static_cast<gpio_num_t>(pin));
  gpio_set_direction(static_cast<gpio_num_t>(pin), GPIO_MODE_OUTPUT);
  gpio_set_level(static_cast<gpio_num_t>(pin), 0);
}

CycleClock g_clock;

#if FORGE_APP_ARENA_BYTES <= CONFIG_FORGE_APP_ARENA_INTERNAL_MAX
alignas(16) uint8_t g_arena[FORGE_APP_ARENA_BYTES];
#endif

}  // namespace

ForgeAppPlatform Platform() {
  ConfigurePin(CONFIG_FORGE_APP_INFERENCE_GPIO);
  ConfigurePin(CONFIG_FORGE_APP_FORGE_GPIO);
  ForgeAppPlatform p = {ReadCycles, CONFIG_ESP_DEFAULT_CPU_FREQ_MHZ * 1000000ull, WriteLine,
                        Marker, &g_clock};
  return p;
}

uint8_t* AllocateArena(size_t bytes) {
#if FORGE_APP_ARENA_BYTES <= CONFIG_FORGE_APP_ARENA_INTERNAL_MAX
  (void)bytes;
  return g_arena;
#else
  void* p = heap_caps_aligned_alloc(16, bytes, MALLOC_CAP_SPIRAM | MALLOC_CAP_8BIT);
  if (p == nullptr) {
    printf("error what=arena_alloc bytes=%u (needs PSRAM: enable CONFIG_SPIRAM on a board "
           "that has it)\n", static_cast<unsigned>(bytes));
  }
  return static_cast<uint8_t*>(p);
#endif
}

void Finish() {
  fflush(stdout);
  for (;;) vTaskDelay(portMAX_DELAY);
}

}  // namespace forge_esp32s3
