/* reasoning.h -- the thinking block at the start of a reply, as the engine
 * sees it: which tokens are thinking, and the budget that closes it.
 *
 * A request's gl_reasoning names the texts that open and close the block.
 * The output is inside the block from its start when the prompt opened it,
 * or once the output (after leading whitespace) spells the opening text;
 * anything else first means there is no block. Inside, tokens are counted;
 * the closing text ends the block. With a budget of N, after N tokens
 * inside the block (and any UTF-8 character they started completed) the
 * closing text's tokens are forced one per step instead of sampled. A
 * grammar marked grammar_after applies from the token after the block. */
#ifndef GL_REASONING_H
#define GL_REASONING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"
#include "tokenizer.h"

typedef struct rs_state rs_state;

/* Copies r; the closing text is tokenized here and must spell itself
 * again, token by token, when a budget may force it. NULL with err set. */
rs_state *rs_create(const gl_reasoning *r, const gl_tokenizer *tok, gl_error *err);
void rs_free(rs_state *s);

/* The next token when the budget forces the closing text, else -1. */
int32_t rs_forced(const rs_state *s);
/* Whether a grammar_after grammar masks the next token; *keep receives a
 * token the mask must leave allowed (the next token of the opening text,
 * which the grammar does not see), or -1. */
bool rs_grammar_masks(const rs_state *s, int32_t *keep);
/* The output grew by token t whose bytes are piece[0..n). Returns how the
 * grammar must follow: 0 not at all (thinking), 1 this token, 2 the bytes
 * *held (*held_len of them) that the block's start left unchecked, this
 * token's included: no block came after all. */
int rs_accept(rs_state *s, int32_t t, const char *piece, size_t n, const char **held, size_t *held_len);
/* Tokens generated until the block closed (markers included); all so far
 * while it is open; 0 when there was none. */
int rs_thinking_tokens(const rs_state *s);

#endif
