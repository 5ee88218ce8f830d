// The CPU backend: float32 activations in host memory (bf16 ones are taken too, for tests of the
// CUDA backend's bf16 mode against this twin), weights read from the mmap in their
// stored dtype. The matmul converts a tile of weight rows to float32 into a per-thread buffer
// and reuses it for every token, so bf16/f16 weights are never converted whole.
// Threads: OpenMP, n_threads per call.
#define _GNU_SOURCE // malloc_usable_size
#include <immintrin.h>
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

// Weight rows per tile; tokens per pass over a tile. Below MM_FUSED_BELOW tokens, where dot_rows'
// 4x4 blocks do not apply, 16-bit weights are converted in registers for each token's dot products
// (dot_bf16, dot_f16) instead of into a float32 tile that is written and read back.
enum { MM_ROWS = 16, MM_TOKENS = 64, MM_FUSED_BELOW = 4 };

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

// Dot products of a 16-bit weight row w (n) with x (n), converting in registers.
static inline float dot_bf16(const uint16_t *w, const float *x, int64_t n) {
    float s[16] = {0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int l = 0; l < 16; l++) s[l] += bf16_to_f32(w[k + l]) * x[k + l];
    for (int l = 0; k < n; k++, l++) s[l] += bf16_to_f32(w[k]) * x[k];
    float t = 0;
    for (int l = 0; l < 16; l++) t += s[l];
    return t;
}

// With F16C (x86-64-v3; -march=native on any x86 of the last decade) one instruction converts 8:
// GCC does not vectorize f16_to_f32 into it, and f16_to_f32's bit operations cost more than the
// multiply-add.
static inline float dot_f16(const uint16_t *w, const float *x, int64_t n) {
    float t = 0;
    int64_t k = 0;
#ifdef __F16C__
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; k + 16 <= n; k += 16) {
        s0 = _mm256_add_ps(s0, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + k))), _mm256_loadu_ps(x + k)));
        s1 = _mm256_add_ps(s1, _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + k + 8))), _mm256_loadu_ps(x + k + 8)));
    }
    float s[8];
    _mm256_storeu_ps(s, _mm256_add_ps(s0, s1));
    for (int l = 0; l < 8; l++) t += s[l];
#endif
    for (; k < n; k++) t += f16_to_f32(w[k]) * x[k];
    return t;
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
                    for (int64_t i = 0; i < nt; i++)
                        for (int64_t r = 0; r < nr; r++) {
                            const uint16_t *wr = w16 + r * cols;
                            const float *xi = xf + (i0 + i) * cols;
                            acc[i * MM_ROWS + r] = W->dtype == DTYPE_BF16 ? dot_bf16(wr, xi, cols) : dot_f16(wr, xi, cols);
                        }
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
