// Opens a checkpoint directory: config.json, then model.safetensors or the shards listed in
// model.safetensors.index.json, then one name-sorted table of every tensor for weights_get.
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE // madvise
#include "weights.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/host_memory.h"
#include "config.h"
#include "json_file.h"
#include "safetensors.h"

#define WEIGHTS_LOG_BYTES (256ull << 20) // above this total size: a line per mapped file, and read progress
#define INDEX_NAME "model.safetensors.index.json"

struct weights {
    llama_config config;
    char *dir;
    char *tokenizer_path;
    st_file **files;               // (n_files) in the order they were mapped
    int n_files;
    const weights_tensor **sorted; // (n_tensors) every file's tensors, by name
    int64_t n_tensors;
    size_t bytes;                  // sum of tensor bytes over all files
};

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = burst_malloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int64_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (int64_t)sb.st_size : -1;
}

static int tensor_cmp(const void *a, const void *b) {
    return strcmp((*(const weights_tensor *const *)a)->name,
                  (*(const weights_tensor *const *)b)->name);
}

static int key_cmp(const void *key, const void *elem) {
    return strcmp(key, (*(const weights_tensor *const *)elem)->name);
}

static int str_cmp(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const weights_tensor *find(const weights *w, const char *name) {
    const weights_tensor **t =
        bsearch(name, w->sorted, (size_t)w->n_tensors, sizeof *w->sorted, key_cmp);
    return t ? *t : NULL;
}

// The index in w->files of the file whose tensor array holds t.
static int file_index(const weights *w, const weights_tensor *t) {
    for (int i = 0; i < w->n_files; i++)
        if (t >= w->files[i]->tensors && t < w->files[i]->tensors + w->files[i]->n_tensors) return i;
    BURST_ASSERT(0 && "tensor belongs to no mapped file");
}

// That file's name inside the directory.
static const char *file_name(const weights *w, int i) {
    return w->files[i]->path + strlen(w->dir) + 1;
}

// The index's weight_map (tensor name -> shard file name) and its shards, each once, sorted.
static burst_status read_index(const char *path, cJSON **index, const cJSON **map,
                               const char ***shards, int *n_shards, burst_error *err) {
    burst_status s = json_file_load(path, index, err);
    if (s) return s;
    *map = cJSON_GetObjectItemCaseSensitive(*index, "weight_map");
    if (!cJSON_IsObject(*map) || !(*map)->child)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: weight_map missing or empty", path);
    int n = cJSON_GetArraySize(*map), k = 0;
    const char **names = burst_calloc((size_t)n, sizeof *names);
    for (const cJSON *e = (*map)->child; e; e = e->next) {
        const char *shard = cJSON_GetStringValue(e);
        if (!json_printable(e->string) || !shard || !json_printable(shard) || !*shard ||
            strchr(shard, '/') || strcmp(shard, "..") == 0) {
            free(names);
            return BURST_FAIL(err, BURST_ERR_FORMAT,
                              "%s: weight_map[%s] is not the name of a file in the directory",
                              path, json_show(e->string));
        }
        names[k++] = shard;
    }
    qsort(names, (size_t)k, sizeof *names, str_cmp);
    *n_shards = 0;
    for (int i = 0; i < k; i++)
        if (i == 0 || strcmp(names[i], names[i - 1]) != 0) names[(*n_shards)++] = names[i];
    *shards = names;
    return BURST_OK;
}

// Maps each named file; logs a line per file when the whole checkpoint is large.
static burst_status map_files(weights *w, const char **names, int n, burst_error *err) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        char *path = path_join(w->dir, names[i]);
        int64_t size = file_size(path);
        total += size > 0 ? size : 0;
        free(path);
    }
    w->files = burst_calloc((size_t)n, sizeof *w->files);
    for (int i = 0; i < n; i++) {
        char *path = path_join(w->dir, names[i]);
        burst_status s = st_open(path, &w->files[i], err);
        free(path);
        if (s) return s;
        w->n_files++;
        w->n_tensors += w->files[i]->n_tensors;
        w->bytes += w->files[i]->data_bytes;
        if ((uint64_t)total > WEIGHTS_LOG_BYTES)
            LOG_I("mapped %s (%.2f GB) %d/%d", names[i], (double)w->files[i]->map_bytes / 1e9,
                  i + 1, n);
    }
    return BURST_OK;
}

void weights_read_all(const weights *w) {
    size_t total = 0, done = 0;
    for (int i = 0; i < w->n_files; i++) total += w->files[i]->map_bytes;
    const size_t free_bytes = host_memory_free("");
    if (free_bytes && total > free_bytes) {
        LOG_W("%s: the weights (%.1f GB) exceed the free memory (%.1f GB): they are read from disk as used", w->dir,
              total / 1e9, free_bytes / 1e9);
        return;
    }
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), block = (size_t)64 << 20;
    const double t0 = burst_now();
    double last = t0;
    unsigned char sink = 0;
    for (int i = 0; i < w->n_files; i++) {
        const st_file *f = w->files[i];
        // Advice only (the kernel reads ahead in the background); the reads below work without it.
        const int rc = posix_madvise((void *)f->map, f->map_bytes, POSIX_MADV_WILLNEED);
        if (rc) LOG_W("%s: posix_madvise: %s", f->path, strerror(rc));
        for (size_t off = 0; off < f->map_bytes; off += page) {
            sink ^= ((const volatile unsigned char *)f->map)[off];
            if ((off + page) % block || total <= WEIGHTS_LOG_BYTES) continue;
            const double now = burst_now();
            if (now - last < 3) continue;
            last = now;
            LOG_I("read %.1f of %.1f GB of weights (%.1f GB/s)", (done + off) / 1e9, total / 1e9,
                  (done + off) / 1e9 / (now - t0));
        }
        done += f->map_bytes;
    }
    (void)sink;
    if (total <= WEIGHTS_LOG_BYTES) return;
    const double secs = burst_now() - t0;
    size_t huge = 0;
    for (int i = 0; i < w->n_files; i++) huge += host_huge_page_bytes("", w->files[i]->map, w->files[i]->map_bytes);
    LOG_I("read %.1f GB of weights in %.1f s, %.1f GB of them in 2 MB pages%s", total / 1e9, secs, huge / 1e9,
          2 * huge < total ? " (README: \"Supported checkpoints\")" : "");
}

void weights_release(const weights_tensor *t) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), start = ((uintptr_t)t->data + page - 1) / page * page,
                    end = ((uintptr_t)t->data + t->nbytes) / page * page;
    if (end > start && madvise((void *)start, end - start, MADV_DONTNEED)) LOG_W("%s: madvise: %s", t->name, strerror(errno));
}

static burst_status sort_tensors(weights *w, burst_error *err) {
    w->sorted = burst_calloc((size_t)w->n_tensors, sizeof *w->sorted);
    int64_t k = 0;
    for (int i = 0; i < w->n_files; i++)
        for (int64_t j = 0; j < w->files[i]->n_tensors; j++) w->sorted[k++] = &w->files[i]->tensors[j];
    qsort(w->sorted, (size_t)k, sizeof *w->sorted, tensor_cmp);
    for (int64_t i = 1; i < k; i++) {
        if (strcmp(w->sorted[i]->name, w->sorted[i - 1]->name) != 0) continue;
        int a = file_index(w, w->sorted[i - 1]), b = file_index(w, w->sorted[i]);
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s appears twice (in %s and %s)",
                          w->dir, w->sorted[i]->name, file_name(w, a < b ? a : b),
                          file_name(w, a < b ? b : a));
    }
    return BURST_OK;
}

// Every tensor the index names must be in the shard it names.
static burst_status check_index(const weights *w, const cJSON *map, burst_error *err) {
    for (const cJSON *e = map->child; e; e = e->next) {
        const weights_tensor *t = find(w, e->string);
        if (!t)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "%s/%s: tensor %s missing from %s", w->dir,
                              INDEX_NAME, e->string, e->valuestring);
        const char *holder = file_name(w, file_index(w, t));
        if (strcmp(holder, e->valuestring) != 0)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "%s/%s: tensor %s is in %s, not in %s",
                              w->dir, INDEX_NAME, e->string, holder, e->valuestring);
    }
    return BURST_OK;
}

static burst_status open_tensors(weights *w, burst_error *err) {
    static const char *single[] = {"model.safetensors"};
    char *single_path = path_join(w->dir, single[0]);
    char *index_path = path_join(w->dir, INDEX_NAME);
    cJSON *index = NULL;
    const cJSON *map = NULL;
    const char **shards = NULL;
    int n_shards = 0;
    burst_status s;
    if (file_size(single_path) >= 0) s = map_files(w, single, 1, err);
    else if (file_size(index_path) >= 0) {
        s = read_index(index_path, &index, &map, &shards, &n_shards, err);
        if (!s) s = map_files(w, shards, n_shards, err);
    } else
        s = BURST_FAIL(err, BURST_ERR_IO, "%s: no model.safetensors or %s", w->dir, INDEX_NAME);
    if (!s) s = sort_tensors(w, err);
    if (!s && map) s = check_index(w, map, err);
    free(shards);
    cJSON_Delete(index);
    free(index_path);
    free(single_path);
    return s;
}

burst_status weights_open(const char *dir, weights **out, burst_error *err) {
    *out = NULL;
    weights *w = burst_calloc(1, sizeof *w);
    w->dir = memcpy(burst_malloc(strlen(dir) + 1), dir, strlen(dir) + 1);
    w->tokenizer_path = path_join(dir, "tokenizer.model");
    char *config_path = path_join(dir, "config.json");
    burst_status s = weights_config_load(config_path, &w->config, err);
    free(config_path);
    if (!s) s = open_tensors(w, err);
    if (s) {
        weights_close(w);
        return s;
    }
    *out = w;
    return BURST_OK;
}

void weights_close(weights *w) {
    if (!w) return;
    for (int i = 0; i < w->n_files; i++) st_close(w->files[i]);
    free(w->files);
    free(w->sorted);
    free(w->tokenizer_path);
    free(w->dir);
    free(w);
}

const llama_config *weights_config(const weights *w) { return &w->config; }
const char *weights_tokenizer_path(const weights *w) { return w->tokenizer_path; }
size_t weights_bytes(const weights *w) { return w->bytes; }
int64_t weights_count(const weights *w) { return w->n_tensors; }

const weights_tensor *weights_at(const weights *w, int64_t i) {
    BURST_ASSERT(i >= 0 && i < w->n_tensors && "weights_at index out of range");
    return w->sorted[i];
}

const char *weights_format_shape(int ndim, const int64_t *shape, char *buf, size_t size) {
    size_t n = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && n < size; d++)
        n += (size_t)(shape[d] < 0 ? snprintf(buf + n, size - n, "%s*", d ? ", " : "")
                                   : snprintf(buf + n, size - n, "%s%lld", d ? ", " : "",
                                              (long long)shape[d]));
    if (n < size) snprintf(buf + n, size - n, "]");
    return buf;
}

burst_status weights_get(const weights *w, const char *name, int ndim, const int64_t *shape,
                         const weights_tensor **out, burst_error *err) {
    *out = NULL;
    if (ndim < 0 || ndim > 4 || (ndim > 0 && !shape))
        return BURST_FAIL(err, BURST_ERR_INVALID, "%s: tensor %s: ndim %d (want 0..4 with a shape)",
                          w->dir, name, ndim);
    const weights_tensor *t = find(w, name);
    if (!t) return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s missing", w->dir, name);
    int ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = shape[d] < 0 || shape[d] == t->shape[d];
    if (!ok) {
        char have[128], want[128];
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tensor %s has shape %s, want %s", w->dir,
                          name, weights_format_shape(t->ndim, t->shape, have, sizeof have),
                          weights_format_shape(ndim, shape, want, sizeof want));
    }
    *out = t;
    return BURST_OK;
}
