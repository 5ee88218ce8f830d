#include "cli_args.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

int cli_parse_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: want an integer in [%ld, %ld]\n", prog, flag, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *prog, const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s %s: want a number in [%g, %g]\n", prog, flag, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}
