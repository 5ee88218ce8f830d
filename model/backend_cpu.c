// The CPU backend: float32 activations in host memory, weights read from the mmap in their
// stored dtype. The matmul converts a tile of weight rows to float32 into a per-thread buffer
// and reuses it for every token, so bf16/f16 weights are never converted whole.
// Threads: OpenMP, n_threads per call.
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"

enum { MM_ROWS = 16, MM_TOKENS = 64 }; // weight rows per tile; tokens per pass over a tile

typedef struct {
    int n_threads;
} cpu_ctx;

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) u = sign | 0x7f800000u | (man << 13); // inf / nan
    else if (exp != 0) u = sign | ((exp + 112) << 23) | (man << 13);
    else if (man == 0) u = sign;
    else { // subnormal: normalise
        exp = 113;
        while (!(man & 0x400)) { man <<= 1; exp--; }
        u = sign | (exp << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

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

static int nthreads(burst_backend *b) { return ((cpu_ctx *)b->ctx)->n_threads; }

static void cpu_free(burst_backend *b) {
    free(b->ctx);
    free(b);
}

static void *cpu_alloc(burst_backend *b, size_t bytes) {
    (void)b;
    return burst_calloc(1, bytes);
}

static void cpu_release(burst_backend *b, void *p) {
    (void)b;
    free(p);
}

// Host and backend memory are the same here: both directions are one memmove.
static void cpu_copy(burst_backend *b, float *dst, const float *src, int64_t n) {
    (void)b;
    memmove(dst, src, (size_t)n * sizeof(float));
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

static void cpu_rmsnorm(burst_backend *b, float *out, const float *x, const burst_weight *w, int n,
                        float eps) {
    int64_t dim = w->cols;
    float *wf = burst_malloc((size_t)dim * sizeof(float));
    weight_to_f32(w, 0, dim, wf);
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * dim;
        float *oi = out + (int64_t)i * dim;
        double ss = 0;
        for (int64_t j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = (float)(1.0 / sqrt(ss / (double)dim + eps));
        for (int64_t j = 0; j < dim; j++) oi[j] = xi[j] * r * wf[j];
    }
    free(wf);
}

static inline float dot(const float *a, const float *b, int64_t n) {
    float s = 0;
    #pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

// out[t * out_stride + r] = dot(x row t, w row r) for 4 weight rows and 4 tokens at once: each
// loaded element of w serves 4 tokens and each of x 4 rows, with the 16 sums in registers (about
// twice dot()'s speed: bench/bench_matmul_cpu.c).
static void dot_4x4(const float *w, const float *x, int64_t cols, float *out, int64_t out_stride) {
    const float *w0 = w, *w1 = w + cols, *w2 = w + 2 * cols, *w3 = w + 3 * cols;
    const float *x0 = x, *x1 = x + cols, *x2 = x + 2 * cols, *x3 = x + 3 * cols;
    float s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
    float s20 = 0, s21 = 0, s22 = 0, s23 = 0, s30 = 0, s31 = 0, s32 = 0, s33 = 0;
    #pragma omp simd reduction(+ : s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33)
    for (int64_t k = 0; k < cols; k++) {
        float a0 = w0[k], a1 = w1[k], a2 = w2[k], a3 = w3[k];
        s00 += a0 * x0[k], s01 += a0 * x1[k], s02 += a0 * x2[k], s03 += a0 * x3[k];
        s10 += a1 * x0[k], s11 += a1 * x1[k], s12 += a1 * x2[k], s13 += a1 * x3[k];
        s20 += a2 * x0[k], s21 += a2 * x1[k], s22 += a2 * x2[k], s23 += a2 * x3[k];
        s30 += a3 * x0[k], s31 += a3 * x1[k], s32 += a3 * x2[k], s33 += a3 * x3[k];
    }
    float *o0 = out, *o1 = out + out_stride, *o2 = out + 2 * out_stride, *o3 = out + 3 * out_stride;
    o0[0] = s00, o0[1] = s10, o0[2] = s20, o0[3] = s30;
    o1[0] = s01, o1[1] = s11, o1[2] = s21, o1[3] = s31;
    o2[0] = s02, o2[1] = s12, o2[2] = s22, o2[3] = s32;
    o3[0] = s03, o3[1] = s13, o3[2] = s23, o3[3] = s33;
}

// One tile of nr weight rows (starting at row r0 of rows) against tokens [i0, i1): 4x4 blocks,
// then single dot products for the rows and tokens left over.
static void matmul_tile(float *out, const float *x, const float *w, int64_t r0, int64_t nr, int64_t rows,
                        int64_t cols, int i0, int i1) {
    int64_t r4 = nr / 4 * 4;
    int i4 = i0 + (i1 - i0) / 4 * 4;
    for (int64_t r = 0; r < r4; r += 4)
        for (int i = i0; i < i4; i += 4)
            dot_4x4(w + r * cols, x + (int64_t)i * cols, cols, out + (int64_t)i * rows + r0 + r, rows);
    for (int64_t r = 0; r < nr; r++)
        for (int i = r < r4 ? i4 : i0; i < i1; i++)
            out[(int64_t)i * rows + r0 + r] = dot(x + (int64_t)i * cols, w + r * cols, cols);
}

static void cpu_matmul(burst_backend *b, float *out, const float *x, const burst_weight *W, int n) {
    const int64_t rows = W->rows, cols = W->cols, n_tiles = (rows + MM_ROWS - 1) / MM_ROWS;
    #pragma omp parallel num_threads(nthreads(b))
    {
        float *tile = W->dtype == DTYPE_F32 ? NULL : burst_malloc((size_t)MM_ROWS * cols * sizeof(float));
        #pragma omp for schedule(static)
        for (int64_t t = 0; t < n_tiles; t++) {
            int64_t r0 = t * MM_ROWS, nr = rows - r0 < MM_ROWS ? rows - r0 : MM_ROWS;
            const float *w = (const float *)W->data + r0 * cols;
            if (tile) weight_to_f32(W, r0 * cols, nr * cols, tile), w = tile;
            for (int i0 = 0; i0 < n; i0 += MM_TOKENS)
                matmul_tile(out, x, w, r0, nr, rows, cols, i0, i0 + MM_TOKENS < n ? i0 + MM_TOKENS : n);
        }
        free(tile);
    }
}

static void cpu_rope(burst_backend *b, float *x, const int64_t *pos, int n, int n_heads,
                     int head_dim, float theta) {
    const int half = head_dim / 2;
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < half; j++) {
            // Angles in double: at positions past ~10^4 a float32 angle loses the low bits.
            double freq = pow((double)theta, -2.0 * j / head_dim), a = (double)pos[i] * freq;
            float c = (float)cos(a), s = (float)sin(a);
            for (int h = 0; h < n_heads; h++) {
                float *v = x + ((int64_t)i * n_heads + h) * head_dim;
                float x1 = v[j], x2 = v[j + half];
                v[j] = x1 * c - x2 * s;
                v[j + half] = x2 * c + x1 * s;
            }
        }
    }
}

static void cpu_swiglu(burst_backend *b, float *gate, const float *up, int64_t n) {
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int64_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void cpu_add(burst_backend *b, float *x, const float *y, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_attention(burst_backend *b, const flash_args *a) {
    (void)b;
    flash_cpu(a);
}

static void cpu_merge(burst_backend *b, const online_softmax_args *a) {
    (void)b;
    online_softmax_merge(a);
}

static const backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .weight = cpu_weight,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .attention = cpu_attention,
    .merge = cpu_merge,
};

burst_backend *backend_cpu_new(int n_threads) {
    burst_backend *b = burst_malloc(sizeof *b);
    cpu_ctx *c = burst_malloc(sizeof *c);
    c->n_threads = n_threads > 0 ? n_threads : omp_get_max_threads();
    *b = (burst_backend){.ops = &cpu_ops, .ctx = c};
    return b;
}
