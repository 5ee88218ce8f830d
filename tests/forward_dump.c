// Test tool: runs a model on given token ids and writes the logits to a file, for comparison
// with the float64 reference in test_logits.py and across rank counts.
//   forward_dump [--backend NAME] [--kv-dtype f32|bf16] [--quantize q8|q4] DIR OUT BATCH RANKS p0 p1 ... [-- d0 d1 ...] [+ L q0 q1 ...]
// Prefills p0.. in chunks of BATCH tokens on RANKS ranks, then feeds d0.. one token at a time;
// then copies the slot's first L tokens to a second slot (llama_slot_copy) and prefills q0.. after
// them there, and keeps the first L tokens of the first slot (llama_slot_truncate) and prefills q0..
// after them. OUT holds float32 rows of vocab logits: one after the prefill, one after each decode
// token, one after the prefill that follows the copy, one after the prefill that follows the cut.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"
#include "model/quantize_cpu.h"

static const char usage[] =
    "usage: forward_dump [--backend NAME] [--kv-dtype f32|bf16] [--quantize q8|q4] DIR OUT BATCH RANKS p0 p1 ... [-- d0 d1 ...] "
    "[+ L q0 q1 ...]\n";

int main(int argc, char **argv) {
    const char *backend = "cpu";
    burst_dtype kv_dtype = DTYPE_F32;
    int quant = 0;
    for (; argc > 2 && !strncmp(argv[1], "--", 2); argc -= 2, argv += 2)
        if (!strcmp(argv[1], "--backend")) backend = argv[2];
        else if (!strcmp(argv[1], "--quantize")) // usage unless q8, q4 or none
            argc = quant_parse(argv[2], &quant) ? argc : 0;
        else if (strcmp(argv[1], "--kv-dtype") || !dtype_parse(argv[2], &kv_dtype)) argc = 0; // usage
    if (argc < 6) {
        fputs(usage, stderr);
        return 2;
    }
    // ids holds the three runs of tokens one after another: prompt, decode, after the cut.
    int n = argc - 5, *ids = malloc(sizeof(int) * (size_t)n), len[3] = {0}, part = 0, keep = 0, total = 0;
    for (int i = 5; i < argc; i++) {
        if (!strcmp(argv[i], "--") && part == 0) part = 1;
        else if (!strcmp(argv[i], "+") && part < 2 && i + 1 < argc) part = 2, keep = atoi(argv[++i]);
        else ids[total++] = atoi(argv[i]), len[part]++;
    }
    burst_error err;
    llama_model *m;
    llama_options opt = {.ctx = n, .n_slots = 2, .max_batch = atoi(argv[3]), .n_ranks = atoi(argv[4]),
                         .backend = backend, .kv_dtype = kv_dtype, .weights_quant = quant};
    if (llama_load(argv[1], &opt, &m, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        free(ids);
        return 1;
    }
    if (quant == DTYPE_Q8 && Q8_INTS) fputs("q8: matmul inputs quantized to int8\n", stderr); // (test_logits.py)
    int vocab = llama_config_of(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    FILE *out = fopen(argv[2], "wb");
    int rc = out && !llama_prefill(m, 0, ids, len[0], 0, logits, &err) ? 0 : 1;
    if (!rc) fwrite(logits, sizeof(float), (size_t)vocab, out);
    for (int i = len[0]; !rc && i < len[0] + len[1]; i++) {
        llama_segment seg = {.slot = 0, .n = 1};
        rc = llama_forward(m, &seg, 1, &ids[i], logits, NULL, NULL, &err) ? 1 : 0;
        if (!rc) fwrite(logits, sizeof(float), (size_t)vocab, out);
    }
    if (!rc && part == 2) {
        if (keep < 0 || keep > llama_slot_len(m, 0)) {
            fputs(usage, stderr);
            return 2;
        }
        llama_slot_copy(m, 1, 0, keep);
        llama_slot_truncate(m, 0, keep);
        for (int slot = 1; !rc && slot >= 0; slot--) {
            rc = llama_prefill(m, slot, ids + len[0] + len[1], len[2], 0, logits, &err) ? 1 : 0;
            if (!rc) fwrite(logits, sizeof(float), (size_t)vocab, out);
        }
    }
    if (rc) fprintf(stderr, "E %s\n", out ? err.msg : "cannot open output");
    ring_stats rs = llama_ring_stats(m);
    if (!rc && rs.steps)
        fprintf(stderr, "ring: %lld steps, compute %.6f s, waiting for transfers %.6f s over %lld steps with one\n",
                (long long)rs.steps, rs.compute_s, rs.wait_s, (long long)rs.transfers);
    if (out && fclose(out)) rc = 1;
    llama_free(m);
    free(logits);
    free(ids);
    return rc;
}
