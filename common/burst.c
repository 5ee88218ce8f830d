#define _POSIX_C_SOURCE 200809L
#include "burst.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static burst_abort_hook abort_hook;

const char *burst_status_str(burst_status s) {
    switch (s) {
    case BURST_OK: return "ok";
    case BURST_ERR_IO: return "io error";
    case BURST_ERR_FORMAT: return "format error";
    case BURST_ERR_INVALID: return "invalid argument";
    case BURST_ERR_NOMEM: return "out of memory";
    case BURST_ERR_DEVICE: return "device error";
    case BURST_ERR_CANCELLED: return "cancelled";
    }
    return "unknown status";
}

// Strip the directories above the project's top-level folder: "weights/safetensors.c".
static const char *short_path(const char *file) {
    const char *best = file;
    for (const char *p = file; *p; p++)
        if (*p == '/' && p[1]) {
            const char *next = strchr(p + 1, '/');
            if (!next) break;
            best = p + 1;
        }
    return best;
}

burst_status burst_fail(burst_error *err, burst_status status, const char *file, int line,
                        const char *func, const char *fmt, ...) {
    if (!err) return status;
    int n = snprintf(err->msg, sizeof err->msg, "%s:%d %s: ", short_path(file), line, func);
    if (n < 0 || (size_t)n >= sizeof err->msg) return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg + n, sizeof err->msg - (size_t)n, fmt, ap);
    va_end(ap);
    return status;
}

void burst_log(char level, const char *file, int line, const char *func, const char *fmt, ...) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "%c %s:%d %s: ", level, short_path(file), line, func);
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "%s\n", buf);
}

void burst_set_abort_hook(burst_abort_hook hook) { abort_hook = hook; }

void burst_abort(const char *file, int line, const char *func, const char *fmt, ...) {
    char buf[1024];
    int n = snprintf(buf, sizeof buf, "F %s:%d %s: ", short_path(file), line, func);
    if (n >= 0 && (size_t)n < sizeof buf) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
    }
    if (abort_hook) abort_hook(buf);
    else fprintf(stderr, "%s\n", buf);
    abort();
}

const char *burst_errno_str(int rc) {
    (void)rc;
    return strerror(errno);
}

double burst_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void *burst_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) burst_abort(__FILE__, __LINE__, __func__, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *burst_malloc_aligned(size_t bytes) {
    void *p = aligned_alloc(64, bytes ? (bytes + 63) / 64 * 64 : 64);
    if (!p) burst_abort(__FILE__, __LINE__, __func__, "out of memory allocating %zu bytes", bytes);
    return p;
}

void *burst_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) burst_abort(__FILE__, __LINE__, __func__, "out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *burst_realloc(void *p, size_t bytes) {
    void *q = realloc(p, bytes ? bytes : 1);
    if (!q) burst_abort(__FILE__, __LINE__, __func__, "out of memory reallocating %zu bytes", bytes);
    return q;
}

burst_status burst_read_file(const char *path, size_t max_bytes, char **text, size_t *len, burst_error *err) {
    *text = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp) return BURST_FAIL(err, BURST_ERR_IO, "%s: %s", path, strerror(errno));
    burst_status s = BURST_OK;
    long size = fseek(fp, 0, SEEK_END) ? -1 : ftell(fp);
    if (size < 0) s = BURST_FAIL(err, BURST_ERR_IO, "%s: %s", path, strerror(errno));
    else if ((unsigned long)size > max_bytes)
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: %ld bytes, over %zu", path, size, max_bytes);
    if (!s) {
        rewind(fp);
        *text = burst_malloc((size_t)size + 1);
        if (fread(*text, 1, (size_t)size, fp) != (size_t)size) {
            s = BURST_FAIL(err, BURST_ERR_IO, "%s: short read", path);
            free(*text);
            *text = NULL;
        } else {
            (*text)[size] = '\0';
            if (len) *len = (size_t)size;
        }
    }
    fclose(fp);
    return s;
}
