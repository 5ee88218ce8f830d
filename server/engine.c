#define _POSIX_C_SOURCE 200809L
#include "engine.h"

#include <stdlib.h>
#include <string.h>

#include "stop.h"

// A request holding a KV slot (the slot is its index in engine.seq).
typedef struct {
    burst_request *req; // NULL: the slot is free
    uint64_t admitted;  // admission order: older prompts are prefilled first
    int n_prefilled;    // prompt tokens already in the KV cache
    int last;           // the last sampled token, fed back at the next decode step
    int n_gen;
    double t_admit, t_first, t_last;
    sampler smp;
    detok_stream detok;
    stop_matcher stop;
} engine_seq;

struct engine {
    llama_model *model;
    const tokenizer *tok;
    metrics *met;
    int n_slots, vocab, ctx, max_batch;
    engine_seq *seq;        // (n_slots)
    float *logits;          // (n_slots, vocab)
    llama_segment *segs;    // (n_slots)
    int *seg_seq;           // (n_slots) the slot of each segment
    int *tokens;            // (max_batch)
    uint64_t n_admitted;

    pthread_t thread;
    pthread_mutex_t mu;     // guards the fields below
    pthread_cond_t cv;      // signalled on submit, cancel and stop
    burst_request **queue;  // (max_queue) ring of waiting requests
    int max_queue, q_head, q_len, n_running;
    int stopping, started;
};

#define REQ_LOG(level, req, fmt, ...) burst_log(level, __FILE__, __LINE__, __func__, "%s | " fmt, (req)->id, __VA_ARGS__)

static void set_gauges(engine *e) {
    metrics_set(e->met, METRIC_RUNNING, e->n_running);
    metrics_set(e->met, METRIC_WAITING, e->q_len);
}

// Hands the DONE event over, logs the request's line and counts it.
static void log_finished(engine *e, burst_request *r, const request_result *res, char *tail, const char *error) {
    finish_reason why = res->finish;
    request_push(r, REQ_EVENT_DONE, tail, res);
    REQ_LOG(why == FINISH_ERROR ? 'E' : 'I', r, "%s: prompt %d tokens, generated %d tokens, queue %.3f s, ttft %.3f s, "
            "total %.3f s%s%s", why == FINISH_CANCELLED ? "cancelled (client gone)" : finish_reason_str(why),
            r->n_prompt, res->n_gen, res->queue_s, res->ttft_s, res->total_s, error ? ": " : "", error ? error : "");
    static const metric_counter counter[] = {[FINISH_STOP] = METRIC_FINISHED_STOP, [FINISH_LENGTH] = METRIC_FINISHED_LENGTH,
                                             [FINISH_CANCELLED] = METRIC_CANCELLED, [FINISH_ERROR] = METRIC_FAILED};
    metrics_add(e->met, counter[why], 1);
    metrics_observe(e->met, METRIC_E2E, res->total_s);
}

// The text still pending at the end of a completion: the detokenizer's, then the stop matcher's.
static char *pending_text(engine *e, engine_seq *q) {
    int stopped = 0;
    char *rest = detok_flush(e->tok, &q->detok);
    char *tail = stop_feed(&q->stop, rest ? rest : "", &stopped);
    free(rest);
    if (stopped) return tail;
    char *held = stop_flush(&q->stop);
    char *all = burst_malloc(strlen(tail) + strlen(held) + 1);
    strcat(strcpy(all, tail), held);
    free(tail);
    free(held);
    return all;
}

// Ends the request in slot s and frees the slot.
static void seq_finish(engine *e, int s, finish_reason why, const char *error) {
    engine_seq *q = &e->seq[s];
    burst_request *r = q->req;
    request_result res = {.n_prompt = r->n_prompt, .n_gen = q->n_gen, .queue_s = q->t_admit - r->t_accept,
                          .ttft_s = q->n_gen ? q->t_first - r->t_accept : 0, .total_s = burst_now() - r->t_accept,
                          .finish = why};
    char *tail = why == FINISH_ERROR ? strdup(error) : why == FINISH_CANCELLED ? NULL : pending_text(e, q);
    log_finished(e, r, &res, tail, error);
    llama_slot_reset(e->model, s);
    sampler_free(&q->smp);
    detok_free(&q->detok);
    stop_free(&q->stop);
    request_release(r);
    *q = (engine_seq){0};
    pthread_mutex_lock(&e->mu);
    e->n_running--;
    set_gauges(e);
    pthread_mutex_unlock(&e->mu);
}

// Gives a waiting request the free slot s. Called with e->mu held.
static void seq_admit(engine *e, int s, burst_request *r) {
    engine_seq *q = &e->seq[s];
    *q = (engine_seq){.req = r, .admitted = e->n_admitted++, .t_admit = burst_now()};
    sampler_init(&q->smp, &r->sampling, e->vocab);
    detok_init(&q->detok, r->prompt, r->n_prompt);
    stop_init(&q->stop, r->stop, r->n_stop);
    e->n_running++;
    metrics_observe(e->met, METRIC_QUEUE, q->t_admit - r->t_accept);
    metrics_add(e->met, METRIC_PROMPT_TOKENS, (uint64_t)r->n_prompt);
}

// Admits waiting requests while slots last; waits while there is nothing to do.
// Returns 0 when the engine is stopping.
static int admit(engine *e) {
    pthread_mutex_lock(&e->mu);
    while (!e->stopping && !e->n_running && !e->q_len) pthread_cond_wait(&e->cv, &e->mu);
    for (int s = 0; s < e->n_slots && e->q_len; s++) {
        if (e->seq[s].req) continue;
        burst_request *r = e->queue[e->q_head];
        e->q_head = (e->q_head + 1) % e->max_queue;
        e->q_len--;
        if (!request_cancelled(r)) {
            seq_admit(e, s, r);
            continue;
        }
        request_result res = {.n_prompt = r->n_prompt, .total_s = burst_now() - r->t_accept, .finish = FINISH_CANCELLED};
        log_finished(e, r, &res, NULL, NULL); // gone before it reached a slot
        request_release(r);
        s--; // the slot is still free
    }
    set_gauges(e);
    int running = !e->stopping;
    pthread_mutex_unlock(&e->mu);
    return running;
}

// Samples the next token of slot s from its logits row and hands it over; finishes the request
// at EOS, a stop string, max_tokens or the context limit.
static void seq_sample(engine *e, int s, float *logits) {
    engine_seq *q = &e->seq[s];
    burst_request *r = q->req;
    int id = sampler_sample(&q->smp, logits);
    double now = burst_now();
    metrics_observe(e->met, q->n_gen ? METRIC_ITL : METRIC_TTFT, now - (q->n_gen ? q->t_last : r->t_accept));
    metrics_add(e->met, METRIC_GENERATION_TOKENS, 1);
    if (!q->n_gen) q->t_first = now;
    q->n_gen++;
    q->t_last = now;
    q->last = id;
    if (id == tokenizer_eos(e->tok) && !r->ignore_eos) { // EOS has no text: it only ends the stream
        seq_finish(e, s, FINISH_STOP, NULL);
        return;
    }
    char *text = detok_push(e->tok, &q->detok, id);
    if (!text) {
        seq_finish(e, s, FINISH_ERROR, "sampled a token id with no piece");
        return;
    }
    int stopped = 0;
    char *out = stop_feed(&q->stop, text, &stopped);
    free(text);
    request_push(r, REQ_EVENT_TOKEN, out, NULL);
    if (stopped) seq_finish(e, s, FINISH_STOP, NULL);
    else if (q->n_gen >= r->max_tokens || llama_slot_len(e->model, s) + 1 > e->ctx) seq_finish(e, s, FINISH_LENGTH, NULL);
}

// Drops running requests whose client went away, freeing their slots.
static void drop_cancelled(engine *e) {
    for (int s = 0; s < e->n_slots; s++)
        if (e->seq[s].req && request_cancelled(e->seq[s].req)) seq_finish(e, s, FINISH_CANCELLED, NULL);
}

// Fills e->segs/e->tokens for one step; returns the number of segments.
static int build_batch(engine *e) {
    int n_segs = 0, n_tok = 0;
    for (int s = 0; s < e->n_slots; s++) { // every decoding request advances by one token
        engine_seq *q = &e->seq[s];
        if (!q->req || q->n_prefilled < q->req->n_prompt) continue;
        e->segs[n_segs] = (llama_segment){.slot = s, .n = 1};
        e->seg_seq[n_segs++] = s;
        e->tokens[n_tok++] = q->last;
    }
    for (;;) { // then prompt chunks, oldest request first, in the tokens left
        int best = -1;
        for (int s = 0; s < e->n_slots; s++) {
            engine_seq *q = &e->seq[s];
            int taken = 0;
            for (int i = 0; i < n_segs; i++) taken |= e->seg_seq[i] == s;
            if (q->req && !taken && q->n_prefilled < q->req->n_prompt && (best < 0 || q->admitted < e->seq[best].admitted))
                best = s;
        }
        if (best < 0 || n_tok == e->max_batch) break;
        engine_seq *q = &e->seq[best];
        int left = q->req->n_prompt - q->n_prefilled, n = left < e->max_batch - n_tok ? left : e->max_batch - n_tok;
        memcpy(e->tokens + n_tok, q->req->prompt + q->n_prefilled, sizeof(int) * (size_t)n);
        e->segs[n_segs] = (llama_segment){.slot = best, .n = n};
        e->seg_seq[n_segs++] = best;
        n_tok += n;
    }
    return n_segs;
}

// One engine step: one llama_forward over every running request, then sampling.
static void step(engine *e) {
    drop_cancelled(e);
    int n_segs = build_batch(e);
    if (!n_segs) return;
    burst_error err = {{0}};
    if (llama_forward(e->model, e->segs, n_segs, e->tokens, e->logits, &err)) {
        for (int i = 0; i < n_segs; i++) seq_finish(e, e->seg_seq[i], FINISH_ERROR, err.msg);
        return;
    }
    for (int i = 0; i < n_segs; i++) {
        engine_seq *q = &e->seq[e->seg_seq[i]];
        if (q->n_prefilled < q->req->n_prompt) q->n_prefilled += e->segs[i].n;
        if (q->n_prefilled == q->req->n_prompt)
            seq_sample(e, e->seg_seq[i], e->logits + (int64_t)i * e->vocab);
    }
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
                  .max_batch = lo->max_batch, .vocab = llama_config_of(m)->vocab_size, .max_queue = opt->max_queue};
    e->seq = burst_calloc((size_t)e->n_slots, sizeof *e->seq);
    e->logits = burst_malloc(sizeof(float) * (size_t)e->n_slots * (size_t)e->vocab);
    e->segs = burst_malloc(sizeof *e->segs * (size_t)e->n_slots);
    e->seg_seq = burst_malloc(sizeof(int) * (size_t)e->n_slots);
    e->tokens = burst_malloc(sizeof(int) * (size_t)e->max_batch);
    e->queue = burst_calloc((size_t)e->max_queue, sizeof *e->queue);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    int rc = pthread_create(&e->thread, NULL, engine_main, e);
    if (rc) {
        engine_stop(e);
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
    for (int s = 0; s < e->n_slots; s++)
        if (e->seq[s].req) seq_finish(e, s, FINISH_ERROR, "the server is shutting down");
    for (; e->q_len; e->q_len--, e->q_head = (e->q_head + 1) % e->max_queue) {
        burst_request *r = e->queue[e->q_head];
        request_result res = {.n_prompt = r->n_prompt, .total_s = burst_now() - r->t_accept, .finish = FINISH_ERROR};
        log_finished(e, r, &res, strdup("the server is shutting down"), "the server is shutting down");
        request_release(r);
    }
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e->queue);
    free(e->tokens);
    free(e->seg_seq);
    free(e->segs);
    free(e->logits);
    free(e->seq);
    free(e);
}

int engine_submit(engine *e, burst_request *req) {
    pthread_mutex_lock(&e->mu);
    int ok = e->q_len < e->max_queue && !e->stopping;
    if (ok) {
        request_retain(req);
        e->queue[(e->q_head + e->q_len++) % e->max_queue] = req;
        set_gauges(e);
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
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
