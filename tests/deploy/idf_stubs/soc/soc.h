#pragma once
#include <stdint.h>
// ESP-IDF casts the address directly (32-bit pointers); via uintptr_t on a 64-bit host.
#define REG_WRITE(_r, _v) (*(volatile uint32_t*)(uintptr_t)(_r)) = (_v)
