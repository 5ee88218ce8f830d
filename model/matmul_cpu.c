// The CPU backend's matmul: out (n, rows) = x (n, cols) @ W^T, W in its stored dtype (F32, F16 or
// BF16, read from the mmap in place; never widened whole).
//
// A few tokens (decode steps, n < MM_FEW_TOKENS): each weight row is read once for all of them;
// 16-bit weights are widened in registers once for every 4 tokens (dot_w16), f32 ones go through
// dot_rows' 4x4 blocks.
//
// More tokens (prefill): a register-blocked GEMM in the manner of GotoBLAS. It computes
// out^T = W x^T: a tile of GEMM_MR weight rows x NR tokens (two vector registers a row) stays in
// registers while KC columns go by, each column one broadcast weight per row times two vectors of
// x^T (one where a panel's last tokens fit in one). The weights are widened to f32 a block of NB
// rows x KC columns at a time (in L2, then read by every panel of tokens), x is transposed once
// per call into panels of NR tokens (a panel's KC columns stay in L1), and the sums of MC tokens
// gather in a per-thread buffer before they are stored as out_dtype. Broadcasting weights, not
// tokens, keeps the widening a contiguous loop and leaves the transpose to x, which is read once
// where the weights are widened n / MC times (bench/bench_matmul_cpu.c).
//
// Where the CPU has AMX, matmul_amx.c takes BF16 weights from 8 tokens on and F16 ones from 128.
#include "matmul_cpu.h"

#include "matmul_amx.h"

#include <omp.h>
#include <stdlib.h>

#include "attention/dot_cpu.h"
#include "common/burst.h"

// The few-token path: weight rows per tile, and the token count from which the GEMM takes over.
enum { MM_ROWS = 16, MM_FEW_TOKENS = 16 };

// The GEMM's register tile: GEMM_VL floats a vector; GEMM_MR rows x 2 vectors of sums, plus the
// two x^T vectors and a broadcast, fill the 32 (AVX-512) or 16 (AVX2, NEON's 4-wide) registers.
#if defined(__AVX512F__)
#define GEMM_VL 16
#define GEMM_MR 14
#elif defined(__AVX__)
#define GEMM_VL 8
#define GEMM_MR 6
#else
#define GEMM_VL 4
#define GEMM_MR 6
#endif
enum { NR = 2 * GEMM_VL, KC = 256, NB = GEMM_MR * 8, MC = NR * 8 };
typedef float vec __attribute__((vector_size(GEMM_VL * sizeof(float))));

// One bf16 (bf16 = 1) or f16 weight as float32, for dot_w16 where it goes element by element.
static inline float w16_to_f32(uint16_t h, int bf16) { return bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__) // x86-64-v3, and -march=native on any recent x86
#define HAVE_W16X8 1
#include <immintrin.h>
// 8 weights from w, bf16 or f16, as floats. GCC does not vectorize f16_to_f32 into F16C's one
// instruction, and f16_to_f32's bit operations cost more than the multiply-adds they feed.
static inline __m256 w16x8(const uint16_t *w, int bf16) {
    __m128i h = _mm_loadu_si128((const __m128i *)w);
    return bf16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)) : _mm256_cvtph_ps(h);
}

static inline float sum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// dot_w16 for nt tokens, a constant once inlined, so that the 2 nt sums stay in registers (two a
// token, so that its multiply-adds do not wait on each other).
static inline __attribute__((always_inline)) void dot_w16_nt(const uint16_t *w, int bf16, const float *x,
                                                             int64_t x_stride, int64_t n, const int nt, float *out,
                                                             int64_t out_stride) {
    __m256 s[4][2];
    for (int t = 0; t < nt; t++) s[t][0] = s[t][1] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        __m256 w0 = w16x8(w + k, bf16), w1 = w16x8(w + k + 8, bf16);
        for (int t = 0; t < nt; t++) {
            s[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + t * x_stride + k), s[t][0]);
            s[t][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + t * x_stride + k + 8), s[t][1]);
        }
    }
    for (int t = 0; t < nt; t++) {
        float r = sum8(_mm256_add_ps(s[t][0], s[t][1]));
        for (int64_t j = k; j < n; j++) r += w16_to_f32(w[j], bf16) * x[t * x_stride + j];
        out[t * out_stride] = r;
    }
}
#endif

void weight_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst) {
    const uint16_t *h = (const uint16_t *)w->data + first;
    int64_t i = 0;
    switch (w->dtype) {
    case DTYPE_F32: memcpy(dst, (const float *)w->data + first, (size_t)n * 4); break;
    case DTYPE_BF16:
        for (; i < n; i++) dst[i] = bf16_to_f32(h[i]);
        break;
    case DTYPE_F16:
#ifdef HAVE_W16X8
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, w16x8(h + i, 0));
#endif
        for (; i < n; i++) dst[i] = f16_to_f32(h[i]);
        break;
    }
}

// out[t * out_stride] = the dot product of a 16-bit weight row w (n) with token t's row of x, for
// t < nt <= 4: each weight is converted once, in registers, for all nt tokens.
static void dot_w16(const uint16_t *w, int bf16, const float *x, int64_t x_stride, int nt, int64_t n, float *out,
                    int64_t out_stride) {
#ifdef HAVE_W16X8
    switch (nt) {
    case 1: dot_w16_nt(w, bf16, x, x_stride, n, 1, out, out_stride); break;
    case 2: dot_w16_nt(w, bf16, x, x_stride, n, 2, out, out_stride); break;
    case 3: dot_w16_nt(w, bf16, x, x_stride, n, 3, out, out_stride); break;
    default: dot_w16_nt(w, bf16, x, x_stride, n, 4, out, out_stride); break;
    }
#else
    for (int t = 0; t < nt; t++) {
        float s[16] = {0}, r = 0;
        for (int64_t k = 0; k < n; k++) s[k % 16] += w16_to_f32(w[k], bf16) * x[t * x_stride + k];
        for (int l = 0; l < 16; l++) r += s[l];
        out[t * out_stride] = r;
    }
#endif
}

// Stores sums[i * tok_stride + r * row_stride] (i < nt tokens from token i0, r < nr rows from row
// r0) into out (n, rows) as out_dtype, or adds them to it.
static void store_sums(void *out, burst_dtype out_dtype, int accumulate, int64_t rows, int64_t i0, int64_t nt,
                       int64_t r0, int64_t nr, const float *sums, int64_t tok_stride, int64_t row_stride) {
    for (int64_t i = 0; i < nt; i++)
        for (int64_t r = 0; r < nr; r++) {
            int64_t o = (i0 + i) * rows + r0 + r;
            float v = sums[i * tok_stride + r * row_stride];
            if (accumulate) ((float *)out)[o] += v;
            else act_set(out, out_dtype, o, v);
        }
}

// The few-token path; x is F32.
static void matmul_few(void *out, burst_dtype out_dtype, int accumulate, const float *x, const burst_weight *W,
                       int n, int n_threads) {
    const int64_t rows = W->rows, cols = W->cols, n_tiles = (rows + MM_ROWS - 1) / MM_ROWS;
    #pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int64_t t = 0; t < n_tiles; t++) {
        int64_t r0 = t * MM_ROWS, nr = rows - r0 < MM_ROWS ? rows - r0 : MM_ROWS;
        float acc[MM_FEW_TOKENS * MM_ROWS]; // (tokens, tile rows)
        if (W->dtype == DTYPE_F32) dot_rows((const float *)W->data + r0 * cols, cols, nr, x, cols, n, cols, acc, 1, MM_ROWS);
        else
            for (int64_t r = 0; r < nr; r++)
                for (int i = 0; i < n; i += 4)
                    dot_w16((const uint16_t *)W->data + (r0 + r) * cols, W->dtype == DTYPE_BF16, x + i * cols, cols,
                            n - i < 4 ? n - i : 4, cols, acc + i * MM_ROWS + r, MM_ROWS);
        store_sums(out, out_dtype, accumulate, rows, 0, n, r0, nr, acc, MM_ROWS, 1);
    }
}

// c[i * MC + 0..nv x GEMM_VL) += the sum over k < kn of w[i * KC + k] * xt[k * NR + 0..nv x GEMM_VL),
// for i < mr: one register tile of the GEMM, of nv = 2 vectors of tokens, or 1 for a panel's last
// tokens. mr and nv are constants once inlined, so that the sums stay in registers.
static inline __attribute__((always_inline)) void gemm_tile(const float *w, const float *xt, int kn, const int mr,
                                                            const int nv, float *c) {
    vec acc[GEMM_MR][2];
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) acc[i][v] = *(const vec *)(c + i * MC + v * GEMM_VL);
    for (int k = 0; k < kn; k++) {
        vec x[2];
        for (int v = 0; v < nv; v++) x[v] = *(const vec *)(xt + k * NR + v * GEMM_VL);
        for (int i = 0; i < mr; i++) {
            float wi = w[i * KC + k];
            for (int v = 0; v < nv; v++) acc[i][v] += wi * x[v];
        }
    }
    for (int i = 0; i < mr; i++)
        for (int v = 0; v < nv; v++) *(vec *)(c + i * MC + v * GEMM_VL) = acc[i][v];
}

static void gemm_tile_rows(const float *w, const float *xt, int kn, int mr, int nv, float *c) {
    switch (mr) {
#define TILE(m) \
    case m: \
        if (nv == 2) gemm_tile(w, xt, kn, m, 2, c); \
        else gemm_tile(w, xt, kn, m, 1, c); \
        break;
    TILE(1) TILE(2) TILE(3) TILE(4) TILE(5) TILE(6)
#if GEMM_MR > 6
    TILE(7) TILE(8) TILE(9) TILE(10) TILE(11) TILE(12) TILE(13) TILE(14)
#endif
#undef TILE
    }
}

// What the GEMM allocates: x^T, [panel][column][token] (tokens past n are 0), and each thread's
// widened weight block and sums, [row][token].
static size_t xt_bytes(int64_t n, int64_t cols) { return sizeof(float) * (size_t)((n + NR - 1) / NR * cols * NR); }
static const size_t wf_bytes = sizeof(float) * NB * KC, c_bytes = sizeof(float) * NB * MC;

static void matmul_gemm(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                        const burst_weight *W, int n, int n_threads) {
    const int64_t rows = W->rows, cols = W->cols, panels = (n + NR - 1) / NR, groups = (rows + NB - 1) / NB;
    float *xt = burst_malloc_aligned(xt_bytes(n, cols));
    #pragma omp parallel num_threads(n_threads)
    {
        #pragma omp for schedule(static)
        for (int64_t q = 0; q < panels; q++)
            for (int64_t k = 0; k < cols; k++)
                for (int64_t j = 0, t = q * NR; j < NR; j++, t++)
                    xt[(q * cols + k) * NR + j] = t < n ? act_get(x, x_dtype, t * cols + k) : 0;
        float *wf = burst_malloc_aligned(wf_bytes), *c = burst_malloc_aligned(c_bytes);
        #pragma omp for schedule(static)
        for (int64_t g = 0; g < groups; g++) {
            int64_t r0 = g * NB, nb = rows - r0 < NB ? rows - r0 : NB;
            for (int64_t i0 = 0; i0 < n; i0 += MC) {
                int64_t mc = n - i0 < MC ? n - i0 : MC;
                memset(c, 0, sizeof(float) * NB * MC);
                for (int64_t k0 = 0; k0 < cols; k0 += KC) {
                    int kn = (int)(cols - k0 < KC ? cols - k0 : KC);
                    for (int64_t r = 0; r < nb; r++) weight_to_f32(W, (r0 + r) * cols + k0, kn, wf + r * KC);
                    for (int64_t q = 0; q * NR < mc; q++)
                        for (int64_t s = 0; s < nb; s += GEMM_MR)
                            gemm_tile_rows(wf + s * KC, xt + ((i0 / NR + q) * cols + k0) * NR, kn,
                                           (int)(nb - s < GEMM_MR ? nb - s : GEMM_MR), mc - q * NR > GEMM_VL ? 2 : 1,
                                           c + s * MC + q * NR);
                }
                store_sums(out, out_dtype, accumulate, rows, i0, mc, r0, nb, c, 1, MC);
            }
        }
        free(wf), free(c);
    }
    free(xt);
}

size_t matmul_cpu_transient_bytes(int n, int64_t cols, int n_threads) {
    size_t vector = n < MM_FEW_TOKENS ? sizeof(float) * (size_t)(n * cols) // bf16 x widened
                                      : xt_bytes(n, cols) + (size_t)n_threads * (wf_bytes + c_bytes);
    size_t amx = matmul_amx_transient_bytes(n, cols, n_threads);
    return vector > amx ? vector : amx;
}

void matmul_cpu(void *out, burst_dtype out_dtype, int accumulate, const void *x, burst_dtype x_dtype,
                const burst_weight *W, int n, int n_threads) {
    if (matmul_amx(out, out_dtype, accumulate, x, x_dtype, W, n, n_threads)) return;
    if (n >= MM_FEW_TOKENS) {
        matmul_gemm(out, out_dtype, accumulate, x, x_dtype, W, n, n_threads);
        return;
    }
    float *xw = NULL; // bf16 inputs widened once (the CPU's own activations are F32)
    if (x_dtype != DTYPE_F32) {
        xw = burst_malloc((size_t)n * W->cols * sizeof(float));
        for (int64_t i = 0; i < n * W->cols; i++) xw[i] = act_get(x, x_dtype, i);
    }
    matmul_few(out, out_dtype, accumulate, xw ? xw : x, W, n, n_threads);
    free(xw);
}
