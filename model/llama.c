#include "llama.h"

#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/cluster.h"
#include "comm/comm.h"
#include "rank_pool.h"
#include "shard_plan.h"

typedef struct {
    burst_weight attn_norm, wq, wk, wv, wo; // norms (1, dim); wq/wo (dim, dim); wk/wv (kv_dim, dim)
    burst_weight ffn_norm, w_gate, w_up, w_down; // gate/up (hidden, dim); down (dim, hidden)
} llama_layer;

// Scratch for one forward call of up to max_batch rows on one rank, in backend memory.
typedef struct {
    float *x;        // (max_batch, dim) the residual stream
    float *xb, *xb2; // (max_batch, dim); xb holds the matmuls' input in the backend's act dtype
    float *q;        // (max_batch, dim)
    float *k, *v;    // (max_batch, kv_dim) each, in q's allocation after it
    float *att;      // (max_batch, dim)
    float *lse;      // (n_heads, max_batch)
    float *part_o;   // (max_batch, dim) replicated segments' partials over their new tokens (G > 1)
    float *part_lse; // (n_heads, max_batch) (G > 1)
    float *hb, *hb2; // (max_batch, hidden_dim) each in the act dtype, hb2 in hb's allocation
    float *last;     // (max_logits, dim) the rows whose logits llama_forward returns (rank 0 only)
    float *logits;   // (max_logits, vocab) their logits, or a block of all_rows rows' (rank 0 only)
    void *ring;      // ring_workspace_bytes(G, max_batch, shard_cap, ...) (G > 1; else NULL)
    float *merge;    // sharded_merge_work_floats(G, max_batch, ...) (G > 1; else NULL)
} llama_scratch;

typedef struct {
    int rank;
    burst_backend *be;
    comm *c;
    attn_ops ops; // the ring's view of this rank's backend
    burst_weight embed, final_norm, lm_head;
    llama_layer *layers; // (n_layers)
    kv_cache kv;         // this rank's shard of every slot, shard_cap rows each
    llama_scratch s;
    size_t scratch_bytes;
    bool sizing_scratch; // alloc_scratch only adds up the bytes (check_memory)
    int *tok;     // (max_batch) host: token of each row this rank runs
    int64_t *pos; // (max_batch) host: its position
    int *row0;    // (n_slots) host: first row of each segment
    flash_args *calls;  // (2 n_slots) host: the attention calls of attend_local / attend_replicated
    convert_job *jobs;  // (2 max_batch) host: their cache writes (and bf16 roundings)
    merge_part *parts;  // (n_slots) host: attend_replicated's partials to merge across ranks
    online_softmax_args *merges; // (n_slots) host: rank 0's merges of the new tokens' partials
    copy_job *copies;   // (n_slots) host: each segment's last rows, gathered for the logits
    ring_stats ring;  // this rank's ring steps since load
    burst_status st;
    burst_error err;
} llama_rank;

// The call being run, shared by the ranks.
typedef struct {
    const llama_segment *segs;
    const int *tokens;
    float *logits;
    llama_rows_fn rows;
    void *rows_ctx;
    int copy_dst, copy_src; // llama_slot_copy's slots
} llama_call;

struct llama_model {
    llama_config cfg;
    rope_params rope;
    llama_options opt;
    char backend[16], comm_name[16]; // opt.backend and opt.comm point here
    weights *w;
    size_t mapped_bytes; // of the weights that rank 0's backend computes on where they are mapped
    int G;
    int first, n_local;   // the ranks this process runs: first .. first + n_local - 1
    int threads_per_rank; // CPU threads of each rank's OpenMP team and backend
    int64_t shard_cap;  // K/V rows per slot per rank
    int64_t *shard_len; // (n_slots, G) rows used, by every rank (each node keeps the same books)
    // (n_slots, ctx) the rank whose shard holds each position's K/V. A shard keeps its rows in
    // position order (shard_plan.h), so a slot is cut to a prefix by shortening each shard.
    uint8_t *pos_rank;
    llama_rank *ranks;  // (n_local)
    cluster *cl;        // NULL: one process
    comm_group *comm;
    rank_pool *pool;
    shard_plan plan;
    llama_call call;
    int row_block;        // rows of an all_rows segment's logits computed at a time
    float *rows_host;     // (row_block, vocab) those logits on the host; the process of rank 0 only
    int *sampled;         // (max_logits) backend_sample's id of each row of logits; the process of rank 0 only
    float *temperature, *unit; // (max_logits each) its arguments
    atomic_int faulty;    // a node was lost or NCCL aborted: see llama_fault (read by other threads; set after fault)
    burst_error fault;
};

// What the nodes of a cluster agree on at start: the leader's options, and every node's model.
typedef struct {
    llama_config cfg;
    uint64_t weight_bytes;
    int32_t ctx, n_slots, max_batch, max_logits, n_ranks, kv_dtype, weights_quant;
    char backend[16], comm[16];
    double node_timeout_s;
} node_info;

// The leader's commands to its workers (cluster_broadcast), as int32 words.
// FORWARD n_segs n_tokens (slot n all_rows n_logits)* token*; TRUNCATE slot len; COPY dst src len
enum { CMD_FORWARD, CMD_TRUNCATE, CMD_COPY, CMD_QUIT };

static void ops_attend(void *ctx, const flash_args *a) { backend_attention(ctx, a); }
static void ops_merge(void *ctx, const online_softmax_args *calls, int n) { backend_merge(ctx, calls, n); }
static void ops_copy(void *ctx, const copy_job *jobs, int n) { backend_copy(ctx, jobs, n); }
static void ops_sync(void *ctx) { backend_sync(ctx); }

// The checkpoint's tensor named by fmt and ap, of shape (rows, cols), or (cols) where rows is 0.
static burst_status find_tensor_v(llama_model *m, const weights_tensor **t, int64_t rows, int64_t cols,
                                  burst_error *err, const char *fmt, va_list ap) {
    char name[160];
    vsnprintf(name, sizeof name, fmt, ap);
    int64_t shape[2] = {rows, cols};
    return rows ? weights_get(m->w, name, 2, shape, t, err) : weights_get(m->w, name, 1, shape + 1, t, err);
}

static burst_status find_tensor(llama_model *m, const weights_tensor **t, int64_t rows, int64_t cols,
                                burst_error *err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static burst_status find_tensor(llama_model *m, const weights_tensor **t, int64_t rows, int64_t cols,
                                burst_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    burst_status st = find_tensor_v(m, t, rows, cols, err, fmt, ap);
    va_end(ap);
    return st;
}

// Makes n tensors rank R's weights, as one group (backend_weight_group).
static burst_status take_weights(llama_model *m, llama_rank *R, const weights_tensor *const *t, int n,
                                 burst_weight *out, burst_error *err) {
    burst_status st = backend_weight_group(R->be, t, n, out, err);
    if (st) return st;
    // Host ranks share the first one's weights; device ranks each upload theirs.
    const int last_reader = R->rank == (backend_on_host(m->opt.backend) ? m->first : m->first + m->n_local - 1);
    for (int i = 0; i < n; i++)
        if (out[i].data == t[i]->data && R->rank == m->first) m->mapped_bytes += t[i]->nbytes;
        else if (out[i].data != t[i]->data && last_reader) weights_release(t[i]); // the backend's copy is all it reads
    return BURST_OK;
}

// find_tensor and take_weights of one tensor.
static burst_status get_weight(llama_model *m, llama_rank *R, burst_weight *out, int64_t rows, int64_t cols,
                               burst_error *err, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
static burst_status get_weight(llama_model *m, llama_rank *R, burst_weight *out, int64_t rows, int64_t cols,
                               burst_error *err, const char *fmt, ...) {
    const weights_tensor *t;
    va_list ap;
    va_start(ap, fmt);
    burst_status st = find_tensor_v(m, &t, rows, cols, err, fmt, ap);
    va_end(ap);
    return st ? st : take_weights(m, R, &t, 1, out, err);
}

static burst_status load_tensors(llama_model *m, llama_rank *R, burst_error *err) {
    const llama_config *c = &m->cfg;
    const double t0 = burst_now();
    int64_t dim = c->dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim, hid = c->hidden_dim;
    burst_status st;
    const weights_tensor *t[3];
    if ((st = get_weight(m, R, &R->embed, c->vocab_size, dim, err, "model.embed_tokens.weight")) ||
        (st = get_weight(m, R, &R->final_norm, 0, dim, err, "model.norm.weight")))
        return st;
    if (c->tie_embeddings) R->lm_head = R->embed;
    else if ((st = get_weight(m, R, &R->lm_head, c->vocab_size, dim, err, "lm_head.weight")))
        return st;
    R->layers = burst_calloc((size_t)c->n_layers, sizeof(llama_layer));
    for (int l = 0; l < c->n_layers; l++) {
        llama_layer *L = &R->layers[l];
        // Q, K, V, and gate and up, each as a group: one batched GEMM apiece on a GPU.
        burst_weight qkv[3], gate_up[2];
        if ((st = get_weight(m, R, &L->attn_norm, 0, dim, err, "model.layers.%d.input_layernorm.weight", l)) ||
            (st = find_tensor(m, &t[0], dim, dim, err, "model.layers.%d.self_attn.q_proj.weight", l)) ||
            (st = find_tensor(m, &t[1], kv_dim, dim, err, "model.layers.%d.self_attn.k_proj.weight", l)) ||
            (st = find_tensor(m, &t[2], kv_dim, dim, err, "model.layers.%d.self_attn.v_proj.weight", l)) ||
            (st = take_weights(m, R, t, 3, qkv, err)) ||
            (st = get_weight(m, R, &L->wo, dim, dim, err, "model.layers.%d.self_attn.o_proj.weight", l)) ||
            (st = get_weight(m, R, &L->ffn_norm, 0, dim, err, "model.layers.%d.post_attention_layernorm.weight", l)) ||
            (st = find_tensor(m, &t[0], hid, dim, err, "model.layers.%d.mlp.gate_proj.weight", l)) ||
            (st = find_tensor(m, &t[1], hid, dim, err, "model.layers.%d.mlp.up_proj.weight", l)) ||
            (st = take_weights(m, R, t, 2, gate_up, err)) ||
            (st = get_weight(m, R, &L->w_down, dim, hid, err, "model.layers.%d.mlp.down_proj.weight", l)))
            return st;
        L->wq = qkv[0], L->wk = qkv[1], L->wv = qkv[2], L->w_gate = gate_up[0], L->w_up = gate_up[1];
        // Uploading a large checkpoint to a device, or copying it into AMX tiles or quantizing it,
        // takes a while: say how far it got.
        if (weights_bytes(m->w) > ((size_t)256 << 20) && (l + 1) % 8 == 0 && burst_now() - t0 > 1.0)
            LOG_I("rank %d: %d of %d layers on the %s backend%s%s", R->rank, l + 1, c->n_layers, m->opt.backend,
                  m->opt.weights_quant ? ", quantized to " : "", m->opt.weights_quant ? quant_name(m->opt.weights_quant) : "");
    }
    return BURST_OK;
}

// n floats rounded up to a multiple of 256 bytes.
static int64_t round_up_256(int64_t n_floats) { return (n_floats + 63) / 64 * 64; }

static float *scratch(llama_rank *R, int64_t n_floats) {
    size_t bytes = (size_t)n_floats * sizeof(float);
    R->scratch_bytes += bytes;
    return R->sizing_scratch || !bytes ? NULL : backend_alloc(R->be, bytes);
}

// Allocates a rank's scratch, or with size_only adds up its bytes alone; returns them.
static size_t alloc_scratch(llama_model *m, llama_rank *R, bool size_only) {
    R->scratch_bytes = 0;
    R->sizing_scratch = size_only;
    const llama_config *c = &m->cfg;
    int64_t B = m->opt.max_batch, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    llama_scratch *s = &R->s;
    s->x = scratch(R, B * c->dim);
    s->xb = scratch(R, B * c->dim);
    s->xb2 = scratch(R, B * c->dim);
    // q, k, v in one buffer, as hb and hb2: each trio or pair is one batched GEMM's output on a
    // GPU (backend_matmul_group), which wants its matrices equally spaced. Each starts 256-byte
    // aligned, as an allocation of its own would (the GPU's vector loads and GEMMs want it).
    const int64_t q_span = round_up_256(B * c->dim), kv_span = round_up_256(B * kv_dim);
    s->q = scratch(R, q_span + 2 * kv_span);
    s->k = s->q ? s->q + q_span : NULL;
    s->v = s->k ? s->k + kv_span : NULL;
    s->att = scratch(R, B * c->dim);
    s->lse = scratch(R, B * c->n_heads);
    s->part_o = scratch(R, m->G > 1 ? B * c->dim : 0); // replicated segments only (G > 1)
    s->part_lse = scratch(R, m->G > 1 ? B * c->n_heads : 0);
    int64_t hidden_floats = round_up_256((B * c->hidden_dim * (int64_t)dtype_size(backend_act_dtype(R->be)) + 3) / 4);
    s->hb = scratch(R, 2 * hidden_floats); // in the act dtype: half the bytes on a GPU
    s->hb2 = s->hb ? s->hb + hidden_floats : NULL;
    if (R->rank == 0) { // the logits are computed on rank 0 alone
        s->last = scratch(R, (int64_t)llama_max_logits(m) * c->dim);
        s->logits = scratch(R, (int64_t)llama_max_logits(m) * c->vocab_size);
    }
    size_t ring_bytes = ring_workspace_bytes(m->G, B, m->shard_cap, c->n_heads, c->n_kv_heads, c->head_dim, m->opt.kv_dtype);
    // One rank (G = 1) attends without the ring and merges nothing across ranks.
    s->ring = scratch(R, m->G > 1 ? (int64_t)((ring_bytes + sizeof(float) - 1) / sizeof(float)) : 0);
    s->merge = scratch(R, m->G > 1 ? sharded_merge_work_floats(m->G, (int)B, c->n_heads, c->head_dim) : 0);
    R->sizing_scratch = false;
    if (size_only) return R->scratch_bytes;
    R->tok = burst_calloc((size_t)B, sizeof(int));
    R->pos = burst_calloc((size_t)B, sizeof(int64_t));
    R->row0 = burst_calloc((size_t)m->opt.n_slots, sizeof(int));
    R->calls = burst_calloc(2 * (size_t)m->opt.n_slots, sizeof *R->calls);
    R->jobs = burst_calloc(2 * (size_t)B, sizeof *R->jobs); // B >= n_slots
    R->parts = burst_calloc((size_t)m->opt.n_slots, sizeof *R->parts);
    R->merges = burst_calloc((size_t)m->opt.n_slots, sizeof *R->merges);
    R->copies = burst_calloc((size_t)m->opt.n_slots, sizeof *R->copies);
    return R->scratch_bytes;
}

static void free_rank(llama_rank *R) {
    llama_scratch *s = &R->s;
    void *bufs[] = {s->x, s->xb, s->xb2, s->q, s->att, s->lse, s->part_o, s->part_lse, // (q holds k and v,
                    s->hb, s->last, s->logits, s->ring, s->merge};                   // hb holds hb2)
    for (size_t i = 0; R->be && i < sizeof bufs / sizeof bufs[0]; i++) backend_release(R->be, bufs[i]);
    if (R->kv.k) kv_cache_free(&R->kv, R->be);
    free(R->tok), free(R->pos), free(R->row0), free(R->calls), free(R->jobs), free(R->parts), free(R->merges), free(R->copies);
    free(R->layers);
    backend_free(R->be);
}

// Refuses KV caches and scratch that the ranks' memory cannot hold, saying what would fit,
// before they are allocated: on a GPU the allocation would abort; on the CPU it would be
// granted, and fail (or push the host into swap) only once requests fill it. Ranks whose
// backends name the same pool share its memory.
static burst_status check_memory(llama_model *m, burst_error *err) {
    const llama_config *c = &m->cfg;
    kv_cache want = {.n_slots = m->opt.n_slots, .n_layers = c->n_layers, .ctx = (int)m->shard_cap,
                     .kv_dim = c->n_kv_heads * c->head_dim, .dtype = m->opt.kv_dtype};
    // What grows with the context (the cache and the ring's transfer blocks, the same on every
    // rank, and what an attention call over a rank's keys allocates while it runs), and what
    // --batch sizes (the rest of the scratch, rank 0 holding the logits too, and what the widest
    // matmul of a step allocates while it runs).
    size_t ring_blocks = ring_workspace_bytes(m->G, 0, m->shard_cap, c->n_heads, c->n_kv_heads, c->head_dim,
                                              m->opt.kv_dtype);
    size_t ctx_part = kv_cache_bytes(&want) + ring_blocks, attn_part[m->n_local], batch_part[m->n_local];
    const int64_t widest = c->hidden_dim > c->dim ? c->hidden_dim : c->dim;
    for (int i = 0; i < m->n_local; i++) {
        // (the attention's bytes that do not grow with the keys count with --batch's)
        burst_backend *be = m->ranks[i].be;
        const size_t attn_fixed = backend_attention_transient_bytes(be, m->opt.max_batch, m->opt.n_slots, 0, c->n_heads,
                                                                    c->n_kv_heads, c->head_dim, m->opt.kv_dtype);
        attn_part[i] = backend_attention_transient_bytes(be, m->opt.max_batch, m->opt.n_slots, m->shard_cap, c->n_heads,
                                                         c->n_kv_heads, c->head_dim, m->opt.kv_dtype) - attn_fixed;
        batch_part[i] = alloc_scratch(m, &m->ranks[i], true) - ring_blocks +
                        backend_matmul_transient_bytes(be, m->opt.max_batch, widest) + attn_fixed;
    }
    int pool[m->n_local];
    size_t free_b[m->n_local];
    for (int i = 0; i < m->n_local; i++) free_b[i] = backend_memory_free(m->ranks[i].be, &pool[i]);
    for (int i = 0; i < m->n_local; i++) {
        int sharing = 0, seen = 0;
        size_t batch_b = 0, attn_b = 0;
        for (int j = 0; j < m->n_local; j++)
            if (pool[j] == pool[i]) sharing++, seen |= j < i, batch_b += batch_part[j], attn_b += attn_part[j];
        size_t kv_b = ctx_part * (size_t)sharing;
        if (seen || !free_b[i] || kv_b + attn_b + batch_b <= free_b[i]) continue;
        char where[32];
        snprintf(where, sizeof where, pool[i] < 0 ? "%s" : "%s:%d", m->opt.backend, pool[i]);
        if (batch_b >= free_b[i])
            return BURST_FAIL(err, BURST_ERR_NOMEM, "%d rank(s) on %s: the working buffers of --batch %d take %.2f GB "
                              "(before any KV cache), more than the %.2f GB free there: want a smaller --batch",
                              sharing, where, m->opt.max_batch, batch_b / 1e9, free_b[i] / 1e9);
        // A rank holds shard_cap rows of each slot: ctx, or ctx / G + ctx / (8 G) + 8 on G > 1 ranks.
        double rows = (double)(free_b[i] - batch_b) / ((double)(kv_b + attn_b) / (double)m->shard_cap);
        long long fit = (long long)(m->G == 1 ? rows : (rows - 9) * 8 * m->G / 9);
        return BURST_FAIL(err, BURST_ERR_NOMEM,
                          "%d rank(s) on %s: KV caches of %d slot(s) x %d tokens of context (%d layers, %s) take "
                          "%.2f GB (and the working buffers of --batch %d %.3f GB, the attention's copies of a "
                          "sequence's K/V %.3f GB), more than the %.2f GB free there: about %lld tokens of "
                          "context would fit%s, or fewer slots", sharing, where, m->opt.n_slots, m->opt.ctx,
                          c->n_layers, dtype_name(m->opt.kv_dtype), kv_b / 1e9, m->opt.max_batch, batch_b / 1e9,
                          attn_b / 1e9, free_b[i] / 1e9, fit > 0 ? fit : 0,
                          m->opt.kv_dtype == DTYPE_F32 ? " (twice as many with a bf16 cache)" : "");
    }
    return BURST_OK;
}

// Loads this process's i-th rank (rank first + i) on its device i: backend and weights. Ranks in
// host memory compute on the same weights: the first rank's (its backend owns any copies it made,
// as the AMX tiles).
static burst_status load_rank(llama_model *m, int i, burst_error *err) {
    llama_rank *R = &m->ranks[i];
    R->rank = m->first + i;
    burst_status st = backend_new(m->opt.backend, i, m->threads_per_rank, m->opt.weights_quant, &R->be, err);
    if (st) return st;
    R->ops = (attn_ops){.attend = ops_attend, .merge = ops_merge, .copy = ops_copy, .sync = ops_sync, .ctx = R->be};
    if (i == 0 || !backend_on_host(m->opt.backend)) return load_tensors(m, R, err);
    const llama_rank *first = &m->ranks[0];
    R->embed = first->embed, R->final_norm = first->final_norm, R->lm_head = first->lm_head;
    R->layers = burst_malloc(sizeof(llama_layer) * (size_t)m->cfg.n_layers);
    memcpy(R->layers, first->layers, sizeof(llama_layer) * (size_t)m->cfg.n_layers);
    return BURST_OK;
}

static void set_name(char *dst, size_t cap, const char **opt_field, const char *value) {
    snprintf(dst, cap, "%s", value);
    *opt_field = dst;
}

// Forms the cluster, if any: the workers take the leader's options, and every node checks that
// all of them loaded the same model.
static burst_status join_cluster(llama_model *m, const char *dir, burst_error *err) {
    llama_options *o = &m->opt;
    double timeout = o->join_timeout_s > 0 ? o->join_timeout_s : 600;
    burst_status st;
    if (o->worker) {
        if (!o->coordinator) return BURST_FAIL(err, BURST_ERR_INVALID, "a worker needs the coordinator's address");
        st = cluster_join(o->coordinator, timeout, o->cluster_key, &m->cl, err);
    } else if (o->n_nodes > 1) {
        if (!o->coordinator) return BURST_FAIL(err, BURST_ERR_INVALID, "%d nodes need a coordinator address", o->n_nodes);
        st = cluster_lead(o->coordinator, o->n_nodes, timeout, o->cluster_key, &m->cl, err);
    } else {
        return BURST_OK;
    }
    if (st) return st;
    int P = cluster_nodes(m->cl);
    node_info mine = {.cfg = m->cfg, .weight_bytes = weights_bytes(m->w), .ctx = o->ctx, .n_slots = o->n_slots,
                      .max_batch = o->max_batch, .max_logits = o->max_logits, .n_ranks = o->n_ranks, .kv_dtype = (int32_t)o->kv_dtype,
                      .weights_quant = o->weights_quant,
                      .node_timeout_s = o->node_timeout_s};
    snprintf(mine.backend, sizeof mine.backend, "%s", o->backend);
    snprintf(mine.comm, sizeof mine.comm, "%s", o->comm ? o->comm : "");
    node_info *all = burst_malloc(sizeof *all * (size_t)P);
    if (!(st = cluster_allgather(m->cl, &mine, all, sizeof mine, err))) {
        const node_info *lead = &all[0];
        for (int node = 1; !st && node < P; node++)
            if (memcmp(&all[node].cfg, &lead->cfg, sizeof lead->cfg) || all[node].weight_bytes != lead->weight_bytes)
                st = BURST_FAIL(err, BURST_ERR_INVALID, "node %d has another model than the leader (%d layers, dim %d, "
                                "%llu bytes of weights there; %d, %d, %llu on the leader); %s here",
                                node, all[node].cfg.n_layers, all[node].cfg.dim, (unsigned long long)all[node].weight_bytes,
                                lead->cfg.n_layers, lead->cfg.dim, (unsigned long long)lead->weight_bytes, dir);
        o->ctx = lead->ctx, o->n_slots = lead->n_slots, o->max_batch = lead->max_batch, o->n_ranks = lead->n_ranks;
        o->max_logits = lead->max_logits;
        o->kv_dtype = (burst_dtype)lead->kv_dtype, o->node_timeout_s = lead->node_timeout_s;
        o->weights_quant = lead->weights_quant;
        o->n_nodes = P;
        set_name(m->backend, sizeof m->backend, &o->backend, lead->backend);
        if (lead->comm[0]) set_name(m->comm_name, sizeof m->comm_name, &o->comm, lead->comm);
    }
    free(all);
    return st;
}

// The transport: threads in one process; across nodes tcp for the CPU and NCCL for GPUs.
static burst_status open_comm(llama_model *m, burst_error *err) {
    const char *be = m->opt.backend, *name = m->opt.comm;
    if (!name) name = !m->cl ? "threads" : backend_on_device(be) ? "nccl" : "tcp";
    if (!strcmp(name, "threads")) {
        if (m->cl) return BURST_FAIL(err, BURST_ERR_INVALID, "comm threads cannot span %d nodes (want tcp or nccl)", cluster_nodes(m->cl));
        m->comm = comm_threads_group_new(m->G, backend_transfer(m->ranks[0].be));
        return BURST_OK;
    }
    double stall_s = m->opt.node_timeout_s > 0 ? m->opt.node_timeout_s : 600;
    if (!strcmp(name, "tcp")) {
        if (!backend_on_host(be))
            return BURST_FAIL(err, BURST_ERR_INVALID, "comm tcp moves host memory: it needs a cpu backend (not %s)", be);
        return comm_tcp_group_new(m->cl, m->G, stall_s, &m->comm, err);
    }
    if (!strcmp(name, "nccl")) {
        if (!backend_on_device(be)) return BURST_FAIL(err, BURST_ERR_INVALID, "comm nccl needs a cuda backend (not %s)", be);
        return comm_nccl_group_new(m->cl, m->G, stall_s, &m->comm, err);
    }
    return BURST_FAIL(err, BURST_ERR_INVALID, "comm '%s' unknown (want threads, tcp or nccl)", name);
}

// The dtype of most of the checkpoint's bytes.
static burst_dtype weights_main_dtype(const weights *w) {
    size_t bytes[DTYPE_BF16 + 1] = {0};
    for (int64_t i = 0; i < weights_count(w); i++) bytes[weights_at(w, i)->dtype] += weights_at(w, i)->nbytes;
    burst_dtype most = DTYPE_F32;
    for (int t = 0; t <= DTYPE_BF16; t++)
        if (bytes[t] > bytes[most]) most = (burst_dtype)t;
    return most;
}

burst_status llama_load(const char *dir, const llama_options *opt, llama_model **out,
                        burst_error *err) {
    *out = NULL;
    llama_model *m = burst_calloc(1, sizeof *m);
    burst_status st = weights_open(dir, &m->w, err);
    if (st) goto fail;
    m->cfg = *weights_config(m->w);
    m->rope = rope_params_of(&m->cfg);
    m->opt = *opt;
    if (m->opt.ctx <= 0) m->opt.ctx = m->cfg.max_seq_len;
    if (m->opt.n_slots <= 0) m->opt.n_slots = 1;
    if (m->opt.max_batch <= 0) m->opt.max_batch = 512;
    if (m->opt.max_batch < m->opt.n_slots) m->opt.max_batch = m->opt.n_slots; // one decode token per slot
    if (m->opt.n_ranks <= 0) m->opt.n_ranks = 1;
    if (!m->opt.backend) m->opt.backend = backend_default(weights_main_dtype(m->w));
    if (m->opt.kv_default) m->opt.kv_dtype = backend_bf16(m->opt.backend) ? DTYPE_BF16 : DTYPE_F32;
    if ((st = join_cluster(m, dir, err))) goto fail;
    if (m->opt.ctx > m->cfg.max_seq_len)
        LOG_W("%s: ctx %d is past max_position_embeddings %d; quality may fall beyond it", dir,
              m->opt.ctx, m->cfg.max_seq_len);
    m->G = m->opt.n_ranks;
    if (m->G > 255) { // pos_rank holds a rank in a byte
        st = BURST_FAIL(err, BURST_ERR_INVALID, "%d ranks (want at most 255)", m->G);
        goto fail;
    }
    if (m->G < cluster_nodes(m->cl)) {
        st = BURST_FAIL(err, BURST_ERR_INVALID, "%d ranks over %d nodes (want at least one rank a node)", m->G,
                        cluster_nodes(m->cl));
        goto fail;
    }
    cluster_ranks(m->cl, cluster_node(m->cl), m->G, &m->first, &m->n_local);
    int threads = m->opt.n_threads > 0 ? m->opt.n_threads : omp_get_num_procs();
    m->threads_per_rank = threads / m->n_local > 0 ? threads / m->n_local : 1;
    // Zigzag shards differ by at most two rows per prefill call and decode refills the smallest:
    // an eighth more than an even share (and 8 rows) leaves room for that imbalance.
    m->shard_cap = m->G == 1 ? m->opt.ctx : (m->opt.ctx + m->G - 1) / m->G + m->opt.ctx / (8 * m->G) + 8;
    m->shard_len = burst_calloc((size_t)m->opt.n_slots * m->G, sizeof(int64_t));
    // 64 rows make the lm_head a matrix product rather than row by row, in 64 x vocab floats.
    enum { ROW_BLOCK = 64 };
    m->row_block = m->opt.max_batch < ROW_BLOCK ? m->opt.max_batch : ROW_BLOCK;
    // The logits buffers hold a block of all_rows rows too; a call has at most max_batch rows.
    int *ml = &m->opt.max_logits;
    if (*ml < m->opt.n_slots) *ml = m->opt.n_slots;
    if (*ml < m->row_block) *ml = m->row_block;
    if (*ml > m->opt.max_batch) *ml = m->opt.max_batch;
    if (m->first == 0) {
        m->rows_host = burst_malloc(sizeof(float) * (size_t)m->row_block * (size_t)m->cfg.vocab_size);
        m->sampled = burst_malloc(sizeof(int) * (size_t)*ml);
        m->temperature = burst_malloc(sizeof(float) * (size_t)*ml), m->unit = burst_malloc(sizeof(float) * (size_t)*ml);
    }
    m->ranks = burst_calloc((size_t)m->n_local, sizeof(llama_rank));
    for (int i = 0; i < m->n_local; i++)
        if ((st = load_rank(m, i, err))) goto fail;
    if ((st = check_memory(m, err))) goto fail;
    // The CPU computes on the mapping in place: paged in now (not where the backend copied most of it).
    if (backend_on_host(m->opt.backend) && 2 * m->mapped_bytes > weights_bytes(m->w)) weights_read_all(m->w);
    for (int i = 0; i < m->n_local; i++) {
        llama_rank *R = &m->ranks[i];
        alloc_scratch(m, R, false);
        if ((st = kv_cache_init(&R->kv, R->be, m->opt.n_slots, m->cfg.n_layers, (int)m->shard_cap,
                                m->cfg.n_kv_heads * m->cfg.head_dim, m->opt.kv_dtype, err)))
            goto fail;
    }
    m->pos_rank = burst_calloc((size_t)m->opt.n_slots * (size_t)m->opt.ctx, 1);
    if ((st = open_comm(m, err))) goto fail;
    for (int i = 0; i < m->n_local; i++) m->ranks[i].c = comm_group_rank(m->comm, m->ranks[i].rank);
    if (m->cl) LOG_I("node %d of %d: ranks %d..%d of %d", cluster_node(m->cl), cluster_nodes(m->cl), m->first,
                     m->first + m->n_local - 1, m->G);
    m->pool = rank_pool_new(m->n_local, m->threads_per_rank);
    shard_plan_init(&m->plan, m->G, m->opt.n_slots, m->opt.max_batch);
    *out = m;
    return BURST_OK;
fail:
    llama_free(m);
    return st;
}

static void tell_workers(llama_model *m, const int32_t *words, size_t n);

void llama_free(llama_model *m) {
    if (!m) return;
    if (m->pool && cluster_node(m->cl) == 0) tell_workers(m, (int32_t[]){CMD_QUIT}, 1);
    rank_pool_free(m->pool);
    for (int i = 0; m->ranks && i < m->n_local; i++) free_rank(&m->ranks[i]);
    comm_group_free(m->comm);
    cluster_free(m->cl);
    shard_plan_free(&m->plan);
    free(m->ranks);
    free(m->shard_len);
    free(m->pos_rank);
    free(m->rows_host);
    free(m->sampled), free(m->temperature), free(m->unit);
    weights_close(m->w);
    free(m);
}

const llama_config *llama_config_of(const llama_model *m) { return &m->cfg; }
const char *llama_tokenizer_path(const llama_model *m) { return weights_tokenizer_path(m->w); }
const llama_options *llama_options_of(const llama_model *m) { return &m->opt; }

int llama_max_logits(const llama_model *m) { return m->opt.max_logits; }

size_t llama_reserved_bytes(const llama_model *m) {
    size_t bytes = 0;
    for (int i = 0; i < m->n_local; i++) bytes += kv_cache_bytes(&m->ranks[i].kv) + m->ranks[i].scratch_bytes;
    return bytes;
}

const char *llama_weights_note(const llama_options *o) {
    return o->weights_quant == DTYPE_Q8 ? " (q8 weights)" : o->weights_quant == DTYPE_Q4 ? " (q4 weights)" : "";
}

int64_t llama_slot_len(const llama_model *m, int slot) {
    BURST_ASSERT(slot >= 0 && slot < m->opt.n_slots);
    int64_t len = 0;
    for (int r = 0; r < m->G; r++) len += m->shard_len[(int64_t)slot * m->G + r];
    return len;
}

const char *llama_fault(const llama_model *m) { return m->faulty ? m->fault.msg : NULL; }

// From now on the model only says why it stopped working.
static void set_fault(llama_model *m, const burst_error *why) {
    if (m->faulty) return;
    m->fault = *why;
    m->faulty = 1;
    LOG_E("model out of service: %s", why->msg);
}

// Leader: the workers repeat every call that changes the books, in the same order.
static void tell_workers(llama_model *m, const int32_t *words, size_t n) {
    burst_error e;
    if (m->cl && !m->faulty && cluster_broadcast(m->cl, words, n * sizeof *words, &e)) set_fault(m, &e);
}

// Keeps the first len positions of a slot: each shard keeps its rows of those positions, which
// come first in it.
static void slot_truncate(llama_model *m, int slot, int64_t len) {
    int64_t *shard = m->shard_len + (int64_t)slot * m->G;
    const uint8_t *owner = m->pos_rank + (int64_t)slot * m->opt.ctx;
    for (int64_t p = llama_slot_len(m, slot) - 1; p >= len; p--) shard[owner[p]]--; // those past len go
}

void llama_slot_truncate(llama_model *m, int slot, int64_t len) {
    BURST_ASSERT(slot >= 0 && slot < m->opt.n_slots && len >= 0 && len <= llama_slot_len(m, slot));
    slot_truncate(m, slot, len);
    tell_workers(m, (int32_t[]){CMD_TRUNCATE, slot, (int32_t)len}, 3);
}

// A rank's part of llama_slot_copy: its rows of slot copy_src's first positions (as many as slot
// copy_dst now counts on this rank), every layer, into slot copy_dst.
static void copy_rank(void *arg, int rank) {
    llama_model *m = arg;
    llama_rank *R = &m->ranks[rank];
    int dst = m->call.copy_dst, src = m->call.copy_src;
    size_t bytes = (size_t)m->shard_len[(int64_t)dst * m->G + R->rank] * (size_t)R->kv.kv_dim * dtype_size(R->kv.dtype);
    for (int l = 0; l < m->cfg.n_layers; l++)
        backend_copy(R->be, (copy_job[]){{kv_cache_k(&R->kv, dst, l, 0), kv_cache_k(&R->kv, src, l, 0), bytes},
                                         {kv_cache_v(&R->kv, dst, l, 0), kv_cache_v(&R->kv, src, l, 0), bytes}}, 2);
}

// A prefix of src is a prefix of each of its shards, so dst takes src's owners of the first len
// positions and, on each rank, the first rows that those owners count.
static void slot_copy(llama_model *m, int dst, int src, int64_t len) {
    uint8_t *owner = m->pos_rank + (int64_t)dst * m->opt.ctx;
    memcpy(owner, m->pos_rank + (int64_t)src * m->opt.ctx, (size_t)len);
    int64_t *shard = m->shard_len + (int64_t)dst * m->G;
    for (int r = 0; r < m->G; r++) shard[r] = 0;
    for (int64_t p = 0; p < len; p++) shard[owner[p]]++;
    m->call = (llama_call){.copy_dst = dst, .copy_src = src};
    rank_pool_run(m->pool, copy_rank, m);
}

void llama_slot_copy(llama_model *m, int dst, int src, int64_t len) {
    BURST_ASSERT(dst >= 0 && dst < m->opt.n_slots && src >= 0 && src < m->opt.n_slots && dst != src && len >= 0 &&
                 len <= llama_slot_len(m, src));
    tell_workers(m, (int32_t[]){CMD_COPY, dst, src, (int32_t)len}, 4);
    slot_copy(m, dst, src, len);
}

static int seg_logits(const llama_segment *sg) { return sg->n_logits > 1 ? sg->n_logits : 1; }

static burst_status check_batch(const llama_model *m, const llama_segment *segs, int n_segs,
                                const int *tokens, int *n_total, burst_error *err) {
    if (n_segs < 1 || n_segs > m->opt.n_slots)
        return BURST_FAIL(err, BURST_ERR_INVALID, "%d segments (want 1..%d)", n_segs, m->opt.n_slots);
    int64_t n = 0, n_logits = 0;
    for (int i = 0; i < n_segs; i++) {
        const llama_segment *sg = &segs[i];
        if (sg->slot < 0 || sg->slot >= m->opt.n_slots || sg->n < 1)
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d: slot %d, %d tokens (want slot < %d, n >= 1)",
                              i, sg->slot, sg->n, m->opt.n_slots);
        if (sg->n_logits < 0 || sg->n_logits > sg->n)
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d: logits of %d of its %d tokens", i, sg->n_logits, sg->n);
        n_logits += seg_logits(sg);
        for (int j = 0; j < i; j++)
            if (segs[j].slot == sg->slot)
                return BURST_FAIL(err, BURST_ERR_INVALID, "segments %d and %d share slot %d", j, i, sg->slot);
        int64_t len = llama_slot_len(m, sg->slot);
        if (len + sg->n > m->opt.ctx)
            return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: %lld + %d tokens exceed the context of %d",
                              sg->slot, (long long)len, sg->n, m->opt.ctx);
        n += sg->n;
    }
    if (n > m->opt.max_batch)
        return BURST_FAIL(err, BURST_ERR_INVALID, "%lld tokens in one batch (max %d)", (long long)n, m->opt.max_batch);
    if (n_logits > llama_max_logits(m))
        return BURST_FAIL(err, BURST_ERR_INVALID, "%lld rows of logits in one batch (max %d)", (long long)n_logits,
                          llama_max_logits(m));
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return BURST_FAIL(err, BURST_ERR_INVALID, "token %lld is id %d (want 0..%d)", (long long)i,
                              tokens[i], m->cfg.vocab_size - 1);
    *n_total = (int)n;
    return BURST_OK;
}

// Lays out the rows this rank runs: for each segment, its positions in plan order.
static int rank_rows(llama_model *m, llama_rank *R) {
    int n = 0;
    for (int i = 0; i < m->plan.n_segs; i++) {
        const seg_plan *sp = &m->plan.seg[i];
        const seq_part *p = &sp->rows[R->rank];
        R->row0[i] = n;
        for (int t = 0; t < p->n_runs; t++)
            for (int64_t j = 0; j < p->run[t].len; j++, n++) {
                R->pos[n] = p->run[t].start + j;
                R->tok[n] = m->call.tokens[sp->tok0 + (R->pos[n] - sp->pos0)];
            }
    }
    return n;
}

// The two cache writes (K, then V) that store n new K/V rows (scratch rows from `row` on) in the
// cache of (slot, layer) from row `at` on, in the cache's dtype.
static void kv_jobs(llama_rank *R, int slot, int l, int64_t at, int64_t row, int64_t n, convert_job *out) {
    int64_t kv_dim = R->kv.kv_dim;
    out[0] = (convert_job){kv_cache_k(&R->kv, slot, l, at), R->s.k + row * kv_dim, n * kv_dim};
    out[1] = (convert_job){kv_cache_v(&R->kv, slot, l, at), R->s.v + row * kv_dim, n * kv_dim};
}

// Segment sp's queries (rows from row0 on) against this rank's cache of (slot, layer): its first
// nk rows, all earlier than the queries unless causal; O and lse at the segment's rows.
static flash_args seg_attention(const llama_model *m, llama_rank *R, int l, const seg_plan *sp, int64_t row0,
                                int64_t nk, int causal) {
    const llama_config *c = &m->cfg;
    return (flash_args){
        .q = R->s.q + row0 * c->dim, .k = kv_cache_k(&R->kv, sp->slot, l, 0), .v = kv_cache_v(&R->kv, sp->slot, l, 0),
        .o = R->s.att + row0 * c->dim, .lse = R->s.lse + row0 * c->n_heads, .q_stride = c->dim,
        .kv_stride = R->kv.kv_dim, .o_stride = c->dim, .nq = sp->n, .nk = (int)nk, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .q_pos0 = sp->pos0, .k_pos0 = 0, .causal = causal,
        .scale = 1.0f / sqrtf((float)c->head_dim), .kv_dtype = R->kv.dtype,
    };
}

// One rank holds every sequence whole (G = 1): each segment's new K/V rows go into its slot's
// cache, then its queries attend to that cache, the old rows and its own (causal by position),
// what the ring's one step would do. All segments go in one backend call each, so that a GPU
// can run a step's many decoding sequences in a few launches rather than a few each. With
// logit_rows_only (the last layer), only the queries of the rows whose logits the call returns
// attend, and their O and lse are packed in segment order from row 0, as gather_logit_rows packs.
static void attend_local(llama_model *m, llama_rank *R, int l, bool logit_rows_only) {
    const llama_config *c = &m->cfg;
    for (int i = 0, packed = 0; i < m->plan.n_segs; i++) {
        const seg_plan *sp = &m->plan.seg[i];
        int64_t old = sp->old_len[0];
        kv_jobs(R, sp->slot, l, old, R->row0[i], sp->n, &R->jobs[2 * i]);
        R->calls[i] = seg_attention(m, R, l, sp, R->row0[i], old + sp->n, 1);
        if (logit_rows_only) {
            flash_args *a = &R->calls[i];
            const int k = seg_logits(&m->call.segs[i]), skip = sp->n - k;
            a->q += (int64_t)skip * c->dim, a->nq = k, a->q_pos0 += skip;
            a->o = R->s.att + (int64_t)packed * c->dim, a->lse = R->s.lse + (int64_t)packed * c->n_heads;
            packed += k;
        }
    }
    backend_convert_batch(R->be, R->kv.dtype, R->jobs, 2 * m->plan.n_segs);
    backend_attention_batch(R->be, R->calls, m->plan.n_segs);
}

// Ring segment: append this rank's K/V rows to its shard, then BurstAttention over all shards for
// the queries of this rank's last `queries` rows of the segment (all, or in the last layer the
// logit rows: rank 0's, none elsewhere), O at their rows. Every rank's K/V go round either way.
static burst_status attend_ring(llama_model *m, llama_rank *R, int l, const seg_plan *sp, int row0, int64_t queries) {
    const llama_config *c = &m->cfg;
    int64_t dim = c->dim, first = row0 + seq_part_len(&sp->rows[R->rank]) - queries;
    convert_job jobs[2];
    kv_jobs(R, sp->slot, l, sp->old_len[R->rank], row0, sp->new_len[R->rank], jobs);
    backend_convert_batch(R->be, R->kv.dtype, jobs, 2);
    ring_args a = {
        .c = R->c, .ops = &R->ops, .q = R->s.q + first * dim, .k = kv_cache_k(&R->kv, sp->slot, l, 0),
        .v = kv_cache_v(&R->kv, sp->slot, l, 0), .kv_dtype = R->kv.dtype,
        .o = R->s.att + first * dim, .lse = R->s.lse, .q_stride = dim, .o_stride = dim,
        .q_part = seq_part_last(&sp->rows[R->rank], queries), .k_parts = sp->kv, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .causal = 1,
        .scale = 1.0f / sqrtf((float)c->head_dim), .max_block_rows = m->shard_cap, .work = R->s.ring,
    };
    return ring_attention(&a, &R->err);
}

// Replicated segments (a decode step over G ranks): each rank attends every segment's queries to
// its own shard, rank 0 adds each segment's new tokens themselves (causal), the partials of all
// segments are merged across ranks in one all-gather, then each rank stores the new K/V entries
// it owns. Each step goes to the backend for all segments at once.
static burst_status attend_replicated(llama_model *m, llama_rank *R, int l) {
    const llama_config *c = &m->cfg;
    int64_t kv_dim = R->kv.kv_dim, dim = c->dim;
    size_t es = dtype_size(R->kv.dtype);
    flash_args *shard = R->calls, *fresh = R->calls + m->opt.n_slots;
    int n_rep = 0, n_jobs = 0;
    for (int i = 0; i < m->plan.n_segs; i++) {
        const seg_plan *sp = &m->plan.seg[i];
        if (sp->ring) continue;
        int64_t row0 = R->row0[i];
        shard[n_rep] = seg_attention(m, R, l, sp, row0, sp->old_len[R->rank], 0);
        R->parts[n_rep] = (merge_part){.o = (float *)shard[n_rep].o, .lse = shard[n_rep].lse, .n = sp->n};
        // The new tokens' K/V as the cache will hold them, so that every G gives the same
        // result. A 16-bit cache rounds them into xb2, free within a layer, at the segment's rows:
        // n rows of K and of V take n x kv_dim floats, no more than its n x dim (a float32 copy
        // would not fit where kv_dim = dim, and is the rows themselves).
        const void *k_new = R->s.k + row0 * kv_dim, *v_new = R->s.v + row0 * kv_dim;
        if (R->rank == 0 && R->kv.dtype != DTYPE_F32) {
            char *k16 = (char *)(R->s.xb2 + row0 * dim), *v16 = k16 + (size_t)sp->n * kv_dim * es;
            R->jobs[n_jobs++] = (convert_job){k16, k_new, sp->n * kv_dim};
            R->jobs[n_jobs++] = (convert_job){v16, v_new, sp->n * kv_dim};
            k_new = k16, v_new = v16;
        }
        fresh[n_rep] = shard[n_rep];
        fresh[n_rep].k = k_new, fresh[n_rep].v = v_new, fresh[n_rep].nk = sp->n, fresh[n_rep].k_pos0 = sp->pos0;
        fresh[n_rep].causal = 1, fresh[n_rep].o = R->s.part_o + row0 * dim, fresh[n_rep].lse = R->s.part_lse + row0 * c->n_heads;
        n_rep++;
    }
    if (n_rep == 0) return BURST_OK;
    backend_attention_batch(R->be, shard, n_rep);
    if (R->rank == 0) {
        backend_convert_batch(R->be, R->kv.dtype, R->jobs, n_jobs);
        backend_attention_batch(R->be, fresh, n_rep);
        for (int j = 0; j < n_rep; j++)
            R->merges[j] = (online_softmax_args){
                .o = shard[j].o, .lse = shard[j].lse, .o_b = fresh[j].o, .lse_b = fresh[j].lse, .o_stride = dim,
                .o_b_stride = dim, .n = shard[j].nq, .n_heads = c->n_heads, .head_dim = c->head_dim};
        backend_merge(R->be, R->merges, n_rep);
    }
    burst_status st = sharded_merge(R->c, &R->ops, R->parts, n_rep, c->n_heads, c->head_dim, R->s.merge, &R->err);
    if (st) return st;
    // The new entries this rank owns, appended to its shard in order.
    n_jobs = 0;
    for (int i = 0; i < m->plan.n_segs; i++) {
        const seg_plan *sp = &m->plan.seg[i];
        int64_t row0 = R->row0[i], at = sp->old_len[R->rank];
        for (int j = 0; !sp->ring && j < sp->n; j++)
            if (sp->owner[j] == R->rank) kv_jobs(R, sp->slot, l, at++, row0 + j, 1, &R->jobs[n_jobs]), n_jobs += 2;
    }
    backend_convert_batch(R->be, R->kv.dtype, R->jobs, n_jobs);
    return BURST_OK;
}

// Segment i wants every token's logits: rank 0 runs the final norm and lm_head over its rows in
// blocks of row_block and hands each block over. A ring segment's rows are spread over the ranks
// (zigzag), so first every rank's final hidden rows are all-gathered (padded to the largest
// share: comm gathers equal sizes) and laid out in position order on rank 0; the gather moves
// n x dim floats, little beside the ring's K/V.
static burst_status all_row_logits(llama_model *m, llama_rank *R, int i) {
    const llama_config *c = &m->cfg;
    const seg_plan *sp = &m->plan.seg[i];
    llama_scratch *s = &R->s;
    int64_t dim = c->dim;
    const float *x = s->x + (int64_t)R->row0[i] * dim; // rank 0 holds all n rows unless split
    if (sp->ring && m->G > 1) {
        int64_t most = 0;
        for (int r = 0; r < m->G; r++)
            if (seq_part_len(&sp->rows[r]) > most) most = seq_part_len(&sp->rows[r]);
        backend_copy(R->be, &(copy_job){s->xb, x, sizeof(float) * (size_t)(seq_part_len(&sp->rows[R->rank]) * dim)}, 1);
        backend_sync(R->be);
        burst_status st = comm_allgather(R->c, s->xb, s->merge, sizeof(float) * (size_t)(most * dim), &R->err);
        if (st || R->rank != 0) return st;
        for (int r = 0; r < m->G; r++) {
            const float *from = s->merge + r * most * dim;
            for (int t = 0; t < sp->rows[r].n_runs; t++) {
                const seq_run *run = &sp->rows[r].run[t];
                backend_copy(R->be, &(copy_job){s->xb + (run->start - sp->pos0) * dim, from, sizeof(float) * (size_t)(run->len * dim)}, 1);
                from += run->len * dim;
            }
        }
        x = s->xb;
    }
    if (R->rank != 0) return BURST_OK;
    for (int j = 0; j < sp->n; j += m->row_block) {
        int nb = sp->n - j < m->row_block ? sp->n - j : m->row_block;
        backend_rmsnorm(R->be, s->xb2, DTYPE_F32, x + (int64_t)j * dim, &R->final_norm, nb, c->norm_eps);
        backend_matmul(R->be, s->logits, DTYPE_F32, s->xb2, DTYPE_F32, &R->lm_head, nb);
        backend_to_host(R->be, m->rows_host, s->logits, (int64_t)nb * c->vocab_size);
        m->call.rows(m->call.rows_ctx, i, j, nb, m->rows_host);
    }
    return BURST_OK;
}

// The rows whose logits a call returns, on rank 0 (zigzag gives it every segment's last token,
// and a replicated segment's rows are on every rank): each segment's last seg_logits rows of
// this rank's n. Copies them from src to dst (rows of dim floats), packed in segment order, and
// returns how many.
static int gather_logit_rows(llama_model *m, llama_rank *R, int n, float *dst, const float *src) {
    const int64_t dim = m->cfg.dim;
    int rows = 0;
    for (int i = 0; i < m->plan.n_segs; i++) {
        int end = i + 1 < m->plan.n_segs ? R->row0[i + 1] : n, k = seg_logits(&m->call.segs[i]);
        R->copies[i] = (copy_job){dst + (int64_t)rows * dim, src + (int64_t)(end - k) * dim, (size_t)(k * dim) * sizeof(float)};
        rows += k;
    }
    backend_copy(R->be, R->copies, m->plan.n_segs);
    return rows;
}

// One rank's ops of a forward call, from the embedding to the logits on rank 0 (*n_logits rows
// in s->logits).
static burst_status rank_ops(llama_model *m, llama_rank *R, int n, int *n_logits) {
    const llama_config *c = &m->cfg;
    llama_scratch *s = &R->s;
    burst_backend *be = R->be;
    burst_status st = BURST_OK;
    const burst_dtype act = backend_act_dtype(be); // of the matmul inputs xb and hb, and of hb2
    *n_logits = 0;
    if (n > 0) backend_embed(be, s->x, &R->embed, R->tok, n);
    // The last layer's K and V go into the cache for every row, but past them only the rows whose
    // logits the call returns matter (none on ranks other than 0): a prompt's last layer runs its
    // attention, Wo and MLP for one row instead of all (7B, 32 layers: 2-3% of a long prompt's
    // work). Not where a segment wants every row's logits (all_row_logits).
    int logit_rows = 0;
    bool prune = true;
    for (int i = 0; i < m->plan.n_segs; i++)
        logit_rows += seg_logits(&m->call.segs[i]), prune = prune && !m->call.segs[i].all_rows;
    prune = prune && (R->rank == 0 ? logit_rows : 0) < n;

    for (int l = 0; l < c->n_layers; l++) {
        const llama_layer *L = &R->layers[l];
        const bool pruned = prune && l == c->n_layers - 1;
        // attention block: x += Wo · attn(rope(Wq xn), rope(Wk xn), Wv xn)
        if (n > 0) {
            backend_rmsnorm(be, s->xb, act, s->x, &L->attn_norm, n, c->norm_eps);
            backend_matmul_group(be, (void *[]){s->q, s->k, s->v}, DTYPE_F32, s->xb, act,
                                 (const burst_weight *[]){&L->wq, &L->wk, &L->wv}, 3, n);
            backend_rope(be, s->q, c->n_heads, s->k, c->n_kv_heads, R->pos, n, c->head_dim, &m->rope);
        }
        // Every rank takes part in every segment's communication, rows or not.
        if (m->G == 1) attend_local(m, R, l, pruned);
        for (int i = 0; m->G > 1 && !st && i < m->plan.n_segs; i++) {
            const seg_plan *sp = &m->plan.seg[i];
            const int64_t queries = !pruned ? seq_part_len(&sp->rows[R->rank])
                                    : R->rank == 0 ? seg_logits(&m->call.segs[i]) : 0;
            if (sp->ring) st = attend_ring(m, R, l, sp, R->row0[i], queries);
        }
        if (m->G > 1 && !st) st = attend_replicated(m, R, l);
        if (st) return st;
        if (n == 0) continue;
        // The rows the rest of the layer runs: all n, or, pruned, the logit rows packed into
        // s->last (x) and s->att (O: attend_local packed them; on G ranks q, free by now, takes them).
        float *x = s->x, *att = s->att;
        int rows = n;
        if (pruned) {
            if (R->rank != 0) break;
            *n_logits = gather_logit_rows(m, R, n, s->last, s->x);
            if (m->G > 1) gather_logit_rows(m, R, n, s->q, s->att), att = s->q;
            x = s->last, rows = *n_logits;
        }
        backend_matmul_add(be, x, att, DTYPE_F32, &L->wo, rows);
        // MLP block: x += Wdown · (silu(Wgate xn) * Wup xn)
        backend_rmsnorm(be, s->xb, act, x, &L->ffn_norm, rows, c->norm_eps);
        backend_matmul_swiglu(be, s->hb, s->xb, act, &L->w_gate, &L->w_up, s->hb2, rows);
        backend_matmul_add(be, x, s->hb, act, &L->w_down, rows);
    }
    for (int i = 0; i < m->plan.n_segs; i++)
        if (m->call.segs[i].all_rows && (st = all_row_logits(m, R, i))) return st;
    if (R->rank != 0) return BURST_OK;
    // The logits, all in one matrix product.
    if (!prune) *n_logits = gather_logit_rows(m, R, n, s->last, s->x);
    backend_rmsnorm(be, s->last, DTYPE_F32, s->last, &R->final_norm, *n_logits, c->norm_eps);
    backend_matmul(be, s->logits, DTYPE_F32, s->last, DTYPE_F32, &R->lm_head, *n_logits);
    return BURST_OK;
}

// One rank's share of a forward call, top to bottom.
static burst_status rank_forward(llama_model *m, llama_rank *R) {
    const llama_config *c = &m->cfg;
    burst_backend *be = R->be;
    int n = rank_rows(m, R), n_segs = m->plan.n_segs, n_logits, seq_rows = 0;
    // One rank waits for nothing between the embedding and the logits (no ring, no rows handed
    // over on the way): the backend may run that as one graph (decode steps on a GPU), and may
    // ask for the ops again (backend_graph_end).
    bool graph = m->G == 1;
    for (int i = 0; i < n_segs; i++) {
        graph = graph && !m->call.segs[i].all_rows;
        if (m->plan.seg[i].n > seq_rows) seq_rows = m->plan.seg[i].n;
    }
    burst_status st;
    do {
        if (graph) backend_graph_begin(be, n, seq_rows);
        st = rank_ops(m, R, n, &n_logits);
    } while (graph && !backend_graph_end(be));
    if (st || R->rank != 0) return st;
    // Segments that take ids get them from the backend (the others' rows greedy, unread); the
    // rows of the others go to the host, a run of adjacent ones at a time.
    int sampled_segs = 0, drawn = 0;
    for (int i = 0, row = 0; i < n_segs; row += seg_logits(&m->call.segs[i]), i++) {
        const llama_segment *sg = &m->call.segs[i];
        const int draws = sg->sampled && sg->temperature;
        sampled_segs += sg->sampled != NULL, drawn |= draws;
        for (int j = 0; j < seg_logits(sg); j++)
            m->temperature[row + j] = draws ? sg->temperature[j] : 0, m->unit[row + j] = draws ? sg->unit[j] : 0;
    }
    if (sampled_segs) {
        backend_sample(be, m->sampled, R->s.logits, n_logits, c->vocab_size, drawn ? m->temperature : NULL,
                       drawn ? m->unit : NULL);
        for (int i = 0, row = 0; i < n_segs; row += seg_logits(&m->call.segs[i]), i++)
            if (m->call.segs[i].sampled)
                memcpy(m->call.segs[i].sampled, m->sampled + row, sizeof(int) * (size_t)seg_logits(&m->call.segs[i]));
    }
    for (int i = 0, row = 0; i < n_segs;) {
        int first = row;
        for (; i < n_segs && !m->call.segs[i].sampled; i++) row += seg_logits(&m->call.segs[i]);
        if (row > first)
            backend_to_host(be, m->call.logits + (int64_t)first * c->vocab_size,
                            R->s.logits + (int64_t)first * c->vocab_size, (int64_t)(row - first) * c->vocab_size);
        for (; i < n_segs && m->call.segs[i].sampled; i++) row += seg_logits(&m->call.segs[i]);
    }
    return BURST_OK;
}

static void run_rank(void *arg, int rank) {
    llama_model *m = arg;
    llama_rank *R = &m->ranks[rank];
    *ring_stats_self() = R->ring; // the counters live in the thread that runs the rank
    R->st = rank_forward(m, R);
    R->ring = *ring_stats_self();
}

ring_stats llama_ring_stats(const llama_model *m) {
    ring_stats sum = {0};
    for (int i = 0; i < m->n_local; i++) {
        const ring_stats *s = &m->ranks[i].ring;
        sum.compute_s += s->compute_s, sum.wait_s += s->wait_s, sum.steps += s->steps, sum.transfers += s->transfers;
        sum.bytes += s->bytes;
    }
    return sum;
}

// Runs a checked batch on this process's ranks and keeps the books.
static burst_status run_batch(llama_model *m, const llama_segment *segs, int n_segs, const int *tokens,
                              float *logits, llama_rows_fn rows, void *rows_ctx, burst_error *err) {
    int slots[n_segs], ns[n_segs], whole[n_segs];
    for (int i = 0; i < n_segs; i++) slots[i] = segs[i].slot, ns[i] = segs[i].n, whole[i] = seg_logits(&segs[i]) > 1;
    burst_status st = shard_plan_make(&m->plan, slots, ns, whole, n_segs, m->shard_len, m->shard_cap, err);
    if (st) return st;
    m->call = (llama_call){.segs = segs, .tokens = tokens, .logits = logits, .rows = rows, .rows_ctx = rows_ctx};
    rank_pool_run(m->pool, run_rank, m);
    for (int i = 0; i < m->n_local; i++)
        if (m->ranks[i].st) {
            // A rank failing mid-call leaves the shards inconsistent: the slots must be reset. In a
            // cluster the failure is a lost connection, and BURST_ERR_DEVICE an aborted NCCL
            // communicator (comm/comm_nccl.c): either way the model is out of service.
            for (int j = 0; j < n_segs; j++) slot_truncate(m, segs[j].slot, 0);
            if (m->cl || m->ranks[i].st == BURST_ERR_DEVICE) set_fault(m, &m->ranks[i].err);
            *err = m->ranks[i].err;
            return m->ranks[i].st;
        }
    for (int i = 0; i < n_segs; i++) {
        const seg_plan *sp = &m->plan.seg[i];
        uint8_t *owner = m->pos_rank + (int64_t)sp->slot * m->opt.ctx;
        for (int r = 0; r < m->G; r++) {
            m->shard_len[(int64_t)sp->slot * m->G + r] += sp->new_len[r];
            for (int t = 0; sp->ring && t < sp->rows[r].n_runs; t++)
                memset(owner + sp->rows[r].run[t].start, r, (size_t)sp->rows[r].run[t].len);
        }
        for (int j = 0; !sp->ring && j < sp->n; j++) owner[sp->pos0 + j] = (uint8_t)sp->owner[j];
    }
    return BURST_OK;
}

burst_status llama_forward(llama_model *m, const llama_segment *segs, int n_segs, const int *tokens,
                           float *logits, llama_rows_fn rows, void *rows_ctx, burst_error *err) {
    if (m->faulty) return BURST_FAIL(err, BURST_ERR_IO, "model out of service: %s", m->fault.msg);
    int n = 0;
    burst_status st = check_batch(m, segs, n_segs, tokens, &n, err);
    if (st) return st;
    for (int i = 0; i < n_segs; i++) {
        if (segs[i].all_rows && !rows)
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d wants every row's logits but there is no rows callback", i);
        if (!segs[i].sampled && !logits)
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d wants its logits but there is no logits buffer", i);
        if (segs[i].temperature && (!segs[i].sampled || !segs[i].unit))
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d has temperatures but no ids or units", i);
    }
    if (m->cl) {
        int32_t *cmd = burst_malloc(sizeof(int32_t) * (size_t)(3 + 4 * n_segs + n)), *seg = cmd + 3;
        cmd[0] = CMD_FORWARD, cmd[1] = n_segs, cmd[2] = n;
        for (int i = 0; i < n_segs; i++, seg += 4)
            seg[0] = segs[i].slot, seg[1] = segs[i].n, seg[2] = segs[i].all_rows, seg[3] = segs[i].n_logits;
        memcpy(seg, tokens, sizeof(int32_t) * (size_t)n);
        tell_workers(m, cmd, (size_t)(3 + 4 * n_segs + n));
        free(cmd);
        if (m->faulty) return BURST_FAIL(err, BURST_ERR_IO, "model out of service: %s", m->fault.msg);
    }
    return run_batch(m, segs, n_segs, tokens, logits, rows, rows_ctx, err);
}

burst_status llama_follow(llama_model *m, burst_error *err) {
    BURST_ASSERT(m->cl && cluster_node(m->cl) != 0);
    for (;;) {
        int32_t *cmd;
        size_t bytes;
        burst_status st = cluster_receive(m->cl, (void **)&cmd, &bytes, err);
        if (st) return st;
        size_t words = bytes / sizeof(int32_t);
        int n_segs = words >= 3 ? cmd[1] : 0, n = words >= 3 ? cmd[2] : 0;
        if (words >= 1 && cmd[0] == CMD_QUIT) {
            free(cmd);
            return BURST_OK;
        }
        if (words == 3 && cmd[0] == CMD_TRUNCATE && cmd[1] >= 0 && cmd[1] < m->opt.n_slots && cmd[2] >= 0 &&
            cmd[2] <= llama_slot_len(m, cmd[1])) {
            slot_truncate(m, cmd[1], cmd[2]);
        } else if (words == 4 && cmd[0] == CMD_COPY && cmd[1] >= 0 && cmd[1] < m->opt.n_slots && cmd[2] >= 0 &&
                   cmd[2] < m->opt.n_slots && cmd[1] != cmd[2] && cmd[3] >= 0 && cmd[3] <= llama_slot_len(m, cmd[2])) {
            slot_copy(m, cmd[1], cmd[2], cmd[3]);
        } else if (words >= 3 && cmd[0] == CMD_FORWARD && n_segs >= 1 && n_segs <= m->opt.n_slots && n >= 1 &&
                   words == (size_t)(3 + 4 * n_segs + n)) {
            llama_segment segs[n_segs];
            const int32_t *seg = cmd + 3;
            for (int i = 0; i < n_segs; i++, seg += 4)
                segs[i] = (llama_segment){.slot = seg[0], .n = seg[1], .all_rows = seg[2] != 0, .n_logits = seg[3]};
            int checked;
            if (!(st = check_batch(m, segs, n_segs, seg, &checked, err)))
                st = run_batch(m, segs, n_segs, seg, NULL, NULL, NULL, err);
        } else {
            st = BURST_FAIL(err, BURST_ERR_FORMAT, "the leader sent a malformed command (%zu bytes)", bytes);
        }
        free(cmd);
        if (st) return st;
    }
}

burst_status llama_prefill(llama_model *m, int slot, const int *tokens, int n, int chunk_max, float *logits,
                           burst_error *err) {
    if (n < 1) return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: empty prompt", slot);
    if (slot < 0 || slot >= m->opt.n_slots)
        return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d (want 0..%d)", slot, m->opt.n_slots - 1);
    if (llama_slot_len(m, slot) + n > m->opt.ctx)
        return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: %lld + %d tokens exceed the context of %d",
                          slot, (long long)llama_slot_len(m, slot), n, m->opt.ctx);
    if (chunk_max <= 0 || chunk_max > m->opt.max_batch) chunk_max = m->opt.max_batch;
    for (int done = 0; done < n;) {
        int chunk = n - done < chunk_max ? n - done : chunk_max;
        llama_segment seg = {.slot = slot, .n = chunk};
        burst_status st = llama_forward(m, &seg, 1, tokens + done, logits, NULL, NULL, err);
        if (st) return st;
        done += chunk;
    }
    return BURST_OK;
}
