// SwiGLU's product silu(g) u = g sigmoid(g) u of a gate and an up value, in float32: the CPU
// backend's swiglu (model/backend_cpu.c), and the same in AVX-512 for the AMX matmul that stores
// it straight from the gate and up projections' sums (model/matmul_amx.c).
#pragma once
#include <math.h>

#include "common/exp_below_88.h"

// With e = e^-|g| <= 1: sigmoid(g) = 1 / (1 + e) for g >= 0, e / (1 + e) below (so that no
// exponent overflows).
static inline float swiglu_one(float g, float u) {
    const float e = exp_below_88(-fabsf(g));
    return g * ((g >= 0 ? 1.0f : e) / (1.0f + e)) * u;
}

#ifdef __AVX512F__
#include <immintrin.h>

// swiglu_one of 16 pairs, in its order of operations.
static inline __m512 swiglu_x16(__m512 g, __m512 u) {
    const __m512 one = _mm512_set1_ps(1.0f), e = exp_below_88_x16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g)), 0xffff);
    const __m512 num = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_GE_OQ), e, one);
    return _mm512_mul_ps(_mm512_mul_ps(g, _mm512_div_ps(num, _mm512_add_ps(one, e))), u);
}
#endif
