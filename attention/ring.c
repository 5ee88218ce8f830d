#include "attention/ring.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void cpu_attend(void *ctx, const flash_args *a) { (void)ctx, flash_cpu(a, 1); }
static void cpu_merge(void *ctx, const online_softmax_args *calls, int n) { (void)ctx, online_softmax_merge(calls, n); }
static void cpu_copy(void *ctx, const copy_job *jobs, int n) {
    (void)ctx;
    for (int i = 0; i < n; i++) memcpy(jobs[i].dst, jobs[i].src, jobs[i].bytes);
}
const attn_ops ring_cpu_ops = {.attend = cpu_attend, .merge = cpu_merge, .copy = cpu_copy};

// A transfer block's room: K rows then V rows, max_block_rows each (ring_attention fills and sends
// only as many rows as the largest rank holds).
static size_t block_bytes(int64_t rows, int n_kv_heads, int head_dim, burst_dtype kv_dtype) {
    return 2 * (size_t)rows * (size_t)n_kv_heads * (size_t)head_dim * dtype_size(kv_dtype);
}

size_t ring_workspace_bytes(int n_ranks, int64_t nq, int64_t max_block_rows, int n_heads, int n_kv_heads,
                            int head_dim, burst_dtype kv_dtype) {
    // two transfer blocks (none for one rank: it only reads its own rows), then one partial
    // output (nq rows) and its lse
    size_t blocks = n_ranks > 1 ? 2 * block_bytes(max_block_rows, n_kv_heads, head_dim, kv_dtype) : 0;
    return blocks + (size_t)nq * (size_t)n_heads * ((size_t)head_dim + 1) * sizeof(float);
}

static _Thread_local ring_stats stats;
ring_stats *ring_stats_self(void) { return &stats; }

// Attends every query run to every key run of a block (rows kp, K and V contiguous rows of the
// KV dtype), folding the results into (o, lse). started[t] says whether query run t holds a
// result yet: the first one is written in place, later ones go through the partial buffers and
// the merge.
static void attend_block(const ring_args *a, const attn_ops *ops, const char *k, const char *v, const seq_part *kp,
                         float *o_part, float *lse_part, int *started) {
    int64_t kv_dim = (int64_t)a->n_kv_heads * a->head_dim, dim = (int64_t)a->n_heads * a->head_dim;
    size_t row_bytes = (size_t)kv_dim * dtype_size(a->kv_dtype);
    int64_t q_row = 0;
    for (int t = 0; t < a->q_part.n_runs; q_row += a->q_part.run[t].len, t++) {
        seq_run qr = a->q_part.run[t];
        float *o_run = a->o + q_row * a->o_stride, *lse_run = a->lse + q_row * a->n_heads;
        int64_t k_row = 0;
        for (int u = 0; u < kp->n_runs; k_row += kp->run[u].len, u++) {
            seq_run kr = kp->run[u];
            if (qr.len == 0 || kr.len == 0) continue;
            if (a->causal && kr.start > qr.start + qr.len - 1) continue; // every key is in the future
            flash_args f = {
                .q = a->q + q_row * a->q_stride, .k = k + k_row * row_bytes, .v = v + k_row * row_bytes,
                .o = started[t] ? o_part : o_run, .lse = started[t] ? lse_part : lse_run,
                .q_stride = a->q_stride, .kv_stride = kv_dim, .o_stride = started[t] ? dim : a->o_stride,
                .nq = (int)qr.len, .nk = (int)kr.len, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
                .head_dim = a->head_dim, .q_pos0 = qr.start, .k_pos0 = kr.start, .causal = a->causal,
                .scale = a->scale, .kv_dtype = a->kv_dtype,
            };
            ops->attend(ops->ctx, &f);
            if (started[t])
                ops->merge(ops->ctx, &(online_softmax_args){
                    .o = o_run, .lse = lse_run, .o_b = o_part, .lse_b = lse_part, .o_stride = a->o_stride,
                    .o_b_stride = dim, .n = (int)qr.len, .n_heads = a->n_heads, .head_dim = a->head_dim}, 1);
            started[t] = 1;
        }
    }
}

burst_status ring_attention(const ring_args *a, burst_error *err) {
    const attn_ops *ops = a->ops ? a->ops : &ring_cpu_ops;
    int G = comm_size(a->c), rank = comm_rank(a->c);
    int64_t nq = seq_part_len(&a->q_part), dim = (int64_t)a->n_heads * a->head_dim;
    int64_t kv_dim = (int64_t)a->n_kv_heads * a->head_dim, nk = seq_part_len(&a->k_parts[rank]);
    // A block holds the largest rank's rows (every rank knows every k_parts, so sender and receiver
    // agree): a short prompt sends its rows, not the block's room.
    int64_t rows = 0;
    for (int r = 0; r < G; r++) {
        const int64_t len = seq_part_len(&a->k_parts[r]);
        if (len > a->max_block_rows)
            return BURST_FAIL(err, BURST_ERR_INVALID, "rank %d: %lld K/V rows exceed the block of %lld", r,
                              (long long)len, (long long)a->max_block_rows);
        if (len > rows) rows = len;
    }
    size_t room = block_bytes(a->max_block_rows, a->n_kv_heads, a->head_dim, a->kv_dtype);
    size_t bb = block_bytes(rows, a->n_kv_heads, a->head_dim, a->kv_dtype);
    size_t row_bytes = (size_t)kv_dim * dtype_size(a->kv_dtype), half = bb / 2; // V rows follow K's
    char *block[2] = {a->work, (char *)a->work + room};
    float *o_part = (float *)((char *)a->work + (G > 1 ? 2 * room : 0)), *lse_part = o_part + nq * dim;
    if (G > 1) // what step 0 sends
        ops->copy(ops->ctx, (copy_job[]){{block[0], a->k, (size_t)nk * row_bytes},
                                         {block[0] + half, a->v, (size_t)nk * row_bytes}}, 2);
    int started[PART_MAX_RUNS] = {0};
    for (int j = 0; j < G; j++) {
        burst_status st;
        // The block to send must be written, and the compute of step j-1 that read the buffer
        // about to be received into must be done, before the transfer starts.
        if (j + 1 < G && ops->sync) ops->sync(ops->ctx);
        if (j + 1 < G && (st = comm_ring_start(a->c, block[j % 2], block[(j + 1) % 2], bb, err)))
            return st;
        double t0 = burst_now();
        const char *k = j ? block[j % 2] : a->k, *v = j ? block[j % 2] + half : a->v; // step 0: own rows
        attend_block(a, ops, k, v, &a->k_parts[(rank - j + G) % G], o_part, lse_part, started);
        double t1 = burst_now();
        if (j + 1 < G && (st = comm_ring_wait(a->c, err))) return st;
        stats.compute_s += t1 - t0;
        stats.wait_s += burst_now() - t1;
        stats.steps++;
        stats.transfers += j + 1 < G;
        stats.bytes += j + 1 < G ? (int64_t)bb : 0;
    }
    for (int t = 0; t < a->q_part.n_runs; t++)
        BURST_ASSERT((started[t] || a->q_part.run[t].len == 0) && "a query run saw no key block");
    return BURST_OK;
}

int64_t sharded_merge_work_floats(int n_ranks, int n, int n_heads, int head_dim) {
    return (int64_t)(n_ranks + 1) * n * ((int64_t)n_heads * head_dim + n_heads);
}

// The copies between the parts and one rank's block of the all-gather (part after part: its o
// rows, then its lse), into the block (to_block) or out of it.
static void part_copies(const merge_part *parts, int n_parts, int64_t dim, int n_heads, float *block, int to_block,
                        copy_job *jobs) {
    for (int p = 0; p < n_parts; block += parts[p].n * (dim + n_heads), p++) {
        size_t o_bytes = (size_t)parts[p].n * dim * sizeof(float), lse_bytes = (size_t)parts[p].n * n_heads * sizeof(float);
        float *lse_at = block + parts[p].n * dim;
        jobs[2 * p] = to_block ? (copy_job){block, parts[p].o, o_bytes} : (copy_job){parts[p].o, block, o_bytes};
        jobs[2 * p + 1] = to_block ? (copy_job){lse_at, parts[p].lse, lse_bytes} : (copy_job){parts[p].lse, lse_at, lse_bytes};
    }
}

burst_status sharded_merge(comm *c, const attn_ops *ops, const merge_part *parts, int n_parts, int n_heads,
                           int head_dim, float *work, burst_error *err) {
    if (!ops) ops = &ring_cpu_ops;
    int G = comm_size(c);
    int64_t dim = (int64_t)n_heads * head_dim, n = 0;
    for (int p = 0; p < n_parts; p++) n += parts[p].n;
    int64_t per_rank = n * (dim + n_heads);
    float *send = work, *all = work + per_rank;
    copy_job *jobs = burst_malloc(sizeof *jobs * 2 * (size_t)(n_parts + 1));
    online_softmax_args *merges = burst_malloc(sizeof *merges * (size_t)(n_parts + 1));
    part_copies(parts, n_parts, dim, n_heads, send, 1, jobs);
    ops->copy(ops->ctx, jobs, 2 * n_parts);
    if (ops->sync) ops->sync(ops->ctx);
    burst_status st = comm_allgather(c, send, all, (size_t)per_rank * sizeof(float), err);
    if (st == BURST_OK) {
        // Start from rank 0's partials and merge the others in rank order: bit-identical on every
        // rank. The parts' outputs are disjoint, so each rank's merges go as one batch.
        part_copies(parts, n_parts, dim, n_heads, all, 0, jobs);
        ops->copy(ops->ctx, jobs, 2 * n_parts);
        for (int r = 1; r < G; r++) {
            const float *block = all + r * per_rank;
            for (int p = 0; p < n_parts; block += parts[p].n * (dim + n_heads), p++)
                merges[p] = (online_softmax_args){
                    .o = parts[p].o, .lse = parts[p].lse, .o_b = block, .lse_b = block + parts[p].n * dim,
                    .o_stride = dim, .o_b_stride = dim, .n = parts[p].n, .n_heads = n_heads, .head_dim = head_dim};
            ops->merge(ops->ctx, merges, n_parts);
        }
    }
    free(jobs), free(merges);
    return st;
}
