// One rank's KV cache: room for ctx tokens of each of n_slots sequences (this rank's shard of
// them), every layer's keys and values in the backend's memory, reserved once at start-up
// (nothing grows per request). How many rows of a slot are used is the model's bookkeeping.
// Rows are float32 or bf16 (half the memory; K/V enter it rounded, backend_convert). Owned by
// the rank; that rank's thread uses it.
#pragma once
#include "backend.h"

typedef struct {
    int n_slots, n_layers, ctx, kv_dim;
    burst_dtype dtype; // DTYPE_F32 or DTYPE_BF16
    void *k;           // (n_slots, n_layers, ctx, kv_dim)
    void *v;           // (n_slots, n_layers, ctx, kv_dim)
} kv_cache;

burst_status kv_cache_init(kv_cache *c, burst_backend *b, int n_slots, int n_layers, int ctx,
                           int kv_dim, burst_dtype dtype, burst_error *err);
void kv_cache_free(kv_cache *c, burst_backend *b);
size_t kv_cache_bytes(const kv_cache *c);

// Row `row` of (slot, layer) in k or v; rows are kv_dim elements apart.
void *kv_cache_k(const kv_cache *c, int slot, int layer, int64_t row);
void *kv_cache_v(const kv_cache *c, int slot, int layer, int64_t row);
