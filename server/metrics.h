// Server metrics in Prometheus text format, named as vLLM names them (so its dashboards work)
// under the prefix "burst:": latency histograms, token and request counters, queue gauges.
//
// One metrics object per daemon, owned by main. Every function is thread-safe (one mutex): the
// engine observes latencies and sets gauges, HTTP threads count rejections and format the text.
#pragma once
#include <stdint.h>

typedef enum {
    METRIC_TTFT,       // time_to_first_token_seconds: accepted -> first token handed to HTTP
    METRIC_ITL,        // inter_token_latency_seconds: between consecutive tokens of a request
    METRIC_E2E,        // e2e_request_latency_seconds: accepted -> finished
    METRIC_QUEUE,      // request_queue_time_seconds: accepted -> admitted to a KV slot
    METRIC_PREFILL,    // request_prefill_time_seconds: admitted -> prompt in the KV cache
    METRIC_DECODE,     // request_decode_time_seconds: first token -> finished
    METRIC_STEP_TOKENS, // iteration_tokens_total: tokens of an engine step (decode tokens, prompt chunks)
    METRIC_N_HISTOGRAMS,
} metric_histogram;

typedef enum {
    METRIC_PROMPT_TOKENS,     // prompt_tokens_total
    METRIC_GENERATION_TOKENS, // generation_tokens_total
    METRIC_FINISHED_STOP,     // request_success_total{finished_reason="stop"}
    METRIC_FINISHED_LENGTH,   // request_success_total{finished_reason="length"}
    METRIC_CANCELLED_QUEUED,  // request_cancelled_total{reason="queued"}: client gone while waiting
    METRIC_CANCELLED_PREFILL, // request_cancelled_total{reason="prefill"}: ... during its prefill
    METRIC_CANCELLED_DECODE,  // request_cancelled_total{reason="decode"}: ... while decoding
    METRIC_FAILED,            // request_failure_total (the engine failed)
    METRIC_REJECTED,          // request_rejected_total (429: queue full, or the wait would pass --max-wait)
    METRIC_PREEMPTIONS,       // num_preemptions_total: a prefill step cut short for other requests' work
    METRIC_PREFIX_QUERIES,    // prefix_cache_queries_total: prompt tokens looked up in the prefix cache
    METRIC_PREFIX_HITS,       // prefix_cache_hits_total: ... found there (their prefill skipped)
    METRIC_SPEC_DRAFTS,       // spec_decode_num_draft_tokens_total: tokens drafted by prompt lookup
    METRIC_SPEC_ACCEPTED,     // spec_decode_num_accepted_tokens_total: ... that the model agreed with
    METRIC_N_COUNTERS,
} metric_counter;

typedef enum {
    METRIC_RUNNING, // num_requests_running: holding a KV slot
    METRIC_WAITING, // num_requests_waiting: accepted, waiting for a slot
    METRIC_KV_USAGE, // kv_cache_usage_ratio: KV cache tokens in use / tokens reserved
    METRIC_HTTP_CONNECTIONS, // http_connections: open HTTP connections (at most --max-connections)
    METRIC_N_GAUGES,
} metric_gauge;

typedef struct metrics metrics;

metrics *metrics_new(const char *model_name);
void metrics_free(metrics *m);
void metrics_observe(metrics *m, metric_histogram h, double value); // seconds, or tokens
void metrics_add(metrics *m, metric_counter c, uint64_t n);
void metrics_set(metrics *m, metric_gauge g, double value);
// The exposition text (malloc'd).
char *metrics_format(metrics *m);
