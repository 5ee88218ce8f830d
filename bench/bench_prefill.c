// Time to first token of a random-weight LLaMA-7B shape (dim 4096, hidden 11008, 32 layers,
// 32 heads, vocab 32000, bf16) or 13B shape (5120, 13824, 40, 40) on one GPU, through llama_load / llama_prefill on the CUDA backend:
// the prompt is prefilled in chunks of max_batch tokens and the time runs until the last token's
// logits are on the host. TFLOP/s use the formula of the Hugging Face anchor
// (.gpu-kit/torch_prefill.py): 2 x (parameters - embedding) x N + 2 x N^2 x dim x layers.
//
//   bench_prefill DIR N1,N2,... BATCH1,BATCH2,... [REPS] [f32|bf16] [7b|13b]
// DIR is written first when it holds no config.json: config.json plus a model.safetensors (13.5
// GB for 7b, 26 GB for 13b) of random bf16 values in +-[2^-7, 2^-6) (norms 1), a few seconds from
// C. Then come the KV cache's dtype (default f32) and the shape (default 7b). Lengths whose KV cache (2 x layers x N x dim x 4 or 2
// bytes) would not fit beside the weights are reported and skipped. Prints one JSON line per measurement, then a table. bench/gpu_prefill.sh runs it
// beside the Hugging Face anchor in one call. After each prefill of N tokens come DECODE_STEPS
// one-token steps (logits to the host, no sampling): "decode_ms" is their mean, the time per
// generated token at that context (bench/torch_decode_anchor.py times Hugging Face's the same way).
//
// Measured (H100 80GB HBM3, one call; s [TFLOP/s]):
//   N      max_batch 4096   16384          32768          HF SDPA, KV cache
//   4K     0.135 [434]      0.139 [420]    0.136 [430]    0.133 [439]
//   16K    0.771 [372]      0.694 [413]    0.698 [411]    0.607 [473]
//   32K    2.096 [341]      1.885 [379]    1.834 [390]    1.434 [498]
//   64K    does not fit (fp32 KV cache 64 GB + 13.5 GB weights)  3.804 [524]
// With cuDNN attention (attention/flash_cudnn.h; another call, HF in it: 4K 0.130, 16K 0.614,
// 32K 1.437 s with KV cache, 0.123 / 0.586 / 1.383 s without):
//   N      max_batch 16384  32768
//   4K     0.127 [461]      0.128 [457]
//   16K    0.589 [487]      0.599 [479]
//   32K    1.468 [487]      1.403 [509]
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/cuda_check.h"
#include "model/llama.h"

enum { MAX_LIST = 16, DECODE_STEPS = 32, MAX_REPS = 32, UNTIMED = 3 };

// The LLaMA-2 shapes (multi-head attention, vocab 32000) and the one this run uses.
typedef struct {
    const char *name;
    int dim, hidden, layers, heads;
} llama_shape;
static const llama_shape SHAPES[] = {{"7b", 4096, 11008, 32, 32}, {"13b", 5120, 13824, 40, 40}};
static llama_shape S;
#define VOCAB 32000

static int parse_list(const char *s, int *out) {
    int n = 0;
    for (char *end; *s && n < MAX_LIST; s = *end ? end + 1 : end) out[n++] = (int)strtol(s, &end, 10);
    return n;
}

#define RNG_SEED 0x2545f4914f6cdd1dull
static uint64_t rng = RNG_SEED;
static uint64_t next_u64(void) {
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return rng * 2685821657736338717ull;
}

// One tensor's header entry; *offset advances by its bytes.
static int header_entry(char *h, int len, int cap, const char *name, int64_t rows, int64_t cols, int64_t *offset) {
    int64_t bytes = (rows ? rows : 1) * cols * 2;
    int w = rows ? snprintf(h + len, (size_t)(cap - len), "\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld,%lld],\"data_offsets\":[%lld,%lld]},",
                            name, (long long)rows, (long long)cols, (long long)*offset, (long long)(*offset + bytes))
                 : snprintf(h + len, (size_t)(cap - len), "\"%s\":{\"dtype\":\"BF16\",\"shape\":[%lld],\"data_offsets\":[%lld,%lld]},",
                            name, (long long)cols, (long long)*offset, (long long)(*offset + bytes));
    *offset += bytes;
    return len + w;
}

typedef struct {
    char name[96];
    int64_t rows, cols; // rows 0: a vector
} tensor_spec;

static void add_tensor(tensor_spec *t, int *n, int64_t rows, int64_t cols, const char *fmt, int layer) {
    snprintf(t[*n].name, sizeof t[*n].name, fmt, layer);
    t[*n].rows = rows, t[*n].cols = cols;
    (*n)++;
}

// The tensors of a LLaMA checkpoint in Hugging Face names, in file order.
static int model_tensors(tensor_spec *t) {
    int n = 0;
    add_tensor(t, &n, VOCAB, S.dim, "model.embed_tokens.weight", 0);
    add_tensor(t, &n, 0, S.dim, "model.norm.weight", 0);
    add_tensor(t, &n, VOCAB, S.dim, "lm_head.weight", 0);
    for (int l = 0; l < S.layers; l++) {
        add_tensor(t, &n, 0, S.dim, "model.layers.%d.input_layernorm.weight", l);
        add_tensor(t, &n, S.dim, S.dim, "model.layers.%d.self_attn.q_proj.weight", l);
        add_tensor(t, &n, S.dim, S.dim, "model.layers.%d.self_attn.k_proj.weight", l);
        add_tensor(t, &n, S.dim, S.dim, "model.layers.%d.self_attn.v_proj.weight", l);
        add_tensor(t, &n, S.dim, S.dim, "model.layers.%d.self_attn.o_proj.weight", l);
        add_tensor(t, &n, 0, S.dim, "model.layers.%d.post_attention_layernorm.weight", l);
        add_tensor(t, &n, S.hidden, S.dim, "model.layers.%d.mlp.gate_proj.weight", l);
        add_tensor(t, &n, S.hidden, S.dim, "model.layers.%d.mlp.up_proj.weight", l);
        add_tensor(t, &n, S.dim, S.hidden, "model.layers.%d.mlp.down_proj.weight", l);
    }
    return n;
}

static int write_checkpoint(const char *dir) {
    char path[4096];
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (!f) return perror(path), 1;
    fprintf(f, "{\"architectures\":[\"LlamaForCausalLM\"],\"hidden_size\":%d,\"intermediate_size\":%d,"
               "\"num_hidden_layers\":%d,\"num_attention_heads\":%d,\"num_key_value_heads\":%d,\"vocab_size\":%d,"
               "\"max_position_embeddings\":262144,\"rms_norm_eps\":1e-05,\"hidden_act\":\"silu\",\"torch_dtype\":\"bfloat16\"}\n",
            S.dim, S.hidden, S.layers, S.heads, S.heads, VOCAB);
    fclose(f);
    tensor_spec *t = burst_malloc(sizeof(tensor_spec) * (3 + 9 * S.layers));
    int nt = model_tensors(t), len = 1;
    const int cap = nt * 200 + 64;
    char *h = burst_malloc((size_t)cap);
    int64_t offset = 0;
    h[0] = '{';
    for (int i = 0; i < nt; i++) len = header_entry(h, len, cap, t[i].name, t[i].rows, t[i].cols, &offset);
    h[len - 1] = '}';
    while (len % 8) h[len++] = ' ';
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (!(f = fopen(path, "wb"))) return perror(path), 1;
    uint64_t hlen = (uint64_t)len;
    fwrite(&hlen, 8, 1, f);
    fwrite(h, 1, (size_t)len, f);
    const size_t block = (size_t)64 << 20; // bytes of random bf16, reused tensor after tensor
    uint16_t *rnd = burst_malloc(block), *ones = burst_malloc((size_t)S.hidden * 2);
    for (size_t i = 0; i < block / 2; i++) { // sign, exponent 2^-7, random mantissa
        uint64_t r = next_u64();
        rnd[i] = (uint16_t)(((r >> 63) << 15) | (120u << 7) | (r & 0x7f));
    }
    for (int i = 0; i < S.hidden; i++) ones[i] = 0x3f80; // 1.0
    for (int i = 0; i < nt; i++) {
        int64_t left = (t[i].rows ? t[i].rows : 1) * t[i].cols * 2;
        if (!t[i].rows) fwrite(ones, 1, (size_t)left, f);
        while (t[i].rows && left > 0) { // pieces of up to block/2 bytes from a random offset < block/2
            size_t piece = (size_t)(left < (int64_t)block / 2 ? left : (int64_t)block / 2);
            fwrite((const char *)rnd + (next_u64() % (block / 4)) * 2, 1, piece, f);
            left -= (int64_t)piece;
        }
    }
    int rc = ferror(f) | fclose(f) ? 1 : 0;
    if (rc) perror(path);
    free(rnd), free(ones), free(h), free(t);
    return rc;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_prefill DIR N1,N2,... BATCH1,BATCH2,... [REPS] [f32|bf16] [7b|13b]\n");
        return 2;
    }
    S = SHAPES[0];
    if (argc > 6) {
        if (strcmp(argv[6], SHAPES[0].name) && strcmp(argv[6], SHAPES[1].name))
            return fprintf(stderr, "bench_prefill: shape %s: want 7b or 13b\n", argv[6]), 2;
        S = SHAPES[strcmp(argv[6], SHAPES[0].name) ? 1 : 0];
    }
    int ns[MAX_LIST], batches[MAX_LIST], reps = argc > 4 ? atoi(argv[4]) : 3;
    if (reps < 1 || reps > MAX_REPS)
        return fprintf(stderr, "bench_prefill: REPS %s: want 1 to %d\n", argv[4], MAX_REPS), 2;
    burst_dtype kv = DTYPE_F32;
    if (argc > 5 && (!dtype_parse(argv[5], &kv) || kv == DTYPE_F16))
        return fprintf(stderr, "bench_prefill: KV dtype %s: want f32 or bf16\n", argv[5]), 2;
    int n_ns = parse_list(argv[2], ns), n_batches = parse_list(argv[3], batches);
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", argv[1]);
    struct stat st;
    if (stat(cfg_path, &st)) {
        double t0 = burst_now();
        if (write_checkpoint(argv[1])) return 1;
        fprintf(stderr, "bench_prefill: wrote a random LLaMA-%s checkpoint to %s in %.1f s\n", S.name, argv[1], burst_now() - t0);
    }
    size_t free_b, total_b;
    CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    // Fits when weights (bf16) + KV cache + scratch for the largest batch + 2 GB leave room.
    const double weights_b = 2.0 * (2.0 * VOCAB * S.dim + S.layers * (4.0 * S.dim * S.dim + 3.0 * S.dim * S.hidden));
    int max_batch = 0, ctx = 0;
    for (int i = 0; i < n_batches; i++) max_batch = batches[i] > max_batch ? batches[i] : max_batch;
    const double scratch_b = (double)max_batch * (7.0 * S.dim + 2.0 * S.hidden) * 4 + (double)max_batch * S.hidden * 2;
    for (int i = 0; i < n_ns; i++) {
        double need = weights_b + 2.0 * S.layers * ns[i] * S.dim * (double)dtype_size(kv) + scratch_b + 2e9;
        if (need > (double)free_b)
            printf("N=%d does not fit: needs %.1f GB of %.1f GB free (%s KV cache)\n", ns[i], need / 1e9, free_b / 1e9,
                   dtype_name(kv)), ns[i] = -ns[i];
        else if (ns[i] > ctx) ctx = ns[i];
    }
    const double linear = S.layers * (4.0 * S.dim * S.dim + 3.0 * S.dim * S.hidden + 2.0 * S.dim) + S.dim + (double)VOCAB * S.dim;
    double ttft[MAX_LIST][MAX_LIST] = {{0}};
    double decode_ms[MAX_LIST][MAX_LIST] = {{0}};
    int *tokens = burst_malloc(sizeof(int) * (size_t)(ctx + DECODE_STEPS));
    rng = RNG_SEED; // the same prompt whether or not this run wrote the checkpoint (logit0 compares runs)
    for (int i = 0; i < ctx + DECODE_STEPS; i++) tokens[i] = (int)(next_u64() % VOCAB);
    float *logits = burst_malloc(sizeof(float) * VOCAB);
    for (int b = 0; b < n_batches && ctx; b++) {
        llama_options opt = {.ctx = ctx + DECODE_STEPS, .n_slots = 1, .max_batch = batches[b], .backend = "cuda", .kv_dtype = kv};
        llama_model *m;
        burst_error err;
        double t0 = burst_now();
        if (llama_load(argv[1], &opt, &m, &err)) return fprintf(stderr, "E %s\n", err.msg), 1;
        fprintf(stderr, "bench_prefill: loaded in %.1f s, %.1f GB reserved, max_batch %d\n", burst_now() - t0,
                llama_reserved_bytes(m) / 1e9, batches[b]);
        if (llama_prefill(m, 0, tokens, batches[b] < ctx ? batches[b] : ctx, 0, logits, &err)) // warm-up
            return fprintf(stderr, "E %s\n", err.msg), 1;
        for (int i = 0; i < n_ns; i++) {
            if (ns[i] <= 0) continue;
            // The first prefill of this N meets attention shapes the lengths before it did not (a
            // server's first prompt of a length): first_s. UNTIMED more let every shape get its
            // cuDNN plan (attention/flash_cudnn.h's flash_cudnn_worth); then the timed reps.
            double t[MAX_REPS], first_s = 0;
            for (int r = 0; r < 1 + UNTIMED + reps; r++) {
                llama_slot_truncate(m, 0, 0);
                double s = burst_now();
                if (llama_prefill(m, 0, tokens, ns[i], 0, logits, &err)) return fprintf(stderr, "E %s\n", err.msg), 1;
                if (r == 0) first_s = burst_now() - s;
                if (r > UNTIMED) t[r - 1 - UNTIMED] = burst_now() - s;
            }
            qsort(t, (size_t)reps, sizeof(double), cmp_double);
            ttft[b][i] = t[reps / 2];
            double s = burst_now();
            for (int j = 0; j < DECODE_STEPS; j++)
                if (llama_forward(m, &(llama_segment){.slot = 0, .n = 1}, 1, &tokens[ns[i] + j], logits, NULL, NULL, &err))
                    return fprintf(stderr, "E %s\n", err.msg), 1;
            decode_ms[b][i] = (burst_now() - s) * 1e3 / DECODE_STEPS;
            double flop = 2.0 * linear * ns[i] + 2.0 * (double)ns[i] * ns[i] * S.dim * S.layers;
            printf("{\"model\": \"%s\", \"N\": %d, \"max_batch\": %d, \"kv\": \"%s\", \"ttft_s\": %.4f, \"min_s\": %.4f, \"first_s\": %.4f, \"tflops\": %.1f, \"decode_ms\": %.2f, \"logit0\": %g}\n",
                   S.name, ns[i], batches[b], dtype_name(kv), ttft[b][i], t[0], first_s, flop / ttft[b][i] / 1e12, decode_ms[b][i],
                   logits[0]);
            fflush(stdout);
        }
        llama_free(m);
    }
    printf("\nLLaMA-%s shape, bf16, %s KV cache, one GPU, time to first token (median of %d), s [TFLOP/s],\n"
           "then decode ms per token at that context\n%8s",
           S.name, dtype_name(kv), reps, "N");
    for (int b = 0; b < n_batches; b++) printf("  batch %-15d", batches[b]);
    printf("\n");
    for (int i = 0; i < n_ns; i++) {
        printf("%8d", ns[i] < 0 ? -ns[i] : ns[i]);
        for (int b = 0; b < n_batches; b++) {
            double flop = 2.0 * linear * ns[i] + 2.0 * (double)ns[i] * ns[i] * S.dim * S.layers;
            if (ns[i] > 0) printf("  %7.3f [%5.1f] %5.2f", ttft[b][i], flop / ttft[b][i] / 1e12, decode_ms[b][i]);
            else printf("  %-21s", "does not fit");
        }
        printf("\n");
    }
    free(tokens), free(logits);
    return 0;
}
