#define _POSIX_C_SOURCE 200809L
#include "request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/burst.h"

const char *finish_reason_str(finish_reason f) {
    switch (f) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_CANCELLED: return "cancelled";
    case FINISH_ERROR: return "error";
    }
    return "unknown";
}

burst_request *request_new(void) {
    burst_request *r = burst_calloc(1, sizeof *r);
    r->n_choices = 1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); // request_pop waits against burst_now's clock
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&r->refs, 1);
    return r;
}

burst_request *request_batch_member(burst_request *first, int index, int *prompt, int n_prompt, int choice0) {
    burst_request *r = request_new();
    snprintf(r->id, sizeof r->id, "%.36s.%d", first->id, index);
    r->prompt = prompt, r->n_prompt = n_prompt;
    r->max_tokens = first->max_tokens, r->n_choices = first->n_choices, r->ignore_eos = first->ignore_eos;
    r->logprobs = first->logprobs, r->top_logprobs = first->top_logprobs, r->prompt_logprobs = first->prompt_logprobs;
    r->sampling = first->sampling;
    r->sampling.bias = burst_calloc((size_t)(first->sampling.n_bias ? first->sampling.n_bias : 1), sizeof *r->sampling.bias);
    if (first->sampling.n_bias)
        memcpy(r->sampling.bias, first->sampling.bias, sizeof *r->sampling.bias * (size_t)first->sampling.n_bias);
    r->stop = burst_calloc((size_t)(first->n_stop ? first->n_stop : 1), sizeof *r->stop);
    for (r->n_stop = 0; r->n_stop < first->n_stop; r->n_stop++) r->stop[r->n_stop] = strdup(first->stop[r->n_stop]);
    memcpy(r->stop_ids, first->stop_ids, sizeof r->stop_ids);
    r->n_stop_ids = first->n_stop_ids;
    r->t_accept = first->t_accept;
    r->sink = first, r->choice0 = choice0;
    request_retain(first);
    return r;
}

void request_retain(burst_request *r) { atomic_fetch_add(&r->refs, 1); }

int request_stops_at(const burst_request *r, int id) {
    for (int i = 0; i < r->n_stop_ids; i++)
        if (r->stop_ids[i] == id) return 1;
    return 0;
}

void request_event_free(request_event *e) {
    if (!e) return;
    free(e->text);
    free(e->logprobs);
    free(e);
}

void request_release(burst_request *r) {
    if (!r || atomic_fetch_sub(&r->refs, 1) != 1) return;
    for (request_event *e = r->head, *next; e; e = next) {
        next = e->next;
        request_event_free(e);
    }
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->sampling.bias);
    json_schema_free(r->json_schema);
    free(r->prompt);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    request_release(r->sink);
    free(r);
}

// Queues a copy of ev (its text NULL: empty) on r's queue, or its batch's.
static void push(burst_request *r, request_event ev) {
    request_event *e = burst_malloc(sizeof *e);
    *e = ev;
    if (!e->text) e->text = strdup("");
    if (r->sink) e->choice += r->choice0, r = r->sink;
    pthread_mutex_lock(&r->mu);
    if (r->tail) r->tail->next = e;
    else r->head = e;
    r->tail = e;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void request_push_token(burst_request *r, int choice, char *text, sampled_logprobs *logprobs, int n_logprobs) {
    push(r, (request_event){.kind = REQ_EVENT_TOKEN, .choice = choice, .text = text, .logprobs = logprobs,
                            .n_logprobs = n_logprobs});
}

void request_push_done(burst_request *r, int choice, char *text, sampled_logprobs *logprobs, int n_logprobs,
                       const request_result *result) {
    push(r, (request_event){.kind = REQ_EVENT_DONE, .choice = choice, .text = text, .logprobs = logprobs,
                            .n_logprobs = n_logprobs, .result = *result});
}

void request_push_progress(burst_request *r, const request_progress *p) {
    push(r, (request_event){.kind = REQ_EVENT_PROGRESS, .progress = *p});
}

request_event *request_pop(burst_request *r, double timeout_s) {
    double until = burst_now() + timeout_s;
    struct timespec ts = {.tv_sec = (time_t)until, .tv_nsec = (long)((until - (double)(time_t)until) * 1e9)};
    pthread_mutex_lock(&r->mu);
    while (!r->head && pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0) {}
    request_event *e = r->head;
    if (e) {
        r->head = e->next;
        if (!r->head) r->tail = NULL;
        e->next = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    return e;
}

void request_cancel(burst_request *r) { atomic_store(&r->cancelled, 1); }
int request_cancelled(burst_request *r) { return atomic_load(&r->cancelled) || (r->sink && atomic_load(&r->sink->cancelled)); }
