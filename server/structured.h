/* structured.h -- the request fields that constrain the output to a
 * grammar: response_format (text, json_object, json_schema) and the
 * llama.cpp-style extensions `grammar` (GBNF text) and `json_schema`. */
#ifndef STRUCTURED_H
#define STRUCTURED_H

#include <cjson/cJSON.h>

#include "genloop.h"
#include "params.h"

/* *out = the compiled constraint (NULL when the request has none). At most
 * one of the three fields may constrain. Returns 0, or -1 with a 400 whose
 * message names the fault's position (GBNF) or JSON path (schema). */
int structured_parse(const cJSON *body, gl_grammar **out, params_error *e);

#endif
