// Command-line value parsing shared by `burst` and `burstd`: integers and numbers with a range,
// each printing one line "<prog>: --flag value: want ..." on stderr when the value is wrong; and
// the chat template both take from a checkpoint. Stateless; safe from any thread.
#pragma once
#include "common/dtype.h"
#include "model/chat_template.h"

// "0.1.0 (git 1a2b3c4; cpu with AVX512-BF16, CUDA 13.0.88 for sm_90a, cuDNN, NCCL)": the version,
// the commit built and what the build can run on (what multiplies bf16 on this CPU, if anything:
// backend_cpu_bf16_unit).
const char *cli_build_info(void);
// The value of the flag argv[*i] (advancing *i past it). -h/--help prints usage and exits 0;
// --version prints "prog <cli_build_info>" and exits 0; a flag without a value prints why (and
// the usage) and returns NULL.
const char *cli_value(const char *prog, const char *usage, int argc, char **argv, int *i);
// Returns 1 and sets *out when s is an integer in [lo, hi]; else prints why and returns 0.
int cli_parse_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out);
// Returns 1 and sets *out when s is a number in [lo, hi]; else prints why and returns 0.
int cli_parse_float(const char *prog, const char *flag, const char *s, float lo, float hi, float *out);
// Returns 1 and sets *out when s names a KV cache dtype (f32 or bf16); else prints why and returns 0.
int cli_parse_kv_dtype(const char *prog, const char *flag, const char *s, burst_dtype *out);
// Returns 1 and sets *out (DTYPE_Q8 for q8, DTYPE_Q4 for q4, 0 for none) when s names a
// --quantize mode; else prints why and returns 0.
int cli_parse_quantize(const char *prog, const char *flag, const char *s, int *out);
// Returns 1 and sets *out when s names a chat template (llama-2, vicuna or zephyr); else prints why and returns 0.
int cli_parse_chat_template(const char *prog, const char *flag, const char *s, chat_template *out);
// The chat template of the checkpoint in dir: --chat-template's (given), else the one its
// tokenizer_config.json's chat_template (Hugging Face's Jinja; of a list, the one named "default")
// looks like, said in the log, else llama-2. A warning where the checkpoint's is another, or none
// burst has: its conversations would be formatted as another model's.
chat_template cli_chat_template(const char *dir, const chat_template *given);
// Returns 1 and sets *out (1 or 0) when s is on or off; else prints why and returns 0.
int cli_parse_on_off(const char *prog, const char *flag, const char *s, int *out);
// Tokens per step (--batch, --prefill-chunk) by default on a backend: cpu's own default there,
// 8192 on a cuda backend, where large steps keep the GPU busy.
int cli_step_default(const char *backend, int cpu);
// The API key: --api-key's value when given, else $BURST_API_KEY when set and not empty (a key
// on the command line can be read by every user of the machine in ps), else NULL.
const char *cli_api_key(const char *given);
