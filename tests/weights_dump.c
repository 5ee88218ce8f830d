// Prints what weights_open reads from a checkpoint directory, one line per fact, for tests that
// compare it with what a generator wrote (test_weights_random.py):
//   config dim=.. hidden_dim=.. ...   (every llama_config field)
//   bytes N                           (weights_bytes)
//   tensor NAME DTYPE d0,d1,.. NBYTES FNV1A64   (every tensor, by name; hash of its stored bytes)
// Exit code 1 with the error line on stderr when the directory does not open.
#include <inttypes.h>

#include "weights/weights.h"

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CHECKPOINT_DIR\n", argv[0]);
        return 2;
    }
    weights *w;
    burst_error err;
    if (weights_open(argv[1], &w, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        return 1;
    }
    const llama_config *c = weights_config(w);
    printf("config dim=%d hidden_dim=%d n_layers=%d n_heads=%d n_kv_heads=%d head_dim=%d "
           "vocab_size=%d max_seq_len=%d norm_eps=%.9g rope_theta=%.9g tie_embeddings=%d "
           "bos_id=%d eos_id=%d\n",
           c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads, c->head_dim,
           c->vocab_size, c->max_seq_len, c->norm_eps, c->rope_theta, c->tie_embeddings,
           c->bos_id, c->eos_id);
    printf("bytes %zu\n", weights_bytes(w));
    for (int64_t i = 0; i < weights_count(w); i++) {
        const weights_tensor *t = weights_at(w, i);
        printf("tensor %s %s ", t->name, dtype_name(t->dtype));
        for (int d = 0; d < t->ndim; d++) printf("%s%" PRId64, d ? "," : "", t->shape[d]);
        printf(" %zu %016" PRIx64 "\n", t->nbytes, fnv1a64(t->data, t->nbytes));
    }
    weights_close(w);
    return 0;
}
