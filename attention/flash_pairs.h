// flash_cpu's query tiles (64 queries by 64 keys) on AVX512-BF16, off AMX, for the calls that ask
// for bf16 Q and P (flash_args.qp_bf16: the cpu-bf16 backend) on a bf16 KV cache: the scores
// S = Q K^T and P V as bf16 dot products summed in float32 (each instruction adds both products of
// a pair of adjacent bf16 to a float32 sum, twice a float32 multiply-add's products), K and V read
// as stored instead of widened, Q and P rounded to bf16 (to nearest even), as AMX's rounded mode
// and the GPU's bf16 attention kernels round them. flash_cpu's softmax keeps the state between.
// A thread keeps a copy of one KV head's K and V, laid out for these products, for the run of
// query tiles of that head it takes (attention/head_copy.h, flash_pairs_head_fill).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "attention/flash.h"
#include "attention/head_copy.h"

enum { FLASH_PAIRS_QUERIES = 64, FLASH_PAIRS_KEYS = 64 };

// 1 where a call's query tiles take this path: built for AVX512-BF16, qp_bf16, a bf16 cache,
// head_dim a multiple of 32.
int flash_pairs_applies(const flash_args *a);

// The head_fill of a bf16 head's key tile (FLASH_PAIRS_KEYS keys) for these products: h->k holds
// K's rows side by side (key j at (uint16_t *)h->k + j x d), h->v V's key tile t as flash_pairs_pv
// takes it at (uint32_t *)h->v + t x FLASH_PAIRS_KEYS / 2 x d (a last odd key paired with a zero).
void flash_pairs_head_fill(head_copy *h, int tile);

// The bytes of the two buffers of a head's copy for up to max_keys keys of head_dim d.
size_t flash_pairs_head_bytes(int d, int64_t max_keys);

// qp (head_dim / 2 rows of FLASH_PAIRS_QUERIES 32-bit lanes) = query rows [0, n) (n <= 64, row r
// at q + r * q_stride, d floats) rounded to bf16: row r's dims 2p and 2p + 1 in lane r of row p.
// Lanes past n zero.
void flash_pairs_queries(uint32_t *qp, const float *q, int64_t q_stride, int n, int d);

// s[j * FLASH_PAIRS_QUERIES + r] = K row j · query row r of qp, for j < nk <= 64 (K row j at
// k + j * kv_stride, bf16) and every lane r.
void flash_pairs_scores(float *s, const uint16_t *k, int64_t kv_stride, const uint32_t *qp, int d, int nk);

// The probabilities of rows [0, nq) for nk <= 64 keys, e^(score x scale - m[r]) (row r's score of
// key j at s[j * FLASH_PAIRS_QUERIES + r], s 64-byte aligned; zeros for a row whose max m[r] is
// -inf: it has seen no key), rounded to bf16 into scratch (flash_pairs_scratch_words() 32-bit
// words, 64-byte aligned) for flash_pairs_pv; sum[r] = row r's sum of them before rounding.
void flash_pairs_probs(uint32_t *scratch, const float *s, int nq, int nk, float scale, const float *m, float *sum);

// acc (nq rows of d floats) += P V: P the probabilities of nk <= 64 keys that flash_pairs_probs
// put in scratch, V the key tile's pairs as flash_pairs_head_fill laid them out (vp: the tile's
// first).
void flash_pairs_pv(float *acc, const uint32_t *vp, int d, int nq, int nk, const uint32_t *scratch);
size_t flash_pairs_scratch_words(void);
