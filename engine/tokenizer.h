/* tokenizer.h -- text <-> token ids from a GGUF's tokenizer.ggml.* metadata.
 *
 * Supports SentencePiece-style vocabularies (tokenizer.ggml.model = "llama"),
 * byte-level BPE ("gpt2") with the pre-tokenizer named by tokenizer.ggml.pre,
 * and WordPiece ("bert"). Anything else ("t5", "rwkv", an unknown pre value)
 * is refused at load with a message naming it. Thread-safe after load. */
#ifndef GL_TOKENIZER_H
#define GL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"
#include "gguf.h"

typedef struct gl_tokenizer gl_tokenizer;

/* Build from metadata; copies what it needs (f may be closed afterwards). */
gl_tokenizer *tok_load(const gguf_file *f, gl_error *err);
void tok_free(gl_tokenizer *t);

int tok_n_vocab(const gl_tokenizer *t);
int32_t tok_bos(const gl_tokenizer *t);     /* -1 when absent */
int32_t tok_eos(const gl_tokenizer *t);     /* -1 when absent */
bool tok_add_bos(const gl_tokenizer *t);    /* metadata add_bos_token (default by model type) */
bool tok_is_eog(const gl_tokenizer *t, int32_t id); /* EOS, EOT, <|im_end|>, ... */
bool tok_is_control(const gl_tokenizer *t, int32_t id);
const char *tok_text(const gl_tokenizer *t, int32_t id); /* vocab spelling, NUL-terminated */

/* Encode len bytes of text. flags: GL_TOKENIZE_*. Returns count and a
 * malloc'd array in *out, or -1 with err set; *out is NULL then.
 * The text must be valid UTF-8 (no overlong forms or surrogates): otherwise
 * -1 with "invalid UTF-8 at byte N" (N = offset of the first bad sequence).
 * User-defined tokens (type 4) are always matched as whole tokens, as Hugging
 * Face does for non-special added tokens; control tokens (type 3) only with
 * GL_TOKENIZE_PARSE_SPECIAL. A byte a byte-level BPE vocabulary has no token
 * for is dropped (never mapped to an unknown token). */
int tok_encode(const gl_tokenizer *t, const char *text, size_t len, int flags,
               int32_t **out, gl_error *err);

/* The bytes a token contributes to output text: byte-level BPE unmapped,
 * SentencePiece "\xe2\x96\x81" turned into spaces, <0xXX> turned into that
 * byte. Control tokens give "" (they are not text). Never NULL for a valid id;
 * NULL for an out-of-range id. May be an incomplete UTF-8 sequence. */
const char *tok_piece(const gl_tokenizer *t, int32_t id, size_t *len);

/* Decode a whole sequence (malloc'd, NUL-terminated). Applies the
 * SentencePiece rule that drops the space prefix of the first token when the
 * vocabulary adds one. Invalid UTF-8 left at the end is kept as bytes.
 * NULL with err on an out-of-range id. */
char *tok_decode(const gl_tokenizer *t, const int32_t *ids, size_t n, gl_error *err);

#endif
