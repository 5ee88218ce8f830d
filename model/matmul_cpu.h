// The CPU backend's matmul (model/backend_cpu.c), and the element conversions the backend's
// other ops share with it.
#pragma once
#include "backend.h"
#include "common/avx512.h"

// dst[0..n) = elements [first, first + n) of a weight, as float32 (Q8, Q4: integer times scale, in
// float32).
void weight_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst);

// out (of out_dtype, F32 or BF16) = x @ W^T, or out (F32) += x @ W^T when accumulate; x (n rows
// of W->cols) is F32 or BF16; W is F32, F16, BF16, Q8 or Q4. n_threads OpenMP threads.
void matmul_cpu(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                const burst_weight *W, int n, int n_threads);

// 1 where this build's GEMM multiplies bf16 inputs by BF16 weights as stored (AVX512-BF16), and
// so gains from them without AMX; 0 where it widens them to float32.
int matmul_cpu_bf16_products(void);

// 1 where matmul_cpu multiplies x (x_dtype) by W's values rounded to bf16: Q8 (and Q4 in the GEMM,
// where not matmul_cpu_quantizes_x) weights on column pairs (bf16 x, AVX512-BF16).
int matmul_cpu_rounds_weights(burst_dtype x_dtype, const burst_weight *W);

// 1 where matmul_cpu multiplies n tokens of x (x_dtype) quantized to int8 (matmul_ints): by Q4
// weights at every count with AVX2 or AVX-512 (but up to 255 tokens of bf16 x with AVX512-BF16),
// one to three with neither; by Q8 weights at every count with AVX2 alone (Q8_INTS).
int matmul_cpu_quantizes_x(burst_dtype x_dtype, const burst_weight *W, int n);

// The most bytes matmul_cpu allocates for a call of n tokens by a weight of cols columns.
size_t matmul_cpu_transient_bytes(int n, int64_t cols, int n_threads);

// Element i of an activation buffer of dtype F32 or BF16, and its store.
static inline float act_get(const void *p, burst_dtype dt, int64_t i) {
    return dt == DTYPE_F32 ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}
static inline void act_set(void *p, burst_dtype dt, int64_t i, float v) {
    if (dt == DTYPE_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = f32_to_bf16(v);
}

#ifdef BURST_AVX512
// act_set of the 16 floats s to elements [i, i + 16) where m has their bits (F32 or BF16), or,
// with accumulate, their sums with those elements (F32).
static inline void act_set_x16(void *p, burst_dtype dt, int accumulate, int64_t i, __mmask16 m, __m512 s) {
    float *f = (float *)p + i;
    if (accumulate) _mm512_mask_storeu_ps(f, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, f), s));
    else if (dt == DTYPE_F32) _mm512_mask_storeu_ps(f, m, s);
    else _mm256_mask_storeu_epi16((uint16_t *)p + i, m, bf16_nearest_x16(s));
}
#endif
