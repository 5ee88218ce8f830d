// `burst load`: a load generator for first-token latency. C client threads each send streaming
// completions, one at a time, until R requests are done; the prompts are exactly P token ids
// (BOS, then byte pieces 3..258, which every LLaMA vocabulary has), the first S of them the same
// in every prompt (a shared system prompt, for the prefix cache), and "ignore_eos" makes every
// completion exactly M tokens. Everything is timed on the client (no server-side numbers used):
// time to first token (request sent -> first token chunk), inter-token latency (between token
// chunks) and output throughput; p50/p90/p99 are printed on stdout, and the prompt tokens the
// server's prefix cache held (usage.prompt_tokens_details.cached_tokens).
//
// Threads: load_run creates and joins its own client threads.
#pragma once

typedef struct {
    const char *url, *api_key;
    int concurrency, requests, prompt_tokens, max_tokens;
    int shared_prefix; // the first shared_prefix prompt tokens are the same in every request (<= prompt_tokens)
} load_args;

// Runs the load and prints the report. Returns 0 when every request completed with M tokens.
int load_run(const load_args *a);
