// Test tool: runs a model on given token ids and writes the logits to a file, for comparison
// with the float64 reference in test_logits.py and across rank counts.
//   forward_dump [--backend NAME] [--kv-dtype f32|bf16] DIR OUT BATCH RANKS p0 p1 ... [-- d0 d1 ...]
// Prefills p0.. in chunks of BATCH tokens on RANKS ranks, then feeds d0.. one token at a time.
// OUT holds float32 rows of vocab logits: one after the prefill, one after each decode token.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/llama.h"

int main(int argc, char **argv) {
    const char *backend = "cpu";
    burst_dtype kv_dtype = DTYPE_F32;
    for (; argc > 2 && !strncmp(argv[1], "--", 2); argc -= 2, argv += 2)
        if (!strcmp(argv[1], "--backend")) backend = argv[2];
        else if (strcmp(argv[1], "--kv-dtype") || !dtype_parse(argv[2], &kv_dtype)) argc = 0; // usage
    if (argc < 6) {
        fprintf(stderr, "usage: forward_dump [--backend NAME] [--kv-dtype f32|bf16] DIR OUT BATCH RANKS p0 p1 ... [-- d0 d1 ...]\n");
        return 2;
    }
    int n = argc - 5, *ids = malloc(sizeof(int) * (size_t)n), n_prompt = n;
    for (int i = 0; i < n; i++) {
        if (!strcmp(argv[5 + i], "--")) n_prompt = n_prompt < i ? n_prompt : i, ids[i] = -1;
        else ids[i] = atoi(argv[5 + i]);
    }
    burst_error err;
    llama_model *m;
    llama_options opt = {.ctx = n, .n_slots = 1, .max_batch = atoi(argv[3]), .n_ranks = atoi(argv[4]),
                         .backend = backend, .kv_dtype = kv_dtype};
    if (llama_load(argv[1], &opt, &m, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        return 1;
    }
    int vocab = llama_config_of(m)->vocab_size;
    float *logits = malloc(sizeof(float) * (size_t)vocab);
    FILE *out = fopen(argv[2], "wb");
    int rc = out && !llama_prefill(m, 0, ids, n_prompt, logits, &err) ? 0 : 1;
    if (!rc) fwrite(logits, sizeof(float), (size_t)vocab, out);
    for (int i = n_prompt + 1; !rc && i < n; i++) {
        llama_segment seg = {.slot = 0, .n = 1};
        rc = llama_forward(m, &seg, 1, &ids[i], logits, NULL, NULL, &err) ? 1 : 0;
        if (!rc) fwrite(logits, sizeof(float), (size_t)vocab, out);
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
