// JSON Schema for structured outputs (the API's response_format {"type": "json_schema"}): a schema
// compiled into the nodes that json_grammar.h walks as the text grows, so that the text is an
// instance of it. The subset, that of OpenAI's structured outputs and of what Pydantic writes:
//   type (a name or a list of names), enum, const, properties, required, additionalProperties,
//   items, prefixItems (tuples; items beside them the rest's schema, or false), minItems,
//   maxItems, minLength, maxLength, minimum, maximum, exclusiveMinimum, exclusiveMaximum,
//   multipleOf (of integers without bounds, of at most JSON_MULTIPLE_DIGITS digits), format
//   (of strings: date, time, date-time and uuid, RFC 3339's and RFC 4122's forms; email, hostname,
//   ipv4 and uri, held by patterns; below), pattern (of strings: json_pattern.h's subset, beside
//   minLength and maxLength too); anyOf; oneOf whose alternatives begin differently (an object, an
//   array, a string, a number, a boolean, null) or are objects told apart by a discriminator (a
//   property each requires, of constant strings none of the others allows: Pydantic's tagged
//   unions); allOf of one schema; $ref to "#", "#/$defs/NAME" or "#/definitions/NAME" (recursion
//   allowed) of the innermost schema around it with an $id, or of the top; and annotations, which
//   change nothing (title, description, default, examples, $schema, $id, $comment, $defs,
//   definitions, deprecated, readOnly, writeOnly, discriminator).
//   Anything else (other formats, multipleOf of numbers, ...) is refused, not ignored: text that ignored it
//   might not be an instance. The text is an object: the schema's top must allow one.
// Where the schema leaves a choice, the text takes one form: an object's properties in the
// schema's order (an optional one may be left out), only the properties given where some are
// (additionalProperties or not), enum values and property names exactly as cJSON prints them,
// integers without a fraction or exponent, numbers with bounds without an exponent, with at most 6
// digits after the point and within +-9007199254.740991; dates YYYY-MM-DD of years 0001-9999, times
// hh:mm:ss with at most 6 digits of fraction and an offset (Z or +hh:mm, -hh:mm), date-times
// those two joined by T, no leap seconds; uuids in lowercase hex; host names (alone, in email
// addresses and in uris) in lowercase, of labels of at most 16 characters; email addresses of
// dot-atoms of lowercase letters and digits; uris http or https, a host name, a port, a path and a
// query of RFC 3986's unreserved and sub-delimiter characters (no percent escapes); strings of a
// pattern without escapes (json_pattern.h).
#pragma once
#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "json_pattern.h"

// A string's format (json_node.format).
enum { JSON_FORMAT_NONE, JSON_FORMAT_DATE, JSON_FORMAT_TIME, JSON_FORMAT_DATE_TIME, JSON_FORMAT_UUID };

// What a value may be (json_node.types).
enum {
    JSON_OBJECT = 1,
    JSON_ARRAY = 2,
    JSON_STRING = 4,
    JSON_NUMBER = 8,
    JSON_INTEGER = 16,
    JSON_BOOLEAN = 32,
    JSON_NULL = 64,
    JSON_ANY = 127,
};

typedef struct {
    char *text; // a JSON text as cJSON prints it unformatted: an enum value, or a property's name (a string)
    int len;
    int index;  // a name's property: its place in the object's order
} json_text;

typedef struct {
    int node;     // the property's value
    int required;
} json_prop;

typedef struct {
    int types;            // JSON_* bits: what the value may be (0: its values or alternatives say)
    int values, n_values; // enum or const: the value is one of texts[values, + n_values), sorted bytewise
    int alts, n_alts;     // anyOf or oneOf: the value is of one of the nodes alts[alts, + n_alts)
    int one_of;           //   oneOf: of exactly one (those that begin alike are told apart: json_schema.c)
    int starts;           // bit k: the value may begin as class k (json_schema.c): picks the alternatives
    // JSON_OBJECT: the properties props[props, + n_props) in the schema's order, their names
    // texts[names, + n_props) sorted bytewise; without properties, each value's node extra (-1: the
    // object is {}).
    int props, n_props, names, last_required, extra;
    int items;                      // JSON_ARRAY: each item's node (past the prefix)
    int prefix, n_prefix;           // JSON_ARRAY: the first items' nodes alts[prefix, + n_prefix) (prefixItems)
    int min_items, max_items;       // JSON_ARRAY (max JSON_UNLIMITED: none)
    int min_length, max_length;     // JSON_STRING: in characters (code points)
    int format;                     // JSON_STRING: JSON_FORMAT_*
    int pattern;                    // JSON_STRING: 1 + its pattern's place in patterns; 0: none
    // JSON_INTEGER or JSON_NUMBER, ranged: within [minimum, maximum], in units of 10^-decimals (0
    // for an integer; 6 for a number, which then has at most 6 digits after its point and no exponent)
    int ranged, decimals;
    int64_t minimum, maximum;
    int64_t multiple; // JSON_INTEGER, not ranged: the value is a multiple of it (multipleOf; 0: any)
} json_node;

enum { JSON_UNLIMITED = 65535 }; // counts stop here (json_state's are 16 bits)
// An integer with multipleOf has at most 15 digits (within +-2^53, which JSON readers keep exactly),
// each a digit after which a multiple can still end.
enum { JSON_MULTIPLE_DIGITS = 15 };
#define JSON_RANGE_LIMIT 9007199254740991.0 // 2^53 - 1: ranged values' units within +-this

typedef struct json_schema {
    json_node *nodes;
    json_text *texts;
    json_prop *props;
    int *alts; // lists of nodes: anyOf's and oneOf's alternatives, prefixItems' items
    json_pattern *patterns;
    int root, n_nodes, n_texts, n_props, n_alts, n_patterns;
} json_schema;

// The schema of JSON mode (response_format {"type": "json_object"}): any object. Static.
const json_schema *json_schema_any_object(void);
// schema compiled; NULL with the reason in err where it is not valid or not of the subset, the place
// named from where, the schema's own name (e.g. "schema.properties.a: 'pattern' is not supported").
json_schema *json_schema_compile(const cJSON *schema, const char *where, char *err, size_t n_err);
void json_schema_free(json_schema *s);
// The class (bit of json_node.starts) of a value whose first byte is c; 0 where none begins so.
int json_start_class(unsigned char c);
