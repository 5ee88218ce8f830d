#define _POSIX_C_SOURCE 200809L
#include "chat_template.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_system(const char *role) { return !strcmp(role, "system") || !strcmp(role, "developer"); }

// The content without leading and trailing whitespace: [*start, *start + *len).
static void strip(const char *s, const char **start, size_t *len) {
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    while (n && isspace((unsigned char)*s)) s++, n--;
    *start = s;
    *len = n;
}

// Appends the ids of BOS + text (+ EOS) to *ids.
static burst_status append_turn(const tokenizer *t, const char *text, int eos, int **ids, int *n,
                                burst_error *err) {
    int *turn = NULL, n_turn = 0;
    burst_status st = tokenizer_encode(t, text, 1, &turn, &n_turn, err);
    if (st) return st;
    int *grown = realloc(*ids, sizeof(int) * (size_t)(*n + n_turn + 1));
    if (!grown) {
        free(turn);
        return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: %d ids", *n + n_turn + 1);
    }
    memcpy(grown + *n, turn, sizeof(int) * (size_t)n_turn);
    *n += n_turn;
    if (eos) grown[(*n)++] = tokenizer_eos(t);
    *ids = grown;
    free(turn);
    return BURST_OK;
}

burst_status chat_template_encode(const tokenizer *t, const chat_message *msgs, int n_msgs,
                                  int **ids, int *n_ids, burst_error *err) {
    int first = n_msgs > 0 && is_system(msgs[0].role);
    const char *sys = NULL;
    size_t sys_len = 0;
    if (first) strip(msgs[0].content, &sys, &sys_len);
    if (n_msgs - first < 1 || (n_msgs - first) % 2 == 0)
        return BURST_FAIL(err, BURST_ERR_INVALID, "messages: %d after the system message (want user/assistant "
                          "pairs, then a final user message)", n_msgs - first);
    for (int i = first; i < n_msgs; i++) {
        const char *want = (i - first) % 2 == 0 ? "user" : "assistant";
        if (strcmp(msgs[i].role, want))
            return BURST_FAIL(err, BURST_ERR_INVALID, "messages[%d]: role '%s' (want '%s': optional system, "
                              "then user and assistant alternating, ending with user)", i, msgs[i].role, want);
    }
    *ids = NULL;
    *n_ids = 0;
    burst_status st = BURST_OK;
    for (int i = first; i < n_msgs && !st; i += 2) {
        const char *user, *answer = "";
        size_t user_len, answer_len = 0;
        strip(msgs[i].content, &user, &user_len);
        int last = i + 1 >= n_msgs;
        if (!last) strip(msgs[i + 1].content, &answer, &answer_len);
        char *text = NULL;
        size_t text_len = 0;
        FILE *f = open_memstream(&text, &text_len);
        if (!f) return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: open_memstream failed");
        fputs("[INST] ", f);
        if (sys && i == first) fprintf(f, "<<SYS>>\n%.*s\n<</SYS>>\n\n", (int)sys_len, sys);
        fprintf(f, "%.*s [/INST]", (int)user_len, user);
        if (!last) fprintf(f, " %.*s ", (int)answer_len, answer);
        fclose(f);
        st = append_turn(t, text, !last, ids, n_ids, err);
        free(text);
    }
    if (st) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    return st;
}
