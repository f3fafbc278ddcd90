/* scheduler.c -- the step plan: token budget, admission, preemption. */
#include "scheduler.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- sequences and queues -------------------------------------------------------- */

void queue_push(seq_queue *q, gl_seq *s) {
    s->next = NULL;
    if (q->tail) q->tail->next = s;
    else q->head = s;
    q->tail = s;
    q->n++;
}

static void queue_push_front(seq_queue *q, gl_seq *s) {
    s->next = q->head;
    q->head = s;
    if (!q->tail) q->tail = s;
    q->n++;
}

/* Remove the element *link points at; prev is the element before it. */
static void queue_unlink(seq_queue *q, gl_seq **link, gl_seq *prev) {
    gl_seq *s = *link;
    *link = s->next;
    if (q->tail == s) q->tail = prev;
    q->n--;
}

gl_seq *queue_pop(seq_queue *q) {
    gl_seq *s = q->head;
    if (!s) return NULL;
    q->head = s->next;
    if (!q->head) q->tail = NULL;
    q->n--;
    return s;
}

/* ---- lifetime ----------------------------------------------------------------------- */

scheduler *sched_create(const sched_limits *limits, kv_manager *kv, bool prefix_caching) {
    scheduler *sc = calloc(1, sizeof *sc);
    if (!sc) return NULL;
    sc->limits = *limits;
    sc->kv = kv;
    sc->prefix_caching = prefix_caching;
    sc->running = calloc((size_t)limits->max_seqs, sizeof *sc->running);
    sc->plan.entries = calloc((size_t)limits->max_seqs, sizeof *sc->plan.entries);
    sc->plan.logit_tokens = calloc((size_t)limits->max_logits, sizeof *sc->plan.logit_tokens);
    if (!sc->running || !sc->plan.entries || !sc->plan.logit_tokens) {
        sched_free(sc);
        return NULL;
    }
    return sc;
}

void sched_free(scheduler *sc) {
    if (!sc) return;
    gl_seq *s;
    while ((s = queue_pop(&sc->waiting))) seq_free(sc->kv, s);
    for (int i = 0; i < sc->n_running; i++) seq_free(sc->kv, sc->running[i]);
    free(sc->running);
    free(sc->plan.entries);
    free(sc->plan.logit_tokens);
    free(sc);
}

/* Remove running[i], keeping admission order. */
static void running_remove(scheduler *sc, int i) {
    memmove(&sc->running[i], &sc->running[i + 1], (size_t)(sc->n_running - i - 1) * sizeof *sc->running);
    sc->n_running--;
}

bool sched_remove(scheduler *sc, gl_seq *s, bool *was_waiting) {
    *was_waiting = false;
    for (int i = 0; i < sc->n_running; i++) {
        if (sc->running[i] == s) {
            running_remove(sc, i);
            return true;
        }
    }
    for (gl_seq **link = &sc->waiting.head, *prev = NULL; *link; prev = *link, link = &(*link)->next) {
        if (*link == s) {
            queue_unlink(&sc->waiting, link, prev);
            *was_waiting = true;
            return true;
        }
    }
    return false;
}

gl_seq *sched_find(const scheduler *sc, uint64_t id) {
    for (int i = 0; i < sc->n_running; i++)
        if (sc->running[i]->id == id) return sc->running[i];
    for (gl_seq *s = sc->waiting.head; s; s = s->next)
        if (s->id == id) return s;
    return NULL;
}

/* ---- planning ------------------------------------------------------------------------- */

/* Give a preempted sequence's blocks back and queue it first in line: it
 * recomputes its prompt and generated tokens later; its client only waits. */
static void preempt(scheduler *sc, int i) {
    gl_seq *s = sc->running[i];
    running_remove(sc, i);
    kv_free_blocks(sc->kv, &s->kv);
    s->num_computed_tokens = 0;
    s->spec.n_draft = 0; /* recomputation starts from the accepted tokens only */
    queue_push_front(&sc->waiting, s);
    sc->n_preemptions++;
    sc->plan.n_preempted++;
}

/* Tokens of s to run this step under the budget, the block pool and (for
 * prompt logprobs) the logits rows left. */
static int chunk_size(const scheduler *sc, const gl_seq *s, int budget, int logits_left) {
    int n = s->n_tokens - s->num_computed_tokens;
    if (n > budget) n = budget;
    if (s->prompt_logprobs >= 0 && s->num_computed_tokens < s->n_prompt && n > logits_left - 1) n = logits_left - 1;
    int free_tokens = kv_slots_available(sc->kv, &s->kv, s->num_computed_tokens);
    if (n > free_tokens) n = free_tokens;
    return n > 0 ? n : 0;
}

/* Add n tokens of s (from num_computed_tokens; blocks allocated) to the plan. */
static void plan_add(scheduler *sc, gl_seq *s, int n) {
    sched_plan *p = &sc->plan;
    sched_entry *en = &p->entries[p->n_entries++];
    *en = (sched_entry){.seq = s, .first = p->n_tokens, .n_tokens = n, .logit_first = -1, .sample_row = -1};
    if (s->t_scheduled == 0) s->t_scheduled = now_s();
    p->n_tokens += n;
    /* Logits: every row whose next token is a prompt token still to report,
     * and the rows that predict new tokens: the last known token's and its
     * drafted tokens'. */
    int first = s->num_computed_tokens;
    for (int j = 0; j < n; j++) {
        bool sample = first + j >= s->n_tokens - 1;
        if (!sample && !seq_wants_prompt_logprob(s, first + j)) continue;
        if (en->logit_first < 0) en->logit_first = p->n_logits;
        if (sample && en->sample_row < 0) en->sample_row = p->n_logits;
        p->logit_tokens[p->n_logits++] = en->first + j;
    }
    if (en->sample_row >= 0) en->n_draft = first + n - s->n_tokens;
}

/* Logits rows left once every running sequence not yet planned has one. */
static int logits_left(const scheduler *sc) {
    return sc->limits.max_logits - sc->plan.n_logits - (sc->n_running - sc->plan.n_entries);
}

/* 1. one token for every running sequence that is decoding, and its
 * drafted tokens from the budget the others' tokens leave (cut first when
 * blocks run out); blocks running out preempt the most recently admitted */
static int plan_decodes(scheduler *sc, int budget) {
    int n_decoding = 0, bs = kv_manager_block_size(sc->kv);
    for (int i = 0; i < sc->n_running; i++)
        n_decoding += sc->running[i]->n_tokens - sc->running[i]->num_computed_tokens == 1;
    int spare = budget - n_decoding;
    for (int i = 0; i < sc->n_running && budget > 0; i++) {
        gl_seq *r = sc->running[i];
        if (r->n_tokens - r->num_computed_tokens != 1) continue;
        n_decoding--;
        int k = r->spec.n_draft, rows = logits_left(sc);
        if (k > spare) k = spare;
        if (k > rows) k = rows;
        /* a draft's blocks never cost another sequence its token */
        int new_blocks = (r->n_tokens + k + bs - 1) / bs - r->kv.n_blocks;
        if (k < 0 || kv_manager_n_free(sc->kv) - new_blocks < n_decoding ||
            !kv_allocate_slots(sc->kv, &r->kv, r->n_tokens + k))
            k = 0;
        r->spec.n_draft = k;
        while (!kv_allocate_slots(sc->kv, &r->kv, r->n_tokens)) {
            preempt(sc, sc->n_running - 1);
            if (sc->n_running <= i) break; /* r itself was the one */
        }
        if (sc->n_running <= i) break;
        plan_add(sc, r, 1 + k);
        budget -= 1 + k;
        spare -= k;
    }
    return budget;
}

/* 2. prompt chunks of running sequences still prefilling */
static int plan_prefills(scheduler *sc, int budget) {
    for (int i = 0; i < sc->n_running && budget > 0; i++) {
        gl_seq *r = sc->running[i];
        if (r->n_tokens - r->num_computed_tokens <= 1) continue;
        int n = chunk_size(sc, r, budget, logits_left(sc));
        if (n == 0) continue;
        kv_allocate_slots(sc->kv, &r->kv, r->num_computed_tokens + n); /* fits: chunk_size counted free slots */
        plan_add(sc, r, n);
        budget -= n;
    }
    return budget;
}

/* 3. admit waiting sequences, first come first served; one whose prefix
 * another sequence is computing waits a step for the cache instead. With
 * short_only, admission stops at the first prompt with more than
 * prefill_first_tokens left to compute. */
static void plan_admissions(scheduler *sc, int budget, bool short_only) {
    gl_seq **link = &sc->waiting.head, *prev = NULL;
    while (*link && budget > 0 && sc->n_running < sc->limits.max_seqs) {
        gl_seq *w = *link;
        /* cached positions produce no logits, so prompt logprobs need them all computed */
        bool use_cache = sc->prefix_caching && !w->no_prefix_cache && !(w->prompt_logprobs >= 0 && w->prompt_logprobs_sent < w->n_prompt);
        if (use_cache) {
            int cached = kv_get_computed_prefix(sc->kv, &w->kv, w->n_tokens);
            if (cached < 0) {
                prev = w;
                link = &w->next;
                continue;
            }
            w->num_computed_tokens = cached;
        }
        int n = chunk_size(sc, w, budget, logits_left(sc) - 1);
        const int left = w->n_tokens - w->num_computed_tokens;
        if (short_only && (left > sc->limits.prefill_first_tokens || n < left)) n = 0; /* whole short prompts */
        if (n == 0) {
            kv_free_blocks(sc->kv, &w->kv);
            w->num_computed_tokens = 0;
            break;
        }
        if (w->t_scheduled == 0) { /* first admission: count cache use once */
            w->n_cached = w->num_computed_tokens;
            sc->prefix_queries += (uint64_t)w->n_prompt;
            sc->prefix_hits += (uint64_t)w->n_cached;
        }
        queue_unlink(&sc->waiting, link, prev);
        sc->plan.n_admitted++;
        sc->running[sc->n_running++] = w;
        kv_allocate_slots(sc->kv, &w->kv, w->num_computed_tokens + n);
        plan_add(sc, w, n);
        budget -= n;
    }
}

const sched_plan *sched_schedule(scheduler *sc) {
    sched_plan *p = &sc->plan;
    p->n_entries = p->n_tokens = p->n_logits = p->n_admitted = p->n_preempted = 0;
    /* 0. short waiting prompts alone, ahead of a running batch (scheduler.h) */
    if (!sc->plan_was_short && sc->n_running > 0 && sc->limits.prefill_first_tokens > 0) {
        plan_admissions(sc, sc->limits.max_batch_tokens, true);
        if (p->n_entries > 0) {
            sc->plan_was_short = true;
            return p;
        }
    }
    sc->plan_was_short = false;
    int budget = plan_decodes(sc, sc->limits.max_batch_tokens);
    budget = plan_prefills(sc, budget);
    plan_admissions(sc, budget, false);
    return p;
}
