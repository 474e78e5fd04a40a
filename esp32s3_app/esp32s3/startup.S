/* Bare-metal start for the ESP32-S3 emulation target (qemu-system-xtensa
 * -machine esp32s3 -kernel: the ROM and the bootloader are skipped, QEMU
 * jumps to _start). Windowed-register ABI (call4/8/12 + entry): the window
 * overflow/underflow vectors spill and refill register frames on the stack.
 * Any other exception prints an "error what=exception cause=..." record on
 * UART0 and exits with status 3 (esp32s3_fault), so a crash never hangs QEMU.
 *
 * The outermost frame (sp = top - 48) gets a fake caller: when a deep call
 * chain spills it, the call8 overflow handler reads the caller's sp from
 * [sp - 12] and writes 16 bytes below that; [sp - 12] = top points them at
 * the unused 48 bytes above sp instead of at address 0 - 32. */
    .macro first_frame top
    movi  a2, \top
    addi  a1, a2, -48
    addi  a3, a1, -12
    s32i  a2, a3, 0
    .endm
    .section .vectors, "ax"
    .align 4
    .global _vector_table
_vector_table:
    .org 0x000
_WindowOverflow4:
    s32e a0, a5, -16
    s32e a1, a5, -12
    s32e a2, a5, -8
    s32e a3, a5, -4
    rfwo
    .org 0x040
_WindowUnderflow4:
    l32e a0, a5, -16
    l32e a1, a5, -12
    l32e a2, a5, -8
    l32e a3, a5, -4
    rfwu
    .org 0x080
_WindowOverflow8:
    s32e a0, a9, -16
    l32e a0, a1, -12
    s32e a1, a9, -12
    s32e a2, a9, -8
    s32e a3, a9, -4
    s32e a4, a0, -32
    s32e a5, a0, -28
    s32e a6, a0, -24
    s32e a7, a0, -20
    rfwo
    .org 0x0C0
_WindowUnderflow8:
    l32e a1, a9, -12
    l32e a0, a9, -16
    l32e a7, a1, -12
    l32e a2, a9, -8
    l32e a4, a7, -32
    l32e a3, a9, -4
    l32e a5, a7, -28
    l32e a6, a7, -24
    l32e a7, a7, -20
    rfwu
    .org 0x100
_WindowOverflow12:
    s32e a0, a13, -16
    l32e a0, a1, -12
    s32e a1, a13, -12
    s32e a2, a13, -8
    s32e a3, a13, -4
    s32e a4, a0, -48
    s32e a5, a0, -44
    s32e a6, a0, -40
    s32e a7, a0, -36
    s32e a8, a0, -32
    s32e a9, a0, -28
    s32e a10, a0, -24
    s32e a11, a0, -20
    rfwo
    .org 0x140
_WindowUnderflow12:
    l32e a1, a13, -12
    l32e a0, a13, -16
    l32e a11, a1, -12
    l32e a2, a13, -8
    l32e a4, a11, -48
    l32e a8, a11, -32
    l32e a3, a13, -4
    l32e a5, a11, -44
    l32e a6, a11, -40
    l32e a7, a11, -36
    l32e a9, a11, -28
    l32e a10, a11, -24
    l32e a11, a11, -20
    rfwu
    .org 0x300
_KernelException:
    j   _fault
    .org 0x340
_UserException:
    j   _fault
    .org 0x3C0
_DoubleException:
    j   _fault

    .section .text
    .literal_position
    .align 4
/* A fault: restart on a fresh window and stack (the faulting frame may be
 * unusable) and call esp32s3_fault(exccause, epc1, excvaddr), which exits. */
_fault:
    movi  a2, 1
    wsr   a2, windowstart
    movi  a2, 0
    wsr   a2, windowbase
    rsync
    rsr   a10, exccause
    rsr   a11, epc1
    rsr   a12, excvaddr
    movi  a0, 0
    first_frame _fault_stack_top
    movi  a2, 0x40020            /* PS: WOE=1, UM=1, EXCM=0 */
    wsr   a2, ps
    rsync
    call8 esp32s3_fault
1:  j 1b

    .align 4
    .global _start
_start:
    movi  a2, 0xff
    wsr   a2, cpenable           /* coprocessors: FPU (cp0) and the PIE/SIMD unit */
    movi  a2, _vector_table
    wsr   a2, vecbase
    movi  a2, 1
    wsr   a2, windowstart
    movi  a2, 0
    wsr   a2, windowbase
    rsync
    movi  a0, 0
    first_frame _stack_top
    movi  a2, 0x40020            /* PS: WOE=1 (windowed calls), UM=1, INTLEVEL=0 */
    wsr   a2, ps
    rsync
    call8 esp32s3_cstart
2:  j 2b
