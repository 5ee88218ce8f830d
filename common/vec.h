// The vector registers of the CPU's hand-blocked loops (model/matmul_cpu.c, attention/flash_cpu.c):
// VEC_FLOATS floats a vector, in GCC/Clang's vector extension, which the compiler maps onto
// AVX-512 (32 registers of 16 floats), AVX2 (16 of 8) or any 4-wide unit.
#pragma once
#include <string.h>

#if defined(__AVX512F__)
#define VEC_FLOATS 16
#elif defined(__AVX__)
#define VEC_FLOATS 8
#else
#define VEC_FLOATS 4
#endif
typedef float vec __attribute__((vector_size(VEC_FLOATS * sizeof(float))));

// VEC_FLOATS floats at p, of any alignment.
static inline vec vec_load(const float *p) {
    vec v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void vec_store(float *p, vec v) { memcpy(p, &v, sizeof v); }
