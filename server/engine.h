// The engine: one thread that owns the model and runs every request. Each step it
//   1. drops requests whose client went away (their KV slot is freed at once),
//   2. admits waiting requests, oldest first, while KV slots last,
//   3. builds one llama_forward batch: a 1-token segment for every decoding request, then prompt
//      chunks of at most prefill_chunk tokens for the prefilling requests, fewest prompt tokens
//      left first (so a short prompt is not stuck behind a long one), less half the prefill each
//      was denied (so a long one is not starved by short ones), in the tokens left of max_batch,
//   4. samples the next token of every segment that reached its prompt's end or decodes (on
//      several threads, each request's sampler on its own), and
//      hands its text to the request's queue (request_push_token), never waiting on the HTTP side
//      (a request with max_tokens 0 ends at its prompt's end instead; without prompt logprobs it
//      needs no model and ends at engine_submit).
// A request with n_choices > 1 takes that many slots at admission: the first prefills the prompt,
// the others wait, then copy its K/V (llama_slot_copy) and sample from the same logits, each with
// its own seed (the request's + its index).
// A request with prompt_logprobs has its prompt chunks run with every token's logits, which the
// engine reduces to the logprobs entries at once, chunk by chunk.
// Prefix cache: a finished request's K/V stay in its slot. A new prompt takes the free slot whose
// tokens share the longest prefix with it and skips the prefill of that prefix (all but its last
// token, whose logits it needs), so a chat's next turn or a shared system prompt costs only its
// new tokens. Free slots with nothing in common are reused least recently used first. A prompt
// that shares a longer prefix with another slot copies it from there (llama_slot_copy), from a
// running request too; and when a running request's prompt, not yet prefilled, shares a prefix
// longer still by a chunk or more, the new prompt waits for that prefill to pass it and copies it,
// so prompts arriving together behind one system prompt prefill it once. A prompt that others
// wait for is prefilled in their turn if theirs comes first.
// Speculative decoding (speculate > 0): a decoding request's step also runs up to `speculate`
// tokens guessed by prompt lookup (draft.h). Its tokens are sampled from the rows in turn, each as
// it would have been at a step of its own (same logits, same random draws), while the sampled
// token is the one drafted next; the K/V of the drafts after the first miss are forgotten. The
// text is thus what one token a step gives, in fewer steps when the guesses are good. A request
// drafts 2 more tokens after a step that kept all its drafts, 1 fewer after one that did not.
// A request joins or leaves between steps (continuous batching); a long prompt is prefilled over
// several steps while others decode, and reports its progress once it has taken a second. A
// client that goes away stops its work at the next step. Every finished request gets one log line.
//
// Memory: the engine borrows the model, tokenizer and metrics (they outlive it) and holds a
// reference on each submitted request until it finishes.
// Threads: engine_submit, engine_cancel and engine_counts are thread-safe; start/stop belong to main.
#pragma once
#include "metrics.h"
#include "model/llama.h"
#include "model/tokenizer.h"
#include "request.h"

typedef struct {
    int max_queue;     // requests waiting for a slot at most; engine_submit refuses more
    int prefill_chunk; // prompt tokens of one request per step at most (0: max_batch)
    double max_wait_s; // refuse a request whose estimated wait for a slot is longer (0: off)
    int prefix_cache;  // 1: a slot keeps its K/V after its request, for later prompts that begin alike
    int speculate;     // tokens drafted per decode step at most, by prompt lookup (0: off)
    int threads;       // threads that sample the running requests side by side (0: every core)
} engine_options;

typedef enum {
    ENGINE_ACCEPTED,
    ENGINE_QUEUE_FULL, // max_queue requests are waiting
    ENGINE_WAIT_TOO_LONG, // the estimated wait for a KV slot is past max_wait_s
} engine_admission;

typedef struct engine engine;

burst_status engine_start(llama_model *m, const tokenizer *tok, metrics *met, const engine_options *opt,
                          engine **out, burst_error *err);
// Stops the thread; requests still queued or running finish with FINISH_ERROR ("shutting down"),
// which their HTTP threads still deliver. engine_submit refuses from then on (the engine stays
// valid for engine_cancel and engine_counts until engine_free).
void engine_stop(engine *e);
void engine_free(engine *e); // stops it first if need be

// Queues req (taking a reference), or refuses it at once; *retry_after_s is then when to retry.
engine_admission engine_submit(engine *e, burst_request *req, double *retry_after_s);
// Marks req cancelled and wakes the engine, which drops it (and frees its slot) at the next step.
void engine_cancel(engine *e, burst_request *req);
void engine_counts(engine *e, int *running, int *waiting);
int engine_max_queue(const engine *e); // requests that may wait at once (engine_options.max_queue)
