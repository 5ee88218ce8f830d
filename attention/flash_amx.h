// flash_cpu's query tiles on Intel AMX (common/amx.h) when K/V are bf16 (a bf16 KV cache) and
// head_dim is a multiple of 32: the scores S = Q K^T and the P V products of a tile of up to 128
// queries by up to 128 keys, in bf16 tiles summed in float32. K and V are bf16 as stored; Q and the
// probabilities P are split into three bf16 parts each, so the sums are those of float32 arithmetic
// on the same K/V (3 tile products per 32 x 16 x 16 block, against one float32 multiply-add per
// element pair in flash_cpu's loops); or, for a call that asks (flash_args.qp_bf16), rounded to
// bf16, one tile product a block, as the GPU's bf16 attention kernels do. The softmax between them
// stays flash_cpu's.
#pragma once
#include <stdint.h>

#include "common/dtype.h"

// The most queries, and keys, of a tile: 128 queries read each K/V tile half as often as 64 (the
// attention 1.1x faster at 4K and 8K tokens); 128 keys give each P V sum tile, loaded and stored
// once a key tile, 4 steps of 32 keys instead of 2 (1.1x at 4K tokens; 256: no faster). Q's and
// P's tiles, 32 KB each (96 KB in three parts), stay in L2.
enum { FLASH_AMX_QUERIES = 128, FLASH_AMX_KEYS = 128 };

// One thread's buffers, for head_dim up to the max_d they were made for: a query tile's Q, and a
// key tile's K, P and V, laid out as tiles.
typedef struct {
    uint16_t *q, *k, *p, *v;
    int parts; // of Q and P in the current query tile: 3, or 1 (rounded to bf16)
} flash_amx_scratch;

// 1 where a call with this head_dim and K/V dtype takes the AMX path (amx_usable() too).
int flash_amx_applies(int head_dim, burst_dtype kv_dtype);

// A thread's buffers and tile shapes, before its first flash_amx call; and after its last.
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d);
void flash_amx_thread_end(flash_amx_scratch *w);

// Query rows [0, n) (n <= 128; row r at q + r * q_stride, d floats) made ready for the scores of
// every key tile the query tile sees; with round_bf16, Q and (in flash_amx_pv) P are rounded to
// bf16 instead of split.
void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16);

// s[j * ld + r] = K row j (j < nk <= 128; rows at k + j * kv_stride, bf16) · the query row r of
// flash_amx_queries, for r < nq rounded up to 32 (ld >= that).
void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk,
                      int nq, int d);

// acc (rows of d floats) += P V for rows [0, nq rounded up to 32): p[j * ld + r] is row r's
// probability of key j (j < nk <= 128), V row j at v + j * kv_stride (bf16). Rows past nq read no
// probability (they add zeros), but acc must hold them.
void flash_amx_pv(flash_amx_scratch *w, float *acc, const float *p, int64_t ld, const uint16_t *v, int64_t kv_stride,
                  int nq, int nk, int d);
