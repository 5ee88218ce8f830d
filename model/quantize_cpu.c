// Quantized weights on the CPU backends: making them at load, and Q4's few-token matmul
// (model/quantize_cpu.h).
#include "quantize_cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "common/avx512.h"
#include "common/burst.h"
#include "matmul_cpu.h"

#if defined(__AVX2__) && !defined(BURST_AVX512)
// The sum (largest, smallest) of v's 8 floats.
static inline float sum8(__m256 v) {
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_movehdup_ps(h)));
}
static inline float max8(__m256 v) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
static inline float min8(__m256 v) {
    __m128 h = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_min_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_min_ss(h, _mm_movehdup_ps(h)));
}

// A group's 32 integers (v[0] the first 8; each within -128..127) as int8 at q: the packs
// interleave 128-bit halves, the permute undoes it.
static inline void store_group_i8(const __m256i v[4], int8_t *q) {
    const __m256i i8 = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(i8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

// A whole group in AVX-512 (AVX2) registers: the scalar loop's calls to fmaxf and lrintf took 80%
// of a 7B checkpoint's load, and Q4's matmuls quantize x with it too.
float quantize_group(const float *w, int64_t n, int8_t *q) {
#ifdef BURST_AVX512
    if (n == Q_GROUP) {
        const __m512 lo = _mm512_loadu_ps(w), hi = _mm512_loadu_ps(w + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        const __m512 inv = _mm512_set1_ps(amax > 0 ? 127 / amax : 0);
        _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(lo, inv))));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(hi, inv))));
        return amax / 127;
    }
#elif defined(__AVX2__)
    if (n == Q_GROUP) {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 v[4], m = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(w + 8 * i), m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
        const float amax = max8(m);
        const __m256 inv = _mm256_set1_ps(amax > 0 ? 127 / amax : 0);
        __m256i i32[4];
        for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
        store_group_i8(i32, q);
        return amax / 127;
    }
#endif
    float amax = 0;
    for (int64_t k = 0; k < n; k++) amax = fmaxf(amax, fabsf(w[k]));
    const float inv = amax > 0 ? 127 / amax : 0;
    for (int64_t k = 0; k < n; k++) q[k] = (int8_t)lrintf(w[k] * inv);
    return amax / 127;
}

// n (at most Q_GROUP) floats w as integers q in -8..7 of the scale they return: the largest
// magnitude, signed (the positive one of a tie), over -8 (llama.cpp's Q4_0), each rounded to the
// nearest (ties to even), then clamped (the far side reaches 8 at most). (Refitting the scale to
// the integers by least squares, sum(q w) / sum(q q), left stories260K's perplexity on
// bench/stories.txt where it was, 3.956.) AVX-512 (AVX2) for a whole group, as quantize_group.
static float quantize_q4_group(const float *w, int64_t n, int8_t *q) {
#ifdef BURST_AVX512
    if (n == Q_GROUP) {
        const __m512 lo = _mm512_loadu_ps(w), hi = _mm512_loadu_ps(w + 16);
        const float mx = _mm512_reduce_max_ps(_mm512_max_ps(lo, hi)), mn = _mm512_reduce_min_ps(_mm512_min_ps(lo, hi));
        const float d0 = (-mn > mx ? mn : mx) / -8;
        const __m512 id = _mm512_set1_ps(d0 != 0 ? 1 / d0 : 0), qmin = _mm512_set1_ps(-8), qmax = _mm512_set1_ps(7);
        const __m512 ql = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(lo, id), _MM_FROUND_TO_NEAREST_INT), qmin), qmax);
        const __m512 qh = _mm512_min_ps(_mm512_max_ps(_mm512_roundscale_ps(_mm512_mul_ps(hi, id), _MM_FROUND_TO_NEAREST_INT), qmin), qmax);
        _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(ql)));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(qh)));
        return d0;
    }
#elif defined(__AVX2__)
    if (n == Q_GROUP) {
        __m256 v[4], vmax = _mm256_setzero_ps(), vmin = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) v[i] = _mm256_loadu_ps(w + 8 * i), vmax = _mm256_max_ps(vmax, v[i]), vmin = _mm256_min_ps(vmin, v[i]);
        const float mx = max8(vmax), mn = min8(vmin), d0 = (-mn > mx ? mn : mx) / -8;
        const __m256 id = _mm256_set1_ps(d0 != 0 ? 1 / d0 : 0), qmin = _mm256_set1_ps(-8), qmax = _mm256_set1_ps(7);
        __m256i i32[4];
        for (int i = 0; i < 4; i++) {
            const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[i], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            i32[i] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(r, qmin), qmax));
        }
        store_group_i8(i32, q);
        return d0;
    }
#endif
    float mx = 0, mn = 0;
    for (int64_t k = 0; k < n; k++) mx = fmaxf(mx, w[k]), mn = fminf(mn, w[k]);
    const float d0 = (-mn > mx ? mn : mx) / -8, id = d0 != 0 ? 1 / d0 : 0;
    for (int64_t k = 0; k < n; k++) q[k] = (int8_t)fminf(fmaxf(rintf(w[k] * id), -8), 7);
    return d0;
}

void quantize_weight(burst_dtype quant, void *data, float *scales, const burst_weight *W, int n_threads) {
    const int64_t cols = W->cols, groups = q_groups(cols), row_bytes = q4_row_bytes(cols);
    #pragma omp parallel num_threads(n_threads)
    {
        float *row = burst_malloc(sizeof(float) * (size_t)cols);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < W->rows; r++) {
            weight_to_f32(W, r * cols, cols, row);
            uint8_t *q4 = (uint8_t *)data + r * row_bytes;
            if (quant == DTYPE_Q4) memset(q4, 0x88, (size_t)row_bytes);
            for (int64_t c0 = 0; c0 < cols; c0 += Q_GROUP) {
                const int64_t n = cols - c0 < Q_GROUP ? cols - c0 : Q_GROUP;
                float *s = scales + r * groups + c0 / Q_GROUP;
                if (quant == DTYPE_Q8) {
                    *s = quantize_group(row + c0, n, (int8_t *)data + r * cols + c0);
                    continue;
                }
                int8_t q[Q_GROUP];
                *s = quantize_q4_group(row + c0, n, q);
                for (int j = 0; j < n; j++) { // column j of the group: dword j % 16 / 4, byte j % 4
                    uint8_t *b = q4 + q4_dword(c0 / Q_GROUP, j % 16 / 4) + j % 4;
                    *b = j < 16 ? (uint8_t)((*b & 0xf0) | (q[j] + 8)) : (uint8_t)((*b & 0x0f) | (q[j] + 8) << 4);
                }
            }
        }
        free(row);
    }
}

// x as matmul_ints multiplies it, a span of 16 groups (Q4_SPAN columns) at a time for both
// weight dtypes: for each span, each token's int_x, one after another (span p of token t at
// (p x n + t)), so that a row's tokens are read front to back through one pointer.
typedef struct {
    int8_t q[Q4_SPAN]; // the span's columns as multiples of their group's scale (quantize_group), as
                       // the weights lay them out: Q8's column j at q[j]; Q4's column 4k + b of
                       // group l at q[64k + 4l + b], where a span's 64-byte load of weights has it;
                       // zero past the row's end
    int32_t neg[16];   // Q4: -8 x the sum of group l's int8: its dot product's part from the
                       // weights' stored integers being q + 8
    float scale[16];   // group l's scale
} int_x;

static void quantize_x(int_x *xs, int64_t stride, const void *x, burst_dtype x_dtype, int64_t cols, burst_dtype w_dtype) {
    for (int64_t p = 0; p * Q4_SPAN < cols; p++) {
        int_x *t = xs + p * stride;
        memset(t, 0, sizeof *t);
        for (int l = 0; l < 16 && p * Q4_SPAN + l * Q_GROUP < cols; l++) {
            const int64_t c0 = p * Q4_SPAN + l * Q_GROUP, n = cols - c0 < Q_GROUP ? cols - c0 : Q_GROUP;
            float g[Q_GROUP];
            for (int64_t j = 0; j < n; j++) g[j] = act_get(x, x_dtype, c0 + j);
            if (w_dtype == DTYPE_Q8) {
                t->scale[l] = quantize_group(g, n, t->q + Q_GROUP * l);
                continue;
            }
            int8_t q[Q_GROUP] = {0};
            t->scale[l] = quantize_group(g, n, q);
            for (int j = 0; j < Q_GROUP; j++) t->q[64 * (j / 4) + 4 * l + j % 4] = q[j], t->neg[l] -= 8 * q[j];
        }
    }
}

enum { INT_TOKENS = 8 }; // tokens a row's pass takes: their sums stay in registers

// A token's sums with a row, a lane each, from its first span to its last (matmul_ints adds the
// lanes up once, at the end): the kernels start them at 0 on a row's first piece of spans (first),
// and load and store them around each later one, so that a token's sums go in the same order
// however the tokens and spans are cut.
#ifdef BURST_AVX512
typedef __m512 int_acc;
static float int_acc_sum(int_acc a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__)
typedef __m256 int_acc;
static float int_acc_sum(int_acc a) { return sum8(a); }
#else
typedef struct {
    float l[16];
} int_acc;
static float int_acc_sum(int_acc a) {
    float sum = 0;
    for (int l = 0; l < 16; l++) sum += a.l[l];
    return sum;
}
#endif

#ifdef BURST_AVX512
// acc + each 4 products of 64 unsigned bytes u by 64 signed ones v, in 32-bit lanes: AVX512-VNNI's
// one instruction, or AVX512-BW's two (16-bit sums of pairs, which 15 x 127 x 2 cannot overflow).
static inline __m512i dot_u8s8(__m512i acc, __m512i u, __m512i v) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, u, v);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(u, v), _mm512_set1_epi16(1)));
#endif
}
#endif

// The row kernels: acc[t] (from 0 where first) += the dot product of `groups` columns of a row (its
// bytes w, its scales s) with token t's x (x[t], and then every n tokens the next span's), for t <
// nt (a constant once inlined): each span's weights read once for all nt tokens, a token's group
// products summed in integers, then times both scales and added to its float32 lanes. Each asks
// for the weights and scales `rows_ahead` rows on (row_bytes and row_groups apart), which the next
// calls read: a row of scales is its own stream, and waiting on it took a third of the time at 8
// tokens.
enum { rows_ahead = 2 };

// Q4: a group's products summed in one 32-bit lane (two chains of four dot-product instructions).
static inline __attribute__((always_inline)) void q4_row(const uint8_t *w, const float *s, int64_t groups,
                                                         const int_x *x, int n, const int nt, int64_t row_bytes,
                                                         int64_t row_groups, int_acc *acc, int first) {
#ifdef BURST_AVX512
    __m512 a[INT_TOKENS];
    for (int t = 0; t < nt; t++) a[t] = first ? _mm512_setzero_ps() : acc[t];
    for (int64_t g = 0; g < groups; g += 16, w += Q4_SPAN / 2, x += n) {
        for (int j = 0; j < 4; j++) __builtin_prefetch(w + rows_ahead * row_bytes + 64 * j, 0, 2);
        __builtin_prefetch(s + g + rows_ahead * row_groups, 0, 2);
        const __m512i low = _mm512_set1_epi8(15);
        __m512i wv[8];
        for (int j = 0; j < 4; j++) {
            const __m512i b = _mm512_loadu_si512(w + 64 * j);
            wv[j] = _mm512_and_si512(b, low), wv[4 + j] = _mm512_and_si512(_mm512_srli_epi16(b, 4), low);
        }
        const __m512 sw = _mm512_maskz_loadu_ps(mask_first16(groups - g), s + g);
        for (int t = 0; t < nt; t++) {
            __m512i d0 = _mm512_loadu_si512(x[t].neg), d1 = _mm512_setzero_si512();
            for (int k = 0; k < 4; k++) {
                d0 = dot_u8s8(d0, wv[k], _mm512_loadu_si512(x[t].q + 64 * k));
                d1 = dot_u8s8(d1, wv[4 + k], _mm512_loadu_si512(x[t].q + 64 * (4 + k)));
            }
            a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(d0, d1)), _mm512_mul_ps(sw, _mm512_loadu_ps(x[t].scale)), a[t]);
        }
    }
    for (int t = 0; t < nt; t++) acc[t] = a[t];
#elif defined(__AVX2__)
    // Half a span at a time: a 32-byte load holds a dword of 8 groups, a group to each 32-bit lane.
    // vpmaddubsw's 16-bit sums of two products add up over the 8 loads in 16 bits (8 x 2 x 15 x 127
    // < 2^15), then vpmaddwd adds a lane's pairs: 10 instructions for a group's 32 products.
    __m256 a[INT_TOKENS];
    for (int t = 0; t < nt; t++) a[t] = first ? _mm256_setzero_ps() : acc[t];
    const __m256i low = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1), lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t g = 0; g < groups; g += 16, w += Q4_SPAN / 2, x += n) {
        for (int j = 0; j < 4; j++) __builtin_prefetch(w + rows_ahead * row_bytes + 64 * j, 0, 2);
        __builtin_prefetch(s + g + rows_ahead * row_groups, 0, 2);
        for (int h = 0; h < 2 && g + 8 * h < groups; h++) {
            __m256i wv[8];
            for (int j = 0; j < 4; j++) {
                const __m256i b = _mm256_loadu_si256((const __m256i *)(w + 64 * j + 32 * h));
                wv[j] = _mm256_and_si256(b, low), wv[4 + j] = _mm256_and_si256(_mm256_srli_epi16(b, 4), low);
            }
            const __m256 sw = _mm256_maskload_ps(s + g + 8 * h, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(groups - g - 8 * h)), lane));
            for (int t = 0; t < nt; t++) {
                __m256i d = _mm256_maddubs_epi16(wv[0], _mm256_loadu_si256((const __m256i *)(x[t].q + 32 * h)));
                for (int k = 1; k < 8; k++)
                    d = _mm256_add_epi16(d, _mm256_maddubs_epi16(wv[k], _mm256_loadu_si256((const __m256i *)(x[t].q + 64 * k + 32 * h))));
                const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(d, ones), _mm256_loadu_si256((const __m256i *)(x[t].neg + 8 * h)));
                a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sw, _mm256_loadu_ps(x[t].scale + 8 * h)), a[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) acc[t] = a[t];
#else
    (void)row_bytes, (void)row_groups;
    for (int t = 0; first && t < nt; t++) acc[t] = (int_acc){{0}};
    for (int64_t g = 0; g < groups; g += 16, w += Q4_SPAN / 2, x += n)
        for (int t = 0; t < nt; t++)
            for (int l = 0; l < 16 && g + l < groups; l++) {
                int32_t dot = x[t].neg[l];
                for (int k = 0; k < 8; k++)
                    for (int b = 0; b < 4; b++) {
                        const uint8_t byte = w[q4_dword(l, k % 4) + b];
                        dot += (k < 4 ? byte & 15 : byte >> 4) * x[t].q[64 * k + 4 * l + b];
                    }
                acc[t].l[l] += (float)dot * (s[g + l] * x[t].scale[l]);
            }
#endif
}

#if Q8_INTS
// Q8, a group a 32-byte load: vpmaddubsw multiplies |w| by x with w's sign (vpsignb; pair sums up
// to 2 x 127 x 127, within 16 bits), vpmaddwd adds pairs: 8 sums of 4 a group, times both scales.
// A row may end in a part group: its load reads on past the row (backend_cpu.c leaves a group's
// bytes after the last row), where x is 0.
static inline __attribute__((always_inline)) void q8_row(const int8_t *w, const float *s, int64_t groups,
                                                         const int_x *x, int n, const int nt, int64_t row_bytes,
                                                         int64_t row_groups, int_acc *acc, int first) {
    __m256 a[INT_TOKENS];
    for (int t = 0; t < nt; t++) a[t] = first ? _mm256_setzero_ps() : acc[t];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < groups; g += 16, w += Q4_SPAN, x += n) {
        for (int j = 0; j < 8; j++) __builtin_prefetch(w + rows_ahead * row_bytes + 64 * j, 0, 2);
        __builtin_prefetch(s + g + rows_ahead * row_groups, 0, 2);
        for (int l = 0; l < 16 && g + l < groups; l++) {
            const __m256i wv = _mm256_loadu_si256((const __m256i *)(w + Q_GROUP * l)), aw = _mm256_sign_epi8(wv, wv);
            const __m256 sw = _mm256_broadcast_ss(s + g + l);
            for (int t = 0; t < nt; t++) {
                const __m256i xv = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(x[t].q + Q_GROUP * l)), wv);
                const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, xv), ones);
                a[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(sw, _mm256_broadcast_ss(x[t].scale + l)), a[t]);
            }
        }
    }
    for (int t = 0; t < nt; t++) acc[t] = a[t];
}
#endif

// The row kernel of W's dtype.
static inline __attribute__((always_inline)) void int_row(burst_dtype dtype, const void *w, const float *s, int64_t groups,
                                                          const int_x *x, int n, const int nt, int64_t row_bytes,
                                                          int64_t row_groups, int_acc *acc, int first) {
#if Q8_INTS
    if (dtype == DTYPE_Q8) {
        q8_row(w, s, groups, x, n, nt, row_bytes, row_groups, acc, first);
        return;
    }
#endif
    (void)dtype;
    q4_row(w, s, groups, x, n, nt, row_bytes, row_groups, acc, first);
}

// INT_ROWS rows at a time go through x a piece of about INT_X_BYTES at a time (as many spans as that
// holds of INT_BLOCK tokens, or of all n if fewer; at least one span), a block of INT_BLOCK tokens
// after another, so that each block's piece, and its tokens' lanes for the rows (int_acc), stay
// in L1 while the rows read them (and the rows' piece of weights for the next block). Without the
// blocks a span of 96 or more tokens outgrew L1: Q4 at 128 to 512 tokens ran at 300-350 GFLOP/s
// against 355-400 with blocks of 32 (16 and 64: as fast; an x86-64-v3 build, before the lanes
// were kept), and on AVX-512 at 96 to 128 at half the speed of 64 (bench_matmul_cpu --quantize q4,
// LLaMA-7B's shapes, 2 threads). 16, since the lanes are kept: 16 rows' lanes of 32 tokens are 32
// KB on AVX-512, beside 20 KB of x.
enum { INT_ROWS = 16, INT_X_BYTES = 24 << 10, INT_BLOCK = 16 };

static size_t x_bytes(int n, int64_t cols) { return sizeof(int_x) * (size_t)(n * ((cols + Q4_SPAN - 1) / Q4_SPAN)); }
static size_t accs_bytes(int n) { return sizeof(int_acc) * INT_ROWS * (size_t)n; } // a thread's

size_t matmul_ints_transient_bytes(int n, int64_t cols, int n_threads) {
    return x_bytes(n, cols) + (size_t)n_threads * accs_bytes(n);
}

void matmul_ints(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                 const burst_weight *W, int n, int n_threads) {
    if (n < 1) return; // (nothing to write; and the piece below divides by n)
    const int64_t rows = W->rows, cols = W->cols, groups = q_groups(cols), spans = (groups + 15) / 16;
    const int q4 = W->dtype == DTYPE_Q4;
    const int64_t row_bytes = q4 ? q4_row_bytes(cols) : cols, span_bytes = q4 ? Q4_SPAN / 2 : Q4_SPAN;
    const int block = n < INT_BLOCK ? n : INT_BLOCK;
    const int64_t fit = INT_X_BYTES / (int64_t)(block * sizeof(int_x)), piece = fit > 1 ? fit : 1; // spans
    int_x *xs = burst_malloc_aligned(x_bytes(n, cols));
    const size_t esize = x_dtype == DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int t = 0; t < n; t++) quantize_x(xs + t, n, (const char *)x + (size_t)t * (size_t)cols * esize, x_dtype, cols, W->dtype);
        int_acc *accs = burst_malloc_aligned(accs_bytes(n)); // accs[r * n + t]
        #pragma omp for schedule(static)
        for (int64_t r0 = 0; r0 < rows; r0 += INT_ROWS) {
            const int nr = rows - r0 < INT_ROWS ? (int)(rows - r0) : INT_ROWS;
            for (int64_t p = 0; p < spans; p += piece)
                for (int b0 = 0; b0 < n; b0 += block)
                    for (int r = 0; r < nr; r++) {
                        const uint8_t *w = (const uint8_t *)W->data + (r0 + r) * row_bytes + p * span_bytes;
                        const float *s = W->scales + (r0 + r) * groups + 16 * p;
                        const int64_t g = groups - 16 * p < 16 * piece ? groups - 16 * p : 16 * piece;
                        for (int t0 = b0; t0 < n && t0 < b0 + block; t0 += INT_TOKENS) {
                            const int nt = n - t0 < INT_TOKENS ? n - t0 : INT_TOKENS;
                            int_acc *acc = accs + r * n + t0;
                            switch (nt) {
#define TOKENS(k) \
    case k: int_row(W->dtype, w, s, g, xs + p * n + t0, n, k, row_bytes, groups, acc, p == 0); break;
                            TOKENS(1) TOKENS(2) TOKENS(3) TOKENS(4) TOKENS(5) TOKENS(6) TOKENS(7) TOKENS(8)
#undef TOKENS
                            }
                        }
                    }
            for (int t = 0; t < n; t++)
                for (int r = 0; r < nr; r++) {
                    const int64_t o = (int64_t)t * rows + r0 + r;
                    const float sum = int_acc_sum(accs[r * n + t]);
                    if (accumulate) ((float *)out)[o] += sum;
                    else act_set(out, out_dtype, o, sum);
                }
        }
        free(accs);
    }
    free(xs);
}
