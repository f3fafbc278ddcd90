/* gguf.h -- read-only, memory-mapped GGUF (v2, v3) files.
 *
 * gguf_open() validates everything before returning: header, every key and
 * value (nested arrays included), every tensor's name, dims, type and byte
 * range. After it succeeds, nothing read through this API can run past the
 * mapping. Strings point into the mapping and are NOT NUL-terminated. */
#ifndef GL_GGUF_H
#define GL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h" /* gl_error */

typedef enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4,
    GGUF_I32 = 5, GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8,
    GGUF_ARRAY = 9, GGUF_U64 = 10, GGUF_I64 = 11, GGUF_F64 = 12,
} gguf_vtype;

typedef struct gguf_str {
    uint64_t len;             /* bytes */
    const char *ptr;          /* into the mapping; not NUL-terminated */
} gguf_str;

typedef struct gguf_value gguf_value;
struct gguf_value {
    gguf_vtype type;
    union {
        uint64_t u;           /* U8..U64 and BOOL */
        int64_t i;            /* I8..I64 */
        double f;             /* F32, F64 */
        gguf_str str;         /* STRING */
        struct {
            gguf_vtype elem_type;    /* type of every element */
            uint64_t n;              /* element count */
            const void *raw;         /* scalar elements: packed little-endian, in the mapping */
            gguf_str *strs;          /* STRING elements (allocated), else NULL */
            gguf_value *items;       /* ARRAY elements (allocated), else NULL */
        } arr;
    };
};

typedef struct gguf_kv {
    gguf_str key;
    gguf_value value;
} gguf_kv;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t type;            /* gl_type id */
    uint32_t n_dims;          /* 1..4 */
    int64_t ne[4];            /* elements per dim, ne[0] innermost (row length); unused dims are 1 */
    uint64_t offset;          /* relative to the data section */
    uint64_t n_bytes;         /* size of the data */
    const void *data;         /* into the mapping */
} gguf_tensor;

typedef struct gguf_file {
    char *path;               /* as given to gguf_open */
    uint32_t version;         /* 2 or 3 */
    uint64_t n_kv;
    gguf_kv *kvs;
    uint64_t n_tensors;
    gguf_tensor *tensors;
    uint32_t alignment;       /* general.alignment, default 32 */
    uint64_t data_offset;     /* file offset of the tensor data section (past the
                                 end in files without tensors, e.g. vocab-only) */
    const uint8_t *map;       /* the whole file */
    size_t map_size;
    bool mapped;              /* map is ours (gguf_open): gguf_close unmaps it */
} gguf_file;

/* Open and validate. On failure returns NULL and err says
 * "<path>: <what is wrong> (at byte N)". */
gguf_file *gguf_open(const char *path, gl_error *err);
/* Same, over a buffer the caller owns (used by the fuzzer); not copied. */
gguf_file *gguf_open_buffer(const void *buf, size_t size, const char *name, gl_error *err);
void gguf_close(gguf_file *f);

/* Lookup; NULL/-1 when absent. */
const gguf_value *gguf_get(const gguf_file *f, const char *key);
int64_t gguf_find_tensor(const gguf_file *f, const char *name);

/* Typed getters: return false when the key is absent or has an incompatible
 * type (integers of any width convert if the value fits). */
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
/* Array whose elements have elem_type, or NULL. */
const gguf_value *gguf_get_arr(const gguf_file *f, const char *key, gguf_vtype elem_type);

/* Compare a gguf_str with a C string. */
bool gguf_str_eq(gguf_str s, const char *cstr);

#endif
