// libFuzzer target: stop strings (server/stop.h) and the streaming detokenizer (model/tokenizer.h)
// on arbitrary input. The first bytes give up to 4 stop strings (user input; ASCII here, as
// UTF-8 validity is http.c's business) and the rest a sequence of token ids, fed one at a time as
// the engine feeds generated tokens until a stop string completes. What comes out must be the
// text fed, cut where the earliest stop string in it begins, and nothing may crash or leak.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_tokenizer.h"
#include "server/stop.h"

static tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    tok = fuzz_tokenizer("fuzz_stop");
    return 0;
}

// Appends s to the growing string *buf (NUL-terminated).
static void append(char **buf, size_t *len, const char *s) {
    size_t n = strlen(s);
    *buf = realloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n + 1);
    *len += n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    // Stop strings: NUL-separated, up to 4, until an empty one; then 2-byte token ids.
    char *stop[4];
    int n_stop = 0;
    size_t at = 0;
    while (n_stop < 4 && at < n && data[at]) {
        const uint8_t *end = memchr(data + at, 0, n - at);
        size_t len = end ? (size_t)(end - (data + at)) : n - at;
        for (size_t i = 0; i < len; i++)
            if (data[at + i] > 127) len = 0; // ends the stop strings here
        if (!len) break;
        stop[n_stop] = malloc(len + 1);
        memcpy(stop[n_stop], data + at, len);
        stop[n_stop++][len] = '\0';
        at += len + 1;
    }
    at++;
    stop_matcher sm;
    stop_init(&sm, stop, n_stop);
    detok_stream ds;
    detok_init(&ds, NULL, 0);
    char *all = calloc(1, 1), *out = calloc(1, 1);
    size_t all_len = 0, out_len = 0;
    int stopped = 0;
    for (; at + 1 < n && !stopped; at += 2) {
        int id = (data[at] | data[at + 1] << 8) % tokenizer_vocab_size(tok);
        char *text = detok_push(tok, &ds, id);
        if (!text) continue;
        append(&all, &all_len, text);
        char *safe = stop_feed(&sm, text, &stopped);
        append(&out, &out_len, safe);
        free(safe), free(text);
    }
    if (!stopped) {
        char *rest = stop_flush(&sm);
        append(&out, &out_len, rest);
        free(rest);
    }
    // The text fed, cut at its earliest stop string (an incomplete character the detokenizer holds
    // back at the end is in neither).
    size_t cut = all_len;
    for (int i = 0; i < n_stop; i++) {
        const char *hit = strstr(all, stop[i]);
        if (hit && (size_t)(hit - all) < cut) cut = (size_t)(hit - all);
    }
    if (out_len != cut || memcmp(out, all, cut)) {
        fprintf(stderr, "fuzz_stop: output %zu bytes, want the first %zu of %zu\n", out_len, cut, all_len);
        abort();
    }
    stop_free(&sm);
    detok_free(&ds);
    free(all), free(out);
    for (int i = 0; i < n_stop; i++) free(stop[i]);
    return 0;
}
