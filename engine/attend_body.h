/* attend_body.h -- one token's attention over the paged KV cache, written
 * once and compiled per implementation: kernels.c (the scalar reference) and
 * simd_body.h (each instruction set) define ATTEND_NAME and four vector
 * helpers, then include this file:
 *   ATTEND_ROW(src, dst, n, f16)   n cache values (F16 or F32) to floats
 *   ATTEND_AXPY(y, a, x, n)        y += a * x
 *   ATTEND_SCALE(y, a, n)          y *= a
 *   ATTEND_EXP_SUM(y, n, m)        y = exp(y - m), returning the sum of the new y
 * Block by block with an online softmax; the nh query heads from h0 share
 * each K/V value they read (one GQA group, or part of one). K is
 * channel-major in a block, so a block's scores build up one channel at a
 * time as n-wide multiply-adds, like the V rows after them. scratch holds
 * kern_attend_scratch(nh, head_dim, block_size) floats. */

#define ATTEND_CAT2(a, b) a##_##b
#define ATTEND_CAT(a, b) ATTEND_CAT2(a, b)
#define ATTEND_BLOCK_SCORES ATTEND_CAT(ATTEND_NAME, generic_scores)
#define ATTEND_BLOCK_PV ATTEND_CAT(ATTEND_NAME, generic_pv)

/* The generic block steps, from the four helpers (NAME_generic_scores and
 * NAME_generic_pv); an implementation may define its own ATTEND_SCORES /
 * ATTEND_PV (same arguments) before including, and fall back to these.
 *   scores: score[g * bs + j] = sum_d q[g * hd + d] * K[d][j], K channel d at k + d * k_stride
 *   pv:     out[g * hd + i] += sum_j score[g * bs + j] * V_j[i], V_j at v + j * v_stride */
static void ATTEND_BLOCK_SCORES(const uint8_t *k, size_t k_stride, const float *q, int nh, int hd, int n, bool f16, float *score, int bs, float *row) {
    for (int g = 0; g < nh; g++) memset(score + g * bs, 0, (size_t)n * sizeof *score);
    for (int d = 0; d < hd; d++) {
        ATTEND_ROW(k + (size_t)d * k_stride, row, n, f16);
        for (int g = 0; g < nh; g++) ATTEND_AXPY(score + g * bs, q[(size_t)g * hd + d], row, n);
    }
}
#ifndef ATTEND_SCORES
#define ATTEND_SCORES ATTEND_BLOCK_SCORES
#endif

static void ATTEND_BLOCK_PV(const uint8_t *v, size_t v_stride, const float *score, int nh, int hd, int n, bool f16, float *out, int bs, float *row) {
    for (int j = 0; j < n; j++) {
        ATTEND_ROW(v + (size_t)j * v_stride, row, hd, f16);
        for (int g = 0; g < nh; g++) ATTEND_AXPY(out + (size_t)g * hd, score[g * bs + j], row, hd);
    }
}
#ifndef ATTEND_PV
#define ATTEND_PV ATTEND_BLOCK_PV
#endif

static void ATTEND_NAME(const kern_attn *a, int t, int h0, int nh, float *scratch) {
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = a->block_size;
    int kv_dim = a->n_kv_heads * hd, pos = a->positions[t];
    size_t es = a->f16 ? 2 : 4, block_bytes = (size_t)kv_dim * (size_t)bs * es;
    size_t channel0 = (size_t)(h0 / group) * (size_t)hd; /* this group's first K/V channel */
    const int32_t *table = a->block_tables[a->seq_of_token[t]];
    const float *q = a->q + (size_t)t * (size_t)a->n_heads * hd + (size_t)h0 * hd;
    float *out = a->out + (size_t)t * (size_t)a->n_heads * hd + (size_t)h0 * hd;
    float *row = scratch, *mx = row + (hd > bs ? hd : bs), *sum = mx + nh, *score = sum + nh; /* score: [nh][bs] */
    float scale = 1.0f / sqrtf((float)hd);
    for (int g = 0; g < nh; g++) {
        mx[g] = -INFINITY;
        sum[g] = 0;
        memset(out + (size_t)g * hd, 0, (size_t)hd * sizeof *out);
    }
    for (int p0 = 0; p0 <= pos; p0 += bs) {
        int n = pos + 1 - p0 < bs ? pos + 1 - p0 : bs;
        const uint8_t *k = a->k + (size_t)table[p0 / bs] * block_bytes + channel0 * (size_t)bs * es;
        const uint8_t *v = a->v + (size_t)table[p0 / bs] * block_bytes + channel0 * es;
        ATTEND_SCORES(k, (size_t)bs * es, q, nh, hd, n, a->f16, score, bs, row);
        for (int g = 0; g < nh; g++) {
            float *sg = score + g * bs;
            ATTEND_SCALE(sg, scale, n);
            float m = sg[0];
            for (int j = 1; j < n; j++) m = sg[j] > m ? sg[j] : m;
            if (m > mx[g]) { /* online softmax: rescale what came before */
                float r = expf(mx[g] - m);
                sum[g] *= r;
                ATTEND_SCALE(out + (size_t)g * hd, r, hd);
                mx[g] = m;
            }
            sum[g] += ATTEND_EXP_SUM(sg, n, mx[g]);
        }
        ATTEND_PV(v, (size_t)kv_dim * es, score, nh, hd, n, a->f16, out, bs, row);
    }
    for (int g = 0; g < nh; g++) ATTEND_SCALE(out + (size_t)g * hd, 1.0f / sum[g], hd);
}

#undef ATTEND_NAME
#undef ATTEND_ROW
#undef ATTEND_EXP_SUM
#undef ATTEND_SCORES
#undef ATTEND_PV
#undef ATTEND_BLOCK_SCORES
#undef ATTEND_BLOCK_PV
#undef ATTEND_CAT
#undef ATTEND_CAT2
#undef ATTEND_AXPY
#undef ATTEND_SCALE
