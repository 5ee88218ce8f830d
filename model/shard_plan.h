// Where the tokens of one forward call go among G ranks, and where their K/V entries are kept.
//
// A segment of n >= 2G new tokens (or any n when G = 1) is a *ring* segment: its tokens are split
// zigzag (attention/partition.h), each rank runs its share, appends its K/V rows to its own shard
// of the slot's cache, and attention runs through the ring over every rank's whole shard.
// A shorter segment (a decode step), or one asked to stay whole (below), is *replicated*: every
// rank runs all n tokens, attends them to its own shard, and the partials are merged across ranks;
// each new K/V entry is stored by the rank whose shard is then smallest, so shards stay balanced.
//
// K/V rows already in a shard are all older than any new token, so they need no positions: the
// plan labels them with positions 0..old-1, which every new query sees. A rank appends its new
// rows in position order (a zigzag part's runs ascend), so every shard is in position order and
// a prefix of the sequence is a prefix of each shard. The plan is computed once
// per call (by the engine thread) and read by all ranks; it owns its arrays.
#pragma once
#include "attention/partition.h"
#include "common/burst.h"

typedef struct {
    int ring;          // 1: zigzag split + ring attention; 0: replicated
    int slot, n;       // the segment: its KV slot and new tokens
    int tok0;          // index of its first token in the call's token array
    int64_t pos0;      // its first position (the slot's length before the call)
    seq_part *rows;    // (G) positions each rank runs (replicated: all n, for every rank)
    seq_part *kv;      // (G) ring: each rank's shard after the append, (0, old) then its new runs
    int64_t *old_len;  // (G) each rank's shard length before the call
    int64_t *new_len;  // (G) K/V rows each rank appends
    int *owner;        // (n) replicated: the rank that stores token j's K/V
    int64_t max_block; // ring: largest old + new over the ranks
} seg_plan;

typedef struct {
    int n_ranks, max_segs, max_tokens;
    int n_segs;
    seg_plan *seg;     // (max_segs)
} shard_plan;

void shard_plan_init(shard_plan *p, int n_ranks, int max_segs, int max_tokens);
void shard_plan_free(shard_plan *p);

// Plans segments (slot[i], n[i]) given every shard's length (shard_len[slot * G + rank]) and the
// capacity of one shard; fails without side effects when a shard would overflow. A segment with
// whole[i] set runs replicated whatever its length, so that rank 0 holds all its rows.
burst_status shard_plan_make(shard_plan *p, const int *slots, const int *ns, const int *whole, int n_segs,
                             const int64_t *shard_len, int64_t shard_cap, burst_error *err);
