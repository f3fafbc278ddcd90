/* spec.c -- speculative decoding's owner (spec.h): the proposers, the
 * draft-length rule's state and scratch, and the per-sequence learning. */
#include "spec.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "draft_model.h"
#include "drafter.h"
#include "gl_error.h"
#include "model.h"
#include "scheduler.h"
#include "spec_rule.h"

/* A sequence the rule left without drafts probes one drafted token, valued
 * as if half its drafts were accepted, after this many steps (doubling after
 * each probe that fails, up to SPEC_PROBE_MAX), so it notices when copying
 * resumes. */
#define SPEC_PROBE 8
#define SPEC_PROBE_MAX 64

struct gl_spec {
    spec_proposer pr;
    gl_model *draft_model;    /* GL_SPEC_DRAFT: loaded here, owned */
    bool fixed;               /* always the longest draft (gl_engine_params.spec_fixed) */
    int max_tokens;           /* drafted tokens per sequence at most */
    spec_costs costs;         /* the draft-length rule's step costs (spec_rule.h) */
    int draft_rows;           /* drafted tokens one step carries at most */
    gl_seq **cand;            /* [max_seqs] the next step's drafting candidates */
    int *cap, *k;             /* [max_seqs] their longest draft, and the length chosen */
    double *a, *v;            /* [max_seqs] their acceptance; spec_choose's scratch */
    int *pick;                /* [draft_rows + 1] spec_choose's scratch */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the two proposers ---------------------------------------------------------- */

static int ngram_propose(void *self, spec_seq *s, const int32_t *tokens, int n_tokens, int cap_tokens, int k,
                         int32_t *out) {
    return drafter_propose(self, tokens, n_tokens, k, out);
}

static void ngram_free(void *self) { drafter_free(self); }

static int dm_propose_for(void *self, spec_seq *s, const int32_t *tokens, int n_tokens, int cap_tokens, int k,
                          int32_t *out) {
    return dm_propose(self, (dm_seq **)&s->state, tokens, n_tokens, cap_tokens, k, out);
}

static void dm_rollback(void *self, spec_seq *s) { dm_seq_release(self, (dm_seq **)&s->state); }

static int dm_blocks(const void *self) { return dm_blocks_used(self); }

static void dm_free_self(void *self) { dm_free(self); }

/* ---- lifetime ------------------------------------------------------------------------ */

int spec_draft_rows(const gl_engine_params *p) {
    /* drafted tokens' rows (n_vocab floats each): a full draft for every
     * sequence up to 128 rows; batches that large stop drafting anyway
     * (the rule), and a draft past the rows left is cut */
    int rows = p->spec_mode == GL_SPEC_OFF ? 0 : p->max_seqs * p->spec_max_tokens;
    if (rows > 128) rows = 128;
    if (rows > p->max_batch_tokens) rows = p->max_batch_tokens;
    return rows;
}

gl_spec *spec_create_with(const spec_proposer *pr, int max_seqs, int max_step_tokens, int draft_rows, int max_tokens,
                          bool fixed) {
    gl_spec *sp = calloc(1, sizeof *sp);
    if (!sp) return NULL;
    sp->pr = *pr;
    sp->fixed = fixed;
    sp->max_tokens = max_tokens;
    sp->draft_rows = draft_rows;
    sp->cand = calloc((size_t)max_seqs, sizeof *sp->cand);
    sp->cap = calloc((size_t)max_seqs, sizeof *sp->cap);
    sp->k = calloc((size_t)max_seqs, sizeof *sp->k);
    sp->a = calloc((size_t)max_seqs, sizeof *sp->a);
    sp->v = calloc((size_t)max_seqs, sizeof *sp->v);
    sp->pick = calloc((size_t)draft_rows + 1, sizeof *sp->pick);
    if (!spec_costs_init(&sp->costs, max_step_tokens) || !sp->cand || !sp->cap || !sp->k || !sp->a || !sp->v ||
        !sp->pick) {
        spec_free(sp);
        return NULL;
    }
    return sp;
}

gl_spec *spec_create(const gl_engine_params *p, const gl_model *target, kern_pool *pool, int pool_tokens,
                     gl_error *err) {
    if (p->spec_mode == GL_SPEC_OFF) return NULL;
    spec_proposer pr = {0};
    gl_model *draft = NULL;
    if (p->spec_mode == GL_SPEC_NGRAM) {
        drafter_params dp = {.mode = p->spec_mode, .ngram_min = p->spec_ngram_min, .ngram_max = p->spec_ngram_max};
        pr = (spec_proposer){.self = drafter_create(&dp), .before_rule = true, .propose = ngram_propose,
                             .free = ngram_free};
        if (!pr.self) {
            gl_error_set(err, "out of memory for the drafter");
            return NULL;
        }
    } else {
        if (!(draft = gl_model_load(p->spec_draft_model, err))) return NULL;
        int widest = draft->config.n_widest;
        if (widest > target->config.n_widest &&
            (kern_pool_reserve(pool, (size_t)widest) || kern_pool_reserve_tokens(pool, p->max_batch_tokens, widest))) {
            gl_error_set(err, "out of memory for the draft model's rows");
            gl_model_free(draft);
            return NULL;
        }
        /* the draft pool holds as many positions as the target's: it never
         * needs more, having no prefix sharing to save but no more sequences */
        dm_drafter *dm = dm_create(draft, target, pool, p->max_batch_tokens, pool_tokens, p->block_size, p->kv_type, err);
        if (!dm) {
            gl_model_free(draft);
            return NULL;
        }
        pr = (spec_proposer){.self = dm, .propose = dm_propose_for, .rollback = dm_rollback, .blocks_used = dm_blocks,
                             .free = dm_free_self};
    }
    gl_spec *sp = spec_create_with(&pr, p->max_seqs, p->max_batch_tokens, spec_draft_rows(p), p->spec_max_tokens,
                                   p->spec_fixed);
    if (!sp) {
        pr.free(pr.self);
        gl_model_free(draft);
        gl_error_set(err, "out of memory for the draft-length rule");
        return NULL;
    }
    sp->draft_model = draft;
    return sp;
}

void spec_free(gl_spec *sp) {
    if (!sp) return;
    if (sp->pr.free) sp->pr.free(sp->pr.self); /* the draft model's states of every sequence with it */
    gl_model_free(sp->draft_model);
    spec_costs_free(&sp->costs);
    free(sp->cand);
    free(sp->cap);
    free(sp->k);
    free(sp->a);
    free(sp->v);
    free(sp->pick);
    free(sp);
}

/* ---- sequences --------------------------------------------------------------------------- */

void spec_seq_init(const gl_spec *sp, spec_seq *s, bool wanted) {
    memset(s, 0, sizeof *s);
    s->len = sp && wanted ? sp->max_tokens : 0;
    s->accept = 0.7; /* optimistic: a new sequence drafts until it learns */
    s->gap = SPEC_PROBE;
}

void spec_seq_release(gl_spec *sp, spec_seq *s) {
    if (sp && sp->pr.rollback) sp->pr.rollback(sp->pr.self, s);
}

int spec_blocks_used(const gl_spec *sp) { return sp && sp->pr.blocks_used ? sp->pr.blocks_used(sp->pr.self) : 0; }

void spec_learn(gl_spec *sp, spec_seq *s, int k, int accepted, const int32_t *tokens, int n_tokens,
                gl_engine_stats *stats) {
    if (!sp || k <= 0) return;
    /* positions tested: the accepted ones and the first rejected one */
    for (int j = 0; j < accepted + (accepted < k); j++) s->accept = 0.85 * s->accept + 0.15 * (j < accepted);
    s->gap = accepted > 0 ? SPEC_PROBE : s->gap * 2 > SPEC_PROBE_MAX ? SPEC_PROBE_MAX : s->gap * 2;
    s->n_draft_total += k;
    s->n_accepted_total += accepted;
    stats->spec_drafts++;
    stats->spec_draft_tokens += (uint64_t)k;
    stats->spec_accepted_tokens += (uint64_t)accepted;
    for (int j = 0; j < accepted; j++) stats->spec_accepted_at[j]++;
    if (sp->pr.accepted) sp->pr.accepted(sp->pr.self, s, tokens, n_tokens);
}

/* ---- the next step's drafts ------------------------------------------------------------- */

/* Chooses every decoding sequence's draft length for the next step
 * (spec_rule.h) and proposes the drafts. */
static void plan_drafts(gl_spec *sp, const scheduler *sc) {
    int n = 0, n_decoding = 0, total = 0;
    /* Prompt tokens waiting: the next steps are full of them and a drafted
     * token would take a prompt token's place in the budget (and cost a
     * compute-bound token, not the decode table's price): no drafts. */
    bool prefill = sc->waiting.head != NULL;
    for (int i = 0; i < sc->n_running; i++) prefill |= sc->running[i]->n_tokens - sc->running[i]->num_computed_tokens > 1;
    for (int i = 0; i < sc->n_running; i++) {
        gl_seq *r = sc->running[i];
        if (r->n_tokens - r->num_computed_tokens != 1) continue;
        r->spec.n_draft = 0;
        if (prefill && !sp->fixed) continue;
        n_decoding++;
        int cap = r->max_generated - r->n_generated;
        if (r->cap_tokens - r->n_tokens < cap) cap = r->cap_tokens - r->n_tokens;
        cap--; /* the last row's token needs room too */
        if (cap > r->spec.len) cap = r->spec.len;
        if (cap <= 0) continue;
        double a = r->spec.accept;
        bool probe = r->spec.idle >= r->spec.gap && !sp->fixed;
        if (probe) {
            cap = 1;
            if (a < 0.5) a = 0.5;
        }
        /* a cheap proposer goes first, so only real drafts compete */
        if (sp->pr.before_rule &&
            !(cap = sp->pr.propose(sp->pr.self, &r->spec, r->tokens, r->n_tokens, r->cap_tokens, cap,
                                   r->tokens + r->n_tokens)))
            continue;
        sp->cand[n] = r;
        sp->cap[n] = cap;
        sp->k[n] = sp->fixed ? cap : 0;
        sp->a[n] = a;
        total += cap;
        n++;
    }
    if (n == 0) return;
    int max_d = sp->draft_rows < total ? sp->draft_rows : total;
    if (!sp->fixed) spec_choose(&sp->costs, n_decoding, n, sp->cap, sp->a, max_d, sp->k, sp->v, sp->pick);
    for (int i = 0; i < n; i++) {
        gl_seq *r = sp->cand[i];
        int k = sp->k[i];
        if (k == 0) {
            r->spec.idle++;
            continue;
        }
        r->spec.idle = 0;
        if (sp->pr.before_rule) {
            r->spec.n_draft = k; /* already written */
            continue;
        }
        bool first = !r->spec.state; /* feeds the whole prompt: a one-off, not a drafted token's cost */
        double t0 = now_s();
        r->spec.n_draft = sp->pr.propose(sp->pr.self, &r->spec, r->tokens, r->n_tokens, r->cap_tokens, k,
                                         r->tokens + r->n_tokens);
        if (!first) spec_costs_learn_draft(&sp->costs, k, now_s() - t0);
    }
}

void spec_after_step(gl_spec *sp, scheduler *sc, const sched_plan *plan, bool ran, double seconds) {
    if (!sp) return;
    if (plan->n_preempted > 0) /* a preempted sequence gives its draft state back too */
        for (gl_seq *w = sc->waiting.head; w; w = w->next) spec_seq_release(sp, &w->spec);
    /* a step of short prompts alone (scheduler.h) left the decoding sequences as they were: their
     * drafts stand, and proposing them again would only repeat the drafter's work */
    if (!ran || sc->plan_was_short) return;
    bool decode_only = true; /* prompt chunks would fit prefill's cost, not decoding's */
    for (int si = 0; si < plan->n_entries; si++)
        decode_only &= plan->entries[si].sample_row >= 0 && plan->entries[si].n_tokens == 1 + plan->entries[si].n_draft;
    if (decode_only) spec_costs_learn(&sp->costs, plan->n_tokens, seconds);
    plan_drafts(sp, sc);
}
