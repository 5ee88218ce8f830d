#include "attention/ring.h"

#include <math.h>
#include <string.h>

#include "attention/flash.h"
#include "attention/online_softmax.h"

// A transfer block: its seq_part in a header of two cache lines, then K rows and V rows
// (kv_dim apart), max_block_rows each.
enum { BLOCK_HEADER_FLOATS = 32 };
_Static_assert(sizeof(seq_part) <= BLOCK_HEADER_FLOATS * sizeof(float), "block header too small");

static int64_t block_floats(int64_t rows, int n_kv_heads, int head_dim) {
    return BLOCK_HEADER_FLOATS + 2 * rows * n_kv_heads * head_dim;
}

int64_t ring_workspace_floats(int64_t nq, int64_t max_block_rows, int n_heads, int n_kv_heads,
                              int head_dim) {
    // two transfer blocks + one partial output (nq rows) + its lse
    return 2 * block_floats(max_block_rows, n_kv_heads, head_dim) + nq * n_heads * head_dim + nq * n_heads;
}

static _Thread_local ring_stats stats;
ring_stats *ring_stats_self(void) { return &stats; }

static void pack_block(const ring_args *a, float *block) {
    int64_t kv_dim = (int64_t)a->n_kv_heads * a->head_dim, nk = seq_part_len(&a->k_part);
    memcpy(block, &a->k_part, sizeof(seq_part));
    float *k = block + BLOCK_HEADER_FLOATS, *v = k + a->max_block_rows * kv_dim;
    for (int64_t j = 0; j < nk; j++) {
        memcpy(k + j * kv_dim, a->k + j * a->kv_stride, (size_t)kv_dim * sizeof(float));
        memcpy(v + j * kv_dim, a->v + j * a->kv_stride, (size_t)kv_dim * sizeof(float));
    }
}

// Attends every query run to every key run of the block, merging into the running (o, lse).
static void attend_block(const ring_args *a, const float *block, float *o_part, float *lse_part) {
    seq_part kp;
    memcpy(&kp, block, sizeof kp);
    int64_t kv_dim = (int64_t)a->n_kv_heads * a->head_dim, dim = (int64_t)a->n_heads * a->head_dim;
    const float *k = block + BLOCK_HEADER_FLOATS, *v = k + a->max_block_rows * kv_dim;
    int64_t q_row = 0;
    for (int t = 0; t < a->q_part.n_runs; t++) {
        seq_run qr = a->q_part.run[t];
        float *lse_run = a->lse + q_row * a->n_heads;
        int64_t k_row = 0;
        for (int u = 0; u < kp.n_runs; k_row += kp.run[u].len, u++) {
            seq_run kr = kp.run[u];
            if (qr.len == 0 || kr.len == 0) continue;
            if (a->causal && kr.start > qr.start + qr.len - 1) continue; // every key is in the future
            flash_args f = {
                .q = a->q + q_row * a->q_stride, .k = k + k_row * kv_dim, .v = v + k_row * kv_dim,
                .o = o_part, .lse = lse_part, .q_stride = a->q_stride, .kv_stride = kv_dim, .o_stride = dim,
                .nq = (int)qr.len, .nk = (int)kr.len, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
                .head_dim = a->head_dim, .q_pos0 = qr.start, .k_pos0 = kr.start, .causal = a->causal,
                .scale = a->scale,
            };
            flash_cpu(&f);
            online_softmax_merge(&(online_softmax_args){
                .o = a->o + q_row * a->o_stride, .lse = lse_run, .o_b = o_part, .lse_b = lse_part,
                .o_stride = a->o_stride, .o_b_stride = dim, .n = (int)qr.len, .n_heads = a->n_heads,
                .head_dim = a->head_dim});
        }
        q_row += qr.len;
    }
}

burst_status ring_attention(const ring_args *a, burst_error *err) {
    int G = comm_size(a->c);
    int64_t nq = seq_part_len(&a->q_part), dim = (int64_t)a->n_heads * a->head_dim;
    if (seq_part_len(&a->k_part) > a->max_block_rows)
        return BURST_FAIL(err, BURST_ERR_INVALID, "rank %d: %lld K/V rows exceed the block of %lld",
                          comm_rank(a->c), (long long)seq_part_len(&a->k_part), (long long)a->max_block_rows);
    int64_t bf = block_floats(a->max_block_rows, a->n_kv_heads, a->head_dim);
    float *block[2] = {a->work, a->work + bf}, *o_part = a->work + 2 * bf, *lse_part = o_part + nq * dim;
    for (int64_t i = 0; i < nq; i++) memset(a->o + i * a->o_stride, 0, (size_t)dim * sizeof(float));
    for (int64_t i = 0; i < nq * a->n_heads; i++) a->lse[i] = -INFINITY;
    pack_block(a, block[0]);
    for (int j = 0; j < G; j++) {
        const float *cur = block[j % 2];
        burst_status st;
        if (j + 1 < G && (st = comm_ring_start(a->c, cur, block[(j + 1) % 2], (size_t)bf * sizeof(float), err)))
            return st;
        double t0 = burst_now();
        attend_block(a, cur, o_part, lse_part);
        double t1 = burst_now();
        if (j + 1 < G && (st = comm_ring_wait(a->c, err))) return st;
        stats.compute_s += t1 - t0;
        stats.wait_s += burst_now() - t1;
        stats.steps++;
    }
    return BURST_OK;
}

burst_status sharded_merge(comm *c, float *o, int64_t o_stride, float *lse, int n, int n_heads,
                           int head_dim, float *work, burst_error *err) {
    int G = comm_size(c);
    int64_t dim = (int64_t)n_heads * head_dim, per_rank = (int64_t)n * (dim + n_heads);
    float *send = work, *all = work + per_rank;
    for (int64_t i = 0; i < n; i++) memcpy(send + i * dim, o + i * o_stride, (size_t)dim * sizeof(float));
    memcpy(send + (int64_t)n * dim, lse, (size_t)n * n_heads * sizeof(float));
    burst_status st = comm_allgather(c, send, all, (size_t)per_rank * sizeof(float), err);
    if (st) return st;
    // Merge in rank order from empty, so every rank computes bit-identical results.
    for (int64_t i = 0; i < n; i++) memset(o + i * o_stride, 0, (size_t)dim * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n * n_heads; i++) lse[i] = -INFINITY;
    for (int r = 0; r < G; r++) {
        const float *part = all + r * per_rank;
        online_softmax_merge(&(online_softmax_args){
            .o = o, .lse = lse, .o_b = part, .lse_b = part + (int64_t)n * dim, .o_stride = o_stride,
            .o_b_stride = dim, .n = n, .n_heads = n_heads, .head_dim = head_dim});
    }
    return BURST_OK;
}
