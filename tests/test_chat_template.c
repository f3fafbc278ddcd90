/* test_chat_template.c -- prompt formats, the Jinja subset, and hostile templates. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop_chat.h"
#include "gguf.h"
#include "testutil.h"

/* ---- published templates, verbatim (Hugging Face tokenizer_config.json) ---- */

/* As in the GGUF: the Jinja strings hold real newlines. */
static const char *const TPL_SMOLLM2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static const char *const TPL_LLAMA2 =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

static const char *const TPL_LLAMA3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";

static const char *const TPL_MISTRAL01 =
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}";

static const char *const TPL_GEMMA =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}";

static const char *const TPL_PHI3 =
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}";

static const char *const TPL_ZEPHYR =
    "{% for message in messages %}\n"
    "{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n"
    "{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n"
    "{{ '<|assistant|>' }}\n"
    "{% endif %}\n"
    "{% endfor %}";

static const char *const TPL_QWEN25 =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n"
    "    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n"
    "            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n"
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
    "";

static const char *const TPL_FEATURES =
    "{# comment #}\n"
    "{%- set ns = namespace(count=0, sys='') -%}\n"
    "{% for m in messages if m.role != 'system' %}\n"
    "  {{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ m.role | upper }}:{{ m['content'] | lower | length }}\n"
    "  {%- set ns.count = ns.count + 1 %}\n"
    "  {% if loop.first %}first{% elif loop.last %}last{% else %}mid{% endif %}\n"
    "{% else %}\n"
    "empty\n"
    "{% endfor %}\n"
    "count={{ ns.count }} {{ 'x' ~ 3 ~ none ~ true }} {{ [1,2,3][1:] }} {{ 'abc'[::-1] }} {{ -7 // 2 }} {{ -7 % 3 }}\n"
    "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | join(', ') }}\n"
    "{{ {'a': 1, 'b': [true, none, 'q\"x']} | tojson }} {{ {'a': 1} | tojson(indent=2) }}\n"
    "{{ 'yes' if 'U' in (messages | map(attribute='content') | join) else 'no' }} {{ 'S' not in 'abc' }}\n"
    "{% set block %}inner {{ 1 + 2 }}{% endset %}[{{ block | trim }}] {{ '  pad  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}\n"
    "{{ undefined_thing is defined }} {{ undefined_thing | default('dflt') }} {{ 'Hello World'.startswith(('x', 'Hell')) }} {{ 'abc'.replace('b', 'BB') }}\n"
    "{% for k, v in {'x': 1, 'y': 2}.items() %}{{ k }}={{ v }};{% endfor %} {{ range(3) | list }} {{ range(10, 0, -3) | list }}\n"
    "{{ messages[-1].content if messages else 'none' }} {{ 10 is divisibleby 5 }} {{ 3 is odd }} {{ \"it's\" }} {{ 'a' < 'b' }} {{ 2 >= 3 }}\n"
    "  {%+ if true %}kept-indent{% endif %}\n"
    "    {%- if true -%}   tight   {%- endif -%}\n"
    "{{ 'tail' }}";

/* What Jinja2 3.1 (trim_blocks, lstrip_blocks) renders TPL_FEATURES to. */
static const char *const FEATURES_EXPECTED =
    "  1/3 2 USER:2first  2/3 1 ASSISTANT:2mid  3/3 0 USER:2lastcount=3 x3NoneTrue [2, 3] cba -4 2\n"
    "U1, U2\n"
    "{\"a\": 1, \"b\": [true, null, \"q\\\"x\"]} {\n"
    "  \"a\": 1\n"
    "}\n"
    "yes True\n"
    "[inner 3] pad|['a', 'b', '', 'c']|['a', 'b']\n"
    "False dflt True aBBc\n"
    "x=1;y=2; [0, 1, 2] [10, 7, 4, 1]\n"
    "U2 True True it's True False\n"
    "  kept-indenttighttail";

/* What Jinja2 3.1 with Hugging Face's settings (trim_blocks, lstrip_blocks,
 * tojson = json.dumps) renders TPL_QWEN25 to for QWEN_TOOLS_CONV. */
static const char *const QWEN_TOOLS_EXPECTED =
    "<|im_start|>system\n"
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}\n"
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Weather in Paris and Nice?<|im_end|>\n"
    "<|im_start|>assistant\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"ratio\": 0.5, \"note\": \"\303\251\\\"\\n\"}}\n"
    "</tool_call>\n"
    "<tool_call>\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\", \"big\": 1e+20, \"small\": 1.5e-07, \"list\": [true, null, 100.25]}}\n"
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "{\"temp\": 21}\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "{\"temp\": 24}\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
    "Paris 21, Nice 24.<|im_end|>\n"
    "<|im_start|>user\n"
    "Thanks<|im_end|>\n"
    "<|im_start|>assistant\n"
    "";
static const char *const QWEN_TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}]";
static const gl_chat_message QWEN_TOOLS_CONV[] = {
    {"user", "Weather in Paris and Nice?", NULL},
    {"assistant", NULL, "{\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"ratio\": 0.5, \"note\": \"\\u00e9\\\"\\n\"}}}, {\"id\": \"c2\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\", \"big\": 1e+20, \"small\": 1.5e-07, \"list\": [true, null, 100.25]}}}]}"},
    {"tool", "{\"temp\": 21}", "{\"tool_call_id\": \"c1\"}"},
    {"tool", "{\"temp\": 24}", "{\"tool_call_id\": \"c2\"}"},
    {"assistant", "Paris 21, Nice 24.", NULL},
    {"user", "Thanks", NULL},
};

/* The conversation every format renders: system, user, assistant, user. */
static const gl_chat_message CONV[] = {
    {"system", "S", NULL}, {"user", "U1", NULL}, {"assistant", "A1", NULL}, {"user", "U2", NULL},
};

static char *render_src(const char *src, const char *override, const gl_chat_message *m, int n, bool gen, gl_error *err) {
    gl_chat_template *t = gl_chat_template_create(src, override, "<s>", "</s>", err);
    if (!t) return NULL;
    char *out = gl_chat_template_render(t, m, n, gen, err);
    gl_chat_template_free(t);
    return out;
}

static void expect_render(const char *src, const char *override, const gl_chat_message *m, int n, bool gen, const char *want) {
    gl_error err = {{0}};
    char *got = render_src(src, override, m, n, gen, &err);
    ck_assert_msg(got != NULL, "render failed: %s", err.message);
    ck_assert_str_eq(got, want);
    free(got);
}

static void expect_error(const char *src, const gl_chat_message *m, int n, const char *fragment) {
    gl_error err = {{0}};
    char *got = render_src(src, "jinja", m, n, true, &err);
    ck_assert_msg(got == NULL, "expected an error containing '%s', got output", fragment);
    ck_assert_msg(strstr(err.message, fragment) != NULL, "error '%s' lacks '%s'", err.message, fragment);
}

/* ---- every format, by hand from its published form -------------------------- */

static const char *const WANT_CHATML =
    "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU1<|im_end|>\n"
    "<|im_start|>assistant\nA1<|im_end|>\n<|im_start|>user\nU2<|im_end|>\n<|im_start|>assistant\n";
static const char *const WANT_LLAMA2 =
    "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nU1 [/INST] A1 </s><s>[INST] U2 [/INST]";
static const char *const WANT_LLAMA3 =
    "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nU1<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nA1<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nU2<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n";
static const char *const WANT_MISTRAL = "<s>[INST] S\n\nU1 [/INST] A1</s>[INST] U2 [/INST]";
static const char *const WANT_GEMMA =
    "<s><start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
    "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n";
static const char *const WANT_PHI3 =
    "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n<|assistant|>\nA1<|end|>\n<|user|>\nU2<|end|>\n<|assistant|>\n";
static const char *const WANT_ZEPHYR =
    "<|system|>\nS</s>\n<|user|>\nU1</s>\n<|assistant|>\nA1</s>\n<|user|>\nU2</s>\n<|assistant|>\n";
static const char *const SMOL_DEFAULT_SYSTEM =
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n";

START_TEST(builtin_formats) {
    struct { const char *name, *want, *stop; } cases[] = {
        {"chatml", WANT_CHATML, "<|im_end|>"}, {"llama2", WANT_LLAMA2, "</s>"},
        {"llama3", WANT_LLAMA3, "<|eot_id|>"}, {"mistral", WANT_MISTRAL, "</s>"},
        {"gemma", WANT_GEMMA, "<end_of_turn>"}, {"phi3", WANT_PHI3, "<|end|>"},
        {"zephyr", WANT_ZEPHYR, "</s>"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_render(NULL, cases[i].name, CONV, 4, true, cases[i].want);
        gl_error err;
        gl_chat_template *t = gl_chat_template_create(NULL, cases[i].name, "<s>", "</s>", &err);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(gl_chat_template_name(t), cases[i].name);
        ck_assert(!gl_chat_template_is_model_source(t));
        int n;
        const char *const *stops = gl_chat_template_stop_strings(t, &n);
        ck_assert_int_eq(n, 1);
        ck_assert_str_eq(stops[0], cases[i].stop);
        gl_chat_template_free(t);
    }
    for (int i = 0; gl_chat_template_builtin_names[i]; i++) ck_assert_ptr_nonnull(gl_chat_template_builtin_names[i]);
}
END_TEST

/* The published templates render the same prompts through the interpreter. */
START_TEST(published_templates) {
    struct { const char *src, *want, *family; } cases[] = {
        {TPL_SMOLLM2, WANT_CHATML, "chatml"}, {TPL_QWEN25, WANT_CHATML, "chatml"},
        {TPL_LLAMA2, WANT_LLAMA2, "llama2"}, {TPL_LLAMA3, WANT_LLAMA3, "llama3"},
        {TPL_PHI3, WANT_PHI3, "phi3"}, {TPL_ZEPHYR, WANT_ZEPHYR, "zephyr"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        expect_render(cases[i].src, NULL, CONV, 4, true, cases[i].want);
        gl_error err;
        gl_chat_template *t = gl_chat_template_create(cases[i].src, NULL, "<s>", "</s>", &err);
        ck_assert_ptr_nonnull(t);
        ck_assert_str_eq(gl_chat_template_name(t), cases[i].family);
        ck_assert(gl_chat_template_is_model_source(t));
        gl_chat_template_free(t);
    }
    /* Mistral v0.1 and Gemma 1 have no system role: without one they work... */
    expect_render(TPL_MISTRAL01, NULL, CONV + 1, 3, true, "<s>[INST] U1 [/INST]A1</s>[INST] U2 [/INST]");
    expect_render(TPL_GEMMA, NULL, CONV + 1, 3, true,
                  "<s><start_of_turn>user\nU1<end_of_turn>\n<start_of_turn>model\nA1<end_of_turn>\n"
                  "<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n");
    /* ...and with one they refuse, with their own message. */
    expect_error(TPL_GEMMA, CONV, 4, "System role not supported");
    expect_error(TPL_MISTRAL01, CONV, 4, "Conversation roles must alternate");
    gl_chat_message bad[] = {{"user", "a", NULL}, {"user", "b", NULL}};
    expect_error(TPL_LLAMA2, bad, 2, "Conversation roles must alternate");
    /* Without add_generation_prompt: phi3 ends with EOS, chatml with the last turn. */
    expect_render(TPL_PHI3, NULL, CONV, 2, false, "<|system|>\nS<|end|>\n<|user|>\nU1<|end|>\n</s>");
}
END_TEST

START_TEST(smollm2_default_system) {
    char want[512];
    snprintf(want, sizeof want, "%s<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", SMOL_DEFAULT_SYSTEM);
    gl_chat_message hi = {"user", "Hi", NULL};
    expect_render(TPL_SMOLLM2, NULL, &hi, 1, true, want);
    /* The built-in chatml has no default system prompt. */
    expect_render(NULL, "chatml", &hi, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    expect_render(NULL, NULL, &hi, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST

/* The real template from the default model's GGUF. */
START_TEST(smollm2_gguf) {
    const char *path = getenv("GENLOOP_MODEL");
    char buf[4096];
    if (!path || !*path) {
        snprintf(buf, sizeof buf, "%s/models/SmolLM2-135M-Instruct.Q4_1.gguf", getenv("GENLOOP_SOURCE") ? getenv("GENLOOP_SOURCE") : ".");
        path = buf;
    }
    gl_error err;
    gguf_file *f = gguf_open(path, &err);
    if (!f) {
        ck_assert_msg(!test_in_ci(), "%s (CI=true forbids skipping)", err.message);
        printf("skipping SmolLM2 GGUF case: %s\n", err.message);
        return;
    }
    gguf_str s;
    ck_assert(gguf_get_str(f, "tokenizer.chat_template", &s));
    char *src = strndup(s.ptr, s.len);
    gguf_close(f);
    ck_assert_str_eq(src, TPL_SMOLLM2);
    expect_render(src, NULL, CONV, 4, true, WANT_CHATML);
    char want[512];
    snprintf(want, sizeof want, "%s<|im_start|>user\nHi<|im_end|>\n", SMOL_DEFAULT_SYSTEM);
    gl_chat_message hi = {"user", "Hi", NULL};
    expect_render(src, NULL, &hi, 1, false, want);
    free(src);
}
END_TEST

START_TEST(jinja_features) {
    expect_render(TPL_FEATURES, NULL, CONV, 4, true, FEATURES_EXPECTED);
    expect_render("{% for m in messages %}{{ m.role }}{% else %}none{% endfor %}", NULL, NULL, 0, true, "none");
    expect_render("a  {%- if true %} b {% endif -%}  c\n", NULL, NULL, 0, true, "a b c");
    expect_render("{{ message }}{{ messages[9] is defined }}", NULL, CONV, 4, true, "False");
    gl_chat_message null_content = {"assistant", NULL, NULL};
    expect_render("{{ messages[0].content is none }}", NULL, &null_content, 1, true, "True");
}
END_TEST

/* Qwen2.5's own tool section: tools as JSON data, tool calls and results as
 * message fields; the reference is Jinja2's rendering (QWEN_TOOLS_EXPECTED). */
START_TEST(qwen_tools) {
    gl_error err = {{0}};
    gl_chat_template *t = gl_chat_template_create(TPL_QWEN25, NULL, "", "<|im_end|>", &err);
    ck_assert_ptr_nonnull(t);
    ck_assert(gl_chat_template_has_tools(t));
    gl_chat_var tools = {.name = "tools", .type = GL_CHAT_VAR_JSON, .s = QWEN_TOOLS};
    int n = (int)(sizeof QWEN_TOOLS_CONV / sizeof QWEN_TOOLS_CONV[0]);
    char *got = gl_chat_template_render_vars(t, QWEN_TOOLS_CONV, n, true, &tools, 1, &err);
    ck_assert_msg(got != NULL, "render failed: %s", err.message);
    ck_assert_str_eq(got, QWEN_TOOLS_EXPECTED);
    free(got);
    /* Bad JSON data is an error, not a crash (and frees what it parsed). */
    gl_chat_var bad = {.name = "tools", .type = GL_CHAT_VAR_JSON, .s = "[{\"a\": "};
    ck_assert_ptr_null(gl_chat_template_render_vars(t, QWEN_TOOLS_CONV, n, true, &bad, 1, &err));
    ck_assert(strstr(err.message, "not valid JSON") != NULL);
    gl_chat_message not_object = {"user", "x", "[1, 2]"};
    ck_assert_ptr_null(gl_chat_template_render_vars(t, &not_object, 1, true, NULL, 0, &err));
    ck_assert(strstr(err.message, "must be a JSON object") != NULL);
    gl_chat_template_free(t);
    /* Floats print as Python does; tests see them as numbers. */
    gl_chat_var nums = {.name = "x", .type = GL_CHAT_VAR_JSON,
                        .s = "[0.5, 100.0, 1e20, 1.5e-7, 0.0001, 1e16, 123.456, -2.5, 1e15, 3]"};
    t = gl_chat_template_create("{{ x | tojson }} {{ x[0] }} {{ x[0] is number }} {{ x[0] is float }} "
                                "{{ x[9] is float }} {{ x[3] == x[3] }}{% if x[0] %} t{% endif %}",
                                NULL, "", "", &err);
    ck_assert_ptr_nonnull(t);
    ck_assert(!gl_chat_template_has_tools(t));
    got = gl_chat_template_render_vars(t, NULL, 0, true, &nums, 1, &err);
    ck_assert_msg(got != NULL, "render failed: %s", err.message);
    ck_assert_str_eq(got, "[0.5, 100, 1e+20, 1.5e-07, 0.0001, 1e+16, 123.456, -2.5, 1000000000000000, 3] "
                          "0.5 True True False True t");
    free(got);
    gl_chat_template_free(t);
    /* `tools` as an attribute is not the variable. */
    t = gl_chat_template_create("{{ messages[0].tools }}", NULL, "", "", &err);
    ck_assert(!gl_chat_template_has_tools(t));
    gl_chat_template_free(t);
}
END_TEST

START_TEST(selection) {
    gl_error err;
    /* Unknown override. */
    ck_assert_ptr_null(gl_chat_template_create(NULL, "nope", "", "", &err));
    ck_assert(strstr(err.message, "unknown chat template") != NULL);
    /* 'jinja' needs a model template. */
    ck_assert_ptr_null(gl_chat_template_create(NULL, "jinja", "", "", &err));
    /* A template we cannot parse but recognise falls back to the built-in... */
    const char *odd = "{% macro x() %}{% endmacro %}<|start_header_id|>";
    gl_chat_template *t = gl_chat_template_create(odd, NULL, "<s>", "</s>", &err);
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(gl_chat_template_name(t), "llama3");
    ck_assert(!gl_chat_template_is_model_source(t));
    gl_chat_template_free(t);
    /* ...unless the user insists on it, or it is unrecognisable. */
    ck_assert_ptr_null(gl_chat_template_create(odd, "jinja", "<s>", "</s>", &err));
    ck_assert(strstr(err.message, "macro") != NULL);
    ck_assert_ptr_null(gl_chat_template_create("{% macro x() %}{% endmacro %}", NULL, "<s>", "</s>", &err));
    /* An override wins over the model's template. */
    t = gl_chat_template_create(TPL_SMOLLM2, "zephyr", "<s>", "</s>", &err);
    ck_assert_str_eq(gl_chat_template_name(t), "zephyr");
    gl_chat_template_free(t);
    /* Unknown family: name "jinja", stop string = EOS text. */
    t = gl_chat_template_create("{% for m in messages %}{{ m.content }}\n{% endfor %}", NULL, "<s>", "<eos>", &err);
    ck_assert_str_eq(gl_chat_template_name(t), "jinja");
    int n;
    const char *const *stops = gl_chat_template_stop_strings(t, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_str_eq(stops[0], "<eos>");
    gl_chat_template_free(t);
}
END_TEST

/* ---- hostile templates: an error, never a crash or a hang -------------------------- */

static char *repeat(const char *unit, int times, const char *tail) {
    size_t u = strlen(unit), t = strlen(tail);
    char *s = malloc(u * (size_t)times + t + 1);
    for (int i = 0; i < times; i++) memcpy(s + u * (size_t)i, unit, u);
    memcpy(s + u * (size_t)times, tail, t + 1);
    return s;
}

START_TEST(hostile) {
    gl_chat_message hi = {"user", "hi", NULL};
    struct { const char *src, *fragment; } cases[] = {
        {"{% if x", "unterminated tag"},
        {"{{ 'abc", "unterminated"},
        {"{# never closed", "unterminated comment"},
        {"{% for m in messages %}x", "missing {% endfor %}"},
        {"{% if 1 %}x{% else %}y{% elif 2 %}{% endif %}", "elif"},
        {"{% if 1 %}x{% else %}y", "missing {% endif %}"},
        {"{% endfor %}", "unsupported tag"},
        {"{{ }}", "expected an expression"},
        {"{{ + }}", "expected an expression"},
        {"{{ 1 + }}", "expected an expression"},
        {"{{ a.b.c }}", "'a' is undefined"},
        {"{{ 'a' + 1 }}", "unsupported operand"},
        {"{{ 1 // 0 }}", "division by zero"},
        {"{{ 9223372036854775807 * 2 }}", "overflow"},
        {"{{ 99999999999999999999 }}", "too large"},
        {"{{ 1.5 }}", "not supported"},
        {"{{ 2 ** 8 }}", "not supported"},
        {"{{ x | nosuchfilter }}", "unknown filter"},
        {"{{ x is nosuchtest }}", "unknown test"},
        {"{{ nosuchfunction() }}", "undefined"},
        {"{{ 'x'.nosuchmethod() }}", "no method"},
        {"{% for i in range(1000000) %}{% for j in range(1000000) %}x{% endfor %}{% endfor %}", "too many steps"},
        {"{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "exceeds"},
        {"{% set ns = namespace(s='x') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "memory"},
        {"{{ range(10000000000) }}", "too large"},
        {"{{ 'x' * 100000000000 }}", "too large"},
        {"{{ messages[::0] }}", "zero"},
        {"{% for a, b in messages %}{% endfor %}", "unpack"},
        /* a namespace that holds itself: printing or comparing it must stop (fuzzer find) */
        {"{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns }}", "nested too deeply"},
        {"{% set ns = namespace(n=0) %}{% set ns.n = ns %}{{ ns == ns }}", "nested too deeply"},
        {"{% set ns = namespace(n=0) %}{% set ns.n = [ns] %}{{ [ns] | join(',') }}", "nested too deeply"},
        {"{{ raise_exception('custom failure') }}", "custom failure"},
        /* an empty message still gives the caller something to show (fuzzer find) */
        {"{{ raise_exception('') }}", "template raised an exception"},
        {"\xff\xfe{{", "unterminated"},
        {"{% set x = 1 %}{{ x() }}", "not callable"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_error(cases[i].src, &hi, 1, cases[i].fragment);

    char *deep_if = repeat("{% if 1 %}", 5000, "");
    expect_error(deep_if, &hi, 1, "nested too deeply");
    free(deep_if);
    char *deep_paren = repeat("(", 100000, "");
    char *tag = malloc(strlen(deep_paren) + 8);
    sprintf(tag, "{{ %s }}", deep_paren);
    expect_error(tag, &hi, 1, "nested too deeply");
    free(tag);
    free(deep_paren);
    char *deep_not = repeat("not ", 5000, "1 }}");
    char *t2 = malloc(strlen(deep_not) + 4);
    sprintf(t2, "{{ %s", deep_not);
    expect_error(t2, &hi, 1, "nested too deeply");
    free(t2);
    free(deep_not);
    char *long_chain = repeat("1 + ", 2000, "1 }}");
    char *t3 = malloc(strlen(long_chain) + 4);
    sprintf(t3, "{{ %s", long_chain);
    expect_error(t3, &hi, 1, "nested too deeply");
    free(t3);
    free(long_chain);

    /* A huge message is fine up to the output limit. */
    size_t big = 4u << 20;
    char *content = malloc(big + 1);
    memset(content, 'a', big);
    content[big] = 0;
    gl_chat_message m = {"user", content, NULL};
    gl_error err;
    gl_chat_template *t = gl_chat_template_create(NULL, "chatml", "", "", &err);
    char *out = gl_chat_template_render(t, &m, 1, true, &err);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(strlen(out), big + strlen("<|im_start|>user\n<|im_end|>\n<|im_start|>assistant\n"));
    free(out);
    gl_chat_template_free(t);
    free(content);
}
END_TEST

/* Random mutations of real templates: any outcome but a crash (run under ASan). */
START_TEST(mutations) {
    const char *seeds[] = {TPL_QWEN25, TPL_LLAMA2, TPL_ZEPHYR, TPL_FEATURES};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    static const char alphabet[] = "{}%#-+()[]'\".|~ \nifornotandelseendsetloop";
    for (int iter = 0; iter < 3000; iter++) {
        const char *seed = seeds[iter % 4];
        size_t n = strlen(seed);
        char *s = malloc(n + 1);
        memcpy(s, seed, n + 1);
        for (int k = 0; k < 1 + iter % 5; k++) {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
            size_t pos = rng % n;
            if (rng & 0x100) s[pos] = alphabet[(rng >> 20) % (sizeof alphabet - 1)];
            else memmove(s + pos, s + pos + 1, n - pos);  /* delete a byte */
            n = strlen(s);
            if (!n) break;
        }
        gl_error err;
        gl_chat_template *t = gl_chat_template_create(s, "jinja", "<s>", "</s>", &err);
        if (t) {
            free(gl_chat_template_render(t, CONV, 4, iter & 1, &err));
            gl_chat_template_free(t);
        }
        free(s);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, builtin_formats);
    tcase_add_test(tc, published_templates);
    tcase_add_test(tc, smollm2_default_system);
    tcase_add_test(tc, smollm2_gguf);
    tcase_add_test(tc, jinja_features);
    tcase_add_test(tc, qwen_tools);
    tcase_add_test(tc, selection);
    tcase_add_test(tc, hostile);
    tcase_add_test(tc, mutations);
    suite_add_tcase(s, tc);
    int failed = test_run_suite(s);
    return failed ? 1 : 0;
}
