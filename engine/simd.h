/* simd.h -- the private contract between kernels.c and its per-instruction-
 * set implementations (kernels_avx2.c and the kernels_avx512*.c units, both
 * built from simd_body.h and simd_impl.h, the second with simd_avx512.h;
 * kernels_avx512.h lists its units). Not part of the engine's API; tests include it to compare
 * every implementation with the scalar reference.
 *
 * Quantized weights are multiplied with activations quantized once per
 * matmul into two 8-bit parts, x ~ unit * (256 * q + q2): q is the usual
 * 8-bit quantization (scale 256 * unit = max|x| / 127) and q2 the rounding
 * left over, at 1/256 of the step. Both parts go through the same 8-bit
 * integer dot instructions, so the error is that of 16-bit activations
 * (~4e-6 of the block maximum, against ~4e-3 for 8 bits alone, which moves
 * SmolLM2's logits by 3% of their range). Blocks of 32 (kq8_32) serve the
 * legacy types, blocks of 256 with sums of 16 (kq8_256) the K-quants. The
 * integer sums are exact; the activation rounding is the only error. A pool
 * may ask for 8 bits instead (kern_pool_set_act_bits): packed Q4_0, Q4_1,
 * Q5_0, Q5_1 and Q8_0 then take the coarse part alone (kq8_chunk below),
 * packed K-quants likewise (kq8_k), and weights
 * with no packed tiles take kq8_32 / kq8_256 rows whose residuals are zero
 * (the *_COARSE kinds) through rows_x8, which skip the residual's dots.
 *
 * At 12 bits (kern_pool_set_act_bits 12) Q4_0 and Q4_1 weights take
 * activations in the 16-bit forms whose residual is coarser, q2 = 16 r with
 * r = round(16 (x - d q) / d) in [-7, 7] (KQ_RES12; the *_Q12_* kinds), so
 * x ~ unit * 16 * (16 q + r) and every 16-bit dot takes them as they are.
 * That lets their AMX tiles take a block in one K = 64 multiply, A =
 * [16 w | w] against B = [q | r] (KERN_ACT_AMX_X12, simd_amx.h), 16 times
 * the 16-bit dot exactly, where 16 bits take two; the other types, whose
 * 16 w does not fit a byte or whose tiles are others, stay at 16 bits. */
#ifndef GL_SIMD_H
#define GL_SIMD_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "quant.h"

/* kern_note_weights: the packed weights stream from memory (decode's prefetch) */
extern _Atomic bool kern_weights_stream;

/* Residual steps per coarse step: 16-bit activations, 12-bit ones. */
#define KQ_RES16 256
#define KQ_RES12 16
/* res of an activation precision (8 takes the coarse part alone: either) */
static inline int kq_res_of_bits(int bits) { return bits == 12 ? KQ_RES12 : KQ_RES16; }
/* The residual code's bound, and its shift into q2 (q2 = r << shift). */
static inline int kq_res_max(int res) { return res == KQ_RES16 ? 127 : 7; }
static inline int kq_res_shift(int res) { return res == KQ_RES16 ? 0 : 4; }

typedef struct kq8_32 {
    float d;                  /* unit: x ~ d * (256 * q + q2) */
    float s;                  /* d * sum(256 * q + q2), for the weights' offset terms */
    int8_t q[32];             /* coarse part, |q| <= 127 */
    int8_t q2[32];            /* residual, |q2| <= 127 */
} kq8_32;

typedef struct kq8_256 {
    float d;                  /* unit, as kq8_32 */
    int32_t bsums[16];        /* sum of 256 * q + q2 over each 16 consecutive */
    int8_t q[256];
    int8_t q2[256];
} kq8_256;

/* ---- the packed form (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; K-quants below; AVX-512) -----
 * kern_pack rearranges a weight row chunk by chunk: a chunk is up to 16
 * consecutive blocks (m of them; only a row's last chunk has fewer), stored
 * as their m scales (F16), then for Q4_1 and Q5_1 their m minimums, for Q5
 * their fifth bits (4 bytes a block: bit p of byte b is element 4 p + b's,
 * bit 4 + p element 16 + 4 p + b's, so both activation widths take them with
 * whole-vector shifts), then the quants
 * interleaved across the blocks: group g holds, for block j = 0..m-1, the
 * two bytes that carry elements 2g, 2g+1 (Q8_0, 16 groups) or, in their low
 * and high nibbles, elements 2g, 2g+1 and 16+2g, 16+2g+1 (Q4, 8 groups); but
 * a short tail (below) of 2 or 4 blocks, after its scales, holds Q5's fifth
 * bits and the quants in the tail's lane order (pack_tail_lanes). A row
 * keeps its size. The activations come in the matching kq16_chunk, with
 * 256 q + q2 as one 16-bit number, so one 16-bit multiply-add instruction
 * puts block j's partial dot in lane j: a chunk's 16 dots finish in 16
 * lanes with no horizontal sums, and each scale is applied once per block. */
/* A last chunk of at most this many blocks (a "short tail") would leave
 * most lanes idle in the chunk layouts: its activations come instead as a
 * kq16_tail or kq8_tail (below). */
#define KQ_SHORT_TAIL 4
/* A last chunk of more blocks than that but at most this many (a "half
 * tail", 8 of the 24 blocks of a 768 row) fills half a vector, so two rows
 * share one: row r's blocks in lanes 0..m-1, row r+1's in lanes 8..8+m-1.
 * Its activations repeat lane j's pairs in lane 8 + j to match. */
#define KQ16_HALF_TAIL 8

typedef struct kq16_chunk {
    int16_t q[16][32];        /* [v][2j + e]: element 2v + e of block j, 256 q + q2; 0 past the row */
    float d[16];              /* unit of block j, 0 past the row */
    float s[16];              /* d * sum of block j */
    int32_t off[16];          /* -8 times the sum of block j's 256 q + q2 (a half tail's repeated in lane 8 + j,
                                 as q): Q4_0's offset (Q5_0's twice it) goes into the dot in integer, not through s */
} kq16_chunk;

static inline int64_t kq16_chunks(int64_t n_cols) { return (n_cols / 32 + 15) / 16; }

/* Activations for packed Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 at 8 bits (kern_pool_set_act_bits):
 * only the coarse q of each block, four elements of block j in lane j, so
 * vpdpbusd does twice the multiply-adds of vpdpwssd. A weight vector gets
 * the same lanes from two groups of the packed layout by one word permute:
 * block j's bytes of groups g and g + 1, that is elements 2g..2g+3 (Q8_0;
 * its signed bytes offset by 128 to be unsigned, taken back through off), or
 * in their low nibbles elements 2g..2g+3 and in their high ones 16+2g..
 * 16+2g+3 (Q4). A row's chunks come in this form, a last one of m < 16
 * blocks with zeros past the row (its groups are 2m bytes apart, so the
 * permute differs), but a short tail, which comes as a kq8_tail. */
typedef struct kq8_chunk {
    int8_t q[8][64];          /* [v][4j + e]: element 4v + e of block j */
    float d[16];              /* unit of block j: x ~ d * q */
    float s[16];              /* d * sum of block j's q */
    int32_t off[16];          /* -8 times the sum of block j's q: Q4_0's offset (Q5_0's twice it, Q8_0's +128
                                 16 times it) goes into the dot in integer, as kq16_chunk's */
} kq8_chunk;

/* A short tail's activations, at 8 bits (kq8_tail) or 16 (kq16_tail, in
 * place of the row's last kq16_chunk): vector v, lane L holds four elements
 * of block L % M (M = kq_tail_stride(m): 2 for m <= 2, else 4), in the
 * order kq_tail_lane gives -- lanes 0..7 low halves (elements < 16, Q4's
 * low nibbles), lanes 8..15 the same bytes' high halves. One word permute
 * of the packed pairs gives a row's weights in those lanes, vpdpbusd dots
 * the lanes (twice at 16 bits: the coarse part's sum shifted up 8 bits,
 * then the residual's added, exactly 256 q + q2), and the lanes of a block
 * add up in integer (lane L + 8, + 4, and for M = 2 + 2): block j's exact
 * dot in lane j, where a chunk has it. Its float steps are then a chunk's
 * block j's, once per block, so on AMX the tail blocks are ordinary ones. */
typedef struct kq8_tail {
    int8_t q[2][64];          /* [v][4L + e]: element e0 + e of block j, by kq_tail_lane; 0 in empty lanes */
    float d[16];              /* unit of block j (x ~ d * q), 0 past the row */
    float s[16];              /* d * sum of block j's q, 0 past the row */
    int32_t off[16];          /* lane L: -128 times the sum of its q over both vectors, as kq16_tail's */
} kq8_tail;

typedef struct kq16_tail {
    int8_t q[2][64];          /* coarse parts, as kq8_tail */
    int8_t q2[2][64];         /* residuals, in the same places */
    float d[16];              /* unit of block j: x ~ d * (256 q + q2) */
    float s[16];              /* d * sum of block j's 256 q + q2 */
    int32_t off[16];          /* lane L: -128 times the sum of its 256 q + q2 over both vectors: Q8_0's
                                 bytes take +128 for vpdpbusd, this takes it back in integer */
} kq16_tail;

/* Lanes between a short tail's blocks (M above), and its vectors. */
static inline int kq_tail_stride(int m) { return m <= 2 ? 2 : 4; }
static inline int kq_tail_vectors(int m) { return m <= 2 ? 1 : 2; }

/* Which four elements lane L of vector v of an m-block short tail holds:
 * block j = L % M, elements e0..e0+3 (lanes 8..15 the high halves, e0 >=
 * 16, of lanes 0..7's); false for an empty lane. */
static inline bool kq_tail_lane(int m, int v, int lane, int *j, int *e0) {
    const int M = kq_tail_stride(m), p = v * (8 / M) + lane % 8 / M;
    if (lane % M >= m || p >= 4) return false;
    *j = lane % M;
    *e0 = 4 * p + (lane >= 8 ? 16 : 0);
    return true;
}

/* Bytes of one activation row in the 8-bit form. */
static inline size_t kq8_x8_row_bytes(int64_t n_cols) {
    int64_t nb = n_cols / 32;
    size_t tail = nb % 16 == 0 ? 0 : nb % 16 <= KQ_SHORT_TAIL ? sizeof(kq8_tail) : sizeof(kq8_chunk);
    return (size_t)(nb / 16) * sizeof(kq8_chunk) + tail;
}

/* Packed Q6_K keeps each 210-byte super-block, rearranged: d, the 16
 * sub-block scales, then the low 4 bits of the quants (4 pieces of 32 bytes:
 * piece k's low nibbles are group k, its high nibbles group k + 4), then the
 * high 2 bits (2 pieces: bits 2i, 2i + 1 of piece k's bytes are group
 * k + 2i). Group v, byte 2j + e: element 16 j + 2 v + e, so lane j of a
 * vector is sub-block j. The activations come in the matching kq16_k. */
/* Packed Q4_K keeps each 144-byte super-block: d, dmin and the 12 scale
 * bytes as they are, then the quants as 4 pieces of 32 bytes, piece k's low
 * nibbles group k and its high nibbles group k + 4, bytes as in Q6_K. Packed
 * Q5_K (176 bytes) is the same, then 32 bytes of fifth bits: bit v of byte b
 * belongs to group v. */
typedef struct kq16_k {
    int16_t q[8][32];         /* [v][2j + e]: element 16 j + 2 v + e, 256 q + q2 */
    float d[16];              /* the super-block's one unit (quantize_256's), in every lane: so Q4_K's
                                 sum over blocks of scale * dot stays one exact integer (tile_kq) */
    int32_t off[16];          /* -32 times the sum of sub-block j's q[][]: Q6_K's dots start there, for its -32 */
    float s[16];              /* even j: d[j] times the sum of sub-blocks j and j + 1 (a 32-element block,
                                 Q4_K's and Q5_K's minimums take it in one multiply-add); 0 for odd j */
    int32_t nbs[16];          /* lanes k and 8 + k: minus the sum of 32-element block k's q[][] (Q4_K's
                                 minimums, two outputs a vector: tile_kq) */
} kq16_k;

/* 16 tokens' kq16_k rows turned, lane t token t, for the 16-bit Q4_K
 * prompt tiles (simd_avx512.h), one per super-block and whole group of 16
 * tokens: turned once in the quantize step, not by every rows call (each
 * thread's pieces would turn all tokens again). A KERN_ACT_Q16_K buffer of
 * n_tok rows (kern_k16_turned) carries them from kern_amx_region(act,
 * n_tok, act_stride) on, group g's super-blocks at g * n_sb, where an
 * implementation with turn_k16 has Q4_K weights read it (kern_turn_k16). */
typedef struct kq16_kt {
    int32_t q[128][16];   /* [d][t]: dword d of token t's kq16_k q (d = 16 v + j, sub-block j) */
    float unit[16];       /* token t's unit (kq16_k d) */
    int32_t nbs[8][16];   /* [k][t]: token t's nbs of 32-element block k as words nbs & 255, nbs >> 8 */
} kq16_kt;
#define KQT_TOKENS 16
#define KQT_MAX_SB 24     /* longer rows take the sub-block lanes' tiles alone */
static inline bool kern_k16_turned(int64_t n_cols, int n_tok) {
    return n_tok >= KQT_TOKENS && n_cols / 256 <= KQT_MAX_SB;
}
static inline size_t kern_k16_turned_bytes(int64_t n_cols, int n_tok) {
    return kern_k16_turned(n_cols, n_tok) ? (size_t)(n_tok / KQT_TOKENS) * (size_t)(n_cols / 256) * sizeof(kq16_kt) : 0;
}
/* A whole KERN_ACT_Q16_K buffer: n_tok rows act_stride apart, then the turned groups. */
static inline size_t kern_k16_act_bytes(size_t act_stride, int64_t n_cols, int n_tok) {
    return (((size_t)n_tok * act_stride + 63) & ~(size_t)63) + kern_k16_turned_bytes(n_cols, n_tok);
}

/* Packed K-quants at 8 bits (kern_pool_set_act_bits): the coarse q of each
 * 32-element block alone, four elements of sub-block j in lane j, so one
 * vpdpbusd does the work of two vpdpwssd. The weights get the same lanes
 * from two pieces of the packed layout by one word permute (as kq8_chunk's):
 * pieces 2 i and 2 i + 1 give vectors i (low nibbles) and i + 2 (high). */
typedef struct kq8_k {
    int8_t q[4][64];          /* [u][4j + b]: element 16 j + 4 u + b */
    float d[16];              /* the super-block's unit, every lane: x ~ d * q */
    int32_t off[16];          /* -32 times the sum of sub-block j's q, as kq16_k's */
    float s[16];              /* d * sum of the 32-element block at even j, 0 at odd j, as kq16_k's */
    int32_t nbs[16];          /* as kq16_k's */
} kq8_k;

/* What a weight type multiplies with: float rows or one of the 8-bit forms. */
typedef enum kern_act_kind {
    KERN_ACT_F32, KERN_ACT_Q8_32, KERN_ACT_Q8_256, KERN_ACT_Q16_X16, KERN_ACT_Q16_K, KERN_ACT_Q8_X8,
    KERN_ACT_Q8_32_COARSE,    /* kq8_32 with q2 = 0 and s of the coarse part: 8-bit activations */
    KERN_ACT_Q8_256_COARSE,   /* kq8_256 likewise, bsums of 256 q alone */
    KERN_ACT_Q8_K,            /* kq8_k: packed K-quants at 8 bits */
    KERN_ACT_QA_K16,          /* kqa16_k: packed K-quants on AMX, 16-bit activations */
    KERN_ACT_QA_K8,           /* kqa8_k: the same at 8 bits */
    KERN_ACT_AMX_X8,          /* kq8_x8 rows, then the AMX form (kamx8_blk) of their chunks */
    KERN_ACT_AMX_X16,         /* kq16_chunk rows, then the AMX form (kamx16_blk) */
    KERN_ACT_AMX_X12,         /* kq16_chunk rows at 12 bits, then kamx16_blk with r (not 16 r) for q2 */
    KERN_ACT_Q12_32,          /* kq8_32 at 12 bits */
    KERN_ACT_Q12_X16,         /* kq16_chunk at 12 bits */
    KERN_ACT_COUNT
} kern_act_kind;

/* out[t * out_stride + r] = row r of w . activation row t, for r < n_rows and
 * t < n_tok. act rows are act_stride bytes apart (floats or kq8 blocks as the
 * weight type wants). Each output's summation order is fixed by the row and
 * the activations alone, never by n_tok or n_rows. */
typedef void (*kern_rows_fn)(const uint8_t *w, size_t row_bytes, int n_rows, int64_t n_cols,
                             const uint8_t *act, size_t act_stride, int n_tok, float *out, size_t out_stride);

/* ---- AMX prompt tiles (Sapphire Rapids and later; kernels_avx512_amx*.c) ------
 * Prompt-sized calls (n_tok >= KERN_AMX_MIN_TOKENS) of the "amx" backend run
 * the integer dots of whole 16-row x 16-token tiles on AMX (one tile
 * multiply per 32-element block, its exact int32 dots), then take, per
 * block and output, the float operations of the avx512 VNNI tiles in the
 * same order: every output equals the VNNI path's bit for bit, so a
 * sequence's logits never depend on whether its call took AMX.
 *
 * How a rows function plugs in (the K-quants can follow the same steps):
 * 1. an activation kind (KERN_ACT_AMX_*) whose buffer holds n_tok rows of a
 *    per-token form at act_stride (what the VNNI helpers read, e.g. for
 *    tails) and, from kern_amx_region(act, n_tok, act_stride) on, a copy of
 *    the activations in groups of 16 tokens laid out as AMX B tiles, zero
 *    for tokens past n_tok; act_row_bytes / amx_region_bytes /
 *    amx_fill_token (kernels.c) say its sizes and fill it per token.
 *    When the AMX rows run, only the region is written (kern_quantize_amx,
 *    straight from the floats): they must read nothing else; the per-token
 *    rows are written instead when the call falls back to VNNI;
 * 2. a kern_amx_rows_fn in kern_impl.amx_rows / amx_rows_x8 (16- and 8-bit
 *    activations) for the weight type, filled in kern_impl_amx();
 * 3. plan_part (kernels.c) picks it for packed weights when the pool's
 *    matmul has at least KERN_AMX_MIN_TOKENS tokens. The hand-out gives it
 *    rows in multiples of 16 where it can (any count works), and a
 *    per-thread scratch of KERN_AMX_SCRATCH(n_cols) bytes. */
#define KERN_AMX_MIN_TOKENS 32
/* 16-bit Q5_0 (its VNNI tiles merge each fifth bit into the words, which
 * its AMX rows do once per 16 rows) pays for the unpacking from one group
 * of 16 tokens: bench_matmul q5_0 finds AMX ahead of VNNI there at every
 * shape tried (the commit that set it has the table). */
#define KERN_AMX_Q5_0_MIN_TOKENS 16
/* Q4_0, Q4_1 and Q8_0, whose rows unpack by gather and broadcast
 * (amx_unpack_16): bench_matmul finds AMX ahead of VNNI from 14 tokens on
 * at 16 bits (Q4_0 behind at 12, Q8_0 even there) and from 16 on at 8 bits
 * (a group of 16 costs the same at any count, so fewer tokens leave it less
 * to save). Batched decode of 16 sequences is such a call. */
#define KERN_AMX_UNPACK16_MIN_TOKENS 14
#define KERN_AMX_UNPACK16_X8_MIN_TOKENS 16
static inline bool kern_amx_unpacks_16(uint32_t type) {
    return type == GL_TYPE_Q4_0 || type == GL_TYPE_Q4_1 || type == GL_TYPE_Q8_0;
}
/* Q4_K at 16 and 8 bits: its VNNI tiles sum each super-block's scaled dots across lanes (the scales
 * folded in, simd_avx512.h), its AMX rows in the tiles, so AMX is ahead already at 16 tokens, at
 * both widths (bench_matmul q4_k). */
#define KERN_AMX_Q4_K_MIN_TOKENS 16

/* Rows r0..r1-1 of w (w->data and, when packed, w->packed) against act:
 * out[t * out_stride + r] for t < n_tok. The tile configuration is the
 * function's own: it loads one and releases the tiles before returning. */
typedef void (*kern_amx_rows_fn)(const gl_tensor *w, long r0, long r1, const uint8_t *act, size_t act_stride,
                                 int n_tok, float *out, size_t out_stride, uint8_t *scratch);

/* (the K-quants' rows take 40 bytes a column: two row tiles unpacked; Q4_K's 33.5 a row tile, up to 256 KiB
 * (AMX_Q4K_PASS_BYTES), the rest its token groups' block sums, 2 bytes a column a group at 16 bits) */
#define KERN_AMX_SCRATCH(n_cols) ((size_t)(n_cols) * 64 + ((size_t)448 << 10))

/* One block position (block j of chunk c) of 16 tokens as AMX B tiles:
 * q[v][4 t + e] = element 4 v + e of token t's block (kq8_chunk's q[v][4j + e]). */
typedef struct kamx8_blk {
    int8_t q[8][64];
    float d[16];              /* token t's unit of the block, as kq8_chunk's d[j] */
    float s[16];              /* as kq8_chunk's s[j] (the tiles' signed dots need no off: simd_amx.h) */
} kamx8_blk;

/* The same of kq16_chunk's 256 q + q2: its coarse and residual bytes apart
 * (KERN_ACT_AMX_X12: r = q2 / 16 in q2's place, so q and r together are
 * one K = 64 B tile). */
typedef struct kamx16_blk {
    int8_t q[8][64];
    int8_t q2[8][64];
    float d[16];
    float s[16];
} kamx16_blk;

/* Bytes of one group of 16 tokens in the AMX form: every block of the row
 * (a short tail's too: its float steps are a chunk's, simd.h above). */
static inline size_t kern_amx_group_bytes(int64_t n_cols, bool x16) {
    return (size_t)(n_cols / 32) * (x16 ? sizeof(kamx16_blk) : sizeof(kamx8_blk));
}

/* Where the AMX form starts after n_tok per-token rows. */
static inline const uint8_t *kern_amx_region(const uint8_t *act, int n_tok, size_t act_stride) {
    return act + (((size_t)n_tok * act_stride + 63) & ~(size_t)63);
}

/* Attention of query heads h0..h0+nh-1 (all in one KV group) of tokens
 * t0..t0+nt-1 (one sequence, consecutive positions), nt * nh <=
 * KERN_ATTEND_MAX_ROWS; scratch holds kern_attend_scratch(nt * nh, ...)
 * floats. seg < 0: every segment, the result to a->out; seg >= 0: that
 * segment alone, each row's part (nh rows per token, head_dim + 2 floats:
 * outputs not yet divided by the sum, maximum, sum) to part. */
#define KERN_ATTEND_MAX_ROWS 64
typedef void (*kern_attend_fn)(const kern_attn *a, int t0, int nt, int h0, int nh, int seg, float *part,
                               float *scratch);

/* Positions per attention segment: a multiple of the cache block, about
 * 256. A row's positions go in these segments, each with a softmax of its
 * own, merged in order, whether one thread runs them or several; so a long
 * context can be spread over threads without changing any result. */
static inline int kern_attend_segment(int block_size) {
    return block_size >= 256 ? block_size : 256 / block_size * block_size;
}

/* out, *mx, *sum (a row's segments so far) take in the next segment's
 * outputs o2, maximum m2 and sum s2. Plain C in one place, so every caller
 * gets the same bits. */
void kern_attend_merge(float *out, float *mx, float *sum, const float *o2, float m2, float s2, int hd);

typedef struct kern_impl {
    const char *name;                                  /* "avx2", "avx512" */
    void (*quantize_32)(const float *x, kq8_32 *y, int64_t n, int res); /* n % 32 == 0; res: KQ_RES16 or 12 */
    void (*quantize_256)(const float *x, kq8_256 *y, int64_t n); /* n % 256 == 0 */
    /* kern_quantize_x16 of one whole chunk (512 floats) in one pass, the same bits; NULL = through quantize_32 */
    void (*quantize_x16)(const float *x, kq16_chunk *y, int res);
    void (*quantize_x8)(const float *x, kq8_chunk *y);  /* the same for kern_quantize_x8 */
    /* kern_quantize_amx's blocks of a group straight from the floats, the same bits; NULL =
     * through the per-token rows */
    void (*quantize_amx)(const float *x, size_t x_stride, int nt, int64_t na, uint8_t *group, int bits);
    /* kern_quantize_qa's group straight from the floats, the same bits; NULL = token by token */
    void (*quantize_qa)(const float *x, size_t x_stride, int nt, int64_t n_sb, uint8_t *group, bool x8);
    /* kern_quantize_k16's layout of one super-block from quantize_256's, the same bits; NULL = in C */
    void (*k16_layout)(const kq8_256 *a, kq16_k *y);
    /* 16 tokens' kq16_k rows (act_stride apart) of n_sb super-blocks turned into at (kq16_kt);
     * NULL = no rows of this implementation read them */
    void (*turn_k16)(const uint8_t *act, size_t act_stride, int n_sb, kq16_kt *at);
    kern_rows_fn rows[GL_TYPE_COUNT];                  /* by gl_type; NULL = scalar path */
    kern_rows_fn rows_x8[GL_TYPE_COUNT];               /* the same against the *_COARSE kinds; NULL = none */
    kern_rows_fn packed_rows[GL_TYPE_COUNT];           /* by gl_type, for kern_pack'ed weights; NULL = none */
    kern_rows_fn packed_rows_x8[GL_TYPE_COUNT];        /* the same against 8-bit activations (kq8_chunk, kq8_k) */
    kern_amx_rows_fn amx_rows[GL_TYPE_COUNT];          /* packed weights' prompt tiles on AMX (KERN_ACT_AMX_X16); NULL = none */
    kern_amx_rows_fn amx_rows_x8[GL_TYPE_COUNT];       /* the same against KERN_ACT_AMX_X8 */
    kern_amx_rows_fn amx_rows_x12[GL_TYPE_COUNT];      /* the same against KERN_ACT_AMX_X12 (Q4_0, Q4_1) */
    kern_attend_fn attend;
    void (*swiglu)(float *gate, const float *up, int n); /* gate = silu(gate) * up */
    void (*geglu)(float *gate, const float *up, int n);  /* gate = gelu_tanh(gate) * up */
    void (*to_f16)(const float *x, uint16_t *y, int n);   /* IEEE half, round to nearest even */
} kern_impl;

/* Packed K-quants on AMX (simd_amx_k.h): a prompt's tokens in groups of
 * 16, each super-block of a group laid out as the B operand of tdpbssd with
 * K = 16 (one sub-block): [j][k][t][e] is element 16 j + 4 k + e of token t
 * of the group, so one tile load gives sub-block j of 16 tokens and one
 * tdpbssd the exact dots of 16 rows' sub-block j with them. The units and
 * sums are kq16_k's (kqa16_k) and kq8_k's (kqa8_k), by sub-block and token,
 * so the float steps that follow are those of the VNNI tiles, each output's
 * bit for bit. An activation "row" is a sixteenth of a group: token t's
 * group starts at act + (t / 16) * 16 * stride. Tokens past the call's are
 * zero. */
#define KQA_GROUP 16
/* Q6_K's 16-element scales leave AMX little to save against 8-bit
 * activations' vpdpbusd at the fewest tokens: bench_matmul has it break
 * even between 32 and 48 on common shapes (long rows win earlier), so
 * smaller calls keep VNNI. */
#define KQA_Q6_K_X8_MIN_TOKENS 48
typedef struct kqa16_k {
    int8_t q[16][4][16][4];   /* [j][k][t][e]: coarse part */
    int8_t q2[16][4][16][4];  /* residual */
    float d[16][16];          /* [j][t]: unit of sub-block j, as kq16_k's */
    float s[16][16];          /* [j][t]: as kq16_k's (even j: the 32-element block's, odd j: 0) */
} kqa16_k;
typedef struct kqa8_k {
    int8_t q[16][4][16][4];   /* [j][k][t][e]: coarse part alone */
    float d[16][16];          /* as kq8_k's */
    float s[16][16];
} kqa8_k;
/* Tokens 0..nt-1 (nt <= KQA_GROUP, rows n floats apart) into one AMX group
 * (kqa16_k or kqa8_k at group, x8 for the second), from quantize_256 as
 * kern_quantize_k16 / kern_quantize_k8; tokens nt..15 are left as they are
 * or, from impl->quantize_qa, written zero. */
void kern_quantize_qa(const kern_impl *impl, const float *x, int64_t n, int nt, uint8_t *group, bool x8);

/* What both x86 implementations need: AVX2, FMA and F16C (F16C through
 * cpuid: clang has no __builtin_cpu_supports("f16c")). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
static inline bool kern_cpu_has_avx2_base(void) {
    unsigned a, b, c, d;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __get_cpuid(1, &a, &b, &c, &d) &&
           (c & bit_F16C);
}
#endif

/* NULL when the CPU (or the build target) lacks the instructions. */
const kern_impl *kern_impl_avx2(void);
const kern_impl *kern_impl_avx512(void);
/* avx512 plus the AMX prompt tiles, named "amx": NULL unless the CPU has
 * AMX-INT8, the OS grants the tile state (arch_prctl) and GENLOOP_AMX is
 * not "0". */
const kern_impl *kern_impl_amx(void);

/* The scalar quantizers every implementation must match bit for bit. */
void kern_quantize_32_ref(const float *x, kq8_32 *y, int64_t n, int res);
void kern_quantize_256_ref(const float *x, kq8_256 *y, int64_t n);

/* 8-bit activation rows (the *_COARSE kinds): quantize_32 / quantize_256,
 * then the residuals dropped (kernels.c). */
void kern_quantize_32_coarse(const kern_impl *impl, const float *x, kq8_32 *y, int64_t n);
void kern_quantize_256_coarse(const kern_impl *impl, const float *x, kq8_256 *y, int64_t n);
/* Activation rows for packed weights, from quantize_32 (kernels.c). */
void kern_quantize_x16(const kern_impl *impl, const float *x, kq16_chunk *y, int64_t n, int res);
void kern_quantize_k16(const kern_impl *impl, const float *x, kq16_k *y, int64_t n); /* n % 256 == 0 */
/* The turned groups of n_tok kq16_k rows at act (simd.h, kq16_kt), where impl turns them:
 * every whole group, or group g alone (its rows written). */
void kern_turn_k16(const kern_impl *impl, uint8_t *act, int n_tok, size_t act_stride, int64_t n_cols);
void kern_turn_k16_group(const kern_impl *impl, uint8_t *act, int n_tok, size_t act_stride, int64_t n_cols, int g);
/* One row into kq8_x8_row_bytes(n) bytes: chunks as kq8_chunk (a last one of more than KQ_SHORT_TAIL
 * blocks zero past the row), then a short tail as a kq8_tail. */
void kern_quantize_x8(const kern_impl *impl, const float *x, uint8_t *y, int64_t n);
void kern_quantize_k8(const kern_impl *impl, const float *x, kq8_k *y, int64_t n); /* n % 256 == 0 */
/* Tokens 0..nt-1 (nt <= 16; rows n floats apart) into one group of the
 * AMX form at bits 16, 12 or 8 (KERN_ACT_AMX_X16, _X12, _X8), the bits the
 * per-token rows and their fill give; group's slots of tokens nt..15 hold
 * zeros before (their blocks are written zero). rows: nt per-token rows
 * row_stride apart, written only where impl has no quantize_amx. */
void kern_quantize_amx(const kern_impl *impl, const float *x, int64_t n, int nt, uint8_t *group, uint8_t *rows,
                       size_t row_stride, int bits);
/* The activation form packed weights of this type take, at 16 and at 8 bits. */
kern_act_kind kern_packed_act_kind(uint32_t type);
kern_act_kind kern_packed_x8_act_kind(uint32_t type);

/* Which activation form a weight type takes under an implementation. */
kern_act_kind kern_act_kind_of(uint32_t type);

/* The implementation kern_matmul uses now; NULL = scalar. */
const kern_impl *kern_impl_active(void);

/* Floats between one row's segment scores and the next: the segment,
 * rounded up to whole 16-float vectors. */
static inline int kern_attend_score_stride(int block_size) { return (kern_attend_segment(block_size) + 15) & ~15; }

/* Floats of an attend function's conversion buffer: a block's K or V of one
 * KV head as floats, at least 16 positions. */
static inline size_t kern_attend_row_floats(int head_dim, int block_size) {
    return (size_t)head_dim * (size_t)(block_size > 16 ? block_size : 16);
}

/* Scratch floats an attend function needs for nr rows (token x head). */
static inline size_t kern_attend_scratch(int nr, int head_dim, int block_size) {
    return kern_attend_row_floats(head_dim, block_size) + 4 * (size_t)nr +
           (size_t)nr * (size_t)(kern_attend_score_stride(block_size) + 2 * head_dim);
}

#endif
