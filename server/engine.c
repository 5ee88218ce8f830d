#define _POSIX_C_SOURCE 200809L
#include "engine.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "draft.h"
#include "stop.h"

// A request holding a KV slot (the slot is its index in engine.seq).
typedef struct {
    burst_request *req; // NULL: the slot is free
    uint64_t admitted;  // admission order: older prompts are prefilled first
    int n_prefilled;    // prompt tokens already in the KV cache
    int n_cached;       // of those, the ones the prefix cache held at admission
    int choice;         // which of the request's n_choices completions this slot runs
    int fork_of;        // 1 + the slot whose prompt this choice copies once it is prefilled (0: none)
    // A prompt that begins as another slot's: it waits until that slot holds the common prefix
    // (share_len tokens), then copies it (share_prefixes). share_used: that slot's held.used then;
    // if it changes, the slot has gone to another prompt and the wait ends.
    int share_from;     // 1 + that slot (0: none)
    int share_len;
    uint64_t share_used;
    int last;           // the last sampled token, fed back at the next decode step
    int draft_len;      // tokens to guess at its next decode step at most (--speculate)
    int n_gen;
    uint64_t run_at_admit; // the engine's n_run at admission
    double t_admit, t_first, t_last;
    double t_progress;  // when the last progress event went out
    sampler smp;
    detok_stream detok;
    stop_matcher stop;
    sampled_logprobs *prompt_lp; // (n_prompt) with prompt_logprobs: filled chunk by chunk, sent after the prefill
    // Logprobs entries of generated tokens whose text is still held back (by the detokenizer or
    // the stop matcher), each with the byte of the generated text where its token's text begins.
    struct held_logprobs { size_t at; sampled_logprobs lp; } *held;
    int n_held, cap_held;
    size_t text_in, text_out; // bytes of generated text into the stop matcher, and out of it
} engine_seq;

// A token sampled ahead of seq_take, with its logprobs when its request wants them (id -1: none).
typedef struct {
    int id;
    sampled_logprobs lp;
} presampled;

// The tokens whose K/V a slot holds, in order, kept while the slot is free: the prefix cache.
typedef struct {
    int *tokens;
    int len, cap;
    uint64_t used; // admission number of its last request: free slots are reused least recent first
} slot_tokens;

struct engine {
    llama_model *model;
    const tokenizer *tok;
    metrics *met;
    int n_slots, vocab, ctx, max_batch, prefill_chunk;
    double max_wait_s;
    int prefix_cache;
    int speculate;          // drafted tokens per decode step at most (0: off)
    int draft_room;         // drafted tokens per step at most, so that every slot still gets its turn
    engine_seq *seq;        // (n_slots)
    slot_tokens *held;      // (n_slots) what each slot's K/V cache holds
    float *logits;          // (llama_max_logits, vocab)
    int *sampled;           // (llama_max_logits) the ids drawn where the logits are, of segments that take them
    float *temperature, *unit; // (llama_max_logits each) their draws' arguments (llama_segment)
    llama_segment *segs;    // (n_slots)
    int *seg_seq;           // (n_slots) the slot of each segment
    int *seg_row;           // (n_slots) the first row of each segment's logits
    presampled *pre;        // (n_slots) each segment's first token, sampled ahead (presample_all)
    int threads;            // for presample_all
    int *tokens;            // (max_batch)
    uint64_t n_admitted;
    uint64_t n_run;         // tokens through llama_forward so far, every step's: the engine's work

    pthread_t thread;
    pthread_mutex_t mu;     // guards the fields below
    pthread_cond_t cv;      // signalled on submit, cancel and stop
    burst_request **queue;  // (max_queue) ring of waiting requests
    int max_queue, q_head, q_len, n_running;
    int stopping, started;
    // What engine_submit's wait estimate reads (written by the engine after each step):
    double *slot_left_s;    // (n_slots) estimated seconds until each slot frees (0: free)
    double request_s;       // running mean of a request's time in a slot
    double prefill_tok_s;   // running mean of prompt tokens per second in prefill steps
    double decode_step_s;   // running mean of a decode-only step's time
};

// Running mean weights for the wait estimate: recent steps count most.
static double ewma(double mean, double x) { return mean > 0 ? 0.8 * mean + 0.2 * x : x; }

#define REQ_LOG(level, req, fmt, ...) burst_log(level, __FILE__, __LINE__, __func__, "%s | " fmt, (req)->id, __VA_ARGS__)

static void set_gauges(engine *e) {
    metrics_set(e->met, METRIC_RUNNING, e->n_running);
    metrics_set(e->met, METRIC_WAITING, e->q_len);
}

// Logs a choice's line and counts it (each choice of a request with n_choices > 1 as one), then
// hands its DONE event over: a client that reads /metrics once it has its answer finds it
// counted. A cancelled request says where it was (queued, in its prefill with how far it got, or
// decoding).
static void log_finished(engine *e, burst_request *r, int choice, const request_result *res, char *tail,
                         sampled_logprobs *lp, int n_lp, const char *error, int n_prefilled) {
    finish_reason why = res->finish;
    char what[96], which[24] = "";
    if (r->n_choices > 1) snprintf(which, sizeof which, "choice %d ", choice);
    if (why != FINISH_CANCELLED) snprintf(what, sizeof what, "%s", finish_reason_str(why));
    else if (n_prefilled < 0) snprintf(what, sizeof what, "cancelled (client gone) while queued");
    else if (n_prefilled < r->n_prompt)
        snprintf(what, sizeof what, "cancelled (client gone) during prefill at %d/%d prompt tokens", n_prefilled, r->n_prompt);
    else snprintf(what, sizeof what, "cancelled (client gone) while decoding");
    REQ_LOG(why == FINISH_ERROR ? 'E' : 'I', r, "%s%s: prompt %d tokens (%d cached), generated %d tokens, queue %.3f s, "
            "ttft %.3f s, total %.3f s%s%s", which, what, r->n_prompt, res->n_cached, res->n_gen, res->queue_s, res->ttft_s, res->total_s,
            error ? ": " : "", error ? error : "");
    static const metric_counter counter[] = {[FINISH_STOP] = METRIC_FINISHED_STOP, [FINISH_LENGTH] = METRIC_FINISHED_LENGTH,
                                             [FINISH_CANCELLED] = METRIC_CANCELLED_DECODE, [FINISH_ERROR] = METRIC_FAILED};
    metric_counter c = counter[why];
    if (why == FINISH_CANCELLED && n_prefilled < r->n_prompt)
        c = n_prefilled < 0 ? METRIC_CANCELLED_QUEUED : METRIC_CANCELLED_PREFILL;
    metrics_add(e->met, c, 1);
    metrics_observe(e->met, METRIC_E2E, res->total_s);
    request_push_done(r, choice, tail, lp, n_lp, res);
}

// Keeps a generated token's entry until the text it begins comes out (take_logprobs).
static void hold_logprobs(engine_seq *q, const sampled_logprobs *lp) {
    if (q->n_held == q->cap_held) {
        q->cap_held = 2 * q->cap_held + 4;
        q->held = realloc(q->held, sizeof *q->held * (size_t)q->cap_held);
        BURST_ASSERT(q->held && "engine: out of memory holding logprobs");
    }
    q->held[q->n_held++] = (struct held_logprobs){q->text_in, *lp};
}

// Takes the held entries of the tokens whose text begins before byte `end` of the generated text:
// *n of them (NULL when none).
static sampled_logprobs *take_logprobs(engine_seq *q, size_t end, int *n) {
    int k = 0;
    while (k < q->n_held && q->held[k].at < end) k++;
    *n = k;
    if (!k) return NULL;
    sampled_logprobs *lp = burst_malloc(sizeof *lp * (size_t)k);
    for (int i = 0; i < k; i++) lp[i] = q->held[i].lp;
    memmove(q->held, q->held + k, sizeof *q->held * (size_t)(q->n_held - k));
    q->n_held -= k;
    return lp;
}

// The text still pending at the end of a completion (the detokenizer's, then the stop matcher's)
// and the logprobs entries of its tokens: all those held, unless a stop string cuts the text.
static char *pending_text(engine *e, engine_seq *q, sampled_logprobs **lp, int *n_lp) {
    int stopped = 0;
    char *rest = detok_flush(e->tok, &q->detok);
    char *tail = stop_feed(&q->stop, rest ? rest : "", &stopped);
    free(rest);
    if (!stopped) {
        char *held = stop_flush(&q->stop), *all = burst_malloc(strlen(tail) + strlen(held) + 1);
        strcat(strcpy(all, tail), held);
        free(tail);
        free(held);
        tail = all;
    }
    q->text_out += strlen(tail);
    *lp = take_logprobs(q, stopped ? q->text_out : SIZE_MAX, n_lp);
    return tail;
}

// Ends the request in slot s and frees the slot.
static void seq_finish(engine *e, int s, finish_reason why, const char *error) {
    engine_seq *q = &e->seq[s];
    burst_request *r = q->req;
    request_result res = {.n_prompt = r->n_prompt, .n_cached = q->n_cached, .n_gen = q->n_gen, .queue_s = q->t_admit - r->t_accept,
                          .ttft_s = q->n_gen ? q->t_first - r->t_accept : 0, .total_s = burst_now() - r->t_accept,
                          .finish = why};
    sampled_logprobs *lp = NULL;
    int n_lp = 0;
    char *tail = why == FINISH_ERROR ? strdup(error) : why == FINISH_CANCELLED ? NULL : pending_text(e, q, &lp, &n_lp);
    if (q->n_gen) metrics_observe(e->met, METRIC_DECODE, burst_now() - q->t_first);
    pthread_mutex_lock(&e->mu); // the gauges before the DONE event (log_finished)
    e->n_running--;
    e->slot_left_s[s] = 0;
    if (why != FINISH_CANCELLED && why != FINISH_ERROR) e->request_s = ewma(e->request_s, burst_now() - q->t_admit);
    set_gauges(e);
    pthread_mutex_unlock(&e->mu);
    log_finished(e, r, q->choice, &res, tail, lp, n_lp, error, q->n_prefilled);
    if (why == FINISH_ERROR || !e->prefix_cache) { // a failed forward leaves nothing to trust
        llama_slot_truncate(e->model, s, 0);
        e->held[s].len = 0;
    }
    sampler_free(&q->smp);
    detok_free(&q->detok);
    stop_free(&q->stop);
    free(q->prompt_lp);
    free(q->held);
    request_release(r);
    *q = (engine_seq){0};
    // Choices still waiting for this slot's prefill (cancelled or failed) end with it.
    for (int t = 0; t < e->n_slots; t++)
        if (e->seq[t].req && e->seq[t].fork_of == s + 1) seq_finish(e, t, why, error);
}

// Tokens at the start of prompt r that n tokens begin with (at most all but the last prompt token,
// which must run for its logits; none when r wants every prompt token's logprobs).
static int common_prefix(const engine *e, const int *tokens, int n, const burst_request *r) {
    int len = 0;
    if (!e->prefix_cache || r->prompt_logprobs) return 0;
    while (len < n && len < r->n_prompt - 1 && tokens[len] == r->prompt[len]) len++;
    return len;
}

// Tokens at the start of prompt r that slot s holds.
static int cached_prefix(const engine *e, int s, const burst_request *r) {
    return common_prefix(e, e->held[s].tokens, e->held[s].len, r);
}

static void reserve_tokens(slot_tokens *h, int n) {
    if (n <= h->cap) return;
    h->tokens = realloc(h->tokens, sizeof(int) * (size_t)(h->cap = 2 * n));
    BURST_ASSERT(h->tokens && "engine: out of memory holding a slot's tokens");
}

// Slot dst takes the first len tokens slot src holds: their K/V, and the books of which they are.
static void copy_slot(engine *e, int dst, int src, int len) {
    llama_slot_copy(e->model, dst, src, len);
    slot_tokens *to = &e->held[dst];
    reserve_tokens(to, len);
    memcpy(to->tokens, e->held[src].tokens, sizeof(int) * (size_t)len);
    to->len = len;
}

// The free slot used least recently (or never), other than `keep` if another is free. Called with
// e->mu held.
static int lru_slot(const engine *e, int keep) {
    int lru = -1;
    for (int s = 0; s < e->n_slots; s++)
        if (!e->seq[s].req && (lru < 0 || lru == keep || (s != keep && e->held[s].used < e->held[lru].used))) lru = s;
    return lru;
}

// The free slot for prompt r: the one holding the longest prefix of it when that prefix is at least
// half of what the slot holds, else the least recently used (so a short match, say a BOS, does not
// evict a long conversation); *reuse: the tokens it keeps. Called with e->mu held.
static int pick_slot(const engine *e, const burst_request *r, int *reuse) {
    int best = -1, best_len = 0, lru = lru_slot(e, -1);
    for (int s = 0; s < e->n_slots; s++) {
        int len = e->seq[s].req ? 0 : cached_prefix(e, s, r);
        if (len > best_len) best = s, best_len = len;
    }
    int s = best >= 0 && 2 * best_len >= e->held[best].len ? best : lru;
    *reuse = s == best ? best_len : cached_prefix(e, lru, r);
    return s;
}

// The prompt r just admitted to slot s, which holds `reuse` tokens of it, copies a longer prefix from
// the slot that holds the longest now (free or running), or waits for the prompt of a running
// slot to be prefilled past a prefix that is longer still by a chunk or more (less would not repay
// the wait). Called with e->mu held.
static void find_share(engine *e, int s, const burst_request *r, int reuse) {
    int from = -1, len = reuse;
    for (int t = 0; t < e->n_slots; t++) {
        int n = t == s ? 0 : cached_prefix(e, t, r);
        if (n > len) from = t, len = n;
    }
    for (int t = 0, wait_len = len + e->prefill_chunk - 1; t < e->n_slots; t++) {
        const engine_seq *o = &e->seq[t];
        int n = t == s || !o->req || o->fork_of ? 0 : common_prefix(e, o->req->prompt, o->req->n_prompt, r);
        if (n > wait_len) from = t, len = wait_len = n;
    }
    if (from < 0) return;
    engine_seq *q = &e->seq[s];
    q->share_from = from + 1, q->share_len = len, q->share_used = e->held[from].used;
}

// Waiting prompts whose source slot now holds their shared prefix copy it and go on after it. Those
// whose source has gone to another prompt, or ended short of it, copy what it holds of it and
// prefill the rest themselves. Repeats while copies happen, as a source may itself have waited.
static void share_prefixes(engine *e) {
    for (int copied = 1; copied;) {
        copied = 0;
        for (int s = 0; s < e->n_slots; s++) {
            engine_seq *q = &e->seq[s];
            if (!q->share_from) continue;
            int t = q->share_from - 1, same = e->held[t].used == q->share_used;
            int have = same ? cached_prefix(e, t, q->req) : 0;
            if (have < q->share_len && same && e->seq[t].req) continue; // it is still coming
            q->share_from = 0;
            if (have <= q->n_cached) continue;
            copy_slot(e, s, t, have);
            metrics_add(e->met, METRIC_PREFIX_HITS, (uint64_t)(have - q->n_cached));
            q->n_prefilled = q->n_cached = have;
            copied = 1;
        }
    }
}

// Gives choice `choice` of a waiting request the free slot s, whose first `reuse` tokens it keeps
// (the caller cuts the slot's K/V to them). Choices past the first wait for the first one's
// prefill in slot `lead` and copy it (fork_choices). Called with e->mu held.
static void seq_admit(engine *e, int s, burst_request *r, int reuse, int choice, int lead) {
    engine_seq *q = &e->seq[s];
    *q = (engine_seq){.req = r, .admitted = e->n_admitted++, .run_at_admit = e->n_run, .t_admit = burst_now(),
                      .n_prefilled = reuse, .n_cached = reuse, .choice = choice, .fork_of = choice ? lead + 1 : 0,
                      .draft_len = e->speculate};
    e->held[s].len = reuse;
    e->held[s].used = q->admitted + 1; // 0: never used, the first to go
    sampler_params sp = r->sampling;
    sp.seed += (uint64_t)choice; // each choice its own draws (with a seed, reproducibly)
    sp.context = r->prompt, sp.n_context = r->n_prompt;
    sampler_init(&q->smp, &sp, e->vocab);
    detok_init(&q->detok, r->prompt, r->n_prompt);
    stop_init(&q->stop, r->stop, r->n_stop);
    if (r->prompt_logprobs) {
        q->prompt_lp = burst_calloc((size_t)r->n_prompt, sizeof *q->prompt_lp);
        q->prompt_lp[0].chosen = (token_logprob){r->prompt[0], NAN}; // nothing predicts the first token
    }
    e->n_running++;
    if (choice) return;
    metrics_observe(e->met, METRIC_QUEUE, q->t_admit - r->t_accept);
    metrics_add(e->met, METRIC_PROMPT_TOKENS, (uint64_t)r->n_prompt);
    if (e->prefix_cache) {
        metrics_add(e->met, METRIC_PREFIX_QUERIES, (uint64_t)r->n_prompt);
        metrics_add(e->met, METRIC_PREFIX_HITS, (uint64_t)reuse);
    }
}

// Admits waiting requests while slots last; waits while there is nothing to do.
// Returns 0 when the engine is stopping.
static int admit(engine *e) {
    pthread_mutex_lock(&e->mu);
    while (!e->stopping && !e->n_running && !e->q_len) pthread_cond_wait(&e->cv, &e->mu);
    while (e->q_len && e->n_running + e->queue[e->q_head]->n_choices <= e->n_slots) {
        burst_request *r = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->max_queue;
        e->q_len--;
        if (!request_cancelled(r)) {
            int reuse, s = pick_slot(e, r, &reuse);
            seq_admit(e, s, r, reuse, 0, s);
            find_share(e, s, r, reuse);
            for (int c = 1; c < r->n_choices; c++) { // each choice holds a reference, as the first
                request_retain(r);
                seq_admit(e, lru_slot(e, e->seq[s].share_from - 1), r, 0, c, s); // not the prefix it copies
            }
            continue;
        }
        request_result res = {.n_prompt = r->n_prompt, .total_s = burst_now() - r->t_accept, .finish = FINISH_CANCELLED};
        log_finished(e, r, 0, &res, NULL, NULL, 0, NULL, -1); // gone before it reached a slot
        request_release(r);
    }
    set_gauges(e);
    int running = !e->stopping;
    pthread_mutex_unlock(&e->mu);
    // Cut the admitted slots' K/V to the prefixes they keep, outside the lock (in a cluster the
    // workers are told).
    for (int s = 0; s < e->n_slots; s++)
        if (e->seq[s].req && llama_slot_len(e->model, s) > e->held[s].len) llama_slot_truncate(e->model, s, e->held[s].len);
    return running;
}

// Appends the tokens a successful forward call fed to each segment's slot to what it holds.
static void hold_tokens(engine *e, int n_segs) {
    for (int i = 0, tok0 = 0; i < n_segs; tok0 += e->segs[i++].n) {
        slot_tokens *h = &e->held[e->segs[i].slot];
        reserve_tokens(h, h->len + e->segs[i].n);
        memcpy(h->tokens + h->len, e->tokens + tok0, sizeof(int) * (size_t)e->segs[i].n);
        h->len += e->segs[i].n;
    }
}

// Samples the next token of slot s from its logits row, or takes the id the model drew from the
// row where the logits are (sampled_there; the sampler's generator moves on as if it had drawn
// it); reads nothing of the engine that another slot's sampling writes, so the slots may sample
// side by side.
static presampled presample(engine *e, int s, const float *logits, const int *sampled) {
    engine_seq *q = &e->seq[s];
    presampled p = {.id = sampled ? *sampled : sampler_sample(&q->smp, logits)};
    if (sampled) sampler_skip(&q->smp);
    if (q->req->logprobs) // of the raw logits, as vLLM's default (sampler_sample only read them)
        sampler_logprobs(logits, e->vocab, p.id, q->req->top_logprobs, &p.lp);
    return p;
}

// Hands slot s's sampled token over; finishes the request at EOS, a stop string, max_tokens or
// the context limit (the slot's K/V being what e->held says). Returns the token.
static int seq_take(engine *e, int s, const presampled *p) {
    engine_seq *q = &e->seq[s];
    burst_request *r = q->req;
    int id = p->id;
    double now = burst_now();
    metrics_observe(e->met, q->n_gen ? METRIC_ITL : METRIC_TTFT, now - (q->n_gen ? q->t_last : r->t_accept));
    metrics_add(e->met, METRIC_GENERATION_TOKENS, 1);
    if (!q->n_gen) q->t_first = now;
    q->n_gen++;
    q->t_last = now;
    q->last = id;
    // EOS, or a stop_token_ids id, has no text: it only ends the stream
    if ((id == tokenizer_eos(e->tok) && !r->ignore_eos) || request_stops_at(r, id)) {
        seq_finish(e, s, FINISH_STOP, NULL);
        return id;
    }
    char *text = detok_push(e->tok, &q->detok, id);
    if (!text) {
        seq_finish(e, s, FINISH_ERROR, "sampled a token id with no piece");
        return id;
    }
    if (r->logprobs) hold_logprobs(q, &p->lp);
    int stopped = 0, n_lp;
    q->text_in += strlen(text);
    char *out = stop_feed(&q->stop, text, &stopped);
    free(text);
    q->text_out += strlen(out);
    // Entries go out with the text their tokens begin. At a stop string, tokens that begin at or
    // past the cut (wholly inside the stop string) lose their entries; a token that begins before
    // the cut and runs into the stop string keeps its entry although its text is cut short (as
    // vLLM, which keeps the entries of every token up to the one that completed the stop string).
    sampled_logprobs *lp = take_logprobs(q, q->text_out, &n_lp);
    if (stopped) q->n_held = 0;
    request_push_token(r, q->choice, out, lp, n_lp);
    if (stopped) seq_finish(e, s, FINISH_STOP, NULL);
    else if (q->n_gen >= r->max_tokens || e->held[s].len + 1 > e->ctx) seq_finish(e, s, FINISH_LENGTH, NULL);
    return id;
}

static int seq_sample(engine *e, int s, const float *logits, const int *sampled) {
    presampled p = presample(e, s, logits, sampled);
    return seq_take(e, s, &p);
}

// Slot s's decode segment i ran its last sampled token and n - 1 drafted ones (rows: their logits):
// samples from each row in turn while the token sampled is the one drafted next, so each token
// is what a step of its own would have given; keeps the K/V of the tokens that stand.
static void seq_decode(engine *e, int i, const float *rows) {
    int s = e->seg_seq[i], n = e->segs[i].n, j = 0;
    slot_tokens *h = &e->held[s];
    int base = h->len - n; // what the slot held before this step
    for (;; j++) {
        h->len = base + j + 1; // the K/V that stand while row j is sampled: through fed token j
        const int *sampled = e->segs[i].sampled ? e->segs[i].sampled + j : NULL;
        int id = j ? seq_sample(e, s, rows + (int64_t)j * e->vocab, sampled) : seq_take(e, s, &e->pre[i]);
        if (!e->seq[s].req || j + 1 == n || id != h->tokens[base + j + 1]) break;
    }
    if (llama_slot_len(e->model, s) > h->len) llama_slot_truncate(e->model, s, h->len);
    if (n == 1) return;
    metrics_add(e->met, METRIC_SPEC_DRAFTS, (uint64_t)(n - 1));
    metrics_add(e->met, METRIC_SPEC_ACCEPTED, (uint64_t)j);
    // Guess 2 more after a step that kept every guess, 1 fewer after one that did not (as Hugging
    // Face's assisted generation does), so that text the guesses miss costs few wasted tokens.
    engine_seq *q = &e->seq[s];
    if (q->req) q->draft_len = j == n - 1 ? (q->draft_len + 2 < e->speculate ? q->draft_len + 2 : e->speculate)
                                          : (q->draft_len > 1 ? q->draft_len - 1 : 1);
}

// Drops running requests whose client went away, freeing their slots.
static void drop_cancelled(engine *e) {
    for (int s = 0; s < e->n_slots; s++)
        if (e->seq[s].req && request_cancelled(e->seq[s].req)) seq_finish(e, s, FINISH_CANCELLED, NULL);
}

// Whether slot s has prompt tokens to prefill now: not waiting for another slot's prefill, and not
// already among the first n_segs segments of this step.
static int wants_prefill(const engine *e, int n_segs, int s) {
    const engine_seq *q = &e->seq[s];
    if (!q->req || q->fork_of || q->share_from || q->n_prefilled >= q->req->n_prompt) return 0;
    for (int i = 0; i < n_segs; i++)
        if (e->seg_seq[i] == s) return 0;
    return 1;
}

// A prompt's place in the order of prefills (lowest first): its tokens left to prefill, so that a
// short prompt is not stuck behind a long one, less half the prefill it has been denied (the
// tokens the engine ran since its admission, beyond its own). A long prompt under a steady stream
// of short ones thus goes first once it has waited about twice as long as its prefill takes; one
// that is being prefilled keeps its place behind newer short prompts; and a short wait does not
// undo fewest-left-first among prompts admitted together. Counted in tokens rather than measured
// in seconds, the order does not depend on how fast the machine happened to run: a wait times the
// latest speed misjudged the denial whenever the speed changed while the prompt waited.
static double prefill_key(const engine *e, const engine_seq *q) {
    double denied = (double)(e->n_run - q->run_at_admit) - (q->n_prefilled - q->n_cached);
    return (q->req->n_prompt - q->n_prefilled) - (denied > 0 ? 0.5 * denied : 0);
}

// Slot s's place, or that of a prompt waiting for s's prefix if earlier: a source goes as soon as
// the prompts that wait for it would.
static double prefill_order(const engine *e, int s) {
    double key = prefill_key(e, &e->seq[s]);
    for (int w = 0; w < e->n_slots; w++) {
        const engine_seq *q = &e->seq[w];
        if (q->req && q->share_from == s + 1) key = fmin(key, prefill_key(e, q));
    }
    return key;
}

// Tokens to draft after slot s's last sampled token into out: at most `room`, speculate, one
// less than the tokens max_tokens leaves (the last one is sampled anyway), and what the context
// leaves.
static int draft(engine *e, int s, int room, int *out) {
    const engine_seq *q = &e->seq[s];
    slot_tokens *h = &e->held[s];
    int most = q->draft_len < room ? q->draft_len : room;
    if (q->req->max_tokens - q->n_gen - 1 < most) most = q->req->max_tokens - q->n_gen - 1;
    if (e->ctx - h->len - 1 < most) most = e->ctx - h->len - 1;
    if (most < 1) return 0;
    reserve_tokens(h, h->len + 1);
    h->tokens[h->len] = q->last; // past len: a scratch place, not held
    return draft_lookup(h->tokens, h->len + 1, most, out);
}

// Whether slot s's tokens may be drawn where the logits are (backend_sample; on a GPU 4 bytes back a
// row instead of the row, and a step whose rows all are brings no logits back): greedy or at a
// temperature alone, without filters, logit bias or penalties (sampler_unfiltered), and no logprobs.
static int sampled_there(const engine_seq *q) { return sampler_unfiltered(&q->smp) && !q->req->logprobs; }

// Segment seg's rows (from row `row` on, n of them) drawn where the logits are: greedy, or at slot
// s's temperature with the next n units of its generator, one a row in turn (seq_decode takes the
// rows in order, and presample moves the generator on by one for each row taken).
static void sample_there(engine *e, llama_segment *seg, int s, int row, int n) {
    const sampler *smp = &e->seq[s].smp;
    seg->sampled = e->sampled + row;
    if (sampler_greedy(smp)) return;
    seg->temperature = e->temperature + row, seg->unit = e->unit + row;
    for (int j = 0; j < n; j++) e->temperature[row + j] = smp->p.temperature;
    sampler_peek_units(smp, n, e->unit + row);
}

// Fills e->segs/e->tokens/e->seg_row for one step; returns the number of segments. Decoding
// requests first, one token each and any drafts; then prompt chunks of at most prefill_chunk
// tokens in prefill_order (older first among equals), while tokens of max_batch are left. A
// prompt that gets less than its chunk because others went first counts as a preemption. The
// chunk lets long prompts interleave with other requests: a request alone in its slots has none
// to interleave with, and takes whole steps (larger products: on the CPU, 6% sooner to the first
// token of 3000 at --batch 512).
static int build_batch(engine *e) {
    int n_segs = 0, n_tok = 0, n_rows = 0, room = e->draft_room, running = 0;
    for (int s = 0; s < e->n_slots; s++) running += e->seq[s].req != NULL;
    const int chunk = running > 1 ? e->prefill_chunk : e->max_batch;
    for (int s = 0; s < e->n_slots; s++) {
        engine_seq *q = &e->seq[s];
        if (!q->req || q->n_prefilled < q->req->n_prompt) continue;
        e->tokens[n_tok] = q->last;
        int k = draft(e, s, room, e->tokens + n_tok + 1); // 0 without --speculate (draft_len 0)
        room -= k;
        e->segs[n_segs] = (llama_segment){.slot = s, .n = 1 + k, .n_logits = 1 + k};
        if (sampled_there(q)) sample_there(e, &e->segs[n_segs], s, n_rows, 1 + k);
        e->seg_row[n_segs] = n_rows;
        e->seg_seq[n_segs++] = s;
        n_tok += 1 + k, n_rows += 1 + k;
    }
    for (;;) {
        int best = -1;
        double best_key = 0;
        for (int s = 0; s < e->n_slots; s++) {
            if (!wants_prefill(e, n_segs, s)) continue;
            double key = prefill_order(e, s);
            if (best < 0 || key < best_key || (key == best_key && e->seq[s].admitted < e->seq[best].admitted))
                best = s, best_key = key;
        }
        if (best < 0) break;
        engine_seq *q = &e->seq[best];
        int left = q->req->n_prompt - q->n_prefilled, want = left < chunk ? left : chunk;
        int n = want < e->max_batch - n_tok ? want : e->max_batch - n_tok;
        if (n < want) metrics_add(e->met, METRIC_PREEMPTIONS, 1);
        if (n == 0) { // no room this step; the others wait too (they come after it)
            for (int s = 0; s < e->n_slots; s++)
                if (s != best && wants_prefill(e, n_segs, s)) metrics_add(e->met, METRIC_PREEMPTIONS, 1);
            break;
        }
        memcpy(e->tokens + n_tok, q->req->prompt + q->n_prefilled, sizeof(int) * (size_t)n);
        // A chunk that does not end the prompt gives no token (its row's greedy id goes unread);
        // one that does also gives the first tokens of the request's other choices, each from its
        // own sampler.
        e->segs[n_segs] = (llama_segment){.slot = best, .n = n, .all_rows = q->prompt_lp && left > 1,
                                          .sampled = n < left ? e->sampled + n_rows : NULL};
        if (n == left && sampled_there(q) && q->req->n_choices == 1) sample_there(e, &e->segs[n_segs], best, n_rows, 1);
        e->seg_row[n_segs] = n_rows++;
        e->seg_seq[n_segs++] = best;
        n_tok += n;
    }
    if (n_segs) metrics_observe(e->met, METRIC_STEP_TOKENS, n_tok);
    return n_segs;
}

// llama_forward's rows callback, for the prompt chunks of requests with prompt_logprobs: the
// logits of prompt token j give token j + 1's entry, taken at once, so no more than a block of
// logits rows is ever held. The rows' entries are taken side by side: each is a log-softmax over
// the vocabulary (~0.1 ms for 32000), 0.1 s for a 1000-token prompt on one thread, several times
// its prefill on a GPU.
static void prompt_rows(void *ctx, int seg, int row0, int n_rows, const float *rows) {
    engine *e = ctx;
    engine_seq *q = &e->seq[e->seg_seq[seg]];
    const burst_request *r = q->req;
    #pragma omp parallel for num_threads(e->threads) schedule(static) if (n_rows > 1)
    for (int j = 0; j < n_rows; j++) {
        int next = q->n_prefilled + row0 + j + 1; // n_prefilled moves on after the forward call
        if (next < r->n_prompt) // the last prompt token's logits give the first generated token's
            sampler_logprobs(rows + (int64_t)j * e->vocab, e->vocab, r->prompt[next], r->top_logprobs,
                             &q->prompt_lp[next]);
    }
}

// After a step that ran prompt chunks: progress events for prefills that have taken more than a
// second (at most four a second each); for those that completed, the prefill-time metric and
// the prompt's logprobs when asked.
static void prefill_progress(engine *e, int seg, double now) {
    engine_seq *q = &e->seq[e->seg_seq[seg]];
    burst_request *r = q->req;
    if (q->n_prefilled == r->n_prompt) {
        metrics_observe(e->met, METRIC_PREFILL, now - q->t_admit);
        for (int t = 0; q->prompt_lp && t < e->n_slots; t++) // the choices waiting to copy it get theirs
            if (e->seq[t].req && e->seq[t].fork_of == e->seg_seq[seg] + 1) {
                sampled_logprobs *lp = burst_malloc(sizeof *lp * (size_t)r->n_prompt);
                request_push_token(r, e->seq[t].choice, NULL, memcpy(lp, q->prompt_lp, sizeof *lp * (size_t)r->n_prompt),
                                   r->n_prompt);
            }
        if (q->prompt_lp) request_push_token(r, q->choice, NULL, q->prompt_lp, r->n_prompt);
        q->prompt_lp = NULL;
        return;
    }
    if (now - r->t_accept < 1.0 || now - q->t_progress < 0.25) return;
    q->t_progress = now;
    request_push_progress(r, &(request_progress){.processed = q->n_prefilled, .total = r->n_prompt,
                                                 .elapsed_s = now - r->t_accept});
}

// Refreshes what engine_submit's estimate reads and the KV usage gauge. prefill_tokens: prompt
// tokens in the step that took step_s.
static void update_estimates(engine *e, int prefill_tokens, double step_s) {
    int64_t used = 0;
    for (int s = 0; s < e->n_slots; s++) used += e->seq[s].req ? llama_slot_len(e->model, s) : 0;
    metrics_set(e->met, METRIC_KV_USAGE, (double)used / ((double)e->n_slots * e->ctx));
    pthread_mutex_lock(&e->mu);
    if (prefill_tokens) e->prefill_tok_s = ewma(e->prefill_tok_s, prefill_tokens / step_s);
    else e->decode_step_s = ewma(e->decode_step_s, step_s);
    for (int s = 0; s < e->n_slots; s++) {
        engine_seq *q = &e->seq[s];
        if (!q->req) continue;
        int prompt_left = q->fork_of ? 0 : q->req->n_prompt - q->n_prefilled, gen_left = q->req->max_tokens - q->n_gen;
        e->slot_left_s[s] = (e->prefill_tok_s > 0 ? prompt_left / e->prefill_tok_s : 0) + gen_left * e->decode_step_s;
    }
    pthread_mutex_unlock(&e->mu);
}

// Slot s has just prefilled the prompt of a request with several choices: the choices waiting for
// it copy its K/V and sample their first tokens from the same logits.
static void fork_choices(engine *e, int s, const float *logits) {
    for (int t = 0; t < e->n_slots; t++) {
        engine_seq *c = &e->seq[t];
        if (!c->req || c->fork_of != s + 1) continue;
        copy_slot(e, t, s, e->held[s].len);
        c->n_prefilled = c->req->n_prompt, c->n_cached = e->seq[s].n_cached, c->fork_of = 0;
        if (c->req->max_tokens == 0) seq_finish(e, t, FINISH_LENGTH, NULL); // echo: the prompt alone
        else seq_sample(e, t, logits, NULL);
    }
}

// Whether segment i samples a token from its first row of logits: it decodes, or ends its prompt
// (with max_tokens 0, echo, it ends there instead).
static int samples(const engine *e, int i) {
    const engine_seq *q = &e->seq[e->seg_seq[i]];
    int prefilled = q->n_prefilled + (q->n_prefilled < q->req->n_prompt ? e->segs[i].n : 0);
    return prefilled == q->req->n_prompt && q->req->max_tokens > 0;
}

// Samples every segment's first token into e->pre, the segments side by side: at 0.15 to 0.25 ms
// a request on a 32000-token vocabulary (with temperature; logprobs as much again), one thread
// would take 10 ms or more a step for 64 requests, longer than a GPU's decode step. Each request
// has its own sampler and seed, so the tokens do not depend on the threads.
static void presample_all(engine *e, int n_segs) {
    int n = 0;
    for (int i = 0; i < n_segs; i++) n += samples(e, i);
    #pragma omp parallel for num_threads(e->threads < n ? e->threads : n) schedule(dynamic) if (n > 1)
    for (int i = 0; i < n_segs; i++)
        e->pre[i] = samples(e, i) ? presample(e, e->seg_seq[i], e->logits + (int64_t)e->seg_row[i] * e->vocab,
                                              e->segs[i].sampled)
                                  : (presampled){.id = -1};
}

// One engine step: one llama_forward over every running request, then sampling.
static void step(engine *e) {
    drop_cancelled(e);
    share_prefixes(e);
    int n_segs = build_batch(e);
    if (!n_segs) return;
    burst_error err = {{0}};
    double t0 = burst_now();
    if (llama_forward(e->model, e->segs, n_segs, e->tokens, e->logits, prompt_rows, e, &err)) {
        for (int i = 0; i < n_segs; i++) seq_finish(e, e->seg_seq[i], FINISH_ERROR, err.msg);
        return;
    }
    for (int i = 0; i < n_segs; i++) e->n_run += (uint64_t)e->segs[i].n;
    hold_tokens(e, n_segs);
    presample_all(e, n_segs);
    double now = burst_now();
    int prefill_tokens = 0;
    for (int i = 0; i < n_segs; i++) {
        engine_seq *q = &e->seq[e->seg_seq[i]];
        const float *rows = e->logits + (int64_t)e->seg_row[i] * e->vocab;
        if (q->n_prefilled == q->req->n_prompt) { // decoding
            seq_decode(e, i, rows);
            continue;
        }
        q->n_prefilled += e->segs[i].n;
        prefill_tokens += e->segs[i].n;
        prefill_progress(e, i, now);
        if (q->n_prefilled < q->req->n_prompt) continue;
        if (q->req->n_choices > 1 && q->n_gen == 0) fork_choices(e, e->seg_seq[i], rows);
        if (q->req->max_tokens == 0) seq_finish(e, e->seg_seq[i], FINISH_LENGTH, NULL); // echo: the prompt alone
        else seq_take(e, e->seg_seq[i], &e->pre[i]);
    }
    update_estimates(e, prefill_tokens, now - t0);
}

static void *engine_main(void *arg) {
    engine *e = arg;
    while (admit(e)) step(e);
    return NULL;
}

burst_status engine_start(llama_model *m, const tokenizer *tok, metrics *met, const engine_options *opt,
                          engine **out, burst_error *err) {
    const llama_options *lo = llama_options_of(m);
    if (opt->max_queue < 1) return BURST_FAIL(err, BURST_ERR_INVALID, "max_queue %d (want >= 1)", opt->max_queue);
    engine *e = burst_calloc(1, sizeof *e);
    *e = (engine){.model = m, .tok = tok, .met = met, .n_slots = lo->n_slots, .ctx = lo->ctx,
                  .max_batch = lo->max_batch, .vocab = llama_config_of(m)->vocab_size, .max_queue = opt->max_queue,
                  .prefill_chunk = opt->prefill_chunk > 0 && opt->prefill_chunk < lo->max_batch ? opt->prefill_chunk
                                                                                              : lo->max_batch,
                  .max_wait_s = opt->max_wait_s, .prefix_cache = opt->prefix_cache, .speculate = opt->speculate,
                  .threads = opt->threads > 0 ? opt->threads : omp_get_num_procs()};
    // Rows of logits beyond one for each slot; tokens too, as the model keeps max_logits <= max_batch.
    e->draft_room = llama_max_logits(m) - e->n_slots;
    e->slot_left_s = burst_calloc((size_t)e->n_slots, sizeof(double));
    e->seq = burst_calloc((size_t)e->n_slots, sizeof *e->seq);
    e->held = burst_calloc((size_t)e->n_slots, sizeof *e->held);
    e->logits = burst_malloc(sizeof(float) * (size_t)llama_max_logits(m) * (size_t)e->vocab);
    e->sampled = burst_malloc(sizeof(int) * (size_t)llama_max_logits(m));
    e->temperature = burst_malloc(sizeof(float) * (size_t)llama_max_logits(m));
    e->unit = burst_malloc(sizeof(float) * (size_t)llama_max_logits(m));
    e->segs = burst_malloc(sizeof *e->segs * (size_t)e->n_slots);
    e->seg_seq = burst_malloc(sizeof(int) * (size_t)e->n_slots);
    e->seg_row = burst_malloc(sizeof(int) * (size_t)e->n_slots);
    e->pre = burst_malloc(sizeof *e->pre * (size_t)e->n_slots);
    e->tokens = burst_malloc(sizeof(int) * (size_t)e->max_batch);
    e->queue = burst_calloc((size_t)e->max_queue, sizeof *e->queue);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc) {
        engine_free(e);
        return BURST_FAIL(err, BURST_ERR_NOMEM, "pthread_create: error %d", rc);
    }
    e->started = 1;
    *out = e;
    return BURST_OK;
}

void engine_stop(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = 1;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->started) pthread_join(e->thread, NULL);
    e->started = 0;
    for (int s = 0; s < e->n_slots; s++)
        if (e->seq[s].req) seq_finish(e, s, FINISH_ERROR, "the server is shutting down");
    pthread_mutex_lock(&e->mu); // HTTP threads may still count the queue
    for (; e->q_len; e->q_len--, e->q_head = (e->q_head + 1) % e->max_queue) {
        burst_request *r = e->queue[e->q_head];
        request_result res = {.n_prompt = r->n_prompt, .total_s = burst_now() - r->t_accept, .finish = FINISH_ERROR};
        log_finished(e, r, 0, &res, strdup("the server is shutting down"), NULL, 0, "the server is shutting down", -1);
        request_release(r);
    }
    pthread_mutex_unlock(&e->mu);
}

void engine_free(engine *e) {
    if (!e) return;
    engine_stop(e);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->queue);
    free(e->tokens);
    free(e->pre);
    free(e->seg_row);
    free(e->seg_seq);
    free(e->segs);
    free(e->logits);
    free(e->sampled), free(e->temperature), free(e->unit);
    for (int s = 0; s < e->n_slots; s++) free(e->held[s].tokens);
    free(e->held);
    free(e->seq);
    free(e->slot_left_s);
    free(e);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Estimated seconds until a request of n_choices queued now gets its slots: the k-th slot to
// free, k the slots that the requests ahead take (each its choices) and its own but one, plus a
// mean request time per round of slots. Called with e->mu held.
static double estimate_wait(const engine *e, int n_choices) {
    double left[e->n_slots];
    memcpy(left, e->slot_left_s, sizeof left);
    qsort(left, (size_t)e->n_slots, sizeof(double), by_value);
    int ahead = n_choices - 1;
    for (int i = 0; i < e->q_len; i++) ahead += e->queue[(e->q_head + i) % e->max_queue]->n_choices;
    return left[ahead % e->n_slots] + (double)(ahead / e->n_slots) * e->request_s;
}

engine_admission engine_submit(engine *e, burst_request *req, double *retry_after_s) {
    *retry_after_s = 0;
    if (req->max_tokens == 0 && !req->prompt_logprobs) { // echo alone: the prompt's text, no model
        request_result res = {.n_prompt = req->n_prompt, .total_s = burst_now() - req->t_accept, .finish = FINISH_LENGTH};
        for (int c = 0; c < req->n_choices; c++) log_finished(e, req, c, &res, NULL, NULL, 0, NULL, req->n_prompt);
        return ENGINE_ACCEPTED;
    }
    pthread_mutex_lock(&e->mu);
    engine_admission a = ENGINE_ACCEPTED;
    double wait = estimate_wait(e, req->n_choices);
    if (e->q_len >= e->max_queue || e->stopping) a = ENGINE_QUEUE_FULL;
    else if (e->max_wait_s > 0 && wait > e->max_wait_s) a = ENGINE_WAIT_TOO_LONG;
    if (a == ENGINE_ACCEPTED) {
        request_retain(req);
        e->queue[(e->q_head + e->q_len++) % e->max_queue] = req;
        set_gauges(e);
        pthread_cond_signal(&e->cv);
    }
    // Retry when a slot is expected to free (at least a second from now).
    *retry_after_s = wait > 1 ? wait : 1;
    pthread_mutex_unlock(&e->mu);
    return a;
}

void engine_cancel(engine *e, burst_request *req) {
    request_cancel(req);
    pthread_mutex_lock(&e->mu);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void engine_counts(engine *e, int *running, int *waiting) {
    pthread_mutex_lock(&e->mu);
    *running = e->n_running;
    *waiting = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

int engine_max_queue(const engine *e) { return e->max_queue; }
