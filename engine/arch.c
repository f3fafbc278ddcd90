/* arch.c -- the table of supported architectures (flags in arch.h). */
#include "arch.h"

#include <string.h>

static const gl_arch archs[] = {
    /* Llama, and SmolLM2 and TinyLlama under its name. */
    {.name = "llama"},
    /* Qwen2 / Qwen2.5: Llama with q/k/v biases and HF's RoPE pairing. */
    {.name = "qwen2", .rope_neox = true, .qkv_bias = true},
    /* Qwen3: no biases, per-head Q/K RMSNorm, head_dim from key_length. */
    {.name = "qwen3", .rope_neox = true, .qk_norm = true, .free_head_dim = true},
    /* Gemma 3 (text): sandwich norms, Q/K norms, GELU, scaled embeddings,
     * five sliding-window layers to one global. */
    {.name = "gemma3", .rope_neox = true, .qk_norm = true, .post_norms = true, .gelu = true, .embd_scale = true,
     .free_head_dim = true, .swa_period = 6, .swa_rope_base = 10000.0f},
};

const gl_arch *arch_find(const char *name) {
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++)
        if (strcmp(archs[i].name, name) == 0) return &archs[i];
    return NULL;
}

const char *arch_supported(void) { return "llama, qwen2, qwen3, gemma3"; }
