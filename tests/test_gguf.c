/* test_gguf.c -- the GGUF reader: valid files built here byte by byte, the
 * real stories260K model, and corrupt or hostile input of every kind. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf.h"
#include "quant.h"
#include "testutil.h"

/* ---- a tiny GGUF writer ------------------------------------------------------ */

typedef struct wbuf {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_bytes(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void w_le(wbuf *b, uint64_t v, int n) {
    for (int i = 0; i < n; i++) {
        uint8_t byte = (uint8_t)(v >> (8 * i));
        w_bytes(b, &byte, 1);
    }
}
static void w_u8(wbuf *b, uint8_t v) { w_le(b, v, 1); }
static void w_u16(wbuf *b, uint16_t v) { w_le(b, v, 2); }
static void w_u32(wbuf *b, uint32_t v) { w_le(b, v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_le(b, v, 8); }
static void w_f32(wbuf *b, float f) { uint32_t u; memcpy(&u, &f, 4); w_u32(b, u); }
static void w_f64(wbuf *b, double f) { uint64_t u; memcpy(&u, &f, 8); w_u64(b, u); }
static void w_str(wbuf *b, const char *s) { w_u64(b, strlen(s)); w_bytes(b, s, strlen(s)); }
static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    w_bytes(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}
/* Key and value type; the caller writes the value. */
static void w_key(wbuf *b, const char *key, uint32_t type) { w_str(b, key); w_u32(b, type); }
static void w_arr_head(wbuf *b, uint32_t elem_type, uint64_t n) { w_u32(b, elem_type); w_u64(b, n); }
static void w_pad(wbuf *b, size_t align) { while (b->n % align) w_u8(b, 0); }
static void w_tensor_info(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                          uint64_t offset) {
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) w_u64(b, ne[d]);
    w_u32(b, type);
    w_u64(b, offset);
}

static uint64_t rng_state;
static uint64_t rnd(void) { /* xorshift64*: seeded, reproducible */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}

/* Exact-size heap copy, so ASan catches any read past the end. */
static uint8_t *exact_copy(const uint8_t *src, size_t n) {
    uint8_t *p = malloc(n ? n : 1);
    if (!p) ck_abort_msg("out of memory");
    if (n) memcpy(p, src, n);
    return p;
}

static char *write_temp(const void *data, size_t n) {
    const char *dir = getenv("TMPDIR");
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/test_gguf_XXXXXX", dir && *dir ? dir : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, data, n), (ssize_t)n);
    close(fd);
    return path;
}

static uint8_t *read_whole(const char *path, size_t *size) {
    FILE *fp = fopen(path, "rb");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *size = (size_t)n;
    return p;
}

/* Checks for the hot loops (fuzzing, truncation): ck_assert writes a
 * checkpoint to check's pipe on every call, REQUIRE only when it fails. */
#define REQUIRE_MSG(cond, ...) do { if (!(cond)) ck_abort_msg(__VA_ARGS__); } while (0)
#define REQUIRE(cond) REQUIRE_MSG(cond, "%s:%d: %s", __FILE__, __LINE__, #cond)
#define REQUIRE_EQ(a, b) REQUIRE((a) == (b))
#define REQUIRE_LE(a, b) REQUIRE((a) <= (b))
#define REQUIRE_GE(a, b) REQUIRE((a) >= (b))
#define REQUIRE_GT(a, b) REQUIRE((a) > (b))
#define REQUIRE_NULL(p) REQUIRE((p) == NULL)
#define REQUIRE_NONNULL(p) REQUIRE((p) != NULL)

/* ---- invariants every successfully opened file must satisfy -------------------- */

static bool inside(const gguf_file *f, const void *p, uint64_t n) {
    const uint8_t *q = p;
    return q >= f->map && (uint64_t)(q - f->map) <= f->map_size && n <= f->map_size - (uint64_t)(q - f->map);
}

static void check_value(const gguf_file *f, const gguf_value *v, int depth) {
    REQUIRE_LE(depth, 8);
    switch (v->type) {
    case GGUF_STRING: REQUIRE(inside(f, v->str.ptr, v->str.len)); break;
    case GGUF_BOOL: REQUIRE_LE(v->u, 1); break;
    case GGUF_ARRAY:
        if (v->arr.elem_type == GGUF_STRING) {
            REQUIRE(v->arr.n == 0 || v->arr.strs);
            for (uint64_t i = 0; i < v->arr.n; i++) REQUIRE(inside(f, v->arr.strs[i].ptr, v->arr.strs[i].len));
        } else if (v->arr.elem_type == GGUF_ARRAY) {
            REQUIRE(v->arr.n == 0 || v->arr.items);
            for (uint64_t i = 0; i < v->arr.n; i++) {
                REQUIRE_EQ(v->arr.items[i].type, GGUF_ARRAY);
                check_value(f, &v->arr.items[i], depth + 1);
            }
        } else {
            REQUIRE_LE(v->arr.elem_type, GGUF_F64);
            static const int size[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
            REQUIRE_GT(size[v->arr.elem_type], 0);
            REQUIRE(inside(f, v->arr.raw, v->arr.n * (uint64_t)size[v->arr.elem_type]));
        }
        break;
    default: REQUIRE_LE(v->type, GGUF_F64); break;
    }
}

static void check_invariants(const gguf_file *f) {
    REQUIRE(f->version == 2 || f->version == 3);
    REQUIRE(f->alignment && (f->alignment & (f->alignment - 1)) == 0);
    REQUIRE_EQ(f->data_offset % f->alignment, 0);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        REQUIRE_GT(f->kvs[i].key.len, 0);
        REQUIRE(inside(f, f->kvs[i].key.ptr, f->kvs[i].key.len));
        check_value(f, &f->kvs[i].value, 0);
        for (uint64_t j = 0; j < i && f->n_kv < 2000; j++)
            REQUIRE(f->kvs[i].key.len != f->kvs[j].key.len ||
                      memcmp(f->kvs[i].key.ptr, f->kvs[j].key.ptr, f->kvs[i].key.len) != 0);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        REQUIRE(t->n_dims >= 1 && t->n_dims <= 4);
        REQUIRE_GT(t->name.len, 0);
        REQUIRE(inside(f, t->name.ptr, t->name.len));
        const gl_type_traits *tr = gl_type_get(t->type);
        REQUIRE_NONNULL(tr);
        uint64_t n = 1;
        for (int d = 0; d < 4; d++) {
            REQUIRE_GE(t->ne[d], 0);
            if (d >= (int)t->n_dims) REQUIRE_EQ(t->ne[d], 1);
            n *= (uint64_t)t->ne[d];
        }
        REQUIRE_EQ(t->ne[0] % tr->block_size, 0);
        REQUIRE_EQ(t->n_bytes, n / (uint64_t)tr->block_size * (uint64_t)tr->block_bytes);
        REQUIRE_EQ(t->offset % f->alignment, 0);
        REQUIRE(t->data == f->map + f->data_offset + t->offset);
        REQUIRE(inside(f, t->data, t->n_bytes));
        for (uint64_t j = 0; j < i && f->n_tensors < 2000; j++)
            REQUIRE(!gguf_str_eq(t->name, "") && (t->name.len != f->tensors[j].name.len ||
                      memcmp(t->name.ptr, f->tensors[j].name.ptr, t->name.len) != 0));
    }
}

/* A failure must leave a one-line message naming the file. */
static void check_failure(const gguf_file *f, const gl_error *err, const char *name) {
    REQUIRE_NULL(f);
    REQUIRE_MSG(strncmp(err->message, name, strlen(name)) == 0, "message '%s' does not start with the name",
                  err->message);
    REQUIRE_NULL(strchr(err->message, '\n'));
    REQUIRE_GT(strlen(err->message), strlen(name) + 2);
}

/* Open a heap copy; on success check invariants. Returns true on success. */
static bool open_checked(const uint8_t *buf, size_t n, const char *name, gl_error *err) {
    err->message[0] = 0;
    gguf_file *f = gguf_open_buffer(buf, n, name, err);
    if (!f) {
        check_failure(f, err, name);
        return false;
    }
    check_invariants(f);
    gguf_close(f);
    return true;
}

/* ---- a synthetic file with every value type --------------------------------------- */

typedef struct synth_tensor {
    const char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
} synth_tensor;

static const synth_tensor synth_tensors[] = {
    {"a.f32", GL_TYPE_F32, 2, {8, 3}},
    {"b.f16", GL_TYPE_F16, 1, {16}},
    {"c.q4_0", GL_TYPE_Q4_0, 2, {64, 2}},
    {"f.empty", GL_TYPE_F32, 2, {0, 5}},
    {"d.q8_0", GL_TYPE_Q8_0, 3, {32, 1, 2}},
    {"e.q4_k", GL_TYPE_Q4_K, 4, {256, 1, 1, 2}},
    {"g.i8", GL_TYPE_I8, 1, {3}},
};
enum { N_SYNTH_TENSORS = sizeof synth_tensors / sizeof synth_tensors[0] };

static uint64_t synth_bytes(const synth_tensor *t) {
    const gl_type_traits *tr = gl_type_get(t->type);
    uint64_t n = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) n *= t->ne[d];
    return n / (uint64_t)tr->block_size * (uint64_t)tr->block_bytes;
}

static uint8_t synth_byte(int tensor, uint64_t i) { return (uint8_t)(tensor * 31 + i * 7 + 1); }

static const char *synth_strs[] = {"a", "", "ccc"};
static const int32_t synth_i32s[] = {1, -2, 3};

enum { N_SYNTH_KV = 24 };

/* alignment 0 = default (no general.alignment key). The file ends exactly at
 * the last tensor byte, so any truncation of the data must fail. */
static void build_synthetic(wbuf *b, uint32_t version, uint32_t alignment) {
    uint32_t align = alignment ? alignment : 32;
    w_header(b, version, N_SYNTH_TENSORS, N_SYNTH_KV + (alignment ? 1 : 0));
    w_key(b, "t.u8", GGUF_U8); w_u8(b, 200);
    w_key(b, "t.i8", GGUF_I8); w_u8(b, (uint8_t)-100);
    w_key(b, "t.u16", GGUF_U16); w_u16(b, 60000);
    w_key(b, "t.i16", GGUF_I16); w_u16(b, (uint16_t)-30000);
    w_key(b, "t.u32", GGUF_U32); w_u32(b, 4000000000u);
    w_key(b, "t.i32", GGUF_I32); w_u32(b, (uint32_t)-2000000000);
    w_key(b, "t.f32", GGUF_F32); w_f32(b, 1.5f);
    w_key(b, "t.bool", GGUF_BOOL); w_u8(b, 1);
    w_key(b, "t.str", GGUF_STRING); w_str(b, "hello, \xe2\x9c\x93 world");
    w_key(b, "t.u64", GGUF_U64); w_u64(b, (1ull << 63) + 5);
    w_key(b, "t.i64", GGUF_I64); w_u64(b, (uint64_t)(-(1ll << 62) - 3));
    w_key(b, "t.f64", GGUF_F64); w_f64(b, -2.25e300);
    w_key(b, "t.empty_str", GGUF_STRING); w_str(b, "");
    w_key(b, "t.small_i64", GGUF_I64); w_u64(b, 7);
    w_key(b, "t.neg", GGUF_I32); w_u32(b, (uint32_t)-1);
    w_key(b, "t.one_u8", GGUF_U8); w_u8(b, 1);
    if (alignment) { w_key(b, "general.alignment", GGUF_U32); w_u32(b, alignment); }
    w_key(b, "t.arr.i32", GGUF_ARRAY); w_arr_head(b, GGUF_I32, 3);
    for (int i = 0; i < 3; i++) w_u32(b, (uint32_t)synth_i32s[i]);
    w_key(b, "t.arr.strs", GGUF_ARRAY); w_arr_head(b, GGUF_STRING, 3);
    for (int i = 0; i < 3; i++) w_str(b, synth_strs[i]);
    w_key(b, "t.arr.empty", GGUF_ARRAY); w_arr_head(b, GGUF_F32, 0);
    w_key(b, "t.arr.bool", GGUF_ARRAY); w_arr_head(b, GGUF_BOOL, 2); w_u8(b, 0); w_u8(b, 1);
    w_key(b, "t.arr.f64", GGUF_ARRAY); w_arr_head(b, GGUF_F64, 2); w_f64(b, 0.5); w_f64(b, -3.0);
    w_key(b, "t.arr.u16", GGUF_ARRAY); w_arr_head(b, GGUF_U16, 1); w_u16(b, 65535);
    /* [[1, 2] as u16, ["x"], [[true, false, true]], []] */
    w_key(b, "t.arr.nested", GGUF_ARRAY); w_arr_head(b, GGUF_ARRAY, 4);
    w_arr_head(b, GGUF_U16, 2); w_u16(b, 1); w_u16(b, 2);
    w_arr_head(b, GGUF_STRING, 1); w_str(b, "x");
    w_arr_head(b, GGUF_ARRAY, 1); w_arr_head(b, GGUF_BOOL, 3); w_u8(b, 1); w_u8(b, 0); w_u8(b, 1);
    w_arr_head(b, GGUF_ARRAY, 0);
    w_key(b, "t.arr.empty_nested", GGUF_ARRAY); w_arr_head(b, GGUF_ARRAY, 0);

    uint64_t offsets[N_SYNTH_TENSORS], off = 0;
    for (int i = 0; i < N_SYNTH_TENSORS; i++) {
        offsets[i] = off;
        off += synth_bytes(&synth_tensors[i]);
        off = (off + align - 1) / align * align;
    }
    for (int i = 0; i < N_SYNTH_TENSORS; i++) {
        const synth_tensor *t = &synth_tensors[i];
        w_tensor_info(b, t->name, t->n_dims, t->ne, t->type, offsets[i]);
    }
    w_pad(b, align);
    size_t data_start = b->n;
    for (int i = 0; i < N_SYNTH_TENSORS; i++) {
        while (b->n < data_start + offsets[i]) w_u8(b, 0xAA);
        for (uint64_t j = 0; j < synth_bytes(&synth_tensors[i]); j++) w_u8(b, synth_byte(i, j));
    }
}

static int64_t arr_i32(const gguf_value *v, uint64_t i) {
    int32_t x;
    memcpy(&x, (const uint8_t *)v->arr.raw + 4 * i, 4);
    return x;
}

static void check_synthetic(const gguf_file *f, uint32_t version, uint32_t alignment) {
    check_invariants(f);
    ck_assert_uint_eq(f->version, version);
    ck_assert_uint_eq(f->alignment, alignment ? alignment : 32);
    ck_assert_uint_eq(f->n_kv, N_SYNTH_KV + (alignment ? 1 : 0));
    ck_assert_uint_eq(f->n_tensors, N_SYNTH_TENSORS);

    const gguf_value *v;
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.u8")); ck_assert_int_eq(v->type, GGUF_U8); ck_assert_uint_eq(v->u, 200);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.i8")); ck_assert_int_eq(v->type, GGUF_I8); ck_assert_int_eq(v->i, -100);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.u16")); ck_assert_uint_eq(v->u, 60000);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.i16")); ck_assert_int_eq(v->i, -30000);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.u32")); ck_assert_uint_eq(v->u, 4000000000u);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.i32")); ck_assert_int_eq(v->i, -2000000000);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.f32")); ck_assert_int_eq(v->type, GGUF_F32); ck_assert(v->f == 1.5);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.bool")); ck_assert_int_eq(v->type, GGUF_BOOL); ck_assert_uint_eq(v->u, 1);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.str")); ck_assert_int_eq(v->type, GGUF_STRING);
    ck_assert(gguf_str_eq(v->str, "hello, \xe2\x9c\x93 world"));
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.u64")); ck_assert_uint_eq(v->u, (1ull << 63) + 5);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.i64")); ck_assert_int_eq(v->i, -(1ll << 62) - 3);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.f64")); ck_assert_int_eq(v->type, GGUF_F64); ck_assert(v->f == -2.25e300);
    ck_assert_ptr_nonnull(v = gguf_get(f, "t.empty_str")); ck_assert_uint_eq(v->str.len, 0);
    ck_assert_ptr_null(gguf_get(f, "t.missing"));
    ck_assert_ptr_null(gguf_get(f, "t.u"));     /* prefix of a key */
    ck_assert_ptr_null(gguf_get(f, "t.u8x"));   /* a key is a prefix of it */

    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.i32", GGUF_I32));
    ck_assert_uint_eq(v->arr.n, 3);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(arr_i32(v, (uint64_t)i), synth_i32s[i]);
    ck_assert_ptr_null(gguf_get_arr(f, "t.arr.i32", GGUF_U32));
    ck_assert_ptr_null(gguf_get_arr(f, "t.u8", GGUF_U8));
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.strs", GGUF_STRING));
    ck_assert_uint_eq(v->arr.n, 3);
    for (int i = 0; i < 3; i++) ck_assert(gguf_str_eq(v->arr.strs[i], synth_strs[i]));
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.empty", GGUF_F32)); ck_assert_uint_eq(v->arr.n, 0);
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.bool", GGUF_BOOL));
    ck_assert_uint_eq(v->arr.n, 2);
    ck_assert_uint_eq(((const uint8_t *)v->arr.raw)[0], 0);
    ck_assert_uint_eq(((const uint8_t *)v->arr.raw)[1], 1);
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.f64", GGUF_F64));
    double d[2];
    memcpy(d, v->arr.raw, sizeof d);
    ck_assert(d[0] == 0.5 && d[1] == -3.0);
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.u16", GGUF_U16));
    ck_assert_uint_eq(((const uint8_t *)v->arr.raw)[0], 0xff);

    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.nested", GGUF_ARRAY));
    ck_assert_uint_eq(v->arr.n, 4);
    const gguf_value *it = v->arr.items;
    ck_assert_int_eq(it[0].type, GGUF_ARRAY);
    ck_assert_int_eq(it[0].arr.elem_type, GGUF_U16);
    ck_assert_uint_eq(it[0].arr.n, 2);
    uint16_t u16s[2];
    memcpy(u16s, it[0].arr.raw, sizeof u16s);
    ck_assert(u16s[0] == 1 && u16s[1] == 2);
    ck_assert_int_eq(it[1].arr.elem_type, GGUF_STRING);
    ck_assert_uint_eq(it[1].arr.n, 1);
    ck_assert(gguf_str_eq(it[1].arr.strs[0], "x"));
    ck_assert_int_eq(it[2].arr.elem_type, GGUF_ARRAY);
    ck_assert_uint_eq(it[2].arr.n, 1);
    const gguf_value *inner = &it[2].arr.items[0];
    ck_assert_int_eq(inner->arr.elem_type, GGUF_BOOL);
    ck_assert_uint_eq(inner->arr.n, 3);
    ck_assert_mem_eq(inner->arr.raw, "\1\0\1", 3);
    ck_assert_int_eq(it[3].arr.elem_type, GGUF_ARRAY);
    ck_assert_uint_eq(it[3].arr.n, 0);
    ck_assert_ptr_nonnull(v = gguf_get_arr(f, "t.arr.empty_nested", GGUF_ARRAY)); ck_assert_uint_eq(v->arr.n, 0);

    for (int i = 0; i < N_SYNTH_TENSORS; i++) {
        const synth_tensor *s = &synth_tensors[i];
        int64_t idx = gguf_find_tensor(f, s->name);
        ck_assert_int_eq(idx, i);
        const gguf_tensor *t = &f->tensors[idx];
        ck_assert_uint_eq(t->type, s->type);
        ck_assert_uint_eq(t->n_dims, s->n_dims);
        for (int dim = 0; dim < 4; dim++)
            ck_assert_int_eq(t->ne[dim], dim < (int)s->n_dims ? (int64_t)s->ne[dim] : 1);
        ck_assert_uint_eq(t->n_bytes, synth_bytes(s));
        for (uint64_t j = 0; j < t->n_bytes; j++) ck_assert_uint_eq(((const uint8_t *)t->data)[j], synth_byte(i, j));
    }
    ck_assert_int_eq(gguf_find_tensor(f, "a.f3"), -1);
    ck_assert_int_eq(gguf_find_tensor(f, "nope"), -1);
    const gguf_tensor *last = &f->tensors[N_SYNTH_TENSORS - 1];
    ck_assert_uint_eq(f->data_offset + last->offset + last->n_bytes, f->map_size);
}

static const struct { uint32_t version, alignment; } synth_variants[] = {
    {3, 0}, {2, 0}, {3, 64}, {2, 1}, {3, 256}, {2, 8},
};
enum { N_VARIANTS = sizeof synth_variants / sizeof synth_variants[0] };

START_TEST(test_synthetic_buffer) {
    wbuf b = {0};
    build_synthetic(&b, synth_variants[_i].version, synth_variants[_i].alignment);
    uint8_t *copy = exact_copy(b.p, b.n);
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(copy, b.n, "synthetic", &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_str_eq(f->path, "synthetic");
    ck_assert(f->map == copy && f->map_size == b.n);
    check_synthetic(f, synth_variants[_i].version, synth_variants[_i].alignment);
    gguf_close(f);
    free(copy);
    free(b.p);
}
END_TEST

START_TEST(test_synthetic_file) {
    wbuf b = {0};
    build_synthetic(&b, synth_variants[_i].version, synth_variants[_i].alignment);
    char *path = write_temp(b.p, b.n);
    gl_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_str_eq(f->path, path);
    ck_assert_uint_eq(f->map_size, b.n);
    ck_assert_mem_eq(f->map, b.p, b.n);
    check_synthetic(f, synth_variants[_i].version, synth_variants[_i].alignment);
    gguf_close(f);
    unlink(path);
    free(path);
    free(b.p);
}
END_TEST

START_TEST(test_getters) {
    wbuf b = {0};
    build_synthetic(&b, 3, 0);
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, "synthetic", &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    uint32_t u = 0;
    ck_assert(gguf_get_u32(f, "t.u8", &u) && u == 200);
    ck_assert(gguf_get_u32(f, "t.u16", &u) && u == 60000);
    ck_assert(gguf_get_u32(f, "t.u32", &u) && u == 4000000000u);
    ck_assert(gguf_get_u32(f, "t.small_i64", &u) && u == 7);
    ck_assert(!gguf_get_u32(f, "t.i8", &u));      /* negative */
    ck_assert(!gguf_get_u32(f, "t.neg", &u));
    ck_assert(!gguf_get_u32(f, "t.u64", &u));     /* too big */
    ck_assert(!gguf_get_u32(f, "t.bool", &u));
    ck_assert(!gguf_get_u32(f, "t.f32", &u));
    ck_assert(!gguf_get_u32(f, "t.str", &u));
    ck_assert(!gguf_get_u32(f, "t.missing", &u));
    float x = 0;
    ck_assert(gguf_get_f32(f, "t.f32", &x) && x == 1.5f);
    ck_assert(gguf_get_f32(f, "t.f64", &x) && isinf(x)); /* -2.25e300 does not fit a float */
    ck_assert(!gguf_get_f32(f, "t.u8", &x));
    ck_assert(!gguf_get_f32(f, "t.missing", &x));
    bool flag = false;
    ck_assert(gguf_get_bool(f, "t.bool", &flag) && flag);
    ck_assert(gguf_get_bool(f, "t.one_u8", &flag) && flag);
    ck_assert(!gguf_get_bool(f, "t.u8", &flag));  /* 200 is not a bool */
    ck_assert(!gguf_get_bool(f, "t.neg", &flag));
    ck_assert(!gguf_get_bool(f, "t.str", &flag));
    gguf_str s;
    ck_assert(gguf_get_str(f, "t.str", &s) && gguf_str_eq(s, "hello, \xe2\x9c\x93 world"));
    ck_assert(gguf_get_str(f, "t.empty_str", &s) && s.len == 0 && gguf_str_eq(s, ""));
    ck_assert(!gguf_get_str(f, "t.u8", &s));
    ck_assert(!gguf_get_str(f, "t.arr.strs", &s));
    ck_assert_ptr_null(gguf_get(NULL, "t.u8"));
    ck_assert_int_eq(gguf_find_tensor(NULL, "a.f32"), -1);
    gguf_close(f);
    gguf_close(NULL);
    free(b.p);
}
END_TEST

/* Eight levels of arrays are allowed; nine are not. */
static void build_nested(wbuf *b, int depth) {
    w_header(b, 3, 0, 1);
    w_key(b, "deep", GGUF_ARRAY);
    for (int i = 1; i < depth; i++) w_arr_head(b, GGUF_ARRAY, 1);
    w_arr_head(b, GGUF_U8, 1);
    w_u8(b, 42);
}

START_TEST(test_nesting_limit) {
    wbuf b = {0};
    build_nested(&b, 8);
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, "deep", &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    const gguf_value *v = gguf_get(f, "deep");
    for (int i = 1; i < 8; i++) {
        ck_assert_int_eq(v->arr.elem_type, GGUF_ARRAY);
        v = &v->arr.items[0];
    }
    ck_assert_int_eq(v->arr.elem_type, GGUF_U8);
    ck_assert_uint_eq(*(const uint8_t *)v->arr.raw, 42);
    gguf_close(f);
    b.n = 0;
    build_nested(&b, 9);
    f = gguf_open_buffer(b.p, b.n, "deep", &err);
    check_failure(f, &err, "deep");
    ck_assert_ptr_nonnull(strstr(err.message, "nested deeper than 8"));
    free(b.p);
}
END_TEST

/* A file without tensors (vocab-only) may end right after its metadata. */
START_TEST(test_no_tensors) {
    wbuf b = {0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.architecture", GGUF_STRING);
    w_str(&b, "llama");
    ck_assert_uint_ne(b.n % 32, 0);
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(b.p, b.n, "vocab", &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_uint_eq(f->n_tensors, 0);
    gguf_str s;
    ck_assert(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"));
    gguf_close(f);
    b.n = 0;
    w_header(&b, 2, 0, 0);
    ck_assert(open_checked(b.p, b.n, "empty-meta", &err));
    free(b.p);
}
END_TEST

/* ---- the real model ------------------------------------------------------------- */

START_TEST(test_stories260k) {
    const char *path = testdata_path("models/stories260K.gguf");
    if (!path) return;
    gl_error err = {{0}};
    gguf_file *f = gguf_open(path, &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    check_invariants(f);
    ck_assert_uint_eq(f->version, 3);
    ck_assert_uint_eq(f->n_tensors, 48);
    ck_assert_uint_eq(f->alignment, 32);
    uint32_t u;
    ck_assert(gguf_get_u32(f, "llama.embedding_length", &u) && u == 64);
    ck_assert(gguf_get_u32(f, "llama.context_length", &u) && u == 128);
    ck_assert(gguf_get_u32(f, "llama.block_count", &u) && u == 5);
    ck_assert(gguf_get_u32(f, "llama.attention.head_count", &u) && u == 8);
    ck_assert(gguf_get_u32(f, "llama.attention.head_count_kv", &u) && u == 4);
    float eps;
    ck_assert(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps) && fabsf(eps - 1e-5f) < 1e-9f);
    gguf_str s;
    ck_assert(gguf_get_str(f, "general.architecture", &s) && gguf_str_eq(s, "llama"));
    ck_assert(gguf_get_str(f, "tokenizer.ggml.model", &s) && gguf_str_eq(s, "llama"));
    const gguf_value *tokens = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    ck_assert_ptr_nonnull(tokens);
    ck_assert_uint_eq(tokens->arr.n, 512);
    ck_assert(gguf_str_eq(tokens->arr.strs[0], "<unk>"));
    ck_assert(gguf_str_eq(tokens->arr.strs[1], "<s>"));
    ck_assert(gguf_str_eq(tokens->arr.strs[2], "</s>"));
    ck_assert(gguf_str_eq(tokens->arr.strs[3], "<0x00>"));
    const gguf_value *scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_F32);
    ck_assert(scores && scores->arr.n == 512);
    const gguf_value *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_I32);
    ck_assert(types && types->arr.n == 512);
    ck_assert_int_eq(arr_i32(types, 3), 6); /* byte token */

    int64_t i = gguf_find_tensor(f, "token_embd.weight");
    ck_assert_int_ge(i, 0);
    const gguf_tensor *t = &f->tensors[i];
    ck_assert_uint_eq(t->type, GL_TYPE_F32);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 64);
    ck_assert_int_eq(t->ne[1], 512);
    ck_assert_uint_eq(t->n_bytes, 64 * 512 * 4);
    ck_assert_int_ge(gguf_find_tensor(f, "blk.4.ffn_down.weight"), 0);
    i = gguf_find_tensor(f, "output_norm.weight");
    ck_assert_int_ge(i, 0);
    ck_assert_int_eq(f->tensors[i].ne[0], 64);
    ck_assert_uint_eq(f->tensors[i].n_dims, 1);
    /* The reader must agree with the gguf Python package on layout. */
    ck_assert_uint_eq(f->data_offset, 14176);
    gguf_close(f);
}
END_TEST

/* Every vocab-only file in the shared data opens (they have no tensors). */
START_TEST(test_vocab_files) {
    const char *dir = testdata_path("vocab");
    if (!dir) return;
    static const char *names[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf"};
    int opened = 0;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        if (access(path, R_OK) != 0) continue;
        gl_error err = {{0}};
        gguf_file *f = gguf_open(path, &err);
        ck_assert_msg(f != NULL, "%s", err.message);
        check_invariants(f);
        ck_assert_ptr_nonnull(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING));
        gguf_close(f);
        opened++;
    }
    ck_assert_int_gt(opened, 0);
}
END_TEST

/* ---- corruption ---------------------------------------------------------------------- */

/* Every cut inside the header, metadata, infos and padding, then evenly
 * spaced cuts through the data: each must fail and say "truncated". */
static void check_truncations(const uint8_t *buf, uint64_t data_offset, uint64_t data_end, int data_cuts) {
    gl_error err;
    for (uint64_t n = 0; n <= data_offset && n < data_end; n++) {
        uint8_t *copy = exact_copy(buf, n);
        bool ok = open_checked(copy, n, "cut", &err);
        REQUIRE_MSG(!ok, "truncated at %llu but opened", (unsigned long long)n);
        REQUIRE_MSG(strstr(err.message, "truncated"), "cut at %llu: %s", (unsigned long long)n, err.message);
        free(copy);
    }
    for (int k = 0; k < data_cuts; k++) {
        uint64_t n = data_offset + 1 + (data_end - data_offset - 1) * (uint64_t)k / (uint64_t)data_cuts;
        uint8_t *copy = exact_copy(buf, n);
        bool ok = open_checked(copy, n, "cut", &err);
        REQUIRE_MSG(!ok, "truncated at %llu but opened", (unsigned long long)n);
        REQUIRE_MSG(strstr(err.message, "truncated"), "cut at %llu: %s", (unsigned long long)n, err.message);
        free(copy);
    }
}

static uint64_t data_end_of(const gguf_file *f) {
    uint64_t end = f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t e = f->data_offset + f->tensors[i].offset + f->tensors[i].n_bytes;
        if (e > end) end = e;
    }
    return end;
}

START_TEST(test_truncate_synthetic) {
    wbuf b = {0};
    build_synthetic(&b, synth_variants[_i].version, synth_variants[_i].alignment);
    gl_error err;
    gguf_file *f = gguf_open_buffer(b.p, b.n, "synthetic", &err);
    ck_assert_ptr_nonnull(f);
    uint64_t data_offset = f->data_offset, data_end = data_end_of(f);
    gguf_close(f);
    ck_assert_uint_eq(data_end, b.n);
    check_truncations(b.p, data_offset, data_end, 200);
    free(b.p);
}
END_TEST

START_TEST(test_truncate_real) {
    const char *path = testdata_path("models/stories260K.gguf");
    if (!path) return;
    size_t size;
    uint8_t *buf = read_whole(path, &size);
    gl_error err;
    gguf_file *f = gguf_open_buffer(buf, size, "real", &err);
    ck_assert_ptr_nonnull(f);
    uint64_t data_offset = f->data_offset, data_end = data_end_of(f);
    gguf_close(f);
    check_truncations(buf, data_offset, data_end, 300);
    fprintf(stderr, "truncated stories260K at %llu + 300 offsets\n", (unsigned long long)data_offset + 1);
    /* Through gguf_open as well: a file cut in its metadata. */
    char *tmp = write_temp(buf, 5000);
    f = gguf_open(tmp, &err);
    check_failure(f, &err, tmp);
    ck_assert_ptr_nonnull(strstr(err.message, "truncated"));
    unlink(tmp);
    free(tmp);
    free(buf);
}
END_TEST

/* Seeded random damage to the metadata region: either a clean failure or a
 * file whose every invariant still holds. Half the trials flip random bytes,
 * half plant an extreme 8-byte value, which is what hits counts and lengths. */
static void fuzz_metadata(uint8_t *buf, size_t size, uint64_t region, int trials, uint64_t seed,
                          int *n_ok, int *n_fail) {
    static const uint64_t extremes[] = {0, 1, 2, 0xff, 0xffffffffull, 1ull << 32, 1ull << 62, 1ull << 63,
                                        UINT64_MAX, UINT64_MAX - 31, 1000, 13};
    rng_state = seed;
    gl_error err;
    for (int t = 0; t < trials; t++) {
        uint64_t pos[8];
        uint8_t saved[8][8];
        int k = 1 + (int)(rnd() % 4);
        bool wide = rnd() % 2;
        for (int j = 0; j < k; j++) {
            pos[j] = rnd() % (region - (wide ? 8 : 1) + 1);
            memcpy(saved[j], buf + pos[j], wide ? 8 : 1);
            if (wide) {
                uint64_t v = extremes[rnd() % (sizeof extremes / sizeof extremes[0])];
                for (int q = 0; q < 8; q++) buf[pos[j] + q] = (uint8_t)(v >> (8 * q));
            } else {
                buf[pos[j]] ^= (uint8_t)(1 + rnd() % 255);
            }
        }
        if (open_checked(buf, size, "fuzz", &err)) (*n_ok)++;
        else (*n_fail)++;
        for (int j = k - 1; j >= 0; j--) memcpy(buf + pos[j], saved[j], wide ? 8 : 1);
    }
}

START_TEST(test_fuzz_synthetic) {
    wbuf b = {0};
    build_synthetic(&b, 3, 64);
    uint8_t *buf = exact_copy(b.p, b.n);
    gl_error err;
    gguf_file *f = gguf_open_buffer(buf, b.n, "synthetic", &err);
    ck_assert_ptr_nonnull(f);
    uint64_t region = f->data_offset;
    gguf_close(f);
    int ok = 0, failed = 0;
    fuzz_metadata(buf, b.n, region, 20000, 12345, &ok, &failed);
    fprintf(stderr, "fuzz synthetic: %d opened, %d refused\n", ok, failed);
    ck_assert_int_gt(failed, 0);
    ck_assert_int_gt(ok, 0);
    ck_assert_mem_eq(buf, b.p, b.n); /* restored */
    free(buf);
    free(b.p);
}
END_TEST

START_TEST(test_fuzz_real) {
    const char *path = testdata_path("models/stories260K.gguf");
    if (!path) return;
    size_t size;
    uint8_t *buf = read_whole(path, &size);
    gl_error err;
    gguf_file *f = gguf_open_buffer(buf, size, "real", &err);
    ck_assert_ptr_nonnull(f);
    uint64_t region = f->data_offset;
    gguf_close(f);
    int ok = 0, failed = 0;
    fuzz_metadata(buf, size, region, 10000, 987654321, &ok, &failed);
    fprintf(stderr, "fuzz stories260K: %d opened, %d refused\n", ok, failed);
    ck_assert_int_gt(failed, 0);
    ck_assert_int_gt(ok, 0);
    free(buf);
}
END_TEST

START_TEST(test_garbage) {
    rng_state = 42;
    gl_error err;
    for (int t = 0; t < 10000; t++) {
        size_t n = rnd() % 2048;
        uint8_t *buf = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)rnd();
        /* Two thirds get a valid magic, version and small counts so the
         * garbage reaches the metadata and tensor parsers. */
        if (t % 3 && n >= 24) {
            memcpy(buf, "GGUF", 4);
            uint32_t version = 2 + (uint32_t)(rnd() % 2);
            uint64_t n_tensors = rnd() % 4, n_kv = rnd() % 6;
            for (int q = 0; q < 4; q++) buf[4 + q] = (uint8_t)(version >> (8 * q));
            for (int q = 0; q < 8; q++) buf[8 + q] = (uint8_t)(n_tensors >> (8 * q));
            for (int q = 0; q < 8; q++) buf[16 + q] = (uint8_t)(n_kv >> (8 * q));
        }
        open_checked(buf, n, "garbage", &err);
        free(buf);
    }
}
END_TEST

START_TEST(test_open_errors) {
    gl_error err;
    gguf_file *f = gguf_open("/nonexistent/dir/model.gguf", &err);
    check_failure(f, &err, "/nonexistent/dir/model.gguf");
    ck_assert_msg(strstr(err.message, "No such file"), "%s", err.message);

    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    f = gguf_open(dir, &err);
    check_failure(f, &err, dir);
    ck_assert_msg(strstr(err.message, "directory"), "%s", err.message);

    char *path = write_temp("", 0);
    f = gguf_open(path, &err);
    check_failure(f, &err, path);
    ck_assert_msg(strstr(err.message, "empty") && strstr(err.message, "truncated"), "%s", err.message);
    unlink(path);
    free(path);

    path = write_temp("GGU", 3);
    f = gguf_open(path, &err);
    check_failure(f, &err, path);
    ck_assert_msg(strstr(err.message, "truncated"), "%s", err.message);
    unlink(path);
    free(path);

    path = write_temp("hello world, not a model", 24);
    f = gguf_open(path, &err);
    check_failure(f, &err, path);
    ck_assert_msg(strstr(err.message, "not a GGUF file (bad magic) (at byte 0)"), "%s", err.message);
    unlink(path);
    free(path);

    f = gguf_open_buffer("ab", 2, "short", &err);
    check_failure(f, &err, "short");
    ck_assert_msg(strstr(err.message, "not a GGUF file"), "%s", err.message);
    f = gguf_open_buffer("", 0, NULL, &err);
    check_failure(f, &err, "(buffer)");
    f = gguf_open_buffer("GGUF", 4, "nullerr", NULL); /* err may be NULL */
    ck_assert_ptr_null(f);
}
END_TEST

/* ---- hostile headers ------------------------------------------------------------------ */

static void one_tensor(wbuf *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    w_header(b, 3, 1, 0);
    w_tensor_info(b, "w", n_dims, ne, type, offset);
    w_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++) w_u8(b, 0);
}

static void h_magic(wbuf *b) { w_bytes(b, "GGML", 4); w_u32(b, 3); w_u64(b, 0); w_u64(b, 0); }
static void h_v1(wbuf *b) { w_header(b, 1, 0, 0); }
static void h_v4(wbuf *b) { w_header(b, 4, 0, 0); }
static void h_big_endian(wbuf *b) { w_header(b, 0x03000000, 0, 0); }
static void h_kv_count(wbuf *b) { w_header(b, 3, 0, 1ull << 63); w_key(b, "a", GGUF_U8); w_u8(b, 1); }
static void h_tensor_count(wbuf *b) { w_header(b, 3, 1ull << 63, 0); }
static void h_key_len(wbuf *b) { w_header(b, 3, 0, 1); w_u64(b, UINT64_MAX); w_bytes(b, "abcdefgh", 8); }
static void h_str_len(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "s", GGUF_STRING); w_u64(b, UINT64_MAX); w_u64(b, 0); }
static void h_arr_count(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_ARRAY); w_arr_head(b, GGUF_U32, 1ull << 62); w_u32(b, 0); }
static void h_arr_count_str(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_ARRAY); w_arr_head(b, GGUF_STRING, UINT64_MAX); w_u64(b, 0); }
static void h_arr_count_arr(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_ARRAY); w_arr_head(b, GGUF_ARRAY, 1ull << 60); w_arr_head(b, GGUF_U8, 0); }
static void h_value_type(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", 13); w_u64(b, 0); }
static void h_elem_type(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_ARRAY); w_arr_head(b, 99, 1); w_u64(b, 0); }
static void h_depth(wbuf *b) {
    w_header(b, 3, 0, 1);
    w_key(b, "a", GGUF_ARRAY);
    for (int i = 0; i < 100; i++) w_arr_head(b, GGUF_ARRAY, 1);
    w_arr_head(b, GGUF_U8, 0);
}
static void h_empty_key(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "", GGUF_U8); w_u8(b, 1); w_u64(b, 0); }
static void h_dup_key(wbuf *b) {
    w_header(b, 3, 0, 3);
    w_key(b, "a", GGUF_U8); w_u8(b, 1);
    w_key(b, "b", GGUF_U8); w_u8(b, 1);
    w_key(b, "a", GGUF_STRING); w_str(b, "x");
}
static void h_bool(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_BOOL); w_u8(b, 2); }
static void h_bool_arr(wbuf *b) { w_header(b, 3, 0, 1); w_key(b, "a", GGUF_ARRAY); w_arr_head(b, GGUF_BOOL, 2); w_u8(b, 1); w_u8(b, 7); }
static void h_align(wbuf *b, uint32_t type, uint64_t a) {
    w_header(b, 3, 0, 1);
    w_key(b, "general.alignment", type);
    if (type == GGUF_U64) w_u64(b, a); else w_u32(b, (uint32_t)a);
}
static void h_align0(wbuf *b) { h_align(b, GGUF_U32, 0); }
static void h_align3(wbuf *b) { h_align(b, GGUF_U32, 3); }
static void h_align_type(wbuf *b) { h_align(b, GGUF_U64, 32); }
static void h_dims0(wbuf *b) { one_tensor(b, 0, NULL, GL_TYPE_F32, 0, 0); }
static void h_dims5(wbuf *b) { uint64_t ne[5] = {1, 1, 1, 1, 1}; one_tensor(b, 5, ne, GL_TYPE_F32, 0, 4); }
static void h_ne_overflow(wbuf *b) { uint64_t ne[3] = {1ull << 32, 1ull << 32, 1ull << 32}; one_tensor(b, 3, ne, GL_TYPE_F32, 0, 0); }
static void h_ne_negative(wbuf *b) { uint64_t ne[2] = {4, 1ull << 63}; one_tensor(b, 2, ne, GL_TYPE_F32, 0, 0); }
static void h_bytes_overflow(wbuf *b) { uint64_t ne[1] = {1ull << 62}; one_tensor(b, 1, ne, GL_TYPE_F32, 0, 0); }
static void h_type(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, 1000, 0, 16); }
static void h_type_gap(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, 4, 0, 16); } /* removed Q4_2 */
static void h_block(wbuf *b) { uint64_t ne[2] = {33, 2}; one_tensor(b, 2, ne, GL_TYPE_Q4_0, 0, 64); }
static void h_misaligned(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, GL_TYPE_F32, 4, 64); }
static void h_offset_past(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, GL_TYPE_F32, 1 << 20, 16); }
static void h_offset_wrap(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, GL_TYPE_F32, UINT64_MAX - 31, 16); }
static void h_data_short(wbuf *b) { uint64_t ne[1] = {4}; one_tensor(b, 1, ne, GL_TYPE_F32, 0, 15); }
static void h_dup_tensor(wbuf *b) {
    uint64_t ne[1] = {8};
    w_header(b, 3, 2, 0);
    w_tensor_info(b, "w", 1, ne, GL_TYPE_F32, 0);
    w_tensor_info(b, "w", 1, ne, GL_TYPE_F32, 32);
    w_pad(b, 32);
    for (int i = 0; i < 64; i++) w_u8(b, 0);
}
static void h_empty_name(wbuf *b) {
    uint64_t ne[1] = {8};
    w_header(b, 3, 1, 0);
    w_tensor_info(b, "", 1, ne, GL_TYPE_F32, 0);
    w_pad(b, 32);
    for (int i = 0; i < 32; i++) w_u8(b, 0);
}

static const struct hostile {
    const char *what;
    void (*build)(wbuf *b);
    const char *expect;     /* substring of the message */
    long long at;           /* expected "at byte", or -1 */
} hostile[] = {
    {"bad magic", h_magic, "not a GGUF file", 0},
    {"version 1", h_v1, "GGUF v1 is not supported", 4},
    {"version 4", h_v4, "unsupported GGUF version 4", 4},
    {"big-endian", h_big_endian, "big-endian", 4},
    {"kv count 2^63", h_kv_count, "metadata count 9223372036854775808", 16},
    {"tensor count 2^63", h_tensor_count, "tensor count 9223372036854775808", 8},
    {"key length 2^64-1", h_key_len, "truncated: key of 18446744073709551615 bytes", 24},
    {"string length 2^64-1", h_str_len, "truncated: string value", 24 + 9 + 4},
    {"u32 array count 2^62", h_arr_count, "array length 4611686018427387904", 24 + 9 + 4 + 4},
    {"string array count", h_arr_count_str, "array length 18446744073709551615", 24 + 9 + 4 + 4},
    {"array array count", h_arr_count_arr, "array length 1152921504606846976", 24 + 9 + 4 + 4},
    {"unknown value type", h_value_type, "unknown value type 13", 24 + 9 + 4},
    {"unknown element type", h_elem_type, "unknown array element type 99", 24 + 9 + 4},
    {"nesting depth 100", h_depth, "nested deeper than 8", -1},
    {"empty key", h_empty_key, "empty metadata key", 24},
    {"duplicate key", h_dup_key, "duplicate metadata key 'a'", 24 + 2 * (9 + 4 + 1)},
    {"bool 2", h_bool, "bool value is 2", 24 + 9 + 4},
    {"bool array 7", h_bool_arr, "bool array element is 7", 24 + 9 + 4 + 12 + 1},
    {"alignment 0", h_align0, "general.alignment 0 is not a power of two", 24 + 25 + 4},
    {"alignment 3", h_align3, "general.alignment 3 is not a power of two", 24 + 25 + 4},
    {"alignment u64", h_align_type, "general.alignment is not a u32", 24 + 25 + 4},
    {"n_dims 0", h_dims0, "has 0 dimensions", 24 + 9},
    {"n_dims 5", h_dims5, "has 5 dimensions", 24 + 9},
    {"ne product overflow", h_ne_overflow, "element count overflows", 24 + 9 + 4 + 8},
    {"ne 2^63", h_ne_negative, "dimension 1 is negative", 24 + 9 + 4 + 8},
    {"byte size overflow", h_bytes_overflow, "byte size overflows", -1},
    {"tensor type 1000", h_type, "unknown type 1000", 24 + 9 + 4 + 8},
    {"tensor type 4", h_type_gap, "unknown type 4", 24 + 9 + 4 + 8},
    {"row not whole blocks", h_block, "not a multiple of the Q4_0 block size 32", -1},
    {"misaligned offset", h_misaligned, "offset 4 is not a multiple of the alignment 32", 24},
    {"offset past the end", h_offset_past, "truncated: tensor 'w' data", 24},
    {"offset wraps", h_offset_wrap, "truncated: tensor 'w' data", 24},
    {"data one byte short", h_data_short, "truncated: tensor 'w' data", 24},
    {"duplicate tensor", h_dup_tensor, "duplicate tensor name 'w'", 24 + 33},
    {"empty tensor name", h_empty_name, "empty tensor name", 24},
};
enum { N_HOSTILE = sizeof hostile / sizeof hostile[0] };

START_TEST(test_hostile) {
    const struct hostile *h = &hostile[_i];
    wbuf b = {0};
    h->build(&b);
    uint8_t *buf = exact_copy(b.p, b.n);
    gl_error err = {{0}};
    gguf_file *f = gguf_open_buffer(buf, b.n, "hostile.gguf", &err);
    ck_assert_msg(f == NULL, "%s: opened", h->what);
    check_failure(f, &err, "hostile.gguf: ");
    ck_assert_msg(strstr(err.message, h->expect), "%s: got '%s'", h->what, err.message);
    char at[64];
    if (h->at >= 0) snprintf(at, sizeof at, "(at byte %lld)", h->at);
    else snprintf(at, sizeof at, "(at byte ");
    ck_assert_msg(strstr(err.message, at), "%s: want %s in '%s'", h->what, at, err.message);
    free(buf);
    free(b.p);
}
END_TEST

/* The same hostile bytes through a real file and mmap. */
START_TEST(test_hostile_file) {
    wbuf b = {0};
    h_kv_count(&b);
    char *path = write_temp(b.p, b.n);
    gl_error err;
    gguf_file *f = gguf_open(path, &err);
    check_failure(f, &err, path);
    ck_assert_ptr_nonnull(strstr(err.message, "metadata count"));
    unlink(path);
    free(path);
    free(b.p);
}
END_TEST

/* A zero-size tensor (ne 0) is allowed and has no bytes. */
START_TEST(test_zero_sized_tensor) {
    wbuf b = {0};
    uint64_t ne[2] = {0, 7};
    one_tensor(&b, 2, ne, GL_TYPE_Q4_K, 0, 0);
    gl_error err;
    gguf_file *f = gguf_open_buffer(b.p, b.n, "zero", &err);
    ck_assert_msg(f != NULL, "%s", err.message);
    ck_assert_uint_eq(f->tensors[0].n_bytes, 0);
    ck_assert_int_eq(f->tensors[0].ne[1], 7);
    check_invariants(f);
    gguf_close(f);
    free(b.p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("valid");
    tcase_add_loop_test(tc, test_synthetic_buffer, 0, N_VARIANTS);
    tcase_add_loop_test(tc, test_synthetic_file, 0, N_VARIANTS);
    tcase_add_test(tc, test_getters);
    tcase_add_test(tc, test_nesting_limit);
    tcase_add_test(tc, test_no_tensors);
    tcase_add_test(tc, test_zero_sized_tensor);
    suite_add_tcase(s, tc);

    tc = tcase_create("real");
    tcase_add_test(tc, test_stories260k);
    tcase_add_test(tc, test_vocab_files);
    tcase_add_test(tc, test_truncate_real);
    tcase_add_test(tc, test_fuzz_real);
    suite_add_tcase(s, tc);

    tc = tcase_create("corrupt");
    tcase_add_loop_test(tc, test_truncate_synthetic, 0, N_VARIANTS);
    tcase_add_test(tc, test_fuzz_synthetic);
    tcase_add_test(tc, test_garbage);
    tcase_add_test(tc, test_open_errors);
    tcase_add_loop_test(tc, test_hostile, 0, N_HOSTILE);
    tcase_add_test(tc, test_hostile_file);
    suite_add_tcase(s, tc);

    int failed = test_run_suite(s);
    if (failed) return 1;
    /* Without the shared data the real-file cases did nothing: say so. */
    if (!testdata_path("models/stories260K.gguf")) {
        fprintf(stderr, "shared test data missing: real-file cases skipped\n");
        return TEST_SKIP;
    }
    return 0;
}
