/* grammar.h -- GBNF grammars as a pushdown automaton over bytes, and the
 * per-step mask of the tokens that keep generated text inside the grammar.
 *
 * A grammar (gr_grammar, the public gl_grammar) is parsed once into rules of
 * alternatives of elements (character classes over code points, references
 * to rules). A matcher holds the automaton's state for one sequence: the set
 * of parse stacks the text so far allows (persistent linked stacks in an
 * arena) plus the partial UTF-8 character the last bytes started. The mask
 * walks a byte trie of the vocabulary against those stacks, pruning a whole
 * subtree at the first byte no stack accepts; masks are cached per grammar
 * by the state they were computed for, so a state seen before (inside a
 * string, or by another request with the same grammar) costs a lookup. */
#ifndef GL_GRAMMAR_H
#define GL_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "genloop.h"

typedef struct gl_grammar gr_grammar;

/* Bounds that keep any input finite: bigger grammars are refused at compile,
 * deeper or more ambiguous parses are cut at run time (see README). */
#define GR_MAX_TEXT (4 << 20)     /* bytes of GBNF (a schema compiles to several times its size) */
#define GR_MAX_ELEMS (1 << 20)    /* elements after expanding repetitions */
#define GR_MAX_NESTING 64         /* parentheses inside one another */
#define GR_MAX_REPEAT 2000        /* the n of x{m,n} */
#define GR_MAX_STACKS 256         /* parse stacks alive at once */
#define GR_MAX_DEPTH 2048         /* depth of one parse stack */

/* Compile GBNF text (the root rule is "root"). The result is shared: the
 * same text returns the same compiled grammar while it is cached. Errors
 * name line and column. */
/* The thread's compile budget (gl_compile_budget_set): n more bytes
 * allocated, and the clock checked now and then; false, with err set,
 * once the budget is spent. */
bool gr_budget_charge(size_t n, gl_error *err);
gr_grammar *gr_compile(const char *text, size_t len, gl_error *err);
gr_grammar *gr_retain(gr_grammar *g);
void gr_release(gr_grammar *g);

/* The vocabulary as the mask needs it: each token's bytes (empty for
 * control tokens, never allowed by a grammar) and whether it ends
 * generation (allowed where the grammar accepts). Arrays are copied. */
typedef struct gr_vocab gr_vocab;
gr_vocab *gr_vocab_create(int n_vocab, const char *const *pieces, const size_t *piece_lens, const bool *is_eog);
void gr_vocab_free(gr_vocab *v);

typedef struct gr_matcher gr_matcher;
gr_matcher *gr_matcher_create(gr_grammar *g, const gr_vocab *v, gl_error *err);
void gr_matcher_free(gr_matcher *m);

/* Set logits[n_vocab] of the tokens that cannot come next to -inf. Returns
 * the number of tokens left (0: dead end). */
int gr_matcher_mask(gr_matcher *m, float *logits);
/* Whether token t may come next (what the mask allows). */
bool gr_matcher_allows(gr_matcher *m, int32_t t);
/* Advance by a token's bytes / by raw bytes; false (state unchanged) when
 * the grammar rejects them or a run-time bound is hit. */
bool gr_matcher_accept_token(gr_matcher *m, int32_t t);
bool gr_matcher_accept_bytes(gr_matcher *m, const char *bytes, size_t n);
/* The text so far is a complete sentence of the grammar. */
bool gr_matcher_can_end(const gr_matcher *m);
/* Complete, and nothing can follow: generation is over. */
bool gr_matcher_is_done(const gr_matcher *m);

#endif
