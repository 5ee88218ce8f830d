// Private to the HTTP layer (http.c, http_routes.c, http_generate.c): the server and
// per-request state, the reply helpers and the route handlers.
#pragma once
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "http.h"
#include "openai.h"

// A failed libmicrohttpd call that must not fail (adding a header: only out of memory) aborts.
const char *http_mhd_strerr(enum MHD_Result r);
#define MHD_CHECK(expr) BURST_CHECK_GEN((expr), MHD_YES, http_mhd_strerr)

// Request bodies larger than this get 413 (a 128K-token prompt is well under 1 MiB of JSON).
#define HTTP_MAX_BODY (8u << 20)

struct http_server {
    struct MHD_Daemon *daemon;
    engine *eng;
    const llama_model *model; // for its health
    metrics *met;
    openai_limits limits;
    json_vocab *json;         // limits.json: JSON mode's vocabulary, made here
    const char *model_name, *api_key, *cors_origin;
    unsigned idle_timeout_s;  // http_options'
    double stream_ping_s;     // http_options'
    long long started;      // unix seconds, the models' "created"
    atomic_ullong next_id;  // request ids
    atomic_int draining;    // http_drain was called
    atomic_int in_flight;   // generation requests whose response is not yet sent
    pthread_mutex_t log_mu; // libmicrohttpd's last message, when it was logged, repeats since
    char log_last[512];
    double log_t;
    unsigned log_repeats;
};

// One HTTP request (libmicrohttpd's per-request pointer), freed when the request completes.
typedef struct {
    struct MHD_Connection *conn;
    char id[48];            // "cmpl-7": the prefix of this request's log lines
    const char *method, *url;
    int route;              // index into the route table
    double t_start;         // when the body was complete
    char *body;             // (len) NUL-terminated
    size_t len, cap;
    int too_large;
    int replied;            // a response is queued: later calls only drain the body
    burst_request *req;     // a generation request this connection holds a reference on
    const char *cors_origin; // the server's (NULL: none), for the reply helpers
} http_request;

// Queues resp (taken) with status, adding the CORS headers when the server allows an origin; every
// response goes out through here.
enum MHD_Result http_queue(http_request *h, unsigned status, struct MHD_Response *resp);

// Queues body (malloc'd, taken) with the given status and content type.
enum MHD_Result http_reply(http_request *h, int status, const char *type, char *body);
// Queues an OpenAI-shaped error and logs it with the request id.
enum MHD_Result http_reply_error(http_server *s, http_request *h, const api_error *e);

enum MHD_Result http_health(http_server *s, http_request *h);
enum MHD_Result http_models(http_server *s, http_request *h);
enum MHD_Result http_model(http_server *s, http_request *h); // GET /v1/models/{id}
enum MHD_Result http_metrics(http_server *s, http_request *h);
enum MHD_Result http_tokenize(http_server *s, http_request *h);
enum MHD_Result http_detokenize(http_server *s, http_request *h);
enum MHD_Result http_completions(http_server *s, http_request *h);
enum MHD_Result http_chat_completions(http_server *s, http_request *h);
