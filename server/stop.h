// Stop strings for a streamed completion: text goes in as it is generated and comes out as soon
// as it can no longer be the start of a stop string; a completed stop string ends the output
// (it and everything after it are dropped, as OpenAI's `stop` does). Text that might begin a stop
// string is held back, so a stop string split over several tokens is still caught.
//
// A stop_matcher belongs to one request (one thread). It borrows the stop strings, which must
// outlive it, and owns its held-back text. Returned strings are malloc'd; the caller frees them.
#pragma once
#include <stddef.h>

typedef struct {
    char *const *stop; // (n_stop) borrowed, non-empty UTF-8 strings
    int n_stop;
    char *held;        // text that may be the start of a stop string (malloc'd, NUL-terminated)
    size_t held_len;
} stop_matcher;

void stop_init(stop_matcher *s, char *const *stop, int n_stop);
void stop_free(stop_matcher *s);
// Adds text; returns the text now safe to emit. *stopped becomes 1 when a stop string completed.
char *stop_feed(stop_matcher *s, const char *text, int *stopped);
// At the end of the completion: the held-back text, which no stop string completed.
char *stop_flush(stop_matcher *s);
