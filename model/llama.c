#include "llama.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    burst_weight attn_norm, wq, wk, wv, wo; // norms (1, dim); wq/wo (dim, dim); wk/wv (kv_dim, dim)
    burst_weight ffn_norm, w_gate, w_up, w_down; // gate/up (hidden, dim); down (dim, hidden)
} llama_layer;

// Scratch for one forward call of up to max_batch tokens, in backend memory.
typedef struct {
    float *x;      // (max_batch, dim) the residual stream
    float *xb;     // (max_batch, dim)
    float *xb2;    // (max_batch, dim)
    float *q;      // (max_batch, dim)
    float *k, *v;  // (max_batch, kv_dim)
    float *att;    // (max_batch, dim)
    float *lse;    // (n_heads, max_batch)
    float *hb, *hb2; // (max_batch, hidden_dim)
    float *last;   // (n_slots, dim) each segment's last row
    float *logits; // (n_slots, vocab)
    int64_t *pos;  // (max_batch) host: position of each token
} llama_scratch;

struct llama_model {
    llama_config cfg;
    llama_options opt;
    weights *w;
    burst_backend *be;
    burst_weight embed, final_norm, lm_head;
    llama_layer *layers; // (n_layers)
    kv_cache kv;
    llama_scratch s;
    size_t scratch_bytes;
};

// Looks up "name" (printf-style) with the given shape and hands it to the backend.
static burst_status get_weight(llama_model *m, burst_weight *out, int64_t rows, int64_t cols,
                               burst_error *err, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static burst_status get_weight(llama_model *m, burst_weight *out, int64_t rows, int64_t cols,
                               burst_error *err, const char *fmt, ...) {
    char name[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {rows, cols};
    const weights_tensor *t;
    burst_status st = rows ? weights_get(m->w, name, 2, shape, &t, err)
                           : weights_get(m->w, name, 1, shape + 1, &t, err);
    return st ? st : backend_weight(m->be, t, out, err);
}

static burst_status load_tensors(llama_model *m, burst_error *err) {
    const llama_config *c = &m->cfg;
    int64_t dim = c->dim, kv_dim = (int64_t)c->n_kv_heads * c->head_dim, hid = c->hidden_dim;
    burst_status st;
    if ((st = get_weight(m, &m->embed, c->vocab_size, dim, err, "model.embed_tokens.weight")) ||
        (st = get_weight(m, &m->final_norm, 0, dim, err, "model.norm.weight")))
        return st;
    if (c->tie_embeddings) m->lm_head = m->embed;
    else if ((st = get_weight(m, &m->lm_head, c->vocab_size, dim, err, "lm_head.weight")))
        return st;
    m->layers = burst_calloc((size_t)c->n_layers, sizeof(llama_layer));
    for (int l = 0; l < c->n_layers; l++) {
        llama_layer *L = &m->layers[l];
        if ((st = get_weight(m, &L->attn_norm, 0, dim, err, "model.layers.%d.input_layernorm.weight", l)) ||
            (st = get_weight(m, &L->wq, dim, dim, err, "model.layers.%d.self_attn.q_proj.weight", l)) ||
            (st = get_weight(m, &L->wk, kv_dim, dim, err, "model.layers.%d.self_attn.k_proj.weight", l)) ||
            (st = get_weight(m, &L->wv, kv_dim, dim, err, "model.layers.%d.self_attn.v_proj.weight", l)) ||
            (st = get_weight(m, &L->wo, dim, dim, err, "model.layers.%d.self_attn.o_proj.weight", l)) ||
            (st = get_weight(m, &L->ffn_norm, 0, dim, err, "model.layers.%d.post_attention_layernorm.weight", l)) ||
            (st = get_weight(m, &L->w_gate, hid, dim, err, "model.layers.%d.mlp.gate_proj.weight", l)) ||
            (st = get_weight(m, &L->w_up, hid, dim, err, "model.layers.%d.mlp.up_proj.weight", l)) ||
            (st = get_weight(m, &L->w_down, dim, hid, err, "model.layers.%d.mlp.down_proj.weight", l)))
            return st;
    }
    return BURST_OK;
}

static void *scratch(llama_model *m, int64_t n_floats) {
    size_t bytes = (size_t)n_floats * sizeof(float);
    m->scratch_bytes += bytes;
    return backend_alloc(m->be, bytes);
}

static void alloc_scratch(llama_model *m) {
    const llama_config *c = &m->cfg;
    int64_t B = m->opt.max_batch, kv_dim = (int64_t)c->n_kv_heads * c->head_dim;
    llama_scratch *s = &m->s;
    s->x = scratch(m, B * c->dim);
    s->xb = scratch(m, B * c->dim);
    s->xb2 = scratch(m, B * c->dim);
    s->q = scratch(m, B * c->dim);
    s->k = scratch(m, B * kv_dim);
    s->v = scratch(m, B * kv_dim);
    s->att = scratch(m, B * c->dim);
    s->lse = scratch(m, B * c->n_heads);
    s->hb = scratch(m, B * c->hidden_dim);
    s->hb2 = scratch(m, B * c->hidden_dim);
    s->last = scratch(m, (int64_t)m->opt.n_slots * c->dim);
    s->logits = scratch(m, (int64_t)m->opt.n_slots * c->vocab_size);
    s->pos = burst_calloc((size_t)B, sizeof(int64_t));
}

static void free_scratch(llama_model *m) {
    llama_scratch *s = &m->s;
    float *bufs[] = {s->x, s->xb, s->xb2, s->q, s->k, s->v, s->att, s->lse, s->hb, s->hb2, s->last, s->logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) backend_release(m->be, bufs[i]);
    free(s->pos);
}

burst_status llama_load(const char *dir, const llama_options *opt, llama_model **out,
                        burst_error *err) {
    *out = NULL;
    llama_model *m = burst_calloc(1, sizeof *m);
    burst_status st = weights_open(dir, &m->w, err);
    if (st) goto fail;
    m->cfg = *weights_config(m->w);
    m->opt = *opt;
    if (m->opt.ctx <= 0) m->opt.ctx = m->cfg.max_seq_len;
    if (m->opt.n_slots <= 0) m->opt.n_slots = 1;
    if (m->opt.max_batch <= 0) m->opt.max_batch = 512;
    if (m->opt.max_batch < m->opt.n_slots) m->opt.max_batch = m->opt.n_slots; // one decode token per slot
    if (m->opt.ctx > m->cfg.max_seq_len)
        LOG_W("%s: ctx %d is past max_position_embeddings %d; quality may fall beyond it", dir,
              m->opt.ctx, m->cfg.max_seq_len);
    if (!m->opt.backend) m->opt.backend = "cpu";
    if ((st = backend_new(m->opt.backend, 0, m->opt.n_threads, &m->be, err))) goto fail;
    if ((st = load_tensors(m, err))) goto fail;
    if ((st = kv_cache_init(&m->kv, m->be, m->opt.n_slots, m->cfg.n_layers, m->opt.ctx,
                            m->cfg.n_kv_heads * m->cfg.head_dim, err)))
        goto fail;
    alloc_scratch(m);
    *out = m;
    return BURST_OK;
fail:
    llama_free(m);
    return st;
}

void llama_free(llama_model *m) {
    if (!m) return;
    if (m->s.x) free_scratch(m);
    if (m->kv.k) kv_cache_free(&m->kv, m->be);
    backend_free(m->be);
    free(m->layers);
    weights_close(m->w);
    free(m);
}

const llama_config *llama_config_of(const llama_model *m) { return &m->cfg; }
const char *llama_tokenizer_path(const llama_model *m) { return weights_tokenizer_path(m->w); }
const llama_options *llama_options_of(const llama_model *m) { return &m->opt; }
size_t llama_reserved_bytes(const llama_model *m) { return kv_cache_bytes(&m->kv) + m->scratch_bytes; }
int64_t llama_slot_len(const llama_model *m, int slot) {
    BURST_ASSERT(slot >= 0 && slot < m->opt.n_slots);
    return m->kv.len[slot];
}
void llama_slot_reset(llama_model *m, int slot) {
    BURST_ASSERT(slot >= 0 && slot < m->opt.n_slots);
    m->kv.len[slot] = 0;
}

static burst_status check_batch(const llama_model *m, const llama_segment *segs, int n_segs,
                                const int *tokens, int *n_total, burst_error *err) {
    if (n_segs < 1 || n_segs > m->opt.n_slots)
        return BURST_FAIL(err, BURST_ERR_INVALID, "%d segments (want 1..%d)", n_segs, m->opt.n_slots);
    int64_t n = 0;
    for (int i = 0; i < n_segs; i++) {
        const llama_segment *sg = &segs[i];
        if (sg->slot < 0 || sg->slot >= m->opt.n_slots || sg->n < 1)
            return BURST_FAIL(err, BURST_ERR_INVALID, "segment %d: slot %d, %d tokens (want slot < %d, n >= 1)",
                              i, sg->slot, sg->n, m->opt.n_slots);
        for (int j = 0; j < i; j++)
            if (segs[j].slot == sg->slot)
                return BURST_FAIL(err, BURST_ERR_INVALID, "segments %d and %d share slot %d", j, i, sg->slot);
        if (m->kv.len[sg->slot] + sg->n > m->opt.ctx)
            return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: %lld + %d tokens exceed the context of %d",
                              sg->slot, (long long)m->kv.len[sg->slot], sg->n, m->opt.ctx);
        n += sg->n;
    }
    if (n > m->opt.max_batch)
        return BURST_FAIL(err, BURST_ERR_INVALID, "%lld tokens in one batch (max %d)", (long long)n, m->opt.max_batch);
    for (int64_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.vocab_size)
            return BURST_FAIL(err, BURST_ERR_INVALID, "token %lld is id %d (want 0..%d)", (long long)i,
                              tokens[i], m->cfg.vocab_size - 1);
    *n_total = (int)n;
    return BURST_OK;
}

// Appends each segment's new K/V rows to its slot and attends its queries over the whole slot.
static void attention_layer(llama_model *m, int l, const llama_segment *segs, int n_segs) {
    const llama_config *c = &m->cfg;
    llama_scratch *s = &m->s;
    int64_t kv_dim = (int64_t)c->n_kv_heads * c->head_dim, row = 0;
    for (int i = 0; i < n_segs; i++) {
        int slot = segs[i].slot, n = segs[i].n;
        int64_t pos0 = m->kv.len[slot];
        float *kc = kv_cache_k(&m->kv, slot, l), *vc = kv_cache_v(&m->kv, slot, l);
        backend_copy(m->be, kc + pos0 * kv_dim, s->k + row * kv_dim, n * kv_dim);
        backend_copy(m->be, vc + pos0 * kv_dim, s->v + row * kv_dim, n * kv_dim);
        flash_args a = {
            .q = s->q + row * c->dim, .k = kc, .v = vc, .o = s->att + row * c->dim, .lse = s->lse,
            .q_stride = c->dim, .kv_stride = kv_dim, .o_stride = c->dim,
            .nq = n, .nk = (int)(pos0 + n), .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
            .head_dim = c->head_dim, .q_pos0 = pos0, .k_pos0 = 0, .causal = 1,
            .scale = 1.0f / sqrtf((float)c->head_dim),
        };
        backend_attention(m->be, &a);
        row += n;
    }
}

burst_status llama_forward(llama_model *m, const llama_segment *segs, int n_segs,
                           const int *tokens, float *logits, burst_error *err) {
    int n = 0;
    burst_status st = check_batch(m, segs, n_segs, tokens, &n, err);
    if (st) return st;
    const llama_config *c = &m->cfg;
    llama_scratch *s = &m->s;
    burst_backend *be = m->be;
    int64_t dim = c->dim;

    for (int i = 0, row = 0; i < n_segs; i++)
        for (int j = 0; j < segs[i].n; j++) s->pos[row++] = m->kv.len[segs[i].slot] + j;
    backend_embed(be, s->x, &m->embed, tokens, n);

    for (int l = 0; l < c->n_layers; l++) {
        const llama_layer *L = &m->layers[l];
        // attention block: x += Wo · attn(rope(Wq xn), rope(Wk xn), Wv xn)
        backend_rmsnorm(be, s->xb, s->x, &L->attn_norm, n, c->norm_eps);
        backend_matmul(be, s->q, s->xb, &L->wq, n);
        backend_matmul(be, s->k, s->xb, &L->wk, n);
        backend_matmul(be, s->v, s->xb, &L->wv, n);
        backend_rope(be, s->q, s->pos, n, c->n_heads, c->head_dim, c->rope_theta);
        backend_rope(be, s->k, s->pos, n, c->n_kv_heads, c->head_dim, c->rope_theta);
        attention_layer(m, l, segs, n_segs);
        backend_matmul(be, s->xb2, s->att, &L->wo, n);
        backend_add(be, s->x, s->xb2, (int64_t)n * dim);
        // MLP block: x += Wdown · (silu(Wgate xn) * Wup xn)
        backend_rmsnorm(be, s->xb, s->x, &L->ffn_norm, n, c->norm_eps);
        backend_matmul(be, s->hb, s->xb, &L->w_gate, n);
        backend_matmul(be, s->hb2, s->xb, &L->w_up, n);
        backend_swiglu(be, s->hb, s->hb2, (int64_t)n * c->hidden_dim);
        backend_matmul(be, s->xb2, s->hb, &L->w_down, n);
        backend_add(be, s->x, s->xb2, (int64_t)n * dim);
    }

    // Only each segment's last token needs logits.
    for (int i = 0, row = 0; i < n_segs; i++) {
        row += segs[i].n;
        backend_copy(be, s->last + i * dim, s->x + (int64_t)(row - 1) * dim, dim);
        m->kv.len[segs[i].slot] += segs[i].n;
    }
    backend_rmsnorm(be, s->last, s->last, &m->final_norm, n_segs, c->norm_eps);
    backend_matmul(be, s->logits, s->last, &m->lm_head, n_segs);
    backend_to_host(be, logits, s->logits, (int64_t)n_segs * c->vocab_size);
    return BURST_OK;
}

burst_status llama_prefill(llama_model *m, int slot, const int *tokens, int n, float *logits,
                           burst_error *err) {
    if (n < 1) return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: empty prompt", slot);
    if (slot >= 0 && slot < m->opt.n_slots && m->kv.len[slot] + n > m->opt.ctx)
        return BURST_FAIL(err, BURST_ERR_INVALID, "slot %d: %lld + %d tokens exceed the context of %d",
                          slot, (long long)m->kv.len[slot], n, m->opt.ctx);
    for (int done = 0; done < n;) {
        int chunk = n - done < m->opt.max_batch ? n - done : m->opt.max_batch;
        llama_segment seg = {.slot = slot, .n = chunk};
        burst_status st = llama_forward(m, &seg, 1, tokens + done, logits, err);
        if (st) return st;
        done += chunk;
    }
    return BURST_OK;
}
