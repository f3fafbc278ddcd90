/* model.c -- load a GGUF of a supported architecture (arch.h) and run the
 * forward pass. */
#include "model.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "gl_error.h"
#include "quant.h"

/* ---- loading ----------------------------------------------------------------- */

static char *str_dup(gguf_str s) {
    char *out = malloc(s.len + 1);
    if (!out) return NULL;
    memcpy(out, s.ptr, s.len);
    out[s.len] = 0;
    return out;
}

/* Metadata keys are "<arch>.<name>". */
static bool arch_u32(const gguf_file *f, const char *arch, const char *name, uint32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    return gguf_get_u32(f, key, out);
}

static bool arch_f32(const gguf_file *f, const char *arch, const char *name, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, name);
    return gguf_get_f32(f, key, out);
}

static int load_config(gl_config *c, const gguf_file *f, const char *arch, gl_error *err) {
    uint32_t v;
    c->arch = arch_find(arch);
#define REQUIRE(name, field)                                                             \
    do {                                                                                 \
        if (!arch_u32(f, arch, name, &v) || v == 0 || v > (1u << 24))                  \
            return gl_error_set(err, "missing or invalid metadata %s.%s", arch, name);  \
        c->field = (int)v;                                                               \
    } while (0)
    REQUIRE("embedding_length", n_embd);
    REQUIRE("block_count", n_layers);
    REQUIRE("attention.head_count", n_heads);
    REQUIRE("feed_forward_length", n_ff);
    REQUIRE("context_length", n_ctx_train);
#undef REQUIRE
    c->n_kv_heads = arch_u32(f, arch, "attention.head_count_kv", &v) ? (int)v : c->n_heads;
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads)
        return gl_error_set(err, "head_count %d is not a multiple of head_count_kv %d", c->n_heads, c->n_kv_heads);
    uint32_t key_len = 0, value_len = 0;
    bool has_key_len = arch_u32(f, arch, "attention.key_length", &key_len);
    if (has_key_len && (key_len == 0 || key_len > 4096 || key_len % 2))
        return gl_error_set(err, "invalid metadata %s.attention.key_length %u", arch, key_len);
    if (arch_u32(f, arch, "attention.value_length", &value_len) && has_key_len && value_len != key_len)
        return gl_error_set(err, "%s.attention.value_length %u differs from key_length %u (unsupported)", arch,
                            value_len, key_len);
    if (c->arch->free_head_dim && has_key_len) {
        c->head_dim = (int)key_len;
    } else {
        if (c->n_embd % c->n_heads)
            return gl_error_set(err, "embedding_length %d is not a multiple of head_count %d", c->n_embd, c->n_heads);
        c->head_dim = c->n_embd / c->n_heads;
        if (has_key_len && (int)key_len != c->head_dim)
            return gl_error_set(err, "%s.attention.key_length %u is not embedding_length / head_count = %d", arch,
                                key_len, c->head_dim);
    }
    c->q_dim = c->n_heads * c->head_dim;
    c->n_widest = c->n_ff > c->n_embd ? c->n_ff : c->n_embd;
    if (c->q_dim > c->n_widest) c->n_widest = c->q_dim;
    c->q_scale = 1.0f;
    if (strcmp(arch, "gemma3") == 0 && c->n_layers == 62) /* 27B: query_pre_attn_scalar = n_embd / n_heads */
        c->q_scale = sqrtf((float)c->head_dim * (float)c->n_heads / (float)c->n_embd);
    if (c->arch->swa_period > 0) {
        if (!arch_u32(f, arch, "attention.sliding_window", &v) || v == 0 || v > (1u << 24))
            return gl_error_set(err, "missing or invalid metadata %s.attention.sliding_window", arch);
        c->sliding_window = (int)v;
        c->swa_rope_base = c->arch->swa_rope_base;
    }
    c->rope_dim = arch_u32(f, arch, "rope.dimension_count", &v) ? (int)v : c->head_dim;
    if (c->rope_dim > c->head_dim || c->rope_dim % 2)
        return gl_error_set(err, "rope.dimension_count %d invalid for head size %d", c->rope_dim, c->head_dim);
    if (!arch_f32(f, arch, "rope.freq_base", &c->rope_freq_base)) c->rope_freq_base = 10000.0f;
    if (!arch_f32(f, arch, "attention.layer_norm_rms_epsilon", &c->rms_eps)) c->rms_eps = 1e-5f;
    if (!(c->rope_freq_base > 0) || !(c->rms_eps > 0))
        return gl_error_set(err, "invalid rope.freq_base or layer_norm_rms_epsilon");
    c->rope_freq_scale = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gguf_str scaling;
    float factor = 0;
    if (gguf_get_str(f, key, &scaling) && !gguf_str_eq(scaling, "none")) {
        if (!gguf_str_eq(scaling, "linear"))
            return gl_error_set(err, "unsupported rope scaling type '%.*s' (only linear)", (int)scaling.len, scaling.ptr);
        if (!arch_f32(f, arch, "rope.scaling.factor", &factor))
            return gl_error_set(err, "rope scaling is linear but %s.rope.scaling.factor is missing", arch);
    } else if (!arch_f32(f, arch, "rope.scale_linear", &factor)) {
        factor = 0;
    }
    if (factor > 0) c->rope_freq_scale = 1.0f / factor;
    return 0;
}

/* Find a weight and check its shape and type. n_rows 0 = a 1-D vector. */
static int load_tensor(gl_tensor *t, const gguf_file *f, const char *name, int64_t n_cols, int64_t n_rows,
                       bool required, gl_error *err) {
    int64_t i = gguf_find_tensor(f, name);
    if (i < 0) {
        if (required) return gl_error_set(err, "tensor %s is missing", name);
        memset(t, 0, sizeof *t);
        return 0;
    }
    const gguf_tensor *g = &f->tensors[i];
    int64_t want_rows = n_rows ? n_rows : 1;
    if (g->ne[0] != n_cols || g->ne[1] != want_rows || g->ne[2] != 1 || g->ne[3] != 1)
        return gl_error_set(err, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]", name,
                            (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2], (long long)g->ne[3],
                            (long long)n_cols, (long long)want_rows);
    if (!gl_type_supported(g->type)) {
        const gl_type_traits *tt = gl_type_get(g->type);
        return gl_error_set(err, "tensor %s has type %s, which genloop does not support", name,
                            tt ? tt->name : "unknown");
    }
    if ((uintptr_t)g->data % 4) /* kernels read F32 and block scales in place */
        return gl_error_set(err, "tensor %s is not 4-byte aligned (general.alignment %u)", name, f->alignment);
    if (n_rows == 0 && g->type != GL_TYPE_F32)
        return gl_error_set(err, "tensor %s: norm weights must be F32, not %s", name, gl_type_get(g->type)->name);
    t->type = g->type;
    t->n_cols = g->ne[0];
    t->n_rows = g->ne[1];
    t->data = g->data;
    t->n_bytes = g->n_bytes;
    return 0;
}

static int load_weights(gl_model *m, gl_error *err) {
    const gl_config *c = &m->config;
    const gl_arch *a = c->arch;
    const gguf_file *f = m->file;
    gl_weights *w = &m->weights;
    int kv_dim = c->n_kv_heads * c->head_dim;
    if (load_tensor(&w->token_embd, f, "token_embd.weight", c->n_embd, c->n_vocab, true, err) ||
        load_tensor(&w->output_norm, f, "output_norm.weight", c->n_embd, 0, true, err) ||
        load_tensor(&w->output, f, "output.weight", c->n_embd, c->n_vocab, false, err))
        return -1;
    if (!w->output.data) w->output = w->token_embd; /* tied embeddings */
    w->layers = calloc((size_t)c->n_layers, sizeof *w->layers);
    if (!w->layers) return gl_error_set(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++) {
        gl_layer_weights *L = &w->layers[l];
        struct {
            gl_tensor *t;
            const char *name;         /* blk.<l>.<name> */
            int64_t cols, rows;       /* rows 0: a vector */
            bool used;                /* the architecture has it (and then requires it) */
        } specs[] = {
            {&L->attn_norm, "attn_norm.weight", c->n_embd, 0, true},
            {&L->wq, "attn_q.weight", c->n_embd, c->q_dim, true},
            {&L->wk, "attn_k.weight", c->n_embd, kv_dim, true},
            {&L->wv, "attn_v.weight", c->n_embd, kv_dim, true},
            {&L->bq, "attn_q.bias", c->q_dim, 0, a->qkv_bias},
            {&L->bk, "attn_k.bias", kv_dim, 0, a->qkv_bias},
            {&L->bv, "attn_v.bias", kv_dim, 0, a->qkv_bias},
            {&L->q_norm, "attn_q_norm.weight", c->head_dim, 0, a->qk_norm},
            {&L->k_norm, "attn_k_norm.weight", c->head_dim, 0, a->qk_norm},
            {&L->wo, "attn_output.weight", c->q_dim, c->n_embd, true},
            {&L->attn_post_norm, "post_attention_norm.weight", c->n_embd, 0, a->post_norms},
            {&L->ffn_norm, "ffn_norm.weight", c->n_embd, 0, true},
            {&L->w_gate, "ffn_gate.weight", c->n_embd, c->n_ff, true},
            {&L->w_up, "ffn_up.weight", c->n_embd, c->n_ff, true},
            {&L->w_down, "ffn_down.weight", c->n_ff, c->n_embd, true},
            {&L->ffn_post_norm, "post_ffw_norm.weight", c->n_embd, 0, a->post_norms},
        };
        for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++) {
            if (!specs[s].used) continue;
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s", l, specs[s].name);
            if (load_tensor(specs[s].t, f, name, specs[s].cols, specs[s].rows, true, err)) return -1;
        }
    }
    return 0;
}

enum { LAYER_MATRICES = 7 }; /* wq wk wv wo w_gate w_up w_down */

/* Matrix i of the LAYER_MATRICES * n_layers + 1 that the forward pass
 * multiplies with (the output head last). */
static gl_tensor *matmul_weight(gl_weights *w, int n_layers, int i) {
    if (i == LAYER_MATRICES * n_layers) return &w->output;
    gl_layer_weights *L = &w->layers[i / LAYER_MATRICES];
    gl_tensor *ts[LAYER_MATRICES] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    return ts[i % LAYER_MATRICES];
}

/* Repack the matrices for the fast kernels (kern_pack). The packed copy is
 * what the forward pass reads from then on, so the file pages read while
 * packing are handed back: the process keeps one copy of the weights. All
 * packed matrices share one allocation in forward-pass order, so even a
 * layer's small matrices sit on 2 MiB pages (kern_weights_alloc) and a
 * decode step's reads run on from one matrix into the next. A matrix that
 * cannot be packed (no memory) is used as it is. */
static void pack_weights(gl_model *m, gl_load_progress_fn progress, void *ctx) {
    long page = sysconf(_SC_PAGESIZE);
    int n = LAYER_MATRICES * m->config.n_layers + 1;
    size_t total = 0, off = 0;
    for (int i = 0; i < n; i++) total += (kern_pack_bytes(matmul_weight(&m->weights, m->config.n_layers, i)) + 63) & ~(size_t)63;
    m->packed = total ? kern_weights_alloc(total) : NULL;
    m->packed_bytes = m->packed ? total : 0;
    kern_note_weights((long long)m->packed_bytes);
    for (int i = 0; i < n; i++) {
        if (progress) progress((float)i / (float)n, ctx);
        gl_tensor *t = matmul_weight(&m->weights, m->config.n_layers, i);
        size_t bytes = kern_pack_bytes(t);
        if (!bytes) continue;
        if (m->packed) {
            kern_pack_into(t, (uint8_t *)m->packed + off);
            off += (bytes + 63) & ~(size_t)63;
        } else if (kern_pack(t)) {
            continue;
        }
        if (!m->file->mapped || page <= 0) continue;
        uintptr_t lo = ((uintptr_t)t->data + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        uintptr_t hi = ((uintptr_t)t->data + t->n_bytes) & ~((uintptr_t)page - 1);
        if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
    }
}

static void unpack_weights(gl_model *m) {
    if (!m->weights.layers) return;
    for (int i = 0; i <= LAYER_MATRICES * m->config.n_layers; i++) {
        gl_tensor *t = matmul_weight(&m->weights, m->config.n_layers, i);
        if (m->packed) t->packed = NULL; /* in m->packed */
        else kern_unpack(t);
    }
    free(m->packed);
    m->packed = NULL;
    kern_note_weights(-(long long)m->packed_bytes);
    m->packed_bytes = 0;
}

static void fill_info(gl_model *m) {
    gl_model_info *info = &m->info;
    const gl_config *c = &m->config;
    info->name = m->name;
    info->arch = m->arch;
    info->path = m->file->path;
    info->n_vocab = tok_n_vocab(m->tokenizer);
    info->n_ctx_train = c->n_ctx_train;
    info->n_embd = c->n_embd;
    info->n_layers = c->n_layers;
    info->n_heads = c->n_heads;
    info->n_kv_heads = c->n_kv_heads;
    info->head_dim = c->head_dim;
    info->n_ff = c->n_ff;
    info->bos_id = tok_bos(m->tokenizer);
    info->eos_id = tok_eos(m->tokenizer);
    info->add_bos = tok_add_bos(m->tokenizer);
    info->chat_template = m->chat_template;
    if (m->vocab_only) return;
    uint64_t params = 0, bytes = 0;
    for (uint64_t i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    /* Per decoded token every matrix is read once, except the embedding
     * table, of which one row is read (unless it doubles as the output). */
    for (int l = 0; l < c->n_layers; l++) {
        const gl_layer_weights *L = &m->weights.layers[l];
        bytes += L->attn_norm.n_bytes + L->wq.n_bytes + L->wk.n_bytes + L->wv.n_bytes + L->wo.n_bytes +
                 L->ffn_norm.n_bytes + L->w_gate.n_bytes + L->w_up.n_bytes + L->w_down.n_bytes + L->bq.n_bytes +
                 L->bk.n_bytes + L->bv.n_bytes + L->q_norm.n_bytes + L->k_norm.n_bytes + L->attn_post_norm.n_bytes +
                 L->ffn_post_norm.n_bytes;
    }
    bytes += m->weights.output_norm.n_bytes + m->weights.output.n_bytes;
    if (m->weights.output.data != m->weights.token_embd.data)
        bytes += gl_type_row_bytes(m->weights.token_embd.type, c->n_embd);
    info->n_params = params;
    info->weight_bytes = bytes;
}

bool gl_model_summarize(const char *path, gl_model_summary *out, gl_error *err) {
    memset(out, 0, sizeof *out);
    gguf_file *f = gguf_open(path, err); /* its messages already name the file */
    if (!f) return false;
    gguf_str s;
    if (gguf_get_str(f, "general.name", &s))
        snprintf(out->name, sizeof out->name, "%.*s", (int)(s.len < 255 ? s.len : 255), s.ptr);
    if (!gguf_get_str(f, "general.architecture", &s)) s = (gguf_str){5, "llama"};
    snprintf(out->arch, sizeof out->arch, "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    uint32_t v;
    if (arch_u32(f, out->arch, "context_length", &v) && v <= (1u << 24)) out->n_ctx_train = (int)v;
    out->has_chat_template = gguf_get_str(f, "tokenizer.chat_template", &s);
    uint64_t bytes_of[64] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        out->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        if (t->type < 64) bytes_of[t->type] += t->n_bytes;
    }
    uint32_t common = 0;
    for (uint32_t k = 1; k < 64; k++)
        if (bytes_of[k] > bytes_of[common]) common = k;
    const gl_type_traits *tt = bytes_of[common] > 0 ? gl_type_get(common) : NULL;
    if (tt && tt->name) snprintf(out->file_type, sizeof out->file_type, "%s", tt->name);
    gguf_close(f);
    return true;
}

gl_model *gl_model_load(const char *path, gl_error *err) {
    return gl_model_load_progress(path, NULL, NULL, err);
}

gl_model *gl_model_load_progress(const char *path, gl_load_progress_fn progress, void *ctx,
                                 gl_error *err) {
    gl_model *m = calloc(1, sizeof *m);
    if (!m) {
        gl_error_set(err, "%s: out of memory", path);
        return NULL;
    }
    m->file = gguf_open(path, err); /* its messages already name the file */
    if (!m->file) {
        free(m);
        return NULL;
    }
    const gguf_file *f = m->file;
    gguf_str s;
    m->arch = str_dup(gguf_get_str(f, "general.architecture", &s) ? s : (gguf_str){5, "llama"});
    const char *base = strrchr(path, '/');
    m->name = gguf_get_str(f, "general.name", &s) ? str_dup(s) : strdup(base ? base + 1 : path);
    if (gguf_get_str(f, "tokenizer.chat_template", &s)) m->chat_template = str_dup(s);
    if (!m->arch || !m->name) {
        gl_error_set(err, "out of memory");
        goto fail;
    }
    m->tokenizer = tok_load(f, err);
    if (!m->tokenizer) goto fail;
    m->vocab_only = f->n_tensors == 0;
    if (!m->vocab_only) {
        if (!arch_find(m->arch)) {
            gl_error_set(err, "architecture '%s' is not supported (genloop runs %s)", m->arch, arch_supported());
            goto fail;
        }
        if (load_config(&m->config, f, m->arch, err)) goto fail;
        m->config.n_vocab = tok_n_vocab(m->tokenizer);
        if (load_weights(m, err)) goto fail;
        pack_weights(m, progress, ctx);
    }
    if (progress) progress(1.0f, ctx);
    fill_info(m);
    return m;
fail:
    gl_error_prefix(err, "%s", path);
    gl_model_free(m);
    return NULL;
}

void gl_model_free(gl_model *m) {
    if (!m) return;
    tok_free(m->tokenizer);
    unpack_weights(m);
    free(m->weights.layers);
    free(m->name);
    free(m->arch);
    free(m->chat_template);
    gguf_close(m->file);
    free(m);
}

const gl_model_info *gl_model_get_info(const gl_model *m) { return &m->info; }

int gl_tokenize(const gl_model *m, const char *text, size_t len, int flags, int32_t **ids_out, gl_error *err) {
    return tok_encode(m->tokenizer, text, len, flags, ids_out, err);
}

char *gl_detokenize(const gl_model *m, const int32_t *ids, size_t n, gl_error *err) {
    return tok_decode(m->tokenizer, ids, n, err);
}

const char *gl_token_text(const gl_model *m, int32_t id) { return tok_text(m->tokenizer, id); }

const char *gl_token_piece(const gl_model *m, int32_t id, size_t *len) { return tok_piece(m->tokenizer, id, len); }

bool gl_token_is_eog(const gl_model *m, int32_t id) { return tok_is_eog(m->tokenizer, id); }

/* ---- forward ------------------------------------------------------------------ */

enum { ROPE_GLOBAL, ROPE_SWA, ROPE_KINDS }; /* layers' RoPE: rope.freq_base, or the sliding-window base */

struct gl_run_state {
    int max_tokens, max_logits;
    float *x;                 /* [T][n_embd] residual stream */
    float *xb;                /* [T][n_embd] normalised input of a sublayer */
    float *q;                 /* [T][q_dim] */
    float *k, *v;             /* [T][kv_dim] */
    float *att;               /* [T][q_dim] attention output */
    float *proj;              /* [T][n_embd] sublayer output */
    float *gate, *up;         /* [T][n_ff] */
    float *out_rows;          /* [max_logits][n_embd] rows for the output head */
    float *rope_inv_freq[ROPE_KINDS]; /* [rope_dim / 2] */
    float *rope_cs[ROPE_KINDS];       /* [T][rope_dim] each token's cos, sin pairs */
};

/* The per-token buffers start on a cache line: the pool's threads write
 * neighbouring pieces of them (a matmul's rows in multiples of 16 floats,
 * a prompt's tokens), and from malloc's 16-byte alignment every piece's
 * boundary line was written by two threads. */
static float *floats_alloc(size_t n) {
    return aligned_alloc(64, n ? (n * sizeof(float) + 63) & ~(size_t)63 : 64);
}

gl_run_state *model_run_state_create(const gl_model *m, int max_tokens, int max_logits, gl_error *err) {
    const gl_config *c = &m->config;
    gl_run_state *rs = calloc(1, sizeof *rs);
    if (!rs) goto oom;
    size_t T = (size_t)max_tokens, kv_dim = (size_t)(c->n_kv_heads * c->head_dim);
    rs->max_tokens = max_tokens;
    rs->max_logits = max_logits;
    rs->x = floats_alloc(T * (size_t)c->n_embd);
    rs->xb = floats_alloc(T * (size_t)c->n_embd);
    rs->q = floats_alloc(T * (size_t)c->q_dim);
    rs->k = floats_alloc(T * kv_dim);
    rs->v = floats_alloc(T * kv_dim);
    rs->att = floats_alloc(T * (size_t)c->q_dim);
    rs->proj = floats_alloc(T * (size_t)c->n_embd);
    rs->gate = floats_alloc(T * (size_t)c->n_ff);
    rs->up = floats_alloc(T * (size_t)c->n_ff);
    rs->out_rows = floats_alloc((size_t)max_logits * (size_t)c->n_embd);
    if (!rs->x || !rs->xb || !rs->q || !rs->k || !rs->v || !rs->att || !rs->proj || !rs->gate || !rs->up ||
        !rs->out_rows)
        goto oom;
    for (int kind = 0; kind < ROPE_KINDS; kind++) {
        rs->rope_inv_freq[kind] = malloc((size_t)(c->rope_dim / 2 + 1) * sizeof(float));
        rs->rope_cs[kind] = malloc(T * (size_t)(c->rope_dim + 1) * sizeof(float));
        if (!rs->rope_inv_freq[kind] || !rs->rope_cs[kind]) goto oom;
        kern_rope_freqs(rs->rope_inv_freq[kind], c->rope_dim, kind == ROPE_SWA ? c->swa_rope_base : c->rope_freq_base);
    }
    return rs;
oom:
    model_run_state_free(rs);
    gl_error_set(err, "out of memory for activations of %d tokens", max_tokens);
    return NULL;
}

void model_run_state_free(gl_run_state *rs) {
    if (!rs) return;
    free(rs->x);
    free(rs->xb);
    free(rs->q);
    free(rs->k);
    free(rs->v);
    free(rs->att);
    free(rs->proj);
    free(rs->gate);
    free(rs->up);
    free(rs->out_rows);
    for (int kind = 0; kind < ROPE_KINDS; kind++) {
        free(rs->rope_inv_freq[kind]);
        free(rs->rope_cs[kind]);
    }
    free(rs);
}

/* What comes between a layer's Q/K/V projections and attention, per token,
 * so tokens are shared over the pool (F16 conversion and sin/cos were a
 * fifth of a 512-token prefill on one thread): biases, per-head Q/K norms,
 * RoPE, and the keys and values into the cache. A token's angles depend on
 * its position and the layer's RoPE kind alone: the first layer of each
 * kind computes them, the others reuse them. */
typedef struct rope_store_job {
    const gl_config *c;
    const gl_layer_weights *L;
    gl_run_state *rs;
    gl_kv_cache *kv;
    const gl_batch *b;
    int layer;
    int rope_kind;            /* ROPE_GLOBAL or ROPE_SWA */
    bool compute_angles;      /* the first layer of this kind in the pass */
    atomic_int next;          /* next group of STORE_TOKENS tokens */
} rope_store_job;

/* Tokens go to the threads a cache block's worth at a time: K is
 * channel-major in a block, so consecutive tokens write into the same
 * lines (each channel's 16 positions side by side), and handed out one by
 * one, the two threads of a prompt wrote into each other's lines. */
enum { STORE_TOKENS = 16 };

static void add_bias(float *x, const gl_tensor *bias, int n) {
    const float *b = bias->data;
    for (int i = 0; i < n; i++) x[i] += b[i];
}

static void head_norms(float *x, int n_heads, int head_dim, const gl_tensor *weight, float eps) {
    for (int h = 0; h < n_heads; h++)
        kern_rmsnorm(x + (size_t)h * head_dim, x + (size_t)h * head_dim, weight->data, head_dim, eps);
}

static void rope_store_token(const rope_store_job *job, int t) {
    const gl_config *c = job->c;
    const gl_arch *a = c->arch;
    const gl_layer_weights *L = job->L;
    gl_run_state *rs = job->rs;
    int kv_dim = c->n_kv_heads * c->head_dim;
    float freq_scale = job->rope_kind == ROPE_SWA ? 1.0f : c->rope_freq_scale;
    void (*rope)(float *, int, int, int, const float *) = a->rope_neox ? kern_rope_neox : kern_rope;
    int pos = job->b->positions[t];
    float *q = rs->q + (size_t)t * (size_t)c->q_dim, *k = rs->k + (size_t)t * (size_t)kv_dim;
    float *v = rs->v + (size_t)t * (size_t)kv_dim;
    if (a->qkv_bias) {
        add_bias(q, &L->bq, c->q_dim);
        add_bias(k, &L->bk, kv_dim);
        add_bias(v, &L->bv, kv_dim);
    }
    if (a->qk_norm) {
        head_norms(q, c->n_heads, c->head_dim, &L->q_norm, c->rms_eps);
        head_norms(k, c->n_kv_heads, c->head_dim, &L->k_norm, c->rms_eps);
    }
    float *cs = rs->rope_cs[job->rope_kind] + (size_t)t * (size_t)c->rope_dim;
    if (job->compute_angles)
        kern_rope_angles(cs, c->rope_dim, pos, rs->rope_inv_freq[job->rope_kind], freq_scale);
    rope(q, c->n_heads, c->head_dim, c->rope_dim, cs);
    rope(k, c->n_kv_heads, c->head_dim, c->rope_dim, cs);
    if (c->q_scale != 1.0f)
        for (int i = 0; i < c->q_dim; i++) q[i] *= c->q_scale;
    const int32_t *table = job->b->block_tables[job->b->seq_of_token[t]];
    kv_store(job->kv, job->layer, table[pos / job->kv->block_size], pos % job->kv->block_size, k, v);
}

static void rope_store_worker(void *arg, int ith, int nth) {
    rope_store_job *job = arg;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&job->next, STORE_TOKENS, memory_order_relaxed);
        if (t0 >= job->b->n_tokens) break;
        int t1 = t0 + STORE_TOKENS < job->b->n_tokens ? t0 + STORE_TOKENS : job->b->n_tokens;
        for (int t = t0; t < t1; t++) rope_store_token(job, t);
    }
    (void)ith, (void)nth;
}

/* Between sublayers, per token: the last sublayer's output into the
 * residual stream (x += post_norm(proj), or x += proj), then the next one's
 * input xb = rmsnorm(x). One pass over each token's rows, the tokens shared
 * over the pool in a prompt (on one thread these were a few percent of a
 * prefill, with the other thread waiting); a token's arithmetic is the same
 * whichever thread runs it. */
typedef struct norm_job {
    const gl_config *c;
    float *x, *proj;          /* proj NULL: nothing to add (the first layer) */
    const float *post_norm;   /* NULL: proj is added as it is */
    const float *norm;        /* NULL: no next sublayer (x only) */
    float *xb;
    int n_tokens;
    atomic_int next;          /* next group of NORM_TOKENS tokens */
} norm_job;

enum { NORM_TOKENS = 8 };

static void norm_worker(void *arg, int ith, int nth) {
    norm_job *job = arg;
    int D = job->c->n_embd;
    float eps = job->c->rms_eps;
    for (;;) {
        int t0 = atomic_fetch_add_explicit(&job->next, NORM_TOKENS, memory_order_relaxed);
        if (t0 >= job->n_tokens) break;
        int t1 = t0 + NORM_TOKENS < job->n_tokens ? t0 + NORM_TOKENS : job->n_tokens;
        for (int t = t0; t < t1; t++) {
            float *x = job->x + (size_t)t * D;
            if (job->proj) {
                float *proj = job->proj + (size_t)t * D;
                if (job->post_norm) kern_rmsnorm(proj, proj, job->post_norm, D, eps);
                for (int i = 0; i < D; i++) x[i] += proj[i];
            }
            if (job->norm) kern_rmsnorm(job->xb + (size_t)t * D, x, job->norm, D, eps);
        }
    }
    (void)ith, (void)nth;
}

static void add_and_norm(kern_pool *pool, const gl_config *c, gl_run_state *rs, int T, bool add,
                         const gl_tensor *post_norm, const gl_tensor *norm) {
    norm_job job = {.c = c, .x = rs->x, .proj = add ? rs->proj : NULL, .post_norm = add ? post_norm->data : NULL,
                    .norm = norm ? norm->data : NULL, .xb = rs->xb, .n_tokens = T};
    atomic_init(&job.next, 0);
    if (T < 4) norm_worker(&job, 0, 1); /* a decode step's few tokens: not worth a hand-out */
    else kern_pool_run(pool, norm_worker, &job);
}

int model_forward(const gl_model *m, gl_run_state *rs, kern_pool *pool, gl_kv_cache *kv, const gl_batch *b,
                  float *logits, gl_error *err) {
    const gl_config *c = &m->config;
    const gl_weights *w = &m->weights;
    int T = b->n_tokens, D = c->n_embd;
    if (m->vocab_only) return gl_error_set(err, "model has no weights (vocab-only GGUF)");
    if (T <= 0 || T > rs->max_tokens || b->n_logits > rs->max_logits)
        return gl_error_set(err, "batch of %d tokens / %d logits exceeds the run state", T, b->n_logits);

    float embd_scale = c->arch->embd_scale ? sqrtf((float)D) : 1.0f;
    for (int t = 0; t < T; t++) {
        if (b->tokens[t] < 0 || b->tokens[t] >= c->n_vocab)
            return gl_error_set(err, "token id %d out of range", b->tokens[t]);
        float *x = rs->x + (size_t)t * D;
        kern_get_row(&w->token_embd, b->tokens[t], x);
        if (embd_scale != 1.0f)
            for (int i = 0; i < D; i++) x[i] *= embd_scale;
    }

    bool have_angles[ROPE_KINDS] = {false};
    for (int l = 0; l < c->n_layers; l++) {
        const gl_layer_weights *L = &w->layers[l];
        bool swa = model_layer_is_swa(c, l);

        /* attention: x += Wo * attention(rope(Wq h), rope(Wk h), Wv h), h = rmsnorm(x);
         * the last layer's FFN output goes into x here too */
        const gl_layer_weights *prev = l > 0 ? &w->layers[l - 1] : NULL;
        add_and_norm(pool, c, rs, T, prev != NULL, prev ? &prev->ffn_post_norm : NULL, &L->attn_norm);
        kern_matmul_n(pool, 3, (const gl_tensor *[]){&L->wq, &L->wk, &L->wv}, rs->xb, T,
                      (float *[]){rs->q, rs->k, rs->v});
        rope_store_job rope = {.c = c, .L = L, .rs = rs, .kv = kv, .b = b, .layer = l,
                               .rope_kind = swa ? ROPE_SWA : ROPE_GLOBAL};
        rope.compute_angles = !have_angles[rope.rope_kind];
        have_angles[rope.rope_kind] = true;
        atomic_init(&rope.next, 0);
        if (T < 4) rope_store_worker(&rope, 0, 1); /* a decode step's few tokens: not worth a hand-out */
        else kern_pool_run(pool, rope_store_worker, &rope);
        kern_attn attn = {.n_tokens = T, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                          .head_dim = c->head_dim, .q = rs->q, .out = rs->att, .positions = b->positions,
                          .seq_of_token = b->seq_of_token, .block_tables = b->block_tables,
                          .k = kv_k_block(kv, l, 0), .v = kv_v_block(kv, l, 0), .block_size = kv->block_size,
                          .window = swa ? c->sliding_window : 0, .type = kv->type, .q8_chunk = kv->q8_chunk};
        if (kern_attention(pool, &attn)) return gl_error_set(err, "out of memory for attention scratch");
        kern_matmul(pool, &L->wo, rs->att, T, rs->proj);

        /* feed-forward: x += W_down (act(W_gate h) * W_up h), h = rmsnorm(x) */
        add_and_norm(pool, c, rs, T, true, &L->attn_post_norm, &L->ffn_norm);
        kern_matmul_n(pool, 2, (const gl_tensor *[]){&L->w_gate, &L->w_up}, rs->xb, T,
                      (float *[]){rs->gate, rs->up});
        if (c->arch->gelu) kern_geglu(pool, rs->gate, rs->up, T * c->n_ff);
        else kern_swiglu(pool, rs->gate, rs->up, T * c->n_ff);
        kern_matmul(pool, &L->w_down, rs->gate, T, rs->proj);
    }
    add_and_norm(pool, c, rs, T, true, &w->layers[c->n_layers - 1].ffn_post_norm, NULL);

    /* Output head only for the rows someone will sample from. */
    for (int i = 0; i < b->n_logits; i++)
        kern_rmsnorm(rs->out_rows + (size_t)i * D, rs->x + (size_t)b->logit_tokens[i] * D, w->output_norm.data, D,
                     c->rms_eps);
    if (b->n_logits > 0) kern_matmul(pool, &w->output, rs->out_rows, b->n_logits, logits);
    return 0;
}
