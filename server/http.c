// The daemon, routing, API key, request bodies and replies (server/http.h).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "comm/hmac.h"
#include "http_impl.h"

// The one place that sets libmicrohttpd's threading mode: a thread per connection, so that a
// streamed response's content reader may block until the engine hands over the next token.
static const unsigned int HTTP_MHD_MODE =
    MHD_USE_THREAD_PER_CONNECTION | MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;

typedef enum MHD_Result (*route_fn)(http_server *s, http_request *h);

static const struct {
    const char *method, *path, *id_prefix;
    route_fn fn;
    int public; // served without the API key
} routes[] = {
    {"POST", "/v1/completions", "cmpl", http_completions, 0},
    {"POST", "/v1/chat/completions", "chatcmpl", http_chat_completions, 0},
    {"GET", "/v1/models", "req", http_models, 0},
    {"GET", "/v1/models/", "req", http_model, 0}, // a path ending in '/' takes any name after it
    {"GET", "/health", "req", http_health, 1},
    {"GET", "/metrics", "req", http_metrics, 0},
    {"POST", "/tokenize", "req", http_tokenize, 0},
    {"POST", "/detokenize", "req", http_detokenize, 0},
};
enum { N_ROUTES = sizeof routes / sizeof routes[0] };

const char *http_mhd_strerr(enum MHD_Result r) { return r == MHD_YES ? "MHD_YES" : "MHD_NO"; }

// retry_after_s: the Retry-After of a 429 (0: 1 s).
static enum MHD_Result reply(http_request *h, int status, const char *type, char *body, int retry_after_s) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    BURST_ASSERT(resp && "http: out of memory creating a response");
    MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type));
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, routes[h->route].method));
    if (status == MHD_HTTP_TOO_MANY_REQUESTS) {
        char secs[24];
        snprintf(secs, sizeof secs, "%d", retry_after_s > 0 ? retry_after_s : 1);
        MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, secs));
    }
    if (status == MHD_HTTP_UNAUTHORIZED) MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer"));
    return http_queue(h, (unsigned)status, resp);
}

enum MHD_Result http_queue(http_request *h, unsigned status, struct MHD_Response *resp) {
    if (h->cors_origin) {
        MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, h->cors_origin));
        if (strcmp(h->cors_origin, "*")) MHD_CHECK(MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin"));
    }
    h->replied = 1;
    enum MHD_Result r = MHD_queue_response(h->conn, status, resp);
    MHD_destroy_response(resp);
    return r;
}

// A browser's CORS preflight (OPTIONS) of a known route: which method and headers it may send.
static enum MHD_Result reply_preflight(http_request *h) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    BURST_ASSERT(resp && "http: out of memory creating a response");
    char methods[32];
    snprintf(methods, sizeof methods, "%s, OPTIONS", routes[h->route].method);
    MHD_CHECK(MHD_add_response_header(resp, "Access-Control-Allow-Methods", methods));
    MHD_CHECK(MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type"));
    MHD_CHECK(MHD_add_response_header(resp, "Access-Control-Max-Age", "600"));
    return http_queue(h, MHD_HTTP_NO_CONTENT, resp);
}

enum MHD_Result http_reply(http_request *h, int status, const char *type, char *body) {
    return reply(h, status, type, body, 0);
}

enum MHD_Result http_reply_error(http_server *s, http_request *h, const api_error *e) {
    (void)s;
    burst_log(e->status >= 500 ? 'E' : 'W', __FILE__, __LINE__, __func__, "%s | %s %s -> %d: %s", h->id, h->method,
              h->url, e->status, e->message);
    return reply(h, e->status, "application/json", api_error_json(e), e->retry_after_s);
}

// Index of the byte where s[0, n) stops being UTF-8 (n when it is valid; NUL counts as invalid).
static size_t utf8_valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int len = c >= 0x01 && c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        if (!len || i + (size_t)len > n) return i;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0) || // overlong, surrogates
            (c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))  // overlong, > U+10FFFF
            return i;
        i += (size_t)len;
    }
    return n;
}

// The key is compared by SHA-256 digest in constant time: how long the check takes says nothing
// of how much of a guess was right.
static int authorized(const http_server *s, http_request *h) {
    if (!s->api_key || routes[h->route].public) return 1;
    const char *auth = MHD_lookup_connection_value(h->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!auth || strncmp(auth, "Bearer ", 7)) return 0;
    uint8_t given[SHA256_BYTES], want[SHA256_BYTES];
    sha256(auth + 7, strlen(auth + 7), given);
    sha256(s->api_key, strlen(s->api_key), want);
    return hmac_equal(given, want);
}

// The first call for a request: route, method, key and declared size are checked before the body.
static enum MHD_Result on_headers(http_server *s, http_request *h) {
    api_error e;
    int path_known = 0;
    h->route = -1;
    for (int i = 0; i < N_ROUTES; i++) {
        size_t n = strlen(routes[i].path);
        int match = routes[i].path[n - 1] == '/' ? !strncmp(routes[i].path, h->url, n) && h->url[n]
                                                 : !strcmp(routes[i].path, h->url);
        if (match) {
            path_known = 1;
            h->route = i;
            if (!strcmp(routes[i].method, h->method)) break;
        }
    }
    snprintf(h->id, sizeof h->id, "%s-%llu", h->route >= 0 ? routes[h->route].id_prefix : "req",
             (unsigned long long)atomic_fetch_add(&s->next_id, 1));
    if (!path_known) {
        api_error_set(&e, 404, "invalid_request_error", "not_found", "no route %s %s", h->method, h->url);
        return http_reply_error(s, h, &e);
    }
    if (h->cors_origin && !strcmp(h->method, MHD_HTTP_METHOD_OPTIONS)) return reply_preflight(h);
    if (strcmp(routes[h->route].method, h->method)) {
        api_error_set(&e, 405, "invalid_request_error", "method_not_allowed", "%s wants %s, not %s", h->url,
                      routes[h->route].method, h->method);
        return http_reply_error(s, h, &e);
    }
    if (!authorized(s, h)) {
        api_error_set(&e, 401, "invalid_request_error", "invalid_api_key",
                      "missing or wrong API key (send the header \"Authorization: Bearer KEY\")");
        return http_reply_error(s, h, &e);
    }
    const char *cl = MHD_lookup_connection_value(h->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > HTTP_MAX_BODY) h->too_large = 1;
    return MHD_YES;
}

static enum MHD_Result on_body(http_request *h, const char *data, size_t n) {
    if (h->too_large || h->len + n > HTTP_MAX_BODY) {
        h->too_large = 1;
        return MHD_YES; // read and drop the rest, then answer 413
    }
    if (h->len + n + 1 > h->cap) {
        h->cap = (h->len + n + 1) * 2;
        h->body = realloc(h->body, h->cap);
        BURST_ASSERT(h->body && "http: out of memory reading a body");
    }
    memcpy(h->body + h->len, data, n);
    h->len += n;
    h->body[h->len] = 0;
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **ctx) {
    http_server *s = cls;
    http_request *h = *ctx;
    if (!h) {
        *ctx = h = burst_calloc(1, sizeof *h);
        *h = (http_request){.conn = conn, .method = method, .url = url, .cors_origin = s->cors_origin};
        return on_headers(s, h);
    }
    if (h->replied) { // answered at the headers (404, 405, 401): drop the body
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        enum MHD_Result r = on_body(h, upload, *upload_size);
        *upload_size = 0;
        return r;
    }
    api_error e;
    h->t_start = burst_now();
    if (h->too_large)
        return http_reply_error(s, h, (api_error_set(&e, 413, "invalid_request_error", "request_too_large",
                                                     "the body is over %u bytes", HTTP_MAX_BODY), &e));
    size_t ok = utf8_valid_prefix((const unsigned char *)h->body, h->len);
    if (ok != h->len)
        return http_reply_error(s, h, (api_error_set(&e, 400, "invalid_request_error", "invalid_utf8",
                                                     "the body is not valid UTF-8 (at byte %zu)", ok), &e));
    if (!h->body) h->body = burst_calloc(1, 1);
    return routes[h->route].fn(s, h);
}

// Runs when a request ends, however it ends: a generation whose client went away is cancelled.
static void on_completed(void *cls, struct MHD_Connection *conn, void **ctx, enum MHD_RequestTerminationCode toe) {
    http_server *s = cls;
    http_request *h = *ctx;
    if (!h) return;
    if (h->req) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) engine_cancel(s->eng, h->req);
        request_release(h->req);
        atomic_fetch_sub(&s->in_flight, 1);
    }
    free(h->body);
    free(h);
    *ctx = NULL;
}

// libmicrohttpd's messages, as warnings. One that repeats (each connection refused past
// --max-connections says the same) is logged at most every 10 s, with how often it came between.
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    http_server *s = cls;
    char msg[sizeof s->log_last];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    double now = burst_now();
    pthread_mutex_lock(&s->log_mu);
    int same = !strcmp(msg, s->log_last);
    if (same && now - s->log_t < 10) {
        s->log_repeats++;
    } else {
        if (s->log_repeats && !same)
            LOG_W("libmicrohttpd: %s (%u more times in %.0f s)", s->log_last, s->log_repeats, now - s->log_t);
        if (same && s->log_repeats) LOG_W("libmicrohttpd: %s (%u times in %.0f s)", msg, s->log_repeats + 1, now - s->log_t);
        else LOG_W("libmicrohttpd: %s", msg);
        memcpy(s->log_last, msg, sizeof msg);
        s->log_t = now;
        s->log_repeats = 0;
    }
    pthread_mutex_unlock(&s->log_mu);
}

// Each connection holds a file descriptor. Raises the soft limit toward the hard one when
// max_connections needs more (beside room for the model's files and the ranks' sockets), and
// returns how many connections fit.
static unsigned fit_fd_limit(unsigned max_connections) {
    const rlim_t spare = 64;
    struct rlimit rl;
    SYS_CHECK(getrlimit(RLIMIT_NOFILE, &rl));
    rlim_t want = max_connections + spare;
    if (rl.rlim_cur >= want) return max_connections;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    SYS_CHECK(setrlimit(RLIMIT_NOFILE, &rl));
    if (rl.rlim_cur >= want) return max_connections;
    unsigned fit = rl.rlim_cur > 2 * spare ? (unsigned)(rl.rlim_cur - spare) : (unsigned)(rl.rlim_cur / 2);
    LOG_W("--max-connections %u: this process may open %llu files (ulimit -n), so at most %u connections",
          max_connections, (unsigned long long)rl.rlim_cur, fit);
    return fit;
}

burst_status http_start(const http_options *opt, engine *eng, const llama_model *m, const tokenizer *tok,
                        metrics *met, http_server **out, burst_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai;
    char port[16];
    snprintf(port, sizeof port, "%d", opt->port);
    int rc = getaddrinfo(opt->host, port, &hints, &ai);
    if (rc) return BURST_FAIL(err, BURST_ERR_INVALID, "--host %s: %s", opt->host, gai_strerror(rc));
    http_server *s = burst_calloc(1, sizeof *s);
    json_vocab *json = json_vocab_new(tok);
    *s = (http_server){.eng = eng, .model = m, .met = met, .model_name = opt->model_name, .api_key = opt->api_key,
                       .cors_origin = opt->cors_origin, .idle_timeout_s = opt->idle_timeout_s,
                       .stream_ping_s = opt->stream_ping_s, .json = json,
                       .started = (long long)time(NULL),
                       .limits = {.model = opt->model_name, .tok = tok, .vocab = llama_config_of(m)->vocab_size, .ctx = llama_options_of(m)->ctx,
                                  .max_choices = llama_options_of(m)->n_slots,
                                  .max_prompts = engine_max_queue(eng), .chat = opt->chat, .json = json,
                                  .sampling = opt->sampling}};
    atomic_init(&s->next_id, 1);
    atomic_init(&s->draining, 0);
    atomic_init(&s->in_flight, 0);
    pthread_mutex_init(&s->log_mu, NULL);
    int tls = opt->tls_cert != NULL;
    struct MHD_OptionItem tls_options[] = {{MHD_OPTION_HTTPS_MEM_CERT, 0, (void *)opt->tls_cert},
                                           {MHD_OPTION_HTTPS_MEM_KEY, 0, (void *)opt->tls_key},
                                           {MHD_OPTION_END, 0, NULL}};
    s->daemon = MHD_start_daemon(HTTP_MHD_MODE | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0) | (tls ? MHD_USE_TLS : 0),
                                 (uint16_t)opt->port, NULL, NULL, on_request, s,
                                 MHD_OPTION_ARRAY, tls ? tls_options : tls_options + 2, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
                                 MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_TIMEOUT, opt->idle_timeout_s, MHD_OPTION_CONNECTION_LIMIT,
                                 fit_fd_limit(opt->max_connections), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        pthread_mutex_destroy(&s->log_mu);
        json_vocab_free(s->json);
        free(s);
        if (tls)
            return BURST_FAIL(err, BURST_ERR_IO, "%s:%d: could not serve HTTPS (libmicrohttpd's line above says "
                              "why: the certificate and key, or the address)", opt->host, opt->port);
        return BURST_FAIL(err, BURST_ERR_IO, "%s:%d: could not listen (address in use, or not this machine's?)",
                          opt->host, opt->port);
    }
    *out = s;
    return BURST_OK;
}

int http_port(const http_server *s) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    return di ? di->port : -1;
}

void http_drain(http_server *s) { atomic_store(&s->draining, 1); }

void http_stop(http_server *s) {
    if (!s) return;
    // Responses in flight (their last events already queued by engine_stop) get up to 2 s to go
    // out before the connections close.
    for (int i = 0; i < 100 && atomic_load(&s->in_flight) > 0; i++) nanosleep(&(struct timespec){.tv_nsec = 20000000}, NULL);
    MHD_stop_daemon(s->daemon);
    pthread_mutex_destroy(&s->log_mu);
    json_vocab_free(s->json); // (the engine stopped before: no sampler reads it)
    free(s);
}
