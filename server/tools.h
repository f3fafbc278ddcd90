/* tools.h -- chat tool calling: tools, tool_choice, parallel_tool_calls.
 *
 * Every model gets the Hermes / Qwen2.5 format, rendered through its own
 * chat template as ordinary messages (README "Structured output"): the
 * tools' JSON in a system message; a call is
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * in the assistant's text; a tool result is a user message wrapped in
 * <tool_response>...</tool_response>. The reply is constrained by a
 * grammar: with "required" or a named function it is one call (or several,
 * newline-separated, with parallel_tool_calls), with "auto" either such
 * calls or free text that does not start with '<'. */
#ifndef TOOLS_H
#define TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "genloop.h"
#include "jbuf.h"
#include "params.h"

typedef struct chat_tools {
    bool active;             /* tools given and tool_choice is not "none" */
    bool listed;             /* tools given (they are described to the model even with "none") */
    char *system;            /* the tools' description for the system message (owned) */
    gl_grammar *grammar;     /* the reply's constraint when active (owned) */
} chat_tools;

/* Reads tools, tool_choice and parallel_tool_calls. 0, or -1 with a 400. */
int tools_parse(const cJSON *body, chat_tools *out, params_error *e);
void tools_free(chat_tools *t);

/* The text an assistant message with tool_calls (messages[i]) stands for:
 * its content, then each call. malloc'd; NULL with e filled. */
char *tools_render_calls(const char *content, const cJSON *tool_calls, int i, params_error *e);
/* The text a role "tool" message stands for (as a user message). */
char *tools_render_result(const char *content);

/* Whether generated text is a tool-call reply (it starts with '<'). */
bool tools_is_call_text(const char *text, size_t len);

typedef struct tool_call {
    char *name;
    char *arguments;         /* JSON text */
} tool_call;

/* The complete calls in generated text (malloc'd array, *n set). */
tool_call *tools_extract(const char *text, size_t len, int *n);
void tools_calls_free(tool_call *calls, int n);

#endif
