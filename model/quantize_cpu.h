// Quantized weights on the CPU backends (--quantize): made at load from a checkpoint's matrices, a
// float32 scale per Q_GROUP (32) columns of a row (burst_weight.scales).
//   Q8: int8, the group's largest magnitude / 127 its scale (llama.cpp's Q8_0, float32 scales).
//   Q4: 4-bit integers q in -8..7, each stored as q + 8, two to a byte. A group's 32 are 4 dwords
//       of 4 bytes: byte b of dword j holds column 4j + b in its low 4 bits and 16 + 4j + b in its
//       high ones. A row is spans of 16 groups (Q4_SPAN columns, 256 bytes; the last one padded),
//       which keep dword j of their 16 groups side by side, at 64j + 4 x (the group in the span):
//       so one 64-byte load holds a dword of 16 groups, a group to each 32-bit lane, and the integer
//       dot products add a whole group's products in one lane (matmul_ints). Columns past the
//       row's end hold 8 (zero). The scale is llama.cpp's Q4_0's: the group's largest magnitude,
//       signed, over -8.
// Q4 weights multiply x quantized to int8 here (matmul_ints), at every token count with AVX2 or
// AVX-512, but from 256 tokens of bf16 x on column pairs (and from 4 with neither) widened as Q8
// ones in the GEMM (matmul_cpu.c's Q4_INT_TOKENS, Q4_INT_TOKENS_PAIRS). Q8 weights are multiplied as the others
// (model/matmul_cpu.c), but with AVX2 alone (Q8_INTS: no AVX-512) in integers here too.
#pragma once
#include <string.h>

#include "backend.h"
#include "common/avx512.h"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#if defined(__AVX2__) && !defined(BURST_AVX512)
#define Q8_INTS 1
#else
#define Q8_INTS 0
#endif

enum { Q4_SPAN = 16 * Q_GROUP };
static inline int64_t q4_row_bytes(int64_t cols) { return (cols + Q4_SPAN - 1) / Q4_SPAN * (Q4_SPAN / 2); }

// Where dword j of group g lies in a Q4 row.
static inline int64_t q4_dword(int64_t g, int j) { return g / 16 * (Q4_SPAN / 2) + 64 * j + 4 * (g % 16); }

// n (at most Q_GROUP) floats w as int8 multiples q of the scale they return: their largest
// magnitude over 127, each rounded to the nearest (ties to even).
float quantize_group(const float *w, int64_t n, int8_t *q);

// W (rows, cols; F32, F16 or BF16) quantized into data (Q8: int8 of W's shape; Q4: rows of
// q4_row_bytes(cols)) and scales (rows, q_groups(cols)), on n_threads threads.
void quantize_weight(burst_dtype quant, void *data, float *scales, const burst_weight *W, int n_threads);

// The 32 4-bit integers of group g of a Q4 row w as int8, in column order.
static inline void q4_unpack(const uint8_t *w, int64_t g, int8_t q[Q_GROUP]) {
    uint32_t d[4];
    for (int j = 0; j < 4; j++) memcpy(d + j, w + q4_dword(g, j), 4);
#if defined(__AVX2__)
    const __m128i packed = _mm_setr_epi32((int)d[0], (int)d[1], (int)d[2], (int)d[3]);
    const __m128i low = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    _mm_storeu_si128((__m128i *)q, _mm_sub_epi8(_mm_and_si128(packed, low), eight));
    _mm_storeu_si128((__m128i *)(q + 16), _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), low), eight));
#else
    const uint8_t *b = (const uint8_t *)d;
    for (int i = 0; i < 16; i++) q[i] = (int8_t)((b[i] & 15) - 8), q[i + 16] = (int8_t)((b[i] >> 4) - 8);
#endif
}

// Weight j of a Q4 row (its bytes w, its scales s), as float32: its integer times its scale.
static inline float q4_at(const uint8_t *w, const float *s, int64_t j) {
    const int c = (int)(j % Q_GROUP), byte = w[q4_dword(j / Q_GROUP, c % 16 / 4) + c % 4];
    return (float)((c < 16 ? byte & 15 : byte >> 4) - 8) * s[j / Q_GROUP];
}

// out (n, rows) = x @ W^T for a Q4 weight W (or Q8, where Q8_INTS) and n tokens of x (F32 or
// BF16), or out (F32) += it with accumulate: each token's row quantized as Q8 weights are
// (quantize_group), each group's integer products summed exactly, then times both scales and
// summed in float32.
void matmul_ints(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                 const burst_weight *W, int n, int n_threads);
// What matmul_ints allocates while it runs: x quantized, and each thread's sums.
size_t matmul_ints_transient_bytes(int n, int64_t cols, int n_threads);
