// Request side of server/openai.h: validation follows OpenAI's types; every error names the
// field and what was expected.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/chat_template.h"
#include "openai.h"

int api_error_set(api_error *e, int status, const char *type, const char *code, const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    e->retry_after_s = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return 0;
}

int api_error_model_not_found(api_error *e, const char *served, const char *asked) {
    return api_error_set(e, 404, "invalid_request_error", "model_not_found", "this server serves %s, not %s", served,
                         asked);
}

#define BAD(e, ...) api_error_set((e), 400, "invalid_request_error", NULL, __VA_ARGS__)

// An optional number in [lo, hi] (absent or null keeps *out).
static int get_number(const cJSON *o, const char *key, double lo, double hi, double *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
        return BAD(e, "'%s' must be a number in [%g, %g]", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

// An optional integer in [lo, hi].
static int get_int(const cJSON *o, const char *key, double lo, double hi, double *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo || v->valuedouble > hi)
        return BAD(e, "'%s' must be an integer in [%.0f, %.0f]", key, lo, hi);
    *out = v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *o, const char *key, int *out, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsBool(v)) return BAD(e, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return 1;
}

// "stop": a string or an array of up to 4 non-empty strings.
static int get_stop(const cJSON *o, burst_request *req, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return 1;
    int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (n < 0 || n > 4) return BAD(e, "'stop' must be a string or an array of at most 4 strings");
    req->stop = burst_calloc((size_t)(n ? n : 1), sizeof *req->stop);
    for (int i = 0; i < n; i++) {
        const cJSON *s = cJSON_IsString(v) ? v : cJSON_GetArrayItem(v, i);
        if (!cJSON_IsString(s) || !s->valuestring[0]) return BAD(e, "'stop' entries must be non-empty strings");
        req->stop[req->n_stop++] = strdup(s->valuestring);
    }
    return 1;
}

// "stop_token_ids" (vLLM's): null or up to REQUEST_MAX_STOP_IDS token ids that end the completion.
static int get_stop_ids(const cJSON *o, const openai_limits *lim, burst_request *req, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop_token_ids"), *id;
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) > REQUEST_MAX_STOP_IDS)
        return BAD(e, "'stop_token_ids' must be an array of at most %d token ids", REQUEST_MAX_STOP_IDS);
    cJSON_ArrayForEach(id, v) {
        const double x = cJSON_IsNumber(id) ? id->valuedouble : -1;
        if (!(x >= 0 && x < lim->vocab) || x != (int)x)
            return BAD(e, "'stop_token_ids' entries must be token ids in [0, %d)", lim->vocab);
        req->stop_ids[req->n_stop_ids++] = (int)x;
    }
    return 1;
}

// One prompt of a completion, `name` in errors: a string (*text, borrowed from p) or token ids
// (*text NULL), into *ids (malloc'd) and *n.
static int parse_prompt(const cJSON *p, const openai_limits *lim, const char *name, int **ids, int *n,
                        const char **text, api_error *e) {
    burst_error err = {{0}};
    *text = NULL;
    if (cJSON_IsString(p)) {
        *text = p->valuestring;
        if (tokenizer_encode(lim->tok, p->valuestring, 1, ids, n, &err))
            return BAD(e, "%s could not be tokenized: %s", name, err.msg);
        return 1;
    }
    int len = cJSON_IsArray(p) ? cJSON_GetArraySize(p) : 0;
    if (len < 1) return BAD(e, "%s must be a string, a non-empty array of token ids, or an array of either", name);
    *ids = burst_malloc(sizeof(int) * (size_t)len);
    for (*n = 0; *n < len; ++*n) {
        const cJSON *t = cJSON_GetArrayItem(p, *n);
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= lim->vocab)
            return BAD(e, "%s[%d] must be a token id in [0, %d)", name, *n, lim->vocab);
        (*ids)[*n] = (int)t->valuedouble;
    }
    return 1;
}

// The prompts of a completion: a string or token ids, or a batch (an array of several of either).
// The first goes to req, the others to call->prompts; texts[i]: prompt i's string or NULL.
static int get_prompts(const cJSON *o, const openai_limits *lim, burst_request *req, openai_call *call,
                       const char ***texts, api_error *e) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!p) return BAD(e, "'prompt' is required");
    int batch = cJSON_IsArray(p) && cJSON_GetArraySize(p) > 0 && !cJSON_IsNumber(cJSON_GetArrayItem(p, 0));
    int k = batch ? cJSON_GetArraySize(p) : 1;
    if (k > lim->max_prompts)
        return BAD(e, "'prompt': a batch of %d prompts; at most %d (each waits in the server's queue, --max-queue)", k,
                   lim->max_prompts);
    call->n_prompts = k;
    call->prompts = burst_calloc((size_t)k, sizeof *call->prompts);
    call->prompt_lens = burst_calloc((size_t)k, sizeof *call->prompt_lens);
    *texts = burst_calloc((size_t)k, sizeof **texts);
    for (int i = 0; i < k; i++) {
        char name[32];
        snprintf(name, sizeof name, batch ? "'prompt'[%d]" : "'prompt'", i);
        if (!parse_prompt(batch ? cJSON_GetArrayItem(p, i) : p, lim, name, i ? &call->prompts[i] : &req->prompt,
                          i ? &call->prompt_lens[i] : &req->n_prompt, &(*texts)[i], e))
            return 0;
    }
    return 1;
}

// A message's content: a string, or an array of {"type": "text", "text": ...} parts (joined).
static char *message_text(const cJSON *content, int index, api_error *e) {
    if (cJSON_IsString(content)) return strdup(content->valuestring);
    if (!cJSON_IsArray(content)) {
        BAD(e, "'messages'[%d].content must be a string or an array of text parts", index);
        return NULL;
    }
    size_t len = 0;
    char *text = NULL;
    FILE *f = open_memstream(&text, &len);
    const cJSON *part;
    cJSON_ArrayForEach(part, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
            fclose(f);
            free(text);
            BAD(e, "'messages'[%d].content parts must be {\"type\": \"text\", \"text\": string}", index);
            return NULL;
        }
        fputs(t->valuestring, f);
    }
    fclose(f);
    return text;
}

// The text of an assistant message that carries tool_calls: its content, if any, then each call's
// arguments, a line each (what the model wrote for them: burstd's named calls are their arguments).
static char *calls_text(const cJSON *m, int index, api_error *e) {
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
    const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *call = NULL;
    char *head = content && !cJSON_IsNull(content) ? message_text(content, index, e) : strdup("");
    if (!head) return NULL;
    size_t len = 0;
    char *text = NULL;
    FILE *f = open_memstream(&text, &len);
    fputs(head, f);
    free(head);
    const cJSON *list = cJSON_IsArray(calls) ? calls : NULL;
    cJSON_ArrayForEach(call, list) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        if (!cJSON_IsString(name) || !cJSON_IsString(args)) break;
        fprintf(f, "%s%s", ftell(f) ? "\n" : "", args->valuestring);
    }
    fclose(f);
    if (!cJSON_IsArray(calls) || call) {
        free(text);
        BAD(e, "'messages'[%d].tool_calls must be a list of {\"type\": \"function\", \"function\": {\"name\": string, "
               "\"arguments\": string}}", index);
        return NULL;
    }
    return text;
}

// The prompt of a chat: messages through the chat template. A conversation may carry earlier tool
// calls (an assistant message's tool_calls: its text, calls_text) and their results (role "tool",
// a user turn's text; its tool_call_id is not read).
static int get_messages(const cJSON *o, const openai_limits *lim, burst_request *req, api_error *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    int n = cJSON_IsArray(msgs) ? cJSON_GetArraySize(msgs) : 0;
    if (n < 1) return BAD(e, "'messages' must be a non-empty array");
    chat_message *cm = burst_calloc((size_t)n, sizeof *cm);
    int ok = 1;
    for (int i = 0; i < n && ok; i++) {
        const cJSON *m = cJSON_GetArrayItem(msgs, i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *tool_calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        const int calls = tool_calls && !cJSON_IsNull(tool_calls);
        if (!cJSON_IsString(role)) ok = BAD(e, "'messages'[%d].role must be a string", i);
        else if (calls && strcmp(role->valuestring, "assistant"))
            ok = BAD(e, "'messages'[%d]: only assistant messages carry 'tool_calls'", i);
        else if (!(cm[i].content = calls ? calls_text(m, i, e)
                                         : message_text(cJSON_GetObjectItemCaseSensitive(m, "content"), i, e)))
            ok = 0;
        else cm[i].role = role->valuestring;
    }
    burst_error err = {{0}};
    if (ok && chat_template_encode(lim->tok, lim->chat, cm, n, &req->prompt, &req->n_prompt, &err))
        ok = BAD(e, "%s", strstr(err.msg, "messages") ? strstr(err.msg, "messages") : err.msg);
    for (int i = 0; i < n; i++) free((char *)cm[i].content);
    free(cm);
    return ok;
}

// max_tokens: given, or (chat) what the context leaves, or (completion) OpenAI's default of 16
// within what the context leaves; prompt + max_tokens must fit the context. 0 only with echo (as
// OpenAI and vLLM): the prompt alone, with its logprobs when asked; without echo it would return
// nothing, so it is a 400 (as vLLM).
static int get_max_tokens(const cJSON *o, openai_kind kind, const openai_limits *lim, burst_request *req,
                          const openai_call *call, int echo, api_error *e) {
    double v = -1;
    if (!get_int(o, "max_tokens", 0, 1 << 30, &v, e)) return 0;
    if (kind == OPENAI_CHAT && v < 0 && !get_int(o, "max_completion_tokens", 0, 1 << 30, &v, e)) return 0;
    if (v == 0 && !echo) return BAD(e, "'max_tokens' must be at least 1 (0 only with 'echo': true)");
    int n_prompt = req->n_prompt; // the longest of a batch
    for (int i = 1; i < call->n_prompts; i++) n_prompt = call->prompt_lens[i] > n_prompt ? call->prompt_lens[i] : n_prompt;
    int room = lim->ctx - n_prompt;
    if (v < 0 && room >= 1) v = kind == OPENAI_CHAT || room < 16 ? room : 16;
    if (v < 0 || n_prompt + v > lim->ctx)
        return api_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                             "This model's maximum context length is %d tokens. However, you requested %.0f tokens "
                             "(%d in the %s, %.0f for the completion). Please reduce the length of the %s or the "
                             "completion.", lim->ctx, n_prompt + (v < 0 ? 1 : v), n_prompt,
                             kind == OPENAI_CHAT ? "messages" : "prompt", v < 0 ? 1 : v,
                             kind == OPENAI_CHAT ? "messages" : "prompt");
    req->max_tokens = (int)v;
    return 1;
}

// The sampling fields, those left out lim's defaults (OpenAI's, or the checkpoint's).
// repetition_penalty is vLLM's extension (Hugging Face's penalty: sampler.h).
static int get_sampling(const cJSON *o, const openai_limits *lim, burst_request *req, api_error *e) {
    const sampler_params *d = &lim->sampling;
    double temperature = d->temperature, top_p = d->top_p, top_k = d->top_k, min_p = d->min_p, seed = 0, presence = 0,
           frequency = 0, repetition = d->repetition_penalty;
    int ok = get_number(o, "temperature", 0, 2, &temperature, e) && get_number(o, "top_p", 0, 1, &top_p, e) &&
             get_number(o, "repetition_penalty", 0, 10, &repetition, e) &&
             get_int(o, "top_k", -1, 1 << 30, &top_k, e) && get_number(o, "min_p", 0, 1, &min_p, e) &&
             get_int(o, "seed", -9007199254740991.0, 9007199254740991.0, &seed, e) &&
             get_number(o, "presence_penalty", -2, 2, &presence, e) &&
             get_number(o, "frequency_penalty", -2, 2, &frequency, e) && get_bool(o, "ignore_eos", &req->ignore_eos, e);
    if (ok && top_p <= 0) ok = BAD(e, "'top_p' must be in (0, 1]");
    if (ok && repetition <= 0) ok = BAD(e, "'repetition_penalty' must be in (0, 10]");
    req->sampling = (sampler_params){.temperature = (float)temperature, .top_p = (float)top_p,
                                     .top_k = top_k > 0 ? (int)top_k : 0, .min_p = (float)min_p,
                                     .seed = seed ? (uint64_t)(int64_t)seed : (uint64_t)(burst_now() * 1e9),
                                     .presence_penalty = (float)presence, .frequency_penalty = (float)frequency,
                                     .repetition_penalty = (float)repetition};
    return ok;
}

// "logit_bias": {"token id": bias in [-100, 100], ...}, added to the logits before sampling.
static int get_logit_bias(const cJSON *o, const openai_limits *lim, burst_request *req, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "logit_bias"), *b;
    if (!v || cJSON_IsNull(v)) return 1;
    if (!cJSON_IsObject(v)) return BAD(e, "'logit_bias' must be an object mapping token ids to numbers in [-100, 100]");
    int n = cJSON_GetArraySize(v);
    req->sampling.bias = burst_calloc((size_t)(n ? n : 1), sizeof *req->sampling.bias);
    cJSON_ArrayForEach(b, v) {
        char *end;
        long id = strtol(b->string, &end, 10);
        if (!isdigit((unsigned char)b->string[0]) || *end || id >= lim->vocab)
            return BAD(e, "'logit_bias' keys must be token ids in [0, %d), not '%.40s'", lim->vocab, b->string);
        if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100 && b->valuedouble <= 100))
            return BAD(e, "'logit_bias'['%.40s'] must be a number in [-100, 100]", b->string);
        req->sampling.bias[req->sampling.n_bias++] = (sampler_bias){(int)id, (float)b->valuedouble};
    }
    return 1;
}

// Completions: "logprobs": the alternatives per token (0..5). Chats: "logprobs": true, with
// "top_logprobs" alternatives (0..20).
static int get_logprobs(const cJSON *o, openai_kind kind, burst_request *req, openai_call *call, api_error *e) {
    double top = -1;
    if (kind == OPENAI_COMPLETION) {
        if (!get_int(o, "logprobs", 0, 5, &top, e)) return 0;
        req->logprobs = top >= 0;
    } else {
        if (!get_bool(o, "logprobs", &req->logprobs, e) ||
            !get_int(o, "top_logprobs", 0, SAMPLER_MAX_TOP_LOGPROBS, &top, e))
            return 0;
        if (top >= 0 && !req->logprobs) return BAD(e, "'top_logprobs' needs 'logprobs': true");
    }
    req->top_logprobs = top > 0 ? (int)top : 0;
    call->logprobs = req->logprobs;
    return 1;
}

// Completions' "echo": the prompt's text goes before the completion, and with logprobs the prompt
// tokens' logprobs before the completion's (each choice's texts are set by get_choices).
static int get_echo(const cJSON *o, burst_request *req, int *echo, api_error *e) {
    if (!get_bool(o, "echo", echo, e)) return 0;
    if (*echo) req->prompt_logprobs = req->logprobs;
    return 1;
}

// "stream_options": {"include_usage": bool}, only with "stream": true (as OpenAI).
static int get_stream_options(const cJSON *o, openai_call *call, api_error *e) {
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (!so || cJSON_IsNull(so)) return 1;
    if (!cJSON_IsObject(so)) return BAD(e, "'stream_options' must be an object");
    if (!call->stream) return BAD(e, "'stream_options' is only allowed with 'stream': true");
    return get_bool(so, "include_usage", &call->include_usage, e);
}

// response_format: {"type": "text"} (or null); {"type": "json_object"}: JSON mode, where the
// sampler keeps the completion one JSON object (json_grammar.h); {"type": "json_schema",
// "json_schema": {"name", "description", "schema", "strict"}}: structured outputs, an instance of
// the schema (json_schema.h's subset, whatever "strict" says; beyond it a 400 names what). Both
// must end at EOS, so not with ignore_eos.
static int get_response_format(const cJSON *o, const openai_limits *lim, burst_request *req, api_error *e) {
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(o, "response_format");
    if (!format || cJSON_IsNull(format)) return 1;
    const cJSON *type = cJSON_IsObject(format) ? cJSON_GetObjectItemCaseSensitive(format, "type") : NULL;
    const char *name = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(name, "text")) return 1;
    if ((strcmp(name, "json_object") && strcmp(name, "json_schema")) || !lim->json)
        return BAD(e, "'response_format' must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                      "\"json_schema\", \"json_schema\": {\"schema\": {...}}}");
    if (req->ignore_eos) return BAD(e, "'response_format' %s ends at EOS: not with 'ignore_eos'", name);
    req->sampling.json = lim->json;
    if (!strcmp(name, "json_object")) return 1;
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(format, "json_schema");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    const cJSON *schema_name = cJSON_GetObjectItemCaseSensitive(js, "name");
    if (!cJSON_IsObject(js) || !cJSON_IsObject(schema))
        return BAD(e, "'response_format.json_schema' must be an object holding the 'schema' (an object)");
    if (schema_name && !cJSON_IsString(schema_name))
        return BAD(e, "'response_format.json_schema.name' must be a string");
    char why[sizeof e->message];
    req->json_schema = json_schema_compile(schema, "response_format.json_schema.schema", why, sizeof why);
    req->sampling.json_schema = req->json_schema;
    return req->json_schema ? 1 : BAD(e, "%s", why);
}

// tools[i]'s parameters (a JSON schema; none: no arguments) compiled alone, so that a fault is
// named by its place; *params gets a copy of them (or of the schema of none) that the caller owns.
static json_schema *compile_parameters(const cJSON *tool, int i, cJSON **params, api_error *e) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(tool, "function");
    const cJSON *given = cJSON_GetObjectItemCaseSensitive(f, "parameters");
    if (given && !cJSON_IsObject(given))
        return BAD(e, "'tools'[%d] function parameters must be a JSON schema (an object)", i), NULL;
    *params = given ? cJSON_Duplicate(given, 1) : cJSON_Parse("{\"type\": \"object\", \"additionalProperties\": false}");
    char why[sizeof e->message], where[64];
    snprintf(where, sizeof where, "tools[%d].function.parameters", i);
    json_schema *s = json_schema_compile(*params, where, why, sizeof why);
    if (!s) BAD(e, "%s", why);
    return s;
}

static const char *tool_name(const cJSON *tools, int i) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(tools, i), "function");
    return cJSON_GetObjectItemCaseSensitive(f, "name")->valuestring;
}

// A call of function name in "required"'s list: {"name": name, "arguments": params} (params taken,
// an $id given so that its own $refs stay its own inside the list).
static cJSON *call_schema(const char *name, cJSON *params, int i) {
    cJSON *o = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(o, "properties");
    cJSON_AddStringToObject(o, "type", "object");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "name"), "const", name);
    char id[32];
    snprintf(id, sizeof id, "tools/%d", i);
    if (!cJSON_GetObjectItemCaseSensitive(params, "$id")) cJSON_AddStringToObject(params, "$id", id);
    cJSON_AddItemToObject(props, "arguments", params);
    cJSON_AddItemToObject(o, "required", cJSON_CreateStringArray((const char *[]){"name", "arguments"}, 2));
    cJSON_AddFalseToObject(o, "additionalProperties");
    return o;
}

// "required"'s schema: {"tool_calls": [calls of any of the n tools: at least one, and at most one
// unless parallel]}.
static json_schema *compile_calls(const cJSON *tools, int n, int parallel, api_error *e) {
    cJSON *top = cJSON_CreateObject(), *list = cJSON_AddObjectToObject(cJSON_AddObjectToObject(top, "properties"), "tool_calls");
    cJSON_AddStringToObject(top, "type", "object");
    cJSON_AddItemToObject(top, "required", cJSON_CreateStringArray((const char *[]){"tool_calls"}, 1));
    cJSON_AddFalseToObject(top, "additionalProperties");
    cJSON_AddStringToObject(list, "type", "array");
    cJSON_AddNumberToObject(list, "minItems", 1);
    if (!parallel) cJSON_AddNumberToObject(list, "maxItems", 1);
    cJSON *alts = cJSON_AddArrayToObject(cJSON_AddObjectToObject(list, "items"), "anyOf");
    for (int i = 0; i < n; i++) {
        cJSON *params = NULL;
        json_schema *alone = compile_parameters(cJSON_GetArrayItem(tools, i), i, &params, e);
        if (!alone) {
            cJSON_Delete(params);
            cJSON_Delete(top);
            return NULL;
        }
        json_schema_free(alone);
        cJSON_AddItemToArray(alts, call_schema(tool_name(tools, i), params, i));
    }
    char why[sizeof e->message];
    json_schema *s = json_schema_compile(top, "tools", why, sizeof why);
    cJSON_Delete(top);
    if (!s) BAD(e, "%s", why);
    return s;
}

// A chat's "tools" (functions: {"type": "function", "function": {"name", "description",
// "parameters", "strict"}}), "tool_choice" and "parallel_tool_calls". The answer is calls, each
// one's arguments held to its function's parameters as response_format json_schema holds a text,
// sent as the message's "tool_calls". A function named ({"type": "function", "function": {"name"}}):
// one call of it, the text its arguments (vLLM's named function calling). "required": one or more
// calls of any of the tools (one without parallel_tool_calls), the text {"tool_calls": [{"name",
// "arguments"}, ...]} (an anyOf of the tools, each told by its name: at most JSON_MAX_BRANCHES).
// "none" leaves the tools out. "auto", the default with tools, is a 400: burstd cannot tell a
// model's call from its text. The tools are not put in the prompt.
static int get_tools(const cJSON *o, openai_kind kind, burst_request *req, openai_call *call, const openai_limits *lim,
                     api_error *e) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    int parallel = 1;
    const int n = cJSON_IsArray(tools) ? cJSON_GetArraySize(tools) : 0;
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools)) return BAD(e, "'tools' must be a list of functions");
    if (n && kind == OPENAI_COMPLETION) return BAD(e, "'tools' are for chat completions");
    if (!get_bool(o, "parallel_tool_calls", &parallel, e)) return 0;
    const cJSON *named = NULL; // the function tool_choice names (its "function" object)
    if (cJSON_IsObject(choice)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(choice, "type");
        named = cJSON_GetObjectItemCaseSensitive(choice, "function");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") ||
            !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(named, "name")))
            return BAD(e, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}");
    } else if (choice && !cJSON_IsNull(choice) &&
               !(cJSON_IsString(choice) && (!strcmp(choice->valuestring, "none") || !strcmp(choice->valuestring, "auto") ||
                                            !strcmp(choice->valuestring, "required")))) {
        return BAD(e, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                      "\"function\": {\"name\": ...}}");
    }
    int at = -1; // the function named: tools[at]
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(tools, i), *type = cJSON_GetObjectItemCaseSensitive(t, "type");
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function"), *name = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") || !cJSON_IsString(name) || !name->valuestring[0])
            return BAD(e, "'tools'[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., \"parameters\": "
                          "{...}}}", i);
        for (int k = 0; k < i; k++)
            if (!strcmp(name->valuestring, tool_name(tools, k)))
                return BAD(e, "'tools'[%d] and 'tools'[%d] are both named '%s'", k, i, name->valuestring);
        if (named && !strcmp(name->valuestring, cJSON_GetObjectItemCaseSensitive(named, "name")->valuestring)) at = i;
    }
    const char *mode = cJSON_IsString(choice) ? choice->valuestring : named ? "function" : "auto";
    if (!n) {
        if (named || !strcmp(mode, "required")) return BAD(e, "'tool_choice' %s needs 'tools'", mode);
        return 1;
    }
    if (!strcmp(mode, "none")) return 1;
    if (!strcmp(mode, "auto"))
        return BAD(e, "'tool_choice' \"auto\" (the default with 'tools') is not supported: burstd cannot tell a call from "
                      "text; ask for \"required\" (calls of any of the tools) or name the function ({\"type\": "
                      "\"function\", \"function\": {\"name\": ...}})");
    if (named && at < 0) return BAD(e, "'tool_choice' names a function 'tools' does not hold");
    if (!named && n > JSON_MAX_BRANCHES)
        return BAD(e, "'tool_choice' \"required\" takes at most %d tools (name the function, or pass fewer)",
                   JSON_MAX_BRANCHES);
    if (req->sampling.json) return BAD(e, "a function call and 'response_format' cannot both shape the answer");
    if (req->ignore_eos) return BAD(e, "a function call ends at EOS: not with 'ignore_eos'");
    if (named) {
        cJSON *params = NULL;
        req->json_schema = compile_parameters(cJSON_GetArrayItem(tools, at), at, &params, e);
        cJSON_Delete(params);
        if (!req->json_schema) return 0;
        call->tool = strdup(tool_name(tools, at));
    } else {
        if (!(req->json_schema = compile_calls(tools, n, parallel, e))) return 0;
        call->tool_calls = 1;
    }
    req->sampling.json = lim->json, req->sampling.json_schema = req->json_schema;
    return 1;
}

// Fields that would change the answer and that burstd does not do: a 400 says so, rather than an
// answer that ignores them. Their harmless values (null, 1, an empty list) pass.
static int reject_unsupported(const cJSON *o, api_error *e) {
    const cJSON *suffix = cJSON_GetObjectItemCaseSensitive(o, "suffix");
    const cJSON *best_of = cJSON_GetObjectItemCaseSensitive(o, "best_of");
    const cJSON *functions = cJSON_GetObjectItemCaseSensitive(o, "functions");
    if (suffix && !cJSON_IsNull(suffix) && !(cJSON_IsString(suffix) && !suffix->valuestring[0]))
        return BAD(e, "'suffix' (text insertion) is not supported");
    if (best_of && !cJSON_IsNull(best_of) && !(cJSON_IsNumber(best_of) && best_of->valuedouble == 1))
        return BAD(e, "'best_of' other than 1 is not supported");
    if (functions && !cJSON_IsNull(functions) && !(cJSON_IsArray(functions) && cJSON_GetArraySize(functions) == 0))
        return BAD(e, "'functions' (deprecated) is not supported: use 'tools' with a named 'tool_choice'");
    return 1;
}

// "n": completions of each prompt, each in a KV slot of its own (so at most the slots). With echo,
// each choice's echo is its prompt's text (texts[i], or prompt i's ids decoded).
static int get_choices(const cJSON *o, const openai_limits *lim, burst_request *req, openai_call *call, int echo,
                       const char **texts, api_error *e) {
    double n = 1;
    if (!get_int(o, "n", 1, 1e9, &n, e)) return 0;
    if (n > lim->max_choices)
        return BAD(e, "'n' must be at most %d: each choice takes one of the server's KV slots (--slots)", lim->max_choices);
    req->n_choices = (int)n;
    call->n_choices = call->n_prompts * (int)n;
    call->state = burst_calloc((size_t)call->n_choices, sizeof *call->state);
    for (int i = 0; echo && i < call->n_prompts; i++) {
        char *text = texts[i] ? strdup(texts[i])
                              : tokenizer_decode(lim->tok, i ? call->prompts[i] : req->prompt, i ? call->prompt_lens[i] : req->n_prompt);
        for (int c = 0; c < (int)n; c++) call->state[i * (int)n + c].echo = c && text ? strdup(text) : text;
    }
    return 1;
}

int openai_parse(openai_kind kind, const char *body, const openai_limits *lim, burst_request *req,
                 openai_call *call, api_error *e) {
    cJSON *o = cJSON_Parse(body);
    int ok = 1;
    if (!cJSON_IsObject(o)) ok = BAD(e, "the body must be a JSON object%s", o ? "" : " (it is not valid JSON)");
    const cJSON *model = o ? cJSON_GetObjectItemCaseSensitive(o, "model") : NULL;
    if (ok && model && !cJSON_IsString(model)) ok = BAD(e, "'model' must be a string");
    if (ok && model && strcmp(model->valuestring, lim->model)) ok = api_error_model_not_found(e, lim->model, model->valuestring);
    ok = ok && reject_unsupported(o, e);
    const char **texts = NULL; // each prompt's string (or NULL: ids), borrowed from o
    int echo = 0;
    if (kind == OPENAI_CHAT) {
        call->n_prompts = 1;
        ok = ok && get_messages(o, lim, req, e);
    } else {
        ok = ok && get_prompts(o, lim, req, call, &texts, e);
    }
    ok = ok && get_bool(o, "stream", &call->stream, e) && get_stream_options(o, call, e) && get_stop(o, req, e) &&
         get_stop_ids(o, lim, req, e);
    ok = ok && get_sampling(o, lim, req, e) && get_logit_bias(o, lim, req, e) && get_response_format(o, lim, req, e) &&
         get_tools(o, kind, req, call, lim, e) && get_logprobs(o, kind, req, call, e);
    ok = ok && (kind == OPENAI_CHAT || get_echo(o, req, &echo, e)) && get_choices(o, lim, req, call, echo, texts, e);
    ok = ok && get_max_tokens(o, kind, lim, req, call, echo, e);
    free(texts);
    cJSON_Delete(o);
    return ok;
}

void openai_call_free(openai_call *call) {
    for (int i = 0; call->prompts && i < call->n_prompts; i++) free(call->prompts[i]);
    for (int i = 0; call->state && i < call->n_choices; i++) free(call->state[i].echo), free(call->state[i].calls);
    free(call->prompts);
    free(call->prompt_lens);
    free(call->state);
    free(call->tool);
    call->prompts = NULL, call->prompt_lens = NULL, call->state = NULL, call->tool = NULL;
}
