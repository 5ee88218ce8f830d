#define _POSIX_C_SOURCE 200809L
#include "json_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

burst_status json_file_load(const char *path, cJSON **out, burst_error *err) {
    *out = NULL;
    burst_status s = BURST_OK;
    char *text = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return BURST_FAIL(err, BURST_ERR_IO, "%s: %s", path, strerror(errno));
    if (fseek(fp, 0, SEEK_END) != 0) {
        s = BURST_FAIL(err, BURST_ERR_IO, "%s: %s", path, strerror(errno));
        goto done;
    }
    long size = ftell(fp);
    if (size < 0 || (unsigned long)size > JSON_FILE_MAX_BYTES) {
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: size %ld unreadable or over %u bytes", path,
                       size, JSON_FILE_MAX_BYTES);
        goto done;
    }
    rewind(fp);
    text = burst_malloc((size_t)size + 1);
    if (fread(text, 1, (size_t)size, fp) != (size_t)size) {
        s = BURST_FAIL(err, BURST_ERR_IO, "%s: short read", path);
        goto done;
    }
    text[size] = '\0';
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(text, (size_t)size + 1, &end, 1);
    if (!*out)
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: malformed JSON (at byte %td of %ld)", path,
                       end ? end - text : (ptrdiff_t)0, size);
done:
    free(text);
    fclose(fp);
    return s;
}

int json_printable(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return 0;
    return 1;
}

const char *json_show(const char *s) { return json_printable(s) ? s : "(unprintable)"; }
