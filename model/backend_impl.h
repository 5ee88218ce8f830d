// Private to backends: the function table a backend fills, and the handle that carries it.
// Public wrappers in backend.c check arguments before calling through the table.
#pragma once
#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    const char *name;
    burst_dtype act_dtype; // backend_act_dtype
    void (*free)(burst_backend *b);
    void *(*alloc)(burst_backend *b, size_t bytes);
    size_t (*memory_free)(burst_backend *b, int *pool); // backend_memory_free
    void (*release)(burst_backend *b, void *p);
    void (*to_host)(burst_backend *b, float *dst, const float *src, int64_t n);
    void (*copy)(burst_backend *b, const copy_job *jobs, int n);
    void (*convert)(burst_backend *b, void *dst, burst_dtype to, const float *src, int64_t n);
    burst_status (*weight)(burst_backend *b, const weights_tensor *t, burst_weight *out,
                           burst_error *err);
    // optional: backend_weight_group (else weight for each)
    burst_status (*weight_group)(burst_backend *b, const weights_tensor *const *t, int n, burst_weight *out,
                                 burst_error *err);
    void (*embed)(burst_backend *b, float *x, const burst_weight *table, const int *tokens, int n);
    void (*rmsnorm)(burst_backend *b, void *out, burst_dtype out_dtype, const float *x,
                    const burst_weight *w, int n, float eps);
    // out (of out_dtype) = x @ W^T, or out (F32) += x @ W^T when accumulate
    void (*matmul)(burst_backend *b, void *out, burst_dtype out_dtype, int accumulate, const void *x,
                   burst_dtype x_dtype, const burst_weight *W, int n);
    // optional: backend_matmul_group, returning its GEMMs' count (0: none ran; matmul for each)
    int (*matmul_group)(burst_backend *b, void *const *out, burst_dtype out_dtype, const void *x, burst_dtype x_dtype,
                        const burst_weight *const *W, int count, int n);
    size_t (*matmul_transient)(burst_backend *b, int n, int64_t cols); // optional: allocates nothing
    size_t (*attention_transient)(burst_backend *b, int max_rows, int max_calls, int64_t max_keys, int n_heads,
                                  int n_kv_heads, int head_dim, burst_dtype kv_dtype); // optional: nothing
    void (*rope)(burst_backend *b, float *q, int n_heads, float *k, int n_kv_heads, const int64_t *pos, int n,
                 int head_dim, const rope_params *p);
    void (*swiglu)(burst_backend *b, void *gate, const void *up, burst_dtype dtype, int64_t n);
    // optional: backend_matmul_swiglu in one, where it returns 1 (0: the three ops run instead)
    int (*matmul_swiglu)(burst_backend *b, void *out, const void *x, burst_dtype dtype, const burst_weight *W_gate,
                         const burst_weight *W_up, int n);
    void (*attention)(burst_backend *b, const flash_args *a);
    // optional: backend_attention_batch and backend_convert_batch (else one call at a time)
    void (*attention_batch)(burst_backend *b, const flash_args *calls, int n);
    void (*convert_batch)(burst_backend *b, burst_dtype to, const convert_job *jobs, int n);
    void (*merge)(burst_backend *b, const online_softmax_args *calls, int n);
    void (*sample)(burst_backend *b, int *out, const float *x, int rows, int64_t cols, const float *temperature,
                   const float *unit);
    void (*graph_begin)(burst_backend *b, int rows, int seq_rows); // optional: backend_graph_begin
    int (*graph_end)(burst_backend *b);
    void (*sync)(burst_backend *b);                            // optional: ops are synchronous
    void (*transfer)(void *dst, const void *src, size_t bytes); // optional: memcpy
} backend_ops;

struct burst_backend {
    const backend_ops *ops;
    void *ctx;    // the implementation's state
    int in_graph; // between backend_graph_begin and _end, where waiting for the backend is refused
};

#ifdef __cplusplus
}
#endif
