/* tools.h -- chat tool calling: tools, tool_choice, parallel_tool_calls.
 *
 * Every model gets the Hermes / Qwen2.5 format (README "Structured
 * output"); a call is
 *   <tool_call>\n{"name": NAME, "arguments": {...}}\n</tool_call>
 * in the assistant's text. A template with a tool section of its own in
 * this format (Qwen2.5's) renders the tools, calls and results itself, from
 * the Jinja variable `tools` and the messages' tool_calls / tool_call_id
 * (tools_json, tools_message_fields). Any other template gets them as
 * ordinary messages: the tools' JSON in a system message, calls in the
 * assistant's text, a tool result as a user message wrapped in
 * <tool_response>...</tool_response>. The reply is constrained by a
 * grammar: with "required" or a named function it is one call (or several,
 * newline-separated, with parallel_tool_calls), with "auto" either such
 * calls or free text that does not start with '<'. */
#ifndef GL_TOOLS_H
#define GL_TOOLS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "compile.h"
#include "genloop.h"
#include "jbuf.h"
#include "params.h"

typedef struct chat_tools {
    bool active;             /* tools given and tool_choice is not "none" */
    bool listed;             /* tools given (they are described to the model even with "none") */
    char *system;            /* the tools' description for the system message (owned) */
    char *tools_json;        /* the tools as a JSON list, for a template's own tool section (owned) */
    compile_spec *spec;      /* the reply's constraint when active, to compile (owned) */
    cJSON *defs;             /* the tools, as listed: the calls a reply may make (owned) */
    bool one_call;           /* parallel_tool_calls false */
    bool free_text;          /* tool_choice "auto": the reply may be text */
} chat_tools;

/* Reads tools, tool_choice and parallel_tool_calls. 0, or -1 with a 400. */
int tools_parse(const cJSON *body, chat_tools *out, params_error *e);
void tools_free(chat_tools *t);

/* The text an assistant message with tool_calls (messages[i]) stands for:
 * its content, then each call. malloc'd; NULL with e filled. */
char *tools_render_calls(const char *content, const cJSON *tool_calls, int i, params_error *e);
/* The text a role "tool" message stands for (as a user message). */
char *tools_render_result(const char *content);
/* For a template with its own tool section: messages[i]'s fields beyond
 * role and content as a JSON object text (gl_chat_message.fields):
 * tool_calls with each function.arguments parsed to an object, as Hugging
 * Face templates read them, tool_call_id and name. 0 with *out malloc'd (NULL
 * when there are none), or -1 with a 400. */
int tools_message_fields(const cJSON *m, int i, char **out, params_error *e);

/* Whether generated text is a tool-call reply in the grammar's own form
 * (it starts with '<'). */
bool tools_is_call_text(const char *text, size_t len);


/* Reads a tool-call reply as it is generated, so that a stream can send
 * each call's name as soon as it is complete and its arguments in pieces.
 * The arguments come out as generated minus the whitespace between JSON
 * tokens: the pieces of a call join to the same text a whole reply shows. */
typedef struct tools_reader {
    size_t pos;              /* bytes of the reply read */
    int state;               /* before a call, in its arguments, after them */
    int index;               /* the call being read */
    int depth;               /* of the arguments' brackets */
    bool in_str, esc;
} tools_reader;

typedef struct tools_reader_ops {
    void (*call)(void *ctx, int index, const char *name);          /* a call starts */
    void (*args)(void *ctx, int index, const char *p, size_t n);   /* a piece of its arguments */
    void (*end)(void *ctx, int index);                             /* its closing tag was read */
} tools_reader_ops;

/* Reads text[r->pos..len) (text: the whole reply so far, which only grows). */
void tools_reader_feed(tools_reader *r, const char *text, size_t len, const tools_reader_ops *ops, void *ctx);

typedef struct tool_call {
    char *name;
    char *arguments;         /* JSON text */
} tool_call;

/* The complete calls in a generated reply (malloc'd array, *n set): a call
 * cut by max_tokens is left out. */
tool_call *tools_extract(const char *text, size_t len, int *n);
void tools_calls_free(tool_call *calls, int n);

/* The calls a whole reply makes in any of the forms models write (after
 * leading whitespace): Hermes/Qwen <tool_call>{...}</tool_call> blocks; a
 * bare JSON call {"name": N, "arguments" or "parameters": {...}} or a list
 * of them; the same in a ```json fenced block; Llama 3.x's, optionally
 * after <|python_tag|>, several separated by ';'; Mistral's
 * [TOOL_CALLS][...] or [TOOL_CALLS]NAME[ARGS]{...}. The reply counts as
 * calls only when it is nothing but calls, each naming a listed tool with
 * an object of arguments holding its required properties; else NULL (it is
 * text). With one_call, only the first call. Arguments come out compact. */
tool_call *tools_recognize(const char *text, size_t len, const chat_tools *t, int *n);
/* For a stream: whether the reply so far can still become calls in one of
 * those forms (1: it starts like one, 0: it cannot, -1: too short to tell). */
int tools_maybe_call(const char *text, size_t len);

#endif
