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

// The Q4 matmul's integer dot products: AVX512-VNNI's, which multiply 64 unsigned bytes (the 4-bit
// integers + 8) by 64 signed ones (x's int8) and add each 4 products to a 32-bit lane.
#if defined(BURST_AVX512) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define Q4_VNNI 1
#else
#define Q4_VNNI 0
#endif

// A whole group in AVX-512 registers: the scalar loop's calls to fmaxf and lrintf took 80% of a
// 7B checkpoint's load.
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
// bench/stories.txt where it was, 3.956.) AVX-512 for a whole group, as quantize_group.
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
                uint8_t *b = q4 + c0 / 64 * 32;
                const int high = c0 % 64 != 0;
                for (int64_t j = 0; j < n; j++)
                    b[j] = high ? (uint8_t)((b[j] & 0x0f) | (q[j] + 8) << 4) : (uint8_t)((b[j] & 0xf0) | (q[j] + 8));
            }
        }
        free(row);
    }
}

// x as matmul_q4_few multiplies it: for each block of 64 columns, each token's q4_x, one after
// another (block b of token t at (b x n + t)), so that a row's tokens are read front to back
// through one pointer.
typedef struct {
    int32_t neg[16]; // -8 x each 4 of its int8 summed: a lane's of the dot product (a weight's
                     // integer is its stored 4 bits - 8)
    float scale[16]; // each lane's group's scale: lanes 0-7 the block's first group's, 8-15 its second's
    int8_t q[64];    // a group's multiples of the group's scale (quantize_group), zero past the row's end
} q4_x;

static void q4_quantize_x(q4_x *xb, int64_t stride, const void *x, burst_dtype x_dtype, int64_t cols) {
    const int64_t blocks = (cols + 63) / 64;
    for (int64_t b = 0; b < blocks; b++) {
        q4_x *t = xb + b * stride;
        memset(t, 0, sizeof *t);
        for (int h = 0; h < 2 && b * 64 + h * Q_GROUP < cols; h++) {
            const int64_t c0 = b * 64 + h * Q_GROUP, n = cols - c0 < Q_GROUP ? cols - c0 : Q_GROUP;
            float g[Q_GROUP];
            for (int64_t j = 0; j < n; j++) g[j] = act_get(x, x_dtype, c0 + j);
            const float scale = quantize_group(g, n, t->q + h * Q_GROUP);
            for (int l = 0; l < 8; l++) t->scale[h * 8 + l] = scale;
        }
        for (int l = 0; l < 16; l++) t->neg[l] = -8 * (t->q[4 * l] + t->q[4 * l + 1] + t->q[4 * l + 2] + t->q[4 * l + 3]);
    }
}

#if Q4_VNNI
// Block b's weights' scales in a block's dot-product lanes: lanes 0-7 the first group's, 8-15 the
// second's (none in a row's last block when its columns end within the first group).
static inline __m512 q4_scale_lanes(const float *s, int64_t b, int64_t groups) {
    const __m512i pick = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m128 pair = 2 * b + 1 < groups ? _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(s + 2 * b))) : _mm_load_ss(s + 2 * b);
    return _mm512_permutexvar_ps(pick, _mm512_castps128_ps512(pair));
}

// Block b of a Q4 row as 64 unsigned bytes, its stored 4-bit integers in column order.
static inline __m512i q4_block_bytes(const uint8_t *w, int64_t b) {
    const __m256i packed = _mm256_loadu_si256((const __m256i *)(w + 32 * b)), low = _mm256_set1_epi8(15);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(packed, low)),
                              _mm256_and_si256(_mm256_srli_epi16(packed, 4), low), 1);
}

// Block b of a Q4 row (its bytes w, its scales s, groups of them) times nt tokens' x (x[t]), added
// to acc[t]: each lane's integer sum times its weights' and x's scales.
static inline __attribute__((always_inline)) void q4_block(const uint8_t *w, const float *s, int64_t groups,
                                                           int64_t b, const q4_x *x, const int nt, __m512 *acc) {
    const __m512i wv = q4_block_bytes(w, b);
    const __m512 sw = q4_scale_lanes(s, b, groups);
    for (int t = 0; t < nt; t++) {
        const __m512i dot = _mm512_dpbusd_epi32(_mm512_loadu_si512(x[t].neg), wv, _mm512_loadu_si512(x[t].q));
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(sw, _mm512_loadu_ps(x[t].scale)), acc[t]);
    }
}
#endif

// sums[t] = the dot product of a Q4 row (its bytes w, its scales s, groups of them) with token t's x
// (x[t], and then every n tokens the next block's), for t < nt (a constant once inlined): each
// block's 64 weights read once for all nt tokens, each lane's integer sum times its weights' and
// x's scales added to the token's float32 sums, in two chains (even and odd blocks), which do not
// wait on each other.
static inline __attribute__((always_inline)) void q4_row(const uint8_t *w, const float *s, int64_t groups,
                                                         const q4_x *x, int n, const int nt, float *sums) {
    const int64_t blocks = (groups + 1) / 2;
#if Q4_VNNI
    __m512 even[8], odd[8];
    for (int t = 0; t < nt; t++) even[t] = odd[t] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= blocks; b += 2, x += 2 * n) {
        __builtin_prefetch(w + 32 * b + 2 * 32 * blocks, 0, 2); // the row after next: the thread's rows are a run
        q4_block(w, s, groups, b, x, nt, even);
        q4_block(w, s, groups, b + 1, x + n, nt, odd);
    }
    if (b < blocks) q4_block(w, s, groups, b, x, nt, even);
    for (int t = 0; t < nt; t++) sums[t] = _mm512_reduce_add_ps(_mm512_add_ps(even[t], odd[t]));
#else
    float acc[8][16] = {{0}};
    for (int64_t b = 0; b < blocks; b++, x += n)
        for (int t = 0; t < nt; t++)
            for (int l = 0; l < 16; l++) {
                const int64_t g = 2 * b + l / 8;
                int32_t dot = x[t].neg[l];
                for (int k = 0; k < 4; k++) {
                    const int c = 4 * l + k; // column in the block
                    const uint8_t byte = w[32 * b + c % 32];
                    dot += (c < 32 ? byte & 15 : byte >> 4) * x[t].q[c];
                }
                acc[t][l] += (float)dot * ((g < groups ? s[g] : 0) * x[t].scale[l]);
            }
    for (int t = 0; t < nt; t++) {
        float sum = 0;
        for (int l = 0; l < 16; l++) sum += acc[t][l];
        sums[t] = sum;
    }
#endif
}

enum { Q4_TOKENS = 8 }; // tokens a row's pass takes: their sums stay in registers

size_t matmul_q4_few_bytes(int n, int64_t cols) { return sizeof(q4_x) * (size_t)(n * ((cols + 63) / 64)); }

void matmul_q4_few(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                   const burst_weight *W, int n, int n_threads) {
    const int64_t rows = W->rows, cols = W->cols, groups = q_groups(cols);
    q4_x *xb = burst_malloc_aligned(matmul_q4_few_bytes(n, cols));
    const size_t esize = x_dtype == DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int t = 0; t < n; t++) q4_quantize_x(xb + t, n, (const char *)x + (size_t)t * (size_t)cols * esize, x_dtype, cols);
        #pragma omp for schedule(static)
        for (int64_t r = 0; r < rows; r++) {
            const uint8_t *w = (const uint8_t *)W->data + r * q4_row_bytes(cols);
            const float *s = W->scales + r * groups;
            for (int t0 = 0; t0 < n; t0 += Q4_TOKENS) {
                const int nt = n - t0 < Q4_TOKENS ? n - t0 : Q4_TOKENS;
                float sums[Q4_TOKENS];
                switch (nt) {
#define TOKENS(k) \
    case k: q4_row(w, s, groups, xb + t0, n, k, sums); break;
                TOKENS(1) TOKENS(2) TOKENS(3) TOKENS(4) TOKENS(5) TOKENS(6) TOKENS(7) TOKENS(8)
#undef TOKENS
                }
                for (int t = 0; t < nt; t++) {
                    const int64_t o = (int64_t)(t0 + t) * rows + r;
                    if (accumulate) ((float *)out)[o] += sums[t];
                    else act_set(out, out_dtype, o, sums[t]);
                }
            }
        }
    }
    free(xb);
}
