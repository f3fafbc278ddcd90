/* structured.h -- the request fields that constrain the output to a
 * grammar: response_format (text, json_object, json_schema), the
 * llama.cpp-style extensions `grammar` (GBNF text) and `json_schema`, and
 * vLLM's guided_json, guided_regex, guided_choice, guided_grammar and
 * structured_outputs {json, regex, choice, grammar}. */
#ifndef GL_STRUCTURED_H
#define GL_STRUCTURED_H

#include <cjson/cJSON.h>

#include "compile.h"
#include "genloop.h"
#include "params.h"

/* *out = what to compile (NULL when the request has no constraint); the
 * compile itself runs off the loop thread (compile.h). At most one field
 * may constrain. Returns 0, or -1 with a 400 naming the field. */
int structured_parse(const cJSON *body, compile_spec **out, params_error *e);

#endif
