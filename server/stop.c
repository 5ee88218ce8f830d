#define _POSIX_C_SOURCE 200809L
#include "stop.h"

#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

void stop_init(stop_matcher *s, char *const *stop, int n_stop) {
    *s = (stop_matcher){.stop = stop, .n_stop = n_stop, .held = burst_calloc(1, 1)};
}

void stop_free(stop_matcher *s) {
    free(s->held);
    s->held = NULL;
}

// Length of the longest suffix of buf[0, n) that is a proper prefix of some stop string.
static size_t partial_suffix(const stop_matcher *s, const char *buf, size_t n) {
    size_t best = 0;
    for (int i = 0; i < s->n_stop; i++) {
        size_t ls = strlen(s->stop[i]);
        for (size_t k = ls - 1 < n ? ls - 1 : n; k > best; k--)
            if (!memcmp(buf + n - k, s->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

char *stop_feed(stop_matcher *s, const char *text, int *stopped) {
    size_t lt = strlen(text), n = s->held_len + lt;
    char *buf = burst_malloc(n + 1);
    memcpy(buf, s->held, s->held_len);
    memcpy(buf + s->held_len, text, lt + 1);
    // The earliest completed stop string ends the output.
    size_t cut = n;
    for (int i = 0; i < s->n_stop; i++) {
        char *hit = strstr(buf, s->stop[i]);
        if (hit && (size_t)(hit - buf) < cut) cut = (size_t)(hit - buf);
    }
    *stopped = cut < n;
    size_t keep = *stopped ? 0 : partial_suffix(s, buf, n);
    size_t out = *stopped ? cut : n - keep;
    s->held = realloc(s->held, keep + 1);
    BURST_ASSERT(s->held && "stop: out of memory");
    memcpy(s->held, buf + out, keep);
    s->held[keep] = 0;
    s->held_len = keep;
    buf[out] = 0;
    return buf;
}

char *stop_flush(stop_matcher *s) {
    char *out = s->held;
    s->held = burst_calloc(1, 1);
    s->held_len = 0;
    return out;
}
