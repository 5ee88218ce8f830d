#include "kv_cache.h"

burst_status kv_cache_init(kv_cache *c, burst_backend *b, int n_slots, int n_layers, int ctx,
                           int kv_dim, burst_error *err) {
    if (n_slots < 1 || ctx < 1)
        return BURST_FAIL(err, BURST_ERR_INVALID, "kv cache: %d slots x %d tokens (want >= 1 each)",
                          n_slots, ctx);
    *c = (kv_cache){.n_slots = n_slots, .n_layers = n_layers, .ctx = ctx, .kv_dim = kv_dim};
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
    return 2 * (size_t)c->n_slots * (size_t)c->n_layers * (size_t)c->ctx * (size_t)c->kv_dim * sizeof(float);
}

static int64_t offset(const kv_cache *c, int slot, int layer) {
    BURST_ASSERT(slot >= 0 && slot < c->n_slots && layer >= 0 && layer < c->n_layers);
    return (((int64_t)slot * c->n_layers + layer) * c->ctx) * c->kv_dim;
}

float *kv_cache_k(const kv_cache *c, int slot, int layer) { return c->k + offset(c, slot, layer); }
float *kv_cache_v(const kv_cache *c, int slot, int layer) { return c->v + offset(c, slot, layer); }
