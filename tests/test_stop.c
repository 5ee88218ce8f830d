// server/stop.h: stop strings split over pieces are caught, text that cannot start one goes out
// at once, the earliest stop wins, and what is held back comes out at the end.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/stop.h"

static int failures;

// Feeds pieces; the concatenated output and whether it stopped must match.
static void check(const char *name, char *const *stop, int n_stop, const char *const *pieces, int n,
                  const char *want, int want_stopped) {
    stop_matcher s;
    stop_init(&s, stop, n_stop);
    char out[256] = "";
    int stopped = 0;
    for (int i = 0; i < n && !stopped; i++) {
        char *t = stop_feed(&s, pieces[i], &stopped);
        strcat(out, t);
        free(t);
    }
    if (!stopped) {
        char *t = stop_flush(&s);
        strcat(out, t);
        free(t);
    }
    stop_free(&s);
    int ok = !strcmp(out, want) && stopped == want_stopped;
    printf("%s %s: got \"%s\" stopped=%d\n", ok ? "ok  " : "FAIL", name, out, stopped);
    failures += !ok;
}

int main(void) {
    char *lo_w[] = {"lo w"}, *abc[] = {"abc"}, *two[] = {"d", "c"}, *emoji[] = {"\xF0\x9F\x99\x82!"};
    check("split over pieces", lo_w, 1, (const char *const[]){"Hel", "lo", " wo", "rld"}, 4, "Hel", 1);
    check("held, then let out", abc, 1, (const char *const[]){"xab", "d", "ab"}, 3, "xabdab", 0);
    check("earliest stop wins", two, 2, (const char *const[]){"abcd"}, 1, "ab", 1);
    check("no stop strings", NULL, 0, (const char *const[]){"a", "b"}, 2, "ab", 0);
    check("multibyte stop", emoji, 1, (const char *const[]){"hi \xF0\x9F\x99\x82", "!x"}, 2, "hi ", 1);
    return failures ? 1 : 0;
}
