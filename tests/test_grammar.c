/* test_grammar.c -- GBNF parser, JSON Schema compiler, the byte automaton
 * and the token mask (against a brute-force check of every token). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "json_schema.h"
#include "testutil.h"

/* A vocabulary of every single byte, some multi-symbol tokens, a token
 * that is half a UTF-8 character, an empty control token and an EOS. */
static const char *const MULTI[] = {"{\"", "\":", "\",\"", "true", "false", "null", "12", "3.", "\u00e9", "\xc3",
                                    "\xa9t", "ab", "abc", "},", "}", " \"", "\n  ", "-1", "2026-", "01"};
#define N_MULTI (int)(sizeof MULTI / sizeof *MULTI)
#define N_VOCAB (256 + N_MULTI + 2)
#define EOS_ID (N_VOCAB - 1)

static gr_vocab *vocab;
static char single[256][1];

static void make_vocab(void) {
    const char *pieces[N_VOCAB];
    size_t lens[N_VOCAB];
    bool eog[N_VOCAB];
    for (int i = 0; i < 256; i++) {
        single[i][0] = (char)i;
        pieces[i] = single[i];
        lens[i] = 1;
        eog[i] = false;
    }
    for (int i = 0; i < N_MULTI; i++) {
        pieces[256 + i] = MULTI[i];
        lens[256 + i] = strlen(MULTI[i]);
        eog[256 + i] = false;
    }
    pieces[N_VOCAB - 2] = "";
    lens[N_VOCAB - 2] = 0;
    eog[N_VOCAB - 2] = false;
    pieces[EOS_ID] = "";
    lens[EOS_ID] = 0;
    eog[EOS_ID] = true;
    vocab = gr_vocab_create(N_VOCAB, pieces, lens, eog);
    ck_assert_ptr_nonnull(vocab);
}

static gr_grammar *gbnf(const char *text) {
    gl_error err = {{0}};
    gr_grammar *g = gr_compile(text, strlen(text), &err);
    ck_assert_msg(g != NULL, "compile failed: %s\n%s", err.message, text);
    return g;
}

static gr_grammar *schema(const char *json) {
    gl_error err = {{0}};
    gr_grammar *g = gl_grammar_from_json_schema(json, strlen(json), &err);
    ck_assert_msg(g != NULL, "schema failed: %s\n%s", err.message, json);
    return g;
}

/* Whether the grammar accepts text as a complete sentence. */
static bool accepts(gr_grammar *g, const char *text) {
    if (!vocab) make_vocab();
    gr_matcher *m = gr_matcher_create(g, vocab, NULL);
    ck_assert_ptr_nonnull(m);
    bool ok = gr_matcher_accept_bytes(m, text, strlen(text)) && gr_matcher_can_end(m);
    gr_matcher_free(m);
    return ok;
}

static void compile_fails(const char *text, const char *fragment) {
    gl_error err = {{0}};
    gr_grammar *g = gr_compile(text, strlen(text), &err);
    ck_assert_msg(g == NULL, "expected failure for: %s", text);
    ck_assert_msg(strstr(err.message, fragment), "message '%s' lacks '%s'", err.message, fragment);
}

static void schema_fails(const char *json, const char *fragment) {
    gl_error err = {{0}};
    gr_grammar *g = gl_grammar_from_json_schema(json, strlen(json), &err);
    ck_assert_msg(g == NULL, "expected failure for: %s", json);
    ck_assert_msg(strstr(err.message, fragment), "message '%s' lacks '%s'", err.message, fragment);
}

START_TEST(test_gbnf_errors) {
    compile_fails("root ::= foo", "line 1, column 10: rule 'foo' is used but never defined");
    compile_fails("a ::= \"x\"", "no rule named 'root'");
    compile_fails("root ::= \"abc", "unterminated string literal");
    compile_fails("root ::= [a-", "unterminated character class");
    compile_fails("root ::= [z-a]", "range end below its start");
    compile_fails("root ::= root \"x\" | \"y\"", "left-recursive");
    compile_fails("root ::= a\na ::= b\nb ::= \"\" a \"x\" | \"y\"", "left-recursive");
    compile_fails("root ::= (\"a\"?)*", "repeats something that can match nothing");
    /* found by the fuzz smoke run: 112 nullable copies in a row made each mask take seconds */
    compile_fails("root ::= (\"a\" | [^x-zz] | \"\"){112}", "repeats something that can match nothing");
    compile_fails("root ::= x{2,5}\nx ::= \"a\"?", "repeats something that can match nothing");
    compile_fails("root ::= \"x\" root", "accepts nothing");
    compile_fails("root ::= []", "accepts nothing");
    compile_fails("root ::= \"x\"{5,2}", "maximum is below the minimum");
    compile_fails("root ::= \"x\"{99999}", "repetition count above");
    compile_fails("root ::= (\"x\"", "unclosed parenthesis");
    compile_fails("root ::= \"x\" )", "')' without '('");
    compile_fails("root ::= \"x\"\nroot ::= \"y\"", "line 2, column 1: rule 'root' is defined twice");
    compile_fails("root ::= \"\\q\"", "unknown escape");
    compile_fails("root ::= @", "unexpected character");
    compile_fails("root ::= \"\xff\"", "invalid UTF-8");
    char deep[400] = "root ::= ";
    for (int i = 0; i < 100; i++) strcat(deep, "(");
    strcat(deep, "\"x\"");
    for (int i = 0; i < 100; i++) strcat(deep, ")");
    compile_fails(deep, "nested deeper than");
    /* nested repetitions stay linear in size; many big ones hit the size bound */
    gr_release(gbnf("root ::= ((((\"x\"{1000}){1000}){1000}){1000})"));
    static char big[8000] = "root ::= ";
    for (int i = 0; i < 600; i++) strcat(big, "[a]{2000} ");
    compile_fails(big, "more than");
}
END_TEST

START_TEST(test_gbnf_arithmetic) {
    gr_grammar *g = gbnf("# arithmetic\n"
                         "root ::= expr\n"
                         "expr ::= term ((\"+\" | \"-\") term)*\n"
                         "term ::= factor ((\"*\" | \"/\") factor)*\n"
                         "factor ::= [0-9]+ | \"(\" expr \")\"\n");
    ck_assert(accepts(g, "1+2*(3-4)/5"));
    ck_assert(accepts(g, "((((7))))"));
    ck_assert(!accepts(g, "1+*2"));
    ck_assert(!accepts(g, "(1+2"));
    ck_assert(!accepts(g, ""));
    gr_release(g);
}
END_TEST

START_TEST(test_gbnf_features) {
    gr_grammar *g = gbnf("root ::= \"a\"{2,3} [^x-z]? . \"\\u00e9\"\n");
    ck_assert(accepts(g, "aab\xe2\x82\xac\xc3\xa9"));
    ck_assert(accepts(g, "aaa_q\xc3\xa9"));
    ck_assert(!accepts(g, "aaaaaq\xc3\xa9"));
    ck_assert(!accepts(g, "aayq\xc3\xa9"));
    gr_release(g);
    g = gbnf("root ::= (\"ab\" | \"cd\")+ \"!\"\n");
    ck_assert(accepts(g, "abcdab!"));
    ck_assert(!accepts(g, "abc!"));
    gr_release(g);
    /* the same text is the same compiled grammar */
    gr_grammar *a = gbnf("root ::= \"same\""), *b = gbnf("root ::= \"same\"");
    ck_assert_ptr_eq(a, b);
    gr_release(a);
    gr_release(b);
}
END_TEST

START_TEST(test_partial_utf8) {
    if (!vocab) make_vocab();
    gr_grammar *g = gbnf("root ::= \"\u00e9\" [a-z]\n");
    gr_matcher *m = gr_matcher_create(g, vocab, NULL);
    ck_assert(gr_matcher_accept_bytes(m, "\xc3", 1));  /* first half of é */
    ck_assert(!gr_matcher_can_end(m));
    ck_assert(!gr_matcher_accept_bytes(m, "a", 1));    /* not a continuation byte */
    ck_assert(!gr_matcher_accept_bytes(m, "\xa8", 1)); /* è, not é */
    ck_assert(gr_matcher_accept_bytes(m, "\xa9t", 2)); /* a token spanning the rest and a letter */
    gr_matcher_free(m);
    m = gr_matcher_create(g, vocab, NULL);
    ck_assert(!gr_matcher_accept_bytes(m, "\xe0", 1)); /* only an overlong form could reach U+00E9 */
    ck_assert(!gr_matcher_accept_bytes(m, "\xc3\xa9\xc0", 3));
    ck_assert(gr_matcher_accept_bytes(m, "\xc3\xa9t", 3));
    ck_assert(gr_matcher_is_done(m));
    gr_matcher_free(m);
    gr_release(g);
}
END_TEST

/* The mask must allow exactly the tokens whose bytes the grammar accepts
 * next (brute force: a fresh matcher per token). */
static void check_mask(gr_grammar *g, const char *prefix) {
    if (!vocab) make_vocab();
    gr_matcher *m = gr_matcher_create(g, vocab, NULL);
    ck_assert(gr_matcher_accept_bytes(m, prefix, strlen(prefix)));
    float logits[N_VOCAB];
    for (int t = 0; t < N_VOCAB; t++) logits[t] = 0;
    int allowed = gr_matcher_mask(m, logits), count = 0;
    for (int t = 0; t < N_VOCAB; t++) {
        gr_matcher *b = gr_matcher_create(g, vocab, NULL);
        ck_assert(gr_matcher_accept_bytes(b, prefix, strlen(prefix)));
        bool expect = gr_matcher_accept_token(b, t);
        gr_matcher_free(b);
        ck_assert_msg(expect == (logits[t] == 0), "prefix '%s' token %d: brute force %d, mask %d", prefix, t, expect,
                      logits[t] == 0);
        count += expect;
    }
    ck_assert_int_eq(count, allowed);
    gr_matcher_free(m);
}

START_TEST(test_mask_matches_brute_force) {
    gr_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},\"b\":{\"type\":\"string\"}},"
                           "\"required\":[\"a\"]}");
    const char *prefixes[] = {"", "{", "{\"", "{\"a\":", "{\"a\": true", "{\"a\":true,\"b\":\"x", "{\"a\":true,\"b\":\"\xc3",
                              "{\"a\":true}", NULL};
    for (int i = 0; prefixes[i]; i++) {
        check_mask(g, prefixes[i]); /* twice: the second comes from the mask cache */
        check_mask(g, prefixes[i]);
    }
    gr_release(g);
    g = gbnf("root ::= \"ab\" [c-d]* | \"a\" \"\u00e9\"+\n");
    check_mask(g, "");
    check_mask(g, "a");
    check_mask(g, "ab");
    check_mask(g, "a\xc3");
    gr_release(g);
}
END_TEST

START_TEST(test_eos_and_done) {
    if (!vocab) make_vocab();
    gr_grammar *g = gbnf("root ::= [0-9]+\n");
    gr_matcher *m = gr_matcher_create(g, vocab, NULL);
    float logits[N_VOCAB] = {0};
    gr_matcher_mask(m, logits);
    ck_assert(isinf(logits[EOS_ID]));                     /* nothing yet: no EOS */
    ck_assert(isinf(logits[N_VOCAB - 2]));                /* control tokens never */
    ck_assert(gr_matcher_accept_token(m, 256 + 6));       /* "12" */
    for (int t = 0; t < N_VOCAB; t++) logits[t] = 0;
    gr_matcher_mask(m, logits);
    ck_assert(logits[EOS_ID] == 0);
    ck_assert(!gr_matcher_is_done(m));                    /* more digits may follow */
    gr_matcher_free(m);
    gr_release(g);
    g = schema("{\"const\": 7}");
    m = gr_matcher_create(g, vocab, NULL);
    ck_assert(gr_matcher_accept_bytes(m, "7", 1));
    ck_assert(gr_matcher_is_done(m));
    gr_matcher_free(m);
    gr_release(g);
}
END_TEST

START_TEST(test_schema_errors) {
    schema_fails("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"uniqueItems\":true}}}",
                 "json_schema at /properties/x/uniqueItems: uniqueItems cannot be enforced");
    schema_fails("{\"$ref\":\"#/$defs/missing\"}", "does not resolve");
    schema_fails("{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":6}", "/format: strings of format 'ipv4' are 7 to 15");
    schema_fails("{\"type\":\"string\",\"format\":\"hostname\",\"maxLength\":0}", "no string fits");
    schema_fails("{\"type\":\"string\",\"pattern\":\"^a{2}b?$\",\"minLength\":4}", "/pattern: strings of the pattern are 2 to 3");
    schema_fails("{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"x\"}",
                 "/pattern: no string matches format 'date' and the pattern: no string fits");
    schema_fails("{\"type\":\"number\",\"minimum\":1,\"exclusiveMaximum\":1}", "the minimum is above the maximum");
    schema_fails("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "the minimum is above the maximum");
    /* unsatisfiable schemas are refused, never compiled into something that breaks them */
    schema_fails("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"zz\"],\"additionalProperties\":false}",
                 "required property 'zz'");
    schema_fails("{\"type\":\"string\",\"enum\":[1,2]}", "no enum value satisfies");
    schema_fails("{\"type\":\"integer\",\"const\":\"a\"}", "const value does not satisfy");
    schema_fails("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "no type is in every branch");
    schema_fails("{\"not\":{\"type\":\"string\"}}", "'not' cannot be enforced");
    schema_fails("{\"type\":\"strin\"}", "unknown type 'strin'");
    schema_fails("{\"type\":\"object\"", "not valid JSON");
    schema_fails("false", "accepts nothing");
    schema_fails("{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "(?...)");
    schema_fails("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems 3 is above maxItems 2");
    /* past LONG_MAX: refused before any cast (a fuzz find under UBSan) */
    schema_fails("{\"type\":\"array\",\"maxItems\":7777777777777777777777777777777}", "/maxItems: values above");
    schema_fails("{\"type\":\"string\",\"maxLength\":1.5}", "/maxLength: must be a non-negative integer");
    schema_fails("{\"type\":\"string\",\"minLength\":-1e300}", "/minLength: must be a non-negative integer");
    char deep[4000] = "";
    for (int i = 0; i < 80; i++) strcat(deep, "{\"type\":\"array\",\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 80; i++) strcat(deep, "}");
    schema_fails(deep, "nested deeper than");
}
END_TEST

START_TEST(test_schema_objects) {
    gr_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                           "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}");
    ck_assert(accepts(g, "{\"b\":\"x\"}"));
    ck_assert(accepts(g, "{\"a\":1,\"b\":\"x\",\"c\":false}"));
    ck_assert(accepts(g, "{ \"a\": -3, \"b\": \"\" }"));
    ck_assert(accepts(g, "{\n  \"b\": \"y\",\n  \"c\": true\n}"));
    ck_assert(!accepts(g, "{\"a\":1}"));
    ck_assert(!accepts(g, "{\"b\":\"x\",\"a\":1}")); /* schema order */
    ck_assert(!accepts(g, "{\"b\":\"x\",}"));
    ck_assert(accepts(g, "{\"b\":\"x\",\"d\":1}")); /* additionalProperties absent: other keys, after */
    ck_assert(!accepts(g, "{\"b\":\"x\",\"b\":1}"));
    gr_release(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"string\"}},\"additionalProperties\":false}");
    ck_assert(accepts(g, "{\"b\":\"x\"}"));
    ck_assert(!accepts(g, "{\"b\":\"x\",\"d\":1}"));
    gr_release(g);
    /* enum beside type keeps the values of that type; numbers in fractional bounds */
    g = schema("{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\",1,null]}");
    ck_assert(accepts(g, "\"celsius\""));
    ck_assert(!accepts(g, "1"));
    ck_assert(!accepts(g, "null"));
    gr_release(g);
    g = schema("{\"type\":\"number\",\"minimum\":-2.5,\"exclusiveMaximum\":0.75}");
    ck_assert(accepts(g, "-2.5") && accepts(g, "-2.49") && accepts(g, "0") && accepts(g, "0.7499"));
    ck_assert(!accepts(g, "-2.51") && !accepts(g, "0.75") && !accepts(g, "0.750") && !accepts(g, "1"));
    gr_release(g);
    /* allOf merged, $ref beside type, annotations ignored */
    g = schema("{\"$defs\":{\"base\":{\"properties\":{\"id\":{\"type\":\"integer\"}},\"required\":[\"id\"]}},"
               "\"x-vendor\":1,\"id\":\"u\",\"allOf\":[{\"$ref\":\"#/$defs/base\"},{\"properties\":{\"n\":{\"type\":\"string\"}},"
               "\"required\":[\"n\"]}],\"type\":\"object\",\"additionalProperties\":false,"
               "\"properties\":{\"id\":{\"minimum\":1},\"n\":{\"maxLength\":3}}}");
    ck_assert(accepts(g, "{\"id\":1,\"n\":\"abc\"}"));
    ck_assert(!accepts(g, "{\"id\":0,\"n\":\"abc\"}"));
    ck_assert(!accepts(g, "{\"id\":1,\"n\":\"abcd\"}"));
    ck_assert(!accepts(g, "{\"n\":\"abc\"}"));
    gr_release(g);
    /* pattern with lengths folded into its repetition */
    g = schema("{\"type\":\"string\",\"pattern\":\"^[a-z]+$\",\"minLength\":2,\"maxLength\":3}");
    ck_assert(accepts(g, "\"ab\"") && accepts(g, "\"abc\""));
    ck_assert(!accepts(g, "\"a\"") && !accepts(g, "\"abcd\"") && !accepts(g, "\"aB\""));
    gr_release(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"null\"}},\"additionalProperties\":{\"type\":\"integer\"}}");
    ck_assert(accepts(g, "{}"));
    ck_assert(accepts(g, "{\"zz\":3}"));
    ck_assert(accepts(g, "{\"a\":null,\"q\":1,\"r\":2}"));
    ck_assert(!accepts(g, "{\"q\":\"s\"}"));
    /* an additional key never repeats a declared one, in any spelling (a reader keeps the last) */
    ck_assert(!accepts(g, "{\"a\":null,\"a\":1}"));
    ck_assert(!accepts(g, "{\"a\":1}"));
    ck_assert(!accepts(g, "{\"\\u0061\":1}"));
    ck_assert(accepts(g, "{\"aa\":1,\"\":2,\"b\\n\":3}"));
    gr_release(g);
    g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"nam\":{},\"n\\u00e9\":{}},"
               "\"required\":[\"name\"],\"additionalProperties\":{\"type\":\"boolean\"}}");
    ck_assert(accepts(g, "{\"name\":\"x\",\"names\":true,\"na\":false,\"n\":true,\"\\/\":true,\"ne\":true}"));
    ck_assert(!accepts(g, "{\"name\":\"x\",\"name\":false}"));
    ck_assert(accepts(g, "{\"name\":\"x\",\"nam\":false,\"n\u00e9\":1}"));  /* the declared ones */
    ck_assert(!accepts(g, "{\"name\":\"x\",\"nam\":1,\"nam\":false}"));
    ck_assert(!accepts(g, "{\"name\":\"x\",\"n\u00e9\":1,\"n\u00e9\":false}"));
    ck_assert(!accepts(g, "{\"name\":\"x\",\"z\":true,\"n\u00e9\":false}"));
    ck_assert(accepts(g, "{\"name\":\"x\",\"n\u00e9e\":false}"));
    gr_release(g);
    g = schema("{\"properties\":{\"a-]\":{},\"q\\\"\":{}},\"additionalProperties\":{}}"); /* class and escape characters */
    ck_assert(accepts(g, "{\"a-]\":1,\"q\\\"\":2,\"b\":3,\"a\":4,\"q\\\\\":5,\"a-\":6}"));
    ck_assert(!accepts(g, "{\"b\":3,\"a-]\":1}"));
    ck_assert(!accepts(g, "{\"b\":3,\"q\\\"\":1}"));
    gr_release(g);
    g = schema("{\"type\":\"object\"}");
    ck_assert(accepts(g, "{\"x\":[1,{\"y\":null}],\"z\":\"\\u00e9\\n\"}"));
    gr_release(g);
}
END_TEST

START_TEST(test_schema_values) {
    gr_grammar *g = schema("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"enum\":[1,\"two\",null]}],"
                           "\"items\":{\"type\":\"number\"},\"minItems\":1,\"maxItems\":4}");
    ck_assert(accepts(g, "[\"a\"]"));
    ck_assert(accepts(g, "[\"a\",\"two\",1.5e3,-0.25]"));
    ck_assert(!accepts(g, "[]"));
    ck_assert(!accepts(g, "[\"a\",2]"));
    ck_assert(!accepts(g, "[\"a\",1,2,3,4]"));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}");
    ck_assert(accepts(g, "\"ab\""));
    ck_assert(accepts(g, "\"a\\nb\""));
    ck_assert(!accepts(g, "\"a\""));
    ck_assert(!accepts(g, "\"abcd\""));
    gr_release(g);
    g = schema("{\"type\":[\"integer\",\"null\"]}");
    ck_assert(accepts(g, "-12"));
    ck_assert(accepts(g, "null"));
    ck_assert(!accepts(g, "1.5"));
    ck_assert(!accepts(g, "012"));
    gr_release(g);
    g = schema("{\"anyOf\":[{\"const\":\"x\"},{\"type\":\"boolean\"}]}");
    ck_assert(accepts(g, "\"x\""));
    ck_assert(accepts(g, "true"));
    ck_assert(!accepts(g, "\"y\""));
    gr_release(g);
}
END_TEST

START_TEST(test_schema_integer_ranges) {
    struct { const char *schema; long lo, hi; } cases[] = {
        {"{\"type\":\"integer\",\"minimum\":-37,\"maximum\":1234}", -37, 1234},
        {"{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}", 0, 9},
        {"{\"type\":\"integer\",\"exclusiveMinimum\":99,\"exclusiveMaximum\":1000}", 100, 999},
        {"{\"type\":\"integer\",\"minimum\":-1500,\"maximum\":-20}", -1500, -20},
        {"{\"type\":\"integer\",\"minimum\":17}", 17, 1000000},
        {"{\"type\":\"integer\",\"maximum\":-5}", -1000000, -5},
    };
    char buf[32];
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        gr_grammar *g = schema(cases[c].schema);
        for (long x = -2000; x <= 2000; x++) {
            snprintf(buf, sizeof buf, "%ld", x);
            bool in = x >= cases[c].lo && x <= cases[c].hi;
            ck_assert_msg(accepts(g, buf) == in, "%s: %ld", cases[c].schema, x);
        }
        gr_release(g);
    }
}
END_TEST

/* A pattern with minLength/maxLength against the same pattern without
 * them: every string over a small alphabet (quote, newline and a two-byte
 * character included, each one code point) up to 6 code points is accepted
 * exactly when the pattern accepts it and its length is within the bounds. */
START_TEST(test_schema_pattern_lengths) {
    static const struct { const char *pattern; int min, max; } cases[] = {
        {"a+b", 2, 4},        {"^(a|b1)*$", 1, 4},  {"^[^a]*a", 0, 3},   {"b{2}", 4, -1},
        {"\\\"", 0, 3},       {"^(?:\\\\S+\\\\s+){0,1}\\\\S+$", 2, 4},  {"\u00e9.", 3, 5},
        {"^(a|\u00e9b|1)+$", 2, 5}, {"1$", 0, 2},  {"^[ab1]{1,3}$", 2, 5}, {"^[^\\\"]+$", 0, 4},
        {"(a1+)?", 1, 3},     {"^(a|b){0,2}1?$", 0, 2}, {"b.*a|a1", 3, 5},
    };
    static const char *const alpha[] = {"a", "b", "1", "\\\"", "\\n", "\u00e9"};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char json[256], len_kw[64] = "";
        if (cases[c].max >= 0) snprintf(len_kw, sizeof len_kw, ",\"maxLength\":%d", cases[c].max);
        snprintf(json, sizeof json, "{\"type\":\"string\",\"pattern\":\"%s\"}", cases[c].pattern);
        gr_grammar *free_g = schema(json);
        snprintf(json, sizeof json, "{\"type\":\"string\",\"pattern\":\"%s\",\"minLength\":%d%s}", cases[c].pattern,
                 cases[c].min, len_kw);
        gr_grammar *g = schema(json);
        int idx[6] = {0};
        for (int len = 0; len <= 6; len++) {
            int total = 1;
            for (int i = 0; i < len; i++) total *= 6;
            for (int k = 0; k < total; k++) {
                char text[64] = "\"";
                for (int i = 0, v = k; i < len; i++, v /= 6) idx[i] = v % 6, strcat(text, alpha[idx[i]]);
                strcat(text, "\"");
                bool in = len >= cases[c].min && (cases[c].max < 0 || len <= cases[c].max) && accepts(free_g, text);
                ck_assert_msg(accepts(g, text) == in, "%s: %s", json, text);
            }
        }
        gr_release(g);
        gr_release(free_g);
    }
    /* each format's regex against its prelude rule, within a binding bound */
    static const struct { const char *format; int min, max; const char *samples[8]; } formats[] = {
        {"time", 0, 12, {"13:45:00Z", "13:45:00.12Z", "13:45:00.123Z", "24:00:00Z", "01:02:03+05:30", NULL}},
        {"ipv6", 0, 10, {"::1", "fe80::1", "1:2:3:4:5:6:7:8", "::", "1::2:3:4", "12345::1", "a:b:c:d:e", NULL}},
        {"duration", 0, 6, {"P1D", "PT1H2M", "P1Y2M3D", "P", "P1W", "PT1.5S", "P1H", NULL}},
        {"date-time", 25, 30, {"2024-02-28T13:45:00+05:30", "2024-02-28T13:45:00Z", "2024-02-28T13:45:00.1234+05:30",
                               "2024-02-29T13:45:00+05:30", "2023-02-29T13:45:00+05:30", "2023-01-31T13:45:00+05:30",
                               "2023-04-31T13:45:00+05:30", NULL}},
        {"hostname", 0, 10, {"a.b-c.d", "abc-.de", "example.com", "ex-1", "-ab", "a..b", "a.b.c.d.e", NULL}},
        {"email", 0, 9, {"a@b.cd", "a+b@c.de", "ab@c", "abcd@e.fg", "abcde@f.gh", "a@b.c.d", NULL}},
        {"uri-reference", 0, 4, {"", "a/b", "#x", "a b", "/a/b", "/a/bc", NULL}},
    };
    for (size_t f = 0; f < sizeof formats / sizeof *formats; f++) {
        char json[160];
        snprintf(json, sizeof json, "{\"type\":\"string\",\"format\":\"%s\"}", formats[f].format);
        gr_grammar *free_g = schema(json);
        snprintf(json, sizeof json, "{\"type\":\"string\",\"format\":\"%s\",\"minLength\":%d,\"maxLength\":%d}",
                 formats[f].format, formats[f].min, formats[f].max);
        gr_grammar *g = schema(json);
        int n_in = 0, n_out = 0;
        for (int i = 0; formats[f].samples[i]; i++) {
            char text[64];
            int len = (int)strlen(formats[f].samples[i]);
            snprintf(text, sizeof text, "\"%s\"", formats[f].samples[i]);
            bool in = len >= formats[f].min && len <= formats[f].max && accepts(free_g, text);
            ck_assert_msg(accepts(g, text) == in, "%s: %s", json, text);
            n_in += in, n_out += !in && accepts(free_g, text);
        }
        ck_assert_msg(n_in && n_out, "%s: %d in, %d of the format out", json, n_in, n_out);
        gr_release(g);
        gr_release(free_g);
    }
    /* a loop reached after a fixed prefix is one repetition, however long */
    gr_grammar *g = schema("{\"type\":\"string\",\"pattern\":\"^x[a-z]*$\",\"minLength\":99999,\"maxLength\":100000}");
    char *huge = malloc(100010);
    huge[0] = '"', huge[1] = 'x';
    memset(huge + 2, 'q', 99998); /* 99999 code points */
    strcpy(huge + 100000, "\"");
    ck_assert(accepts(g, huge));
    strcpy(huge + 100000, "qq\"");
    ck_assert(!accepts(g, huge));
    free(huge);
    gr_release(g);
    /* long strings share one rule per bound pair */
    g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":1500,\"maxLength\":2500},"
               "\"b\":{\"type\":\"string\",\"minLength\":1500,\"maxLength\":2500}},\"required\":[\"a\",\"b\"]}");
    char *two = malloc(6000);
    for (int a_len = 1499; a_len <= 1500; a_len++) {
        strcpy(two, "{\"a\":\"");
        memset(two + 6, 'q', (size_t)a_len);
        strcpy(two + 6 + a_len, "\",\"b\":\"");
        memset(two + 13 + a_len, 'q', 2500);
        strcpy(two + 2513 + a_len, "\"}");
        ck_assert(accepts(g, two) == (a_len == 1500));
    }
    free(two);
    gr_release(g);
    /* anchors bind to their own alternative: ^a|b$ is "starts with a" or "ends with b" */
    g = schema("{\"type\":\"string\",\"pattern\":\"^a|b$\"}");
    ck_assert(accepts(g, "\"ax\"") && accepts(g, "\"xb\"") && accepts(g, "\"a\"") && accepts(g, "\"b\""));
    ck_assert(!accepts(g, "\"xa\"") && !accepts(g, "\"bx\"") && !accepts(g, "\"\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"^\\\\S+$|^$\",\"maxLength\":3}");
    ck_assert(accepts(g, "\"\"") && accepts(g, "\"abc\"") && !accepts(g, "\"a c\"") && !accepts(g, "\"abcd\""));
    gr_release(g);
    /* dates: the days of each month, February 29 in leap years */
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    static const char *const good[] = {"2024-01-31", "2024-02-29", "2000-02-29", "2023-04-30", "1996-02-29", "2023-12-31"};
    static const char *const bad[] = {"2023-02-29", "1900-02-29", "2023-04-31", "2024-02-30", "2024-13-01", "2024-00-10"};
    for (int i = 0; i < 6; i++) {
        char text[32];
        snprintf(text, sizeof text, "\"%s\"", good[i]);
        ck_assert_msg(accepts(g, text), "%s", text);
        snprintf(text, sizeof text, "\"%s\"", bad[i]);
        ck_assert_msg(!accepts(g, text), "%s", text);
    }
    gr_release(g);
    /* a format and a pattern: both */
    g = schema("{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^10\\\\.|\\\\.1$\",\"maxLength\":9}");
    ck_assert(accepts(g, "\"10.0.0.2\"") && accepts(g, "\"9.0.0.1\"") && accepts(g, "\"10.20.3.4\""));
    ck_assert(!accepts(g, "\"11.0.0.2\"") && !accepts(g, "\"10.200.3.4\"") && !accepts(g, "\"10.0.0\""));
    gr_release(g);
    /* a repetition of something that matches "" (refused by the grammar) goes through the automaton */
    g = schema("{\"type\":\"string\",\"pattern\":\"^(a*1?)*b$\"}");
    ck_assert(accepts(g, "\"b\"") && accepts(g, "\"a1a1aab\"") && accepts(g, "\"11b\""));
    ck_assert(!accepts(g, "\"ba\"") && !accepts(g, "\"a\"") && !accepts(g, "\"cb\""));
    gr_release(g);
    /* formats: the bounds intersected, redundant bounds change nothing */
    g = schema("{\"type\":\"string\",\"format\":\"ipv4\",\"maxLength\":9}");
    ck_assert(accepts(g, "\"10.0.0.1\"") && accepts(g, "\"1.22.3.4\"") && accepts(g, "\"1.2.3.4\""));
    ck_assert(!accepts(g, "\"10.0.10.25\"") && !accepts(g, "\"10.0.0.255\"") && !accepts(g, "\"1.2.3\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"date\",\"minLength\":1,\"maxLength\":255}");
    ck_assert(accepts(g, "\"2024-02-28\"") && !accepts(g, "\"2024-2-28\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"uri\",\"minLength\":12,\"maxLength\":14}");
    ck_assert(accepts(g, "\"http://a.b/cd\"") && accepts(g, "\"http://a.b/c\"") && accepts(g, "\"https://a.b/c\""));
    ck_assert(!accepts(g, "\"http://a.b/\"") && !accepts(g, "\"https://a.b/cde\"") && !accepts(g, "\"http//a.b/cd\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"email\",\"maxLength\":7}");
    ck_assert(accepts(g, "\"a@b.cd\"") && accepts(g, "\"ab@c.de\"") && !accepts(g, "\"abc@d.ef\"") && !accepts(g, "\"a@b\""));
    gr_release(g);
    /* past the grammar's repeat bound, in blocks */
    g = schema("{\"type\":\"string\",\"pattern\":\"^x[a-z]*$\",\"minLength\":1500,\"maxLength\":2500}");
    char big[2600] = "\"x";
    memset(big + 2, 'q', 1499); /* 1500 code points */
    strcpy(big + 1501, "\"");
    ck_assert(accepts(g, big));
    big[1500] = 0, strcat(big, "\"");
    ck_assert(!accepts(g, big));
    memset(big + 1500, 'q', 1001);
    strcpy(big + 2501, "\"");
    ck_assert(accepts(g, big));
    strcpy(big + 2501, "q\"");
    ck_assert(!accepts(g, big));
    gr_release(g);
}
END_TEST

START_TEST(test_schema_strings) {
    gr_grammar *g = schema("{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}(x|yz)?$\"}");
    ck_assert(accepts(g, "\"AB-123\""));
    ck_assert(accepts(g, "\"QQ-000yz\""));
    ck_assert(!accepts(g, "\"A-123\""));
    ck_assert(!accepts(g, "\"AB-12\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"[^a]\\\"\\\\\\\\.\"}"); /* regex [^a]"\\. */
    ck_assert(accepts(g, "\"b\\\"\\\\z\""));
    ck_assert(accepts(g, "\"\\\"\\\"\\\\\\\"\""));
    ck_assert(!accepts(g, "\"a\\\"\\\\z\""));
    ck_assert(!accepts(g, "\"b\"\\\\z\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"date-time\"}");
    ck_assert(accepts(g, "\"2024-02-28T13:45:00Z\""));
    ck_assert(accepts(g, "\"2024-12-01T23:59:59.123+05:30\""));
    ck_assert(!accepts(g, "\"2024-13-01T00:00:00Z\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"uuid\"}");
    ck_assert(accepts(g, "\"123e4567-e89b-12d3-a456-426614174000\""));
    ck_assert(!accepts(g, "\"123e4567e89b-12d3-a456-426614174000\""));
    gr_release(g);
    g = schema("{\"type\":\"string\",\"format\":\"email\"}");
    ck_assert(accepts(g, "\"a.b@example.com\""));
    ck_assert(!accepts(g, "\"ab.example.com\""));
    gr_release(g);
}
END_TEST

START_TEST(test_schema_refs) {
    gr_grammar *g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                           "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                           "\"$ref\":\"#/$defs/node\"}");
    ck_assert(accepts(g, "{\"v\":1}"));
    ck_assert(accepts(g, "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]},{\"v\":4}]}"));
    ck_assert(!accepts(g, "{\"v\":1,\"kids\":[{\"w\":2}]}"));
    gr_release(g);
    g = schema("{\"definitions\":{\"a\":{\"type\":\"string\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/definitions/a\"}}");
    ck_assert(accepts(g, "[\"x\",\"y\"]"));
    gr_release(g);
}
END_TEST

/* Ambiguous grammars are bounded at run time, never slow or unbounded. */
START_TEST(test_runtime_bounds) {
    if (!vocab) make_vocab();
    gr_grammar *g = gbnf("root ::= (\"a\" | \"a\" | [a-b] | \"aa\")* \"z\"\n");
    gr_matcher *m = gr_matcher_create(g, vocab, NULL);
    char text[2001];
    memset(text, 'a', 2000);
    text[2000] = 0;
    ck_assert(gr_matcher_accept_bytes(m, text, 2000));
    float logits[N_VOCAB] = {0};
    ck_assert_int_gt(gr_matcher_mask(m, logits), 0);
    gr_matcher_free(m);
    gr_release(g);
    g = gbnf("root ::= x\nx ::= \"(\" x \")\" | \"\"\n");
    m = gr_matcher_create(g, vocab, NULL);
    char deep[3001];
    memset(deep, '(', 3000);
    bool all = gr_matcher_accept_bytes(m, deep, 3000); /* deeper than GR_MAX_DEPTH: refused, not a crash */
    ck_assert(!all);
    gr_matcher_free(m);
    gr_release(g);
}
END_TEST

static Suite *grammar_suite(void) {
    Suite *s = suite_create("grammar");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_gbnf_errors);
    tcase_add_test(tc, test_gbnf_arithmetic);
    tcase_add_test(tc, test_gbnf_features);
    tcase_add_test(tc, test_partial_utf8);
    tcase_add_test(tc, test_mask_matches_brute_force);
    tcase_add_test(tc, test_eos_and_done);
    tcase_add_test(tc, test_schema_errors);
    tcase_add_test(tc, test_schema_objects);
    tcase_add_test(tc, test_schema_values);
    tcase_add_test(tc, test_schema_integer_ranges);
    tcase_add_test(tc, test_schema_strings);
    tcase_add_test(tc, test_schema_pattern_lengths);
    tcase_add_test(tc, test_schema_refs);
    tcase_add_test(tc, test_runtime_bounds);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    int failed = test_run_suite(grammar_suite());
    gr_vocab_free(vocab);
    return failed ? 1 : 0;
}
