/* attend_body.h -- one token's attention over the paged KV cache, written
 * once and compiled per implementation: kernels.c (the scalar reference) and
 * simd_body.h (each instruction set) define ATTEND_NAME and four vector
 * helpers, then include this file:
 *   ATTEND_ROW(src, dst, n, f16)  a cache row (F16 or F32) to floats
 *   ATTEND_DOT(a, b, n)           dot product
 *   ATTEND_AXPY(y, a, x, n)       y += a * x
 *   ATTEND_SCALE(y, a, n)         y *= a
 * Block by block with an online softmax; the nh query heads from h0 share
 * each K/V row they read (one GQA group, or part of one). scratch holds
 * kern_attend_scratch(nh, head_dim, block_size) floats. */

static void ATTEND_NAME(const kern_attn *a, int t, int h0, int nh, float *scratch) {
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = a->block_size;
    int kv_dim = a->n_kv_heads * hd, pos = a->positions[t];
    size_t es = a->f16 ? 2 : 4, row_bytes = (size_t)kv_dim * es;
    size_t head_off = (size_t)(h0 / group) * (size_t)hd * es;
    const int32_t *table = a->block_tables[a->seq_of_token[t]];
    const float *q = a->q + (size_t)t * (size_t)a->n_heads * hd + (size_t)h0 * hd;
    float *out = a->out + (size_t)t * (size_t)a->n_heads * hd + (size_t)h0 * hd;
    float *row = scratch, *mx = row + hd, *sum = mx + nh, *score = sum + nh; /* score: [nh][bs] */
    float scale = 1.0f / sqrtf((float)hd);
    for (int g = 0; g < nh; g++) {
        mx[g] = -INFINITY;
        sum[g] = 0;
        memset(out + (size_t)g * hd, 0, (size_t)hd * sizeof *out);
    }
    for (int p0 = 0; p0 <= pos; p0 += bs) {
        int n = pos + 1 - p0 < bs ? pos + 1 - p0 : bs;
        size_t base = (size_t)table[p0 / bs] * (size_t)bs * row_bytes + head_off;
        for (int j = 0; j < n; j++) {
            ATTEND_ROW(a->k + base + (size_t)j * row_bytes, row, hd, a->f16);
            for (int g = 0; g < nh; g++) score[g * bs + j] = ATTEND_DOT(q + (size_t)g * hd, row, hd) * scale;
        }
        for (int g = 0; g < nh; g++) {
            float *sg = score + g * bs, m = sg[0];
            for (int j = 1; j < n; j++) m = sg[j] > m ? sg[j] : m;
            if (m > mx[g]) { /* online softmax: rescale what came before */
                float r = expf(mx[g] - m);
                sum[g] *= r;
                ATTEND_SCALE(out + (size_t)g * hd, r, hd);
                mx[g] = m;
            }
            for (int j = 0; j < n; j++) {
                sg[j] = expf(sg[j] - mx[g]);
                sum[g] += sg[j];
            }
        }
        for (int j = 0; j < n; j++) {
            ATTEND_ROW(a->v + base + (size_t)j * row_bytes, row, hd, a->f16);
            for (int g = 0; g < nh; g++) ATTEND_AXPY(out + (size_t)g * hd, score[g * bs + j], row, hd);
        }
    }
    for (int g = 0; g < nh; g++) ATTEND_SCALE(out + (size_t)g * hd, 1.0f / sum[g], hd);
}

#undef ATTEND_NAME
#undef ATTEND_ROW
#undef ATTEND_DOT
#undef ATTEND_AXPY
#undef ATTEND_SCALE
