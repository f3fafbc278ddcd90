/* kernels.h -- the compute layer under the model: a persistent thread pool,
 * matrix multiply over quantized weights, and the small vector ops.
 *
 * Every kernel computes each output element with a summation order that does
 * not depend on how many tokens share the call, so a sequence's logits are
 * the same whether it runs alone or in a batch (batch invariance). */
#ifndef GL_KERNELS_H
#define GL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix as stored in GGUF: n_rows rows of n_cols elements. */
typedef struct gl_tensor {
    uint32_t type;            /* gl_type id */
    int64_t n_cols;           /* ne[0]: the input dimension */
    int64_t n_rows;           /* ne[1]: the output dimension */
    const void *data;         /* row-major, in the file mapping */
    uint64_t n_bytes;
} gl_tensor;

typedef struct kern_pool kern_pool;

/* Start n_threads - 1 workers (the caller is thread 0). NULL on failure. */
kern_pool *kern_pool_new(int n_threads);
void kern_pool_free(kern_pool *p);
int kern_pool_size(const kern_pool *p);
/* Give every thread a scratch buffer of n_floats (>= the widest weight row)
 * once, so kernels never allocate. -1 on allocation failure. */
int kern_pool_reserve(kern_pool *p, size_t n_floats);
/* Run fn(arg, ith, nth) on every thread and wait for all of them. */
void kern_pool_run(kern_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg);

/* out[t][r] = sum_c w[r][c] * x[t][c] for t < n_tokens, r < w->n_rows.
 * x is n_tokens x n_cols, out is n_tokens x n_rows (row stride n_rows). */
void kern_matmul(kern_pool *p, const gl_tensor *w, const float *x, int n_tokens, float *out);

/* One row of a weight matrix as floats (embedding lookup). */
void kern_get_row(const gl_tensor *w, int64_t row, float *out);

void kern_rmsnorm(float *out, const float *x, const float *weight, int n, float eps);
/* Rotate adjacent pairs (x[2i], x[2i+1]) of each of n_heads heads by
 * pos * theta_scale^i, for the first rope_dim dims of each head. */
void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, float freq_scale);
float kern_dot(const float *a, const float *b, int n);
void kern_softmax(float *x, int n);
void kern_swiglu(float *gate, const float *up, int n); /* gate = silu(gate) * up */

#endif
