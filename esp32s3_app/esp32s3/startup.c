/* C runtime of the ESP32-S3 emulation target (qemu-system-xtensa -machine
 * esp32s3 -kernel), linked with -nostartfiles against Espressif's newlib.
 *
 * esp32s3_cstart (called by startup.S): zero .bss, install newlib's global
 * reentrancy state (newlib-esp32 has none of its own: ESP-IDF supplies it),
 * run the C++ static constructors, main, exit. Console: bytes written to
 * UART0's FIFO register appear on QEMU's serial port. Exit: Xtensa
 * semihosting (SIMCALL SYS_exit, needs QEMU's -semihosting) ends QEMU with
 * main's status; without -semihosting the target spins after "done".
 * Constants (.rodata) live in flash behind the cache (esp32s3.ld): mapped
 * first, before anything reads a string or a table.
 * Clock: the CCOUNT cycle register, widened to 64 bits. */
#include <errno.h>
#include <reent.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#define UART0_FIFO (*(volatile uint32_t*)0x60000000u)
#define SYS_EXIT 1
#define SYS_ARGC 1000
#define SYS_ARGV_SZ 1001
#define SYS_ARGV 1002

#define MMU_TABLE ((volatile uint32_t*)0x600C5000u) /* DR_REG_MMU_TABLE */
#define MMU_PAGE (64u * 1024u)
#define DROM_BASE 0x3C000000u

extern char _sbss[], _ebss[], _end[], _heap_limit[];
extern char _flash_rodata_start[], _flash_rodata_end[];
extern void (*__init_array_start[])(void), (*__init_array_end[])(void);
extern int main(void);

void* __dso_handle = 0;
static struct _reent s_reent = _REENT_INIT(s_reent);
static char* s_brk = _end;

/* ------------------------------------------------------------ semihosting */

static int simcall(int op, int a, int b, int c) {
  register int a2 __asm__("a2") = op;
  register int a3 __asm__("a3") = a;
  register int a4 __asm__("a4") = b;
  register int a5 __asm__("a5") = c;
  __asm__ volatile("simcall" : "+r"(a2), "+r"(a3) : "r"(a4), "r"(a5) : "memory");
  return a2;
}

/* The command line (QEMU's -append, needs -semihosting), argv[1..] joined by
 * spaces, into buf; "" without semihosting (SIMCALL is then a no-op and
 * leaves a2 = the request, which no valid answer equals). */
const char* esp32s3_cmdline(char* buf, int size) {
  static char argv_buf[512];
  buf[0] = '\0';
  const int argc = simcall(SYS_ARGC, 0, 0, 0);
  const int bytes = simcall(SYS_ARGV_SZ, 0, 0, 0);
  if (argc <= 1 || argc >= SYS_ARGC || bytes <= 0 || bytes > (int)sizeof(argv_buf)) return buf;
  simcall(SYS_ARGV, (int)(intptr_t)argv_buf, 0, 0);
  char** argv = (char**)argv_buf;
  int n = 0;
  for (int i = 1; i < argc && argv[i] != NULL; ++i) {
    for (const char* p = argv[i]; *p != '\0' && n < size - 2; ++p) buf[n++] = *p;
    if (i + 1 < argc && n < size - 2) buf[n++] = ' ';
  }
  buf[n] = '\0';
  return buf;
}

/* ---------------------------------------------------------------- console */

void esp32s3_write0(const char* s) {
  while (*s != '\0') UART0_FIFO = (uint8_t)*s++;
}

static void write_hex(uint32_t v) {
  static const char kHex[] = "0123456789abcdef";
  char buf[11] = "0x";
  for (int i = 0; i < 8; ++i) buf[2 + i] = kHex[(v >> (28 - 4 * i)) & 0xF];
  buf[10] = '\0';
  esp32s3_write0(buf);
}

/* ------------------------------------------------------------------ clock */

static uint32_t s_ccount_last, s_ccount_high;

/* CCOUNT as a 64-bit up-counter (called far more often than it wraps). */
uint64_t esp32s3_ccount64(void) {
  uint32_t now;
  __asm__ volatile("rsr %0, ccount" : "=r"(now));
  if (now < s_ccount_last) s_ccount_high++;
  s_ccount_last = now;
  return ((uint64_t)s_ccount_high << 32) | now;
}

/* ----------------------------------------------------------- exit, faults */

void _exit(int status) {
  simcall(SYS_EXIT, status, 0, 0);
  for (;;) {
  }
}

void esp32s3_fault(uint32_t cause, uint32_t pc, uint32_t vaddr) {
  esp32s3_write0("error what=exception cause=");
  write_hex(cause);
  esp32s3_write0(" pc=");
  write_hex(pc);
  esp32s3_write0(" vaddr=");
  write_hex(vaddr);
  esp32s3_write0("\ndone images=0 status=error ticks=0\n");
  _exit(3);
}

/* Maps flash pages 0..n-1 at 0x3C000000 (entry i: virtual page i; value:
 * flash page number, valid, type flash), as the bootloader does for .rodata. */
static void map_flash_rodata(void) {
  const uint32_t bytes = (uint32_t)(_flash_rodata_end - _flash_rodata_start);
  const uint32_t first = ((uint32_t)(uintptr_t)_flash_rodata_start - DROM_BASE) / MMU_PAGE;
  const uint32_t pages = first + (bytes + MMU_PAGE - 1) / MMU_PAGE;
  for (uint32_t i = 0; i < pages; ++i) MMU_TABLE[i] = i;
}

void esp32s3_cstart(void) {
  map_flash_rodata();
  for (char* p = _sbss; p < _ebss; ++p) *p = 0;
  _global_impure_ptr = &s_reent;
  for (void (**f)(void) = __init_array_start; f < __init_array_end; ++f) (*f)();
  exit(main());
}

/* ------------------------------------------- newlib hooks (reentrant) */

struct _reent* __getreent(void) { return &s_reent; }
int pthread_setcancelstate(int state, int* oldstate) {
  (void)state;
  if (oldstate) *oldstate = 0;
  return 0;
}
_ssize_t _write_r(struct _reent* r, int fd, const void* buf, size_t n) {
  (void)r, (void)fd;
  const char* p = (const char*)buf;
  for (size_t i = 0; i < n; ++i) UART0_FIFO = (uint8_t)p[i];
  return (_ssize_t)n;
}
_ssize_t _read_r(struct _reent* r, int fd, void* buf, size_t n) {
  (void)fd, (void)buf, (void)n;
  r->_errno = ENOSYS;
  return -1;
}
int _close_r(struct _reent* r, int fd) { (void)r, (void)fd; return 0; }
_off_t _lseek_r(struct _reent* r, int fd, _off_t o, int w) {
  (void)r, (void)fd, (void)o, (void)w;
  return 0;
}
int _fstat_r(struct _reent* r, int fd, struct stat* st) {
  (void)r, (void)fd;
  st->st_mode = S_IFCHR;
  return 0;
}
int _isatty_r(struct _reent* r, int fd) { (void)r, (void)fd; return 1; }
int _isatty(int fd) { (void)fd; return 1; }
void* _sbrk_r(struct _reent* r, ptrdiff_t inc) {
  char* old = s_brk;
  if (s_brk + inc > _heap_limit) {
    r->_errno = ENOMEM;
    return (void*)-1;
  }
  s_brk += inc;
  return old;
}
int _kill_r(struct _reent* r, int pid, int sig) {
  (void)pid, (void)sig;
  r->_errno = ENOSYS;
  return -1;
}
int _getpid_r(struct _reent* r) { (void)r; return 1; }
