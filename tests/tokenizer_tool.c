// Test tool for test_tokenizer.py: reads NUL-separated UTF-8 strings from a file and prints, per
// string, three lines: the ids (no BOS), the hex of tokenizer_decode(ids), and the hex of the
// concatenated detok_push/detok_flush output fed one id at a time.
// With --chat TEMPLATE, the file holds conversations instead, each its messages' role and content
// strings and then an empty string, and it prints a line a conversation: the ids that template
// gives ("ids: ..."), or the error ("E ...").
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

static void print_hex(const char *tag, const char *s) {
    printf("%s", tag);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) printf("%02x", *p);
    printf("\n");
}

static void print_ids(const int *ids, int n) {
    printf("ids:");
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

// The conversations in buf (len bytes) through template tpl.
static void chats(const tokenizer *t, chat_template tpl, const char *buf, size_t len) {
    chat_message msgs[64];
    int n = 0;
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        if (buf[off] && n == 64) {
            fprintf(stderr, "tokenizer_tool: a conversation of more than 64 messages\n");
            exit(1);
        }
        if (buf[off]) {
            msgs[n].role = buf + off;
            off += strlen(buf + off) + 1;
            msgs[n++].content = off < len ? buf + off : "";
            continue;
        }
        int *ids, n_ids;
        burst_error err;
        if (chat_template_encode(t, tpl, msgs, n, &ids, &n_ids, &err)) printf("E %s\n", err.msg);
        else print_ids(ids, n_ids), free(ids);
        n = 0;
    }
}

int main(int argc, char **argv) {
    chat_template tpl;
    const int chat = argc == 5 && !strcmp(argv[2], "--chat");
    if (!(argc == 3 || (chat && chat_template_named(argv[3], &tpl)))) {
        fprintf(stderr, "usage: tokenizer_tool tokenizer.model [--chat llama-2|vicuna|zephyr] strings.bin\n");
        return 2;
    }
    burst_error err;
    tokenizer *t;
    if (tokenizer_load(argv[1], &t, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        return 1;
    }
    char *buf;
    size_t len;
    if (burst_read_file(argv[argc - 1], 64 << 20, &buf, &len, &err)) {
        fprintf(stderr, "E %s\n", err.msg);
        return 1;
    }
    if (chat) {
        chats(t, tpl, buf, len);
        tokenizer_free(t);
        free(buf);
        return 0;
    }
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        int *ids, n;
        if (tokenizer_encode(t, buf + off, 0, &ids, &n, &err)) {
            fprintf(stderr, "E %s\n", err.msg);
            return 1;
        }
        print_ids(ids, n);
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
    free(buf);
    return 0;
}
