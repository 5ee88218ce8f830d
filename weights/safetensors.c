#define _POSIX_C_SOURCE 200809L
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/host_memory.h"
#include "json_file.h"

#define ST_MAX_HEADER (100ull << 20) // the safetensors format's own limit on the JSON header

// A JSON number holding a whole value in [0, 2^53] (exact in a double), else -1.
static int64_t json_index(const cJSON *j) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(int64_t)v) return -1;
    return (int64_t)v;
}

static char *str_dup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(burst_malloc(n), s, n);
}

static burst_status parse_shape(const st_file *f, const char *name, const cJSON *shape,
                                weights_tensor *t, burst_error *err) {
    char buf[160];
    if (!cJSON_IsArray(shape))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s shape is not an array", f->path,
                          name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > 4)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s has %d dims (want at most 4)",
                          f->path, name, ndim);
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t n = json_index(cJSON_GetArrayItem(shape, d));
        if (n < 0)
            return BURST_FAIL(err, BURST_ERR_FORMAT,
                              "%s: tensor %s shape[%d] is not a non-negative integer", f->path,
                              name, d);
        t->shape[d] = n;
        if (n && t->numel > INT64_MAX / n)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s shape %s overflows int64",
                              f->path, name, weights_format_shape(d + 1, t->shape, buf, sizeof buf));
        t->numel *= n;
    }
    return BURST_OK;
}

// Fills t from one header entry; data_start is the file offset of the data section.
static burst_status parse_entry(const st_file *f, const cJSON *e, size_t data_start,
                                weights_tensor *t, int64_t range[2], burst_error *err) {
    const char *name = e->string;
    char buf[160];
    burst_status s;
    if (!cJSON_IsObject(e))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s entry is not an object", f->path,
                          name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s has no dtype string", f->path,
                          name);
    if (!dtype_parse(dt->valuestring, &t->dtype))
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s dtype %.16s unsupported (want F32/F16/BF16)", f->path,
                          name, json_show(dt->valuestring));
    if ((s = parse_shape(f, name, cJSON_GetObjectItemCaseSensitive(e, "shape"), t, err))) return s;

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    int64_t b = -1, end = -1;
    if (cJSON_IsArray(off) && cJSON_GetArraySize(off) == 2) {
        b = json_index(cJSON_GetArrayItem(off, 0));
        end = json_index(cJSON_GetArrayItem(off, 1));
    }
    if (b < 0 || end < 0)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s data_offsets is not [begin, end] of non-negative integers",
                          f->path, name);
    int64_t data_bytes = (int64_t)(f->map_bytes - data_start);
    if (b > end)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s data_offsets [%lld, %lld] have begin > end", f->path,
                          name, (long long)b, (long long)end);
    if (end > data_bytes)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s data_offsets [%lld, %lld] past end of data (%lld bytes)",
                          f->path, name, (long long)b, (long long)end, (long long)data_bytes);
    int64_t esize = (int64_t)dtype_size(t->dtype);
    weights_format_shape(t->ndim, t->shape, buf, sizeof buf);
    if (t->numel > data_bytes / esize)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s shape %s x %s is larger than the data (%lld bytes)",
                          f->path, name, buf, dtype_name(t->dtype), (long long)data_bytes);
    if (t->numel * esize != end - b)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s is %lld bytes, want %s x %s = %lld", f->path, name,
                          (long long)(end - b), buf, dtype_name(t->dtype),
                          (long long)(t->numel * esize));
    if ((data_start + (size_t)b) % (size_t)esize)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: tensor %s data at file offset %zu not aligned to %lld bytes (rewrite "
                          "the file with a current safetensors, which pads the header)",
                          f->path, name, data_start + (size_t)b, (long long)esize);
    t->nbytes = (size_t)(end - b);
    t->data = f->map + data_start + b;
    range[0] = b;
    range[1] = end;
    return BURST_OK;
}

typedef struct {
    int64_t begin, end, i;
} st_range;

static int range_cmp(const void *a, const void *b) {
    const st_range *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

// Two non-empty tensors overlap when one begins before another (earlier by begin) ends.
static burst_status check_overlap(const st_file *f, st_range *r, burst_error *err) {
    qsort(r, (size_t)f->n_tensors, sizeof *r, range_cmp);
    const st_range *last = NULL; // the non-empty range seen so far that ends latest
    for (int64_t i = 0; i < f->n_tensors; i++) {
        if (r[i].begin == r[i].end) continue;
        if (last && r[i].begin < last->end)
            return BURST_FAIL(err, BURST_ERR_FORMAT,
                              "%s: tensors %s [%lld, %lld] and %s [%lld, %lld] overlap", f->path,
                              f->tensors[last->i].name, (long long)last->begin,
                              (long long)last->end, f->tensors[r[i].i].name,
                              (long long)r[i].begin, (long long)r[i].end);
        if (!last || r[i].end > last->end) last = &r[i];
    }
    return BURST_OK;
}

static burst_status map_file(st_file *f, burst_error *err) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return BURST_FAIL(err, BURST_ERR_IO, "%s: %s", f->path, strerror(errno));
    burst_status s = BURST_OK;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        s = BURST_FAIL(err, BURST_ERR_IO, "%s: %s", f->path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        s = BURST_FAIL(err, BURST_ERR_IO, "%s: not a regular file", f->path);
    } else if (sb.st_size < 8) {
        s = BURST_FAIL(err, BURST_ERR_FORMAT,
                       "%s: file is %lld bytes, too short for a safetensors header (want >= 8)",
                       f->path, (long long)sb.st_size);
    } else {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) s = BURST_FAIL(err, BURST_ERR_IO, "%s: mmap: %s", f->path, strerror(errno));
        else {
            f->map = p;
            f->map_bytes = (size_t)sb.st_size;
            host_huge_pages(p, f->map_bytes); // for the pages read in from here on; advice only
        }
    }
    close(fd);
    return s;
}

// Copies the header out of the mapping (so that cJSON reads a terminated string) and parses it.
static burst_status parse_header(const st_file *f, uint64_t n, cJSON **root, burst_error *err) {
    char *text = burst_malloc((size_t)n + 1);
    memcpy(text, f->map + 8, (size_t)n);
    text[n] = '\0';
    burst_status s = BURST_OK;
    const char *end = NULL;
    if (memchr(text, '\0', (size_t)n))
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: JSON header contains a NUL byte", f->path);
    else if (!(*root = cJSON_ParseWithLengthOpts(text, (size_t)n + 1, &end, 1)))
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: malformed JSON header (at byte %td of %llu)",
                       f->path, end ? end - text : (ptrdiff_t)0, (unsigned long long)n);
    else if (!cJSON_IsObject(*root))
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: JSON header is not an object", f->path);
    free(text);
    return s;
}

static burst_status parse_tensors(st_file *f, const cJSON *root, size_t data_start,
                                  burst_error *err) {
    int64_t n = 0;
    for (const cJSON *e = root->child; e; e = e->next) n += strcmp(e->string, "__metadata__") != 0;
    f->tensors = burst_calloc((size_t)n, sizeof *f->tensors);
    st_range *ranges = burst_calloc((size_t)n, sizeof *ranges);
    burst_status s = BURST_OK;
    for (const cJSON *e = root->child; e && !s; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if (!json_printable(e->string)) {
            s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor #%lld name has a control character",
                           f->path, (long long)f->n_tensors);
            break;
        }
        weights_tensor *t = &f->tensors[f->n_tensors];
        st_range *r = &ranges[f->n_tensors];
        t->name = str_dup(e->string);
        f->n_tensors++;
        int64_t range[2];
        if ((s = parse_entry(f, e, data_start, t, range, err))) break;
        *r = (st_range){range[0], range[1], f->n_tensors - 1};
        f->data_bytes += t->nbytes;
    }
    if (!s) s = check_overlap(f, ranges, err);
    free(ranges);
    return s;
}

burst_status st_open(const char *path, st_file **out, burst_error *err) {
    *out = NULL;
    st_file *f = burst_calloc(1, sizeof *f);
    f->path = str_dup(path);
    cJSON *root = NULL;
    burst_status s = map_file(f, err);
    if (s) goto fail;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f->map[i];
    if (n > f->map_bytes - 8) {
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: header length %llu past end of file (%zu bytes)",
                       path, (unsigned long long)n, f->map_bytes);
        goto fail;
    }
    if (n > ST_MAX_HEADER) {
        s = BURST_FAIL(err, BURST_ERR_FORMAT, "%s: header length %llu over the format's limit %llu",
                       path, (unsigned long long)n, ST_MAX_HEADER);
        goto fail;
    }
    if ((s = parse_header(f, n, &root, err))) goto fail;
    if ((s = parse_tensors(f, root, 8 + (size_t)n, err))) goto fail;
    cJSON_Delete(root);
    *out = f;
    return BURST_OK;
fail:
    cJSON_Delete(root);
    st_close(f);
    return s;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->map_bytes);
    for (int64_t i = 0; i < f->n_tensors; i++) free((void *)f->tensors[i].name);
    free(f->tensors);
    free(f->path);
    free(f);
}
