// The OpenAI API's JSON, both ways: request bodies of /v1/completions and /v1/chat/completions
// become a burst_request (prompt ids, max_tokens, sampling, stop strings), and the engine's
// output becomes OpenAI-shaped responses, stream chunks ("data: {...}\n\n") and errors.
//
// Extensions OpenAI clients ignore: "ignore_eos" (vLLM's) in requests; "time_to_first_token_s"
// and "queue_time_s" in every "usage" object; "timings" {"time_to_first_token_s", "queue_time_s",
// "total_s"} in each choice's final stream chunk.
//
// Stateless apart from the openai_call a request owns (one HTTP thread). Returned strings are
// malloc'd; the caller frees them. The tokenizer is shared (it is thread-safe).
#pragma once
#include <stddef.h>

#include "model/chat_template.h"
#include "model/json_grammar.h"
#include "model/tokenizer.h"
#include "request.h"

typedef enum { OPENAI_COMPLETION, OPENAI_CHAT } openai_kind;

// An OpenAI-shaped error: {"error": {"message", "type", "code"}} with an HTTP status.
typedef struct {
    int status;        // 400, 401, 404, 405, 413, 429, 500, 503
    const char *type;  // "invalid_request_error" (4xx), "rate_limit_error" (429), "server_error" (500)
    const char *code;  // NULL or a short machine-readable code
    int retry_after_s; // 429: the Retry-After header (0: 1 s)
    char message[512];
} api_error;

// Fills e and returns 0 (for one-line error returns).
int api_error_set(api_error *e, int status, const char *type, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
char *api_error_json(const api_error *e);
// 404 model_not_found: a request (or GET /v1/models/{id}) named a model this server does not serve.
int api_error_model_not_found(api_error *e, const char *served, const char *asked);

// What formatting one choice moves on.
typedef struct {
    long long text_offset; // completions with logprobs: characters of text before the next token
    int sent_role;         // chat streams name the role in a choice's first chunk only
    int sent_call;         // and a named function call's id, type and name
    char *calls;           // tool_choice "required": the text so far (malloc'd),
    size_t calls_len, calls_read; // its bytes, and those read: through the list's '[' and each whole call
    size_t args_sent;      // the call being written: where its arguments sent so far end (0: none yet)
    int n_calls;           // the calls whole
    char *echo;            // completions with echo: its prompt's text, put before its completion
                           // (malloc'd; a stream frees it once sent)
} openai_choice_state;

// One call of a generation route, as the response formatter needs it.
typedef struct {
    openai_kind kind;
    const char *model;   // the model's name (borrowed)
    const tokenizer *tok; // for the tokens of logprobs (borrowed)
    long long created;   // unix seconds
    int stream;
    int include_usage;   // streams: a last chunk with usage and no choices (stream_options)
    int logprobs;        // the request asked for logprobs (with echo: the prompt's too)
    int n_prompts;       // completions: prompts in the request ("prompt" may be a batch of several)
    int **prompts;       // (n_prompts) token ids of prompt i >= 1, malloc'd (prompt 0 is the request's);
    int *prompt_lens;    // the caller may take them (setting them NULL)
    int n_choices;       // choices in all: n_prompts x OpenAI's n; choice i*n + j is prompt i's j-th
    openai_choice_state *state; // (n_choices) malloc'd
    char *tool;          // chats: the function each choice calls (tool_choice): its text is the call's
                         // arguments, sent as the message's "tool_calls" (malloc'd; NULL: text)
    int tool_calls;      // chats, tool_choice "required": each choice's text is {"tool_calls": [{"name",
                         // "arguments"}, ...]}, sent as the message's "tool_calls" (each once its
                         // arguments begin)
} openai_call;

void openai_call_free(openai_call *call);

typedef struct {
    const char *model;   // the served model's name: a request may name it or no model
    const tokenizer *tok;
    int vocab, ctx;      // token ids must be < vocab; prompt + max_tokens <= ctx
    int max_choices;     // n at most (the KV slots: each choice takes one)
    int max_prompts;     // prompts in a batch at most (the engine's queue: each waits there)
    chat_template chat;  // how chats' messages become the prompt
    const json_vocab *json; // JSON mode's vocabulary (NULL: response_format json_object is refused)
    sampler_params sampling; // temperature, top_p, top_k, min_p, repetition_penalty where a request leaves them out
} openai_limits;

// Parses a request body (valid UTF-8, NUL-terminated) into req's prompt (the first of a batch),
// max_tokens, n_choices, sampling (penalties, logit bias, JSON mode or a schema: response_format's
// or a function call's), stop strings and token ids, ignore_eos and logprobs, and call's tool (or
// tool_calls), stream, include_usage, logprobs, the batch's other prompts, n_choices (OpenAI's n
// up to lim's max_choices, 1 with echo) and each choice's echo. Every prompt must fit the context with
// max_tokens. Returns 1, or 0 with a 400 in e, a 404 when it names another model (call may hold
// prompts and state either way).
int openai_parse(openai_kind kind, const char *body, const openai_limits *lim, burst_request *req,
                 openai_call *call, api_error *e);

// Stream chunks, each of one choice (its index): one per token event (with the n_lp logprobs
// entries it carries; with echo the first carries the prompt's text and, when asked, the prompt's
// logprobs); the choice's last carries finish_reason, with the text (and its tokens' entries) that
// was held back until the end (an incomplete UTF-8 sequence, a possible stop string), so a stream
// has one chunk per generated token and then the final one. Once every choice has ended, with
// include_usage a chunk with no choices and the usage of them all follows; then "data: [DONE]".
// Before the first token, a long prefill sends chunks with no choices and an extra field
// "prompt_progress": {"processed", "total", "elapsed_s"} (OpenAI clients ignore it).
char *openai_chunk_progress(openai_call *call, const char *id, const request_progress *p);
char *openai_chunk_text(openai_call *call, const char *id, int choice, const char *text, const sampled_logprobs *lp,
                        int n_lp);
char *openai_chunk_final(openai_call *call, const char *id, int choice, const char *text, const sampled_logprobs *lp,
                         int n_lp, const request_result *res);
char *openai_chunk_usage(openai_call *call, const char *id, const request_result *res); // (n_choices) results

// One choice of a whole response: its text, the n_lp tokens' logprobs when asked (with echo, the
// prompt's first), and how it ended.
typedef struct {
    const char *text;
    const sampled_logprobs *lp;
    int n_lp;
    request_result result;
} openai_choice;

// The whole (non-streamed) response of call's n_choices choices. An entry with logprob NAN (the
// prompt's first token) is written with null logprob and alternatives, as OpenAI and vLLM write it.
// usage counts the prompt once and the completion tokens of every choice.
char *openai_response(openai_call *call, const char *id, const openai_choice *choices);
