// `burst load`: a load generator for first-token latency. C client threads each send streaming
// completions, one at a time, until R requests are done; the prompts are exactly P token ids (or
// each of a length drawn from [P, P_MAX], the same draws every run)
// (BOS, then byte pieces 3..258, which every LLaMA vocabulary has), the first S of them the same
// in every prompt (a shared system prompt, for the prefix cache), and "ignore_eos" makes every
// completion exactly M tokens. Everything is timed on the client (no server-side numbers used):
// time to first token (request sent -> first token chunk), inter-token latency (between token
// chunks) and output throughput; p50/p90/p99 are printed on stdout, and the prompt tokens the
// server's prefix cache held (usage.prompt_tokens_details.cached_tokens).
// With a rate, requests are due at Poisson arrival times (an open loop, as users arrive, with
// the same draws every run) and each is sent when due by a free client; C then caps the requests
// in flight, and the report counts those sent late because every client was busy.
//
// Threads: load_run creates and joins its own client threads.
#pragma once

typedef struct {
    const char *url, *api_key;
    int concurrency, requests, prompt_tokens, max_tokens;
    int prompt_tokens_max; // >= prompt_tokens; larger: each prompt's length is drawn from [prompt_tokens, this]
    int shared_prefix; // the first shared_prefix prompt tokens are the same in every request (<= prompt_tokens)
    double rate;       // requests due per second on average (0: each client sends its next when its last ends)
    double temperature;    // of every request (0: greedy); request i samples with seed i + 1
    double slo_ttft_s;     // > 0: count the requests that completed with a first token this soon
    const char *json_path; // non-NULL: the report's numbers also go there, as one JSON object
} load_args;

// Runs the load and prints the report. Returns 0 when every request completed with M tokens, 1
// when some did not, 2 for a bad URL or a report that could not be written.
int load_run(const load_args *a);
