/* json_schema.h -- JSON Schema to GBNF, so schemas and grammars share one
 * representation (grammar.h).
 *
 * The supported subset is listed in the README ("Structured output"); any
 * other keyword is an error naming it and its JSON path (e.g.
 * "/properties/tags/uniqueItems"), never silently ignored. */
#ifndef GL_JSON_SCHEMA_H
#define GL_JSON_SCHEMA_H

#include <stddef.h>

#include "genloop.h"

/* GBNF text (malloc'd, NUL-terminated; root rule "root") for the JSON
 * values the schema (JSON text) accepts; NULL with err set. */
char *js_to_gbnf(const char *schema, size_t len, gl_error *err);
/* The same without the shared rules (ws, json-string, ...:
 * gl_json_schema_gbnf_common, to add once) and with every rule name prefixed, the root one named
 * PREFIX "root": for combining several schemas into one grammar. */
char *js_to_gbnf_rules(const char *schema, size_t len, const char *prefix, gl_error *err);

#endif
