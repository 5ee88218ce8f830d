// BurstAttention across G ranks (GAO): each rank keeps its queries and passes its K/V block
// around the ring (send to rank+1, receive from rank-1) for G steps; after each step it runs the
// local flash attention (attention/flash.h) of its queries against the block in hand and folds
// the result into its running output with the online-softmax merge. Double buffering: while
// step j computes on one buffer, the transfer for step j+1 fills the other (step 0 reads the
// rank's own rows in place). Only the KV heads travel (GQA), in the KV cache's dtype (float32 or
// bf16). Nothing of size N x N, or N/G x N/G, is ever allocated.
//
// Also the sharded all-gather merge used by decode: every rank attends the same queries to its
// own shard, then the partial (O, lse) of all ranks are gathered and merged in rank order, so
// every rank ends with the same result.
//
// Rows and positions: a rank's queries (and its K/V rows) are the runs of a seq_part in row
// order; row i of run t has position run[t].start + i. Every query position must also be a key
// position of some rank (self-attention), so every query row sees at least one key block. The
// caller owns every buffer, including the workspace (ring_workspace_floats). One call per rank,
// from that rank's thread; every rank of the communicator must make the same calls in the same
// order.
#pragma once
#include "attention/flash.h"
#include "attention/online_softmax.h"
#include "attention/partition.h"
#include "comm/comm.h"

// How the ring computes and moves data: NULL means the CPU functions (flash_cpu,
// online_softmax_merge, memcpy); a backend passes its own so that buffers may live on a device.
// merge and copy take batches of independent calls, which a GPU may run in one launch.
typedef struct {
    void (*attend)(void *ctx, const flash_args *a);
    void (*merge)(void *ctx, const online_softmax_args *calls, int n);
    void (*copy)(void *ctx, const copy_job *jobs, int n);
    void (*sync)(void *ctx); // optional: wait for queued work (before a buffer goes to comm)
    void *ctx;
} attn_ops;

// What NULL ops mean: flash_cpu, online_softmax_merge, memcpy.
extern const attn_ops ring_cpu_ops;

typedef struct {
    comm *c;
    const attn_ops *ops;  // NULL: CPU
    const float *q;       // (nq, n_heads, head_dim), row i at q + i*q_stride; nq = len of q_part
    const void *k, *v;    // (nk, n_kv_heads, head_dim) contiguous rows; nk = len of k_parts[rank]
    burst_dtype kv_dtype; // of k and v: DTYPE_F32 or DTYPE_BF16
    float *o;             // (nq, n_heads, head_dim), row i at o + i*o_stride
    float *lse;           // per query run t, a block (n_heads, run[t].len), blocks in run order
    int64_t q_stride, o_stride;
    seq_part q_part;
    const seq_part *k_parts; // (n_ranks) the K/V rows of every rank, so a received block is known
    int n_heads, n_kv_heads, head_dim, causal;
    float scale;
    int64_t max_block_rows; // >= the largest K/V row count of any rank (sizes the transfers)
    void *work;             // ring_workspace_bytes(...) bytes, 16-byte aligned
} ring_args;

size_t ring_workspace_bytes(int n_ranks, int64_t nq, int64_t max_block_rows, int n_heads, int n_kv_heads,
                            int head_dim, burst_dtype kv_dtype);
burst_status ring_attention(const ring_args *a, burst_error *err);

// Time spent in ring steps, split into local compute and waiting for the transfer that ran
// beside it (seconds, summed since the caller last zeroed them). For the overlap benchmark;
// per thread.
typedef struct {
    double compute_s, wait_s;
    int64_t steps, transfers; // steps; steps that overlapped a transfer (all but the last)
    int64_t bytes;            // K/V bytes those transfers sent
} ring_stats;
ring_stats *ring_stats_self(void);

// The partial attention of n query rows on this rank: o (n, n_heads, head_dim) contiguous and
// lse (n_heads, n).
typedef struct {
    float *o, *lse;
    int n;
} merge_part;

// Each part holds this rank's partial over its shard; afterwards the merge of all ranks'
// partials, identical on every rank. All parts (a step's decoding sequences) go in one
// all-gather, and each op on them in one batch: copies in, copies out, then G - 1 merges. work: sharded_merge_work_floats(G, total rows of the parts, ...) floats.
int64_t sharded_merge_work_floats(int n_ranks, int n, int n_heads, int head_dim);
burst_status sharded_merge(comm *c, const attn_ops *ops, const merge_part *parts, int n_parts, int n_heads,
                           int head_dim, float *work, burst_error *err);
