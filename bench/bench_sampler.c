// The sampler's time per token on a LLaMA vocabulary (32000 logits, bell-shaped, spread like a
// model's), greedy and with temperature and each filter; mean of 200 draws, one thread. The
// engine samples every running sequence on its own thread between GPU steps. Given a tokenizer,
// also the mask of its vocabulary (json_mask) of JSON mode and of a schema after a few prefixes.
//   bench_sampler [tokenizer.model]
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "model/sampler.h"

// json_mask's time on t's vocabulary after each of a few prefixes of an object (mean of 200): JSON
// mode's (any object), then a schema's (a string of at most 12 characters, an enum, an integer, two
// objects that begin alike: two branches of the grammar).
static void json_rows(const tokenizer *t) {
    static const struct {
        int schema;
        const char *prefix;
    } rows[] = {{0, "{\"name\": \"Lil"}, {0, " {"}, {0, "{\"a\": "}, {0, "{\"a\": 12"}, {0, "{\"a\": [tr"},
                {0, "{\"a\": {\"b\": [1, 2]}"}, {1, "{\"na"}, {1, "{\"name\": \"Lil"}, {1, "{\"name\": \"Lily\", \"mood\": "},
                {1, "{\"name\": \"Lily\", \"mood\": \"ha"}, {1, "{\"name\": \"Lily\", \"mood\": \"sad\", \"age\": 1"},
                {1, "{\"name\": \"Lily\", \"mood\": \"sad\", \"pet\": {"},
                {1, "{\"name\": \"Lily\", \"mood\": \"sad\", \"pet\": {\"kind\": \""}};
    static const char *const schema_text =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12}, \"mood\": "
        "{\"enum\": [\"happy\", \"sad\", \"hungry\"]}, \"age\": {\"type\": \"integer\"}, \"pet\": {\"anyOf\": [{\"type\": "
        "\"object\", \"properties\": {\"kind\": {\"const\": \"dog\"}, \"name\": {\"type\": \"string\"}}}, {\"type\": "
        "\"object\", \"properties\": {\"kind\": {\"const\": \"cat\"}, \"lives\": {\"type\": \"integer\"}}}]}}, "
        "\"required\": [\"name\", \"mood\"]}";
    char err[256];
    cJSON *j = cJSON_Parse(schema_text);
    json_schema *schema = json_schema_compile(j, "schema", err, sizeof err);
    cJSON_Delete(j);
    if (!schema) {
        fprintf(stderr, "bench_sampler: %s\n", err);
        exit(1);
    }
    json_vocab *v = json_vocab_new(t);
    float *logits = burst_calloc((size_t)tokenizer_vocab_size(t), sizeof *logits);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        json_state s;
        json_start(&s, rows[i].schema ? schema : NULL);
        json_feed(&s, rows[i].prefix, (int)strlen(rows[i].prefix));
        double t0 = burst_now();
        for (int r = 0; r < 200; r++) json_mask(v, &s, logits);
        printf("| %s's mask after `%s` | %.3f | |\n", rows[i].schema ? "The schema" : "JSON mode", rows[i].prefix,
               (burst_now() - t0) / 200 * 1e3);
    }
    free(logits);
    json_vocab_free(v);
    json_schema_free(schema);
}

int main(int argc, char **argv) {
    enum { VOCAB = 32000, DRAWS = 200 };
    float *logits = burst_malloc(sizeof(float) * VOCAB);
    srand(1);
    for (int i = 0; i < VOCAB; i++) { // Box-Muller, standard deviation 3
        float u1 = (rand() + 1.0f) / ((float)RAND_MAX + 1), u2 = (float)rand() / (float)RAND_MAX;
        logits[i] = 3.0f * sqrtf(-2 * logf(u1)) * cosf(6.2831853f * u2);
    }
    static const struct {
        const char *name;
        sampler_params p;
    } cases[] = {
        {"greedy", {.temperature = 0, .top_p = 1}},
        {"temperature 0.8", {.temperature = 0.8f, .top_p = 1, .seed = 1}},
        {"temperature 0.8, top_p 0.9", {.temperature = 0.8f, .top_p = 0.9f, .seed = 1}},
        {"temperature 0.8, top_k 40", {.temperature = 0.8f, .top_p = 1, .top_k = 40, .seed = 1}},
        {"temperature 1, min_p 0.05", {.temperature = 1, .top_p = 1, .min_p = 0.05f, .seed = 1}},
    };
    printf("| sampling, vocab %d | ms per token | sum of ids |\n|---|---|---|\n", VOCAB);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampler s;
        sampler_init(&s, &cases[c].p, VOCAB);
        long ids = 0;
        double t = burst_now();
        for (int r = 0; r < DRAWS; r++) ids += sampler_sample(&s, logits);
        printf("| %s | %.3f | %ld |\n", cases[c].name, (burst_now() - t) / DRAWS * 1e3, ids);
        sampler_free(&s);
    }
    free(logits);
    tokenizer *t = NULL;
    burst_error err;
    if (argc > 1 && tokenizer_load(argv[1], &t, &err)) {
        fprintf(stderr, "bench_sampler: %s\n", err.msg);
        return 1;
    }
    if (t) json_rows(t);
    tokenizer_free(t);
    return 0;
}
