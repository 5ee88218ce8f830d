// Public wrappers over a backend's function table: argument checks live here, once.
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "backend_impl.h"
#include "common/amx.h"
#include "matmul_cpu.h"
#ifdef BURST_WITH_CUDA
#include "backend_cuda.h"
#endif

// The backends by name: where each computes, and whether in bf16.
static const struct {
    const char *name;
    int on_host, bf16;
} backend_kinds[] = {{"cpu", 1, 0}, {"cpu-bf16", 1, 1}, {"cuda", 0, 1}, {"cuda-fp32", 0, 0}};
enum { N_BACKEND_KINDS = sizeof backend_kinds / sizeof backend_kinds[0] };

static int backend_kind(const char *name) {
    for (int k = 0; name && k < N_BACKEND_KINDS; k++)
        if (!strcmp(name, backend_kinds[k].name)) return k;
    return -1;
}

burst_status backend_new(const char *name, int device, int n_threads, int quant, burst_backend **out,
                         burst_error *err) {
    *out = NULL;
    const int k = backend_kind(name);
    if (k < 0) {
        char names[80] = "";
        for (int i = 0; i < N_BACKEND_KINDS; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", !i ? "" : i < N_BACKEND_KINDS - 1 ? ", " : " or ",
                     backend_kinds[i].name);
        return BURST_FAIL(err, BURST_ERR_INVALID, "backend '%s' unknown (want %s)", name, names);
    }
    if (backend_kinds[k].on_host) {
        // Without AMX or AVX512-BF16 the matmuls widen bf16 inputs back to float32: no faster, only
        // rounded. Said once, not once a rank.
        static atomic_flag warned = ATOMIC_FLAG_INIT;
        if (backend_kinds[k].bf16 && !backend_cpu_bf16_unit() && !atomic_flag_test_and_set(&warned))
            LOG_W("backend %s: neither AMX (not in this build or CPU, refused by the kernel, or BURST_AMX=0) nor "
                  "AVX512-BF16 (not in this build), so bf16 activations only lose precision: cpu is as fast", name);
        *out = backend_cpu_new(n_threads, backend_kinds[k].bf16, quant);
        return BURST_OK;
    }
    if (quant)
        return BURST_FAIL(err, BURST_ERR_INVALID, "backend %s: %s weights run on the cpu backends only", name,
                          quant_name(quant));
#ifdef BURST_WITH_CUDA
    return backend_cuda_new(device, !backend_kinds[k].bf16, out, err);
#else
    return BURST_FAIL(err, BURST_ERR_INVALID, "backend %s: this build has no CUDA (configure with -DBURST_CUDA=ON)", name);
#endif
}

int backend_on_host(const char *name) {
    const int k = backend_kind(name);
    return k >= 0 && backend_kinds[k].on_host;
}
int backend_on_device(const char *name) {
    const int k = backend_kind(name);
    return k >= 0 && !backend_kinds[k].on_host;
}
int backend_bf16(const char *name) {
    const int k = backend_kind(name);
    return k >= 0 && backend_kinds[k].bf16;
}

const char *backend_cpu_bf16_unit(void) {
    return amx_usable() ? "AMX" : matmul_cpu_bf16_products() ? "AVX512-BF16" : NULL;
}

const char *backend_default(burst_dtype weights) {
    return weights != DTYPE_F32 && backend_cpu_bf16_unit() ? "cpu-bf16" : "cpu";
}

void backend_free(burst_backend *b) {
    if (b) b->ops->free(b);
}

const char *backend_name(const burst_backend *b) { return b->ops->name; }

burst_dtype backend_act_dtype(const burst_backend *b) { return b->ops->act_dtype; }

// The dtypes of activations and KV cache rows.
static int f32_or_bf16(burst_dtype dt) { return dt == DTYPE_F32 || dt == DTYPE_BF16; }

void *backend_alloc(burst_backend *b, size_t bytes) {
    BURST_ASSERT(!b->in_graph);
    return b->ops->alloc(b, bytes);
}

size_t backend_memory_free(burst_backend *b, int *pool) { return b->ops->memory_free(b, pool); }

void backend_release(burst_backend *b, void *p) {
    BURST_ASSERT(!b->in_graph);
    if (p) b->ops->release(b, p);
}

void backend_to_host(burst_backend *b, float *dst, const float *src, int64_t n) {
    BURST_ASSERT(dst && src && n >= 0 && !b->in_graph);
    b->ops->to_host(b, dst, src, n);
}

void backend_copy(burst_backend *b, const copy_job *jobs, int n) {
    BURST_ASSERT(n >= 0 && (jobs || n == 0));
    for (int i = 0; i < n; i++) BURST_ASSERT(jobs[i].dst && jobs[i].src);
    b->ops->copy(b, jobs, n);
}

void backend_convert(burst_backend *b, void *dst, burst_dtype to, const float *src, int64_t n) {
    BURST_ASSERT(dst && src && n >= 0 && f32_or_bf16(to));
    b->ops->convert(b, dst, to, src, n);
}

void backend_convert_batch(burst_backend *b, burst_dtype to, const convert_job *jobs, int n) {
    BURST_ASSERT(n >= 0 && (jobs || n == 0) && f32_or_bf16(to));
    for (int i = 0; i < n; i++) BURST_ASSERT(jobs[i].dst && jobs[i].src && jobs[i].n >= 0);
    if (b->ops->convert_batch) b->ops->convert_batch(b, to, jobs, n);
    else
        for (int i = 0; i < n; i++) b->ops->convert(b, jobs[i].dst, to, jobs[i].src, jobs[i].n);
}

burst_status backend_weight(burst_backend *b, const weights_tensor *t, burst_weight *out,
                            burst_error *err) {
    BURST_ASSERT(t && out && (t->ndim == 1 || t->ndim == 2));
    return b->ops->weight(b, t, out, err);
}

burst_status backend_weight_group(burst_backend *b, const weights_tensor *const *t, int n, burst_weight *out,
                                  burst_error *err) {
    BURST_ASSERT(t && out && n > 0);
    for (int i = 0; i < n; i++) BURST_ASSERT(t[i] && (t[i]->ndim == 1 || t[i]->ndim == 2));
    if (b->ops->weight_group) return b->ops->weight_group(b, t, n, out, err);
    burst_status st = BURST_OK;
    for (int i = 0; i < n && !st; i++) st = b->ops->weight(b, t[i], &out[i], err);
    return st;
}

void backend_embed(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n) {
    BURST_ASSERT(x && table && tokens && n >= 0);
    for (int i = 0; i < n; i++) BURST_ASSERT(tokens[i] >= 0 && tokens[i] < table->rows);
    b->ops->embed(b, x, table, tokens, n);
}

void backend_rmsnorm(burst_backend *b, void *out, burst_dtype out_dtype, const float *x,
                     const burst_weight *w, int n, float eps) {
    BURST_ASSERT(out && x && w && w->rows == 1 && n >= 0 && f32_or_bf16(out_dtype));
    BURST_ASSERT(out != (const void *)x || out_dtype == DTYPE_F32);
    b->ops->rmsnorm(b, out, out_dtype, x, w, n, eps);
}

void backend_matmul(burst_backend *b, void *out, burst_dtype out_dtype, const void *x,
                    burst_dtype x_dtype, const burst_weight *W, int n) {
    BURST_ASSERT(out && x && W && out != x && n >= 0 && f32_or_bf16(out_dtype) && f32_or_bf16(x_dtype));
    b->ops->matmul(b, out, out_dtype, 0, x, x_dtype, W, n);
}

int backend_matmul_group(burst_backend *b, void *const *out, burst_dtype out_dtype, const void *x,
                         burst_dtype x_dtype, const burst_weight *const *W, int count, int n) {
    BURST_ASSERT(out && x && W && count > 0 && n >= 0 && f32_or_bf16(out_dtype) && f32_or_bf16(x_dtype));
    for (int i = 0; i < count; i++) BURST_ASSERT(out[i] && W[i] && out[i] != x && W[i]->cols == W[0]->cols);
    const int gemms = b->ops->matmul_group ? b->ops->matmul_group(b, out, out_dtype, x, x_dtype, W, count, n) : 0;
    if (gemms) return gemms;
    for (int i = 0; i < count; i++) b->ops->matmul(b, out[i], out_dtype, 0, x, x_dtype, W[i], n);
    return count;
}

void backend_matmul_add(burst_backend *b, float *out, const void *x, burst_dtype x_dtype,
                        const burst_weight *W, int n) {
    BURST_ASSERT(out && x && W && (const void *)out != x && n >= 0 && f32_or_bf16(x_dtype));
    b->ops->matmul(b, out, DTYPE_F32, 1, x, x_dtype, W, n);
}

void backend_rope(burst_backend *b, float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n,
                  int head_dim, const rope_params *p) {
    BURST_ASSERT(q && k && q != k && pos && p && n >= 0 && n_heads > 0 && n_kv_heads > 0 && head_dim % 2 == 0);
    b->ops->rope(b, q, n_heads, k, n_kv_heads, pos, n, head_dim, p);
}

void backend_swiglu(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n) {
    BURST_ASSERT(gate && up && n >= 0 && f32_or_bf16(dtype));
    b->ops->swiglu(b, gate, up, dtype, n);
}

void backend_matmul_swiglu(burst_backend *b, void *out, const void *x, burst_dtype dtype, const burst_weight *W_gate,
                           const burst_weight *W_up, void *up_scratch, int n) {
    BURST_ASSERT(out && x && W_gate && W_up && up_scratch && out != x && n >= 0 && f32_or_bf16(dtype));
    BURST_ASSERT(W_gate->rows == W_up->rows && W_gate->cols == W_up->cols);
    if (b->ops->matmul_swiglu && b->ops->matmul_swiglu(b, out, x, dtype, W_gate, W_up, n)) return;
    backend_matmul_group(b, (void *[]){out, up_scratch}, dtype, x, dtype, (const burst_weight *[]){W_gate, W_up}, 2, n);
    b->ops->swiglu(b, out, up_scratch, dtype, (int64_t)n * W_gate->rows);
}

static void check_attention(const flash_args *a) {
    BURST_ASSERT(a && a->q && a->k && a->v && a->o && a->lse && a->head_dim > 0);
    BURST_ASSERT(f32_or_bf16(a->kv_dtype));
    BURST_ASSERT(a->n_kv_heads > 0 && a->n_heads % a->n_kv_heads == 0);
}

void backend_attention(burst_backend *b, const flash_args *a) {
    check_attention(a);
    b->ops->attention(b, a);
}

void backend_attention_batch(burst_backend *b, const flash_args *calls, int n) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    for (int i = 0; i < n; i++) check_attention(&calls[i]);
    if (b->ops->attention_batch) b->ops->attention_batch(b, calls, n);
    else
        for (int i = 0; i < n; i++) b->ops->attention(b, &calls[i]);
}

static void host_transfer(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

backend_transfer_fn backend_transfer(const burst_backend *b) {
    return b->ops->transfer ? b->ops->transfer : host_transfer;
}

size_t backend_matmul_transient_bytes(burst_backend *b, int n, int64_t cols) {
    return b->ops->matmul_transient ? b->ops->matmul_transient(b, n, cols) : 0;
}

size_t backend_attention_transient_bytes(burst_backend *b, int max_rows, int max_calls, int64_t max_keys, int n_heads,
                                         int n_kv_heads, int head_dim, burst_dtype kv_dtype) {
    BURST_ASSERT(max_rows >= 0 && (max_calls > 0 || max_rows == 0) && max_keys >= 0 && n_heads > 0 && n_kv_heads > 0 &&
                 head_dim > 0);
    return b->ops->attention_transient
               ? b->ops->attention_transient(b, max_rows, max_calls, max_keys, n_heads, n_kv_heads, head_dim, kv_dtype)
               : 0;
}

void backend_graph_begin(burst_backend *b, int rows, int seq_rows) {
    BURST_ASSERT(rows >= 0 && seq_rows >= 0 && seq_rows <= rows && !b->in_graph);
    b->in_graph = 1;
    if (b->ops->graph_begin) b->ops->graph_begin(b, rows, seq_rows);
}

int backend_graph_end(burst_backend *b) {
    BURST_ASSERT(b->in_graph);
    b->in_graph = 0;
    return b->ops->graph_end ? b->ops->graph_end(b) : 1;
}

void backend_sync(burst_backend *b) {
    BURST_ASSERT(!b->in_graph);
    if (b->ops->sync) b->ops->sync(b);
}

void backend_sample(burst_backend *b, int *out, const float *x, int rows, int64_t cols, const float *temperature,
                    const float *unit) {
    BURST_ASSERT(out && x && rows >= 0 && cols >= 1 && cols <= INT32_MAX && (!temperature || unit) && !b->in_graph);
    b->ops->sample(b, out, x, rows, cols, temperature, unit);
}

void backend_merge(burst_backend *b, const online_softmax_args *calls, int n) {
    BURST_ASSERT(n >= 0 && (calls || n == 0));
    for (int i = 0; i < n; i++) {
        const online_softmax_args *a = &calls[i];
        BURST_ASSERT(a->o && a->lse && a->o_b && a->lse_b && a->n >= 0);
    }
    b->ops->merge(b, calls, n);
}
