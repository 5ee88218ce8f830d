// The small routes: /health, /v1/models, /metrics, /tokenize, /detokenize.
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "http_impl.h"

static enum MHD_Result reply_json_status(http_request *h, int status, cJSON *o) {
    char *body = cJSON_PrintUnformatted(o);
    BURST_ASSERT(body && "http: out of memory formatting JSON");
    cJSON_Delete(o);
    return http_reply(h, status, "application/json", body);
}

static enum MHD_Result reply_json(http_request *h, cJSON *o) { return reply_json_status(h, MHD_HTTP_OK, o); }

static enum MHD_Result bad_request(http_server *s, http_request *h, cJSON *o, const char *msg) {
    api_error e;
    api_error_set(&e, 400, "invalid_request_error", NULL, "%s", msg);
    cJSON_Delete(o);
    return http_reply_error(s, h, &e);
}

enum MHD_Result http_health(http_server *s, http_request *h) {
    int running, waiting;
    engine_counts(s->eng, &running, &waiting);
    // A model that lost a node of its cluster cannot serve again: say so, for load balancers.
    // A draining server takes no new work: load balancers should look elsewhere.
    const char *fault = llama_fault(s->model);
    int draining = atomic_load(&s->draining);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "status", fault ? "error" : draining ? "draining" : "ok");
    if (fault) cJSON_AddStringToObject(o, "error", fault);
    cJSON_AddStringToObject(o, "model", s->model_name);
    cJSON_AddNumberToObject(o, "running", running);
    cJSON_AddNumberToObject(o, "waiting", waiting);
    return reply_json_status(h, fault || draining ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK, o);
}

// The model object of /v1/models and /v1/models/{id}.
static cJSON *model_json(const http_server *s) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", s->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->started);
    cJSON_AddStringToObject(m, "owned_by", "burst");
    cJSON_AddNumberToObject(m, "max_model_len", s->limits.ctx);
    return m;
}

enum MHD_Result http_models(http_server *s, http_request *h) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "data"), model_json(s));
    return reply_json(h, o);
}

enum MHD_Result http_model(http_server *s, http_request *h) {
    const char *id = h->url + strlen("/v1/models/");
    api_error e;
    if (strcmp(id, s->model_name)) return http_reply_error(s, h, (api_error_model_not_found(&e, s->model_name, id), &e));
    return reply_json(h, model_json(s));
}

enum MHD_Result http_metrics(http_server *s, http_request *h) {
    // The daemon through the connection: s->daemon is set after MHD_start_daemon returns, when
    // connection threads may already run.
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(h->conn, MHD_CONNECTION_INFO_DAEMON);
    const union MHD_DaemonInfo *di = ci ? MHD_get_daemon_info(ci->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS) : NULL;
    if (di) metrics_set(s->met, METRIC_HTTP_CONNECTIONS, di->num_connections);
    return http_reply(h, MHD_HTTP_OK, "text/plain; version=0.0.4", metrics_format(s->met));
}

// {"content": string, "add_special": bool (default false: no BOS)} -> {"tokens": [ids]}
enum MHD_Result http_tokenize(http_server *s, http_request *h) {
    cJSON *o = cJSON_Parse(h->body);
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(o, "content");
    const cJSON *special = cJSON_GetObjectItemCaseSensitive(o, "add_special");
    if (!cJSON_IsObject(o) || !cJSON_IsString(content) || (special && !cJSON_IsBool(special)))
        return bad_request(s, h, o, "want {\"content\": string, \"add_special\": optional boolean}");
    int *ids = NULL, n = 0;
    burst_error err = {{0}};
    if (tokenizer_encode(s->limits.tok, content->valuestring, cJSON_IsTrue(special), &ids, &n, &err))
        return bad_request(s, h, o, err.msg);
    cJSON_Delete(o);
    o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "tokens", cJSON_CreateIntArray(ids, n));
    free(ids);
    return reply_json(h, o);
}

// {"tokens": [ids]} -> {"content": string}
enum MHD_Result http_detokenize(http_server *s, http_request *h) {
    cJSON *o = cJSON_Parse(h->body);
    const cJSON *tokens = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (!cJSON_IsObject(o) || !cJSON_IsArray(tokens))
        return bad_request(s, h, o, "want {\"tokens\": [token ids]}");
    int n = cJSON_GetArraySize(tokens), *ids = burst_malloc(sizeof(int) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(tokens, i);
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 ||
            t->valuedouble >= s->limits.vocab) {
            free(ids);
            char msg[128];
            snprintf(msg, sizeof msg, "'tokens'[%d] must be a token id in [0, %d)", i, s->limits.vocab);
            return bad_request(s, h, o, msg);
        }
        ids[i] = (int)t->valuedouble;
    }
    char *text = tokenizer_decode(s->limits.tok, ids, n);
    free(ids);
    cJSON_Delete(o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text ? text : "");
    free(text);
    return reply_json(h, o);
}
