"""Structured output on SmolLM2: a corpus of JSON schemas whose every output
must validate (jsonschema, formats checked) at temperature 0 and at
temperature 1 with several seeds; GBNF grammars whose outputs must parse;
faults answered 400 with their position or path. Requests of one test go
concurrently, so the server batches them."""
import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from server_util import Server, chat_model, post_json, request, sse_events

jsonschema = pytest.importorskip("jsonschema")

# Free strings carry a maxLength: at temperature 1 SmolLM2-135M sometimes
# writes one string until max_tokens (unbounded strings are covered by the
# C tests, json_object and the GBNF tests).
S = {"type": "string", "maxLength": 48}
I = {"type": "integer"}
N = {"type": "number"}
B = {"type": "boolean"}


def obj(props, required=None, **kw):
    """A closed object: JSON Schema allows other properties when
    additionalProperties is absent, and a small model then writes on."""
    return {"type": "object", "properties": props, "additionalProperties": False,
            "required": list(props) if required is None else required, **kw}


def arr(items, **kw):
    return {"type": "array", "items": items, **kw}


# Recursive schemas and open objects: SmolLM2-135M sometimes keeps nesting
# (or adding properties) until max_tokens; their outputs must validate when they finish, and a cut
# one must be a prefix the grammar allowed (see RUNS_LONG below).
TREE = {"$defs": {"node": obj({"value": I, "children": arr({"$ref": "#/$defs/node"}, maxItems=2)}, ["value"])},
        "$ref": "#/$defs/node"}
ADDL = obj({"name": S}, ["name"], additionalProperties=B)
EXPR = {"$defs": {"e": {"anyOf": [I, obj({"op": {"enum": ["+", "*"]}, "args": arr({"$ref": "#/$defs/e"}, minItems=2, maxItems=2)})]}},
        "$ref": "#/$defs/e"}
THREAD = {"$defs": {"post": obj({"by": {"type": "string", "format": "email"}, "text": S,
                                   "replies": arr({"$ref": "#/$defs/post"}, maxItems=1)}, ["by", "text"])},
          "$ref": "#/$defs/post"}
LIST = {"definitions": {"cell": obj({"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                     "next": {"anyOf": [{"$ref": "#/definitions/cell"}, {"type": "null"}]}})},
        "$ref": "#/definitions/cell"}

SCHEMAS = [
    # flat
    obj({"name": S}),
    obj({"name": S, "age": I}),
    obj({"title": S, "year": I, "rating": N}),
    obj({"ok": B}),
    obj({"city": S, "population": I, "capital": B}),
    obj({"x": N, "y": N}),
    obj({"a": {"type": "null"}, "b": S}),
    obj({"first": S, "last": S, "middle": S}, ["first", "last"]),
    obj({"id": I, "label": S, "active": B, "score": N}, ["id"]),
    obj({"q": {"type": "string", "maxLength": 40}}, [], additionalProperties=False),
    # strings with bounds, patterns, formats
    obj({"code": {"type": "string", "minLength": 3, "maxLength": 3}}),
    obj({"word": {"type": "string", "maxLength": 8}}),
    obj({"tag": {"type": "string", "minLength": 2, "maxLength": 12}}),
    obj({"zip": {"type": "string", "pattern": "^[0-9]{5}$"}}),
    obj({"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"}}),
    obj({"hex": {"type": "string", "pattern": "^#[0-9a-f]{6}$"}}),
    obj({"answer": {"type": "string", "pattern": "^(yes|no|maybe)$"}}),
    obj({"phone": {"type": "string", "pattern": "^\\+?[0-9]{2,3} [0-9]{3,4}$"}}),
    obj({"when": {"type": "string", "format": "date"}}),
    obj({"at": {"type": "string", "format": "date-time"}}),
    obj({"t": {"type": "string", "format": "time"}}),
    obj({"id": {"type": "string", "format": "uuid"}}),
    obj({"mail": {"type": "string", "format": "email"}}),
    obj({"born": {"type": "string", "format": "date"}, "name": S}),
    # integers in ranges
    obj({"age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    obj({"temp": {"type": "integer", "minimum": -40, "maximum": 50}}),
    obj({"n": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}),
    obj({"big": {"type": "integer", "minimum": 1000}}),
    obj({"neg": {"type": "integer", "maximum": -1}}),
    obj({"pct": {"type": "integer", "minimum": 0, "maximum": 100}, "label": S}),
    # enums and const
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"size": {"enum": ["S", "M", "L", "XL"]}, "qty": I}),
    obj({"level": {"enum": [1, 2, 3]}}),
    obj({"mixed": {"enum": ["a", 1, None, True]}}),
    obj({"kind": {"const": "point"}, "x": I, "y": I}),
    {"enum": ["alpha", "beta", "gamma"]},
    {"const": {"fixed": [1, 2]}},
    # type lists, anyOf, oneOf
    obj({"v": {"type": ["string", "null"]}}),
    obj({"v": {"type": ["integer", "boolean"]}}),
    obj({"v": {"anyOf": [{"type": "string", "maxLength": 20}, I]}}),
    obj({"v": {"oneOf": [obj({"kind": {"const": "a"}, "n": I}), obj({"kind": {"const": "b"}, "s": S})]}}),
    {"anyOf": [obj({"error": S}), obj({"result": I})]},
    # arrays
    arr({"type": "string", "maxLength": 24}, maxItems=4),
    arr(I, minItems=1, maxItems=5),
    obj({"tags": arr(S, maxItems=3)}),
    obj({"scores": arr(N, minItems=2, maxItems=4)}),
    obj({"pair": {"type": "array", "prefixItems": [S, I], "items": False}}),
    obj({"triple": {"type": "array", "prefixItems": [B, B, B], "minItems": 3, "items": False}}),
    obj({"rows": arr(arr(I, maxItems=3), maxItems=3)}),
    obj({"flags": arr(B, minItems=1, maxItems=3)}),
    # arrays of objects, nested objects
    obj({"people": arr(obj({"name": S, "age": I}), maxItems=3)}),
    obj({"items": arr(obj({"sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}), minItems=1, maxItems=3)}),
    obj({"author": obj({"name": S, "email": {"type": "string", "format": "email"}}), "title": S}),
    obj({"address": obj({"street": S, "city": S, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}})}),
    obj({"a": obj({"b": obj({"c": obj({"d": I})})})}),
    obj({"meta": obj({"created": {"type": "string", "format": "date-time"}, "version": I}), "data": arr(I, maxItems=3)}),
    obj({"user": obj({"id": I, "nick": S}, ["id"]), "roles": arr({"enum": ["admin", "user", "guest"]}, maxItems=3)}),
    obj({"events": arr(obj({"on": {"type": "string", "format": "date"}, "what": S, "note": S}, ["on", "what"]),
                       minItems=1, maxItems=2)}),
    # additionalProperties as a schema, free objects
    {"type": "object", "additionalProperties": I},
    ADDL,
    {"type": "object"},
    obj({"extra": {"type": "object"}}),
    # refs and recursion
    {"$defs": {"pt": obj({"x": I, "y": I})}, "type": "object",
     "properties": {"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}}, "required": ["from", "to"],
     "additionalProperties": False},
    TREE,
    LIST,
    EXPR,
    {"$defs": {"name": {"type": "string", "maxLength": 20}}, "type": "array", "items": {"$ref": "#/$defs/name"},
     "maxItems": 3},
    THREAD,
    # annotations are accepted
    {"title": "Thing", "description": "a thing", "type": "object",
     "properties": {"name": {"type": "string", "maxLength": 48, "description": "its name", "default": "x"}}, "required": ["name"]},
]


RUNS_LONG = [TREE, LIST, EXPR, THREAD, ADDL, {"type": "object"}, obj({"extra": {"type": "object"}})]


def check_corpus_size():
    assert len(SCHEMAS) >= 60


@pytest.fixture(scope="module")
def server():
    with Server(chat_model(), "--alias", "smollm") as s:
        yield s


def chat(server, schema, temperature, seed, max_tokens=256):
    body = {"messages": [{"role": "user", "content": "Reply with a short JSON value matching this schema: " + json.dumps(schema)}],
            "max_tokens": max_tokens, "temperature": temperature, "seed": seed,
            "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}}
    return post_json(server.url + "/v1/chat/completions", body, timeout=600)


def validate(schema, text):
    value = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(value)


def run_all(server, cases):
    with ThreadPoolExecutor(32) as pool:
        return list(pool.map(lambda c: chat(server, *c), cases))


def test_corpus_size():
    check_corpus_size()


@pytest.mark.parametrize("temperature,seeds", [(0, [0]), (1, [1, 2, 3])], ids=["greedy", "t1-seeds"])
def test_schema_corpus_validates(server, temperature, seeds):
    cases = [(s, temperature, seed) for s in SCHEMAS for seed in seeds]
    failures, cut = [], 0
    for (schema, _, seed), (status, _, r) in zip(cases, run_all(server, cases)):
        if status != 200:
            failures.append(f"{json.dumps(schema)} seed {seed}: HTTP {status} {r}")
            continue
        choice = r["choices"][0]
        text = choice["message"]["content"]
        if choice["finish_reason"] == "length" and schema in RUNS_LONG and text.startswith(("{", "[", "-", "0", "1")):
            cut += 1
            continue
        if choice["finish_reason"] != "stop":
            failures.append(f"{json.dumps(schema)} seed {seed}: finish {choice['finish_reason']}: {text!r}")
            continue
        try:
            validate(schema, text)
        except Exception as e:  # noqa: BLE001 - the message says what failed
            failures.append(f"{json.dumps(schema)} seed {seed}: {text!r}: {e}")
    assert not failures, "\n".join(failures)
    assert cut < len(RUNS_LONG) * len(seeds), "every recursive schema ran to max_tokens"


def completion(server, prompt, grammar, temperature=0, seed=0, max_tokens=48, **kw):
    return post_json(server.url + "/v1/completions",
                     {"prompt": prompt, "grammar": grammar, "max_tokens": max_tokens,
                      "temperature": temperature, "seed": seed, **kw})


ARITH = """root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= [1-9] [0-9]{0,2} | "(" expr ")"
"""


def parse_arith(s):
    """True when s is an expression of ARITH (a small recursive descent)."""
    pos = 0

    def factor():
        nonlocal pos
        if pos < len(s) and s[pos] == "(":
            pos += 1
            if not expr() or pos >= len(s) or s[pos] != ")":
                return False
            pos += 1
            return True
        m = re.match(r"[1-9][0-9]{0,2}", s[pos:])
        if not m:
            return False
        pos += m.end()
        return True

    def chain(sub, ops):
        nonlocal pos
        if not sub():
            return False
        while pos < len(s) and s[pos] in ops:
            pos += 1
            if not sub():
                return False
        return True

    def term():
        return chain(factor, "*/")

    def expr():
        return chain(term, "+-")

    return expr() and pos == len(s)


def test_gbnf_arithmetic(server):
    cases = [(0, 0)] + [(1, seed) for seed in range(1, 6)]
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda c: completion(server, "A sum: ", ARITH, c[0], c[1], max_tokens=64), cases))
    for status, _, r in results:
        assert status == 200, r
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            assert parse_arith(c["text"]), c["text"]
        else:  # cut by max_tokens: a prefix of a sentence
            assert c["finish_reason"] == "length" and re.fullmatch(r"[0-9+\-*/()]+", c["text"]), c


WORDS = 'root ::= ("apple" | "banana" | "cherry") (", " ("apple" | "banana" | "cherry")){0,3} "."'


def test_gbnf_word_list(server):
    for seed in range(4):
        status, _, r = completion(server, "Fruits I like:", WORDS, 1, seed)
        assert status == 200, r
        c = r["choices"][0]
        assert c["finish_reason"] == "stop"
        assert re.fullmatch(r"(apple|banana|cherry)(, (apple|banana|cherry)){0,3}\.", c["text"]), c["text"]


PARENS = 'root ::= pair\npair ::= "(" pair* ")"'


def balanced(s):
    depth = 0
    for ch in s:
        depth += 1 if ch == "(" else -1
        if depth < 0:
            return False
    return depth == 0 and s != "" and set(s) <= set("()")


def test_gbnf_recursive(server):
    for seed in range(3):
        status, _, r = completion(server, "Balanced parentheses: ", PARENS, 1, seed, max_tokens=64)
        assert status == 200, r
        c = r["choices"][0]
        if c["finish_reason"] == "stop":
            assert balanced(c["text"]), c["text"]
        else:
            assert set(c["text"]) <= set("()"), c


def test_max_tokens_mid_structure_is_length_with_partial_text(server):
    schema = obj({"story": S})
    status, _, r = chat(server, schema, 0, 0, max_tokens=5)
    assert status == 200, r
    c = r["choices"][0]
    assert c["finish_reason"] == "length"
    text = c["message"]["content"]
    assert text.startswith("{") and len(text) > 1
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_stop_string_does_not_cut_structure(server):
    schema = obj({"name": {"type": "string", "maxLength": 20}})
    body = {"messages": [{"role": "user", "content": "Give me a JSON object with a name."}], "max_tokens": 100,
            "temperature": 0, "stop": ["\"", "}"], "json_schema": schema}
    status, _, r = post_json(server.url + "/v1/chat/completions", body)
    assert status == 200, r
    c = r["choices"][0]
    assert c["finish_reason"] == "stop", c
    validate(schema, c["message"]["content"])


def test_json_object_and_extensions(server):
    status, _, r = post_json(server.url + "/v1/chat/completions", {
        # a prompt that names the keys: the open one ("the name and color of a cat") hangs on a near-tie
        # ("Felix" / "Felicia") whose other side loops on keys until max_tokens
        "messages": [{"role": "user", "content": "Give a JSON object with two keys, name and color, for a cat."}],
        "max_tokens": 200,
        "temperature": 0, "response_format": {"type": "json_object"}})
    assert status == 200, r
    assert r["choices"][0]["finish_reason"] == "stop", r
    assert isinstance(json.loads(r["choices"][0]["message"]["content"]), dict)
    schema = obj({"n": {"type": "integer", "minimum": 1, "maximum": 9}})
    status, _, r = post_json(server.url + "/v1/completions",
                             {"prompt": "JSON:", "json_schema": schema, "max_tokens": 80, "temperature": 0})
    assert status == 200, r
    validate(schema, r["choices"][0]["text"])
    status, _, r = post_json(server.url + "/v1/completions",
                             {"prompt": "Text:", "response_format": {"type": "text"}, "max_tokens": 4})
    assert status == 200, r


@pytest.mark.parametrize("field,value,needle", [
    ("grammar", "root ::= item\n", "line 1, column 10: rule 'item' is used but never defined"),
    ("grammar", "root ::= \"a\" | (\"b\"", "unclosed parenthesis"),
    ("grammar", "root ::= \"x\" root", "accepts nothing"),
    ("grammar", "root ::= root \"x\" | \"y\"", "left-recursive"),
    ("grammar", "root ::= \"x\"{100000}", "repetition count above"),
    ("grammar", 12, "must be a string"),
    ("json_schema", {"type": "object", "properties": {"a": {"type": "array", "minItems": 3, "maxItems": 1}}},
     "/properties/a"),
    ("json_schema", {"$ref": "#/$defs/nope"}, "does not resolve"),
    ("json_schema", {"type": "integer", "minimum": 3, "maximum": 1}, "the minimum is above the maximum"),
    ("json_schema", {"type": "string", "format": "hostname", "maxLength": 0},
     "/format: strings of format 'hostname' are 1 to 575 characters long, outside minLength 0 / maxLength 0: "
     "no string fits"),
    ("json_schema", {"type": "string", "pattern": "(?<=a)b"}, "/pattern"),
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "foo"}}},
     "unknown type 'foo'"),
    ("response_format", {"type": "json_schema", "json_schema": {"schema": {}}}, "name"),
    ("response_format", {"type": "xml"}, "must be 'text', 'json_object' or 'json_schema'"),
    ("response_format", {"type": "json_object", "schema": {}}, "not a field"),
])
def test_malformed_constraints_are_400(server, field, value, needle):
    for path, base in (("/v1/completions", {"prompt": "x"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})):
        status, _, r = post_json(server.url + path, {**base, field: value, "max_tokens": 4})
        assert status == 400, r
        assert needle in r["error"]["message"], r["error"]["message"]
        assert r["error"]["param"].startswith(field)


def test_two_constraints_are_400(server):
    status, _, r = post_json(server.url + "/v1/completions",
                             {"prompt": "x", "grammar": "root ::= \"a\"", "json_schema": {}, "max_tokens": 4})
    assert status == 400, r


def test_pathological_grammar_is_bounded(server):
    # nested repetitions stay linear; ambiguous alternatives are deduplicated
    g = 'root ::= (("a" | "a" | [a-b] | "aa"){1,50}){1,50} "."'
    status, _, r = completion(server, "Letters: ", g, 1, 1, max_tokens=40)
    assert status == 200, r
    assert re.fullmatch(r"[ab]*\.?", r["choices"][0]["text"])


def test_streaming_constrained(server):
    schema = obj({"word": {"type": "string", "maxLength": 10}})
    body = {"messages": [{"role": "user", "content": "One word as JSON."}], "max_tokens": 40, "temperature": 0,
            "stream": True, "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}}
    status, _, full = post_json(server.url + "/v1/chat/completions", {**body, "stream": False})
    assert status == 200, full
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    pieces = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="smollm", **{k: v for k, v in body.items() if k not in ("stream",)}, stream=True) if c.choices]
    assert "".join(pieces) == full["choices"][0]["message"]["content"]


# ---- the openai SDK: structured outputs and tool calling ------------------------------

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def client(server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none")


def test_sdk_parse_with_pydantic(client):
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=30)
        country: str = pydantic.Field(max_length=30)
        population: int = pydantic.Field(ge=0)

    r = client.beta.chat.completions.parse(
        model="smollm", messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City, temperature=0, max_tokens=100)
    city = r.choices[0].message.parsed
    assert isinstance(city, City), r
    assert r.choices[0].finish_reason == "stop"


def test_sdk_response_format_json_schema(client):
    schema = obj({"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "integer", "minimum": 0, "maximum": 100}})
    r = client.chat.completions.create(
        model="smollm", messages=[{"role": "user", "content": "Is the sky blue?"}], temperature=0, max_tokens=60,
        response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema, "strict": True}})
    validate(schema, r.choices[0].message.content)


def test_sdk_tool_calling_loop(client):
    messages = list(ASK)
    r = client.chat.completions.create(model="smollm", messages=messages, tools=[WEATHER, TIME],
                                       tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=80)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in ("get_weather", "get_time")
    args = json.loads(call.function.arguments)
    validate({"get_weather": WEATHER, "get_time": TIME}[call.function.name]["function"]["parameters"], json.dumps(args))
    # the loop: the call and its result go back; the model answers in text
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 21, "sky": "clear"})})
    r2 = client.chat.completions.create(model="smollm", messages=messages, tools=[WEATHER, TIME], tool_choice="none",
                                        temperature=0, max_tokens=40)
    assert r2.choices[0].message.tool_calls is None
    assert r2.choices[0].message.content


def test_named_tool_choice_and_auto(client):
    r = client.chat.completions.create(model="smollm", messages=ASK, tools=[WEATHER, TIME], temperature=0, max_tokens=80,
                                       tool_choice={"type": "function", "function": {"name": "get_time"}},
                                       parallel_tool_calls=False)
    assert r.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_time"]
    # auto: text or calls, whichever the model picks, well formed either way
    for seed in range(3):
        r = client.chat.completions.create(model="smollm", messages=ASK, tools=[WEATHER], tool_choice="auto",
                                           temperature=1, seed=seed, max_tokens=80, parallel_tool_calls=False)
        c = r.choices[0]
        if c.message.tool_calls:
            assert c.finish_reason == "tool_calls" and c.message.content is None
            json.loads(c.message.tool_calls[0].function.arguments)
        else:
            assert c.message.content and not c.message.content.startswith("<")


def stream_tool_deltas(server, body):
    """The delta.tool_calls entries of a streamed reply, checked to be in
    OpenAI's shape, and the finish_reason."""
    status, _, raw = request(server.url + "/v1/chat/completions", {**body, "stream": True}, timeout=300)
    assert status == 200, raw
    events, done = sse_events(raw)
    assert done
    deltas, finish = [], None
    for ev in events:
        for c in ev["choices"]:
            for tc in c["delta"].get("tool_calls") or []:
                deltas.append(tc)
            assert not c["delta"].get("content"), "a tool-call reply sends no content"
            finish = c["finish_reason"] or finish
    return deltas, finish


def calls_from_deltas(deltas):
    """Each call's (id, name, argument pieces), checking that a call's first
    delta has index, id, type, name and empty arguments and the others only
    index and an arguments piece, in index order."""
    calls = []
    for tc in deltas:
        if "id" in tc:
            assert tc["index"] == len(calls), deltas
            assert set(tc) == {"index", "id", "type", "function"} and tc["type"] == "function"
            assert set(tc["function"]) == {"name", "arguments"} and tc["function"]["arguments"] == ""
            calls.append((tc["id"], tc["function"]["name"], []))
        else:
            assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}, tc
            assert tc["index"] == len(calls) - 1, deltas
            assert tc["function"]["arguments"]
            calls[-1][2].append(tc["function"]["arguments"])
    return calls


def test_streamed_tool_call_arguments_come_in_pieces(server):
    body = {"model": "smollm", "messages": ASK, "tools": [WEATHER], "tool_choice": "required",
            "parallel_tool_calls": False, "temperature": 0, "max_tokens": 80}
    _, _, whole = post_json(server.url + "/v1/chat/completions", body)
    (want,) = whole["choices"][0]["message"]["tool_calls"]
    deltas, finish = stream_tool_deltas(server, body)
    assert finish == "tool_calls"
    ((cid, name, pieces),) = calls_from_deltas(deltas)
    assert cid.startswith("call_") and name == want["function"]["name"] == "get_weather"
    assert len(pieces) >= 3, pieces  # streamed as generated, not sent once complete
    assert "".join(pieces) == want["function"]["arguments"]  # the same text as the whole reply
    validate(WEATHER["function"]["parameters"], "".join(pieces))


def test_streamed_parallel_tool_calls(server):
    # min_tokens keeps end-of-sequence away, so the grammar can only go on with a second call
    body = {"model": "smollm", "messages": [{"role": "user", "content": "Weather and time in Paris?"}],
            "tools": [WEATHER, TIME], "tool_choice": "required", "temperature": 0, "max_tokens": 120,
            "min_tokens": 30}
    _, _, whole = post_json(server.url + "/v1/chat/completions", body)
    want = whole["choices"][0]["message"]["tool_calls"]
    assert len(want) >= 2, whole
    deltas, finish = stream_tool_deltas(server, body)
    calls = calls_from_deltas(deltas)
    assert finish == ("tool_calls" if whole["choices"][0]["finish_reason"] == "tool_calls" else "length")
    assert len(calls) >= len(want)
    for (cid, name, pieces), w in zip(calls, want):
        assert name == w["function"]["name"] and "".join(pieces) == w["function"]["arguments"]
        json.loads("".join(pieces))
    assert len({c[0] for c in calls}) == len(calls)  # ids differ


def test_sdk_streamed_tool_calls(client):
    kw = dict(model="smollm", messages=ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
              temperature=0, max_tokens=80)
    full = client.chat.completions.create(**kw).choices[0].message.tool_calls[0]
    name, args, ids, finish, n_pieces = None, "", [], None, 0
    for chunk in client.chat.completions.create(**kw, stream=True):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        for tc in d.tool_calls or []:
            assert tc.index == 0
            if tc.id:
                ids.append(tc.id)
                name = tc.function.name
            elif tc.function.arguments:
                n_pieces += 1
            args += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and len(ids) == 1 and n_pieces >= 3
    assert name == full.function.name and args == full.function.arguments


def test_sdk_stream_helper_tool_call_events(client):
    """The SDK's streaming helper (client.chat.completions.stream) assembles
    the pieces: argument delta events with a growing parsed value, then one
    done event, and a final completion with the call."""
    events = []
    with client.chat.completions.stream(model="smollm", messages=ASK, tools=[WEATHER], tool_choice="required",
                                        parallel_tool_calls=False, temperature=0, max_tokens=80) as stream:
        for ev in stream:
            events.append(ev)
        final = stream.get_final_completion()
    deltas = [e for e in events if e.type == "tool_calls.function.arguments.delta"]
    done = [e for e in events if e.type == "tool_calls.function.arguments.done"]
    assert len(deltas) >= 3 and len(done) == 1
    assert done[0].name == "get_weather" and done[0].arguments == "".join(d.arguments_delta for d in deltas)
    (call,) = final.choices[0].message.tool_calls
    assert final.choices[0].finish_reason == "tool_calls"
    assert json.loads(call.function.arguments) == json.loads(done[0].arguments)
    validate(WEATHER["function"]["parameters"], call.function.arguments)


def test_sdk_parse_pydantic_tool(client):
    """openai.pydantic_function_tool (a strict tool) with .parse and with the
    stream helper: the arguments come back parsed into the model class."""
    openai = pytest.importorskip("openai")
    pydantic = pytest.importorskip("pydantic")

    class GetWeather(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=30)
        unit: str = pydantic.Field(pattern="^(celsius|fahrenheit)$")

    kw = dict(model="smollm", messages=ASK, tools=[openai.pydantic_function_tool(GetWeather)],
              tool_choice="required", parallel_tool_calls=False, temperature=0, max_tokens=80)
    r = client.chat.completions.parse(**kw)
    (call,) = r.choices[0].message.tool_calls
    assert isinstance(call.function.parsed_arguments, GetWeather), call
    with client.chat.completions.stream(**kw) as stream:
        done = [e for e in stream if e.type == "tool_calls.function.arguments.done"]
    assert len(done) == 1 and done[0].parsed_arguments == call.function.parsed_arguments


def test_langchain_streamed_tool_calls(server):
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(base_url=server.url + "/v1", api_key="none", model="smollm", temperature=0, max_tokens=80)
    bound = llm.bind_tools([WEATHER], tool_choice="get_weather", parallel_tool_calls=False)
    merged, n_chunks = None, 0
    for chunk in bound.stream("What is the weather in Paris?"):
        n_chunks += bool(chunk.tool_call_chunks)
        merged = chunk if merged is None else merged + chunk
    assert n_chunks >= 3
    (call,) = merged.tool_calls
    assert call["name"] == "get_weather" and call["id"].startswith("call_")
    validate(WEATHER["function"]["parameters"], json.dumps(call["args"]))
    whole = bound.invoke("What is the weather in Paris?")
    assert whole.tool_calls[0]["args"] == call["args"]


@pytest.mark.parametrize("extra,needle", [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "'nope', which is not in"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "parameters"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "not": {}}}}]},
     "/not"),
    ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
    ({"tool_choice": "required"}, "needs 'tools'"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "cannot be combined"),
    ({"tools": [WEATHER, WEATHER]}, "names two tools"),
])
def test_tool_faults_are_400(server, extra, needle):
    status, _, r = post_json(server.url + "/v1/chat/completions", {"messages": ASK, "max_tokens": 4, **extra})
    assert status == 400, r
    assert needle in r["error"]["message"], r["error"]["message"]
