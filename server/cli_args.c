#include "cli_args.h"

#include "build_info.h" // generated: cmake/build_info.cmake

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "model/backend.h"
#include "weights/json_file.h"

const char *cli_build_info(void) {
    static char info[256];
    const char *unit = backend_cpu_bf16_unit(); // what the default backend rests on
    snprintf(info, sizeof info, "%s (git %s; cpu%s%s%s)", BURST_VERSION, BURST_COMMIT, unit ? " with " : "",
             unit ? unit : "", BURST_BUILT_WITH);
    return info;
}

const char *cli_value(const char *prog, const char *usage, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
        fputs(usage, stdout);
        exit(0);
    }
    if (!strcmp(f, "--version")) {
        printf("%s %s\n", prog, cli_build_info());
        exit(0);
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: %s: unknown option or missing value\n%s", prog, f, usage);
        return NULL;
    }
    return argv[++*i];
}

int cli_parse_long(const char *prog, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) {
        fprintf(stderr, "%s: %s %s: want an integer in [%ld, %ld]\n", prog, flag, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_kv_dtype(const char *prog, const char *flag, const char *s, burst_dtype *out) {
    burst_dtype t;
    if (!dtype_parse(s, &t) || t == DTYPE_F16) {
        fprintf(stderr, "%s: %s %s: want f32 or bf16\n", prog, flag, s);
        return 0;
    }
    *out = t;
    return 1;
}

int cli_parse_quantize(const char *prog, const char *flag, const char *s, int *out) {
    if (quant_parse(s, out)) return 1;
    fprintf(stderr, "%s: %s %s: want q8, q4 or none\n", prog, flag, s);
    return 0;
}

int cli_parse_chat_template(const char *prog, const char *flag, const char *s, chat_template *out) {
    if (chat_template_named(s, out)) return 1;
    fprintf(stderr, "%s: %s %s: want llama-2, vicuna or zephyr\n", prog, flag, s);
    return 0;
}

chat_template cli_chat_template(const char *dir, const chat_template *given) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    burst_error err;
    chat_template tpl = given ? *given : CHAT_LLAMA2, looks;
    cJSON *root;
    if (json_file_load(path, &root, &err)) return tpl; // none (or not JSON): nothing to go by
    cJSON *jinja = cJSON_GetObjectItemCaseSensitive(root, "chat_template"), *named;
    cJSON_ArrayForEach(named, (cJSON_IsArray(jinja) ? jinja : NULL)) {
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(named, "name");
        if (cJSON_IsString(name) && !strcmp(name->valuestring, "default"))
            jinja = cJSON_GetObjectItemCaseSensitive(named, "template");
    }
    if (cJSON_IsString(jinja)) {
        const int known = chat_template_guess(jinja->valuestring, &looks);
        if (known && !given) {
            tpl = looks;
            LOG_I("chat template %s, as %s's chat_template", chat_template_name(tpl), path);
        } else if (!known) {
            LOG_W("%s: its chat_template is none that burst has (llama-2, vicuna, zephyr): chats use %s%s; send "
                  "/v1/completions prompts in the model's own format", path, chat_template_name(tpl),
                  given ? "" : " (the default)");
        } else if (looks != tpl) {
            LOG_W("%s: its chat_template looks like %s's (--chat-template %s), but chats use --chat-template %s", path,
                  chat_template_name(looks), chat_template_name(looks), chat_template_name(tpl));
        }
    }
    cJSON_Delete(root);
    return tpl;
}

int cli_parse_float(const char *prog, const char *flag, const char *s, float lo, float hi, float *out) {
    char *end;
    float v = strtof(s, &end);
    if (*end || end == s || !(v >= lo && v <= hi)) {
        fprintf(stderr, "%s: %s %s: want a number in [%g, %g]\n", prog, flag, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_on_off(const char *prog, const char *flag, const char *s, int *out) {
    if (strcmp(s, "on") && strcmp(s, "off")) {
        fprintf(stderr, "%s: %s %s: want on or off\n", prog, flag, s);
        return 0;
    }
    *out = !strcmp(s, "on");
    return 1;
}

int cli_step_default(const char *backend, int cpu) { return backend_on_device(backend) ? 8192 : cpu; }

const char *cli_api_key(const char *given) {
    const char *env = getenv("BURST_API_KEY");
    return given ? given : env && *env ? env : NULL;
}
