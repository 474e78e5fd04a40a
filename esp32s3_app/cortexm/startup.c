/* Bare-metal startup for the Cortex-M emulation target (qemu-system-arm
 * mps2-an386 Cortex-M4F, mps3-an547 Cortex-M55, mps2-an385 Cortex-M3), linked with -nostartfiles
 * against newlib + librdimon (semihosting).
 *
 * Reset: enable the FPU (and MVE on the M55: same CPACR bits; not on a core
 * without one, where CPACR's CP10/CP11 fields do not exist), copy .data if
 * its load address differs, zero .bss, set up semihosting stdio
 * (initialise_monitor_handles), run C++ static constructors
 * (__libc_init_array, which needs _init/_fini: crti.o is not linked), main,
 * exit. Faults print one "error what=<fault>" record through semihosting and
 * exit with status 3, so a crash never hangs the emulator.
 *
 * SysTick: counts down from 0xFFFFFF at the processor clock; its interrupt
 * counts wraps so that cortexm_systick_ticks() is a 64-bit up-counter.
 */
#include <stdint.h>
#include <stdlib.h>

#define SCB_CPACR (*(volatile uint32_t*)0xE000ED88u)
#define SCB_ICSR (*(volatile uint32_t*)0xE000ED04u)
#define SCB_VTOR (*(volatile uint32_t*)0xE000ED08u)
#define SCB_CCR (*(volatile uint32_t*)0xE000ED14u)
#define SYST_CSR (*(volatile uint32_t*)0xE000E010u)
#define SYST_RVR (*(volatile uint32_t*)0xE000E014u)
#define SYST_CVR (*(volatile uint32_t*)0xE000E018u)
#define ICSR_PENDSTSET (1u << 26)
#define SYST_PERIOD (1u << 24)

extern uint32_t __data_load__, __data_start__, __data_end__;
extern uint32_t __bss_start__, __bss_end__;
extern uint32_t __stack_top__;
extern void __libc_init_array(void);
extern void initialise_monitor_handles(void);
extern int main(void);

void* __dso_handle = 0;
void _init(void) {}
void _fini(void) {}

/* ------------------------------------------------------------ semihosting */

static inline int semihost(int op, const void* arg) {
  register int r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xAB" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void cortexm_write0(const char* s) { semihost(0x04 /* SYS_WRITE0 */, s); }

/* SYS_GET_CMDLINE into buf; returns buf ("" on failure). */
const char* cortexm_cmdline(char* buf, int size) {
  struct {
    char* p;
    int n;
  } block = {buf, size - 1};
  buf[0] = '\0';
  if (semihost(0x15, &block) != 0) buf[0] = '\0';
  else buf[block.n < size ? block.n : size - 1] = '\0';
  return buf;
}

static void fault_exit(const char* what) {
  cortexm_write0("error what=");
  cortexm_write0(what);
  cortexm_write0("\ndone images=0 status=error ticks=0\n");
  /* SYS_EXIT_EXTENDED (0x20): {ADP_Stopped_ApplicationExit, status 3}. */
  static const uint32_t block[2] = {0x20026u, 3u};
  semihost(0x20, block);
  for (;;) {
  }
}

/* ---------------------------------------------------------------- SysTick */

static volatile uint32_t g_systick_wraps;

void SysTick_Handler(void) { g_systick_wraps++; }

void cortexm_systick_start(void) {
  SYST_CSR = 0;
  SYST_RVR = SYST_PERIOD - 1;
  SYST_CVR = 0;          /* any write clears the counter; reloads on the next tick */
  g_systick_wraps = 0;
  SYST_CSR = 7;          /* processor clock, interrupt on wrap, enable */
  /* The first read right after enabling can return 0: wait for the reload. */
  while (SYST_CVR == 0) {
  }
}

/* Ticks since cortexm_systick_start (up-counter, 64 bit). A wrap that has
 * happened but whose interrupt is still pending is counted here. */
uint64_t cortexm_systick_ticks(void) {
  uint32_t primask;
  __asm__ volatile("mrs %0, primask\n cpsid i" : "=r"(primask)::"memory");
  uint32_t wraps = g_systick_wraps;
  uint32_t v = SYST_CVR;
  if (SCB_ICSR & ICSR_PENDSTSET) {
    v = SYST_CVR; /* re-read: now surely after the reload */
    wraps++;
  }
  __asm__ volatile("msr primask, %0" ::"r"(primask) : "memory");
  return (uint64_t)wraps * SYST_PERIOD + (SYST_PERIOD - 1u - v);
}

/* ----------------------------------------------------------------- faults */

void HardFault_Handler(void) { fault_exit("hardfault"); }
void MemManage_Handler(void) { fault_exit("memmanage"); }
void BusFault_Handler(void) { fault_exit("busfault"); }
void UsageFault_Handler(void) { fault_exit("usagefault"); }
void Default_Handler(void) { fault_exit("unexpected_interrupt"); }

/* ------------------------------------------------------------------ reset */

void Reset_Handler(void) {
#if defined(__ARM_FP) || defined(__ARM_FEATURE_MVE)
  /* CP10/CP11 full access: FPU (M4F), FPU + MVE (M55). */
  SCB_CPACR |= (0xFu << 20);
  __asm__ volatile("dsb\n isb" ::: "memory");
#endif
  /* Trap divide by zero (never expected), keep unaligned accesses allowed. */
  SCB_CCR |= (1u << 4);
  uint32_t* src = &__data_load__;
  uint32_t* dst = &__data_start__;
  if (src != dst) {
    while (dst < &__data_end__) *dst++ = *src++;
  }
  for (uint32_t* p = &__bss_start__; p < &__bss_end__; ++p) *p = 0;
  initialise_monitor_handles();
  __libc_init_array();
  exit(main());
}

typedef void (*Vector)(void);

__attribute__((section(".vectors"), used)) const Vector g_vectors[16 + 32] = {
    (Vector)&__stack_top__,
    Reset_Handler,
    Default_Handler,    /* NMI */
    HardFault_Handler,
    MemManage_Handler,
    BusFault_Handler,
    UsageFault_Handler,
    Default_Handler,    /* SecureFault (v8-M) */
    0, 0, 0,
    Default_Handler,    /* SVCall */
    Default_Handler,    /* DebugMonitor */
    0,
    Default_Handler,    /* PendSV */
    SysTick_Handler,
    /* external interrupts: none enabled */
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
    Default_Handler, Default_Handler, Default_Handler, Default_Handler,
};
