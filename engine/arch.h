/* arch.h -- what sets each supported architecture apart, as flags that the
 * one forward pass in model.c reads (never a copy of the pass per model).
 *
 * Read from llama.cpp's graph builders (src/models/{llama,qwen2,qwen3,
 * gemma3}.cpp, llama-model.cpp's hyperparameters) and transformers'
 * modeling_{llama,qwen2,qwen3,gemma3}.py. Every architecture here is a
 * decoder of n_layers blocks: x += attention(norm(x)); x += ffn(norm(x));
 * logits = output(norm(x)), with RMSNorm everywhere, RoPE, GQA and a gated
 * FFN, W_down(act(W_gate h) * W_up h). The flags say where they differ. */
#ifndef GL_ARCH_H
#define GL_ARCH_H

#include <stdbool.h>

typedef struct gl_arch {
    const char *name;         /* general.architecture */
    /* RoPE rotates (x[i], x[i + rope_dim/2]) pairs ("NEOX", HF's rotate_half)
     * instead of adjacent (x[2i], x[2i+1]) ones. llama's converter permutes
     * the Q/K rows so adjacent pairs are right; the others keep HF's order. */
    bool rope_neox;
    /* attn_q.bias, attn_k.bias, attn_v.bias are added to the projections
     * before RoPE (qwen2: Linear(bias=True) for q/k/v only). */
    bool qkv_bias;
    /* attn_q_norm, attn_k_norm: an RMSNorm over each head's head_dim
     * channels of q and k, weights [head_dim] shared by all heads, after
     * the projection and before RoPE (qwen3, gemma3). */
    bool qk_norm;
    /* The sublayer outputs are RMS-normed before they join the residual:
     * x += post_attention_norm(attention(attn_norm(x))) and
     * x += post_ffw_norm(ffn(ffn_norm(x))) (gemma3's "sandwich" norms). */
    bool post_norms;
    /* FFN activation: GELU with the tanh approximation (gemma3's
     * gelu_pytorch_tanh), else SiLU. */
    bool gelu;
    /* The embedding rows are multiplied by sqrt(n_embd) before the first
     * layer (gemma3's Gemma3TextScaledWordEmbedding); the output head is
     * not scaled. */
    bool embd_scale;
    /* head_dim comes from <arch>.attention.key_length and may differ from
     * n_embd / n_heads (qwen3, gemma3: q is n_heads * head_dim wide, and
     * attn_output maps that back to n_embd). Else n_embd % n_heads must be
     * 0 and head_dim = n_embd / n_heads. */
    bool free_head_dim;
    /* Interleaved sliding-window attention: layer l is global when
     * (l + 1) % swa_period == 0, else it sees only the last
     * <arch>.attention.sliding_window positions (its own included) and
     * rotates with RoPE base swa_rope_base and no scaling; global layers
     * use rope.freq_base and the file's rope scaling (gemma3: period 6,
     * base 10000, as llama.cpp's set_swa_pattern(6) and HF's layer_types).
     * 0 = every layer global. */
    int swa_period;
    float swa_rope_base;
} gl_arch;

/* NOTES common to all four, checked against the references:
 * - RMSNorm is x / sqrt(mean(x^2) + eps) * w. Gemma's HF norm is
 *   x * (1 + w), but llama.cpp's converter stores 1 + w in the GGUF, so the
 *   stored weight is applied as it is (final norm included).
 * - Attention scale 1 / sqrt(head_dim): Gemma 3's query_pre_attn_scalar is
 *   head_dim for every size but 27B, where it is n_embd / n_heads (llama.cpp
 *   keys this on the layer count, 62); model.c does the same.
 * - The output head is output.weight, or token_embd.weight when the file has
 *   none (tied embeddings: Qwen2.5 0.5B, Gemma 3, SmolLM2).
 * - Gemma 3's final logit soft-capping is off in every released Gemma 3
 *   config (final_logit_softcapping None); llama.cpp's gemma3 graph also
 *   applies none when sliding windows are in use. */

/* The description of an architecture name, or NULL. */
const gl_arch *arch_find(const char *name);
/* "llama, qwen2, qwen3, gemma3": for error messages. */
const char *arch_supported(void);

#endif
