/* attend_body.h -- attention over the paged KV cache, written once and
 * compiled per implementation: kernels.c (the scalar reference) and
 * simd_impl.h (each instruction set) define ATTEND_NAME and five vector
 * helpers, then include this file:
 *   ATTEND_ROW(src, dst, n, f16)   n cache values (F16 or F32) to floats
 *   ATTEND_ROW_Q8(src, sc, per, dst, n)  n Q8_0 codes to floats: code i times
 *                                  fp16 scale sc[i / per]
 *   ATTEND_AXPY(y, a, x, n)        y += a * x
 *   ATTEND_SCALE(y, a, n)          y *= a
 *   ATTEND_EXP_SUM(y, n, m)        y = exp(y - m), returning the sum of the new y
 * The query heads of a GQA group (or part of one) of several consecutive
 * tokens share each K/V value they read. Positions go in segments
 * (kern_attend_segment), each in three passes: every block's scores for all
 * rows, then each row's softmax over the whole segment at once (one
 * maximum, no rescaling block by block), then every block's V rows weighted
 * into the outputs. K is channel-major in a block, so a block's scores
 * build up one channel at a time as n-wide multiply-adds, like the V rows
 * after them. scratch holds kern_attend_scratch(nt * nh, head_dim,
 * block_size) floats. */
#ifndef GL_ATTEND_BODY_H
#define GL_ATTEND_BODY_H

#define ATTEND_CAT2(a, b) a##_##b
#define ATTEND_CAT(a, b) ATTEND_CAT2(a, b)
#define ATTEND_BLOCK_SCORES ATTEND_CAT(ATTEND_NAME, generic_scores)
#define ATTEND_BLOCK_PV ATTEND_CAT(ATTEND_NAME, generic_pv)

/* The generic block steps, from the helpers (NAME_generic_scores and
 * NAME_generic_pv); an implementation may define its own ATTEND_SCORES /
 * ATTEND_PV (same arguments) before including, and fall back to these. A
 * "row" is one query head of one token; all rows of a call share the block.
 * Row g's scores are ss floats after row g - 1's.
 *   scores: score[g * ss + j] = sum_d q[g][d] * K[d][j] for j < n, K channel d at k + d * k_stride
 *           (Q8_0: its scales at ks + (d / qc) * bs)
 *   pv:     out[g][i] += sum_{j < n[g]} score[g * ss + j] * V_j[i], V_j at v + j * v_stride
 *           (Q8_0: its scales at vs + j * (hd / qc)) */
static void ATTEND_BLOCK_SCORES(const uint8_t *k, const uint16_t *ks, size_t k_stride, const float *const *q, int nr,
                                int hd, int n, gl_kv_type type, int qc, float *score, int ss, int bs, float *row) {
    for (int g = 0; g < nr; g++) memset(score + (size_t)g * ss, 0, (size_t)n * sizeof *score);
    for (int d = 0; d < hd; d++) {
        if (type == GL_KV_Q8_0) ATTEND_ROW_Q8(k + (size_t)d * k_stride, ks + (size_t)(d / qc) * bs, 1, row, n);
        else ATTEND_ROW(k + (size_t)d * k_stride, row, n, type == GL_KV_F16);
        for (int g = 0; g < nr; g++) ATTEND_AXPY(score + (size_t)g * ss, q[g][d], row, n);
    }
}
#ifndef ATTEND_SCORES
#define ATTEND_SCORES ATTEND_BLOCK_SCORES
#endif

static void ATTEND_BLOCK_PV(const uint8_t *v, const uint16_t *vs, size_t v_stride, const float *score, int ss, int nr,
                            const int *n, int hd, gl_kv_type type, int qc, float *const *out, float *row) {
    for (int j = 0; j < n[nr - 1]; j++) {
        if (type == GL_KV_Q8_0) ATTEND_ROW_Q8(v + (size_t)j * v_stride, vs + (size_t)j * (hd / qc), qc, row, hd);
        else ATTEND_ROW(v + (size_t)j * v_stride, row, hd, type == GL_KV_F16);
        for (int g = 0; g < nr; g++)
            if (j < n[g]) ATTEND_AXPY(out[g], score[(size_t)g * ss + j], row, hd);
    }
}
#ifndef ATTEND_PV
#define ATTEND_PV ATTEND_BLOCK_PV
#endif

/* One row's scores of a segment, positions b0..b1-1 of it (those before
 * the row's window are -inf): scale them, then exp(s - max) in place; the
 * maximum and the sum of the exps out. An implementation may define its own
 * ATTEND_SOFTMAX (same arguments). */
#ifndef ATTEND_SOFTMAX
static void ATTEND_CAT(ATTEND_NAME, generic_softmax)(float *s, int b0, int b1, float scale, float *mx, float *sum) {
    ATTEND_SCALE(s + b0, scale, b1 - b0);
    float m = s[b0];
    for (int j = b0 + 1; j < b1; j++) m = s[j] > m ? s[j] : m;
    *mx = m;
    *sum = ATTEND_EXP_SUM(s + b0, b1 - b0, m);
}
#define ATTEND_SOFTMAX ATTEND_CAT(ATTEND_NAME, generic_softmax)
#endif

/* Tokens t0..t0+nt-1 (one sequence, consecutive positions) x query heads
 * h0..h0+nh-1 (one KV group): nt * nh rows, each reading the blocks up to its
 * own position. Rows go in token order, so the rows still reading a block
 * are always the last ones. Every row sees the same operations whatever
 * the other rows of the call (its softmax spans its own positions of the
 * segment), so tiling tokens never changes a result. Each segment has a
 * softmax of its own, merged in order by kern_attend_merge: seg < 0 runs
 * them all and writes the result; seg >= 0 runs only that one and writes
 * each row's part (kern_attend_merge's form) to part, so a caller can
 * spread one token's segments over threads and get the same result. */
static void ATTEND_NAME(const kern_attn *a, int t0, int nt, int h0, int nh, int seg, float *part, float *scratch) {
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, bs = a->block_size, nr = nt * nh;
    int kv_dim = a->n_kv_heads * hd, seg_len = kern_attend_segment(bs), ss = kern_attend_score_stride(bs);
    bool q8 = a->type == GL_KV_Q8_0;
    int qc = q8 ? a->q8_chunk : 1;
    size_t es = a->type == GL_KV_F32 ? 4 : q8 ? 1 : 2, tok_stride = (size_t)a->n_heads * hd;
    /* Q8_0 scales follow a block's codes; sc_bytes of them are this group's */
    size_t sc_at = q8 ? kern_kv_q8_scales(kv_dim, bs) : 0, sc_bytes = q8 ? 2 * (size_t)(hd / qc) * (size_t)bs : 0;
    size_t block_bytes = q8 ? sc_at + 2 * (size_t)(kv_dim / qc) * (size_t)bs : (size_t)kv_dim * (size_t)bs * es;
    size_t channel0 = (size_t)(h0 / group) * (size_t)hd; /* this group's first K/V channel */
    const int32_t *table = a->block_tables[a->seq_of_token[t0]];
    /* this group's K and V in cache block 0; block b is b * block_bytes on */
    const uint8_t *k0 = a->k + channel0 * (size_t)bs * es, *v0 = a->v + channel0 * (size_t)bs * es;
    const uint8_t *ks0 = a->k + sc_at + (size_t)(h0 / group) * sc_bytes, *vs0 = a->v + sc_at + (size_t)(h0 / group) * sc_bytes;
    const float *q[KERN_ATTEND_MAX_ROWS];
    float *out[KERN_ATTEND_MAX_ROWS], *seg_out[KERN_ATTEND_MAX_ROWS];
    int pos[KERN_ATTEND_MAX_ROWS], n[KERN_ATTEND_MAX_ROWS], lo[KERN_ATTEND_MAX_ROWS];
    /* scratch: row; [nr][ss] scores; [nr][hd] the outputs so far and [nr][hd] a later segment's; [nr] maxima and
     * sums of the segment and of those before. The outputs build up here and go to a->out (or part) once at the
     * end: the threads' rows share cache lines there (a head's 64 floats need not start one), and adding
     * into them block by block had the two threads of a prompt wait on each other's lines. */
    float *row = scratch, *score = row + kern_attend_row_floats(hd, bs), *acc = score + (size_t)nr * ss;
    float *later = acc + (size_t)nr * hd, *mx = later + (size_t)nr * hd, *sum = mx + nr, *run_mx = sum + nr;
    float *run_sum = run_mx + nr;
    float scale = 1.0f / sqrtf((float)hd);
    for (int r = 0; r < nr; r++) {
        int t = t0 + r / nh;
        q[r] = a->q + (size_t)t * tok_stride + (size_t)(h0 + r % nh) * hd;
        out[r] = acc + (size_t)r * hd;
        pos[r] = a->positions[t];
        lo[r] = a->window > 0 && pos[r] >= a->window ? pos[r] - a->window + 1 : 0; /* first visible position */
    }
    int last = pos[nr - 1], s_first = seg < 0 ? 0 : seg, s_last = seg < 0 ? last / seg_len : seg;
    for (int sg = s_first; sg <= s_last; sg++) {
        int p_begin = sg * seg_len, p_end = p_begin + seg_len - 1 < last ? p_begin + seg_len - 1 : last;
        for (int r = 0; r < nr; r++) {
            seg_out[r] = sg == s_first ? out[r] : later + (size_t)r * hd;
            memset(seg_out[r], 0, (size_t)hd * sizeof *seg_out[r]);
        }
        /* A sliding window: blocks before every row's window are skipped;
         * rows r0..r1-1 read a block (positions and windows rise with r). */
        int p_first = lo[0] / bs * bs > p_begin ? lo[0] / bs * bs : p_begin;
        for (int pass = 0; pass < 2; pass++) {
            for (int p0 = p_first, r0 = 0, r1 = 0; p0 <= p_end; p0 += bs) {
                while (pos[r0] < p0) r0++; /* rows r0.. still read this block */
                while (r1 < nr && lo[r1] < p0 + bs) r1++; /* rows ..r1-1 have begun their window */
                if (r0 >= r1) continue;
                for (int r = r0; r < r1; r++) n[r] = pos[r] + 1 - p0 < bs ? pos[r] + 1 - p0 : bs;
                size_t at = (size_t)table[p0 / bs] * block_bytes;
                /* The next block is anywhere in the pool, so no hardware
                 * prefetcher guesses it: ask for its K and V while this
                 * block's scores run (the segment's V stays in L2 for the
                 * weighting pass; asking for V only then, at the same
                 * distance, was slower on a decode step reading its
                 * cache from memory). Into L2, not L1: the 64 lines of a
                 * block hold L1's few miss buffers, and the requests past
                 * them are as good as dropped (into L1 was no better than no
                 * prefetch; two or three blocks ahead no better than one). */
                if (pass == 0 && p0 + bs <= p_end) {
                    size_t next = (size_t)table[p0 / bs + 1] * block_bytes;
                    for (size_t off = 0; off < (size_t)hd * (size_t)bs * es; off += 64) {
                        __builtin_prefetch(k0 + next + off, 0, 2);
                        __builtin_prefetch(v0 + next + off, 0, 2);
                    }
                    for (size_t off = 0; off < sc_bytes; off += 64) {
                        __builtin_prefetch(ks0 + next + off, 0, 2);
                        __builtin_prefetch(vs0 + next + off, 0, 2);
                    }
                }
                float *sb = score + (size_t)r0 * ss + (p0 - p_begin);
                if (pass == 0) {
                    ATTEND_SCORES(k0 + at, (const uint16_t *)(ks0 + at), (size_t)bs * es, q + r0, r1 - r0, hd,
                                  n[r1 - 1], a->type, qc, sb, ss, bs, row);
                    /* Positions before a row's window score -inf: exp gives
                     * them exactly 0, so they add nothing to the sum or the output. */
                    for (int r = r0; r < r1; r++)
                        for (int j = 0; j < lo[r] - p0; j++) score[(size_t)r * ss + (p0 - p_begin) + j] = -INFINITY;
                } else {
                    ATTEND_PV(v0 + at, (const uint16_t *)(vs0 + at), (size_t)hd * es, sb, ss, r1 - r0, n + r0, hd,
                              a->type, qc, seg_out + r0, row);
                }
            }
            if (pass > 0) break;
            /* Each row's positions of the segment: from its first block read to its own position. */
            for (int r = 0; r < nr; r++) {
                int b0 = lo[r] / bs * bs > p_begin ? lo[r] / bs * bs : p_begin, b1 = pos[r] < p_end ? pos[r] : p_end;
                mx[r] = -INFINITY;
                sum[r] = 0;
                if (b0 <= b1) ATTEND_SOFTMAX(score + (size_t)r * ss, b0 - p_begin, b1 + 1 - p_begin, scale, &mx[r], &sum[r]);
            }
        }
        for (int r = 0; r < nr; r++) {
            if (sg == s_first) run_mx[r] = mx[r], run_sum[r] = sum[r];
            else kern_attend_merge(out[r], &run_mx[r], &run_sum[r], seg_out[r], mx[r], sum[r], hd);
        }
    }
    for (int r = 0; r < nr; r++) {
        int t = t0 + r / nh;
        if (!part) {
            float *dst = a->out + (size_t)t * tok_stride + (size_t)(h0 + r % nh) * hd, inv = 1.0f / run_sum[r];
            for (int i = 0; i < hd; i++) dst[i] = out[r][i] * inv;
        } else {
            float *dst = part + (size_t)r * (hd + 2);
            memcpy(dst, out[r], (size_t)hd * sizeof *dst);
            dst[hd] = run_mx[r];
            dst[hd + 1] = run_sum[r];
        }
    }
}

#undef ATTEND_NAME
#undef ATTEND_ROW
#undef ATTEND_ROW_Q8
#undef ATTEND_EXP_SUM
#undef ATTEND_SCORES
#undef ATTEND_PV
#undef ATTEND_SOFTMAX
#undef ATTEND_BLOCK_SCORES
#undef ATTEND_BLOCK_PV
#undef ATTEND_CAT
#undef ATTEND_CAT2
#undef ATTEND_AXPY
#undef ATTEND_SCALE

#endif
