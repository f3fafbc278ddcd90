/* spec_rule.c -- draft lengths from learned step costs. */
#include "spec_rule.h"

#include <stdlib.h>

int spec_costs_init(spec_costs *c, int max_width) {
    *c = (spec_costs){.max_width = max_width};
    c->width = calloc((size_t)max_width + 1, sizeof *c->width);
    return c->width != NULL;
}

void spec_costs_free(spec_costs *c) {
    free(c->width);
    c->width = NULL;
}

/* A sample more than twice the current estimate counts as twice it: on a
 * shared host another process can stall one step. */
static void average(double *x, double s) { *x = *x > 0 ? 0.8 * *x + 0.2 * (s < 2 * *x ? s : 2 * *x) : s; }

void spec_costs_learn(spec_costs *c, int w, double s) {
    if (w < 1 || w > c->max_width || !(s > 0)) return;
    average(&c->width[w], s);
    double x = w, d = 0.97;
    c->fit_w = d * c->fit_w + 1;
    c->fit_x = d * c->fit_x + x;
    c->fit_y = d * c->fit_y + s;
    c->fit_xx = d * c->fit_xx + x * x;
    c->fit_xy = d * c->fit_xy + x * s;
}

void spec_costs_learn_draft(spec_costs *c, int n, double s) {
    if (n > 0 && s > 0) average(&c->draft, s / n);
}

/* Measured, else interpolated between the nearest measured widths, else
 * (wider than any measured) the widest measured plus the fitted line's slope
 * per token: an optimistic guess, so the rule tries that width once and
 * learns its true cost. Narrower than any measured: proportional, a lower
 * bound. */
double spec_costs_width(const spec_costs *c, int w) {
    const double *t = c->width;
    if (w < 1 || w > c->max_width) return 0;
    if (t[w] > 0) return t[w];
    int lo = w - 1, hi = w + 1;
    while (lo > 0 && !(t[lo] > 0)) lo--;
    while (hi <= c->max_width && !(t[hi] > 0)) hi++;
    if (lo > 0 && hi <= c->max_width) return t[lo] + (t[hi] - t[lo]) * (w - lo) / (hi - lo);
    if (hi <= c->max_width) return t[hi] * w / hi;
    if (lo <= 0) return 0;
    double mx = c->fit_x / c->fit_w, my = c->fit_y / c->fit_w;
    double vx = c->fit_xx / c->fit_w - mx * mx, t1 = vx > 0.25 ? (c->fit_xy / c->fit_w - mx * my) / vx : 0;
    if (t1 <= 0) t1 = my / (20 + mx); /* no usable spread yet */
    return t[lo] + t1 * (w - lo);
}

int spec_choose(const spec_costs *c, int n_decoding, int n, const int *cap, const double *a, int max_d, int *k,
                double *scratch, int *pick) {
    for (int i = 0; i < n; i++) k[i] = 0;
    double base = spec_costs_width(c, n_decoding);
    if (n_decoding < 1 || !(base > 0)) return 0;
    if (max_d > c->max_width - n_decoding) max_d = c->max_width - n_decoding;
    double *worth = scratch; /* each candidate's next drafted token, in expected accepted tokens */
    for (int i = 0; i < n; i++) worth[i] = a[i];
    double best = SPEC_MARGIN * n_decoding / base, v = n_decoding;
    int best_d = 0;
    for (int d = 1; d <= max_d; d++) {
        int p = -1;
        for (int i = 0; i < n; i++)
            if (k[i] < cap[i] && (p < 0 || worth[i] > worth[p])) p = i;
        if (p < 0) break;
        v += worth[p];
        worth[p] *= a[p];
        k[p]++;
        pick[d - 1] = p;
        double rate = v / (spec_costs_width(c, n_decoding + d) + c->draft * d);
        if (rate > best) best = rate, best_d = d;
    }
    for (int i = 0; i < n; i++) k[i] = 0;
    for (int d = 0; d < best_d; d++) k[pick[d]]++;
    return best_d;
}
