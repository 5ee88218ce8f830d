// llama_segment.sampled on the real stories260K model, on 1 and 3 ranks: a decode step of three
// sequences (one with two rows, as a draft makes) gives, when every segment asks for ids, the
// first largest logit of each row the same step gave with its logits; at temperatures (one
// segment greedy, the others drawn with given units), model/sampler.h's draw from those logits;
// a step where some segments ask and others do not gives both: the others' logits unchanged, and
// the rows of those that take ids left as they were in the caller's buffer. A call with
// no logits buffer for a segment that wants its logits, or with temperatures for one that takes no
// ids, fails with BURST_ERR_INVALID and changes nothing: the next step gives what it would have.
#include <math.h>
#include <string.h>

#include "model/llama.h"
#include "model/sampler.h"
#include "test_util.h"

enum { SEGS = 3, ROWS = 4, CTX = 128 };

static int failures;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failures += !ok;
}

static int first_largest(const float *row, int n) {
    int best = 0;
    for (int j = 1; j < n; j++)
        if (row[j] > row[best]) best = j;
    return best;
}

// The rows' temperatures and units where segments 1 and 2 draw (segment 0 greedy), and the first
// row of each segment.
static const float TEMPERATURE[ROWS] = {0, 0.8f, 0.8f, 1.3f}, UNIT[ROWS] = {0, 0.3f, 0.9f, 0.55f};
static const int ROW_OF[SEGS] = {0, 1, 3};

// One step after the prompts: slots 0 and 2 decode one token, slot 1 two; ids_of says which
// segments take ids (into ids, at their rows), drawn that segments 1 and 2 draw theirs at
// TEMPERATURE with UNIT where they take ids. Then every slot is cut back to `len`.
static burst_status step(llama_model *m, const int64_t *len, int ids_of, int drawn, float *logits, int *ids,
                         burst_error *err) {
    static const int tokens[ROWS] = {5, 9, 11, 17};
    llama_segment segs[SEGS];
    for (int i = 0; i < SEGS; i++) {
        const int row = ROW_OF[i];
        segs[i] = (llama_segment){.slot = i, .n = i == 1 ? 2 : 1, .n_logits = i == 1 ? 2 : 1,
                                  .sampled = ids_of >> i & 1 ? ids + row : NULL};
        if (drawn && i > 0 && segs[i].sampled) segs[i].temperature = TEMPERATURE + row, segs[i].unit = UNIT + row;
    }
    burst_status st = llama_forward(m, segs, SEGS, tokens, logits, NULL, NULL, err);
    for (int i = 0; i < SEGS; i++) llama_slot_truncate(m, i, len[i]);
    return st;
}

static void run(int ranks) {
    llama_options o = {.ctx = CTX, .n_slots = SEGS, .max_batch = 64, .n_ranks = ranks};
    llama_model *m;
    burst_error err;
    if (llama_load(BURST_MODELS_DIR "/stories260K", &o, &m, &err)) {
        printf("FAIL load: %s\n", err.msg);
        failures++;
        return;
    }
    const int vocab = llama_config_of(m)->vocab_size;
    float *want = burst_malloc(sizeof(float) * ROWS * (size_t)vocab), *got = burst_malloc(sizeof(float) * ROWS * (size_t)vocab);
    int64_t len[SEGS];
    for (int i = 0; i < SEGS; i++) { // prompts of 7, 8 and 9 tokens
        int prompt[16];
        for (int j = 0; j < 7 + i; j++) prompt[j] = 1 + (31 * j + 7 * i) % (vocab - 1);
        if (llama_prefill(m, i, prompt, 7 + i, 0, want, &err)) printf("FAIL prefill: %s\n", err.msg), failures++;
        len[i] = llama_slot_len(m, i);
    }
    int ids[ROWS], mixed[ROWS], want_ids[ROWS], want_drawn[ROWS];
    char what[768];
    step(m, len, 0, 0, want, NULL, &err);
    struct sampler_cand *scratch = burst_malloc(sizeof *scratch * (size_t)vocab);
    for (int r = 0; r < ROWS; r++) {
        want_ids[r] = first_largest(want + (int64_t)r * vocab, vocab);
        want_drawn[r] = sampler_pick_unfiltered(want + (int64_t)r * vocab, vocab, TEMPERATURE[r], UNIT[r], scratch);
    }
    free(scratch);

    burst_status st = step(m, len, 7, 0, NULL, ids, &err); // every segment: no logits buffer at all
    snprintf(what, sizeof what, "G=%d every segment's argmax, no logits buffer: the first largest logit of each row", ranks);
    check(st == BURST_OK && !memcmp(ids, want_ids, sizeof ids), what);

    st = step(m, len, 7, 1, NULL, ids, &err);
    snprintf(what, sizeof what, "G=%d segments 1 and 2 drawn at temperatures 0.8 and 1.3, 0 greedy: the sampler's ids "
             "%d %d %d %d (greedy %d %d %d %d)", ranks, want_drawn[0], want_drawn[1], want_drawn[2], want_drawn[3],
             want_ids[0], want_ids[1], want_ids[2], want_ids[3]);
    check(st == BURST_OK && !memcmp(ids, want_drawn, sizeof ids), what);

    // Segments 0 (greedy) and 2 (drawn) take ids, 1 its logits; then 1 draws, 0 and 2 take logits.
    for (int ids_of = 5; ids_of >= 2; ids_of -= 3) {
        for (int r = 0; r < ROWS; r++) mixed[r] = -1;
        for (int64_t i = 0; i < ROWS * (int64_t)vocab; i++) got[i] = NAN;
        st = step(m, len, ids_of, 1, got, mixed, &err);
        int ok = st == BURST_OK;
        for (int i = 0; i < SEGS; i++)
            for (int r = ROW_OF[i]; r < (i + 1 < SEGS ? ROW_OF[i + 1] : ROWS); r++) {
                const float *row = got + (int64_t)r * vocab;
                int untouched = 1; // a row that gives an id: nothing copied there
                for (int64_t j = 0; j < vocab; j++) untouched &= isnan(row[j]) != 0;
                ok &= ids_of >> i & 1 ? mixed[r] == (i ? want_drawn[r] : want_ids[r]) && untouched
                                      : mixed[r] == -1 && !memcmp(row, want + (int64_t)r * vocab, sizeof(float) * (size_t)vocab);
            }
        snprintf(what, sizeof what, "G=%d %s: those logits as before, the rows of the ids not written", ranks,
                 ids_of == 5 ? "segments 0 and 2 take ids, 1 its logits" : "segment 1 takes ids, 0 and 2 their logits");
        check(ok, what);
    }

    st = step(m, len, 2, 0, NULL, ids, &err); // segments 0 and 2 want logits, and there is no buffer
    snprintf(what, sizeof what, "G=%d no logits buffer for segments that want theirs: refused (%s)", ranks, err.msg);
    check(st == BURST_ERR_INVALID && strstr(err.msg, "segment 0 wants its logits but there is no logits buffer"), what);
    int kept = 1;
    for (int i = 0; i < SEGS; i++) kept &= llama_slot_len(m, i) == len[i];
    // Temperatures for a segment that takes no ids: refused, nothing run.
    const int token = 5;
    const llama_segment drawn_nowhere = {.slot = 0, .n = 1, .temperature = TEMPERATURE, .unit = UNIT};
    st = llama_forward(m, &drawn_nowhere, 1, &token, got, NULL, NULL, &err);
    snprintf(what, sizeof what, "G=%d temperatures for a segment without ids: refused (%s)", ranks, err.msg);
    check(st == BURST_ERR_INVALID && strstr(err.msg, "segment 0 has temperatures but no ids or units") &&
              llama_slot_len(m, 0) == len[0], what);
    st = step(m, len, 0, 0, got, NULL, &err);
    snprintf(what, sizeof what, "G=%d after the refusal: slots as they were, the next step's logits as before", ranks);
    check(kept && st == BURST_OK && !memcmp(got, want, sizeof(float) * ROWS * (size_t)vocab), what);
    free(want), free(got);
    llama_free(m);
}

int main(void) {
    FILE *f = fopen(BURST_MODELS_DIR "/stories260K/config.json", "r");
    if (!f) {
        printf("skip: no %s\n", BURST_MODELS_DIR "/stories260K");
        return TEST_SKIP;
    }
    fclose(f);
    run(1);
    run(3);
    printf("%s: %d failures\n", failures ? "FAIL" : "ok", failures);
    return failures != 0;
}
