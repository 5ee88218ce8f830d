#define _POSIX_C_SOURCE 200809L
#include "load.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_client.h"

// One request's client-side record.
typedef struct {
    double t_send, ttft;  // ttft < 0: no token came
    double late;          // with a rate: seconds after it was due that it went out
    double t_last;
    double *gaps;         // (n_tokens - 1) inter-token gaps
    int n_tokens, cap, status, done, failed;
    int n_usage;          // completion_tokens of the usage chunk (-1: none came)
    int n_cached;         // its prompt_tokens_details.cached_tokens
    int n_progress;       // prompt_progress events (a long prefill reporting before its first token)
    char error[sizeof(burst_error)];
    char *pending;        // SSE text not yet split into events
    size_t n_pending;
} load_record;

typedef struct {
    const load_args *a;
    http_url url;
    load_record *rec;     // (requests)
    double *due;          // (requests) with a rate: when each is due, in seconds from t0
    double t0;
    atomic_int next;
} load_state;

// One SSE data line: a token chunk, the final chunk, the usage chunk, a prompt progress chunk,
// [DONE] or an error.
static void on_event(load_record *r, const char *data) {
    if (!strcmp(data, "[DONE]")) {
        r->done = 1;
        return;
    }
    cJSON *o = cJSON_Parse(data);
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *finish = cJSON_GetObjectItemCaseSensitive(choice, "finish_reason");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(o, "usage");
    if (cJSON_GetObjectItemCaseSensitive(o, "prompt_progress")) {
        r->n_progress++;
    } else if (!choice && !cJSON_IsObject(usage)) {
        const cJSON *msg = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "error"), "message");
        snprintf(r->error, sizeof r->error, "%s", cJSON_IsString(msg) ? msg->valuestring : data);
        r->failed = 1;
    } else {
        if (cJSON_IsObject(usage)) { // in a chunk of its own (OpenAI, burstd), or the final one (llama.cpp)
            const cJSON *n = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
            const cJSON *cached = cJSON_GetObjectItemCaseSensitive(
                cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details"), "cached_tokens");
            r->n_usage = cJSON_IsNumber(n) ? n->valueint : -1;
            r->n_cached = cJSON_IsNumber(cached) ? cached->valueint : 0;
        }
        if (cJSON_IsNull(finish)) {
            double now = burst_now();
            if (r->n_tokens++ == 0) r->ttft = now - r->t_send;
            else {
                if (r->n_tokens - 1 > r->cap) r->gaps = realloc(r->gaps, sizeof(double) * (size_t)(r->cap = 2 * r->n_tokens + 16));
                BURST_ASSERT(r->gaps && "load: out of memory");
                r->gaps[r->n_tokens - 2] = now - r->t_last;
            }
            r->t_last = now;
        }
    }
    cJSON_Delete(o);
}

static void on_body(void *ctx, const char *data, size_t n) {
    load_record *r = ctx;
    r->pending = realloc(r->pending, r->n_pending + n + 1);
    BURST_ASSERT(r->pending && "load: out of memory");
    memcpy(r->pending + r->n_pending, data, n);
    r->n_pending += n;
    r->pending[r->n_pending] = 0;
    char *end, *start = r->pending;
    while ((end = strstr(start, "\n\n"))) { // one event per blank-line-terminated block
        *end = 0;
        if (!strncmp(start, "data: ", 6)) on_event(r, start + 6);
        start = end + 2;
    }
    r->n_pending -= (size_t)(start - r->pending);
    memmove(r->pending, start, r->n_pending + 1);
}

// Request index's prompt length: P, or drawn from [P, P_MAX] by a hash of the index.
static int prompt_len(const load_args *a, int index) {
    if (a->prompt_tokens_max == a->prompt_tokens) return a->prompt_tokens;
    uint64_t x = 0xBF58476D1CE4E5B9ull * (uint64_t)(index + 1);
    x ^= x >> 31, x *= 0x94D049BB133111EBull, x ^= x >> 29;
    return a->prompt_tokens + (int)(x % (uint64_t)(a->prompt_tokens_max - a->prompt_tokens + 1));
}

static char *request_body(const load_args *a, int index) {
    cJSON *o = cJSON_CreateObject(), *p = cJSON_AddArrayToObject(o, "prompt");
    uint64_t x = 0x2545F4914F6CDD1Dull; // the shared prefix: the same draws for every request
    cJSON_AddItemToArray(p, cJSON_CreateNumber(1)); // BOS
    for (int i = 1, n = prompt_len(a, index); i < n; i++) {
        if (i == (a->shared_prefix > 1 ? a->shared_prefix : 1)) x = 0x9E3779B97F4A7C15ull * (uint64_t)(index + 1);
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        cJSON_AddItemToArray(p, cJSON_CreateNumber(3 + (double)(x % 256))); // byte pieces <0x00>..<0xFF>
    }
    cJSON_AddNumberToObject(o, "max_tokens", a->max_tokens);
    cJSON_AddNumberToObject(o, "temperature", a->temperature);
    if (a->temperature > 0) cJSON_AddNumberToObject(o, "seed", index + 1); // the same samples every run
    cJSON_AddBoolToObject(o, "stream", 1);
    cJSON_AddBoolToObject(cJSON_AddObjectToObject(o, "stream_options"), "include_usage", 1); // the server's count
    cJSON_AddBoolToObject(o, "ignore_eos", 1);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void *client(void *arg) {
    load_state *ls = arg;
    int i;
    while ((i = atomic_fetch_add(&ls->next, 1)) < ls->a->requests) {
        load_record *r = &ls->rec[i];
        burst_error err = {{0}};
        char *body = request_body(ls->a, i);
        r->ttft = -1;
        r->n_usage = -1;
        if (ls->due) {
            double wait = ls->t0 + ls->due[i] - burst_now();
            struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            while (wait > 0 && nanosleep(&ts, &ts)) {} // again after a signal, for what is left
            r->late = burst_now() - ls->t0 - ls->due[i];
        }
        r->t_send = burst_now();
        if (http_post(&ls->url, "/v1/completions", ls->a->api_key, body, &r->status, on_body, r, &err))
            snprintf(r->error, sizeof r->error, "%s", err.msg);
        else if (r->status != 200) // an error body is one JSON object, not events
            snprintf(r->error, sizeof r->error, "status %d: %s", r->status, r->pending ? r->pending : "");
        // The server's count of tokens must be M; a chunk may carry more than one (llama-server holds
        // back a token that splits a UTF-8 character and sends it with the next; burstd does not).
        r->failed |= r->status != 200 || !r->done || r->n_usage != ls->a->max_tokens || r->n_tokens < 1 ||
                     r->n_tokens > r->n_usage;
        if (r->failed && !r->error[0])
            snprintf(r->error, sizeof r->error, "status %d, %d chunks of tokens, usage says %d of %d tokens%s", r->status,
                     r->n_tokens, r->n_usage, ls->a->max_tokens, r->done ? "" : ", no [DONE]");
        free(body);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    double p50, p90, p99, mean;
    size_t n;
} load_stat;

// p50/p90/p99 (nearest rank) and mean of v (sorted in place).
static load_stat stat_of(double *v, size_t n) {
    load_stat st = {.n = n};
    if (!n) return st;
    qsort(v, n, sizeof *v, cmp_double);
    for (size_t i = 0; i < n; i++) st.mean += v[i];
    st.mean /= (double)n;
    st.p50 = v[(size_t)ceil(0.50 * (double)n) - 1];
    st.p90 = v[(size_t)ceil(0.90 * (double)n) - 1];
    st.p99 = v[(size_t)ceil(0.99 * (double)n) - 1];
    return st;
}

static void print_row(const char *name, const load_stat *st) {
    if (!st->n) printf("%-22s %10s\n", name, "-");
    else printf("%-22s %10.4f %10.4f %10.4f %10.4f %8zu\n", name, st->p50, st->p90, st->p99, st->mean, st->n);
}

static void add_stat(cJSON *o, const char *name, const load_stat *st) {
    cJSON *j = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(j, "p50", st->p50);
    cJSON_AddNumberToObject(j, "p90", st->p90);
    cJSON_AddNumberToObject(j, "p99", st->p99);
    cJSON_AddNumberToObject(j, "mean", st->mean);
    cJSON_AddNumberToObject(j, "n", (double)st->n);
}

// The report's numbers, for scripts: one JSON object in the file at path.
static int write_json(const char *path, cJSON *o) {
    char *text = cJSON_Print(o);
    FILE *f = fopen(path, "w");
    int ok = f && fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (f && fclose(f)) ok = 0;
    if (!ok) fprintf(stderr, "burst load: --json %s: %s\n", path, strerror(errno));
    free(text);
    return ok;
}

static int report(const load_args *a, load_record *rec, double due_last, double wall) {
    double *ttft = burst_malloc(sizeof(double) * (size_t)a->requests), *itl;
    size_t n_ttft = 0, n_itl = 0, n_gaps = 0;
    long long tokens = 0;
    int failed = 0;
    for (int i = 0; i < a->requests; i++) n_gaps += rec[i].n_tokens > 1 ? (size_t)rec[i].n_tokens - 1 : 0;
    itl = burst_malloc(sizeof(double) * (n_gaps ? n_gaps : 1));
    for (int i = 0; i < a->requests; i++) {
        load_record *r = &rec[i];
        if (r->failed && failed++ < 5) fprintf(stderr, "burst load: request %d: %s\n", i, r->error);
        if (r->ttft >= 0) ttft[n_ttft++] = r->ttft;
        for (int j = 0; j + 1 < r->n_tokens; j++) itl[n_itl++] = r->gaps[j];
        tokens += r->n_usage > r->n_tokens ? r->n_usage : r->n_tokens;
    }
    load_stat ttft_st = stat_of(ttft, n_ttft), itl_st = stat_of(itl, n_itl);
    long long cached = 0, prompt = 0;
    int progress = 0, with_progress = 0, late = 0, met = 0;
    double worst = 0;
    for (int i = 0; i < a->requests; i++) {
        met += !rec[i].failed && rec[i].ttft >= 0 && rec[i].ttft <= a->slo_ttft_s;
        cached += rec[i].n_cached, prompt += prompt_len(a, i);
        progress += rec[i].n_progress, with_progress += rec[i].n_progress > 0;
        late += rec[i].late > 0.01;
        worst = rec[i].late > worst ? rec[i].late : worst;
    }
    char lens[48];
    if (a->prompt_tokens_max > a->prompt_tokens) snprintf(lens, sizeof lens, "%d..%d", a->prompt_tokens, a->prompt_tokens_max);
    else snprintf(lens, sizeof lens, "%d", a->prompt_tokens);
    printf("burst load: %s, %d requests (%d failed), concurrency %d, temperature %g, prompt %s tokens (%d shared), "
           "%d tokens each, %.2f s\n", a->url, a->requests, failed, a->concurrency, a->temperature, lens,
           a->shared_prefix, a->max_tokens, wall);
    printf("%-22s %10s %10s %10s %10s %8s\n", "", "p50", "p90", "p99", "mean", "n");
    print_row("time to first token s", &ttft_st);
    print_row("inter-token latency s", &itl_st);
    printf("throughput: %.1f output tokens/s, %.2f requests/s\n", (double)tokens / wall, (a->requests - failed) / wall);
    if (a->slo_ttft_s > 0)
        printf("TTFT SLO %.3f s: met by %d of %d requests (%.1f%%), %.2f requests/s\n", a->slo_ttft_s, met, a->requests,
               100.0 * met / a->requests, met / wall);
    if (progress) printf("prompt progress: %d events before first tokens, on %d requests\n", progress, with_progress);
    printf("prefix cache: %lld of %lld prompt tokens cached\n", cached, prompt);
    if (a->rate > 0)
        printf("arrivals: %.2f requests/s (Poisson) over %.2f s; %d sent more than 10 ms late, all %d clients being "
               "busy (the latest by %.3f s)\n", a->rate, due_last, late, a->concurrency, worst);
    int ok = 1;
    if (a->json_path) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "url", a->url);
        cJSON_AddNumberToObject(o, "requests", a->requests);
        cJSON_AddNumberToObject(o, "failed", failed);
        cJSON_AddNumberToObject(o, "concurrency", a->concurrency);
        cJSON_AddNumberToObject(o, "rate", a->rate);
        cJSON_AddNumberToObject(o, "prompt_tokens_min", a->prompt_tokens);
        cJSON_AddNumberToObject(o, "prompt_tokens_max", a->prompt_tokens_max);
        cJSON_AddNumberToObject(o, "shared_prefix", a->shared_prefix);
        cJSON_AddNumberToObject(o, "max_tokens", a->max_tokens);
        cJSON_AddNumberToObject(o, "temperature", a->temperature);
        cJSON_AddNumberToObject(o, "wall_s", wall);
        add_stat(o, "time_to_first_token_s", &ttft_st);
        add_stat(o, "inter_token_latency_s", &itl_st);
        cJSON_AddNumberToObject(o, "output_tokens", (double)tokens);
        cJSON_AddNumberToObject(o, "output_tokens_per_s", (double)tokens / wall);
        cJSON_AddNumberToObject(o, "requests_per_s", (a->requests - failed) / wall);
        cJSON_AddNumberToObject(o, "prompt_tokens", (double)prompt);
        cJSON_AddNumberToObject(o, "cached_tokens", (double)cached);
        cJSON_AddNumberToObject(o, "progress_events", progress);
        if (a->slo_ttft_s > 0) {
            cJSON_AddNumberToObject(o, "slo_ttft_s", a->slo_ttft_s);
            cJSON_AddNumberToObject(o, "slo_met", met);
        }
        if (a->rate > 0) {
            cJSON_AddNumberToObject(o, "arrivals_s", due_last);
            cJSON_AddNumberToObject(o, "sent_late", late);
            cJSON_AddNumberToObject(o, "latest_by_s", worst);
        }
        ok = write_json(a->json_path, o);
        cJSON_Delete(o);
    }
    free(ttft);
    free(itl);
    return !ok ? 2 : failed ? 1 : 0;
}

int load_run(const load_args *a) {
    burst_error err = {{0}};
    load_state ls = {.a = a, .rec = burst_calloc((size_t)a->requests, sizeof(load_record))};
    if (http_url_parse(a->url, &ls.url, &err)) {
        fprintf(stderr, "burst: %s\n", err.msg);
        free(ls.rec);
        return 2;
    }
    pthread_t *th = burst_malloc(sizeof *th * (size_t)a->concurrency);
    if (a->rate > 0) { // exponential gaps from one fixed stream of draws: every run the same arrivals
        ls.due = burst_malloc(sizeof(double) * (size_t)a->requests);
        uint64_t x = 0xD1B54A32D192ED03ull;
        for (int i = 0; i < a->requests; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            double u = (double)((x >> 11) + 1) * 0x1p-53; // in (0, 1]
            ls.due[i] = i ? ls.due[i - 1] - log(u) / a->rate : 0;
        }
    }
    double t0 = ls.t0 = burst_now();
    int started = 0;
    while (started < a->concurrency && !pthread_create(&th[started], NULL, client, &ls)) started++;
    if (!started) client(&ls); // no thread could start: run them here, one at a time
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    int rc = report(a, ls.rec, ls.due ? ls.due[a->requests - 1] : 0, burst_now() - t0);
    for (int i = 0; i < a->requests; i++) free(ls.rec[i].gaps), free(ls.rec[i].pending);
    free(ls.rec);
    free(ls.due);
    free(th);
    return rc;
}
