/* The second core's reset code, loaded into its own ROM at the reset vector
 * (0x40000400) by QEMU's generic loader (`-m 2M -device loader,file=
 * cpu1_park.bin,addr=0x40000400,cpu-num=1,force-raw=on`; the loader needs RAM
 * size > 0, hence -m). With -kernel, QEMU's esp32s3 machine gives APP_CPU an
 * empty ROM and its stall input does nothing, so the core spins through
 * exceptions on zero bytes; under -icount those instructions advance the
 * virtual clock that PRO_CPU's CCOUNT reads (per-image counts drifted by
 * multiples of ~12M). Parked in WAITI it executes nothing. Position-
 * independent: assembled and copied out as raw bytes (Makefile). */
  .text
  .global cpu1_park
cpu1_park:
1:
  waiti 15
  j 1b
