// /v1/completions and /v1/chat/completions: parse, hand the request to the engine, then either
// wait for the whole completion or stream it as Server-Sent Events. Both wait on the request's
// queue in short slices and look at the socket between them, so a client that goes away is
// noticed (and its request cancelled) even while no token is coming.
#define _GNU_SOURCE
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "http_impl.h"

static const double POLL_S = 0.1; // how often a waiting HTTP thread checks its client

// 1 when the peer closed its side of the connection (or it failed).
static int client_gone(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLERR | POLLHUP | POLLRDHUP)) return 1;
    char b;
    return recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Turns conn's idle timeout off while this thread waits for the engine (the wait is the server's,
// not the client's), or back on. Turning it on restarts its clock (libmicrohttpd does so for a
// connection whose timeout was 0), so the client then has the whole timeout to take the reply.
static void idle_timeout(http_server *s, struct MHD_Connection *conn, int on) {
    if (s->idle_timeout_s)
        MHD_CHECK(MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, on ? s->idle_timeout_s : 0u));
}

// The next event of r. NULL when its client has gone (*gone set; the request is cancelled), or
// when `until` (burst_now() seconds; 0: never) passes first.
static request_event *next_event(http_server *s, struct MHD_Connection *conn, burst_request *r, double until, int *gone) {
    idle_timeout(s, conn, 0);
    for (;;) {
        double wait = until ? until - burst_now() : POLL_S;
        request_event *ev = request_pop(r, wait < POLL_S ? (wait > 0 ? wait : 0) : POLL_S);
        if (ev || (until && burst_now() >= until)) {
            idle_timeout(s, conn, 1);
            return ev;
        }
        if (client_gone(conn)) {
            engine_cancel(s->eng, r);
            *gone = 1;
            return NULL;
        }
    }
}

typedef struct {
    http_server *s;
    struct MHD_Connection *conn;
    burst_request *req; // a reference of its own
    openai_call call;
    char *out;          // formatted SSE text not yet handed to libmicrohttpd
    size_t len, off;
    int left;           // choices not yet ended
    request_result *results; // (n_choices) how each ended, for the usage chunk
    int done;
    double t_sent;      // when text was last handed to libmicrohttpd
} sse_stream;

// Formats one event as SSE text: a token chunk, a choice's final chunk, or the end (an error, or
// after the last choice's final chunk the usage when asked, then [DONE]).
static char *sse_format(sse_stream *st, request_event *ev, size_t *len) {
    char *text = NULL;
    FILE *f = open_memstream(&text, len);
    BURST_ASSERT(f && "http: open_memstream failed");
    char *chunk = NULL;
    if (ev->kind == REQ_EVENT_PROGRESS) {
        fputs(chunk = openai_chunk_progress(&st->call, st->req->id, &ev->progress), f);
    } else if (ev->kind == REQ_EVENT_TOKEN) {
        fputs(chunk = openai_chunk_text(&st->call, st->req->id, ev->choice, ev->text, ev->logprobs, ev->n_logprobs), f);
    } else if (ev->result.finish == FINISH_ERROR) {
        api_error e;
        api_error_set(&e, 500, "server_error", NULL, "%s", ev->text);
        fprintf(f, "data: %s\n\ndata: [DONE]\n\n", chunk = api_error_json(&e));
        st->done = 1;
    } else {
        fputs(chunk = openai_chunk_final(&st->call, st->req->id, ev->choice, ev->text, ev->logprobs, ev->n_logprobs,
                                         &ev->result), f);
        st->results[ev->choice] = ev->result;
        if (--st->left == 0) {
            if (st->call.include_usage) {
                free(chunk);
                fputs(chunk = openai_chunk_usage(&st->call, st->req->id, st->results), f);
            }
            fputs("data: [DONE]\n\n", f);
            st->done = 1;
        }
    }
    free(chunk);
    fclose(f);
    return text;
}

// libmicrohttpd's content reader: blocks (this connection's own thread) until there is text.
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sse_stream *st = cls;
    while (st->off == st->len) {
        if (st->done) return MHD_CONTENT_READER_END_OF_STREAM;
        int gone = 0;
        double ping_s = st->s->stream_ping_s;
        request_event *ev = next_event(st->s, st->conn, st->req, ping_s > 0 ? st->t_sent + ping_s : 0, &gone);
        if (gone) return MHD_CONTENT_READER_END_WITH_ERROR;
        free(st->out);
        if (ev) st->out = sse_format(st, ev, &st->len);
        else st->out = strdup(": ping\n\n"), st->len = strlen(st->out); // an SSE comment: clients skip it
        st->off = 0;
        request_event_free(ev);
    }
    st->t_sent = burst_now();
    size_t n = st->len - st->off < max ? st->len - st->off : max;
    memcpy(buf, st->out + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void sse_free(void *cls) {
    sse_stream *st = cls;
    openai_call_free(&st->call);
    request_release(st->req);
    free(st->results);
    free(st->out);
    free(st);
}

// Takes call (its choices' state and the batch's prompts).
static enum MHD_Result stream(http_server *s, http_request *h, const openai_call *call) {
    sse_stream *st = burst_calloc(1, sizeof *st);
    *st = (sse_stream){.s = s, .conn = h->conn, .req = h->req, .call = *call, .left = call->n_choices,
                       .results = burst_calloc((size_t)call->n_choices, sizeof(request_result)),
                       .t_sent = burst_now()};
    request_retain(h->req);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, st, sse_free);
    BURST_ASSERT(resp && "http: out of memory creating a response");
    MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream"));
    MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache"));
    return http_queue(h, MHD_HTTP_OK, resp);
}

// One choice of a whole completion as its events come: its text and its tokens' logprobs.
typedef struct {
    char *text;
    size_t len;
    FILE *f;
    sampled_logprobs *lp;
    int n_lp, cap;
} choice_acc;

// Waits for every choice of the whole completion (this connection's own thread), then answers it.
static enum MHD_Result whole(http_server *s, http_request *h, openai_call *call) {
    int n = call->n_choices, left = n;
    choice_acc *acc = burst_calloc((size_t)n, sizeof *acc);
    openai_choice *out = burst_calloc((size_t)n, sizeof *out);
    for (int i = 0; i < n; i++) {
        acc[i].f = open_memstream(&acc[i].text, &acc[i].len);
        BURST_ASSERT(acc[i].f && "http: open_memstream failed");
    }
    request_event *ev = NULL, *error = NULL;
    int gone = 0;
    while (left && !error && (ev = next_event(s, h->conn, h->req, 0, &gone))) {
        choice_acc *a = &acc[ev->choice];
        fputs(ev->text, a->f); // progress events carry no text
        if (a->n_lp + ev->n_logprobs > a->cap) {
            a->lp = realloc(a->lp, sizeof *a->lp * (size_t)(a->cap = 2 * (a->n_lp + ev->n_logprobs)));
            BURST_ASSERT(a->lp && "http: out of memory collecting logprobs");
        }
        for (int i = 0; i < ev->n_logprobs; i++) a->lp[a->n_lp++] = ev->logprobs[i];
        if (ev->kind == REQ_EVENT_DONE) {
            out[ev->choice].result = ev->result;
            left--;
            if (ev->result.finish == FINISH_ERROR) error = ev;
        }
        if (ev != error) request_event_free(ev);
    }
    for (int i = 0; i < n; i++) {
        fclose(acc[i].f);
        out[i] = (openai_choice){.text = acc[i].text, .lp = acc[i].lp, .n_lp = acc[i].n_lp, .result = out[i].result};
    }
    enum MHD_Result r = MHD_NO; // the client went away: close the connection
    if (error) {
        api_error e;
        r = http_reply_error(s, h, (api_error_set(&e, 500, "server_error", NULL, "%s", error->text), &e));
    } else if (!left) {
        r = http_reply(h, MHD_HTTP_OK, "application/json", openai_response(call, h->req->id, out));
    }
    request_event_free(error);
    for (int i = 0; i < n; i++) free(acc[i].text), free(acc[i].lp);
    free(acc);
    free(out);
    return r;
}

static enum MHD_Result generate(http_server *s, http_request *h, openai_kind kind) {
    api_error e;
    if (atomic_load(&s->draining))
        return http_reply_error(s, h, (api_error_set(&e, 503, "server_error", "shutting_down",
                                                     "the server is shutting down; send the request elsewhere"), &e));
    openai_call call = {.kind = kind, .model = s->model_name, .tok = s->limits.tok, .created = (long long)time(NULL)};
    burst_request *r = request_new();
    snprintf(r->id, sizeof r->id, "%s", h->id);
    r->t_accept = h->t_start;
    if (!openai_parse(kind, h->body, &s->limits, r, &call, &e)) {
        openai_call_free(&call);
        request_release(r);
        return http_reply_error(s, h, &e);
    }
    // A batch: each further prompt is a request of its own whose events come to r's queue.
    double retry_s;
    engine_admission a = engine_submit(s->eng, r, &retry_s);
    for (int i = 1; a == ENGINE_ACCEPTED && i < call.n_prompts; i++) {
        burst_request *m = request_batch_member(r, i, call.prompts[i], call.prompt_lens[i], i * r->n_choices);
        call.prompts[i] = NULL;
        a = engine_submit(s->eng, m, &retry_s);
        request_release(m); // the engine's reference keeps it, if it took it
    }
    if (a != ENGINE_ACCEPTED) {
        engine_cancel(s->eng, r); // and the prompts of its batch already queued
        openai_call_free(&call);
        request_release(r);
        metrics_add(s->met, METRIC_REJECTED, 1);
        if (a == ENGINE_QUEUE_FULL)
            api_error_set(&e, 429, "rate_limit_error", "queue_full",
                          "the server is busy: the queue of waiting requests is full; retry in %.0f s", ceil(retry_s));
        else
            api_error_set(&e, 429, "rate_limit_error", "wait_too_long",
                          "the server is busy: a KV cache slot is expected to free in %.0f s, past --max-wait; "
                          "retry later", ceil(retry_s));
        e.retry_after_s = (int)ceil(retry_s);
        return http_reply_error(s, h, &e);
    }
    h->req = r; // released (and cancelled unless it completed) when the HTTP request ends
    atomic_fetch_add(&s->in_flight, 1);
    if (call.stream) return stream(s, h, &call);
    enum MHD_Result res = whole(s, h, &call);
    openai_call_free(&call);
    return res;
}

enum MHD_Result http_completions(http_server *s, http_request *h) { return generate(s, h, OPENAI_COMPLETION); }
enum MHD_Result http_chat_completions(http_server *s, http_request *h) { return generate(s, h, OPENAI_CHAT); }
