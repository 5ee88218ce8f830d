// flash_cpu's query tiles on Intel AMX (common/amx.h) when K/V are bf16 (a bf16 KV cache) and
// head_dim is a multiple of 32: the scores S = Q K^T and the P V products of a tile of up to 128
// queries by up to 128 keys, in bf16 tiles summed in float32. K and V are bf16 as stored; Q and the
// probabilities P are split into three bf16 parts each, so the sums are those of float32 arithmetic
// on the same K/V (3 tile products per 32 x 16 x 16 block, against one float32 multiply-add per
// element pair in flash_cpu's loops); or, for a call that asks (flash_args.qp_bf16), rounded to
// bf16, one tile product a block, as the GPU's bf16 attention kernels do. flash_cpu's softmax keeps
// the state between them, and has flash_amx_probs compute the probabilities.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "common/dtype.h"

// The most queries, and keys, of a tile: 128 queries read each K/V tile half as often as 64 (the
// attention 1.1x faster at 4K and 8K tokens); 128 keys give each P V sum tile, loaded and stored
// once a key tile, 4 steps of 32 keys instead of 2 (1.1x at 4K tokens; 256: no faster). Q's and
// P's tiles, 32 KB each (96 KB in three parts), stay in L2.
enum { FLASH_AMX_QUERIES = 128, FLASH_AMX_KEYS = 128 };

// One KV head's K or V as a thread keeps it for the query tiles that read it, laid out for the
// tiles: keys [0, keys) of the head at `of`.
typedef struct {
    uint16_t *rows;
    const uint16_t *of; // NULL: none yet
    int64_t stride;
    int nk, d, keys;
} flash_amx_head;

// One thread's buffers, for head_dim up to the max_d and keys up to the max_keys they were made
// for: a query tile's Q, a key tile's P, and one KV head's K and V^T, laid out as tiles (the two
// heads 4 x max_keys x max_d bytes: 8 MB at 16K keys of head_dim 128).
typedef struct {
    uint16_t *q, *p;
    int parts; // of Q and P in the current query tile: 3, or 1 (rounded to bf16)
    flash_amx_head k, vt;
} flash_amx_scratch;

// 1 where a call with this head_dim and K/V dtype takes the AMX path (amx_usable() too).
int flash_amx_applies(int head_dim, burst_dtype kv_dtype);

// Bytes of a thread's K and V^T for up to max_keys keys of head_dim up to max_d (the buffers that
// grow with the keys).
size_t flash_amx_head_bytes(int max_d, int64_t max_keys);

// A thread's buffers and tile shapes, before its first flash_amx call; and after its last.
void flash_amx_thread_begin(flash_amx_scratch *w, int max_d, int max_keys);
void flash_amx_thread_end(flash_amx_scratch *w);

// Query rows [0, n) (n <= 128; row r at q + r * q_stride, d floats) made ready for the scores of
// every key tile the query tile sees; with round_bf16, Q and (in flash_amx_pv) P are rounded to
// bf16 instead of split.
void flash_amx_queries(flash_amx_scratch *w, const float *q, int64_t q_stride, int n, int d, int round_bf16);

// s[j * ld + r] = K row k0 + j (j < nk <= 128, k0 a multiple of 128) · the query row r of
// flash_amx_queries, for r < nq rounded up to 32 (ld >= that). k is one KV head's K for the whole
// call, nk_all rows at k + j * kv_stride (bf16), which must not change between the calls of a
// thread that name it (a copy of its rows is kept for them).
void flash_amx_scores(flash_amx_scratch *w, float *s, int64_t ld, const uint16_t *k, int64_t kv_stride, int nk_all,
                      int k0, int nq, int nk, int d);

// The probabilities of query rows [0, nq) for keys [0, nk) (nk <= 128) from their scores (key j's
// of row r at s[j * ld + r], as flash_amx_scores made them): e^(score x scale - m[r]) (0 where m[r] is
// -inf: the row has seen no key), laid out (rounded or split into parts) for the next flash_amx_pv,
// computed in registers as they are laid out, rather than stored as float32 and read back; sum[r] =
// row r's sum of them. The scores in s stay.
void flash_amx_probs(flash_amx_scratch *w, const float *s, int64_t ld, int nq, int nk, float scale, const float *m, float *sum);

// acc_t += (P V)^T for query rows [0, nq rounded up to 32): acc_t holds the output sums as d rows
// of FLASH_AMX_QUERIES, dim c of query row r at acc_t[c * FLASH_AMX_QUERIES + r]; P the nk <= 128
// keys' probabilities (key k0 + j for j < nk, k0 a multiple of 128) as the last flash_amx_probs
// laid them out. v is one KV head's V for the whole call, nk_all rows at v + j * kv_stride (bf16),
// which must not change between the calls of a thread that name it (its V^T is kept for them). Rows
// past nq add zeros.
void flash_amx_pv(flash_amx_scratch *w, float *acc_t, const uint16_t *v, int64_t kv_stride, int nk_all, int k0, int nq, int nk,
                  int d);

// Query rows [0, n) of the sums flash_amx_pv made in acc_t, row r times factor[r], into o (row r at
// o + r * o_stride, d floats).
void flash_amx_store(float *o, int64_t o_stride, const float *acc_t, const float *factor, int n, int d);
