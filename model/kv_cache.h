// One rank's KV cache: room for ctx tokens of each of n_slots sequences (this rank's shard of
// them), every layer's keys and values in the backend's memory, reserved once at start-up
// (nothing grows per request). How many rows of a slot are used is the model's bookkeeping.
// Owned by the rank; that rank's thread uses it.
#pragma once
#include "backend.h"

typedef struct {
    int n_slots, n_layers, ctx, kv_dim;
    float *k;     // (n_slots, n_layers, ctx, kv_dim)
    float *v;     // (n_slots, n_layers, ctx, kv_dim)
} kv_cache;

burst_status kv_cache_init(kv_cache *c, burst_backend *b, int n_slots, int n_layers, int ctx,
                           int kv_dim, burst_error *err);
void kv_cache_free(kv_cache *c, burst_backend *b);
size_t kv_cache_bytes(const kv_cache *c);

// Row 0 of (slot, layer) in k or v; rows are kv_dim floats apart.
float *kv_cache_k(const kv_cache *c, int slot, int layer);
float *kv_cache_v(const kv_cache *c, int slot, int layer);
