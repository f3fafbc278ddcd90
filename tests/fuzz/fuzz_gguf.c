/* fuzz_gguf.c -- gguf_open_buffer over arbitrary bytes.
 *
 * gguf.h promises that once a file opens, nothing read through the API can
 * run past the buffer. So after a successful open this touches every byte
 * every returned pointer claims (keys, strings, raw arrays, nested arrays,
 * tensor names and data) and runs every lookup on every key it found; ASan
 * turns any lie into a crash. The libFuzzer buffer is exactly `size` bytes
 * of heap, so one byte too far is caught. Then the tokenizer loader, which
 * reads the same metadata with its own expectations, gets the file too. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

static volatile uint8_t sink; /* keeps the reads from being optimised away */

static void touch(const void *p, uint64_t n) {
    const volatile uint8_t *b = p;
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= b[i];
    sink ^= x;
}

static void check_str(gguf_str s) {
    if (s.len && !s.ptr) abort();
    touch(s.ptr, s.len);
}

static uint64_t scalar_size(gguf_vtype t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

static void walk_value(const gguf_value *v, int depth) {
    if (depth > 64) abort(); /* the reader caps nesting far below this */
    switch (v->type) {
    case GGUF_STRING:
        check_str(v->str);
        break;
    case GGUF_ARRAY:
        if (v->arr.elem_type == GGUF_STRING) {
            if (v->arr.n && !v->arr.strs) abort();
            for (uint64_t i = 0; i < v->arr.n; i++) check_str(v->arr.strs[i]);
        } else if (v->arr.elem_type == GGUF_ARRAY) {
            if (v->arr.n && !v->arr.items) abort();
            for (uint64_t i = 0; i < v->arr.n; i++) {
                if (v->arr.items[i].type != GGUF_ARRAY) abort();
                walk_value(&v->arr.items[i], depth + 1);
            }
        } else {
            uint64_t esize = scalar_size(v->arr.elem_type);
            if (!esize) abort(); /* an element type the reader should have refused */
            if (v->arr.n && !v->arr.raw) abort();
            touch(v->arr.raw, v->arr.n * esize);
        }
        break;
    default:
        if (v->type > GGUF_F64) abort();
        break;
    }
}

/* Runs every getter with a NUL-terminated copy of a key present in the file. */
static void lookups(const gguf_file *f, gguf_str key) {
    char name[256];
    if (key.len >= sizeof name || memchr(key.ptr, 0, key.len)) return;
    memcpy(name, key.ptr, key.len);
    name[key.len] = 0;
    if (!gguf_get(f, name)) abort(); /* the key is there: lookup must find it */
    uint32_t u; float x; bool b; gguf_str s;
    (void)gguf_get_u32(f, name, &u);
    (void)gguf_get_f32(f, name, &x);
    (void)gguf_get_bool(f, name, &b);
    if (gguf_get_str(f, name, &s)) check_str(s);
    for (int t = GGUF_U8; t <= GGUF_F64; t++) {
        const gguf_value *a = gguf_get_arr(f, name, (gguf_vtype)t);
        if (a) walk_value(a, 0);
    }
    (void)gguf_find_tensor(f, name);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(data, size, "fuzz", &err);
    if (!f) {
        if (!err.message[0]) abort(); /* a failure must say why */
        return 0;
    }
    if (f->n_kv && !f->kvs) abort();
    for (uint64_t i = 0; i < f->n_kv; i++) {
        check_str(f->kvs[i].key);
        walk_value(&f->kvs[i].value, 0);
        lookups(f, f->kvs[i].key);
    }
    if (f->n_tensors && !f->tensors) abort();
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        check_str(t->name);
        if (t->n_dims < 1 || t->n_dims > 4) abort();
        if (t->n_bytes && (const uint8_t *)t->data < (const uint8_t *)data) abort();
        touch(t->data, t->n_bytes);
    }
    gl_tokenizer *tok = tok_load(f, &err);
    if (tok) {
        /* A loaded tokenizer must survive ordinary use. */
        static const char text[] = "Hello world, <s> caf\xc3\xa9 123\n";
        int32_t *ids = NULL;
        int n = tok_encode(tok, text, sizeof text - 1, GL_TOKENIZE_PARSE_SPECIAL, &ids, &err);
        if (n > 0) {
            char *back = tok_decode(tok, ids, (size_t)n, &err);
            if (!back) abort(); /* ids the tokenizer made itself are in range */
            free(back);
        }
        free(ids);
        for (int32_t id = 0; id < tok_n_vocab(tok) && id < 64; id++) {
            size_t len = 0;
            const char *p = tok_piece(tok, id, &len);
            if (!p) abort();
            touch(p, len);
            (void)tok_text(tok, id);
        }
        tok_free(tok);
    }
    gguf_close(f);
    return 0;
}
