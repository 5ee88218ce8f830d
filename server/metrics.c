#define _POSIX_C_SOURCE 200809L
#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

// Bucket upper bounds in seconds, one set for every latency: from a tiny model's sub-millisecond
// steps on a CPU to a 7B model's minutes-long prefill of a very long prompt.
static const double seconds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5,
                                 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560};
// Tokens of a step: one decode token to the largest --batch.
static const double tokens[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
                                131072, 262144, 524288, 1048576};
enum { N_BUCKETS = sizeof seconds / sizeof seconds[0] }; // the most of any set
_Static_assert(sizeof tokens / sizeof tokens[0] <= N_BUCKETS, "a histogram holds N_BUCKETS buckets at most");

typedef struct {
    const double *le;
    int n;
} bucket_set;
#define BUCKETS(b) {b, sizeof b / sizeof b[0]}
static const bucket_set seconds_buckets = BUCKETS(seconds), token_buckets = BUCKETS(tokens);

typedef struct {
    uint64_t count[N_BUCKETS]; // per bucket (not cumulative; made cumulative when formatted)
    uint64_t n;
    double sum;
} histogram;

struct metrics {
    pthread_mutex_t mu;
    char *model; // the model_name label's value, escaped
    histogram hist[METRIC_N_HISTOGRAMS];
    uint64_t counter[METRIC_N_COUNTERS];
    double gauge[METRIC_N_GAUGES];
};

typedef struct {
    const char *name, *labels, *help;
    const bucket_set *buckets; // histograms: their bucket bounds (NULL: seconds)
} metric_desc;

static const metric_desc hist_desc[METRIC_N_HISTOGRAMS] = {
    [METRIC_TTFT] = {"time_to_first_token_seconds", "", "Accepted to first token handed to the HTTP layer."},
    [METRIC_ITL] = {"inter_token_latency_seconds", "", "Time between consecutive tokens of a request."},
    [METRIC_E2E] = {"e2e_request_latency_seconds", "", "Accepted to finished."},
    [METRIC_QUEUE] = {"request_queue_time_seconds", "", "Accepted to admitted to a KV slot."},
    [METRIC_PREFILL] = {"request_prefill_time_seconds", "", "Admitted to the prompt in the KV cache."},
    [METRIC_DECODE] = {"request_decode_time_seconds", "", "First token to finished."},
    [METRIC_STEP_TOKENS] = {"iteration_tokens_total", "", "Tokens of an engine step (decode tokens and prompt chunks).",
                            &token_buckets},
};
static const metric_desc counter_desc[METRIC_N_COUNTERS] = {
    [METRIC_PROMPT_TOKENS] = {"prompt_tokens_total", "", "Prompt tokens of admitted requests."},
    [METRIC_GENERATION_TOKENS] = {"generation_tokens_total", "", "Tokens sampled."},
    [METRIC_FINISHED_STOP] = {"request_success_total", "finished_reason=\"stop\",", "Requests finished."},
    [METRIC_FINISHED_LENGTH] = {"request_success_total", "finished_reason=\"length\",", "Requests finished."},
    [METRIC_CANCELLED_QUEUED] = {"request_cancelled_total", "reason=\"queued\",", "Requests whose client went away."},
    [METRIC_CANCELLED_PREFILL] = {"request_cancelled_total", "reason=\"prefill\",", "Requests whose client went away."},
    [METRIC_CANCELLED_DECODE] = {"request_cancelled_total", "reason=\"decode\",", "Requests whose client went away."},
    [METRIC_FAILED] = {"request_failure_total", "", "Requests the engine failed."},
    [METRIC_REJECTED] = {"request_rejected_total", "", "Requests answered 429 (queue full or wait past --max-wait)."},
    [METRIC_PREEMPTIONS] = {"num_preemptions_total", "", "Prefill steps cut short to run other requests first."},
    [METRIC_PREFIX_QUERIES] = {"prefix_cache_queries_total", "", "Prompt tokens looked up in the prefix cache."},
    [METRIC_PREFIX_HITS] = {"prefix_cache_hits_total", "", "Prompt tokens found in the prefix cache (their prefill skipped)."},
    [METRIC_SPEC_DRAFTS] = {"spec_decode_num_draft_tokens_total", "", "Tokens drafted by prompt lookup (--speculate)."},
    [METRIC_SPEC_ACCEPTED] = {"spec_decode_num_accepted_tokens_total", "", "Drafted tokens the model agreed with."},
};
static const metric_desc gauge_desc[METRIC_N_GAUGES] = {
    [METRIC_RUNNING] = {"num_requests_running", "", "Requests holding a KV slot."},
    [METRIC_WAITING] = {"num_requests_waiting", "", "Requests waiting for a KV slot."},
    [METRIC_KV_USAGE] = {"kv_cache_usage_ratio", "", "KV cache tokens in use over tokens reserved."},
    [METRIC_HTTP_CONNECTIONS] = {"http_connections", "", "Open HTTP connections (at most --max-connections)."},
};

metrics *metrics_new(const char *model_name) {
    metrics *m = burst_calloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    // A label value escapes backslash, double quote and newline (Prometheus' text format).
    m->model = burst_malloc(2 * strlen(model_name) + 1);
    char *o = m->model;
    for (const char *c = model_name; *c; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') *o++ = '\\';
        *o++ = *c == '\n' ? 'n' : *c;
    }
    *o = 0;
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m->model);
    free(m);
}

static const bucket_set *buckets_of(int h) { return hist_desc[h].buckets ? hist_desc[h].buckets : &seconds_buckets; }

void metrics_observe(metrics *m, metric_histogram h, double value) {
    const bucket_set *bs = buckets_of(h);
    int b = 0;
    while (b < bs->n && value > bs->le[b]) b++;
    pthread_mutex_lock(&m->mu);
    histogram *hs = &m->hist[h];
    if (b < bs->n) hs->count[b]++;
    hs->n++;
    hs->sum += value;
    pthread_mutex_unlock(&m->mu);
}

void metrics_add(metrics *m, metric_counter c, uint64_t n) {
    pthread_mutex_lock(&m->mu);
    m->counter[c] += n;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set(metrics *m, metric_gauge g, double value) {
    pthread_mutex_lock(&m->mu);
    m->gauge[g] = value;
    pthread_mutex_unlock(&m->mu);
}

static void header(FILE *f, const metric_desc *d, const char *type, const metric_desc *prev) {
    if (prev && !strcmp(prev->name, d->name)) return; // labelled series share one HELP/TYPE
    fprintf(f, "# HELP burst:%s %s\n# TYPE burst:%s %s\n", d->name, d->help, d->name, type);
}

static void format_histogram(FILE *f, const metrics *m, int h) {
    const metric_desc *d = &hist_desc[h];
    const histogram *hs = &m->hist[h];
    header(f, d, "histogram", NULL);
    const bucket_set *bs = buckets_of(h);
    uint64_t cum = 0;
    for (int b = 0; b < bs->n; b++) {
        cum += hs->count[b];
        fprintf(f, "burst:%s_bucket{model_name=\"%s\",le=\"%.10g\"} %llu\n", d->name, m->model, bs->le[b],
                (unsigned long long)cum);
    }
    fprintf(f, "burst:%s_bucket{model_name=\"%s\",le=\"+Inf\"} %llu\n", d->name, m->model, (unsigned long long)hs->n);
    fprintf(f, "burst:%s_sum{model_name=\"%s\"} %.9g\n", d->name, m->model, hs->sum);
    fprintf(f, "burst:%s_count{model_name=\"%s\"} %llu\n", d->name, m->model, (unsigned long long)hs->n);
}

char *metrics_format(metrics *m) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    BURST_ASSERT(f && "metrics: open_memstream failed");
    pthread_mutex_lock(&m->mu);
    for (int g = 0; g < METRIC_N_GAUGES; g++) {
        header(f, &gauge_desc[g], "gauge", NULL);
        fprintf(f, "burst:%s{model_name=\"%s\"} %.6g\n", gauge_desc[g].name, m->model, m->gauge[g]);
    }
    for (int c = 0; c < METRIC_N_COUNTERS; c++) {
        header(f, &counter_desc[c], "counter", c ? &counter_desc[c - 1] : NULL);
        fprintf(f, "burst:%s{%smodel_name=\"%s\"} %llu\n", counter_desc[c].name, counter_desc[c].labels, m->model,
                (unsigned long long)m->counter[c]);
    }
    for (int h = 0; h < METRIC_N_HISTOGRAMS; h++) format_histogram(f, m, h);
    pthread_mutex_unlock(&m->mu);
    fclose(f);
    return text;
}
