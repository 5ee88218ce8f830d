// The HTTP layer of burstd (libmicrohttpd): routes, API-key check, request bodies, OpenAI-shaped
// errors, and Server-Sent Events for streamed completions. HTTP threads parse, validate and
// format; generation requests go to the engine (server/engine.h) and their tokens come back
// through each request's queue.
//
// Routes: POST /v1/completions, POST /v1/chat/completions, GET /v1/models, GET /v1/models/{id},
// GET /health, GET /metrics, POST /tokenize, POST /detokenize. With an API key, every route but
// /health wants "Authorization: Bearer KEY".
//
// Memory: the server borrows the engine, tokenizer and metrics (they outlive it).
// Threads: libmicrohttpd runs a thread per connection (set in one place, http.c); http_start
// and http_stop belong to main.
#pragma once
#include "engine.h"
#include "model/chat_template.h"

typedef struct {
    const char *host;    // address to bind (IPv4 or IPv6 literal, or a name)
    int port;            // 0: any free port (http_port says which)
    const char *api_key; // NULL: no key
    const char *model_name;
    const char *cors_origin; // NULL: no CORS; else every response allows this origin ("*": any)
    unsigned idle_timeout_s; // a client silent this long (sending a request, reading a reply, or
                             // between requests) is disconnected; 0: never. Waiting for the
                             // engine does not count.
    unsigned max_connections; // open connections at most; more are closed at once
    double stream_ping_s; // a stream silent this long (its request still queued) gets an SSE
                          // comment, so that proxies' read timeouts keep it; 0: never
    const char *tls_cert, *tls_key; // PEM text of both: HTTPS; NULL: plain HTTP
    chat_template chat;             // chats' messages into a prompt
    sampler_params sampling;        // the sampling where a request leaves it out (temperature, top_p, ...)
} http_options;

typedef struct http_server http_server;

burst_status http_start(const http_options *opt, engine *eng, const llama_model *m, const tokenizer *tok,
                        metrics *met, http_server **out, burst_error *err);
int http_port(const http_server *s);
// From now on new completions get 503 ("shutting down") and /health answers 503 "draining";
// requests already accepted go on (burstd drains before it stops).
void http_drain(http_server *s);
void http_stop(http_server *s); // after up to 2 s for the responses in flight to be sent
