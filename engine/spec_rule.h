/* spec_rule.h -- speculative decoding's draft lengths (README "Speculative
 * decoding"): how many drafted tokens each decoding sequence carries into
 * the next step.
 *
 * What a decode step of w tokens costs is learned online per width, not as
 * a line: the kernels work in token tiles, so widening a step costs little
 * inside a tile and a lot past its edge (on SmolLM2 one token past a tile
 * of 4 nearly doubled the step). With B sequences decoding, a step of B + D tokens yields
 * B + V tokens (V: the drafts' expected accepted tokens, the j-th drafted
 * token of a sequence with per-token acceptance a counting a^j) and costs
 * the width's cost plus the draft model's cost per drafted token. The D
 * best drafted tokens are taken where that beats B tokens per cost(B) by
 * SPEC_MARGIN, none where nothing does (large compute-bound batches). */
#ifndef GL_SPEC_RULE_H
#define GL_SPEC_RULE_H

/* A draft must be predicted to raise tokens per second by this factor: the
 * acceptance rates are moving averages, not certainties. */
#define SPEC_MARGIN 1.05

typedef struct spec_costs {
    double *width;            /* [max_width + 1] seconds per decode step of that many tokens
                                 (moving average); 0: not seen */
    int max_width;
    double fit_w, fit_x, fit_y, fit_xx, fit_xy; /* line through the same steps (exponentially
                                 weighted sums): its slope prices widths wider than any seen */
    double draft;             /* draft model seconds per drafted token (moving average); 0: not seen */
} spec_costs;

/* false when out of memory. */
int spec_costs_init(spec_costs *c, int max_width);
void spec_costs_free(spec_costs *c);
/* A decode step of w tokens (1..max_width) took s seconds. */
void spec_costs_learn(spec_costs *c, int w, double s);
/* The draft model took s seconds for n drafted tokens. */
void spec_costs_learn_draft(spec_costs *c, int n, double s);
/* Estimated seconds of a decode step of w tokens; 0 when nothing is known. */
double spec_costs_width(const spec_costs *c, int w);

/* Draft lengths: n_decoding sequences decode next step; n of them may
 * draft, candidate i at most cap[i] tokens with per-token acceptance a[i].
 * Writes k[i]; at most max_d drafted tokens in all. scratch holds n doubles
 * and pick max_d ints. Returns the total drafted (0 while cost(n_decoding)
 * is unknown: that step measures it). */
int spec_choose(const spec_costs *c, int n_decoding, int n, const int *cap, const double *a, int max_d, int *k,
                double *scratch, int *pick);

#endif
