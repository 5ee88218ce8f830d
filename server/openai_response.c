// Response side of server/openai.h.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
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

static cJSON *usage(const request_result *r) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", r->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", r->n_prompt + r->n_gen);
    cJSON_AddNumberToObject(u, "time_to_first_token_s", r->ttft_s);
    cJSON_AddNumberToObject(u, "queue_time_s", r->queue_s);
    return u;
}

// The envelope every response and chunk shares; *choice is its one choice, or with choice NULL,
// "choices" is empty (progress and usage chunks).
static cJSON *envelope(const openai_call *c, const char *id, int chunk, cJSON **choice) {
    static const char *object[2][2] = {{"text_completion", "text_completion"}, {"chat.completion", "chat.completion.chunk"}};
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", object[c->kind == OPENAI_CHAT][chunk]);
    cJSON_AddNumberToObject(o, "created", (double)c->created);
    cJSON_AddStringToObject(o, "model", c->model);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    if (!choice) return o;
    *choice = cJSON_CreateObject();
    cJSON_AddNumberToObject(*choice, "index", 0);
    cJSON_AddItemToArray(choices, *choice);
    return o;
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

// The choice's text: "text" for completions, a delta (or message) for chats.
static void add_text(openai_call *c, cJSON *choice, const char *key, const char *text) {
    if (c->kind == OPENAI_COMPLETION) {
        cJSON_AddStringToObject(choice, "text", text ? text : "");
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON *d = cJSON_AddObjectToObject(choice, key);
    if (!c->sent_role) cJSON_AddStringToObject(d, "role", "assistant");
    c->sent_role = c->stream;
    if (text) cJSON_AddStringToObject(d, "content", text);
}

char *openai_chunk_text(openai_call *c, const char *id, const char *text) {
    cJSON *choice, *o = envelope(c, id, 1, &choice);
    add_text(c, choice, "delta", text);
    cJSON_AddNullToObject(choice, "finish_reason");
    return sse(o);
}

char *openai_chunk_progress(openai_call *c, const char *id, const request_progress *p) {
    cJSON *o = envelope(c, id, 1, NULL);
    cJSON *pp = cJSON_AddObjectToObject(o, "prompt_progress");
    cJSON_AddNumberToObject(pp, "processed", p->processed);
    cJSON_AddNumberToObject(pp, "total", p->total);
    cJSON_AddNumberToObject(pp, "elapsed_s", p->elapsed_s);
    return sse(o);
}

char *openai_chunk_final(openai_call *c, const char *id, const request_result *res) {
    cJSON *choice, *o = envelope(c, id, 1, &choice);
    add_text(c, choice, "delta", c->kind == OPENAI_COMPLETION ? "" : NULL);
    cJSON_AddStringToObject(choice, "finish_reason", finish_reason_str(res->finish));
    char *finish = sse(o);
    if (!c->include_usage) return finish;
    o = envelope(c, id, 1, NULL);
    cJSON_AddItemToObject(o, "usage", usage(res));
    char *with_usage = sse(o), *both = join(finish, with_usage);
    free(finish);
    free(with_usage);
    return both;
}

char *openai_response(const openai_call *call, const char *id, const char *text, const request_result *res) {
    openai_call c = *call;
    cJSON *choice, *o = envelope(&c, id, 0, &choice);
    add_text(&c, choice, "message", text);
    cJSON_AddStringToObject(choice, "finish_reason", finish_reason_str(res->finish));
    cJSON_AddItemToObject(o, "usage", usage(res));
    return print(o);
}
