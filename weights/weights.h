// Opens a Hugging Face LLaMA checkpoint directory: config.json, one or several *.safetensors
// files (model.safetensors, or shards listed in model.safetensors.index.json) and tokenizer.model.
//
// Tensors stay memory-mapped in their stored dtype (F32, F16, BF16); nothing is converted or
// copied at load. The weights object owns the mappings; tensor data pointers are valid until
// weights_close. After weights_open returns, every function here is safe to call from any thread.
#pragma once
#include "../common/burst.h"
#include "../common/dtype.h"

// Hyper-parameters read from config.json.
typedef struct {
    int dim;            // hidden_size
    int hidden_dim;     // intermediate_size
    int n_layers;       // num_hidden_layers
    int n_heads;        // num_attention_heads
    int n_kv_heads;     // num_key_value_heads (defaults to n_heads)
    int head_dim;       // dim / n_heads
    int vocab_size;     // vocab_size
    int max_seq_len;    // max_position_embeddings
    float norm_eps;     // rms_norm_eps
    float rope_theta;   // rope_theta (default 10000)
    // rope_scaling (default none), for checkpoints trained past their base model's context:
    // linear divides every RoPE frequency by rope_factor; yarn (YaRN) divides the low ones,
    // keeps the high ones, blends those between and scales cos and sin (model/rope.h).
    enum { ROPE_SCALING_NONE, ROPE_SCALING_LINEAR, ROPE_SCALING_YARN } rope_scaling;
    float rope_factor;           // factor (1 with none)
    int rope_original_ctx;       // yarn: original_max_position_embeddings (default max_position_embeddings)
    float rope_beta_fast;        // yarn: beta_fast (default 32)
    float rope_beta_slow;        // yarn: beta_slow (default 1)
    float rope_attention_factor; // yarn: attention_factor (default 0.1 ln(factor) + 1)
    int tie_embeddings; // tie_word_embeddings (default false): lm_head shares embed_tokens
    int bos_id, eos_id; // bos_token_id, eos_token_id (defaults 1, 2)
} llama_config;

typedef struct {
    const char *name;
    burst_dtype dtype;
    int ndim;         // 0..4
    int64_t shape[4]; // (ndim) row-major, outermost first: a Linear weight is [out, in]
    int64_t numel;    // product of shape
    size_t nbytes;    // numel * dtype_size(dtype)
    const void *data; // (nbytes) points into the mapping, aligned to dtype_size(dtype)
} weights_tensor;

typedef struct weights weights;

// Parses config.json and every safetensors header, checks them (offsets in range, not
// overlapping, known dtype, shape consistent with the byte size) and maps the files.
// Prints a progress line per file to stderr when the checkpoint is large.
burst_status weights_open(const char *dir, weights **out, burst_error *err);
void weights_close(weights *w);

const llama_config *weights_config(const weights *w);
// Path of tokenizer.model inside the directory (it may not exist; the tokenizer checks).
const char *weights_tokenizer_path(const weights *w);
// Total bytes of tensor data mapped.
size_t weights_bytes(const weights *w);

// Reads every page of the checkpoint's files now, for a backend that computes on the mapping in
// place (the CPU): a checkpoint not in the page cache is read from disk either way, and here that
// happens at load, with a progress line every few seconds when it is large, rather than during
// the first request (~1 GB/s from this machine's disk: 13 s for a 7B F16 checkpoint). Checkpoints
// larger than the free memory are left to be read as used (they could not stay cached), with a
// warning.
void weights_read_all(const weights *w);

// Hands t's pages back (a backend keeps its own copy of t): the whole pages within it leave the
// process's resident memory and stay in the page cache, where a later read would find them again.
void weights_release(const weights_tensor *t);

// Finds a tensor by name and checks its shape (ndim entries of shape; -1 matches any size).
// Errors name the tensor and what was expected.
burst_status weights_get(const weights *w, const char *name, int ndim, const int64_t *shape,
                         const weights_tensor **out, burst_error *err);

// Every tensor of every file, sorted by name: i in [0, weights_count).
int64_t weights_count(const weights *w);
const weights_tensor *weights_at(const weights *w, int64_t i);

// Writes "[64, 172]" (-1 as "*") into buf and returns buf.
const char *weights_format_shape(int ndim, const int64_t *shape, char *buf, size_t size);
