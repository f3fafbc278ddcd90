/* kernels.h -- the compute layer under the model: a persistent thread pool,
 * matrix multiply over quantized weights, and the small vector ops.
 *
 * Every kernel computes each output element with a summation order that does
 * not depend on how many tokens share the call, so a sequence's logits are
 * the same whether it runs alone or in a batch (batch invariance). */
#ifndef GL_KERNELS_H
#define GL_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"

/* A weight matrix as stored in GGUF: n_rows rows of n_cols elements. */
typedef struct gl_tensor {
    uint32_t type;            /* gl_type id */
    int64_t n_cols;           /* ne[0]: the input dimension */
    int64_t n_rows;           /* ne[1]: the output dimension */
    const void *data;         /* row-major, in the file mapping */
    uint64_t n_bytes;
    void *packed;             /* the same rows rearranged by kern_pack, or NULL */
} gl_tensor;

typedef struct kern_pool kern_pool;

/* Start n_threads - 1 workers (the caller is thread 0). NULL on failure. */
kern_pool *kern_pool_create(int n_threads);
void kern_pool_free(kern_pool *p);
int kern_pool_size(const kern_pool *p);
/* Give every thread a scratch buffer of n_floats (>= the widest weight row)
 * once, so kernels never allocate. -1 on allocation failure. */
int kern_pool_reserve(kern_pool *p, size_t n_floats);
/* Run fn(arg, ith, nth) on the calling thread (ith 0) and on every worker
 * that wakes before the caller's fn returns; return when all have. fn must
 * share its work dynamically (take pieces from a counter until none are
 * left): a worker the OS schedules late skips the job rather than holding up
 * the caller, which matters when cores are oversubscribed. */
void kern_pool_run(kern_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* Activation precision of the pool's matmuls: 16 (the default: two 8-bit
 * parts per block, about 16-bit precision) or 8 (one 8-bit part per block,
 * as llama.cpp's Q8_0 activations: half the integer dots, at the cost of
 * ~4e-3 of each block's maximum in rounding). 8 bits reach the quantized
 * types (Q4_0 .. Q8_0, Q4_K, Q5_K, Q6_K) on x86, packed or not; float
 * weights keep floats. -1 (and no change) for other values. */
int kern_pool_set_act_bits(kern_pool *p, int bits);

/* Size the pool's buffer of quantized activations for calls of up to
 * max_tokens rows of up to max_cols; kern_matmul grows it on demand
 * otherwise (allocating once). -1 on allocation failure. */
int kern_pool_reserve_tokens(kern_pool *p, int max_tokens, int64_t max_cols);

/* out[t][r] = sum_c w[r][c] * x[t][c] for t < n_tokens, r < w->n_rows.
 * x is n_tokens x n_cols, out is n_tokens x n_rows (row stride n_rows).
 * The fast paths quantize x once per call into two 8-bit parts per block (a
 * coarse value and its rounding residual: about 16-bit precision) and use
 * integer dot products. */
void kern_matmul(kern_pool *p, const gl_tensor *w, const float *x, int n_tokens, float *out);
/* The same x through n matrices of as many columns (attention's Q, K and V;
 * the FFN's gate and up): outs[i] = ws[i] x, as n kern_matmul calls would
 * give bit for bit, with x quantized once and one hand-out of all the rows. */
void kern_matmul_n(kern_pool *p, int n, const gl_tensor *const *ws, const float *x, int n_tokens, float *const *outs);

/* Give w a copy of its rows in the layout the active kernels read best (only
 * some types, under some implementations, have one; see simd.h), which
 * kern_matmul then uses whatever the token count, so results stay batch
 * invariant. w->data stays valid for the other paths and row lookups. 0 also
 * when there is nothing to pack; -1 when the copy cannot be allocated (w is
 * left unpacked and still works). */
int kern_pack(gl_tensor *w);
/* Free what kern_pack allocated. */
void kern_unpack(gl_tensor *w);
/* kern_pack in two steps, so many matrices can share one allocation: the
 * bytes of w's packed copy (0 when it has none), then the copy made into
 * buf (that many bytes, 64-byte aligned, the caller's to free; w->packed
 * points into it, so do not kern_unpack w). */
size_t kern_pack_bytes(const gl_tensor *w);
void kern_pack_into(gl_tensor *w, void *buf);
/* Memory for weights, 64-byte aligned, in 2 MiB pages where the system
 * gives them (a stream of weights misses the TLB far less); free() it. */
void *kern_weights_alloc(size_t n);
/* A model's packed weight bytes, + at load and - at free: the decode
 * rows' prefetch asks for L1 as well once all models' weights outgrow
 * what the last-level cache keeps of them (a third of its size: on a
 * 480 MiB L3, 130 MiB of stories110M Q8_0 read from it, 235 MiB of
 * Gemma 3 270M from memory). */
void kern_note_weights(long long delta);

/* Kernel implementation: "scalar" (dequantize rows to float; the reference),
 * "avx2", "avx512", "amx" (avx512 with AMX tiles for prompts, the same bits;
 * GENLOOP_AMX=0 withholds it), or "auto" (the best the CPU runs, the default unless the
 * environment sets GENLOOP_KERNELS to one of these names). Not thread-safe
 * against running kernels. -1 when the CPU cannot run the one named. */
int kern_set_backend(const char *name);
const char *kern_backend(void);

/* Attention for a batch of tokens over one layer of the paged KV cache:
 * token t's query heads attend to positions 0..positions[t] of its sequence
 * with an online softmax (the last window of them when window > 0). Query
 * head h uses KV head h / (n_heads / n_kv_heads). */
typedef struct kern_attn {
    int n_tokens;
    int n_heads, n_kv_heads, head_dim;
    const float *q;           /* [n_tokens][n_heads * head_dim], roped */
    float *out;               /* [n_tokens][n_heads * head_dim] */
    const int32_t *positions; /* [n_tokens] */
    const int32_t *seq_of_token;          /* [n_tokens] */
    const int32_t *const *block_tables;   /* per sequence: cache block ids */
    const uint8_t *k;         /* this layer's K: [n_blocks][kv_dim][block_size] (channel-major) */
    const uint8_t *v;         /* this layer's V: [n_blocks][n_kv_heads][block_size][head_dim] */
    int block_size;           /* positions per cache block */
    int window;               /* > 0: token t sees only positions[t] - window + 1 .. positions[t] */
    gl_kv_type type;          /* K/V element type; Q8_0 blocks carry scales (kern_kv_q8_scales) */
    int q8_chunk;             /* Q8_0: channels of a head per scale; head_dim is a multiple */
} kern_attn;

/* Q8_0 K (or V) of one cache block: kv_dim * block_size int8 codes laid
 * out as F16's values, then at this offset (even, so the fp16 scales are
 * aligned) the scales: K [kv_dim / q8_chunk][block_size], V
 * [n_kv_heads][block_size][head_dim / q8_chunk]. */
static inline size_t kern_kv_q8_scales(int kv_dim, int block_size) {
    return ((size_t)kv_dim * (size_t)block_size + 1) & ~(size_t)1;
}

/* -1 only when a per-thread buffer cannot be allocated. */
int kern_attention(kern_pool *p, const kern_attn *a);

/* One row of a weight matrix as floats (embedding lookup). */
void kern_get_row(const gl_tensor *w, int64_t row, float *out);

void kern_rmsnorm(float *out, const float *x, const float *weight, int n, float eps);
/* RoPE in two steps, so a token's queries and keys share one set of
 * angles: cs[2i], cs[2i + 1] = cos, sin of freq_scale * pos * inv_freq[i]
 * (inv_freq[i] = freq_base^(-2i / rope_dim), kern_rope_freqs) for
 * i < rope_dim / 2; then each head's pairs (x[2i], x[2i + 1]) rotate by them. */
void kern_rope_freqs(float *inv_freq, int rope_dim, float freq_base);
void kern_rope_angles(float *cs, int rope_dim, int pos, const float *inv_freq, float freq_scale);
void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs);
/* The same rotation of (x[i], x[i + rope_dim / 2]) pairs: "NEOX" RoPE, for
 * architectures whose GGUF keeps Hugging Face's Q/K row order (rotate_half). */
void kern_rope_neox(float *x, int n_heads, int head_dim, int rope_dim, const float *cs);
float kern_dot(const float *a, const float *b, int n);
void kern_softmax(float *x, int n);
/* y[i] = x[i] as IEEE half (round to nearest even), as gl_fp32_to_fp16. */
void kern_to_f16(const float *x, uint16_t *y, int n);
/* gate = silu(gate) * up, elementwise, shared over the pool when long. */
void kern_swiglu(kern_pool *p, float *gate, const float *up, int n);
/* gate = gelu_tanh(gate) * up, the same way. */
void kern_geglu(kern_pool *p, float *gate, const float *up, int n);

#endif
