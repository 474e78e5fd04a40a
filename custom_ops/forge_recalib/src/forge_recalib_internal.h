/* FORGE_RECALIB C core, internal: what forge_recalib.c and forge_recalib_int.c
 * share (not part of the op's interface; no build outside this folder includes
 * it). */
#ifndef FORGE_RECALIB_INTERNAL_H_
#define FORGE_RECALIB_INTERNAL_H_

#include "forge_recalib.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Exact integer sums S1/S2 of x[M][C] per channel (SPEC step 1), the plain C
 * loop both arithmetics run where the target has no stats hook. */
void forge_recalib_stats_ansi(const int8_t* x, int32_t M, int32_t C, int64_t* s2,
                              int32_t* s1, int32_t* s2_blk);

/* A float's bits (an integer load: no float operation). */
uint32_t forge_recalib_bits_of(const float* f);

/* The checks both arithmetics share, on bits (no float operation, so the integer
 * arithmetic runs on a core without an FPU): targets finite with |beta|,
 * gamma_abs <= 2^40 (gamma_abs >= 0 or -0.0); momentum in [0, 1]; eps finite
 * and > 0. */
int forge_recalib_check_target_bits(const float* beta, const float* gamma_abs,
                                    int32_t C, const char** msg);
int forge_recalib_momentum_ok(const float* m);
int forge_recalib_eps_ok(const float* e);

/* The integer arithmetic's invocation (SPEC "Integer arithmetic") with a target's
 * hooks (may be NULL); the caller has validated the arguments common to both
 * arithmetics. */
int forge_recalib_int_run(const forge_recalib_args* args,
                          const forge_recalib_hooks* hooks, const char** msg);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* FORGE_RECALIB_INTERNAL_H_ */
