/* gguf.c -- GGUF reader: map the file, then validate every byte of the
 * header, metadata and tensor infos before handing anything out.
 *
 * Layout (little-endian):
 *   "GGUF" u32 version, u64 n_tensors, u64 n_kv
 *   n_kv x      { string key, u32 value type, value }
 *   n_tensors x { string name, u32 n_dims, n_dims x u64 ne, u32 type, u64 offset }
 *   padding to general.alignment, then the tensor data section.
 * A string is a u64 byte count and the bytes; an array is a u32 element type,
 * a u64 count and the elements.
 *
 * The file may be hostile (the server loads whatever it is pointed at), so
 * every count is checked against the bytes that remain before anything is
 * allocated for it, and every read goes through the bounds-checked reader. */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gl_error.h"
#include "quant.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DEPTH 8      /* arrays of arrays; real files use 1 */

/* Smallest encodings, used to bound counts by the bytes left in the file. */
#define MIN_STRING_BYTES 8    /* u64 length, empty payload */
#define MIN_ARRAY_BYTES 12    /* u32 element type + u64 count */
#define MIN_KV_BYTES (MIN_STRING_BYTES + 1 + 4 + 1) /* non-empty key, type, 1-byte value */
#define MIN_TENSOR_BYTES (MIN_STRING_BYTES + 1 + 4 + 8 + 4 + 8) /* 1 dim */

/* ---- bounds-checked reader ------------------------------------------------- */

typedef struct reader {
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos;
    const char *name;         /* for messages */
    gl_error *err;
} reader;

/* "<name>: <what> (at byte N)"; always returns -1. */
__attribute__((format(printf, 3, 4)))
static int fail(reader *r, uint64_t at, const char *fmt, ...) {
    char what[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return gl_error_set(r->err, "%s: %s (at byte %llu)", r->name, what, (unsigned long long)at);
}

/* Names are quoted in messages, clipped so a hostile one cannot fill them. */
static int clip(gguf_str s) { return (int)(s.len > 100 ? 100 : s.len); }

static uint64_t remaining(const reader *r) { return r->size - r->pos; }

static int need(reader *r, uint64_t n, const char *what) {
    if (n > remaining(r))
        return fail(r, r->pos, "truncated: %s needs %llu bytes, only %llu left", what,
                    (unsigned long long)n, (unsigned long long)remaining(r));
    return 0;
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int read_uint(reader *r, int n, uint64_t *out, const char *what) {
    if (need(r, (uint64_t)n, what)) return -1;
    *out = load_le(r->buf + r->pos, n);
    r->pos += (uint64_t)n;
    return 0;
}

static int read_u32(reader *r, uint32_t *out, const char *what) {
    uint64_t v;
    if (read_uint(r, 4, &v, what)) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int read_u64(reader *r, uint64_t *out, const char *what) { return read_uint(r, 8, out, what); }

static int read_str(reader *r, gguf_str *out, const char *what) {
    uint64_t at = r->pos, len;
    if (read_u64(r, &len, what)) return -1;
    if (len > remaining(r))
        return fail(r, at, "truncated: %s of %llu bytes runs past the end of the file (%llu bytes left)",
                    what, (unsigned long long)len, (unsigned long long)remaining(r));
    out->len = len;
    out->ptr = (const char *)r->buf + r->pos;
    r->pos += len;
    return 0;
}

/* A count of elements each at least min_bytes long must fit in what is left;
 * checked before anything is allocated for it. */
static int check_count(reader *r, uint64_t at, uint64_t count, uint64_t min_bytes, const char *what) {
    if (count > remaining(r) / min_bytes)
        return fail(r, at, "%s %llu cannot fit in the %llu bytes left in the file (truncated or corrupt)",
                    what, (unsigned long long)count, (unsigned long long)remaining(r));
    return 0;
}

/* ---- values ------------------------------------------------------------------ */

/* Bytes of a fixed-size value type; 0 for STRING and ARRAY; -1 if unknown. */
static int scalar_size(uint32_t type) {
    switch (type) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    case GGUF_STRING: case GGUF_ARRAY: return 0;
    default: return -1;
    }
}

static void value_free(gguf_value *v) {
    if (v->type != GGUF_ARRAY) return;
    free(v->arr.strs);
    if (v->arr.items)
        for (uint64_t i = 0; i < v->arr.n; i++) value_free(&v->arr.items[i]);
    free(v->arr.items);
    v->arr.strs = NULL;
    v->arr.items = NULL;
}

/* depth counts the arrays around a value: 0 for a metadata value itself. */
static int read_value(reader *r, uint32_t type, gguf_value *v, int depth);

/* Memory is bounded by the file: at most 2x its size for string arrays
 * (16-byte gguf_str per 8-byte minimum string), about 4x for arrays of arrays. */
static int read_array(reader *r, gguf_value *v, int depth) {
    uint64_t at = r->pos;
    if (depth > GGUF_MAX_DEPTH)
        return fail(r, at, "arrays nested deeper than %d levels", GGUF_MAX_DEPTH);
    uint32_t elem_type;
    uint64_t n;
    if (read_u32(r, &elem_type, "array element type")) return -1;
    int elem_size = scalar_size(elem_type);
    if (elem_size < 0) return fail(r, at, "unknown array element type %u", elem_type);
    if (read_u64(r, &n, "array length")) return -1;
    uint64_t min_bytes = elem_size > 0 ? (uint64_t)elem_size
                       : elem_type == GGUF_STRING ? MIN_STRING_BYTES : MIN_ARRAY_BYTES;
    if (check_count(r, at + 4, n, min_bytes, "array length")) return -1;

    v->arr.elem_type = elem_type;
    v->arr.n = n;
    v->arr.raw = r->buf + r->pos;
    if (elem_size > 0) {
        if (elem_type == GGUF_BOOL)
            for (uint64_t i = 0; i < n; i++)
                if (r->buf[r->pos + i] > 1)
                    return fail(r, r->pos + i, "bool array element is %u, not 0 or 1", r->buf[r->pos + i]);
        r->pos += n * (uint64_t)elem_size;
        return 0;
    }
    if (n == 0) return 0;
    if (elem_type == GGUF_STRING) {
        v->arr.strs = malloc(n * sizeof *v->arr.strs);
        if (!v->arr.strs) return fail(r, at, "out of memory for %llu strings", (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++)
            if (read_str(r, &v->arr.strs[i], "array string")) return -1;
        return 0;
    }
    /* Zeroed items free as no-ops if we fail halfway through. */
    v->arr.items = calloc(n, sizeof *v->arr.items);
    if (!v->arr.items) return fail(r, at, "out of memory for %llu arrays", (unsigned long long)n);
    for (uint64_t i = 0; i < n; i++)
        if (read_value(r, GGUF_ARRAY, &v->arr.items[i], depth)) return -1;
    return 0;
}

static int read_value(reader *r, uint32_t type, gguf_value *v, int depth) {
    uint64_t at = r->pos, raw;
    v->type = (gguf_vtype)type;
    switch (type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64:
        if (read_uint(r, scalar_size(type), &v->u, "integer value")) return -1;
        return 0;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: {
        int n = scalar_size(type);
        if (read_uint(r, n, &raw, "integer value")) return -1;
        int shift = 64 - 8 * n; /* sign-extend through the top bit */
        v->i = (int64_t)(raw << shift) >> shift;
        return 0;
    }
    case GGUF_F32: {
        if (read_uint(r, 4, &raw, "f32 value")) return -1;
        uint32_t bits = (uint32_t)raw;
        float f;
        memcpy(&f, &bits, 4);
        v->f = f;
        return 0;
    }
    case GGUF_F64:
        if (read_uint(r, 8, &raw, "f64 value")) return -1;
        memcpy(&v->f, &raw, 8);
        return 0;
    case GGUF_BOOL:
        if (read_uint(r, 1, &v->u, "bool value")) return -1;
        if (v->u > 1) return fail(r, at, "bool value is %llu, not 0 or 1", (unsigned long long)v->u);
        return 0;
    case GGUF_STRING:
        return read_str(r, &v->str, "string value");
    case GGUF_ARRAY:
        memset(&v->arr, 0, sizeof v->arr);
        return read_array(r, v, depth + 1);
    default:
        return fail(r, at, "unknown value type %u", type);
    }
}

/* ---- duplicate detection ------------------------------------------------------ */

/* Open-addressing set of names, so that hostile files with many entries
 * cannot make the duplicate check quadratic. Slots point at the gguf_str
 * inside the kv or tensor arrays, which do not move while parsing. */
typedef struct name_set {
    const gguf_str **slots;
    uint64_t mask;
} name_set;

static uint64_t hash_str(gguf_str s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < s.len; i++) h = (h ^ (uint8_t)s.ptr[i]) * 1099511628211ull;
    return h;
}

static int name_set_init(name_set *set, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    set->slots = calloc(cap, sizeof *set->slots);
    set->mask = cap - 1;
    return set->slots ? 0 : -1;
}

/* Adds name; false when an equal name is already there. */
static bool name_set_add(name_set *set, const gguf_str *name) {
    for (uint64_t i = hash_str(*name) & set->mask;; i = (i + 1) & set->mask) {
        const gguf_str *other = set->slots[i];
        if (!other) {
            set->slots[i] = name;
            return true;
        }
        if (other->len == name->len && memcmp(other->ptr, name->ptr, name->len) == 0) return false;
    }
}

/* ---- parsing -------------------------------------------------------------------- */

static int parse_header(reader *r, gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv) {
    if (r->size == 0) return fail(r, 0, "truncated: the file is empty");
    uint64_t magic_len = r->size < 4 ? r->size : 4;
    if (memcmp(r->buf, GGUF_MAGIC, magic_len) != 0) return fail(r, 0, "not a GGUF file (bad magic)");
    if (magic_len < 4)
        return fail(r, 0, "truncated: only %llu bytes of the GGUF magic", (unsigned long long)r->size);
    r->pos = 4;
    if (read_u32(r, &f->version, "version")) return -1;
    if (f->version == 1) return fail(r, 4, "GGUF v1 is not supported (only v2 and v3)");
    if (f->version != 2 && f->version != 3) {
        uint32_t swapped = __builtin_bswap32(f->version);
        if (swapped >= 1 && swapped <= 3)
            return fail(r, 4, "big-endian GGUF files are not supported");
        return fail(r, 4, "unsupported GGUF version %u (only v2 and v3)", f->version);
    }
    if (read_u64(r, n_tensors, "tensor count")) return -1;
    if (read_u64(r, n_kv, "metadata count")) return -1;
    if (check_count(r, 16, *n_kv, MIN_KV_BYTES, "metadata count")) return -1;
    /* Tensor infos follow the metadata, so this bound is loose; the real one
     * is applied once the metadata has been read. */
    if (check_count(r, 8, *n_tensors, MIN_TENSOR_BYTES, "tensor count")) return -1;
    return 0;
}

static int parse_kvs(reader *r, gguf_file *f, uint64_t n_kv) {
    f->kvs = calloc(n_kv ? n_kv : 1, sizeof *f->kvs);
    if (!f->kvs) return fail(r, 16, "out of memory for %llu metadata entries", (unsigned long long)n_kv);
    f->n_kv = n_kv; /* zeroed entries free as no-ops on failure */
    name_set keys;
    if (name_set_init(&keys, n_kv)) return fail(r, 16, "out of memory");
    int rc = 0;
    for (uint64_t i = 0; i < n_kv && rc == 0; i++) {
        gguf_kv *kv = &f->kvs[i];
        uint64_t at = r->pos;
        uint32_t type;
        if (read_str(r, &kv->key, "key")) { rc = -1; break; }
        if (kv->key.len == 0) { rc = fail(r, at, "empty metadata key"); break; }
        if (!name_set_add(&keys, &kv->key)) {
            rc = fail(r, at, "duplicate metadata key '%.*s'", clip(kv->key), kv->key.ptr);
            break;
        }
        if (read_u32(r, &type, "value type")) { rc = -1; break; }
        uint64_t value_at = r->pos;
        if (read_value(r, type, &kv->value, 0)) { rc = -1; break; }
        if (gguf_str_eq(kv->key, "general.alignment")) {
            if (type != GGUF_U32) { rc = fail(r, value_at, "general.alignment is not a u32"); break; }
            uint64_t a = kv->value.u;
            if (a == 0 || (a & (a - 1)) != 0) {
                rc = fail(r, value_at, "general.alignment %llu is not a power of two", (unsigned long long)a);
                break;
            }
            f->alignment = (uint32_t)a;
        }
    }
    free(keys.slots);
    return rc;
}

static int parse_tensor_info(reader *r, gguf_tensor *t) {
    uint64_t at = r->pos;
    if (read_str(r, &t->name, "tensor name")) return -1;
    if (t->name.len == 0) return fail(r, at, "empty tensor name");
    int name_len = clip(t->name);
    const char *name = t->name.ptr;

    uint64_t dims_at = r->pos;
    if (read_u32(r, &t->n_dims, "tensor dimension count")) return -1;
    if (t->n_dims < 1 || t->n_dims > 4)
        return fail(r, dims_at, "tensor '%.*s' has %u dimensions (must be 1..4)", name_len, name, t->n_dims);
    int64_t n_elements = 1;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne_at = r->pos, ne;
        if (read_u64(r, &ne, "tensor dimension")) return -1;
        if (ne > (uint64_t)INT64_MAX)
            return fail(r, ne_at, "tensor '%.*s' dimension %u is negative", name_len, name, d);
        t->ne[d] = (int64_t)ne;
        if (ne != 0 && n_elements > INT64_MAX / (int64_t)ne)
            return fail(r, ne_at, "tensor '%.*s' element count overflows", name_len, name);
        n_elements *= (int64_t)ne;
    }

    uint64_t type_at = r->pos;
    if (read_u32(r, &t->type, "tensor type")) return -1;
    const gl_type_traits *traits = gl_type_get(t->type);
    if (!traits) return fail(r, type_at, "tensor '%.*s' has unknown type %u", name_len, name, t->type);
    if (t->ne[0] % traits->block_size != 0)
        return fail(r, dims_at, "tensor '%.*s' row of %lld elements is not a multiple of the %s block size %d",
                    name_len, name, (long long)t->ne[0], traits->name, traits->block_size);
    uint64_t n_blocks = (uint64_t)n_elements / (uint64_t)traits->block_size;
    if (n_blocks > UINT64_MAX / (uint64_t)traits->block_bytes)
        return fail(r, dims_at, "tensor '%.*s' byte size overflows", name_len, name);
    t->n_bytes = n_blocks * (uint64_t)traits->block_bytes;

    return read_u64(r, &t->offset, "tensor offset");
}

static int parse_tensors(reader *r, gguf_file *f, uint64_t n_tensors) {
    if (check_count(r, 8, n_tensors, MIN_TENSOR_BYTES, "tensor count")) return -1;
    f->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *f->tensors);
    if (!f->tensors) return fail(r, 8, "out of memory for %llu tensors", (unsigned long long)n_tensors);
    f->n_tensors = n_tensors;
    uint64_t *info_at = malloc((n_tensors ? n_tensors : 1) * sizeof *info_at);
    name_set names = {0};
    int rc = 0;
    if (!info_at || name_set_init(&names, n_tensors)) rc = fail(r, r->pos, "out of memory");

    for (uint64_t i = 0; i < n_tensors && rc == 0; i++) {
        gguf_tensor *t = &f->tensors[i];
        info_at[i] = r->pos;
        if (parse_tensor_info(r, t)) { rc = -1; break; }
        if (!name_set_add(&names, &t->name))
            rc = fail(r, info_at[i], "duplicate tensor name '%.*s'",
                      clip(t->name), t->name.ptr);
        else if (t->offset % f->alignment != 0)
            rc = fail(r, info_at[i], "tensor '%.*s' offset %llu is not a multiple of the alignment %u",
                      clip(t->name), t->name.ptr,
                      (unsigned long long)t->offset, f->alignment);
    }

    /* The data section starts at the first aligned byte after the infos.
     * Files without tensors may end before it (vocab-only files do). */
    f->data_offset = (r->pos + f->alignment - 1) / f->alignment * f->alignment;
    for (uint64_t i = 0; i < n_tensors && rc == 0; i++) {
        gguf_tensor *t = &f->tensors[i];
        uint64_t space = r->size >= f->data_offset ? r->size - f->data_offset : 0;
        if (r->size < f->data_offset || t->offset > space || t->n_bytes > space - t->offset) {
            rc = fail(r, info_at[i], "truncated: tensor '%.*s' data [%llu, +%llu) runs past the end of the file (%llu bytes)",
                      clip(t->name), t->name.ptr,
                      (unsigned long long)(f->data_offset + t->offset), (unsigned long long)t->n_bytes,
                      (unsigned long long)r->size);
            break;
        }
        t->data = r->buf + f->data_offset + t->offset;
    }
    free(info_at);
    free(names.slots);
    return rc;
}

gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, gl_error *err) {
    if (!name) name = "(buffer)";
    gguf_file *f = calloc(1, sizeof *f);
    if (!f) {
        gl_error_set(err, "%s: out of memory", name);
        return NULL;
    }
    f->path = strdup(name);
    f->map = buf;
    f->map_size = size;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    if (!f->path) {
        gl_error_set(err, "%s: out of memory", name);
        gguf_close(f);
        return NULL;
    }
    reader r = {.buf = buf, .size = size, .pos = 0, .name = f->path, .err = err};
    uint64_t n_tensors = 0, n_kv = 0;
    if (parse_header(&r, f, &n_tensors, &n_kv) || parse_kvs(&r, f, n_kv) ||
        parse_tensors(&r, f, n_tensors)) {
        gguf_close(f);
        return NULL;
    }
    return f;
}

gguf_file *gguf_open(const char *path, gl_error *err) {
    /* O_NONBLOCK so that a FIFO cannot hang us before fstat rejects it. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        gl_error_set(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        gl_error_set(err, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return NULL;
    }
    if (S_ISDIR(st.st_mode) || !S_ISREG(st.st_mode)) {
        gl_error_set(err, "%s: %s", path, S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
        close(fd);
        return NULL;
    }
    size_t size = (size_t)st.st_size;
    void *map = NULL;
    if (size > 0) { /* mmap refuses length 0; the parser reports the empty file */
        map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            gl_error_set(err, "%s: cannot map %zu bytes: %s", path, size, strerror(errno));
            close(fd);
            return NULL;
        }
    }
    close(fd); /* the mapping keeps the file alive */
    gguf_file *f = gguf_open_buffer(map ? map : "", size, path, err);
    if (!f) {
        if (map) munmap(map, size);
        return NULL;
    }
    f->mapped = map != NULL;
    return f;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    if (f->kvs)
        for (uint64_t i = 0; i < f->n_kv; i++) value_free(&f->kvs[i].value);
    free(f->kvs);
    free(f->tensors);
    if (f->mapped) munmap((void *)f->map, f->map_size);
    free(f->path);
    free(f);
}

/* ---- lookup ------------------------------------------------------------------ */

bool gguf_str_eq(gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && memcmp(s.ptr, cstr, n) == 0;
}

/* Linear: the model loader asks a few dozen times per load. */
const gguf_value *gguf_get(const gguf_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (uint64_t i = 0; i < f->n_kv; i++)
        if (gguf_str_eq(f->kvs[i].key, key)) return &f->kvs[i].value;
    return NULL;
}

int64_t gguf_find_tensor(const gguf_file *f, const char *name) {
    if (!f || !name) return -1;
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if (gguf_str_eq(f->tensors[i].name, name)) return (int64_t)i;
    return -1;
}

static bool is_unsigned(gguf_vtype t) { return t == GGUF_U8 || t == GGUF_U16 || t == GGUF_U32 || t == GGUF_U64; }
static bool is_signed(gguf_vtype t) { return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64; }

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
    const gguf_value *v = gguf_get(f, key);
    if (!v) return false;
    if (is_unsigned(v->type) && v->u <= UINT32_MAX) {
        *out = (uint32_t)v->u;
        return true;
    }
    if (is_signed(v->type) && v->i >= 0 && v->i <= (int64_t)UINT32_MAX) {
        *out = (uint32_t)v->i;
        return true;
    }
    return false;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
    const gguf_value *v = gguf_get(f, key);
    if (!v || (v->type != GGUF_F32 && v->type != GGUF_F64)) return false;
    *out = (float)v->f;
    return true;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
    const gguf_value *v = gguf_get(f, key);
    if (!v) return false;
    if ((v->type == GGUF_BOOL || is_unsigned(v->type)) && v->u <= 1) {
        *out = v->u == 1;
        return true;
    }
    if (is_signed(v->type) && (v->i == 0 || v->i == 1)) {
        *out = v->i == 1;
        return true;
    }
    return false;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
    const gguf_value *v = gguf_get(f, key);
    if (!v || v->type != GGUF_STRING) return false;
    *out = v->str;
    return true;
}

const gguf_value *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type) {
    const gguf_value *v = gguf_get(f, key);
    if (!v || v->type != GGUF_ARRAY || v->arr.elem_type != elem_type) return NULL;
    return v;
}
