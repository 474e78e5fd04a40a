/* The platform interface of the FORGE application core (forge_app.h).
 *
 * The core (forge_app.cc) is plain C++17 + TFLite-Micro: no ESP-IDF, no OS, no
 * heap, no stdio. Everything target-specific comes in through this struct of
 * function pointers, filled by the target's main:
 *
 *   target                 clock                      write        markers
 *   host (x86, tests)      steady_clock, ns           stdout       no-ops
 *   ESP32-S3 (ESP-IDF)     CPU cycle counter          UART/printf  GPIO toggles
 *   Cortex-M (qemu)        SysTick / DWT cycles       semihosting  no-ops
 *
 * Every pointer may be NULL: a NULL clock reads 0 (no timings), a NULL write
 * drops the output, NULL markers are no-ops. The arena is the target's: a
 * 16-byte aligned buffer it owns (static array, PSRAM, ...), passed in
 * ForgeAppConfig.
 */
#ifndef ESP32S3_APP_CORE_FORGE_APP_PLATFORM_H_
#define ESP32S3_APP_CORE_FORGE_APP_PLATFORM_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What a marker brackets (the `what` argument of ForgeAppPlatform.marker). */
enum ForgeAppMarker {
  FORGE_APP_MARKER_INFERENCE = 0, /* one MicroInterpreter::Invoke (one image) */
  FORGE_APP_MARKER_FORGE_OP = 1   /* one FORGE_RECALIB op's Eval */
};

typedef struct ForgeAppPlatform {
  /* Monotonic time in ticks of clock_hz (cycles, ns, ...). Called around every
   * operator, so keep it cheap. */
  uint64_t (*clock)(void* user);
  uint64_t clock_hz; /* ticks per second, printed so that readers can convert */
  /* Writes one complete output line (NUL-terminated, ends in '\n'). */
  void (*write)(void* user, const char* line);
  /* begin = 1 before, 0 after the bracketed work. `index` is the image index
   * for FORGE_APP_MARKER_INFERENCE and the operator index (position in the
   * model's subgraph) for FORGE_APP_MARKER_FORGE_OP. Must be fast (a GPIO
   * write); it runs inside the timed region of FORGE ops. */
  void (*marker)(void* user, int what, int begin, uint32_t index);
  void* user; /* passed back to every callback */
} ForgeAppPlatform;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* ESP32S3_APP_CORE_FORGE_APP_PLATFORM_H_ */
