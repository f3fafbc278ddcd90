/* test_tool_calls.c -- tool calls recognised in the forms models write
 * them (tools_recognize, tools_maybe_call), linked from the server
 * library with no model and no socket. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tools.h"

#define WEATHER "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"," \
                "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"type\":\"string\",\"enum\":[\"c\",\"f\"]}}," \
                "\"required\":[\"city\"]}}}"
#define TIME "{\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"parameters\":{\"type\":\"object\"}}}"

static void setup_tools(chat_tools *t, const char *extra) {
    char body[2048];
    snprintf(body, sizeof body, "{\"tools\":[" WEATHER "," TIME "]%s}", extra);
    cJSON *b = cJSON_Parse(body);
    ck_assert_ptr_nonnull(b);
    params_error e;
    ck_assert_int_eq(tools_parse(b, t, &e), 0);
    cJSON_Delete(b);
}

/* The calls text makes, as "name(args);..." ("" when it is text). */
static char *calls_of(const chat_tools *t, const char *text) {
    int n = 0;
    tool_call *calls = tools_recognize(text, strlen(text), t, &n);
    static char out[1024];
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        strcat(out, calls[i].name);
        strcat(out, "(");
        strcat(out, calls[i].arguments);
        strcat(out, ");");
    }
    tools_calls_free(calls, n);
    return out;
}

START_TEST(test_each_form) {
    chat_tools t;
    setup_tools(&t, "");
    static const char *const forms[][2] = {
        /* Hermes / Qwen, with the spacing models vary */
        {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "get_weather({\"city\":\"Paris\"});"},
        {"  <tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}</tool_call>\n"
         "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>",
         "get_weather({\"city\":\"Oslo\"});get_time({});"},
        /* bare JSON, "arguments" or "parameters", arguments as JSON text */
        {"{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}",
         "get_weather({\"city\":\"Paris\",\"unit\":\"c\"});"},
        {"\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}\n", "get_weather({\"city\":\"Rome\"});"},
        {"{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Kyiv\\\"}\"}", "get_weather({\"city\":\"Kyiv\"});"},
        /* a list of calls */
        {"[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}, {\"name\": \"get_time\", \"arguments\": {}}]",
         "get_weather({\"city\":\"A\"});get_time({});"},
        /* a fenced block */
        {"```json\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n```",
         "get_weather({\"city\":\"Paris\"});"},
        {"```\n[{\"name\": \"get_time\"}]\n```\n", "get_time({});"},
        /* Llama 3.x: python_tag, several separated by ';' */
        {"<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Lima\"}}",
         "get_weather({\"city\":\"Lima\"});"},
        {"{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"city\": \"B\"}}",
         "get_time({});get_weather({\"city\":\"B\"});"},
        /* Mistral */
        {"[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Nice\"}}]",
         "get_weather({\"city\":\"Nice\"});"},
        {"[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Bern\"}", "get_weather({\"city\":\"Bern\"});"},
        /* OpenAI's own shape */
        {"{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\":\\\"X\\\"}\"}}",
         "get_weather({\"city\":\"X\"});"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        ck_assert_msg(!strcmp(calls_of(&t, forms[i][0]), forms[i][1]), "form %zu: got '%s'", i, calls_of(&t, forms[i][0]));
        ck_assert_int_eq(tools_maybe_call(forms[i][0], strlen(forms[i][0])), 1);
    }
    tools_free(&t);
}
END_TEST

START_TEST(test_what_stays_text) {
    chat_tools t;
    setup_tools(&t, "");
    static const char *const texts[] = {
        "The weather in Paris is sunny.",
        "{\"name\": \"get_stock\", \"arguments\": {\"sym\": \"X\"}}",        /* an unknown tool */
        "{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\"}}",     /* a required argument missing */
        "{\"name\": \"get_weather\", \"arguments\": [1]}",                  /* arguments not an object */
        "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}} and some words after",
        "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\"}}", /* not closed */
        "{\"city\": \"Paris\"}",                                               /* plain JSON, no call */
        "[1, 2, 3]",
        "```python\nprint(1)\n```",
        "[TOOL_CALLS]",
        "",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        ck_assert_msg(!strcmp(calls_of(&t, texts[i]), ""), "text %zu: got '%s'", i, calls_of(&t, texts[i]));
    /* what a stream holds back, what it sends at once */
    ck_assert_int_eq(tools_maybe_call("", 0), -1);
    ck_assert_int_eq(tools_maybe_call("  \n", 3), -1);
    ck_assert_int_eq(tools_maybe_call("<tool_", 6), -1);
    ck_assert_int_eq(tools_maybe_call("[TOOL", 5), -1); /* Mistral's tag, or a list */
    ck_assert_int_eq(tools_maybe_call("[1", 2), 1);
    ck_assert_int_eq(tools_maybe_call("``", 2), -1);
    ck_assert_int_eq(tools_maybe_call("The", 3), 0);
    ck_assert_int_eq(tools_maybe_call("<b>", 3), 0);
    tools_free(&t);
}
END_TEST

START_TEST(test_parallel_false_keeps_one) {
    chat_tools t;
    setup_tools(&t, ",\"parallel_tool_calls\":false");
    ck_assert_str_eq(calls_of(&t, "[{\"name\": \"get_time\"}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Z\"}}]"),
                     "get_time({});");
    tools_free(&t);
}
END_TEST

START_TEST(test_duplicate_names_refused) {
    cJSON *b = cJSON_Parse("{\"tools\":[" WEATHER "," TIME "," WEATHER "]}");
    chat_tools t;
    params_error e;
    ck_assert_int_eq(tools_parse(b, &t, &e), -1);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "tools[2]");
    ck_assert_ptr_nonnull(strstr(e.message, "names two tools"));
    cJSON_Delete(b);
}
END_TEST

int main(void) {
    const TTest *tests[] = {test_each_form, test_what_stays_text, test_parallel_false_keeps_one,
                            test_duplicate_names_refused};
    return test_run_tests("tool_calls", tests, (int)(sizeof tests / sizeof tests[0])) ? 1 : 0;
}
