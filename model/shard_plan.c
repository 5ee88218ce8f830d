#include "shard_plan.h"

#include <stdlib.h>

void shard_plan_init(shard_plan *p, int n_ranks, int max_segs, int max_tokens) {
    *p = (shard_plan){.n_ranks = n_ranks, .max_segs = max_segs, .max_tokens = max_tokens};
    p->seg = burst_calloc((size_t)max_segs, sizeof *p->seg);
    for (int i = 0; i < max_segs; i++) {
        seg_plan *s = &p->seg[i];
        s->rows = burst_calloc((size_t)n_ranks, sizeof *s->rows);
        s->kv = burst_calloc((size_t)n_ranks, sizeof *s->kv);
        s->old_len = burst_calloc((size_t)n_ranks, sizeof *s->old_len);
        s->new_len = burst_calloc((size_t)n_ranks, sizeof *s->new_len);
        s->owner = burst_calloc((size_t)max_tokens, sizeof *s->owner);
    }
}

void shard_plan_free(shard_plan *p) {
    for (int i = 0; p->seg && i < p->max_segs; i++) {
        seg_plan *s = &p->seg[i];
        free(s->rows), free(s->kv), free(s->old_len), free(s->new_len), free(s->owner);
    }
    free(p->seg);
    *p = (shard_plan){0};
}

static void plan_ring(seg_plan *s, int G) {
    s->max_block = 0;
    for (int r = 0; r < G; r++) {
        seq_part z = partition_zigzag(s->n, G, r);
        seq_part_shift(&z, s->pos0);
        s->rows[r] = z;
        s->new_len[r] = seq_part_len(&z);
        seq_part kv = {.n_runs = 1, .run = {{.start = 0, .len = s->old_len[r]}}};
        for (int t = 0; t < z.n_runs; t++) kv.run[kv.n_runs++] = z.run[t];
        // The old rows count as positions [0, old) (all before the new ones, which is all that
        // causal masking asks of them); new rows that continue them make one block (G = 1).
        seq_part_coalesce(&kv);
        s->kv[r] = kv;
        if (s->old_len[r] + s->new_len[r] > s->max_block) s->max_block = s->old_len[r] + s->new_len[r];
    }
}

static void plan_replicated(seg_plan *s, int G) {
    for (int r = 0; r < G; r++) {
        s->rows[r] = (seq_part){.n_runs = 1, .run = {{.start = s->pos0, .len = s->n}}};
        s->new_len[r] = 0;
    }
    for (int j = 0; j < s->n; j++) {
        int best = 0;
        for (int r = 1; r < G; r++)
            if (s->old_len[r] + s->new_len[r] < s->old_len[best] + s->new_len[best]) best = r;
        s->owner[j] = best;
        s->new_len[best]++;
    }
}

burst_status shard_plan_make(shard_plan *p, const int *slots, const int *ns, const int *whole, int n_segs,
                             const int64_t *shard_len, int64_t shard_cap, burst_error *err) {
    int G = p->n_ranks, tok0 = 0;
    BURST_ASSERT(n_segs >= 1 && n_segs <= p->max_segs);
    for (int i = 0; i < n_segs; i++) {
        seg_plan *s = &p->seg[i];
        BURST_ASSERT(ns[i] >= 1 && ns[i] <= p->max_tokens);
        s->slot = slots[i], s->n = ns[i], s->tok0 = tok0, s->pos0 = 0;
        for (int r = 0; r < G; r++) {
            s->old_len[r] = shard_len[(int64_t)s->slot * G + r];
            s->pos0 += s->old_len[r];
        }
        s->ring = G == 1 || (s->n >= 2 * G && !whole[i]);
        if (s->ring) plan_ring(s, G);
        else plan_replicated(s, G);
        for (int r = 0; r < G; r++)
            if (s->old_len[r] + s->new_len[r] > shard_cap)
                return BURST_FAIL(err, BURST_ERR_INVALID,
                                  "slot %d: rank %d's KV shard would hold %lld tokens (capacity %lld)",
                                  s->slot, r, (long long)(s->old_len[r] + s->new_len[r]), (long long)shard_cap);
        tok0 += s->n;
    }
    p->n_segs = n_segs;
    return BURST_OK;
}
