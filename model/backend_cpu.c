// The CPU backend: activations in host memory, weights read from the mmap in their stored dtype
// but where cpu_weight copies them (the matmul is model/matmul_cpu.c). "cpu" keeps the matmuls'
// inputs in float32 (an exact float32 computation); "cpu-bf16" keeps those in the backend's act
// dtype (the normed rows and the MLP's; model/llama.c) in bf16, rounds its float32 ones by BF16
// weights (rounds_x), and F16 weights to bf16 at load, as the CUDA backend's bf16 mode does: with
// AMX such a matmul needs one tile product per weight tile instead of three (or five for F16
// weights), and a prompt runs about 1.7x faster. Both take either dtype wherever an op has a dtype
// argument (the tests of the CUDA backend's bf16 mode use that).
// With --quantize, every matrix is quantized at load (cpu_weight, model/quantize_cpu.h).
// Threads: OpenMP, n_threads per call.
#define _GNU_SOURCE // malloc_usable_size
#include <malloc.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/amx.h"
#include "common/host_memory.h"
#include "backend_impl.h"
#include "matmul_amx.h"
#include "matmul_cpu.h"
#include "quantize_cpu.h"
#include "sampler.h"
#include "swiglu.h"

typedef struct {
    int n_threads;
    int huge_buffers;   // buffers (the KV cache) in 2 MB pages: cpu_alloc
    int quant;          // 0, or the dtype of every matrix: DTYPE_Q8 or DTYPE_Q4 (backend_new)
    void **weights;     // the copies cpu_weight made, freed with the backend
    int n_weights;
    // cpu_rope's cos and sin (times mscale) at the last call's positions, kept for the next call at
    // the same ones: every layer turns its q and k rows at the step's positions, so a step works
    // them out once rather than 2 x n_layers times (cos, sin and pow took ~1.3% of a prefill).
    float *rope_cs;     // (rope_n, half) cos, then (rope_n, half) sin
    int64_t *rope_pos;  // (rope_n) the positions they are for
    int rope_n, rope_half;
    rope_params rope_p;
} cpu_ctx;

static int nthreads(burst_backend *b) { return ((cpu_ctx *)b->ctx)->n_threads; }

static void cpu_free(burst_backend *b) {
    cpu_ctx *c = b->ctx;
    for (int i = 0; i < c->n_weights; i++) free(c->weights[i]);
    free(c->weights), free(c->rope_cs), free(c->rope_pos), free(c), free(b);
}

// Bytes of CPU backend buffers in this process. A large calloc maps zero pages on first touch,
// so the host's available memory counts them as free until requests fill them.
static atomic_size_t held;

static void *cpu_alloc(burst_backend *b, size_t bytes) {
    void *p = burst_calloc(1, bytes);
    if (((cpu_ctx *)b->ctx)->huge_buffers) host_huge_pages(p, bytes);
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

// The tensor where it lies in the mapping, but copied once here where the matmuls gain: with
// --quantize, every matrix quantized (quantize_weight); else on AMX, BF16 matrices and cpu-bf16's F16 ones as AMX
// tiles in bf16 (matmul_amx.h: every matmul reads its weight's tiles in order and copies nothing,
// from one token on; BF16 values unchanged, so `cpu` stays exact); elsewhere cpu-bf16's F16 ones
// rounded to bf16 in rows. cpu-bf16 rounds F16 weights as the CUDA backend rounds every weight at
// upload: one AMX tile product a tile instead of two, and no split into parts at every call.
static burst_status cpu_weight(burst_backend *b, const weights_tensor *t, burst_weight *out,
                               burst_error *err) {
    *out = (burst_weight){.dtype = t->dtype, .data = t->data,
                          .rows = t->ndim == 2 ? t->shape[0] : 1, .cols = t->shape[t->ndim - 1]};
    cpu_ctx *c = b->ctx;
    const int quant = t->ndim == 2 ? c->quant : 0;
    const int round_f16 = !quant && t->dtype == DTYPE_F16 && backend_act_dtype(b) == DTYPE_BF16;
    const int tiles = !quant && t->ndim == 2 && (t->dtype == DTYPE_BF16 || round_f16) && amx_usable();
    if (!tiles && !round_f16 && !quant) return BURST_OK;
    // Checked first: Linux grants a large malloc and would kill the process only as the copy fills it.
    // (Q8: and a group's bytes more, which matmul_ints's last load of a row in a part group may read)
    const size_t q_data = (size_t)((quant == DTYPE_Q4 ? out->rows * q4_row_bytes(out->cols) : t->numel + Q_GROUP) + 63) / 64 * 64;
    const size_t bytes = quant   ? q_data + sizeof(float) * (size_t)(out->rows * q_groups(out->cols))
                         : tiles ? amx_tiles_bytes(out->rows, out->cols)
                                 : sizeof(uint16_t) * (size_t)t->numel;
    const size_t avail = host_memory_free("");
    void *w = avail && bytes > avail ? NULL : aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!w)
        return BURST_FAIL(err, BURST_ERR_NOMEM, "%s: its %s copy%s (%.3f GB) does not fit in the %.3f GB free (%s)", t->name,
                          quant ? quant_name(quant) : "bf16", tiles ? " in AMX tiles" : "", bytes / 1e9, avail / 1e9,
                          quant ? "unquantized, the weights are read as mapped"
                             : "--backend cpu with BURST_AMX=0 computes on the weights as mapped");
    host_huge_pages(w, bytes); // (common/host_memory.h) decode steps stream over every weight
    if (quant) {
        float *scales = (float *)((char *)w + q_data);
        quantize_weight(quant, w, scales, out, c->n_threads);
        out->dtype = quant, out->scales = scales;
    } else if (tiles) {
        amx_tiles_from(w, out, c->n_threads);
        out->dtype = DTYPE_BF16, out->amx_tiles = 1;
    } else {
        const uint16_t *h = t->data;
        uint16_t *to = w;
        #pragma omp parallel for num_threads(c->n_threads) schedule(static)
        for (int64_t i = 0; i < t->numel; i++) to[i] = f32_to_bf16(f16_to_f32(h[i]));
        out->dtype = DTYPE_BF16;
    }
    c->weights = burst_realloc(c->weights, sizeof *c->weights * (size_t)(c->n_weights + 1));
    c->weights[c->n_weights++] = w;
    out->data = w;
    return BURST_OK;
}

static void cpu_embed(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n) {
    (void)b;
    for (int i = 0; i < n; i++)
        weight_to_f32(table, (int64_t)tokens[i] * table->cols, table->cols, x + (int64_t)i * table->cols);
}

enum { RMS_LANES = 8 }; // partial sums of cpu_rmsnorm's squares: a vector of doubles
static void cpu_rmsnorm(burst_backend *b, void *out, burst_dtype out_dtype, const float *x,
                        const burst_weight *w, int n, float eps) {
    int64_t dim = w->cols;
    float *wf = burst_malloc((size_t)dim * sizeof(float));
    weight_to_f32(w, 0, dim, wf);
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * dim;
        // The sum of squares in double, in RMS_LANES partial sums (a vector of them): one chain of
        // dim dependent adds took 3x the time of the rest of the norm.
        double part[RMS_LANES] = {0}, ss = 0;
        int64_t j = 0;
        for (; j + RMS_LANES <= dim; j += RMS_LANES)
            for (int k = 0; k < RMS_LANES; k++) part[k] += (double)xi[j + k] * xi[j + k];
        for (int k = 0; k < RMS_LANES; k++) ss += part[k];
        for (; j < dim; j++) ss += (double)xi[j] * xi[j];
        float r = (float)(1.0 / sqrt(ss / (double)dim + eps));
        if (out_dtype == DTYPE_F32) { // the loops the CPU runs: kept plain for the vectoriser
            float *oi = (float *)out + (int64_t)i * dim;
            for (j = 0; j < dim; j++) oi[j] = xi[j] * r * wf[j];
        } else {
            uint16_t *oi = (uint16_t *)out + (int64_t)i * dim;
            for (j = 0; j < dim; j++) oi[j] = f32_to_bf16(xi[j] * r * wf[j]);
        }
    }
    free(wf);
}

// Whether a matmul rounds its float32 x to bf16 first: cpu-bf16's by BF16 weights (the attention's
// output before Wo, the final norm's rows before the classifier), as the CUDA backend's bf16 mode
// rounds them. They then run on column pairs with AVX512-BF16 (twice the products an instruction:
// decode steps of 16 sequences ~16% faster on 7B's layer shapes), and with AMX one tile product a
// tile instead of three. By Q8 and Q4 weights too, which run on column pairs as BF16 ones do (Q4's
// few-token matmul quantizes x: rounded first or not, the same to within its int8's steps).
static int rounds_x(burst_backend *b, burst_dtype x_dtype, const burst_weight *W) {
    return backend_act_dtype(b) == DTYPE_BF16 && x_dtype == DTYPE_F32 &&
           (W->dtype == DTYPE_BF16 || dtype_quantized(W->dtype));
}

static void cpu_matmul(burst_backend *b, void *out, burst_dtype out_dtype, int accumulate, const void *x,
                       burst_dtype x_dtype, const burst_weight *W, int n) {
    uint16_t *xr = NULL;
    if (rounds_x(b, x_dtype, W)) {
        xr = burst_malloc(sizeof *xr * (size_t)(n * W->cols));
        cpu_convert(b, xr, DTYPE_BF16, x, n * W->cols);
        x = xr, x_dtype = DTYPE_BF16;
    }
    matmul_cpu(out, out_dtype, accumulate, x, x_dtype, W, n, nthreads(b));
    free(xr);
}

static size_t cpu_matmul_transient(burst_backend *b, int n, int64_t cols) {
    const size_t rounded = backend_act_dtype(b) == DTYPE_BF16 ? sizeof(uint16_t) * (size_t)(n * cols) : 0;
    return rounded + matmul_cpu_transient_bytes(n, cols, nthreads(b));
}

static size_t cpu_attention_transient(burst_backend *b, int max_rows, int max_calls, int64_t max_keys, int n_heads,
                                      int n_kv_heads, int head_dim, burst_dtype kv_dtype) {
    (void)max_rows, (void)max_calls, (void)n_heads, (void)n_kv_heads; // (one KV head at a time per thread)
    return flash_cpu_transient_bytes(max_keys, head_dim, kv_dtype, b->ops->act_dtype != DTYPE_F32, nthreads(b));
}

static int same_rope_params(const rope_params *a, const rope_params *b) {
    return a->theta == b->theta && a->factor == b->factor && a->ramp_lo == b->ramp_lo && a->ramp_hi == b->ramp_hi &&
           a->mscale == b->mscale;
}

// The cos and sin of every pair of n rows at positions pos (rope_cs's layout), worked out anew
// unless the last call's were for the same positions and parameters.
static const float *rope_table(burst_backend *b, const int64_t *pos, int n, int half, const rope_params *p) {
    cpu_ctx *c = b->ctx;
    if (n == c->rope_n && half == c->rope_half && same_rope_params(p, &c->rope_p) &&
        !memcmp(pos, c->rope_pos, sizeof *pos * (size_t)n))
        return c->rope_cs;
    free(c->rope_cs), free(c->rope_pos);
    c->rope_cs = burst_malloc(2 * sizeof(float) * (size_t)n * (size_t)half);
    c->rope_pos = burst_malloc(sizeof *pos * (size_t)n);
    memcpy(c->rope_pos, pos, sizeof *pos * (size_t)n);
    c->rope_n = n, c->rope_half = half, c->rope_p = *p;
    double *inv_freq = burst_malloc(sizeof(double) * (size_t)half);
    for (int j = 0; j < half; j++) inv_freq[j] = rope_inv_freq(p, j, 2 * half);
    float *cs = c->rope_cs, *sn = cs + (int64_t)n * half;
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++)
        for (int j = 0; j < half; j++) {
            // Angles in double: at positions past ~10^4 a float32 angle loses the low bits.
            const double a = (double)pos[i] * inv_freq[j];
            cs[(int64_t)i * half + j] = (float)cos(a) * p->mscale, sn[(int64_t)i * half + j] = (float)sin(a) * p->mscale;
        }
    free(inv_freq);
    return c->rope_cs;
}

// The heads of one row (n_heads x 2 half pairs at v) turned by the row's cos c and sin s: the inner
// loop runs along a head's pairs, which the vectoriser takes (along the heads, head_dim floats
// apart, it would go element by element).
static void rope_row(float *v, int n_heads, int half, const float *c, const float *s) {
    for (int h = 0; h < n_heads; h++, v += 2 * half)
        for (int j = 0; j < half; j++) {
            const float x1 = v[j], x2 = v[j + half];
            v[j] = x1 * c[j] - x2 * s[j];
            v[j + half] = x2 * c[j] + x1 * s[j];
        }
}

static void cpu_rope(burst_backend *b, float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n,
                     int head_dim, const rope_params *p) {
    const int half = head_dim / 2;
    if (n <= 0) return;
    const float *cs = rope_table(b, pos, n, half, p), *sn = cs + (int64_t)n * half;
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int i = 0; i < n; i++) {
        const float *c = cs + (int64_t)i * half, *s = sn + (int64_t)i * half;
        rope_row(q + (int64_t)i * n_heads * head_dim, n_heads, half, c, s);
        rope_row(k + (int64_t)i * n_kv_heads * head_dim, n_kv_heads, half, c, s);
    }
}

// A plain loop for each dtype, for the vectoriser.
static void cpu_swiglu(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n) {
    if (dtype == DTYPE_F32) {
        float *gf = gate;
        const float *uf = up;
        #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
        for (int64_t i = 0; i < n; i++) gf[i] = swiglu_one(gf[i], uf[i]);
        return;
    }
    uint16_t *gh = gate;
    const uint16_t *uh = up;
    #pragma omp parallel for num_threads(nthreads(b)) schedule(static)
    for (int64_t i = 0; i < n; i++) gh[i] = f32_to_bf16(swiglu_one(bf16_to_f32(gh[i]), bf16_to_f32(uh[i])));
}

static int cpu_matmul_swiglu(burst_backend *b, void *out, const void *x, burst_dtype dtype, const burst_weight *W_gate,
                             const burst_weight *W_up, int n) {
    return matmul_amx_swiglu(out, dtype, x, dtype, W_gate, W_up, n, nthreads(b));
}

// A step's sequences in one OpenMP region: for many short decode calls the region's start and
// end cost about as much as the attention itself. cpu-bf16 rounds Q and P to bf16 where a call's
// query tiles run on AMX or AVX512-BF16 (flash_args.qp_bf16).
static void cpu_attention_batch(burst_backend *b, const flash_args *calls, int n) {
    if (b->ops->act_dtype == DTYPE_F32) {
        flash_cpu(calls, n);
        return;
    }
    flash_args one, *rounded = n == 1 ? &one : burst_malloc(sizeof *rounded * (size_t)n); // 1: a ring step's call
    for (int i = 0; i < n; i++) rounded[i] = calls[i], rounded[i].qp_bf16 = 1;
    flash_cpu(rounded, n);
    if (rounded != &one) free(rounded);
}

static void cpu_attention(burst_backend *b, const flash_args *a) { cpu_attention_batch(b, a, 1); }

static void cpu_merge(burst_backend *b, const online_softmax_args *calls, int n) {
    (void)b;
    online_softmax_merge(calls, n);
}

// model/sampler.c's own draw, row by row.
static void cpu_sample(burst_backend *b, int *out, const float *x, int rows, int64_t cols, const float *temperature,
                       const float *unit) {
    #pragma omp parallel num_threads(nthreads(b)) if (rows > 1)
    {
        struct sampler_cand *scratch = temperature ? burst_malloc(sizeof *scratch * (size_t)cols) : NULL;
        #pragma omp for schedule(static)
        for (int r = 0; r < rows; r++)
            out[r] = sampler_pick_unfiltered(x + (int64_t)r * cols, (int)cols, temperature ? temperature[r] : 0,
                                             temperature ? unit[r] : 0, scratch);
        free(scratch);
    }
}

// The two modes differ in their name and the dtype of the matmuls' inputs only.
#define CPU_OPS(NAME, ACT_DTYPE)                                                                                     \
    {                                                                                                                \
        .name = NAME, .act_dtype = ACT_DTYPE, .free = cpu_free, .alloc = cpu_alloc, .memory_free = cpu_memory_free,  \
        .release = cpu_release, .to_host = cpu_to_host, .copy = cpu_copy, .convert = cpu_convert,                    \
        .weight = cpu_weight, .embed = cpu_embed, .rmsnorm = cpu_rmsnorm, .matmul = cpu_matmul,                      \
        .matmul_transient = cpu_matmul_transient, .attention_transient = cpu_attention_transient, .rope = cpu_rope,  \
        .swiglu = cpu_swiglu, .matmul_swiglu = cpu_matmul_swiglu, .attention = cpu_attention,                        \
        .attention_batch = cpu_attention_batch, .merge = cpu_merge, .sample = cpu_sample,                            \
    }
static const backend_ops cpu_ops = CPU_OPS("cpu", DTYPE_F32), cpu_bf16_ops = CPU_OPS("cpu-bf16", DTYPE_BF16);

burst_backend *backend_cpu_new(int n_threads, int bf16, int quant) {
    burst_backend *b = burst_malloc(sizeof *b);
    cpu_ctx *c = burst_malloc(sizeof *c);
    // The KV cache in 2 MB pages, which a long context's decode steps stream over (decode attention
    // over K/V in them took 0.89-0.92x the time): but not where the host takes freed memory back,
    // since the cache is first written as requests come, and there a first 8577-token prompt took
    // 11.8-12.1 s against 10.9-11.0 (host_reports_free_pages).
    *c = (cpu_ctx){.n_threads = n_threads > 0 ? n_threads : omp_get_max_threads(),
                   .huge_buffers = !host_reports_free_pages(""), .quant = quant};
    *b = (burst_backend){.ops = bf16 ? &cpu_bf16_ops : &cpu_ops, .ctx = c};
    return b;
}
