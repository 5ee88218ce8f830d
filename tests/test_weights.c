// weights/: the real stories260K checkpoint loads with the right config, shapes and values; a
// table of broken checkpoints (each written into a fresh temporary directory) fails with the
// right status and one line naming the file and the problem; random mutations of a small valid
// file never crash (every outcome is OK or an error line).
#define _DEFAULT_SOURCE // mincore
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/test_util.h"
#include "weights/config.h"
#include "weights/weights.h"

// ---- temporary checkpoint directories ----

static char *tmp_dir(void) {
    static char path[512];
    const char *base = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/burst_weights_XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(path)) {
        perror("mkdtemp");
        exit(1);
    }
    return path;
}

static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    char path[1024];
    for (struct dirent *e; (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static void write_bytes(const char *dir, const char *name, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

// One file of a test checkpoint: a safetensors file built from a header, or raw bytes.
typedef struct {
    const char *name;   // file name in the directory; NULL ends the list
    const char *header; // JSON header, padded with spaces so the data is 8-byte aligned
    int64_t data_bytes; // tensor bytes after the header (a byte pattern)
    uint64_t len_field; // header length written in the first 8 bytes; 0: the true length
    int misalign;       // pad so that the data starts at an odd offset instead
    const char *raw;    // the whole file as text instead of header + data
} case_file;

// Builds the bytes of a case_file; returns the size, *out owned by the caller.
static size_t build_file(const case_file *cf, uint8_t **out) {
    if (cf->raw) {
        size_t n = strlen(cf->raw);
        *out = memcpy(malloc(n + 1), cf->raw, n + 1);
        return n;
    }
    size_t n = strlen(cf->header);
    size_t pad = cf->misalign ? ((8 + n) % 2 ? 0 : 1) : (8 - (8 + n) % 8) % 8;
    size_t hlen = n + pad, total = 8 + hlen + (size_t)cf->data_bytes;
    uint8_t *b = malloc(total);
    uint64_t len = cf->len_field ? cf->len_field : hlen;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(len >> (8 * i));
    memcpy(b + 8, cf->header, n);
    memset(b + 8 + n, ' ', pad);
    for (int64_t i = 0; i < cf->data_bytes; i++) b[8 + hlen + i] = (uint8_t)(i * 7 + 1);
    *out = b;
    return total;
}

static void write_case_file(const char *dir, const case_file *cf) {
    uint8_t *b;
    size_t n = build_file(cf, &b);
    write_bytes(dir, cf->name, b, n);
    free(b);
}

// ---- the real checkpoint ----

static int check_real(void) {
    const char *dir = BURST_MODELS_DIR "/stories260K";
    weights *w;
    burst_error err;
    if (weights_open(dir, &w, &err)) {
        printf("FAIL stories260K: %s\n", err.msg);
        return 0;
    }
    const llama_config *c = weights_config(w);
    int ok = c->dim == 64 && c->hidden_dim == 172 && c->n_layers == 5 && c->n_heads == 8 &&
             c->n_kv_heads == 4 && c->head_dim == 8 && c->vocab_size == 512 &&
             c->max_seq_len == 512 && c->norm_eps == 1e-5f && c->rope_theta == 10000.0f &&
             c->tie_embeddings == 1 && c->bos_id == 1 && c->eos_id == 2;
    printf("%s stories260K config: dim %d hidden %d layers %d heads %d/%d vocab %d\n",
           ok ? "ok  " : "FAIL", c->dim, c->hidden_dim, c->n_layers, c->n_heads, c->n_kv_heads,
           c->vocab_size);

    // 5 layers x 9 tensors + embed_tokens + norm; lm_head is tied. 1040128 bytes of float32.
    int counts = weights_count(w) == 47 && weights_bytes(w) == 1040128;
    for (int64_t i = 1; i < weights_count(w); i++)
        counts &= strcmp(weights_at(w, i - 1)->name, weights_at(w, i)->name) < 0;
    printf("%s stories260K: %lld tensors, %zu bytes, sorted by name\n", counts ? "ok  " : "FAIL",
           (long long)weights_count(w), weights_bytes(w));
    ok &= counts;

    const char *tok = weights_tokenizer_path(w);
    int tok_ok = strcmp(tok, BURST_MODELS_DIR "/stories260K/tokenizer.model") == 0;
    printf("%s tokenizer path %s\n", tok_ok ? "ok  " : "FAIL", tok);
    ok &= tok_ok;

    // Values read with numpy from the same file (exact float32 values).
    const struct { const char *name; int ndim; int64_t shape[4]; int64_t at; float want; } t[] = {
        {"model.embed_tokens.weight", 2, {512, 64}, 1 * 64 + 0, -0.12708568572998047f},
        {"model.norm.weight", 1, {64}, 0, 2.4583089351654053f},
        {"model.layers.4.mlp.down_proj.weight", 2, {64, 172}, 63 * 172 + 171, -0.0035068716388195753f},
        {"model.layers.0.self_attn.k_proj.weight", 2, {32, 64}, -1, 0},
        {"model.layers.3.self_attn.q_proj.weight", 2, {-1, 64}, -1, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        const weights_tensor *wt;
        burst_status s = weights_get(w, t[i].name, t[i].ndim, t[i].shape, &wt, &err);
        int good = s == BURST_OK && wt->dtype == DTYPE_F32 &&
                   (uintptr_t)wt->data % 4 == 0 && wt->nbytes == (size_t)wt->numel * 4;
        float v = 0;
        if (good && t[i].at >= 0) {
            memcpy(&v, (const float *)wt->data + t[i].at, sizeof v);
            good = v == t[i].want;
        }
        printf("%s get %s%s%s\n", good ? "ok  " : "FAIL", t[i].name, s ? ": " : "", s ? err.msg : "");
        ok &= good;
    }
    const weights_tensor *wt;
    burst_status s = weights_get(w, "lm_head.weight", 2, (int64_t[]){512, 64}, &wt, &err);
    int tied = s == BURST_ERR_FORMAT && wt == NULL && strstr(err.msg, "tensor lm_head.weight missing");
    printf("%s tied lm_head absent: %s\n", tied ? "ok  " : "FAIL", err.msg);
    ok &= tied;
    weights_close(w);
    return ok;
}

static int check_format_shape(void) {
    char buf[64], tiny[6];
    int ok = strcmp(weights_format_shape(3, (int64_t[]){4, -1, 172}, buf, sizeof buf), "[4, *, 172]") == 0 &&
             strcmp(weights_format_shape(0, NULL, buf, sizeof buf), "[]") == 0 &&
             strcmp(weights_format_shape(2, (int64_t[]){12345, 6}, tiny, sizeof tiny), "[1234") == 0;
    printf("%s weights_format_shape\n", ok ? "ok  " : "FAIL");
    return ok;
}

// ---- broken checkpoints ----

#define CFG(...) "{\"intermediate_size\": 16, \"max_position_embeddings\": 64, " __VA_ARGS__ "}"
#define SIZES "\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 32"
#define VALID_CONFIG CFG(SIZES ", \"num_key_value_heads\": 1, \"rms_norm_eps\": 1e-5")
#define TA(dtype, shape, offs) "\"t.a\": {\"dtype\": \"" dtype "\", \"shape\": " shape ", \"data_offsets\": " offs "}"
#define TB(offs) "\"t.b\": {\"dtype\": \"F16\", \"shape\": [12], \"data_offsets\": " offs "}"
#define GOOD_A "{" TA("F32", "[2, 3]", "[0, 24]") "}"
#define ST "model.safetensors"
#define INDEX "model.safetensors.index.json"

typedef struct {
    const char *what;
    const char *config;   // config.json text; NULL: VALID_CONFIG; "-": no config.json
    const char *index;    // model.safetensors.index.json text, or NULL for none
    case_file files[3];   // ends at the first entry without a name
    const char *get;      // after a successful open, weights_get this tensor ...
    int get_ndim;         // ... with this shape
    int64_t get_shape[4];
    burst_status want;
    const char *frag[2];  // the error line must contain both (NULL: no check)
} bad_case;

static const bad_case cases[] = {
    {"valid file", .files = {{ST, GOOD_A, 24}}, .get = "t.a", 2, {2, 3}, BURST_OK},
    {"valid shards", .index = "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.b\": \"s2.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}, {"s2.safetensors", "{" TB("[0, 24]") "}", 24}},
     .get = "t.b", 1, {-1}, BURST_OK},
    {"file < 8 bytes", .files = {{ST, .raw = "abc"}}, .want = BURST_ERR_FORMAT,
     .frag = {ST ": file is 3 bytes", "too short"}},
    {"header length past end", .files = {{ST, GOOD_A, 24, .len_field = 10000}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": header length 10000 past end of file", NULL}},
    {"malformed JSON", .files = {{ST, "{\"t.a\": {\"dtype\": \"F32\",", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": malformed JSON header", NULL}},
    {"header not an object", .files = {{ST, "[1, 2]", 0}}, .want = BURST_ERR_FORMAT,
     .frag = {ST ": JSON header is not an object", NULL}},
    {"offsets out of range", .files = {{ST, "{" TA("F32", "[2, 3]", "[0, 48]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a data_offsets [0, 48] past end of data (24 bytes)", NULL}},
    {"overlapping offsets", .files = {{ST, "{" TA("F32", "[2, 3]", "[0, 24]") ", " TB("[16, 40]") "}", 40}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensors t.a [0, 24] and t.b [16, 40] overlap", NULL}},
    {"begin > end", .files = {{ST, "{" TA("F32", "[2, 3]", "[24, 0]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a data_offsets [24, 0] have begin > end", NULL}},
    {"size mismatch", .files = {{ST, "{" TA("F32", "[2, 3]", "[0, 20]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a is 20 bytes, want [2, 3] x F32 = 24", NULL}},
    {"shape larger than the data", .files = {{ST, "{" TA("BF16", "[100000, 100000]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {"tensor t.a shape [100000, 100000] x BF16 is larger than the data", NULL}},
    {"shape overflows", .files = {{ST, "{" TA("F32", "[4294967296, 4294967296, 4294967296]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {"tensor t.a shape [4294967296, 4294967296] overflows int64", NULL}},
    {"dtype F64", .files = {{ST, "{" TA("F64", "[3]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a dtype F64 unsupported (want F32/F16/BF16)", NULL}},
    {"dtype I32", .files = {{ST, "{" TA("I32", "[6]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a dtype I32 unsupported", NULL}},
    {"no dtype", .files = {{ST, "{\"t.a\": {\"shape\": [6], \"data_offsets\": [0, 24]}}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a has no dtype string", NULL}},
    {"5 dims", .files = {{ST, "{" TA("F32", "[1, 1, 2, 1, 3]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a has 5 dims (want at most 4)", NULL}},
    {"negative shape", .files = {{ST, "{" TA("F32", "[-2, -3]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a shape[0] is not a non-negative integer", NULL}},
    {"fractional shape", .files = {{ST, "{" TA("F32", "[2.5, 3]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a shape[0] is not a non-negative integer", NULL}},
    {"bad data_offsets", .files = {{ST, "{" TA("F32", "[6]", "[0]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a data_offsets is not [begin, end]", NULL}},
    {"misaligned data", .files = {{ST, GOOD_A, 24, .misalign = 1}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a data at file offset", "not aligned to 4 bytes"}},
    {"duplicate name", .files = {{ST, "{" TA("F32", "[6]", "[0, 24]") ", " TA("F32", "[6]", "[24, 48]") "}", 48}},
     .want = BURST_ERR_FORMAT, .frag = {"tensor t.a appears twice (in " ST " and " ST ")", NULL}},
    {"newline in a tensor name", .files = {{ST, "{\"t\\na\": {\"dtype\": \"F32\", \"shape\": [6], \"data_offsets\": [0, 24]}}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor #0 name has a control character", NULL}},
    {"newline in a dtype", .files = {{ST, "{" TA("F\\n64", "[3]", "[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {ST ": tensor t.a dtype (unprintable) unsupported", NULL}},
    {"missing tensor", .files = {{ST, GOOD_A, 24}}, .get = "t.zz", 2, {2, 3},
     .want = BURST_ERR_FORMAT, .frag = {": tensor t.zz missing", NULL}},
    {"wrong shape", .files = {{ST, GOOD_A, 24}}, .get = "t.a", 2, {3, 2},
     .want = BURST_ERR_FORMAT, .frag = {": tensor t.a has shape [2, 3], want [3, 2]", NULL}},
    {"wrong ndim", .files = {{ST, GOOD_A, 24}}, .get = "t.a", 1, {6},
     .want = BURST_ERR_FORMAT, .frag = {": tensor t.a has shape [2, 3], want [6]", NULL}},
    {"bad ndim argument", .files = {{ST, GOOD_A, 24}}, .get = "t.a", 5, {2, 3},
     .want = BURST_ERR_INVALID, .frag = {"tensor t.a: ndim 5", NULL}},
    {"no model files", .files = {{0}}, .want = BURST_ERR_IO,
     .frag = {": no model.safetensors or " INDEX, NULL}},
    {"missing config.json", .config = "-", .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_IO,
     .frag = {"config.json: No such file", NULL}},
    {"malformed config.json", .config = "{\"hidden_size\": 8,,}", .files = {{ST, GOOD_A, 24}},
     .want = BURST_ERR_FORMAT, .frag = {"config.json: malformed JSON (at byte", NULL}},
    {"config not an object", .config = "[8]", .files = {{ST, GOOD_A, 24}},
     .want = BURST_ERR_FORMAT, .frag = {"config.json: not a JSON object", NULL}},
    {"missing hidden_size", .config = CFG("\"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 32, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: field hidden_size missing", NULL}},
    {"missing rms_norm_eps", .config = CFG(SIZES), .files = {{ST, GOOD_A, 24}},
     .want = BURST_ERR_FORMAT, .frag = {"config.json: field rms_norm_eps missing", NULL}},
    {"heads do not divide dim", .config = CFG("\"hidden_size\": 8, \"num_attention_heads\": 3, \"num_hidden_layers\": 1, \"vocab_size\": 32, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: num_attention_heads = 3 does not divide hidden_size = 8", NULL}},
    {"kv heads do not divide heads", .config = CFG(SIZES ", \"num_key_value_heads\": 3, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: num_key_value_heads = 3 does not divide num_attention_heads = 2", NULL}},
    {"odd head dim", .config = CFG("\"hidden_size\": 6, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 32, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: head dim 3 is odd", NULL}},
    {"zero layers", .config = CFG("\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 0, \"vocab_size\": 32, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: num_hidden_layers = 0 (want > 0)", NULL}},
    {"fractional vocab", .config = CFG("\"hidden_size\": 8, \"num_attention_heads\": 2, \"num_hidden_layers\": 1, \"vocab_size\": 32.5, \"rms_norm_eps\": 1e-5"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: field vocab_size is not an integer", NULL}},
    {"negative eps", .config = CFG(SIZES ", \"rms_norm_eps\": -1e-5"), .files = {{ST, GOOD_A, 24}},
     .want = BURST_ERR_FORMAT, .frag = {"config.json: field rms_norm_eps is not a positive number", NULL}},
    {"eos outside vocab", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"eos_token_id\": 32"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: bos_token_id = 1 / eos_token_id = 32 outside vocab_size = 32", NULL}},
    {"rope_scaling dynamic", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling type dynamic unsupported (want linear or yarn)", NULL}},
    {"rope_scaling without type", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"factor\": 2}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling type (missing) unsupported", NULL}},
    {"rope_scaling without factor", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"rope_type\": \"linear\"}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling: field factor missing", NULL}},
    {"rope_scaling factor below 1", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 0.5}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling: factor 0.5 (want >= 1)", NULL}},
    {"rope_scaling yarn with DeepSeek's mscale", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"mscale\": 1}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling mscale unsupported", NULL}},
    {"rope_scaling yarn betas crossed", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": {\"type\": \"yarn\", \"factor\": 4, \"beta_fast\": 1, \"beta_slow\": 2}"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: rope_scaling: original_max_position_embeddings 64, beta_fast 1, beta_slow 2", NULL}},
    {"hidden_act gelu", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"hidden_act\": \"gelu\""),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: hidden_act gelu unsupported (want silu)", NULL}},
    {"head_dim field differs", .config = CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"head_dim\": 8"),
     .files = {{ST, GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {"config.json: head_dim = 8 unsupported (want hidden_size / num_attention_heads = 4)", NULL}},
    {"index names a missing shard", .index = "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.b\": \"s2.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}}, .want = BURST_ERR_IO,
     .frag = {"s2.safetensors: No such file", NULL}},
    {"index puts a tensor in the wrong shard", .index = "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.b\": \"s1.safetensors\", \"t.c\": \"s2.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}, {"s2.safetensors", "{" TB("[0, 24]") "}", 24}},
     .want = BURST_ERR_FORMAT, .frag = {INDEX ": tensor t.b is in s2.safetensors, not in s1.safetensors", NULL}},
    {"index names a tensor no shard has", .index = "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.c\": \"s1.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {INDEX ": tensor t.c missing from s1.safetensors", NULL}},
    {"index shard outside the directory", .index = "{\"weight_map\": {\"t.a\": \"../s1.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {INDEX ": weight_map[t.a] is not the name of a file in the directory", NULL}},
    {"newline in an index name", .index = "{\"weight_map\": {\"t\\na\": \"s1.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}}, .want = BURST_ERR_FORMAT,
     .frag = {INDEX ": weight_map[(unprintable)] is not the name of a file", NULL}},
    {"index without weight_map", .index = "{\"metadata\": {}}", .files = {{0}},
     .want = BURST_ERR_FORMAT, .frag = {INDEX ": weight_map missing or empty", NULL}},
    {"malformed index", .index = "{\"weight_map\": ", .files = {{0}},
     .want = BURST_ERR_FORMAT, .frag = {INDEX ": malformed JSON", NULL}},
    {"tensor in two shards", .index = "{\"weight_map\": {\"t.a\": \"s1.safetensors\", \"t.b\": \"s2.safetensors\"}}",
     .files = {{"s1.safetensors", GOOD_A, 24}, {"s2.safetensors", "{" TA("F16", "[12]", "[0, 24]") ", " TB("[24, 48]") "}", 48}},
     .want = BURST_ERR_FORMAT, .frag = {"tensor t.a appears twice (in s1.safetensors and s2.safetensors)", NULL}},
};

static int run_case(const bad_case *c) {
    char *dir = tmp_dir();
    const char *config = c->config ? c->config : VALID_CONFIG;
    if (strcmp(config, "-") != 0) write_bytes(dir, "config.json", config, strlen(config));
    if (c->index) write_bytes(dir, INDEX, c->index, strlen(c->index));
    for (int i = 0; i < 3 && c->files[i].name; i++) write_case_file(dir, &c->files[i]);

    burst_error err = {{0}};
    weights *w = NULL;
    burst_status s = weights_open(dir, &w, &err);
    int ok = (s == BURST_OK) == (w != NULL);
    if (!s && c->get) {
        const weights_tensor *t;
        s = weights_get(w, c->get, c->get_ndim, c->get_shape, &t, &err);
        ok &= s ? t == NULL : t != NULL && strcmp(t->name, c->get) == 0;
    }
    weights_close(w);
    ok &= s == c->want && !strchr(err.msg, '\n');
    for (int i = 0; i < 2; i++) ok &= !c->frag[i] || strstr(err.msg, c->frag[i]) != NULL;
    // Every error line names the checkpoint directory (or a file in it).
    ok &= s == BURST_OK || strstr(err.msg, dir) != NULL;
    printf("%s %-40s %s: %s\n", ok ? "ok  " : "FAIL", c->what, burst_status_str(s),
           s ? err.msg : "");
    if (!ok) printf("     want %s with \"%s\"\n", burst_status_str(c->want), c->frag[0] ? c->frag[0] : "");
    remove_dir(dir);
    return ok;
}

// ---- random mutations ----

// Opens a mutated copy of a valid file. Returns 0 when an error line is malformed; a successful
// open (counted in *opened) must leave every byte of every tensor readable.
static int open_mutant(const char *dir, const uint8_t *bytes, size_t n, int *opened) {
    write_bytes(dir, ST, bytes, n);
    weights *w;
    burst_error err = {{0}};
    burst_status s = weights_open(dir, &w, &err);
    if (s) return w == NULL && strstr(err.msg, dir) != NULL && !strchr(err.msg, '\n');
    volatile uint8_t sum = 0;
    for (int64_t i = 0; i < weights_count(w); i++) {
        const weights_tensor *t = weights_at(w, i);
        for (size_t b = 0; b < t->nbytes; b++) sum += ((const uint8_t *)t->data)[b];
    }
    (void)sum; // read for its loads alone: every byte must be mapped
    weights_close(w);
    (*opened)++;
    return 1;
}

static int check_mutations(int iters) {
    static const char interesting[] = "{}[]\",:-0123456789eE. \\";
    const case_file base = {.name = ST, .header = "{\"__metadata__\": {\"format\": \"pt\"}, "
                                TA("F32", "[2, 3]", "[0, 24]") ", " TB("[24, 48]") ", "
                                "\"t.c\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [48, 56]}}",
                            .data_bytes = 56};
    uint8_t *good;
    size_t n = build_file(&base, &good);
    size_t header_end = 8 + (size_t)(good[0] | good[1] << 8);
    char *dir = tmp_dir();
    write_bytes(dir, "config.json", VALID_CONFIG, strlen(VALID_CONFIG));
    uint8_t *m = malloc(n);
    int n_ok = 0, ok = open_mutant(dir, good, n, &n_ok);
    for (int it = 0; it < iters && ok; it++) {
        memcpy(m, good, n);
        size_t len = n;
        int kind = (int)(test_rand_u64() % 4), edits = 1 + (int)(test_rand_u64() % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(test_rand_u64() % header_end); // the header is where parsing can go wrong
            if (kind == 0) m[at] = (uint8_t)test_rand_u64();
            else if (kind == 1) m[at] = (uint8_t)interesting[test_rand_u64() % (sizeof interesting - 1)];
            else if (kind == 2) m[test_rand_u64() % 8] = (uint8_t)test_rand_u64(); // the length
        }
        if (kind == 3) len = (size_t)(test_rand_u64() % n);
        if (!open_mutant(dir, m, len, &n_ok)) {
            printf("FAIL mutation %d (kind %d): bad error line\n", it, kind);
            ok = 0;
        }
    }
    printf("%s %d random mutations: %d still opened, none crashed\n", ok ? "ok  " : "FAIL", iters,
           n_ok - 1);
    free(m);
    free(good);
    remove_dir(dir);
    return ok;
}

// weights_read_all brings every page of the files into memory: a 4 MB tensor evicted from the page
// cache (posix_fadvise) is resident afterwards (mincore). Where the eviction does not take (some
// filesystems keep the pages), the check says so and is not counted. The file's mapping asks for
// 2 MB pages, where the kernel has transparent huge pages.
static int check_read_all(void) {
    enum { MB4 = 4 << 20 };
    const case_file big = {.name = ST, .header = "{\"t\": {\"dtype\": \"F32\", \"shape\": [1048576], \"data_offsets\": [0, 4194304]}}",
                           .data_bytes = MB4};
    char *dir = tmp_dir(), path[600];
    write_bytes(dir, "config.json", VALID_CONFIG, strlen(VALID_CONFIG));
    write_case_file(dir, &big);
    snprintf(path, sizeof path, "%s/%s", dir, ST);
    weights *w = NULL;
    burst_error err = {{0}};
    if (weights_open(dir, &w, &err)) return printf("FAIL read_all: %s\n", err.msg), 0;
    const weights_tensor *t = weights_at(w, 0);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t start = (uintptr_t)t->data & ~(uintptr_t)(page - 1);
    const size_t len = (uintptr_t)t->data + t->nbytes - start, pages = (len + page - 1) / page;
    unsigned char *vec = malloc(pages);
    int fd = open(path, O_RDONLY), resident = 0;
    SYS_CHECK(fd);
    SYS_CHECK(fdatasync(fd));
    BURST_CHECK_GEN(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0, strerror);
    SYS_CHECK(close(fd));
    SYS_CHECK(mincore((void *)start, len, vec));
    for (size_t i = 0; i < pages; i++) resident += vec[i] & 1;
    int ok = 1;
    if (resident == (int)pages) {
        printf("ok   read_all: not checked, the page cache kept the file after POSIX_FADV_DONTNEED\n");
    } else {
        weights_read_all(w);
        SYS_CHECK(mincore((void *)start, len, vec));
        int after = 0;
        for (size_t i = 0; i < pages; i++) after += vec[i] & 1;
        ok = after == (int)pages;
        printf("%s read_all: %d of %zu pages of a 4 MB tensor resident before, %d after\n", ok ? "ok  " : "FAIL",
               resident, pages, after);
    }
    const int advised = test_huge_advice(t->data);
    printf("%s huge pages: the file's mapping %s\n", advised ? "ok  " : "FAIL",
           advised > 0 ? "asks for 2 MB pages" : advised ? "not checked (no THP or no smaps)" : "does not ask for 2 MB pages");
    ok &= advised != 0;
    free(vec);
    weights_close(w);
    remove_dir(dir);
    return ok;
}

// Whether the page at p is in this process's page tables (bit 63 of its /proc/self/pagemap entry);
// -1 where pagemap cannot be read.
static int page_present(int pagemap, const void *p) {
    uint64_t entry;
    const off_t at = (off_t)((uintptr_t)p / (uintptr_t)sysconf(_SC_PAGESIZE) * sizeof entry);
    return pread(pagemap, &entry, sizeof entry, at) == (ssize_t)sizeof entry ? (int)(entry >> 63) : -1;
}

// weights_release drops the pages wholly inside a tensor from the process (a 4 MB tensor between
// two small ones, starting and ending within pages), and every byte of the file, the tensor's and
// its neighbours', reads back as written afterwards (from the page cache). Where the pages it
// shares with its neighbours lie in a larger mapping (a file huge page), the kernel may drop them
// too: not checked.
static int check_release(void) {
    const case_file three = {.name = ST, .header = "{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 12]}, "
                                                  "\"t\": {\"dtype\": \"F32\", \"shape\": [1048576], \"data_offsets\": [12, 4194316]}, "
                                                  "\"z\": {\"dtype\": \"F32\", \"shape\": [5], \"data_offsets\": [4194316, 4194336]}}",
                             .data_bytes = 4194336};
    char *dir = tmp_dir();
    write_bytes(dir, "config.json", VALID_CONFIG, strlen(VALID_CONFIG));
    write_case_file(dir, &three);
    weights *w = NULL;
    burst_error err = {{0}};
    if (weights_open(dir, &w, &err)) return printf("FAIL release: %s\n", err.msg), 0;
    const weights_tensor *t = weights_at(w, 1);
    const unsigned char *data = (const unsigned char *)weights_at(w, 0)->data; // the file's tensor bytes
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const unsigned char *end = (const unsigned char *)t->data + t->nbytes;
    unsigned char sink = 0;
    for (int64_t i = 0; i < three.data_bytes; i += (int64_t)page) sink ^= ((const volatile unsigned char *)data)[i];
    (void)sink;
    const int pagemap = open("/proc/self/pagemap", O_RDONLY);
    int ok = 1, dropped = 0, whole = 0;
    if (pagemap < 0 || page_present(pagemap, end - page) != 1) {
        printf("ok   release: not checked, /proc/self/pagemap is not readable here\n");
    } else {
        weights_release(t);
        for (uintptr_t p = ((uintptr_t)t->data + page - 1) / page * page; p + page <= (uintptr_t)end; p += page, whole++)
            dropped += page_present(pagemap, (const void *)p) == 0;
        int64_t wrong = 0;
        for (int64_t i = 0; i < three.data_bytes; i++) wrong += data[i] != (unsigned char)(i * 7 + 1);
        ok = whole == 1023 && dropped == whole && wrong == 0 && (uintptr_t)t->data % page && (uintptr_t)end % page;
        printf("%s release: %d of %d pages wholly inside the tensor dropped; %lld of %lld bytes of the file read back "
               "wrong\n", ok ? "ok  " : "FAIL", dropped, whole, (long long)wrong, (long long)three.data_bytes);
    }
    if (pagemap >= 0) SYS_CHECK(close(pagemap));
    weights_close(w);
    remove_dir(dir);
    return ok;
}

// rope_scaling as config.json says it: linear (legacy "type" key), yarn with its defaults (HF's
// "rope_type" key) and with every field given, "default" (none), and null.
static int check_rope_scaling(void) {
    static const struct {
        const char *json;
        int kind, orig;
        float factor, beta_fast, beta_slow, attn;
    } t[] = {
        {"{\"type\": \"linear\", \"factor\": 8}", ROPE_SCALING_LINEAR, 0, 8, 0, 0, 0},
        {"{\"rope_type\": \"yarn\", \"factor\": 16}", ROPE_SCALING_YARN, 64, 16, 32, 1, 1.2772588722f},
        {"{\"type\": \"yarn\", \"factor\": 4, \"original_max_position_embeddings\": 16, \"beta_fast\": 16, "
         "\"beta_slow\": 2, \"attention_factor\": 1.5, \"finetuned\": true}", ROPE_SCALING_YARN, 16, 4, 16, 2, 1.5f},
        {"{\"rope_type\": \"default\"}", ROPE_SCALING_NONE, 0, 1, 0, 0, 0},
        {"null", ROPE_SCALING_NONE, 0, 1, 0, 0, 0},
    };
    int ok = 1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char *dir = tmp_dir(), json[1024], path[600];
        snprintf(json, sizeof json, CFG(SIZES ", \"rms_norm_eps\": 1e-5, \"rope_scaling\": %s"), t[i].json);
        write_bytes(dir, "config.json", json, strlen(json));
        snprintf(path, sizeof path, "%s/config.json", dir);
        llama_config c;
        burst_error err = {{0}};
        int good = !weights_config_load(path, &c, &err) && (int)c.rope_scaling == t[i].kind && c.rope_factor == t[i].factor;
        if (good && t[i].kind == ROPE_SCALING_YARN)
            good = c.rope_original_ctx == t[i].orig && c.rope_beta_fast == t[i].beta_fast &&
                   c.rope_beta_slow == t[i].beta_slow && fabsf(c.rope_attention_factor - t[i].attn) < 1e-6f;
        printf("%s rope_scaling %s%s%s\n", good ? "ok  " : "FAIL", t[i].json, err.msg[0] ? ": " : "", err.msg);
        ok &= good;
        remove_dir(dir);
    }
    return ok;
}

int main(void) {
    test_seed("test_weights");
    int ok = check_format_shape();
    ok &= check_real();
    ok &= check_rope_scaling();
    ok &= check_read_all();
    ok &= check_release();
    int failed = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) failed += !run_case(&cases[i]);
    printf("%s %zu broken checkpoints, %d failed\n", failed ? "FAIL" : "ok  ",
           sizeof cases / sizeof cases[0], failed);
    ok &= failed == 0;
    ok &= check_mutations(2000);
    return ok ? 0 : 1;
}
