/*
 * Internal: DPT__CLONES compiles the function after it for x86-64-v4
 * (AVX-512), for x86-64-v3 (AVX2 with FMA) and for the baseline, picked at
 * load time by the CPU's features (GCC's target_clones). Meant for
 * elementwise loops written as plain arithmetic so that they vectorise:
 * every clone performs the same IEEE operations (no FMA contraction in ISO
 * C mode; an explicit fmaf() is one rounding on every clone, an instruction
 * in v3 and v4 and libm's call in the baseline), so the bits do not depend
 * on the CPU. Left out by the sanitizer builds, by other compilers and by
 * GCC before 11 (which has no x86-64-v3/v4 names).
 */
#ifndef DPT_CORE_CLONES_H
#define DPT_CORE_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && \
    !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define DPT__CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DPT__CLONES
#endif

#endif
