// libFuzzer target: JSON schemas (model/json_schema.h) and the grammar on them (json_grammar.h)
// on arbitrary input: the bytes before the first NUL are a schema, the rest text fed to the
// grammar a byte at a time, the bytes it refuses skipped. Compiling must give a schema or a
// reason; nothing may crash, leak or touch memory it does not own; text the grammar calls a whole
// instance must parse as JSON (cJSON: where it has no \u escape, which cJSON refuses for lone
// surrogates).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/json_grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const uint8_t *nul = memchr(data, 0, n);
    if (!nul) return 0;
    cJSON *j = cJSON_ParseWithLength((const char *)data, (size_t)(nul - data));
    char err[256];
    json_schema *schema = j ? json_schema_compile(j, "schema", err, sizeof err) : NULL;
    cJSON_Delete(j);
    if (!schema) return 0;
    json_state s, next;
    json_start(&s, schema);
    char *taken = malloc(n + 1);
    size_t len = 0;
    for (const uint8_t *c = nul + 1; c < data + n; c++) {
        json_copy(&next, &s);
        if (json_feed(&next, (const char *)c, 1)) json_copy(&s, &next), taken[len++] = (char)*c;
    }
    taken[len] = 0;
    if (json_complete(&s) && !strstr(taken, "\\u")) {
        cJSON *parsed = cJSON_ParseWithLength(taken, len);
        if (!parsed) abort();
        cJSON_Delete(parsed);
    }
    free(taken);
    json_schema_free(schema);
    return 0;
}
