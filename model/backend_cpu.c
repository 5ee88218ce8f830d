// The CPU backend: float32 activations in host memory (bf16 ones are taken too, for tests of the
// CUDA backend's bf16 mode against this twin), weights read from the mmap in their
// stored dtype. The matmul converts a tile of weight rows to float32 into a per-thread buffer
// and reuses it for every token (or, for a few tokens, converts in registers), so bf16/f16
// weights are never converted whole.
// Threads: OpenMP, n_threads per call.
#define _GNU_SOURCE // malloc_usable_size
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention/dot_cpu.h"
#include "common/host_memory.h"
#include "backend_impl.h"

// Weight rows per tile; tokens per pass over a tile. Below MM_FUSED_BELOW tokens (decode steps),
// 16-bit weights are converted in registers once for every 4 tokens (dot_w16) instead of into a
// float32 tile written and read back; from there on the tile's conversion serves enough tokens,
// and dot_rows' 4x4 blocks share their loads (bench/bench_matmul_cpu.c).
enum { MM_ROWS = 16, MM_TOKENS = 64, MM_FUSED_BELOW = 16 };

typedef struct {
    int n_threads;
} cpu_ctx;

// dst[0..n) = elements [first, first + n) of a weight, as float32.
static void weight_to_f32(const burst_weight *w, int64_t first, int64_t n, float *dst) {
    switch (w->dtype) {
    case DTYPE_F32: memcpy(dst, (const float *)w->data + first, (size_t)n * 4); break;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(((const uint16_t *)w->data)[first + i]);
        break;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(((const uint16_t *)w->data)[first + i]);
        break;
    }
}

// One bf16 (bf16 = 1) or f16 weight as float32, for dot_w16 where it goes element by element.
static inline float w16_to_f32(uint16_t h, int bf16) { return bf16 ? bf16_to_f32(h) : f16_to_f32(h); }

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__) // x86-64-v3, and -march=native on any recent x86
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

// out[t * out_stride] = the dot product of a 16-bit weight row w (n) with token t's row of x, for
// t < nt <= 4: each weight is converted once, in registers, for all nt tokens.
static void dot_w16(const uint16_t *w, int bf16, const float *x, int64_t x_stride, int nt, int64_t n, float *out,
                    int64_t out_stride) {
#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
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

static int nthreads(burst_backend *b) { return ((cpu_ctx *)b->ctx)->n_threads; }

static void cpu_free(burst_backend *b) {
    free(b->ctx);
    free(b);
}

// Bytes of CPU backend buffers in this process. A large calloc maps zero pages on first touch,
// so the host's available memory counts them as free until requests fill them.
static atomic_size_t held;

static void *cpu_alloc(burst_backend *b, size_t bytes) {
    (void)b;
    void *p = burst_calloc(1, bytes);
    atomic_fetch_add(&held, malloc_usable_size(p));
    return p;
}

static size_t cpu_memory_free(burst_backend *b, int *pool) {
    (void)b;
    *pool = -1;
    size_t avail = host_memory_free(""), h = atomic_load(&held);
    return !avail ? 0 : avail > h ? avail - h : 1;
}

static void cpu_release(burst_backend *b, void *p) {
    (void)b;
    atomic_fetch_sub(&held, malloc_usable_size(p));
    free(p);
}

// Host and backend memory are the same here: every copy, either way, is one memmove.
static void cpu_copy(burst_backend *b, const copy_job *jobs, int n) {
    (void)b;
    for (int i = 0; i < n; i++) memmove(jobs[i].dst, jobs[i].src, jobs[i].bytes);
}

static void cpu_to_host(burst_backend *b, float *dst, const float *src, int64_t n) {
    (void)b;
    memmove(dst, src, (size_t)n * sizeof(float));
}

static void cpu_convert(burst_backend *b, void *dst, burst_dtype to, const float *src, int64_t n) {
    (void)b;
    if (to == DTYPE_F32) {
        memmove(dst, src, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = f32_to_bf16(src[i]);
}

static burst_status cpu_weight(burst_backend *b, const weights_tensor *t, burst_weight *out,
                               burst_error *err) {
    (void)b, (void)err;
    *out = (burst_weight){.dtype = t->dtype, .data = t->data,
                          .rows = t->ndim == 2 ? t->shape[0] : 1, .cols = t->shape[t->ndim - 1]};
    return BURST_OK;
}

static void cpu_embed(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n) {
    (void)b;
    for (int i = 0; i < n; i++)
        weight_to_f32(table, (int64_t)tokens[i] * table->cols, table->cols, x + (int64_t)i * table->cols);
}

// Element i of an activation buffer of dtype F32 or BF16, and its store.
static inline float act_get(const void *p, burst_dtype dt, int64_t i) {
    return dt == DTYPE_F32 ? ((const float *)p)[i] : bf16_to_f32(((const uint16_t *)p)[i]);
}
static inline void act_set(void *p, burst_dtype dt, int64_t i, float v) {
    if (dt == DTYPE_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = f32_to_bf16(v);
}

static void cpu_rmsnorm(burst_backend *b, void *out, burst_dtype out_dtype, const float *x,
                        const burst_weight *w, int n, float eps) {
    int64_t dim = w->cols;
    float *wf = burst_malloc((size_t)dim * sizeof(float));
    weight_to_f32(w, 0, dim, wf);
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * dim;
        double ss = 0;
        for (int64_t j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = (float)(1.0 / sqrt(ss / (double)dim + eps));
        if (out_dtype == DTYPE_F32) { // the loop the CPU runs: kept plain for the vectoriser
            float *oi = (float *)out + (int64_t)i * dim;
            for (int64_t j = 0; j < dim; j++) oi[j] = xi[j] * r * wf[j];
        } else {
            for (int64_t j = 0; j < dim; j++) act_set(out, out_dtype, (int64_t)i * dim + j, xi[j] * r * wf[j]);
        }
    }
    free(wf);
}

static void cpu_matmul(burst_backend *b, void *out, burst_dtype out_dtype, int accumulate, const void *x,
                       burst_dtype x_dtype, const burst_weight *W, int n) {
    const int64_t rows = W->rows, cols = W->cols, n_tiles = (rows + MM_ROWS - 1) / MM_ROWS;
    float *xw = NULL; // bf16 inputs widened once (the CPU's own activations are F32)
    if (x_dtype != DTYPE_F32) {
        xw = burst_malloc((size_t)n * cols * sizeof(float));
        for (int64_t i = 0; i < n * cols; i++) xw[i] = act_get(x, x_dtype, i);
    }
    const float *xf = xw ? xw : x;
    const int fused = W->dtype != DTYPE_F32 && n < MM_FUSED_BELOW;
    #pragma omp parallel num_threads(nthreads(b))
    {
        float *tile = W->dtype == DTYPE_F32 || fused ? NULL : burst_malloc((size_t)MM_ROWS * cols * sizeof(float));
        float acc[MM_TOKENS * MM_ROWS]; // (tokens, tile rows) of products, then stored as out_dtype
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tiles; t++) {
            int64_t r0 = t * MM_ROWS, nr = rows - r0 < MM_ROWS ? rows - r0 : MM_ROWS;
            const float *w = (const float *)W->data + r0 * cols;
            if (tile) weight_to_f32(W, r0 * cols, nr * cols, tile), w = tile;
            for (int64_t i0 = 0; i0 < n; i0 += MM_TOKENS) { // out (tokens, rows) = x · wᵀ for this tile
                int64_t nt = n - i0 < MM_TOKENS ? n - i0 : MM_TOKENS;
                if (fused) {
                    const uint16_t *w16 = (const uint16_t *)W->data + r0 * cols;
                    for (int64_t r = 0; r < nr; r++)
                        for (int64_t i = 0; i < nt; i += 4)
                            dot_w16(w16 + r * cols, W->dtype == DTYPE_BF16, xf + (i0 + i) * cols, cols,
                                    nt - i < 4 ? (int)(nt - i) : 4, cols, acc + i * MM_ROWS + r, MM_ROWS);
                } else dot_rows(w, cols, nr, xf + i0 * cols, cols, nt, cols, acc, 1, MM_ROWS);
                for (int64_t i = 0; i < nt; i++)
                    for (int64_t r = 0; r < nr; r++) {
                        int64_t o = (i0 + i) * rows + r0 + r;
                        float v = acc[i * MM_ROWS + r];
                        if (accumulate) ((float *)out)[o] += v;
                        else act_set(out, out_dtype, o, v);
                    }
            }
        }
        free(tile);
    }
    free(xw);
}

static void cpu_rope(burst_backend *b, float *x, const int64_t *pos, int n, int n_heads,
                     int head_dim, const rope_params *p) {
    const int half = head_dim / 2;
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < half; j++) {
            // Angles in double: at positions past ~10^4 a float32 angle loses the low bits.
            double a = (double)pos[i] * rope_inv_freq(p, j, head_dim);
            float c = (float)cos(a) * p->mscale, s = (float)sin(a) * p->mscale;
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((int64_t)i * n_heads + h) * head_dim;
                float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c - x2 * s;
                v[j + half] = x2 * c + x1 * s;
            }
        }
    }
}

static inline float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

static void cpu_swiglu(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n) {
    float *gf = gate;
    const float *uf = up;
    if (dtype == DTYPE_F32) { // the loop the CPU runs: kept plain for the vectoriser
        #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
        for (int64_t i = 0; i < n; i++) gf[i] = silu_mul(gf[i], uf[i]);
        return;
    }
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int64_t i = 0; i < n; i++) act_set(gate, dtype, i, silu_mul(act_get(gate, dtype, i), act_get(up, dtype, i)));
}

static void cpu_attention(burst_backend *b, const flash_args *a) {
    (void)b;
    flash_cpu(a, 1);
}

// A step's sequences in one OpenMP region: for many short decode calls the region's start and
// end cost about as much as the attention itself.
static void cpu_attention_batch(burst_backend *b, const flash_args *calls, int n) {
    (void)b;
    flash_cpu(calls, n);
}

static void cpu_merge(burst_backend *b, const online_softmax_args *calls, int n) {
    (void)b;
    online_softmax_merge(calls, n);
}

// The first of the largest, as model/sampler.c's greedy pick.
static void cpu_argmax(burst_backend *b, int *out, const float *x, int rows, int64_t cols) {
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static) if (rows > 1)
    for (int r = 0; r < rows; r++) {
        const float *row = x + (int64_t)r * cols;
        int64_t best = 0;
        for (int64_t j = 1; j < cols; j++)
            if (row[j] > row[best]) best = j;
        out[r] = (int)best;
    }
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .act_dtype = DTYPE_F32,
    .free = cpu_free,
    .alloc = cpu_alloc,
    .memory_free = cpu_memory_free,
    .release = cpu_release,
    .to_host = cpu_to_host,
    .copy = cpu_copy,
    .convert = cpu_convert,
    .weight = cpu_weight,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .attention = cpu_attention,
    .attention_batch = cpu_attention_batch,
    .merge = cpu_merge,
    .argmax = cpu_argmax,
};

burst_backend *backend_cpu_new(int n_threads) {
    burst_backend *b = burst_malloc(sizeof *b);
    cpu_ctx *c = burst_malloc(sizeof *c);
    c->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads();
    *b = (burst_backend){.ops = &cpu_ops, .ctx = c};
    return b;
}
