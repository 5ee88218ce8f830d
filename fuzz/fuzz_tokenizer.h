// The tokenizer the fuzz targets run with: $BURST_TOKENIZER (a tokenizer.model), or exit.
#pragma once
#include <stdio.h>
#include <stdlib.h>

#include "model/tokenizer.h"

static tokenizer *fuzz_tokenizer(const char *target) {
    const char *path = getenv("BURST_TOKENIZER");
    tokenizer *tok = NULL;
    burst_error err = {{0}};
    if (!path) {
        fprintf(stderr, "%s: set BURST_TOKENIZER to a tokenizer.model\n", target);
        exit(2);
    }
    if (tokenizer_load(path, &tok, &err)) {
        fprintf(stderr, "%s: %s\n", target, err.msg);
        exit(2);
    }
    return tok;
}
