// Response side of server/openai.h.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"
#include "openai.h"

static char *print(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    BURST_ASSERT(s && "openai: out of memory formatting JSON");
    cJSON_Delete(o);
    return s;
}

char *api_error_json(const api_error *e) {
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type);
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    return print(o);
}

// The usage of call's choices (r, one result each): every prompt once (the first choice of each),
// every choice's tokens, the first token of any, the longest queue time.
static cJSON *usage(const openai_call *c, const request_result *r) {
    int gen = 0, prompt = 0, cached = 0, per_prompt = c->n_choices / c->n_prompts;
    double ttft = 0, queue = 0;
    for (int i = 0; i < c->n_choices; i++) {
        gen += r[i].n_gen;
        if (i % per_prompt == 0) prompt += r[i].n_prompt, cached += r[i].n_cached;
        if (r[i].ttft_s > 0 && (ttft == 0 || r[i].ttft_s < ttft)) ttft = r[i].ttft_s;
        if (r[i].queue_s > queue) queue = r[i].queue_s;
    }
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "prompt_tokens_details"), "cached_tokens", cached);
    cJSON_AddNumberToObject(u, "completion_tokens", gen);
    cJSON_AddNumberToObject(u, "total_tokens", prompt + gen);
    cJSON_AddNumberToObject(u, "time_to_first_token_s", ttft);
    cJSON_AddNumberToObject(u, "queue_time_s", queue);
    return u;
}

// The envelope every response and chunk shares, with its "choices" array (empty for progress and
// usage chunks).
static cJSON *envelope(const openai_call *c, const char *id, int chunk) {
    static const char *object[2][2] = {{"text_completion", "text_completion"}, {"chat.completion", "chat.completion.chunk"}};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object[c->kind == OPENAI_CHAT][chunk]);
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON_AddArrayToObject(o, "choices");
    return o;
}

// Adds choice `index` to o's "choices" and returns it.
static cJSON *add_choice(cJSON *o, int index) {
    cJSON *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(choice, "index", index);
    cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(o, "choices"), choice);
    return choice;
}

static char *join(const char *a, const char *b) {
    char *s = burst_malloc(strlen(a) + strlen(b) + 1);
    return strcat(strcpy(s, a), b);
}

static char *sse(cJSON *o) {
    char *json = print(o);
    size_t n = strlen(json);
    char *line = burst_malloc(n + 9);
    memcpy(line, "data: ", 6);
    memcpy(line + 6, json, n);
    memcpy(line + 6 + n, "\n\n", 3);
    free(json);
    return line;
}

// A token as the API shows it: its piece's text, or for a byte-fallback piece that is not UTF-8 on
// its own (NUL, 0x80..0xFF) "bytes:\xNN", as OpenAI's completions API shows such tokens (so that
// they stay distinct as keys of top_logprobs). *byte: the piece's byte, or -1 (the text's bytes).
static char *token_string(const openai_call *c, int id, int *byte) {
    char *text = tokenizer_piece(c->tok, id, byte);
    BURST_ASSERT(text && "openai: a sampled token id has no piece");
    if (*byte < 0) return text;
    free(text);
    text = burst_malloc(16);
    snprintf(text, 16, *byte > 0 && *byte < 0x80 ? "%c" : "bytes:\\x%02x", *byte);
    return text;
}

static long long utf8_chars(const char *s) {
    long long n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

// Completions' logprobs: {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}],
// "text_offset"}; the offsets count characters of the tokens' strings from the first token's (the
// echoed prompt's, with echo). The prompt's first token has null logprob and alternatives.
static cJSON *completion_logprobs(const openai_call *c, openai_choice_state *st, const sampled_logprobs *lp, int n) {
    cJSON *o = cJSON_CreateObject(), *tokens = cJSON_AddArrayToObject(o, "tokens");
    cJSON *logprobs = cJSON_AddArrayToObject(o, "token_logprobs"), *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offsets = cJSON_AddArrayToObject(o, "text_offset");
    int byte;
    for (int i = 0; i < n; i++) {
        char *t = token_string(c, lp[i].chosen.id, &byte);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t));
        cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)st->text_offset));
        st->text_offset += utf8_chars(t);
        free(t);
        if (isnan(lp[i].chosen.logprob)) {
            cJSON_AddItemToArray(logprobs, cJSON_CreateNull());
            cJSON_AddItemToArray(tops, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(logprobs, cJSON_CreateNumber(lp[i].chosen.logprob));
        cJSON *top = cJSON_CreateObject();
        for (int j = 0; j < lp[i].n_top; j++) {
            t = token_string(c, lp[i].top[j].id, &byte);
            cJSON_AddNumberToObject(top, t, lp[i].top[j].logprob);
            free(t);
        }
        cJSON_AddItemToArray(tops, top);
    }
    return o;
}

// One token of chats' logprobs: {"token", "logprob", "bytes"}.
static cJSON *chat_token(const openai_call *c, const token_logprob *tl) {
    int byte;
    char *t = token_string(c, tl->id, &byte);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "token", t);
    cJSON_AddNumberToObject(o, "logprob", tl->logprob);
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    if (byte >= 0) cJSON_AddItemToArray(bytes, cJSON_CreateNumber(byte));
    for (const char *p = t; byte < 0 && *p; p++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)*p));
    free(t);
    return o;
}

// Chats' logprobs: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
static cJSON *chat_logprobs(const openai_call *c, const sampled_logprobs *lp, int n) {
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (int i = 0; i < n; i++) {
        cJSON *entry = chat_token(c, &lp[i].chosen), *top = cJSON_AddArrayToObject(entry, "top_logprobs");
        for (int j = 0; j < lp[i].n_top; j++) cJSON_AddItemToArray(top, chat_token(c, &lp[i].top[j]));
        cJSON_AddItemToArray(content, entry);
    }
    return o;
}

// The choice's "logprobs": null unless asked, else those of the n tokens lp.
static void add_logprobs(const openai_call *c, openai_choice_state *st, cJSON *choice, const sampled_logprobs *lp,
                         int n) {
    if (!c->logprobs) cJSON_AddNullToObject(choice, "logprobs");
    else cJSON_AddItemToObject(choice, "logprobs", c->kind == OPENAI_COMPLETION ? completion_logprobs(c, st, lp, n)
                                                                               : chat_logprobs(c, lp, n));
}

// A call in message's tool_calls: {"index" (streams), "id", "type", "function": {"name",
// "arguments"}} (without a name: a stream's later chunk of call k, more of its arguments alone).
static void add_call(const openai_call *c, const openai_choice_state *st, cJSON *message, const char *id, int k,
                     const char *name, const char *arguments) {
    cJSON *list = cJSON_GetObjectItemCaseSensitive(message, "tool_calls"), *call = cJSON_CreateObject();
    cJSON_AddItemToArray(list ? list : cJSON_AddArrayToObject(message, "tool_calls"), call);
    if (c->stream) cJSON_AddNumberToObject(call, "index", k);
    if (name) {
        char call_id[96];
        snprintf(call_id, sizeof call_id, "call_%s_%d_%d", id, (int)(st - c->state), k);
        cJSON_AddStringToObject(call, "id", call_id);
        cJSON_AddStringToObject(call, "type", "function");
    }
    cJSON *f = cJSON_AddObjectToObject(call, "function");
    if (name) cJSON_AddStringToObject(f, "name", name);
    cJSON_AddStringToObject(f, "arguments", arguments);
}

// From t[i], past white space, one ',' or ':' and white space: where the next value begins.
static size_t next_value(const char *t, size_t i, size_t n) {
    while (i < n && strchr(" \t\r\n", t[i])) i++;
    if (i < n && (t[i] == ',' || t[i] == ':')) i++;
    while (i < n && strchr(" \t\r\n", t[i])) i++;
    return i;
}

// The end of the JSON value that begins at t[i] (valid so far: the grammar wrote it), or 0 where it
// does not end within n bytes.
static size_t value_end(const char *t, size_t i, size_t n) {
    const int scalar = !strchr("{[\"", t[i]);
    int depth = 0, in_string = 0;
    for (; i < n; i++) {
        const char c = t[i];
        if (scalar) {
            if (strchr(",}] \t\r\n", c)) return i;
            continue;
        }
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else {
            depth += (c == '{' || c == '[') - (c == '}' || c == ']');
        }
        if (!depth && !in_string) return i + 1;
    }
    return 0;
}

// Of the call at t[i] ({"name": ..., "arguments": ...} as the grammar writes it, n bytes so far):
// where its arguments begin, and its name's JSON text [*name, *name_end); 0 until they have come.
static size_t call_arguments(const char *t, size_t i, size_t n, size_t *name, size_t *name_end) {
    const size_t key = next_value(t, i + 1, n), key_end = key < n ? value_end(t, key, n) : 0;
    *name = key_end ? next_value(t, key_end, n) : n;
    *name_end = *name < n ? value_end(t, *name, n) : 0;
    const size_t key2 = *name_end ? next_value(t, *name_end, n) : n, key2_end = key2 < n ? value_end(t, key2, n) : 0;
    const size_t args = key2_end ? next_value(t, key2_end, n) : n;
    return args < n ? args : 0;
}

// tool_choice "required": the choice's text so far gains text ({"tool_calls": [{"name": ...,
// "arguments": ...}, ...]}); each call joins message's tool_calls once its arguments begin, with
// its name and those of its arguments that have come, as the model wrote them (a stream's later
// chunks carry more of them under its index).
static void add_listed_calls(const openai_call *c, openai_choice_state *st, cJSON *message, const char *id,
                             const char *text) {
    const size_t add = text ? strlen(text) : 0;
    st->calls = burst_realloc(st->calls, st->calls_len + add + 1);
    if (add) memcpy(st->calls + st->calls_len, text, add);
    const size_t n = st->calls_len += add;
    const char *t = st->calls, *open = memchr(t, '[', n);
    if (!st->calls_read && open) st->calls_read = (size_t)(open - t) + 1;
    while (st->calls_read) {
        const size_t i = next_value(t, st->calls_read, n);
        size_t name, name_end, args = i < n && t[i] == '{' ? call_arguments(t, i, n, &name, &name_end) : 0;
        if (!args) return; // (the list's ']', or a call whose arguments have not begun)
        const size_t end = value_end(t, i, n), args_end = value_end(t, args, n), from = st->args_sent ? st->args_sent : args;
        const size_t to = args_end ? args_end : n;
        char *arguments = strndup(t + from, to - from);
        BURST_ASSERT(arguments && "openai: out of memory");
        if (!st->args_sent) {
            cJSON *name_json = cJSON_ParseWithLength(t + name, name_end - name);
            BURST_ASSERT(cJSON_IsString(name_json) && "openai: a call not as the grammar writes it");
            add_call(c, st, message, id, st->n_calls, name_json->valuestring, arguments);
            cJSON_Delete(name_json);
        } else if (to > from) {
            add_call(c, st, message, id, st->n_calls, NULL, arguments);
        }
        free(arguments);
        st->args_sent = to;
        if (!end) return;
        st->n_calls++, st->args_sent = 0, st->calls_read = end;
    }
}

// The choice's text: "text" for completions (after the echoed prompt: a stream sends it with its
// first text), a delta (or message) for chats, or a chat's function call.
static void add_text(openai_call *c, openai_choice_state *st, cJSON *choice, const char *id, const char *key,
                     const char *text) {
    if (c->kind == OPENAI_COMPLETION) {
        char *all = join(st->echo ? st->echo : "", text ? text : "");
        cJSON_AddStringToObject(choice, "text", all);
        free(all);
        if (c->stream) {
            free(st->echo);
            st->echo = NULL;
        }
        return;
    }
    cJSON *d = cJSON_AddObjectToObject(choice, key);
    if (!st->sent_role) cJSON_AddStringToObject(d, "role", "assistant");
    st->sent_role = c->stream;
    if ((c->tool || c->tool_calls) && !c->stream) cJSON_AddNullToObject(d, "content");
    if (c->tool_calls) {
        add_listed_calls(c, st, d, id, text);
    } else if (c->tool && (text || !st->sent_call)) {
        add_call(c, st, d, id, 0, st->sent_call ? NULL : c->tool, text ? text : "");
        st->sent_call = c->stream;
    } else if (!c->tool && text) {
        cJSON_AddStringToObject(d, "content", text);
    }
}

// "tool_calls" where tool_choice "required"'s list of calls ended; else the engine's reason.
static const char *finish_of(const openai_call *c, const openai_choice_state *st, finish_reason f) {
    const size_t end = st->calls_read ? next_value(st->calls, st->calls_read, st->calls_len) : 0;
    return c->tool_calls && end < st->calls_len && st->calls[end] == ']' ? "tool_calls" : finish_reason_str(f);
}

// A stream chunk of one choice: its text and the logprobs of the n_lp tokens that begin in it.
static cJSON *chunk(openai_call *c, const char *id, int index, const char *text, const sampled_logprobs *lp, int n_lp,
                    cJSON **choice) {
    cJSON *o = envelope(c, id, 1);
    *choice = add_choice(o, index);
    add_text(c, &c->state[index], *choice, id, "delta", text);
    add_logprobs(c, &c->state[index], *choice, lp, n_lp);
    return o;
}

char *openai_chunk_text(openai_call *c, const char *id, int index, const char *text, const sampled_logprobs *lp,
                        int n_lp) {
    cJSON *choice, *o = chunk(c, id, index, text, lp, n_lp, &choice);
    cJSON_AddNullToObject(choice, "finish_reason");
    return sse(o);
}

char *openai_chunk_progress(openai_call *c, const char *id, const request_progress *p) {
    cJSON *o = envelope(c, id, 1);
    cJSON *pp = cJSON_AddObjectToObject(o, "prompt_progress");
    cJSON_AddNumberToObject(pp, "processed", p->processed);
    cJSON_AddNumberToObject(pp, "total", p->total);
    cJSON_AddNumberToObject(pp, "elapsed_s", p->elapsed_s);
    return sse(o);
}

char *openai_chunk_final(openai_call *c, const char *id, int index, const char *text, const sampled_logprobs *lp,
                         int n_lp, const request_result *res) {
    cJSON *choice, *o = chunk(c, id, index, c->kind == OPENAI_COMPLETION || text[0] ? text : NULL, lp, n_lp, &choice);
    cJSON_AddStringToObject(choice, "finish_reason", finish_of(c, &c->state[index], res->finish));
    cJSON *t = cJSON_AddObjectToObject(o, "timings"); // the choice's, whether or not usage is asked
    cJSON_AddNumberToObject(t, "time_to_first_token_s", res->ttft_s);
    cJSON_AddNumberToObject(t, "queue_time_s", res->queue_s);
    cJSON_AddNumberToObject(t, "total_s", res->total_s);
    return sse(o);
}

char *openai_chunk_usage(openai_call *c, const char *id, const request_result *res) {
    cJSON *o = envelope(c, id, 1);
    cJSON_AddItemToObject(o, "usage", usage(c, res));
    return sse(o);
}

char *openai_response(openai_call *c, const char *id, const openai_choice *choices) {
    cJSON *o = envelope(c, id, 0);
    request_result res[c->n_choices];
    for (int i = 0; i < c->n_choices; i++) {
        cJSON *choice = add_choice(o, i);
        add_text(c, &c->state[i], choice, id, "message", choices[i].text);
        add_logprobs(c, &c->state[i], choice, choices[i].lp, choices[i].n_lp);
        cJSON_AddStringToObject(choice, "finish_reason", finish_of(c, &c->state[i], choices[i].result.finish));
        res[i] = choices[i].result;
    }
    cJSON_AddItemToObject(o, "usage", usage(c, res));
    return print(o);
}
