/* genloop_chat.h -- turn a conversation into the prompt text a model expects.
 *
 * Models ship their prompt format as a Jinja template (tokenizer.chat_template
 * in the GGUF). This module interprets the subset of Jinja that chat templates
 * use, with the settings Hugging Face renders them with (trim_blocks,
 * lstrip_blocks, no autoescape): text, {{ expr }}, {% if/elif/else %},
 * {% for x in xs [if c] %} with loop.index/index0/first/last/length/...,
 * {% set x = e %}, {% set ns.x = e %}, {% set x %}..{% endset %},
 * {% generation %}, {# comments #}, whitespace control {%- -%} {{- -}}.
 * Expressions: string/int/bool/none literals, lists, dicts, + - * // % ~,
 * comparisons, in / not in, and / or / not, a if c else b, x.attr, x['k'],
 * slices, filters (trim, length, upper, lower, default, join, tojson, ...),
 * tests (is defined, is none, is string, ...), string and dict methods
 * (strip, startswith, split, items, get, ...), range(), namespace(),
 * raise_exception(msg).
 *
 * The same interpreter renders built-in templates for the common formats
 * (chatml, llama2, llama3, mistral, gemma, phi3, zephyr), used when the model
 * has no template, when its template cannot be parsed but is recognised by
 * its special tokens, or when the user names one (--chat-template NAME).
 *
 * Hostile templates cannot crash or hang the process: source size, nesting
 * depth, evaluation steps, memory and output size are all bounded, and every
 * violation is an error. A template is read-only after creation, so several
 * threads may render with it at once. */
#ifndef GL_GENLOOP_CHAT_H
#define GL_GENLOOP_CHAT_H

#include <stdbool.h>

#include "genloop.h" /* gl_error */

typedef struct gl_chat_message {
    const char *role;         /* "system", "user", "assistant" (any string passes) */
    const char *content;      /* already flattened to text; NULL renders as none */
    const char *fields;       /* NULL, or a JSON object of more fields (tool_calls, tool_call_id, name) */
} gl_chat_message;

typedef struct gl_chat_template gl_chat_template;

/* Build a template. override_name (e.g. "llama3", or "jinja" = insist on the
 * model's own source) wins when given; otherwise the model's source is used
 * when it parses, a built-in one recognised from the source's special tokens
 * when it does not, and when there is no source at all "gemma" for a BOS of
 * "<bos>", else "chatml". bos / eos
 * are the texts of the BOS / EOS tokens ("" when the model has none; NULL
 * counts as ""). Returns NULL with err set when nothing usable is left. */
gl_chat_template *gl_chat_template_create(const char *source, const char *override_name,
                                          const char *bos, const char *eos, gl_error *err);
void gl_chat_template_free(gl_chat_template *t);

/* The prompt for n messages, malloc'd and NUL-terminated; with
 * add_generation_prompt the text ends where the assistant's reply begins.
 * Returns NULL with err set when the template rejects the conversation
 * (raise_exception, e.g. "roles must alternate") or a limit is hit. */
char *gl_chat_template_render(const gl_chat_template *t, const gl_chat_message *msgs, int n,
                              bool add_generation_prompt, gl_error *err);

/* An extra top-level template variable: a request's chat_template_kwargs
 * (e.g. enable_thinking), or JSON data such as the list of `tools`. */
typedef enum { GL_CHAT_VAR_NONE, GL_CHAT_VAR_BOOL, GL_CHAT_VAR_INT, GL_CHAT_VAR_STR, GL_CHAT_VAR_JSON } gl_chat_var_type;
typedef struct gl_chat_var {
    const char *name;
    gl_chat_var_type type;
    bool b;                   /* GL_CHAT_VAR_BOOL */
    long long i;              /* GL_CHAT_VAR_INT */
    const char *s;            /* GL_CHAT_VAR_STR; GL_CHAT_VAR_JSON: JSON text (a number with no
                                 fraction reads as an integer) */
} gl_chat_var;

/* gl_chat_template_render with n_vars more variables; messages, bos_token,
 * eos_token and add_generation_prompt cannot be overridden by them. */
char *gl_chat_template_render_vars(const gl_chat_template *t, const gl_chat_message *msgs, int n,
                                   bool add_generation_prompt, const gl_chat_var *vars, int n_vars,
                                   gl_error *err);

/* Format family: "chatml", "llama2", "llama3", "mistral", "gemma", "phi3",
 * "zephyr", or "jinja" for a model template of no known family. */
const char *gl_chat_template_name(const gl_chat_template *t);
/* True when rendering uses the model's own template text, false when a
 * built-in one stands in for it. */
bool gl_chat_template_is_model_source(const gl_chat_template *t);
/* True when the template reads the variable `tools`: it has a tool section
 * of its own (Qwen2.5's), to be given the tools as a GL_CHAT_VAR_JSON list. */
bool gl_chat_template_has_tools(const gl_chat_template *t);
/* Texts that end an assistant turn (e.g. "<|im_end|>"), for use as stop
 * strings on top of the model's end-of-generation tokens; *n receives the
 * count. Valid while t lives. */
const char *const *gl_chat_template_stop_strings(const gl_chat_template *t, int *n);

/* Names accepted by override_name, NULL-terminated (for --help). */
extern const char *const gl_chat_template_builtin_names[];

#endif
