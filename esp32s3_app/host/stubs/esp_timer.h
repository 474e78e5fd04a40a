/* Host stand-in for ESP-IDF's <esp_timer.h>, which esp-tflite-micro's
 * kernels/esp_nn/ adapters include for their own (unused) timing counters. */
#ifndef ESP32S3_APP_HOST_STUBS_ESP_TIMER_H_
#define ESP32S3_APP_HOST_STUBS_ESP_TIMER_H_
#include <stdint.h>
static inline int64_t esp_timer_get_time(void) { return 0; }
#endif
