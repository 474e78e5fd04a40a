#pragma once
#include "freertos/FreeRTOS.h"
void vTaskDelay(const TickType_t xTicksToDelay);
