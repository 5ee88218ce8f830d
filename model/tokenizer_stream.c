// Streaming detokenization (model/tokenizer.h). The window ids[prefix, n) is decoded as a whole
// and compared with the decode of ids[prefix, read): SentencePiece decodes a piece differently at
// the start of a string (the leading space goes) and byte pieces only as a group, so the new
// text is the difference of the two. Text that ends in U+FFFD waits for the bytes that complete
// it. Each emit moves the window forward, so the work per token stays bounded.
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"

static const char replacement[] = "\xEF\xBF\xBD"; // U+FFFD, what an incomplete byte run decodes to

void detok_init(detok_stream *d, const int *context, int n_context) {
    enum { CONTEXT = 4 }; // enough ids to carry a leading space across the start of the window
    int k = n_context < CONTEXT ? n_context : CONTEXT;
    d->cap = 64;
    d->ids = burst_malloc(sizeof(int) * (size_t)d->cap);
    if (k > 0) memcpy(d->ids, context + n_context - k, sizeof(int) * (size_t)k);
    d->n = d->read = k;
    d->prefix = 0;
}

void detok_free(detok_stream *d) {
    free(d->ids);
    d->ids = NULL;
}

static int ends_with_replacement(const char *s) {
    size_t len = strlen(s), r = sizeof replacement - 1;
    return len >= r && memcmp(s + len - r, replacement, r) == 0;
}

// The text that ids[read, n) add after ids[prefix, read), or NULL on a bad id.
static char *pending_text(const tokenizer *t, const detok_stream *d, int *complete) {
    char *before = tokenizer_decode(t, d->ids + d->prefix, d->read - d->prefix);
    char *after = tokenizer_decode(t, d->ids + d->prefix, d->n - d->prefix);
    if (!before || !after) {
        free(before), free(after);
        return NULL;
    }
    // The new text starts where the two decodes part (at the end of `before`, normally).
    size_t from = 0;
    while (before[from] && before[from] == after[from]) from++;
    size_t la = strlen(after);
    *complete = !ends_with_replacement(after);
    memmove(after, after + from, la - from + 1);
    free(before);
    return after;
}

// After an emit, the ids just emitted become the window's prefix and older ids are dropped.
static void advance(detok_stream *d) {
    int from = d->read;
    memmove(d->ids, d->ids + from, sizeof(int) * (size_t)(d->n - from));
    d->n -= from;
    d->prefix = 0;
    d->read = d->n;
}

char *detok_push(const tokenizer *t, detok_stream *d, int id) {
    if (d->n == d->cap) {
        d->cap *= 2;
        d->ids = realloc(d->ids, sizeof(int) * (size_t)d->cap);
        BURST_ASSERT(d->ids && "detok window grow");
    }
    d->ids[d->n++] = id;
    int complete;
    char *text = pending_text(t, d, &complete);
    if (!text) {
        d->n--;
        return NULL;
    }
    // A UTF-8 character is at most 4 bytes: a run still incomplete after more ids than that holds
    // invalid bytes and would never complete, so it goes out (as U+FFFD) instead of growing the
    // window (every push decodes the whole window: waiting forever is quadratic).
    if (!complete && d->n - d->read <= 4) {
        text[0] = 0;
        return text;
    }
    advance(d);
    return text;
}

char *detok_flush(const tokenizer *t, detok_stream *d) {
    int complete;
    char *text = pending_text(t, d, &complete);
    if (text) advance(d);
    return text;
}
