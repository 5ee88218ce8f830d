// Test tool for test_json_mode.py and test_json_schema.py (model/json_grammar.h, json_schema.h,
// json_pattern.h).
// Strings are read NUL-separated from a file; schema.json (optional: else JSON mode's any object)
// is a JSON Schema.
//   json_tool feed [schema.json] strings.bin: a line a string, "N C B": the bytes json_feed took
//     before one it refused (all of them: the string's length), whether they are a whole
//     instance (1 or 0), and the branches alive after them (json_grammar.h).
//   json_tool mask tokenizer.model [schema.json] strings.bin: a line a string, each a prefix the
//     grammar takes: the ids json_mask leaves (finite logits) after it.
//   json_tool schema schema.json: "ok", or the reason json_schema_compile refuses it.
//   json_tool walk schema.json seed n: n texts (NUL-separated) the grammar takes, each byte drawn
//     from those it allows next (from tab up; ASCII only in 7 draws of 8 where it allows some),
//     past 200 bytes in one draw of 2 the first allowed of "}]n0tf, (towards an end); a walk that
//     has not ended in 20000 bytes is left out (after 4n walks, fewer than n texts); one where no
//     byte may come next is an error (exit 3).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "model/json_grammar.h"

static char *read_or_die(const char *path, size_t *len) {
    char *buf;
    burst_error err;
    if (burst_read_file(path, 64 << 20, &buf, len, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    return buf;
}

// path's schema, compiled; NULL: JSON mode's. Where it is refused: *reason (static) says why.
static json_schema *load_schema(const char *path, const char **reason) {
    static char err[512];
    size_t len;
    char *text = read_or_die(path, &len);
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) {
        *reason = "not JSON";
        return NULL;
    }
    json_schema *s = json_schema_compile(j, "schema", err, sizeof err);
    cJSON_Delete(j);
    *reason = err;
    return s;
}

static void walk(const json_schema *schema, unsigned seed, int n) {
    srand(seed);
    char *text = burst_malloc(20001);
    for (int done = 0, tries = 0; done < n && tries < 4 * n; tries++) {
        json_state s, next;
        json_start(&s, schema);
        int len = 0;
        while (!json_complete(&s) && len < 20000) {
            unsigned char allowed[256];
            int n_allowed = 0, n_ascii = 0, pick = -1;
            for (int c = 9; c < 256; c++) {
                json_copy(&next, &s);
                if (json_feed(&next, &(char){(char)c}, 1)) allowed[n_allowed++] = (unsigned char)c, n_ascii += c < 128;
            }
            if (n_ascii && rand() % 8) n_allowed = n_ascii;
            if (!n_allowed) { // a text taken that no byte continues: the mask would leave only EOS
                fprintf(stderr, "json_tool: a dead end after %.*s\n", len, text);
                exit(3);
            }
            const int steer = len > 200 && rand() % 2; // (not always: a multipleOf's digits need drawing)
            for (const char *p = "\"}]n0tf,"; steer && *p && pick < 0; p++)
                if (memchr(allowed, *p, (size_t)n_allowed)) pick = *p;
            text[len++] = (char)(pick >= 0 ? pick : allowed[rand() % n_allowed]);
            json_feed(&s, &text[len - 1], 1);
        }
        if (!json_complete(&s)) continue;
        fwrite(text, 1, (size_t)len, stdout);
        fputc(0, stdout);
        done++;
    }
    free(text);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    const int feed = !strcmp(mode, "feed") && (argc == 3 || argc == 4);
    const int mask = !strcmp(mode, "mask") && (argc == 4 || argc == 5);
    if (!feed && !mask && !(!strcmp(mode, "schema") && argc == 3) && !(!strcmp(mode, "walk") && argc == 5)) {
        fprintf(stderr, "usage: json_tool feed [schema.json] strings.bin | json_tool mask tokenizer.model [schema.json] "
                        "strings.bin | json_tool schema schema.json | json_tool walk schema.json seed n\n");
        return 2;
    }
    const char *schema_path = feed && argc == 4 ? argv[2] : mask && argc == 5 ? argv[3] : !feed && !mask ? argv[2] : NULL;
    const char *reason = NULL;
    json_schema *schema = schema_path ? load_schema(schema_path, &reason) : NULL;
    if (!strcmp(mode, "schema")) {
        printf("%s\n", schema ? "ok" : reason);
        json_schema_free(schema);
        return 0;
    }
    if (schema_path && !schema) {
        fprintf(stderr, "%s: %s\n", schema_path, reason);
        return 1;
    }
    if (!feed && !mask) {
        walk(schema, (unsigned)atoi(argv[3]), atoi(argv[4]));
        json_schema_free(schema);
        return 0;
    }
    tokenizer *t = NULL;
    burst_error err;
    if (mask && tokenizer_load(argv[2], &t, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    json_vocab *v = mask ? json_vocab_new(t) : NULL;
    const int vocab = mask ? tokenizer_vocab_size(t) : 0;
    float *logits = mask ? calloc((size_t)vocab, sizeof *logits) : NULL;
    size_t len;
    char *buf = read_or_die(argv[argc - 1], &len);
    for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
        json_state s;
        json_start(&s, schema);
        int n = 0, alive = s.n;
        while (buf[off + n] && json_feed(&s, buf + off + n, 1)) n++, alive = s.n;
        if (!mask) {
            printf("%d %d %d\n", n, !buf[off + n] && json_complete(&s), alive);
            continue;
        }
        memset(logits, 0, sizeof *logits * (size_t)vocab);
        json_mask(v, &s, logits);
        for (int id = 0; id < vocab; id++)
            if (isfinite(logits[id])) printf("%d ", id);
        printf("\n");
    }
    json_vocab_free(v);
    tokenizer_free(t);
    json_schema_free(schema);
    free(logits);
    free(buf);
    return 0;
}
