// A generation request as it travels between the HTTP thread that accepted it and the engine
// thread that runs it, and the typed queue that carries its output back.
//
// Memory: reference counted. request_new returns one reference (the HTTP side's); the engine
// takes its own in engine_submit and drops it when the request finishes. The last release frees
// the prompt, the stop strings, the logit bias and any events not taken.
// Threads: the fields above `mu` are written by the HTTP thread before engine_submit and only
// read afterwards. The request_push_* (engine), request_pop (HTTP), request_cancel and
// request_cancelled (either) are thread-safe.
#pragma once
#include <pthread.h>
#include <stdatomic.h>

#include "model/sampler.h"

typedef enum {
    FINISH_STOP,      // EOS or a stop string
    FINISH_LENGTH,    // max_tokens or the context limit
    FINISH_CANCELLED, // the client went away
    FINISH_ERROR,     // the engine failed (the message is in the DONE event's text)
} finish_reason;

const char *finish_reason_str(finish_reason f); // "stop", "length", "cancelled", "error"

typedef struct {
    int n_prompt, n_gen;  // tokens in the prompt, tokens sampled (EOS included)
    int n_cached;         // prompt tokens whose K/V came from the prefix cache
    double queue_s;       // accepted -> admitted to a KV slot
    double ttft_s;        // accepted -> first token handed over (0: none)
    double total_s;       // accepted -> finished
    finish_reason finish;
} request_result;

typedef struct {
    int processed, total; // prompt tokens in the KV cache, of the prompt's
    double elapsed_s;     // since the request was accepted
} request_progress;

typedef enum {
    REQ_EVENT_PROGRESS, // a long prefill's progress before the first token (progress is set)
    REQ_EVENT_TOKEN, // after a sampled token (or the prompt's logprobs): the text now safe to send
                     // (possibly "", never split UTF-8, never past a stop string)
    REQ_EVENT_DONE,  // the last event: text is what was still pending (or the error message)
} request_event_kind;

typedef struct request_event {
    request_event_kind kind;
    int choice;            // TOKEN and DONE: which of the request's n_choices completions
    char *text;            // malloc'd
    // TOKEN and DONE, when the request asked for logprobs: the entries of the tokens whose text
    // begins in this event's text, in order (malloc'd, or NULL when none). A token's entry waits
    // with its text (stop strings, incomplete UTF-8) and is dropped when a stop string cuts the
    // text before the token begins. With prompt_logprobs, one TOKEN event before any other holds
    // the prompt's n_prompt entries; the first has logprob NAN (nothing predicts it).
    sampled_logprobs *logprobs;
    int n_logprobs;
    request_result result; // DONE only (of its choice; every choice ends with a DONE)
    request_progress progress; // PROGRESS only
    struct request_event *next;
} request_event;

enum { REQUEST_MAX_STOP_IDS = 16 };

typedef struct burst_request {
    char id[48];          // "cmpl-7", "chatcmpl-8": the prefix of every log line about it
    int *prompt;          // (n_prompt) token ids, malloc'd
    int n_prompt;
    int max_tokens;       // >= 1; or 0 (completions with echo): only the prompt is run
    int n_choices;        // completions of the prompt (OpenAI's n), sampled apart after one prefill
    int ignore_eos;       // keep sampling past EOS (load tests)
    int logprobs;         // 1: every TOKEN event carries its token's logprobs (of the raw logits)
    int top_logprobs;     // with logprobs: the most likely alternatives to report (0..20)
    int prompt_logprobs;  // 1 (echo with logprobs): the prompt tokens' logprobs come first
    sampler_params sampling; // its bias (malloc'd) belongs to the request
    json_schema *json_schema; // response_format's schema (sampling's; a batch's first request owns it)
    char **stop;          // (n_stop) malloc'd strings that end the completion (not included)
    int n_stop;
    int stop_ids[REQUEST_MAX_STOP_IDS]; // (n_stop_ids) token ids that end it as EOS does (vLLM's
    int n_stop_ids;                     // stop_token_ids; not included, even with ignore_eos)
    double t_accept;      // burst_now() when the HTTP thread accepted it
    // A request of a batch (several prompts in one call) hands its events to the batch's first
    // request, its choices numbered from choice0; it holds a reference on that one, and is
    // cancelled with it.
    struct burst_request *sink;
    int choice0;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    request_event *head, *tail; // guarded by mu
    atomic_int cancelled;
    atomic_int refs;
} burst_request;

burst_request *request_new(void);
// Prompt (n_prompt ids, taken) as a further request of first's batch: first's options, its own
// prompt, choices numbered from choice0, id "<first's id>.<index>", events into first's queue.
burst_request *request_batch_member(burst_request *first, int index, int *prompt, int n_prompt, int choice0);
void request_retain(burst_request *r);
// Whether id is one of r's stop_token_ids.
int request_stops_at(const burst_request *r, int id);
void request_release(burst_request *r);

// Engine side: queue an event. They take text (NULL for "") and logprobs (n_logprobs entries; NULL
// for none).
void request_push_token(burst_request *r, int choice, char *text, sampled_logprobs *logprobs, int n_logprobs);
void request_push_done(burst_request *r, int choice, char *text, sampled_logprobs *logprobs, int n_logprobs,
                       const request_result *result);
void request_push_progress(burst_request *r, const request_progress *p);
// HTTP side: the next event, waiting at most timeout_s; NULL on timeout. Free with request_event_free.
request_event *request_pop(burst_request *r, double timeout_s);
void request_event_free(request_event *e);

void request_cancel(burst_request *r);
int request_cancelled(burst_request *r);
