// Test tool for test_json_mode.py (model/json_grammar.h). Reads NUL-separated strings from a file.
//   json_tool feed strings.bin: a line a string, "N C": the bytes json_feed took before one it
//     refused (all of them: the string's length), and whether they are a whole object (1 or 0).
//   json_tool mask tokenizer.model strings.bin: a line a string, each a prefix the grammar takes:
//     the ids json_mask leaves (finite logits) after it.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "model/json_grammar.h"

int main(int argc, char **argv) {
    const int mask = argc == 4 && !strcmp(argv[1], "mask");
    if (!mask && !(argc == 3 && !strcmp(argv[1], "feed"))) {
        fprintf(stderr, "usage: json_tool feed strings.bin | json_tool mask tokenizer.model strings.bin\n");
        return 2;
    }
    tokenizer *t = NULL;
    burst_error err;
    if (mask && tokenizer_load(argv[2], &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_vocab *v = mask ? json_vocab_new(t) : NULL;
    const int vocab = mask ? tokenizer_vocab_size(t) : 0;
    float *logits = mask ? calloc((size_t)vocab, sizeof *logits) : NULL;
    char *buf;
    size_t len;
    if (burst_read_file(argv[argc - 1], 64 << 20, &buf, &len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        json_state s;
        json_start(&s);
        int n = 0;
        while (buf[off + n] && json_feed(&s, buf + off + n, 1)) n++;
        if (!mask) {
            printf("%d %d\n", n, !buf[off + n] && json_complete(&s));
            continue;
        }
        memset(logits, 0, sizeof *logits * (size_t)vocab);
        json_mask(v, &s, logits);
        for (int id = 0; id < vocab; id++)
            if (isfinite(logits[id])) printf("%d ", id);
        printf("\n");
    }
    json_vocab_free(v);
    tokenizer_free(t);
    free(logits);
    free(buf);
    return 0;
}
