#define _POSIX_C_SOURCE 200809L
#include "chat_template.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// FastChat's vicuna_v1.1 system message.
static const char vicuna_system[] = "A chat between a curious user and an artificial intelligence assistant. "
                                    "The assistant gives helpful, detailed, and polite answers to the user's questions.";

static const char *const names[] = {[CHAT_LLAMA2] = "llama-2", [CHAT_VICUNA] = "vicuna", [CHAT_ZEPHYR] = "zephyr"};

int chat_template_named(const char *name, chat_template *tpl) {
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(name, names[i])) return *tpl = (chat_template)i, 1;
    return 0;
}

const char *chat_template_name(chat_template tpl) { return names[tpl]; }

int chat_template_guess(const char *j, chat_template *tpl) {
    if (strstr(j, "[INST]")) *tpl = CHAT_LLAMA2;
    else if (strstr(j, "<|user|>") && strstr(j, "<|assistant|>") && strstr(j, "eos_token")) *tpl = CHAT_ZEPHYR;
    else if (strstr(j, "USER") && strstr(j, "ASSISTANT")) *tpl = CHAT_VICUNA;
    else return 0;
    return 1;
}

static int is_system(const char *role) { return !strcmp(role, "system") || !strcmp(role, "developer"); }
static int is_user(const char *role) { return !strcmp(role, "user") || !strcmp(role, "tool"); }

// s without leading and trailing whitespace, as "%.*s" prints it: its length, and *start.
static int stripped(const char *s, const char **start) {
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1])) n--;
    while (n && isspace((unsigned char)*s)) s++, n--;
    *start = s;
    return (int)n;
}

// Encodes what was written to f (open_memstream's, over *text) after (BOS and) the ids so far,
// (then EOS,) and frees it.
static burst_status append_written(const tokenizer *t, FILE *f, char **text, int bos, int eos, int **ids, int *n,
                                   burst_error *err) {
    const int failed = ferror(f);
    fclose(f);
    int *part = NULL, n_part = 0;
    burst_status st = failed || !*text ? BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: writing the text failed")
                                       : tokenizer_encode(t, *text, bos, &part, &n_part, err);
    free(*text);
    *text = NULL;
    if (st) return st;
    int *grown = realloc(*ids, sizeof(int) * (size_t)(*n + n_part + 1));
    if (!grown) {
        free(part);
        return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: %d ids", *n + n_part + 1);
    }
    memcpy(grown + *n, part, sizeof(int) * (size_t)n_part);
    *n += n_part;
    if (eos) grown[(*n)++] = tokenizer_eos(t);
    *ids = grown;
    free(part);
    return BURST_OK;
}

// Meta's: an exchange at a time, each encoded alone with BOS. The system message joins the first
// user text, and Meta strips the joined text: the user text's leading whitespace stays, and where
// it is all whitespace the system block's last "\n\n" goes with it.
static burst_status llama2_encode(const tokenizer *t, const chat_message *msgs, int first, int n_msgs, int **ids,
                                  int *n_ids, burst_error *err) {
    burst_status st = BURST_OK;
    for (int i = first; i < n_msgs && !st; i += 2) {
        const int last = i + 1 >= n_msgs;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: open_memstream failed");
        const char *s;
        int n = stripped(msgs[i].content, &s);
        if (first && i == first) {
            if (n) { // (the leading whitespace is inside the joined text)
                n += (int)(s - msgs[i].content);
                s = msgs[i].content;
            }
            fprintf(f, "[INST] <<SYS>>\n%s\n<</SYS>>%s%.*s [/INST]", msgs[0].content, n ? "\n\n" : "", n, s);
        } else fprintf(f, "[INST] %.*s [/INST]", n, s);
        if (!last) n = stripped(msgs[i + 1].content, &s), fprintf(f, " %.*s ", n, s);
        st = append_written(t, f, &text, 1, !last, ids, n_ids, err);
    }
    return st;
}

// FastChat's get_prompt for its ADD_COLON_TWO style: the system message and a space, then each
// message as "USER: " text " " or "ASSISTANT: " text "</s>", or its role and ":" alone where its
// text is empty, then "ASSISTANT:". Each "</s>" is EOS, the text before it encoded alone.
static burst_status vicuna_encode(const tokenizer *t, const chat_message *msgs, int first, int n_msgs, int **ids,
                                  int *n_ids, burst_error *err) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: open_memstream failed");
    fprintf(f, "%s ", first ? msgs[0].content : vicuna_system);
    burst_status st = BURST_OK;
    int bos = 1;
    for (int i = first; i < n_msgs && !st; i++) {
        const int user = (i - first) % 2 == 0, empty = !*msgs[i].content;
        if (empty) fprintf(f, "%s:", user ? "USER" : "ASSISTANT");
        else fprintf(f, "%s: %s%s", user ? "USER" : "ASSISTANT", msgs[i].content, user ? " " : "");
        if (user || empty) continue;
        st = append_written(t, f, &text, bos, 1, ids, n_ids, err);
        bos = 0;
        if (!st && !(f = open_memstream(&text, &len)))
            return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: open_memstream failed");
    }
    if (st) return st;
    fputs("ASSISTANT:", f);
    return append_written(t, f, &text, bos, 0, ids, n_ids, err);
}

// The alignment handbook's template as Hugging Face's Jinja renders it (trim_blocks): each message
// "<|role|>\n" text "</s>\n", then "<|assistant|>\n". Each "</s>" is EOS, the text between encoded
// alone.
static burst_status zephyr_encode(const tokenizer *t, const chat_message *msgs, int first, int n_msgs, int **ids,
                                  int *n_ids, burst_error *err) {
    burst_status st = BURST_OK;
    for (int i = 0; i <= n_msgs && !st; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f) return BURST_FAIL(err, BURST_ERR_NOMEM, "chat template: open_memstream failed");
        const char *role = i < first ? "system" : (i - first) % 2 == 0 ? "user" : "assistant";
        if (i < n_msgs) fprintf(f, "%s<|%s|>\n%s", i ? "\n" : "", role, msgs[i].content);
        else fputs("\n<|assistant|>\n", f); // (n_msgs >= 1)
        st = append_written(t, f, &text, i == 0, i < n_msgs, ids, n_ids, err);
    }
    return st;
}

// Whether msgs[i] is a function's result after another (parallel calls' results): one user turn.
static int joins_previous(const chat_message *msgs, int i) {
    return i > 0 && !strcmp(msgs[i].role, "tool") && !strcmp(msgs[i - 1].role, "tool");
}

// text (malloc'd, or NULL: none yet) and then line, after a newline if text was some.
static char *append_line(char *text, const char *line) {
    const size_t a = text ? strlen(text) + 1 : 0, b = strlen(line);
    text = burst_realloc(text, a + b + 1);
    if (a) text[a - 1] = '\n';
    memcpy(text + a, line, b + 1);
    return text;
}

// The turns of msgs: each message, but results in a row one, their texts a line each (malloc'd).
static chat_message *turns_of(const chat_message *msgs, int n_msgs, int *n_turns) {
    chat_message *turns = burst_calloc((size_t)n_msgs, sizeof *turns);
    int n = 0;
    for (int i = 0; i < n_msgs; i++) {
        if (!joins_previous(msgs, i)) turns[n++].role = msgs[i].role;
        turns[n - 1].content = append_line((char *)turns[n - 1].content, msgs[i].content);
    }
    *n_turns = n;
    return turns;
}

burst_status chat_template_encode(const tokenizer *t, chat_template tpl, const chat_message *msgs, int n_msgs,
                                  int **ids, int *n_ids, burst_error *err) {
    const int first = n_msgs > 0 && is_system(msgs[0].role);
    int n_turns = 0; // after the system message
    for (int i = first; i < n_msgs; i++) n_turns += !joins_previous(msgs, i);
    if (n_turns < 1 || n_turns % 2 == 0)
        return BURST_FAIL(err, BURST_ERR_INVALID, "messages: %d turns after the system message (want user/assistant "
                          "pairs, then a final user or tool message; tool messages in a row are one)", n_turns);
    for (int i = first, turn = 0; i < n_msgs; i++) {
        if (joins_previous(msgs, i)) continue;
        const int user = turn++ % 2 == 0;
        if (user ? !is_user(msgs[i].role) : strcmp(msgs[i].role, "assistant"))
            return BURST_FAIL(err, BURST_ERR_INVALID, "messages[%d]: role '%s' (want '%s': optional system, "
                              "then user (or tool) and assistant alternating, ending with user or tool)", i,
                              msgs[i].role, user ? "user" : "assistant");
    }
    int n = 0;
    chat_message *turns = turns_of(msgs, n_msgs, &n);
    *ids = NULL;
    *n_ids = 0;
    burst_status (*const encode[])(const tokenizer *, const chat_message *, int, int, int **, int *, burst_error *) = {
        [CHAT_LLAMA2] = llama2_encode, [CHAT_VICUNA] = vicuna_encode, [CHAT_ZEPHYR] = zephyr_encode};
    burst_status st = encode[tpl](t, turns, first, n, ids, n_ids, err);
    for (int i = 0; i < n; i++) free((char *)turns[i].content);
    free(turns);
    if (st) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
    }
    return st;
}
