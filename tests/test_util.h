// Helpers shared by the C tests: fresh random inputs, comparison against a float64 reference
// (nmse and elementwise atol/rtol, first pairs and worst index printed), guard words after
// output buffers. Header-only so each test is one file; not thread-safe (one RNG state).
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/dtype.h"

#define TEST_SKIP 77 // ctest's SKIP_RETURN_CODE

// Whether the mapping that holds p was advised to take 2 MB pages ("hg" among its VmFlags in
// /proc/self/smaps): 1 or 0; -1 where that cannot be told (a kernel without transparent huge
// pages, no smaps).
static inline int test_huge_advice(const void *p) {
    FILE *f = access("/sys/kernel/mm/transparent_hugepage", F_OK) ? NULL : fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4352];
    int inside = 0, advised = -1;
    while (advised < 0 && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        if (sscanf(line, "%llx-%llx ", &a, &b) == 2) inside = a <= (uintptr_t)p && (uintptr_t)p < b;
        else if (inside && !strncmp(line, "VmFlags:", 8)) advised = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return advised;
}

static uint64_t test_rng_state = 0x9e3779b97f4a7c15ull;

// Seeds from the clock unless BURST_TEST_SEED is set; prints the seed so a failure can be replayed.
static inline void test_seed(const char *test) {
    const char *s = getenv("BURST_TEST_SEED");
    test_rng_state = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
    if (test_rng_state == 0) test_rng_state = 1;
    printf("%s: seed %llu (replay with BURST_TEST_SEED)\n", test, (unsigned long long)test_rng_state);
}

static inline uint64_t test_rand_u64(void) { // xorshift64*
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 2685821657736338717ull;
}

// Uniform in [lo, hi).
static inline float test_uniform(float lo, float hi) {
    return lo + (hi - lo) * (float)((test_rand_u64() >> 40) * (1.0 / 16777216.0));
}

static inline void test_fill(float *x, int64_t n, float lo, float hi) {
    for (int64_t i = 0; i < n; i++) x[i] = test_uniform(lo, hi);
}

// rows x cols logits for backend_argmax: a grid of 0.25, so ties are common and the first of equal
// values must win; with rows > 1, row 1 all -INFINITY and row 2's largest value its last.
static inline void test_fill_argmax_rows(float *x, int rows, int64_t cols) {
    for (int64_t i = 0; i < rows * cols; i++) x[i] = floorf(test_uniform(-5, 5) * 4) / 4;
    if (rows > 1) {
        for (int64_t j = 0; j < cols; j++) x[cols + j] = -INFINITY;
        x[3 * cols - 1] = 6;
    }
}

// Allocates n floats plus 16 guard words filled with a pattern checked by test_guard_ok.
#define TEST_GUARD_WORDS 16
static const uint32_t test_guard_pattern = 0x7fa5a5a5u; // a NaN: a read of it would show too
static inline float *test_alloc_guarded(int64_t n) {
    float *p = malloc((size_t)(n + TEST_GUARD_WORDS) * sizeof(float));
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    for (int i = 0; i < TEST_GUARD_WORDS; i++) memcpy(&p[n + i], &test_guard_pattern, 4);
    return p;
}
static inline int test_guard_ok(const float *p, int64_t n, const char *what) {
    for (int i = 0; i < TEST_GUARD_WORDS; i++)
        if (memcmp(&p[n + i], &test_guard_pattern, 4) != 0) {
            printf("FAIL %s: write past the end (guard word %d overwritten)\n", what, i);
            return 0;
        }
    return 1;
}

// n activations of dtype dt (F32, or BF16: model/backend.h's act dtype) kept in a float buffer
// take test_act_words(dt, n) floats of it, before the guard words; element i as a float.
static inline int64_t test_act_words(burst_dtype dt, int64_t n) { return dt == DTYPE_F32 ? n : (n + 1) / 2; }
static inline float test_act_value(burst_dtype dt, const float *p, int64_t i) {
    return dt == DTYPE_F32 ? p[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}

// Compares got against a float64 reference. Passes when nmse <= max_nmse and every element has
// |got - ref| <= atol + rtol*|ref|. NaN always fails; infinities must match exactly.
static inline int test_compare(const char *what, const float *got, const double *ref, int64_t n,
                               double max_nmse, double atol, double rtol) {
    double num = 0, den = 0, worst = -1;
    int64_t worst_i = 0, fails = 0;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], r = ref[i];
        int bad;
        if (isinf(r) || isinf(g)) bad = !(g == r);
        else {
            bad = isnan(g) || isnan(r) || fabs(g - r) > atol + rtol * fabs(r);
            if (!isnan(g)) { num += (g - r) * (g - r); den += r * r; }
            double e = fabs(g - r) - rtol * fabs(r);
            if (isnan(g) || e > worst) { worst = isnan(g) ? INFINITY : e; worst_i = i; }
        }
        if (bad && ++fails <= 10) printf("  %s[%lld]: got %.9g want %.9g\n", what, (long long)i, g, r);
    }
    double nmse = den > 0 ? num / den : num;
    int ok = fails == 0 && nmse <= max_nmse;
    printf("%s %s: n=%lld nmse=%.3g (max %.1g) fails=%lld worst[%lld] got %.9g want %.9g; first:",
           ok ? "ok  " : "FAIL", what, (long long)n, nmse, max_nmse, (long long)fails,
           (long long)worst_i, n ? got[worst_i] : 0.0, n ? ref[worst_i] : 0.0);
    for (int64_t i = 0; i < n && i < 5; i++) printf(" (%.6g %.6g)", got[i], ref[i]);
    printf("\n");
    return ok;
}
