/* model.h -- decoder-only transformers (llama, qwen2, qwen3, gemma3; what
 * sets each apart is in arch.h): hyperparameters, weights, and one batched
 * forward pass over a flat list of tokens from many sequences.
 *
 * Read top-down like llama2.c: gl_config (shapes), gl_weights (pointers into
 * the mapped GGUF), gl_run_state (scratch activations), model_forward. */
#ifndef GL_MODEL_H
#define GL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "arch.h"
#include "genloop.h"
#include "gguf.h"
#include "kernels.h"
#include "kv_cache.h"
#include "tokenizer.h"

typedef struct gl_config {
    const gl_arch *arch;
    int n_embd;               /* model width */
    int n_layers;
    int n_heads;              /* query heads */
    int n_kv_heads;           /* key/value heads (GQA when < n_heads) */
    int head_dim;             /* n_embd / n_heads, or attention.key_length */
    int q_dim;                /* n_heads * head_dim: width of q and of attention's output */
    int n_widest;             /* the widest input row of any matrix (kern_pool_reserve) */
    int n_ff;                 /* feed-forward hidden width */
    int n_vocab;
    int n_ctx_train;          /* llama.context_length */
    int rope_dim;             /* dims rotated per head (<= head_dim) */
    float rope_freq_base;
    float rope_freq_scale;    /* 1 / linear scaling factor */
    float rms_eps;
    float q_scale;            /* queries times this before attention's 1 / sqrt(head_dim); 1 but for Gemma 3 27B */
    int sliding_window;       /* positions a sliding-window layer sees; 0 = none */
    float swa_rope_base;      /* RoPE base of sliding-window layers */
} gl_config;

/* True when layer l attends through a sliding window (arch.h swa_period). */
static inline bool model_layer_is_swa(const gl_config *c, int l) {
    return c->sliding_window > 0 && c->arch->swa_period > 0 && (l + 1) % c->arch->swa_period != 0;
}

typedef struct gl_layer_weights {
    gl_tensor attn_norm;      /* [n_embd] F32 */
    gl_tensor wq, wk, wv, wo; /* attention projections */
    gl_tensor bq, bk, bv;     /* [q_dim], [kv_dim] F32 biases (qkv_bias), else empty */
    gl_tensor q_norm, k_norm; /* [head_dim] F32 per-head norms (qk_norm), else empty */
    gl_tensor attn_post_norm; /* [n_embd] F32 (post_norms), else empty */
    gl_tensor ffn_norm;       /* [n_embd] F32 */
    gl_tensor ffn_post_norm;  /* [n_embd] F32 (post_norms), else empty */
    gl_tensor w_gate, w_up;   /* [n_ff x n_embd] */
    gl_tensor w_down;         /* [n_embd x n_ff] */
} gl_layer_weights;

typedef struct gl_weights {
    gl_tensor token_embd;     /* [n_vocab x n_embd] */
    gl_tensor output_norm;    /* [n_embd] F32 */
    gl_tensor output;         /* [n_vocab x n_embd]; token_embd when tied */
    gl_layer_weights *layers; /* [n_layers] */
} gl_weights;

struct gl_model {
    gguf_file *file;          /* owns the mapping the weights point into */
    gl_config config;
    gl_weights weights;
    void *packed;             /* every matrix's packed copy (kern_pack_into), or NULL */
    size_t packed_bytes;      /* its size (kern_note_weights) */
    gl_tokenizer *tokenizer;
    bool vocab_only;          /* a tokenizer-only GGUF: no forward pass */
    gl_model_info info;
    char *name;               /* storage behind info.name */
    char *arch;               /* storage behind info.arch */
    char *chat_template;      /* storage behind info.chat_template */
};

/* One step's tokens. Token i belongs to sequence seq_of_token[i] at position
 * positions[i]; its K/V go to block_tables[seq][pos / block_size]. Positions
 * of a sequence below a token's own must already be in the cache or earlier
 * in this batch. */
typedef struct gl_batch {
    int n_tokens;
    const int32_t *tokens;          /* [n_tokens] */
    const int32_t *positions;       /* [n_tokens] */
    const int32_t *seq_of_token;    /* [n_tokens] index into block_tables */
    const int32_t *const *block_tables; /* per sequence */
    int n_logits;                   /* rows of logits wanted */
    const int32_t *logit_tokens;    /* [n_logits] indices into the batch */
} gl_batch;

typedef struct gl_run_state gl_run_state;

/* Scratch for batches of up to max_tokens tokens attending to up to max_ctx
 * positions, with up to max_logits logit rows. */
gl_run_state *model_run_state_create(const gl_model *m, int max_tokens, int max_logits, gl_error *err);
void model_run_state_free(gl_run_state *rs);

/* logits: n_logits x n_vocab. Returns 0, or -1 with err set. */
int model_forward(const gl_model *m, gl_run_state *rs, kern_pool *pool, gl_kv_cache *kv,
                  const gl_batch *batch, float *logits, gl_error *err);

#endif
