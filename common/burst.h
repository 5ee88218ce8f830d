// Shared by every module: status codes, the caller-supplied error buffer, the CHECK family,
// always-on assertions and one-line logging.
//
// Library code (weights/, model/, attention/, comm/) never exits: it returns a burst_status and
// writes one line into a burst_error the caller owns. Only main/server decide to exit.
// Fatal paths (BURST_ASSERT, a failed CHECK) call the abort hook, then abort().
// Logging is thread-safe (one fprintf per line).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus // CUDA sources include this header too
extern "C" {
#endif

typedef enum {
    BURST_OK = 0,
    BURST_ERR_IO,        // file missing, unreadable, mmap failed
    BURST_ERR_FORMAT,    // a file's content is malformed
    BURST_ERR_INVALID,   // a caller's argument is out of range
    BURST_ERR_NOMEM,     // an allocation failed
    BURST_ERR_DEVICE,    // CUDA / NCCL failure
    BURST_ERR_CANCELLED, // the work was stopped on request
} burst_status;

// One line: "path:line func: subject: what is wrong (want what)".
typedef struct {
    char msg[512];
} burst_error;

const char *burst_status_str(burst_status s);

// One copy of a batch (backend_copy, the ring's copies): `bytes` from src to dst. The copies of
// one batch neither overlap nor depend on each other, so they may run in any order or together.
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_job;

// Formats "file:line func: <fmt>" into err (if not NULL) and evaluates to status.
burst_status burst_fail(burst_error *err, burst_status status, const char *file, int line,
                        const char *func, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
#define BURST_FAIL(err, status, ...) \
    burst_fail((err), (status), __FILE__, __LINE__, __func__, __VA_ARGS__)

// Logging: level letter, file:line, function, message.
void burst_log(char level, const char *file, int line, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define LOG_I(...) burst_log('I', __FILE__, __LINE__, __func__, __VA_ARGS__)
#define LOG_W(...) burst_log('W', __FILE__, __LINE__, __func__, __VA_ARGS__)
#define LOG_E(...) burst_log('E', __FILE__, __LINE__, __func__, __VA_ARGS__)

// Fatal errors go through the hook (the daemon logs them its own way), then abort().
typedef void (*burst_abort_hook)(const char *msg);
void burst_set_abort_hook(burst_abort_hook hook);
void burst_abort(const char *file, int line, const char *func, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define BURST_ASSERT(cond)                                                        \
    do {                                                                          \
        if (!(cond)) burst_abort(__FILE__, __LINE__, __func__, "assert %s", #cond); \
    } while (0)

// One generic check: evaluate expr once, compare to ok, report with strerr_fn(result).
#define BURST_CHECK_GEN(expr, ok, strerr_fn)                                        \
    do {                                                                            \
        __typeof__(expr) burst_check_r_ = (expr);                                   \
        if (burst_check_r_ != (ok))                                                 \
            burst_abort(__FILE__, __LINE__, __func__, "%s failed: %s", #expr,       \
                        strerr_fn(burst_check_r_));                                 \
    } while (0)

const char *burst_errno_str(int rc); // strerror(errno) for calls that return -1
#define SYS_CHECK(expr) BURST_CHECK_GEN((expr) == -1 ? -1 : 0, 0, burst_errno_str)

// Monotonic seconds, for timings.
double burst_now(void);

// Allocation that aborts on failure (sizes are size_t; callers compute them in 64 bits).
void *burst_malloc(size_t bytes);
void *burst_calloc(size_t n, size_t size);
void *burst_realloc(void *p, size_t bytes);
// 64-byte aligned (a cache line, an AVX-512 vector, an AMX tile row), size rounded up to 64; free().
void *burst_malloc_aligned(size_t bytes);

// Reads the whole file at path (at most max_bytes) into *text (malloc'd, NUL-terminated; *len,
// unless len is NULL: the bytes before the NUL). Errors name the file.
burst_status burst_read_file(const char *path, size_t max_bytes, char **text, size_t *len, burst_error *err);

#ifdef __cplusplus
}
#endif
