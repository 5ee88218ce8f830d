// The LLaMA forward pass, written once over the backend interface (model/backend.h): RMSNorm,
// rotary embeddings (rotate-half), grouped-query attention over the KV cache, SwiGLU MLP, tied or
// untied output head.
//
// With n_ranks = G > 1 every sequence is spread over G ranks (threads, each with its own backend
// and its shard of the KV cache): prompts are split zigzag and attend through BurstAttention's
// ring, decode steps attend each shard and merge (model/shard_plan.h). Results equal G = 1 up to
// float32 rounding.
//
// One call runs a batch of segments: each segment is the next n tokens of one sequence (a KV
// cache slot). Their tokens share every matmul; attention runs per segment against that slot's
// cache. A segment of many tokens is a prefill (chunk), a segment of one token a decode step:
// continuous batching mixes both in one call.
//
// The model owns the weights mapping, the backend, the KV cache and the scratch buffers, all
// sized at load. One thread (the engine) uses a model at a time.
#pragma once
#include "attention/ring.h"
#include "backend.h"
#include "kv_cache.h"

typedef struct {
    int ctx;       // tokens per KV slot (0: the model's max_position_embeddings)
    int n_slots;   // sequences held at once
    int max_batch; // tokens per llama_forward call; longer prompts are prefilled in chunks
    int max_logits; // rows of logits one llama_forward call may return (segments' n_logits), at
                    // least n_slots and 64, at most max_batch (0: the least)
    int n_threads; // CPU threads in all (0: all cores), shared out among the ranks
    int n_ranks;   // G: ranks sharing each sequence (0: 1)
    const char *backend; // "cpu", "cpu-bf16", "cuda" or "cuda-fp32"; NULL: backend_default for
                         // the checkpoint's weights (cpu-bf16 for 16-bit ones where the CPU
                         // multiplies bf16, else cpu)
    burst_dtype kv_dtype; // KV cache rows: DTYPE_F32 or DTYPE_BF16 (half the memory)
    int kv_default;       // 1: kv_dtype is the backend's default instead: bf16 on cuda and
                          // cpu-bf16 (it computes in bf16 anyway), f32 on cpu and cuda-fp32
    int weights_quant;    // 0, DTYPE_Q8 or DTYPE_Q4: the cpu backends quantize every matrix at load
                          // to int8 or 4-bit integers, a float32 scale per 32 columns
                          // (model/quantize_cpu.h): 56% or 31% of BF16's memory and decode reads;
                          // workers take the leader's
    const char *comm;    // how ranks talk: "threads" (one process), "tcp" (host memory, any
                         // processes) or "nccl" (one GPU per rank); NULL: threads alone, in a
                         // cluster tcp for cpu and nccl for cuda
    // Several processes ("nodes", comm/cluster.h) may share the G ranks, each running its share.
    // The leader sets n_nodes > 1 and listens on coordinator; a worker sets worker = 1 and dials
    // the coordinator, takes every option above (but n_threads) from the leader, then runs
    // llama_follow. Both wait join_timeout_s (0: 600) for the cluster to form.
    int n_nodes;
    const char *coordinator; // "host:port"
    const char *cluster_key; // every node's the same (NULL: none): a process without it cannot join
    int worker;
    double join_timeout_s;
    // A transfer between ranks that makes no progress this long (comm tcp), or an NCCL operation
    // unfinished after it (0: 600 s), means a node hangs: the model fails (llama_fault) instead of
    // waiting forever. Workers take the leader's.
    double node_timeout_s;
} llama_options;

typedef struct {
    int slot;     // KV cache slot
    int n;        // tokens, appended after the slot's current length
    int all_rows; // 1: the logits of every one of its tokens also go to llama_forward's rows callback
    int n_logits; // logits of its last n_logits tokens go to llama_forward's logits (0: 1, the last)
    // Not NULL: a token id drawn from each of those rows goes here, drawn where the logits are
    // (backend_sample; on a GPU 4 bytes back a row): the first largest logit where temperature is
    // NULL, else row j's at temperature[j] with unit[j] (model/sampler.h's sampler_pick_unfiltered;
    // temperature[j] <= 0: greedy). Its rows of llama_forward's logits are left as they were;
    // when every segment has one, the logits stay there: llama_forward's logits may be NULL.
    int *sampled;
    const float *temperature, *unit;
} llama_segment;

// Receives the logits of tokens row0 .. row0 + n_rows - 1 of segment seg (one with all_rows):
// rows (n_rows, vocab) on the host, valid during the call only. Called on the thread that called
// llama_forward, in token order, a block of rows at a time, so that a long chunk never needs
// (n, vocab) floats at once.
typedef void (*llama_rows_fn)(void *ctx, int seg, int row0, int n_rows, const float *rows);

typedef struct llama_model llama_model;

burst_status llama_load(const char *dir, const llama_options *opt, llama_model **out,
                        burst_error *err);
void llama_free(llama_model *m);

const llama_config *llama_config_of(const llama_model *m);
const char *llama_tokenizer_path(const llama_model *m);
const llama_options *llama_options_of(const llama_model *m);
// " (q8 weights)" or " (q4 weights)" for o's weights_quant, else "": for start lines.
const char *llama_weights_note(const llama_options *o);
size_t llama_reserved_bytes(const llama_model *m); // KV cache + scratch of this process
int llama_max_logits(const llama_model *m);        // rows of logits one llama_forward may return

// Runs the segments' tokens (concatenated in segment order) and writes the logits of each
// segment's last n_logits tokens, in token order, to logits on the host: (n_segs, vocab) when
// every n_logits is 0 or 1, at most llama_max_logits rows in all (not when every segment takes
// its ids instead). Segments with all_rows also hand every token's logits to rows (NULL when
// no segment asks). Fails without side effects if a slot would overflow ctx or the batch exceeds
// max_batch.
burst_status llama_forward(llama_model *m, const llama_segment *segs, int n_segs, const int *tokens,
                           float *logits, llama_rows_fn rows, void *rows_ctx, burst_error *err);

// Prefills n tokens into a slot in chunks of chunk_max tokens (0, or more than max_batch:
// max_batch); logits (vocab) of the last token.
burst_status llama_prefill(llama_model *m, int slot, const int *tokens, int n, int chunk_max, float *logits,
                           burst_error *err);

// Ring steps run since load, summed over this process's ranks: seconds of local attention compute and of
// waiting for the K/V transfer that ran beside it (attention/ring.h); for benchmarks.
ring_stats llama_ring_stats(const llama_model *m);

int64_t llama_slot_len(const llama_model *m, int slot);
// Keeps the slot's first len tokens (len <= its length) and forgets the rest: 0 empties it; more
// keeps a prefix that the next tokens extend, as if only it had been run.
void llama_slot_truncate(llama_model *m, int slot, int64_t len);
// Makes slot dst hold the first len tokens slot src holds (their K/V on every rank), as if they had
// been run in dst: several completions of one prompt share its prefill, and prompts that begin
// alike share their common prefix.
void llama_slot_copy(llama_model *m, int dst, int src, int64_t len);

// A worker's life: runs the leader's llama_forward, llama_slot_truncate and llama_slot_copy calls as they come,
// until the leader frees its model (BURST_OK) or is lost (an error).
burst_status llama_follow(llama_model *m, burst_error *err);
// NULL while the model works; once a node of its cluster is lost, or an NCCL operation failed or
// stalled (its communicators are aborted), why. Every later llama_forward fails with that reason:
// the model cannot recover without a restart.
const char *llama_fault(const llama_model *m);
