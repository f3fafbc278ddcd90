/* simd_impl.h -- the last part of each x86 implementation, included by
 * kernels_avx2.c after simd_body.h and by kernels_avx512.c after
 * simd_avx512.h: attention (attend_body.h with this instruction set's
 * steps; attend_avx2, attend_avx512) and the kern_impl table (impl_avx2,
 * impl_avx512) that kernels.c picks from. */
#ifndef GL_SIMD_IMPL_H
#define GL_SIMD_IMPL_H
#define ATTEND_NAME FN(attend)
#define ATTEND_ROW kv_row_to_float
#define ATTEND_ROW_Q8 kv_row_q8_to_float
#define ATTEND_AXPY axpy_f32
#define ATTEND_SCALE scale_f32
#define ATTEND_EXP_SUM exp_sum_f32
#include "attend_body.h"

/* ---- the table ------------------------------------------------------------------ */

static const kern_impl FN(impl) = {
    .name = SIMD_NAME_STR,
    .quantize_32 = FN(quantize_32),
    .quantize_256 = FN(quantize_256),
#if SIMD_AVX512
    .quantize_x16 = FN(quantize_x16),
    .quantize_x8 = FN(quantize_x8),
    .quantize_amx = FN(quantize_amx),
    .quantize_qa = FN(quantize_qa),
    .turn_k16 = FN(turn_k16),
    .k16_layout = FN(k16_layout),
#endif
    .rows = {
        [GL_TYPE_F32] = FN(rows_f32), [GL_TYPE_F16] = FN(rows_f16), [GL_TYPE_BF16] = FN(rows_bf16),
        [GL_TYPE_Q4_0] = FN(rows_q4_0), [GL_TYPE_Q4_1] = FN(rows_q4_1), [GL_TYPE_Q5_0] = FN(rows_q5_0),
        [GL_TYPE_Q5_1] = FN(rows_q5_1), [GL_TYPE_Q8_0] = FN(rows_q8_0), [GL_TYPE_Q4_K] = FN(rows_q4_k),
        [GL_TYPE_Q5_K] = FN(rows_q5_k), [GL_TYPE_Q6_K] = FN(rows_q6_k),
    },
#if !SIMD_AVX512
    .rows_x8 = {
        [GL_TYPE_Q4_0] = FN(rows_x8_q4_0), [GL_TYPE_Q4_1] = FN(rows_x8_q4_1), [GL_TYPE_Q5_0] = FN(rows_x8_q5_0),
        [GL_TYPE_Q5_1] = FN(rows_x8_q5_1), [GL_TYPE_Q8_0] = FN(rows_x8_q8_0), [GL_TYPE_Q4_K] = FN(rows_x8_q4_k),
        [GL_TYPE_Q5_K] = FN(rows_x8_q5_k), [GL_TYPE_Q6_K] = FN(rows_x8_q6_k),
    },
#endif
#if SIMD_AVX512
    .packed_rows = {
        [GL_TYPE_Q4_0] = FN(packed_rows_q4_0), [GL_TYPE_Q4_1] = FN(packed_rows_q4_1),
        [GL_TYPE_Q5_0] = FN(packed_rows_q5_0), [GL_TYPE_Q5_1] = FN(packed_rows_q5_1),
        [GL_TYPE_Q8_0] = FN(packed_rows_q8_0), [GL_TYPE_Q6_K] = FN(packed_rows_q6_k),
        [GL_TYPE_Q4_K] = FN(packed_rows_q4_k), [GL_TYPE_Q5_K] = FN(packed_rows_q5_k),
    },
    .packed_rows_x8 = {
        [GL_TYPE_Q4_0] = FN(packed_rows_x8_q4_0), [GL_TYPE_Q4_1] = FN(packed_rows_x8_q4_1),
        [GL_TYPE_Q5_0] = FN(packed_rows_x8_q5_0), [GL_TYPE_Q5_1] = FN(packed_rows_x8_q5_1),
        [GL_TYPE_Q8_0] = FN(packed_rows_x8_q8_0), [GL_TYPE_Q4_K] = FN(packed_rows_x8_q4_k),
        [GL_TYPE_Q5_K] = FN(packed_rows_x8_q5_k), [GL_TYPE_Q6_K] = FN(packed_rows_x8_q6_k),
    },
#endif
    .attend = FN(attend),
    .swiglu = FN(swiglu),
    .geglu = FN(geglu),
    .to_f16 = FN(to_f16),
};

#endif
