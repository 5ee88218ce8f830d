#include "json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/burst.h"

// JSON_PATTERN_MIN_LENGTH: a pattern's ends take 8 bytes for each character of its minLength
enum { JSON_SCHEMA_MAX_NESTING = 64, JSON_PATTERN_MIN_LENGTH = 1024 };

// Classes of a value's first byte (json_node.starts).
enum { C_OBJECT = 1, C_ARRAY = 2, C_STRING = 4, C_NUMBER = 8, C_BOOLEAN = 16, C_NULL = 32 };

int json_start_class(unsigned char c) {
    switch (c) {
    case '{': return C_OBJECT;
    case '[': return C_ARRAY;
    case '"': return C_STRING;
    case 't':
    case 'f': return C_BOOLEAN;
    case 'n': return C_NULL;
    default: return c == '-' || (c >= '0' && c <= '9') ? C_NUMBER : 0;
    }
}

static int types_starts(int types) {
    return (types & JSON_OBJECT ? C_OBJECT : 0) | (types & JSON_ARRAY ? C_ARRAY : 0) |
           (types & JSON_STRING ? C_STRING : 0) | (types & (JSON_NUMBER | JSON_INTEGER) ? C_NUMBER : 0) |
           (types & JSON_BOOLEAN ? C_BOOLEAN : 0) | (types & JSON_NULL ? C_NULL : 0);
}

// JSON mode's: node 0 an object whose values are node 1, any value.
static json_node any_object_nodes[] = {
    {.types = JSON_OBJECT, .starts = C_OBJECT, .last_required = -1, .extra = 1, .items = -1,
     .max_items = JSON_UNLIMITED, .max_length = JSON_UNLIMITED},
    {.types = JSON_ANY, .starts = C_OBJECT | C_ARRAY | C_STRING | C_NUMBER | C_BOOLEAN | C_NULL, .last_required = -1,
     .extra = 1, .items = 1, .max_items = JSON_UNLIMITED, .max_length = JSON_UNLIMITED},
};
static const json_schema any_object = {.nodes = any_object_nodes, .root = 0, .n_nodes = 2};

const json_schema *json_schema_any_object(void) { return &any_object; }

typedef struct {
    json_schema *s;
    const cJSON *top;
    struct seen {
        const cJSON *json;
        int node; // -1 while a $ref's target is being compiled
    } *seen;
    int n_seen, cap_seen, cap_nodes, cap_texts, cap_props, cap_alts, cap_patterns;
    int any;   // the node of any value (-1: none yet)
    int depth; // schemas within schemas now (a bound: node_of recurses)
    const char *where; // the schema's name: errors name places under it
    char *err;
    size_t n_err;
} compiler;

static int fail(compiler *c, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(compiler *c, const char *path, const char *fmt, ...) {
    if (c->err[0]) return -1; // the first reason stands
    int n = snprintf(c->err, c->n_err, "%s: ", path);
    va_list ap;
    va_start(ap, fmt);
    if (n >= 0 && (size_t)n < c->n_err) vsnprintf(c->err + n, c->n_err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

// Room for one more of n elements of size bytes at *p (capacity *cap).
static void grow(void *p, int *cap, int n, size_t size) {
    if (n < *cap) return;
    *cap = *cap ? 2 * *cap : 16;
    *(void **)p = burst_realloc(*(void **)p, size * (size_t)*cap);
}

static int new_node(compiler *c, const char *path) {
    if (c->s->n_nodes == JSON_UNLIMITED) return fail(c, path, "more than %d schemas", JSON_UNLIMITED);
    grow(&c->s->nodes, &c->cap_nodes, c->s->n_nodes, sizeof *c->s->nodes);
    c->s->nodes[c->s->n_nodes] = (json_node){.last_required = -1, .extra = -1, .items = -1,
                                             .max_items = JSON_UNLIMITED, .max_length = JSON_UNLIMITED};
    return c->s->n_nodes++;
}

static int any_node(compiler *c, const char *path) {
    if (c->any >= 0) return c->any;
    const int n = new_node(c, path);
    if (n < 0) return -1;
    json_node *node = &c->s->nodes[n];
    node->types = JSON_ANY, node->extra = n, node->items = n;
    return c->any = n;
}

static int add_text(compiler *c, char *text, int index) {
    grow(&c->s->texts, &c->cap_texts, c->s->n_texts, sizeof *c->s->texts);
    c->s->texts[c->s->n_texts] = (json_text){text, (int)strlen(text), index};
    return c->s->n_texts++;
}

static int text_order(const void *a, const void *b) {
    const json_text *x = a, *y = b;
    const int m = memcmp(x->text, y->text, (size_t)(x->len < y->len ? x->len : y->len));
    return m ? m : x->len - y->len;
}

static void sort_texts(compiler *c, int first, int n) {
    if (n) qsort(c->s->texts + first, (size_t)n, sizeof *c->s->texts, text_order); // (texts may be NULL)
}

static int is_annotation(const char *key) {
    static const char *const names[] = {"title", "description", "default",     "examples",   "$schema",  "$id",
                                        "$comment", "$defs",     "definitions", "deprecated", "readOnly", "writeOnly",
                                        "discriminator"}; // (OpenAPI's, which Pydantic writes beside oneOf)
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(key, names[i])) return 1;
    return 0;
}

static void child_path(char *out, size_t n, const char *path, const char *key, int index) {
    if (index >= 0) snprintf(out, n, "%s.%s[%d]", path, key, index);
    else snprintf(out, n, "%s.%s", path, key);
}

static int node_of(compiler *c, const cJSON *j, const char *path);

// "#", "#/$defs/NAME" or "#/definitions/NAME": the schema it names, within the innermost schema
// with an "$id" around the $ref (a schema resource: a schema put inside another keeps its refs), or
// the top.
static const cJSON *resolve(compiler *c, const char *ref) {
    if (!strcmp(ref, "#")) return c->top;
    const char *const places[] = {"$defs", "definitions"};
    for (int i = 0; i < 2; i++) {
        const size_t n = strlen(places[i]);
        if (strncmp(ref, "#/", 2) || strncmp(ref + 2, places[i], n) || ref[n + 2] != '/') continue;
        const char *name = ref + n + 3; // (JSON pointer's escapes, ~0 and ~1, are not read)
        return strchr(name, '/') || strchr(name, '~')
                   ? NULL
                   : cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->top, places[i]), name);
    }
    return NULL;
}

// A schema that is another's ($ref, or allOf of one): the other's node.
static int alias_node(compiler *c, const cJSON *j, const char *path) {
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(j, "$ref"), *all = cJSON_GetObjectItemCaseSensitive(j, "allOf");
    for (const cJSON *k = j->child; k; k = k->next)
        if (k != ref && k != all && !is_annotation(k->string))
            return fail(c, path, "'%s' beside '%s' is not supported", k->string, ref ? "$ref" : "allOf");
    char sub[256];
    const cJSON *target;
    if (ref && all) return fail(c, path, "'$ref' beside 'allOf' is not supported");
    if (ref) {
        if (!cJSON_IsString(ref) || !(target = resolve(c, ref->valuestring)))
            return fail(c, path, "'$ref' must be \"#\", \"#/$defs/NAME\" or \"#/definitions/NAME\" naming a schema");
        child_path(sub, sizeof sub, path, "$ref", -1);
    } else {
        if (!cJSON_IsArray(all) || cJSON_GetArraySize(all) != 1)
            return fail(c, path, "'allOf' is supported with one schema only");
        target = all->child;
        child_path(sub, sizeof sub, path, "allOf", 0);
    }
    grow(&c->seen, &c->cap_seen, c->n_seen, sizeof *c->seen);
    const int at = c->n_seen++;
    c->seen[at] = (struct seen){j, -1};
    const int n = node_of(c, target, sub);
    c->seen[at].node = n;
    return n;
}

// A count keyword (minItems, ...): an integer >= 0, absent: keeps *out.
static int get_count(compiler *c, const cJSON *j, const char *key, const char *path, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return fail(c, path, "'%s' must be an integer >= 0", key);
    if (!strncmp(key, "min", 3) && v->valuedouble > JSON_UNLIMITED)
        return fail(c, path, "'%s' above %d is not supported", key, JSON_UNLIMITED);
    *out = v->valuedouble >= JSON_UNLIMITED ? JSON_UNLIMITED : (int)v->valuedouble;
    return 0;
}

static int parse_types(compiler *c, const cJSON *type, const char *path) {
    static const char *const names[] = {"object", "array", "string", "number", "integer", "boolean", "null"};
    int types = 0;
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : type; t; t = cJSON_IsArray(type) ? t->next : NULL) {
        int bit = 0;
        for (int i = 0; cJSON_IsString(t) && i < 7; i++)
            if (!strcmp(t->valuestring, names[i])) bit = 1 << i;
        if (!bit)
            return fail(c, path, "'type' must name object, array, string, number, integer, boolean or null, or list them");
        types |= bit;
    }
    return types ? types : fail(c, path, "'type' must not be an empty list");
}

static int value_types(const cJSON *v) {
    if (cJSON_IsNumber(v))
        return JSON_NUMBER | (isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) ? JSON_INTEGER : 0);
    return cJSON_IsObject(v)   ? JSON_OBJECT
           : cJSON_IsArray(v)  ? JSON_ARRAY
           : cJSON_IsString(v) ? JSON_STRING
           : cJSON_IsBool(v)   ? JSON_BOOLEAN
                               : JSON_NULL;
}

// enum (or const): the values of the given types (all: types 0), printed and sorted.
static int add_values(compiler *c, int n, const cJSON *list, const cJSON *one, int types, const char *path) {
    const int first = c->s->n_texts;
    for (const cJSON *v = one ? one : list->child; v; v = one ? NULL : v->next)
        if (!types || value_types(v) & types) add_text(c, cJSON_PrintUnformatted(v), -1);
    json_node *node = &c->s->nodes[n];
    node->values = first, node->n_values = c->s->n_texts - first;
    if (!node->n_values) return fail(c, path, "no value of '%s' has the schema's 'type'", one ? "const" : "enum");
    sort_texts(c, first, node->n_values);
    return 0;
}

// A list of schemas (anyOf's, oneOf's, prefixItems'): their nodes, side by side in the schema's
// alts from *first (compiled before they are placed: nested lists place theirs meanwhile).
static int add_list(compiler *c, const cJSON *list, const char *key, const char *path, int *first) {
    const int count = cJSON_GetArraySize(list);
    int *nodes = burst_malloc(sizeof *nodes * (size_t)count), i = 0, ok = 1;
    char sub[256];
    for (const cJSON *a = list->child; a && ok; a = a->next, i++) {
        child_path(sub, sizeof sub, path, key, i);
        ok = (nodes[i] = node_of(c, a, sub)) >= 0;
    }
    for (int k = 0; ok && k < count; k++) {
        grow(&c->s->alts, &c->cap_alts, c->s->n_alts, sizeof *c->s->alts);
        c->s->alts[c->s->n_alts++] = nodes[k];
    }
    *first = c->s->n_alts - count;
    free(nodes);
    return ok ? 0 : -1;
}

// properties, required and additionalProperties of an object node.
static int add_object(compiler *c, int n, const cJSON *j, const char *path) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(j, "properties");
    const cJSON *required = cJSON_GetObjectItemCaseSensitive(j, "required");
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(j, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return fail(c, path, "'properties' must be an object");
    if (required && !cJSON_IsArray(required)) return fail(c, path, "'required' must be a list of names");
    const int count = props ? cJSON_GetArraySize(props) : 0;
    int *nodes = burst_malloc(sizeof *nodes * (size_t)(count ? count : 1)), i = 0, ok = 1;
    char sub[256];
    for (const cJSON *p = props ? props->child : NULL; p && ok; p = p->next, i++) {
        snprintf(sub, sizeof sub, "%s.properties.%s", path, p->string);
        ok = (nodes[i] = node_of(c, p, sub)) >= 0;
    }
    const int first_prop = c->s->n_props, first_name = c->s->n_texts;
    i = 0;
    for (const cJSON *p = props ? props->child : NULL; ok && p; p = p->next, i++) {
        grow(&c->s->props, &c->cap_props, c->s->n_props, sizeof *c->s->props);
        c->s->props[c->s->n_props++] = (json_prop){nodes[i], 0};
        cJSON *name = cJSON_CreateString(p->string);
        add_text(c, cJSON_PrintUnformatted(name), i);
        cJSON_Delete(name);
    }
    free(nodes);
    if (!ok) return -1;
    int last_required = -1;
    for (const cJSON *r = required ? required->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) return fail(c, path, "'required' must be a list of names");
        const cJSON *p = props ? props->child : NULL;
        for (i = 0; p && strcmp(p->string, r->valuestring); p = p->next) i++;
        if (!p) return fail(c, path, "'required' names '%.80s', which 'properties' does not give", r->valuestring);
        c->s->props[first_prop + i].required = 1;
        if (i > last_required) last_required = i;
    }
    sort_texts(c, first_name, count);
    int extra_node = -1; // (where properties are given, only those)
    if (!count && !cJSON_IsFalse(extra)) {
        child_path(sub, sizeof sub, path, "additionalProperties", -1);
        if ((extra_node = extra ? node_of(c, extra, sub) : any_node(c, path)) < 0) return -1;
    }
    json_node *node = &c->s->nodes[n];
    node->props = first_prop, node->n_props = count, node->names = first_name;
    node->last_required = last_required, node->extra = extra_node;
    return 0;
}

// k units of 10^-decimals (0 or 6) as decimal text.
static void units_text(char text[48], int64_t k, int decimals) {
    const uint64_t m = k < 0 ? 0 - (uint64_t)k : (uint64_t)k;
    if (!decimals) snprintf(text, 48, "%lld", (long long)k);
    else snprintf(text, 48, "%s%llu.%06llu", k < 0 ? "-" : "", (unsigned long long)(m / 1000000), (unsigned long long)(m % 1000000));
}

// The double a reader takes k units of 10^-decimals to be (Python's float of its decimal text).
static double units_value(int64_t k, int decimals) {
    char text[48];
    units_text(text, k, decimals);
    return strtod(text, NULL);
}

// Whether k units of 10^-decimals are at least x (above x where strict), as a reader compares them.
static int units_above(int64_t k, int decimals, double x, int strict) {
    const double v = units_value(k, decimals);
    return strict ? v > x : v >= x;
}

// minimum, maximum, exclusiveMinimum and exclusiveMaximum of an integer or number node: its range
// in units of 10^-decimals, inclusive: the least and the most units a reader takes to be within
// the bounds (where a double's rounding puts a decimal on a bound, as the reader's would).
static int add_range(compiler *c, int n, const cJSON *j, int decimals, const char *path) {
    static const char *const keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"};
    const double scale = decimals ? 1e6 : 1;
    int64_t lo = -(int64_t)JSON_RANGE_LIMIT, hi = (int64_t)JSON_RANGE_LIMIT;
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, keys[i]);
        if (!v) continue;
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return fail(c, path, "'%s' must be a number", keys[i]);
        const double x = v->valuedouble, units = x * scale;
        if (units > JSON_RANGE_LIMIT ? i < 2 : units < -JSON_RANGE_LIMIT && i >= 2) {
            char limit[48];
            units_text(limit, (int64_t)JSON_RANGE_LIMIT, decimals);
            return fail(c, path, "bounds beyond +-%s are not supported", limit);
        }
        if (units > JSON_RANGE_LIMIT || units < -JSON_RANGE_LIMIT) continue; // (no values beyond them anyway)
        const int strict = i % 2;
        int64_t k = (int64_t)(i < 2 ? ceil(units) : floor(units)); // then the rounding's last step
        if (i < 2) {
            while (units_above(k - 1, decimals, x, strict)) k--;
            while (!units_above(k, decimals, x, strict)) k++;
            if (k > lo) lo = k;
        } else {
            while (!units_above(k + 1, decimals, x, !strict)) k++;
            while (units_above(k, decimals, x, !strict)) k--;
            if (k < hi) hi = k;
        }
    }
    if (lo > hi) return fail(c, path, "no %s lies within its bounds", decimals ? "number" : "integer");
    json_node *node = &c->s->nodes[n];
    node->ranged = 1, node->decimals = decimals, node->minimum = lo, node->maximum = hi;
    return 0;
}

// multipleOf of an integer node without bounds: a whole number from 1 to 2^31 (from any digits so
// far, more can reach a multiple: k more make every remainder below 10^k). Beside bounds it could
// leave no integer to go on to, and a number's multiples may have fractions: refused.
static int add_multiple(compiler *c, int n, const cJSON *j, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "multipleOf");
    json_node *node = &c->s->nodes[n];
    if (node->types & JSON_NUMBER) return fail(c, path, "'multipleOf' of numbers is not supported (of integers it is)");
    if (node->ranged) return fail(c, path, "'multipleOf' beside bounds is not supported");
    if (!cJSON_IsNumber(v) || v->valuedouble < 1 || v->valuedouble > 2147483648.0 || v->valuedouble != floor(v->valuedouble))
        return fail(c, path, "'multipleOf' must be a whole number from 1 to 2147483648");
    node->multiple = (int64_t)v->valuedouble;
    return 0;
}

// Formats that a pattern holds (a narrowing: lowercase names of labels of at most 16 characters,
// where RFC 1123 allows 63; email addresses of dot-atoms; http and https URIs), and the most
// characters their RFCs allow. (Each within a pattern's 63 places.)
#define LABEL "[a-z0-9]([a-z0-9-]{0,14}[a-z0-9])?"
#define OCTET "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)"
static const struct {
    const char *name, *pattern;
    int max_length;
} pattern_formats[] = {
    {"email", "^[a-z0-9]+([._+-][a-z0-9]+)*@" LABEL "(\\." LABEL ")+$", 254},
    {"hostname", "^" LABEL "(\\." LABEL ")*$", 253},
    {"ipv4", "^(" OCTET "\\.){3}" OCTET "$", 15},
    {"uri",
     "^https?://" LABEL "(\\." LABEL ")*(:[1-9]\\d{0,3})?(/[A-Za-z0-9._~!$&'()*+,;=:@-]*)*"
     "(\\?[A-Za-z0-9._~!$&'()*+,;=:@/?-]*)?$",
     2083},
};

// Pattern re (what: its keyword, for errors) of a string node, with its lengths (set before).
static int add_pattern(compiler *c, int n, const char *re, const char *what, const char *path) {
    if (c->s->nodes[n].min_length > JSON_PATTERN_MIN_LENGTH)
        return fail(c, path, "'minLength' above %d beside %s is not supported", JSON_PATTERN_MIN_LENGTH, what);
    char why[256];
    grow(&c->s->patterns, &c->cap_patterns, c->s->n_patterns, sizeof *c->s->patterns);
    json_pattern *p = &c->s->patterns[c->s->n_patterns];
    if (json_pattern_compile(re, p, why, sizeof why)) return fail(c, path, "%s", why);
    c->s->nodes[n].pattern = ++c->s->n_patterns;
    const json_node *node = &c->s->nodes[n];
    json_pattern_lengths(p, node->min_length);
    if (!json_pattern_fits(p, p->start, 0, node->min_length, node->max_length == JSON_UNLIMITED ? -1 : node->max_length))
        return fail(c, path, "no string of its %s has a length within 'minLength' and 'maxLength'", what);
    return 0;
}

// A schema object's keywords into node n.
static int fill_node(compiler *c, int n, const cJSON *j, const char *path) {
    enum { TYPE, ENUM, CONST, PROPERTIES, REQUIRED, ADDITIONAL, ITEMS, PREFIX_ITEMS, MIN_ITEMS, MAX_ITEMS, MIN_LENGTH,
           MAX_LENGTH, FORMAT, PATTERN, MINIMUM, MAXIMUM, EXCLUSIVE_MINIMUM, EXCLUSIVE_MAXIMUM, MULTIPLE_OF, ANY_OF, ONE_OF,
           N_KEYWORDS };
    static const char *const keywords[N_KEYWORDS] = {
        "type",      "enum",     "const",    "properties", "required",  "additionalProperties",
        "items",     "prefixItems", "minItems", "maxItems", "minLength",  "maxLength", "format", "pattern",
        "minimum",   "maximum",  "exclusiveMinimum",       "exclusiveMaximum", "multipleOf", "anyOf", "oneOf"};
    int has[N_KEYWORDS] = {0};
    for (const cJSON *k = j->child; k; k = k->next) {
        int i = 0;
        while (i < N_KEYWORDS && strcmp(k->string, keywords[i])) i++;
        if (i < N_KEYWORDS) has[i] = 1;
        else if (!is_annotation(k->string)) return fail(c, path, "'%s' is not supported", k->string);
    }
    if (has[ANY_OF] && has[ONE_OF]) return fail(c, path, "'anyOf' beside 'oneOf' is not supported");
    if (has[ANY_OF] || has[ONE_OF]) {
        const char *key = keywords[has[ANY_OF] ? ANY_OF : ONE_OF];
        for (int i = 0; i < ANY_OF; i++)
            if (has[i]) return fail(c, path, "'%s' beside '%s' is not supported", keywords[i], key);
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, key);
        if (!cJSON_IsArray(list) || !cJSON_GetArraySize(list))
            return fail(c, path, "'%s' must be a list of schemas", key);
        int first;
        if (add_list(c, list, key, path, &first) < 0) return -1;
        json_node *node = &c->s->nodes[n];
        node->alts = first, node->n_alts = cJSON_GetArraySize(list), node->one_of = has[ONE_OF];
        return 0;
    }
    int types = has[TYPE] ? parse_types(c, cJSON_GetObjectItemCaseSensitive(j, "type"), path) : 0;
    if (types < 0) return -1;
    if (has[ENUM] || has[CONST]) { // (the values are matched as they are: nothing else may constrain them)
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(j, "enum");
        if (has[ENUM] && has[CONST]) return fail(c, path, "'enum' beside 'const' is not supported");
        for (int i = PROPERTIES; i < ANY_OF; i++)
            if (has[i]) return fail(c, path, "'%s' beside '%s' is not supported", keywords[i], has[ENUM] ? "enum" : "const");
        if (has[ENUM] && (!cJSON_IsArray(list) || !cJSON_GetArraySize(list)))
            return fail(c, path, "'enum' must be a list of values");
        return add_values(c, n, list, cJSON_GetObjectItemCaseSensitive(j, "const"), types, path);
    }
    if (!types) // no type: what the keywords given are about, or anything
        types = has[PROPERTIES] || has[REQUIRED] || has[ADDITIONAL]  ? JSON_OBJECT
                : has[ITEMS] || has[PREFIX_ITEMS] || has[MIN_ITEMS] || has[MAX_ITEMS] ? JSON_ARRAY
                : has[MIN_LENGTH] || has[MAX_LENGTH] || has[FORMAT] || has[PATTERN] ? JSON_STRING
                : has[MINIMUM] || has[MAXIMUM] || has[EXCLUSIVE_MINIMUM] || has[EXCLUSIVE_MAXIMUM] || has[MULTIPLE_OF]
                    ? JSON_NUMBER
                                                                    : JSON_ANY;
    c->s->nodes[n].types = types;
    if ((has[MINIMUM] || has[MAXIMUM] || has[EXCLUSIVE_MINIMUM] || has[EXCLUSIVE_MAXIMUM]) &&
        types & (JSON_INTEGER | JSON_NUMBER) && add_range(c, n, j, types & JSON_NUMBER ? 6 : 0, path) < 0)
        return -1;
    if (has[MULTIPLE_OF] && types & (JSON_INTEGER | JSON_NUMBER) && add_multiple(c, n, j, path) < 0) return -1;
    if (types & JSON_OBJECT && add_object(c, n, j, path) < 0) return -1;
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(j, "prefixItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(j, "items");
    const int closed = prefix && cJSON_IsFalse(items); // (a tuple of the prefix's items at most)
    if (types & JSON_ARRAY) {
        char sub[256];
        child_path(sub, sizeof sub, path, "items", -1);
        if (cJSON_IsArray(items))
            return fail(c, path, "'items' as a list (draft 7's tuple) is not supported: use 'prefixItems'");
        if (prefix && !cJSON_IsArray(prefix)) return fail(c, path, "'prefixItems' must be a list of schemas");
        int first = 0;
        if (prefix && add_list(c, prefix, "prefixItems", path, &first) < 0) return -1;
        const int item = items && !closed ? node_of(c, items, sub) : any_node(c, path); // (closed: never read)
        if (item < 0) return -1;
        json_node *node = &c->s->nodes[n];
        node->items = item, node->prefix = first, node->n_prefix = prefix ? cJSON_GetArraySize(prefix) : 0;
    }
    json_node *node = &c->s->nodes[n];
    const cJSON *pattern = types & JSON_STRING ? cJSON_GetObjectItemCaseSensitive(j, "pattern") : NULL;
    if (pattern && !cJSON_IsString(pattern)) return fail(c, path, "'pattern' must be a string");
    const char *re = pattern ? pattern->valuestring : NULL, *what = "'pattern'";
    int most = JSON_UNLIMITED; // characters the format allows
    if (has[FORMAT] && types & JSON_STRING) {
        static const char *const formats[] = {"", "date", "time", "date-time", "uuid"};
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, "format");
        const char *name = cJSON_IsString(f) ? f->valuestring : "";
        for (int i = 1; i < 5; i++)
            if (!strcmp(name, formats[i])) node->format = i;
        int held = -1; // its place in pattern_formats
        for (size_t i = 0; i < sizeof pattern_formats / sizeof *pattern_formats; i++)
            if (!strcmp(name, pattern_formats[i].name)) held = (int)i;
        if (!node->format && held < 0)
            return fail(c, path, "'format' %s%.40s%s is not supported (date, time, date-time, uuid, email, hostname, "
                        "ipv4 and uri are)", *name ? "\"" : "", name, *name ? "\"" : "");
        if (pattern) return fail(c, path, "'pattern' beside 'format' is not supported");
        if (node->format && (has[MIN_LENGTH] || has[MAX_LENGTH]))
            return fail(c, path, "'%s' beside 'format' \"%s\" is not supported", has[MIN_LENGTH] ? "minLength" : "maxLength",
                        name);
        if (held >= 0) re = pattern_formats[held].pattern, most = pattern_formats[held].max_length, what = "'format'";
    }
    if (get_count(c, j, "minItems", path, &node->min_items) || get_count(c, j, "maxItems", path, &node->max_items) ||
        get_count(c, j, "minLength", path, &node->min_length) || get_count(c, j, "maxLength", path, &node->max_length))
        return -1;
    if (closed && node->max_items > node->n_prefix) node->max_items = node->n_prefix;
    if (node->min_items > node->max_items)
        return fail(c, path, closed ? "'minItems' is above the items of 'prefixItems' ('items' is false)"
                                    : "'minItems' is above 'maxItems'");
    if (node->max_length > most) node->max_length = most;
    if (node->min_length > node->max_length)
        return fail(c, path, "'minLength' is above 'maxLength'%s", most < JSON_UNLIMITED ? " or the format's most" : "");
    if (re && add_pattern(c, n, re, what, path) < 0) return -1;
    return 0;
}

static int compile_node(compiler *c, const cJSON *j, const char *path) {
    for (int i = 0; i < c->n_seen; i++)
        if (c->seen[i].json == j)
            return c->seen[i].node >= 0 ? c->seen[i].node : fail(c, path, "'$ref' refers to itself");
    if (cJSON_IsTrue(j)) return any_node(c, path);
    if (!cJSON_IsObject(j))
        return fail(c, path,
                    cJSON_IsFalse(j) ? "false (no value) cannot be generated" : "a schema must be an object or true");
    const cJSON *top = c->top;
    if (cJSON_GetObjectItemCaseSensitive(j, "$id")) c->top = j; // a schema resource: "#" within it names it
    int n;
    if (cJSON_GetObjectItemCaseSensitive(j, "$ref") || cJSON_GetObjectItemCaseSensitive(j, "allOf")) {
        n = alias_node(c, j, path);
    } else if ((n = new_node(c, path)) >= 0) {
        grow(&c->seen, &c->cap_seen, c->n_seen, sizeof *c->seen);
        c->seen[c->n_seen++] = (struct seen){j, n};
        if (fill_node(c, n, j, path) < 0) n = -1;
    }
    c->top = top;
    return n;
}

static int node_of(compiler *c, const cJSON *j, const char *path) {
    if (c->depth == JSON_SCHEMA_MAX_NESTING)
        return fail(c, path, "schemas nest more than %d deep", JSON_SCHEMA_MAX_NESTING);
    c->depth++;
    const int n = compile_node(c, j, path);
    c->depth--;
    return n;
}

// Whether nodes a and b are lists of strings (enum or const) with none in common.
static int other_strings(const json_schema *s, int a, int b) {
    const json_node *x = &s->nodes[a], *y = &s->nodes[b];
    for (int i = 0; i < x->n_values; i++)
        for (int k = 0; k < y->n_values; k++) {
            const json_text *u = &s->texts[x->values + i], *v = &s->texts[y->values + k];
            if (u->text[0] != '"' || v->text[0] != '"' || !text_order(u, v)) return 0; // (texts as cJSON prints them)
        }
    return x->n_values && y->n_values;
}

// Whether nodes a and b have no instance in common: objects with a property that both require,
// whose values are strings none of which both allow (a discriminator: Pydantic's tagged unions).
static int told_apart(const json_schema *s, int a, int b) {
    const json_node *x = &s->nodes[a], *y = &s->nodes[b];
    if (x->types != JSON_OBJECT || y->types != JSON_OBJECT) return 0; // (an enum's or anyOf's types are 0)
    for (int i = 0; i < x->n_props; i++)
        for (int k = 0; k < y->n_props; k++) {
            const json_text *u = &s->texts[x->names + i], *v = &s->texts[y->names + k];
            const json_prop *p = &s->props[x->props + u->index], *q = &s->props[y->props + v->index];
            if (p->required && q->required && !text_order(u, v) && other_strings(s, p->node, q->node)) return 1;
        }
    return 0;
}

// json_node.starts of node n (visiting: 1 while its alternatives are looked at); -1 where
// alternatives lead back to n, or where oneOf's may hold the same instance.
static int node_starts(compiler *c, int n, char *visiting) {
    json_node *node = &c->s->nodes[n];
    if (node->starts) return node->starts;
    if (visiting[n]) return fail(c, c->where, "'anyOf' alternatives lead back to themselves");
    visiting[n] = 1;
    int starts = types_starts(node->types);
    for (int i = 0; i < node->n_values; i++)
        starts |= json_start_class((unsigned char)c->s->texts[node->values + i].text[0]);
    for (int i = 0; i < node->n_alts; i++) {
        const int *alts = c->s->alts + node->alts, s = node_starts(c, alts[i], visiting);
        if (s < 0) return -1;
        for (int k = 0; node->one_of && k < i; k++)
            if (s & c->s->nodes[alts[k]].starts && !told_apart(c->s, alts[k], alts[i]))
                return fail(c, c->where,
                            "'oneOf' alternatives that begin alike (two objects, an integer and a number, ...) must be "
                            "objects told apart by a property both require, of different constant strings (a "
                            "discriminator); 'anyOf' takes any");
        starts |= s;
    }
    visiting[n] = 0;
    return c->s->nodes[n].starts = starts;
}

json_schema *json_schema_compile(const cJSON *schema, const char *where, char *err, size_t n_err) {
    compiler c = {.s = burst_calloc(1, sizeof *c.s), .top = schema, .any = -1, .where = where, .err = err, .n_err = n_err};
    const char *path = where;
    err[0] = 0;
    int root = node_of(&c, schema, path);
    char *visiting = burst_calloc((size_t)c.s->n_nodes + 1, 1);
    for (int n = 0; root >= 0 && n < c.s->n_nodes; n++)
        if (node_starts(&c, n, visiting) < 0) root = -1;
    free(visiting);
    free(c.seen);
    if (root >= 0 && !(c.s->nodes[root].starts & C_OBJECT)) root = fail(&c, path, "the top must allow an object");
    if (root < 0) {
        json_schema_free(c.s);
        return NULL;
    }
    c.s->root = root;
    return c.s;
}

void json_schema_free(json_schema *s) {
    if (!s || s == &any_object) return;
    for (int i = 0; i < s->n_texts; i++) free(s->texts[i].text);
    for (int i = 0; i < s->n_patterns; i++) json_pattern_free(&s->patterns[i]);
    free(s->nodes), free(s->texts), free(s->props), free(s->alts), free(s->patterns);
    free(s);
}
