// Every dot product of na rows of a with nb rows of b, for the CPU flash attention's scores
// (attention/flash_cpu.c).
// Blocks of 4 rows by 4 rows share their loads: each element of a serves 4 rows of b and each of
// b 4 rows of a, with the 16 sums in registers, about twice the speed of separate dot products.
#pragma once
#include <stdint.h>

#include "common/avx512.h"
#include "common/dtype.h"

// out[i * out_a + j * out_b] = sum over k < n of a[i * a_stride + k] * b[j * b_stride + k], i, j < 4.
static inline void dot_4x4(const float *a, int64_t a_stride, const float *b, int64_t b_stride, int64_t n,
                           float *out, int64_t out_a, int64_t out_b) {
    const float *a0 = a, *a1 = a + a_stride, *a2 = a + 2 * a_stride, *a3 = a + 3 * a_stride;
    const float *b0 = b, *b1 = b + b_stride, *b2 = b + 2 * b_stride, *b3 = b + 3 * b_stride;
    float s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    float s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
    #pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)
    for (int64_t k = 0; k < n; k++) {
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        s00 += x0 * b0[k], s01 += x0 * b1[k], s02 += x0 * b2[k], s03 += x0 * b3[k];
        s10 += x1 * b0[k], s11 += x1 * b1[k], s12 += x1 * b2[k], s13 += x1 * b3[k];
        s20 += x2 * b0[k], s21 += x2 * b1[k], s22 += x2 * b2[k], s23 += x2 * b3[k];
        s30 += x3 * b0[k], s31 += x3 * b1[k], s32 += x3 * b2[k], s33 += x3 * b3[k];
    }
    float *o0 = out, *o1 = out + out_a, *o2 = out + 2 * out_a, *o3 = out + 3 * out_a;
    o0[0] = s00, o0[out_b] = s01, o0[2 * out_b] = s02, o0[3 * out_b] = s03;
    o1[0] = s10, o1[out_b] = s11, o1[2 * out_b] = s12, o1[3 * out_b] = s13;
    o2[0] = s20, o2[out_b] = s21, o2[2 * out_b] = s22, o2[3 * out_b] = s23;
    o3[0] = s30, o3[out_b] = s31, o3[2 * out_b] = s32, o3[3 * out_b] = s33;
}

#ifdef BURST_AVX512
// The elements [k, k + 16) of b as floats (bf16 when b_bf16, widened), those outside m 0. Plain
// loads where m is full: with masked ones throughout, the decode attention ran ~2x slower on the
// 2-core Zen 5.
static inline __attribute__((always_inline)) __m512 floats16(const void *b, const int b_bf16, int64_t k, __mmask16 m) {
    if (!b_bf16) return m == 0xffff ? _mm512_loadu_ps((const float *)b + k) : _mm512_maskz_loadu_ps(m, (const float *)b + k);
    const __m256i h = m == 0xffff ? _mm256_loadu_si256((const __m256i *)((const uint16_t *)b + k))
                                  : _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(m, (const uint16_t *)b + k));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) void store16(float *p, __mmask16 m, __m512 x) {
    if (m == 0xffff) _mm512_storeu_ps(p, x);
    else _mm512_mask_storeu_ps(p, m, x);
}
#endif

// out[r] = dot(a row r, b) for r < R (R <= 4, a constant once inlined), rows of a at a_stride:
// each loaded element of b serves the R rows. 16 partial sums a row, a vector register's worth,
// spelled out: GCC does not vectorize an omp simd reduction here once it is inlined into
// dot_rows' loop nest inside an OpenMP region (flash_cpu's one-row decode scores ran scalar).
// b holds float32, or bf16 when b_bf16 (a constant once inlined: the bf16 widening is a shift in
// the loop, for a bf16 KV cache read in place).
static inline __attribute__((always_inline)) void dot_rx1_as(const float *a, int64_t a_stride, const int R,
                                                            const void *b, const int b_bf16, int64_t n, float *out) {
#ifdef BURST_AVX512
    // In intrinsics: GCC made the loop below two 8-wide sums and their tree a spill through memory
    // (decode steps on a bf16 cache ~10% slower). Two sums a row: two chains of multiply-adds.
    __m512 v[4], w[4];
    for (int r = 0; r < R; r++) v[r] = w[r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= n; k += 32) {
        const __m512 x0 = floats16(b, b_bf16, k, 0xffff), x1 = floats16(b, b_bf16, k + 16, 0xffff);
        for (int r = 0; r < R; r++) {
            v[r] = _mm512_fmadd_ps(floats16(a + r * a_stride, 0, k, 0xffff), x0, v[r]);
            w[r] = _mm512_fmadd_ps(floats16(a + r * a_stride, 0, k + 16, 0xffff), x1, w[r]);
        }
    }
    for (int r = 0; r < R; r++) v[r] = _mm512_add_ps(v[r], w[r]);
    for (; k < n; k += 16) {
        const __mmask16 m = mask_first16(n - k);
        const __m512 x = floats16(b, b_bf16, k, m);
        for (int r = 0; r < R; r++) v[r] = _mm512_fmadd_ps(floats16(a + r * a_stride, 0, k, m), x, v[r]);
    }
    for (int r = 0; r < R; r++) out[r] = _mm512_reduce_add_ps(v[r]);
#else
    const float *bf = b;
    const uint16_t *bh = b;
    float s[4][16] = {{0}};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int l = 0; l < 16; l++) {
            const float x = b_bf16 ? bf16_to_f32(bh[k + l]) : bf[k + l];
            for (int r = 0; r < R; r++) s[r][l] += a[r * a_stride + k + l] * x;
        }
    for (int l = 0; k < n; k++, l++)
        for (int r = 0; r < R; r++) s[r][l] += a[r * a_stride + k] * (b_bf16 ? bf16_to_f32(bh[k]) : bf[k]);
    for (int r = 0; r < R; r++) { // a tree, not a chain of 16 dependent additions
        for (int l = 0; l < 8; l++) s[r][l] += s[r][l + 8];
        for (int l = 0; l < 4; l++) s[r][l] += s[r][l + 4];
        out[r] = (s[r][0] + s[r][2]) + (s[r][1] + s[r][3]);
    }
#endif
}

static inline float dot_1x1(const float *a, const float *b, int64_t n) {
    float out;
    dot_rx1_as(a, 0, 1, b, 0, n, &out);
    return out;
}

// out[i * out_a + j * out_b] = dot(a row i, b row j) for i < na, j < nb; rows of n elements.
static inline void dot_rows(const float *a, int64_t a_stride, int64_t na, const float *b, int64_t b_stride,
                            int64_t nb, int64_t n, float *out, int64_t out_a, int64_t out_b) {
    int64_t na4 = na / 4 * 4, nb4 = nb / 4 * 4;
    for (int64_t i = 0; i < na4; i += 4)
        for (int64_t j = 0; j < nb4; j += 4)
            dot_4x4(a + i * a_stride, a_stride, b + j * b_stride, b_stride, n, out + i * out_a + j * out_b, out_a, out_b);
    for (int64_t i = 0; i < na; i++) // what the blocks left: the last rows of a, then of b
        for (int64_t j = i < na4 ? nb4 : 0; j < nb; j++)
            out[i * out_a + j * out_b] = dot_1x1(a + i * a_stride, b + j * b_stride, n);
}
