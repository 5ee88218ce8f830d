// Reads a Hugging Face LLaMA config.json into a llama_config and checks it: sizes positive,
// n_heads divides dim, n_kv_heads divides n_heads, head_dim even (RoPE rotates pairs), token ids
// inside the vocabulary, and nothing this server would silently get wrong (a hidden_act other
// than silu, a rope_scaling other than linear or yarn, a head_dim other than dim / n_heads).
//
// Defaults where the field is absent: num_key_value_heads = num_attention_heads,
// rope_theta = 10000, tie_word_embeddings = false, bos_token_id = 1, eos_token_id = 2.
// rms_norm_eps has no default: LLaMA-2 uses 1e-5 where Hugging Face's default is 1e-6.
//
// Memory: fills the caller's struct. Thread-safe (no shared state).
#pragma once
#include "weights.h"

burst_status weights_config_load(const char *path, llama_config *out, burst_error *err);
