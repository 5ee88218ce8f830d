// Test tool for test_tokenizer.py: reads NUL-separated UTF-8 strings from a file and prints, per
// string, three lines: the ids (no BOS), the hex of tokenizer_decode(ids), and the hex of the
// concatenated detok_push/detok_flush output fed one id at a time.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/tokenizer.h"

static void print_hex(const char *tag, const char *s) {
    printf("%s", tag);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) printf("%02x", *p);
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: tokenizer_tool tokenizer.model strings.bin\n");
        return 2;
    }
    burst_error err;
    tokenizer *t;
    if (tokenizer_load(argv[1], &t, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    static char buf[4 << 20];
    size_t len = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[len] = 0;
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        int *ids, n;
        if (tokenizer_encode(t, buf + off, 0, &ids, &n, &err)) {
            fprintf(stderr, "E %s\n", err.msg);
            return 1;
        }
        printf("ids:");
        for (int i = 0; i < n; i++) printf(" %d", ids[i]);
        printf("\n");
        char *dec = tokenizer_decode(t, ids, n);
        print_hex("dec:", dec);
        size_t cap = 16 + 4 * strlen(buf + off) + 64 * (size_t)n, used = 0;
        char *streamed = calloc(1, cap);
        detok_stream ds;
        detok_init(&ds, NULL, 0);
        for (int i = 0; i <= n; i++) {
            char *piece = i < n ? detok_push(t, &ds, ids[i]) : detok_flush(t, &ds);
            size_t pl = strlen(piece);
            if (used + pl < cap) memcpy(streamed + used, piece, pl), used += pl;
            free(piece);
        }
        print_hex("stream:", streamed);
        detok_free(&ds);
        free(streamed);
        free(dec);
        free(ids);
    }
    tokenizer_free(t);
    return 0;
}
