#define _POSIX_C_SOURCE 200809L
#include "json_file.h"

#include <stdlib.h>
#include <string.h>

burst_status json_file_load(const char *path, cJSON **out, burst_error *err) {
    *out = NULL;
    char *text;
    size_t size;
    burst_status s = burst_read_file(path, JSON_FILE_MAX_BYTES, &text, &size, err);
    if (s) return s;
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, size + 1, &end, 1);
    if (!*out)
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: malformed JSON (at byte %td of %zu)", path,
                       end ? end - text : (ptrdiff_t)0, size);
    free(text);
    return s;
}

int json_printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

const char *json_show(const char *s) { return json_printable(s) ? s : "(unprintable)"; }
