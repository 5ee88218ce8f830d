#include "config.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#include "json_file.h"

// Integer field: absent uses def when !required; present must be a whole number in int range.
static burst_status get_int(const cJSON *root, const char *path, const char *key, int required,
                            int def, int *out, burst_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (required)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: field %s missing (want an integer)",
                              path, key);
        *out = def;
        return BURST_OK;
    }
    // Llama-3-style configs list several eos ids; the first is the one generation stops on.
    if (cJSON_IsArray(j) && cJSON_GetArraySize(j) > 0) j = cJSON_GetArrayItem(j, 0);
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (!(v >= INT_MIN && v <= INT_MAX) || v != floor(v))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: field %s is not an integer", path, key);
    *out = (int)v;
    return BURST_OK;
}

static burst_status get_float(const cJSON *root, const char *path, const char *key, int required,
                              float def, float *out, burst_error *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!j || cJSON_IsNull(j)) {
        if (required)
            return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: field %s missing (want a number)",
                              path, key);
        *out = def;
        return BURST_OK;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble) || j->valuedouble <= 0)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: field %s is not a positive number", path,
                          key);
    *out = (float)j->valuedouble;
    return BURST_OK;
}

// Fields that, when present, name something this server does not implement.
static burst_status check_supported(const cJSON *root, const char *path, burst_error *err) {
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "hidden_act");
    if (act && (!cJSON_IsString(act) || strcmp(act->valuestring, "silu") != 0))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: hidden_act %s unsupported (want silu)", path,
                          cJSON_IsString(act) ? json_show(act->valuestring) : "(not a string)");
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings");
    if (tie && !cJSON_IsBool(tie))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: tie_word_embeddings is not true/false", path);
    return BURST_OK;
}

static burst_status check_positive(const char *path, const char *key, int v, burst_error *err) {
    if (v > 0) return BURST_OK;
    return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: %s = %d (want > 0)", path, key, v);
}

static burst_status validate(const cJSON *root, const char *path, const llama_config *c,
                             burst_error *err) {
    burst_status s;
    const struct { const char *key; int v; } sizes[] = {
        {"hidden_size", c->dim},          {"intermediate_size", c->hidden_dim},
        {"num_hidden_layers", c->n_layers}, {"num_attention_heads", c->n_heads},
        {"num_key_value_heads", c->n_kv_heads}, {"vocab_size", c->vocab_size},
        {"max_position_embeddings", c->max_seq_len},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if ((s = check_positive(path, sizes[i].key, sizes[i].v, err))) return s;
    if (c->dim % c->n_heads)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: num_attention_heads = %d does not divide hidden_size = %d", path,
                          c->n_heads, c->dim);
    if (c->n_heads % c->n_kv_heads)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: num_key_value_heads = %d does not divide num_attention_heads = %d",
                          path, c->n_kv_heads, c->n_heads);
    if (c->head_dim % 2)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: head dim %d is odd (want even for RoPE)",
                          path, c->head_dim);
    int head_dim = c->head_dim;
    if ((s = get_int(root, path, "head_dim", 0, c->head_dim, &head_dim, err))) return s;
    if (head_dim != c->head_dim)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: head_dim = %d unsupported (want hidden_size / num_attention_heads = %d)",
                          path, head_dim, c->head_dim);
    if (c->bos_id < 0 || c->bos_id >= c->vocab_size || c->eos_id < 0 || c->eos_id >= c->vocab_size)
        return BURST_FAIL(err, BURST_ERR_FORMAT,
                          "%s: bos_token_id = %d / eos_token_id = %d outside vocab_size = %d", path,
                          c->bos_id, c->eos_id, c->vocab_size);
    return BURST_OK;
}

// rope_scaling: null, or {"type" (or "rope_type"): "linear" | "yarn", "factor": F, ...}. The others
// (dynamic NTK, whose frequencies change with the sequence's length; llama3; longrope) are refused.
static burst_status parse_rope_scaling(const cJSON *root, const char *path, llama_config *c, burst_error *err) {
    c->rope_scaling = ROPE_SCALING_NONE, c->rope_factor = 1;
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(root, "rope_scaling");
    if (!rs || cJSON_IsNull(rs)) return BURST_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!type) type = cJSON_GetObjectItemCaseSensitive(rs, "type");
    const char *name = cJSON_IsString(type) ? type->valuestring : NULL;
    if (!cJSON_IsObject(rs) || !name || (strcmp(name, "linear") && strcmp(name, "yarn") && strcmp(name, "default")))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: rope_scaling type %s unsupported (want linear or yarn)", path,
                          name ? json_show(name) : "(missing)");
    if (!strcmp(name, "default")) return BURST_OK;
    if (cJSON_GetObjectItemCaseSensitive(rs, "mscale") || cJSON_GetObjectItemCaseSensitive(rs, "mscale_all_dim"))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: rope_scaling mscale unsupported (DeepSeek's YaRN variant)", path);
    char where[512]; // messages name the field inside rope_scaling
    snprintf(where, sizeof where, "%s: rope_scaling", path);
    burst_status s;
    if ((s = get_float(rs, where, "factor", 1, 0, &c->rope_factor, err))) return s;
    c->rope_scaling = strcmp(name, "yarn") ? ROPE_SCALING_LINEAR : ROPE_SCALING_YARN;
    if (c->rope_factor < 1)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: factor %g (want >= 1)", where, c->rope_factor);
    if (c->rope_scaling != ROPE_SCALING_YARN) return BURST_OK;
    if ((s = get_int(rs, where, "original_max_position_embeddings", 0, c->max_seq_len, &c->rope_original_ctx, err)) ||
        (s = get_float(rs, where, "beta_fast", 0, 32, &c->rope_beta_fast, err)) ||
        (s = get_float(rs, where, "beta_slow", 0, 1, &c->rope_beta_slow, err)) ||
        (s = get_float(rs, where, "attention_factor", 0, 0.1f * logf(c->rope_factor) + 1, &c->rope_attention_factor,
                       err)))
        return s;
    if (c->rope_original_ctx < 1 || c->rope_beta_fast <= c->rope_beta_slow)
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: original_max_position_embeddings %d, beta_fast %g, "
                          "beta_slow %g (want >= 1, and beta_fast > beta_slow)", where, c->rope_original_ctx,
                          c->rope_beta_fast, c->rope_beta_slow);
    return BURST_OK;
}

static burst_status parse(const cJSON *root, const char *path, llama_config *c, burst_error *err) {
    burst_status s;
    if (!cJSON_IsObject(root))
        return BURST_FAIL(err, BURST_ERR_FORMAT, "%s: not a JSON object", path);
    if ((s = check_supported(root, path, err))) return s;
    if ((s = get_int(root, path, "hidden_size", 1, 0, &c->dim, err))) return s;
    if ((s = get_int(root, path, "intermediate_size", 1, 0, &c->hidden_dim, err))) return s;
    if ((s = get_int(root, path, "num_hidden_layers", 1, 0, &c->n_layers, err))) return s;
    if ((s = get_int(root, path, "num_attention_heads", 1, 0, &c->n_heads, err))) return s;
    if ((s = get_int(root, path, "num_key_value_heads", 0, c->n_heads, &c->n_kv_heads, err)))
        return s;
    if ((s = get_int(root, path, "vocab_size", 1, 0, &c->vocab_size, err))) return s;
    if ((s = get_int(root, path, "max_position_embeddings", 1, 0, &c->max_seq_len, err))) return s;
    if ((s = get_float(root, path, "rms_norm_eps", 1, 0, &c->norm_eps, err))) return s;
    if ((s = get_float(root, path, "rope_theta", 0, 10000.0f, &c->rope_theta, err))) return s;
    if ((s = get_int(root, path, "bos_token_id", 0, 1, &c->bos_id, err))) return s;
    if ((s = get_int(root, path, "eos_token_id", 0, 2, &c->eos_id, err))) return s;
    if ((s = parse_rope_scaling(root, path, c, err))) return s;
    c->tie_embeddings = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "tie_word_embeddings"));
    c->head_dim = c->n_heads > 0 ? c->dim / c->n_heads : 0;
    return validate(root, path, c, err);
}

burst_status weights_config_load(const char *path, llama_config *out, burst_error *err) {
    cJSON *root = NULL;
    burst_status s = json_file_load(path, &root, err);
    if (s) return s;
    llama_config c = {0};
    s = parse(root, path, &c, err);
    cJSON_Delete(root);
    if (!s) *out = c;
    return s;
}
