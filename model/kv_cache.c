#include "kv_cache.h"

burst_status kv_cache_init(kv_cache *c, burst_backend *b, int n_slots, int n_layers, int ctx,
                           int kv_dim, burst_dtype dtype, burst_error *err) {
    if (n_slots < 1 || ctx < 1)
        return BURST_FAIL(err, BURST_ERR_INVALID, "kv cache: %d slots x %d tokens (want >= 1 each)",
                          n_slots, ctx);
    if (dtype != DTYPE_F32 && dtype != DTYPE_BF16)
        return BURST_FAIL(err, BURST_ERR_INVALID, "kv cache: dtype %s (want F32 or BF16)", dtype_name(dtype));
    *c = (kv_cache){.n_slots = n_slots, .n_layers = n_layers, .ctx = ctx, .kv_dim = kv_dim, .dtype = dtype};
    size_t half = kv_cache_bytes(c) / 2;
    c->k = backend_alloc(b, half);
    c->v = backend_alloc(b, half);
    return BURST_OK;
}

void kv_cache_free(kv_cache *c, burst_backend *b) {
    backend_release(b, c->k);
    backend_release(b, c->v);
    *c = (kv_cache){0};
}

size_t kv_cache_bytes(const kv_cache *c) {
    return 2 * (size_t)c->n_slots * (size_t)c->n_layers * (size_t)c->ctx * (size_t)c->kv_dim * dtype_size(c->dtype);
}

static size_t offset(const kv_cache *c, int slot, int layer, int64_t row) {
    BURST_ASSERT(slot >= 0 && slot < c->n_slots && layer >= 0 && layer < c->n_layers && row >= 0 && row <= c->ctx);
    return (((size_t)slot * c->n_layers + layer) * c->ctx + (size_t)row) * c->kv_dim * dtype_size(c->dtype);
}

void *kv_cache_k(const kv_cache *c, int slot, int layer, int64_t row) { return (char *)c->k + offset(c, slot, layer, row); }
void *kv_cache_v(const kv_cache *c, int slot, int layer, int64_t row) { return (char *)c->v + offset(c, slot, layer, row); }
