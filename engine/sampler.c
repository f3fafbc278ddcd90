/* sampler.c -- logits to the next token: bias, penalties, DRY,
 * top-n-sigma, top-k, temperature (or dynamic temperature), typical-p,
 * top-p, min-p, XTC and a draw from a per-sampler xoshiro256** RNG; or
 * temperature and mirostat (1 or 2) in place of the truncations and draw.
 *
 * The candidate set is either the whole vocabulary or a list of ids in
 * s->cand; w[] holds the unnormalised probabilities exp((l - max) / T),
 * indexed by token id, so the best token always has weight exactly 1.
 * Nothing here sorts the vocabulary: top-k is a heap selection, and top-p
 * is a quickselect on probability mass over the tokens that survive a cheap
 * bound; only the last short run around the nucleus edge gets sorted. */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sampler.h"

/* ---- params --------------------------------------------------------------- */

void gl_sampling_params_default(gl_sampling_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_k = 0;
    p->top_p = 1.0f;
    p->min_p = 0.0f;
    p->repetition_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->penalty_last_n = 64;
    p->has_seed = false;
    p->n_logit_bias = 0;
    p->logit_bias = NULL;
    p->logprobs = false;
    p->n_logprobs = 0;
    p->typical_p = 1.0f;
    p->top_n_sigma = -1.0f;
    p->xtc_probability = 0.0f;
    p->xtc_threshold = 0.1f;
    p->dynatemp_range = 0.0f;
    p->dynatemp_exponent = 1.0f;
    p->mirostat = 0;
    p->mirostat_tau = 5.0f;
    p->mirostat_eta = 0.1f;
    p->dry_multiplier = 0.0f;
    p->dry_base = 1.75f;
    p->dry_allowed_length = 2;
    p->dry_penalty_last_n = -1;
    static const char *const dry_default_breakers[] = { "\n", ":", "\"", "*" };
    p->n_dry_breakers = 4;
    p->dry_breakers = dry_default_breakers;
}

/* ---- RNG: xoshiro256**, seeded through splitmix64 ------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t st[4]) {
    uint64_t result = rotl(st[1] * 5, 7) * 9;
    uint64_t t = st[1] << 17;
    st[2] ^= st[0];
    st[3] ^= st[1];
    st[1] ^= st[2];
    st[0] ^= st[3];
    st[2] ^= t;
    st[3] = rotl(st[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(uint64_t st[4]) {
    return (double)(xoshiro_next(st) >> 11) * 0x1.0p-53;
}

static void rng_seed(uint64_t st[4], uint64_t seed) {
    for (int i = 0; i < 4; i++) st[i] = splitmix64(&seed);
}

/* Unseeded requests made in the same nanosecond must still differ. */
static atomic_uint_fast64_t unseeded_counter;

static uint64_t clock_seed(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t n = atomic_fetch_add(&unseeded_counter, 1);
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (n * 0xD1B54A32D192ED03ull);
}

/* ---- the sampler ---------------------------------------------------------- */

struct gl_sampler {
    gl_sampling_params params;  /* logit_bias points at bias below */
    gl_logit_bias *bias;        /* own copy of the caller's array */
    int n_vocab;
    uint64_t rng[4];

    /* Penalty history: counts of the tokens in the window, kept as a dense
     * list of distinct tokens so applying penalties costs O(distinct). */
    bool penalize;              /* some penalty is on and the window is not 0 */
    int32_t *ring;              /* last window tokens, oldest at ring_head; NULL for -1 */
    int ring_cap, ring_len, ring_head;
    int32_t *slot_of;           /* [n_vocab] index into hist_tok, -1 = not in window */
    int32_t *hist_tok;          /* distinct tokens in the window */
    int32_t *hist_cnt;          /* their counts */
    int n_hist;

    /* DRY: the last dry_cap tokens, oldest at dry_head, and which tokens
     * end a repeat (sampler_set_breaker). */
    bool dry;                   /* DRY is on */
    int32_t *dry_ring;
    int dry_cap, dry_len, dry_head;
    uint8_t *breaker;           /* [n_vocab] */
    int32_t *dry_rev;           /* [dry_cap] scratch: the window, newest first */
    int32_t *dry_z;             /* [dry_cap] scratch: repeat length ending k tokens back */
    int32_t *dry_repeat;        /* [n_vocab] longest repeat the token would extend, -1 = none */
    int32_t *dry_hit;           /* [dry_cap] scratch: tokens with dry_repeat set */
    /* Breakers that may span tokens (sampler_set_text): found in the text. */
    char **brk;                 /* own copies of the non-empty breaker strings */
    int n_brk, brk_max;         /* count, longest length */
    sampler_piece_fn piece;     /* NULL: only tokens marked as breakers count */
    const void *piece_ctx;
    char *after;                /* [brk_max] scratch: the text after a token, closest first */
    int32_t *after_tok;         /* [brk_max] scratch: which token each byte of it came from */

    float mu;                   /* mirostat: the surprise bound it steers (2 tau at start) */

    /* Scratch for one sample call. */
    int32_t *cand;              /* [n_vocab] candidate ids */
    float *w;                   /* [n_vocab] exp((l - max) / T) by token id */
    float *key;                 /* [n_vocab] typical-p's ranking key, when it is on */
    gl_logit_bias *saved;       /* raw logits of entries bias/penalties overwrote */
    int n_saved, saved_cap;
};

void sampler_free(gl_sampler *s) {
    if (!s) return;
    free(s->bias);
    free(s->ring);
    free(s->slot_of);
    free(s->hist_tok);
    free(s->hist_cnt);
    free(s->dry_ring);
    free(s->breaker);
    free(s->dry_rev);
    free(s->dry_z);
    free(s->dry_repeat);
    free(s->dry_hit);
    for (int b = 0; b < s->n_brk; b++) free(s->brk[b]);
    free(s->brk);
    free(s->after);
    free(s->after_tok);
    free(s->cand);
    free(s->w);
    free(s->key);
    free(s->saved);
    free(s);
}

gl_sampler *sampler_create(const gl_sampling_params *params, int n_vocab) {
    if (n_vocab <= 0) return NULL;
    gl_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *params;
    s->n_vocab = n_vocab;
    gl_sampling_params *p = &s->params;
    if (p->n_logprobs < 0) p->n_logprobs = 0;
    if (p->n_logprobs > n_vocab) p->n_logprobs = n_vocab;
    if (p->n_logit_bias < 0 || !p->logit_bias) p->n_logit_bias = 0;

    if (p->n_logit_bias > 0) {
        s->bias = malloc((size_t)p->n_logit_bias * sizeof *s->bias);
        if (!s->bias) goto fail;
        memcpy(s->bias, params->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    p->logit_bias = s->bias;

    int window = p->penalty_last_n;
    s->penalize = window != 0 && (p->repetition_penalty != 1.0f ||
                                  p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f);
    int hist_cap = 0;
    if (s->penalize) {
        hist_cap = (window < 0 || window > n_vocab) ? n_vocab : window;
        if (window > 0) {
            s->ring_cap = window;
            s->ring = malloc((size_t)window * sizeof *s->ring);
            if (!s->ring) goto fail;
        }
        s->slot_of = malloc((size_t)n_vocab * sizeof *s->slot_of);
        s->hist_tok = malloc((size_t)hist_cap * sizeof *s->hist_tok);
        s->hist_cnt = malloc((size_t)hist_cap * sizeof *s->hist_cnt);
        if (!s->slot_of || !s->hist_tok || !s->hist_cnt) goto fail;
        for (int i = 0; i < n_vocab; i++) s->slot_of[i] = -1;
    }

    s->dry = p->dry_multiplier > 0 && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
    if (s->dry) {
        s->dry_cap = p->dry_penalty_last_n > 0 ? p->dry_penalty_last_n : SAMPLER_DRY_DEFAULT_WINDOW;
        size_t cap = (size_t)s->dry_cap;
        s->dry_ring = malloc(cap * sizeof *s->dry_ring);
        s->dry_rev = malloc(cap * sizeof *s->dry_rev);
        s->dry_z = malloc(cap * sizeof *s->dry_z);
        s->dry_hit = malloc(cap * sizeof *s->dry_hit);
        s->breaker = calloc((size_t)n_vocab, 1);
        s->dry_repeat = malloc((size_t)n_vocab * sizeof *s->dry_repeat);
        if (!s->dry_ring || !s->dry_rev || !s->dry_z || !s->dry_hit || !s->breaker || !s->dry_repeat) goto fail;
        for (int i = 0; i < n_vocab; i++) s->dry_repeat[i] = -1;
        if (p->n_dry_breakers > 0 && !(s->brk = calloc((size_t)p->n_dry_breakers, sizeof *s->brk))) goto fail;
        for (int b = 0; b < p->n_dry_breakers; b++) {
            size_t len = p->dry_breakers[b] ? strlen(p->dry_breakers[b]) : 0;
            if (len == 0) continue;
            if (!(s->brk[s->n_brk++] = strdup(p->dry_breakers[b]))) goto fail;
            if ((int)len > s->brk_max) s->brk_max = (int)len;
        }
        s->after = malloc((size_t)s->brk_max + 1);
        s->after_tok = malloc(((size_t)s->brk_max + 1) * sizeof *s->after_tok);
        if (!s->after || !s->after_tok) goto fail;
    }
    s->mu = 2.0f * p->mirostat_tau;

    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->w = malloc((size_t)n_vocab * sizeof *s->w);
    if (p->typical_p < 1.0f && !(s->key = malloc((size_t)n_vocab * sizeof *s->key))) goto fail;
    s->saved_cap = p->n_logit_bias + hist_cap + s->dry_cap;
    if (s->saved_cap > 0) s->saved = malloc((size_t)s->saved_cap * sizeof *s->saved);
    if (!s->cand || !s->w || (s->saved_cap > 0 && !s->saved)) goto fail;

    rng_seed(s->rng, p->has_seed ? p->seed : clock_seed());
    return s;
fail:
    sampler_free(s);
    return NULL;
}

/* ---- penalty history ------------------------------------------------------ */

static void hist_add(gl_sampler *s, int32_t t) {
    int k = s->slot_of[t];
    if (k >= 0) {
        s->hist_cnt[k]++;
        return;
    }
    k = s->n_hist++;
    s->slot_of[t] = k;
    s->hist_tok[k] = t;
    s->hist_cnt[k] = 1;
}

static void hist_remove(gl_sampler *s, int32_t t) {
    int k = s->slot_of[t];
    if (--s->hist_cnt[k] > 0) return;
    int last = --s->n_hist;  /* fill the hole with the last entry */
    s->hist_tok[k] = s->hist_tok[last];
    s->hist_cnt[k] = s->hist_cnt[last];
    s->slot_of[s->hist_tok[k]] = k;
    s->slot_of[t] = -1;
}

void sampler_set_breaker(gl_sampler *s, int32_t token) {
    if (s->dry && token >= 0 && token < s->n_vocab) s->breaker[token] = 1;
}

/* Whether text[0..len) holds one of the breakers; starts[c]: some breaker
 * begins with byte c (most bytes of most tokens fail that one lookup). */
static bool holds_breaker(const gl_sampler *s, const char *text, size_t len, const bool starts[256]) {
    for (size_t i = 0; i < len; i++) {
        if (!starts[(unsigned char)text[i]]) continue;
        for (int b = 0; b < s->n_brk; b++) {
            size_t n = strlen(s->brk[b]);
            if (n <= len - i && !memcmp(text + i, s->brk[b], n)) return true;
        }
    }
    return false;
}

void sampler_set_text(gl_sampler *s, sampler_piece_fn piece, const void *ctx) {
    if (!s->dry) return;
    s->piece = piece;
    s->piece_ctx = ctx;
    bool starts[256] = {false};
    for (int b = 0; b < s->n_brk; b++) starts[(unsigned char)s->brk[b][0]] = true;
    for (int32_t t = 0; t < s->n_vocab; t++) {
        size_t len;
        const char *text = piece(ctx, t, &len);
        if (text && holds_breaker(s, text, len, starts)) s->breaker[t] = 1;
    }
}

static void dry_accept(gl_sampler *s, int32_t token) {
    if (s->dry_len == s->dry_cap) {
        s->dry_ring[s->dry_head] = token;
        s->dry_head = (s->dry_head + 1) % s->dry_cap;
    } else {
        s->dry_ring[(s->dry_head + s->dry_len++) % s->dry_cap] = token;
    }
}

void sampler_accept(gl_sampler *s, int32_t token) {
    if (token < 0 || token >= s->n_vocab) return;
    if (s->dry) dry_accept(s, token);
    if (!s->penalize) return;
    if (s->ring) {
        if (s->ring_len == s->ring_cap) {
            hist_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % s->ring_cap;
        } else {
            s->ring[(s->ring_head + s->ring_len++) % s->ring_cap] = token;
        }
    }
    hist_add(s, token);
}

void sampler_reset(gl_sampler *s) {
    /* The RNG and mirostat's mu keep going: a restarted request keeps its
     * generated tokens. */
    s->dry_len = s->dry_head = 0;
    if (!s->penalize) return;
    for (int k = 0; k < s->n_hist; k++) s->slot_of[s->hist_tok[k]] = -1;
    s->n_hist = 0;
    s->ring_len = s->ring_head = 0;
}

/* ---- log-probabilities ---------------------------------------------------- */

/* NaN means "impossible"; +inf would poison max-subtraction, so it becomes
 * the largest finite logit. */
static inline float clean_logit(float x) {
    /* branch-free, so a loop over a row vectorizes (a branch per logit cost
     * ~100 us over Gemma 3's 262144 each token) */
    x = x != x ? -INFINITY : x;
    return x == INFINITY ? FLT_MAX : x;
}

static void clean_logits(float *logits, int n) {
    for (int i = 0; i < n; i++) logits[i] = clean_logit(logits[i]);
}

/* "a ranks above b": larger logit, ties to the lower id, so every selection
 * here is deterministic. */
static inline bool better(const float *key, int32_t a, int32_t b) {
    return key[a] > key[b] || (key[a] == key[b] && a < b);
}

/* log sum exp of the logits, and their n_top best entries (raw logits, best
 * first) in top. Entries past n_vocab are {-1, -inf}. */
static double log_normalizer(const float *logits, int n_vocab, gl_top_logprob *top, int n_top) {
    float max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        float l = clean_logit(logits[i]);
        if (l > max) max = l;
    }
    for (int j = 0; j < n_top; j++) top[j] = (gl_top_logprob){-1, -INFINITY};
    if (max == -INFINITY) return -INFINITY;

    double sum = 0;
    int n_filled = 0;
    for (int i = 0; i < n_vocab; i++) {
        float l = clean_logit(logits[i]);
        sum += expf(l - max);
        if (n_top == 0 || (n_filled == n_top && !(l > top[n_top - 1].logprob))) continue;
        /* insertion into the short sorted list; ids arrive ascending, so
         * equal logits stay in id order */
        int j = n_filled < n_top ? n_filled++ : n_top - 1;
        while (j > 0 && top[j - 1].logprob < l) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = (gl_top_logprob){i, l};
    }
    return max + log(sum);
}

static float logprob_of(float raw, double lse) {
    if (lse == -INFINITY || raw == -INFINITY) return -INFINITY;
    return (float)((double)raw - lse);
}

float sampler_logprob(const float *logits, int n_vocab, int32_t token, gl_top_logprob *top, int n_top) {
    double lse = log_normalizer(logits, n_vocab, top, n_top);
    for (int j = 0; j < n_top && top[j].token >= 0; j++) top[j].logprob = logprob_of(top[j].logprob, lse);
    if (token < 0 || token >= n_vocab) return -INFINITY;
    return logprob_of(clean_logit(logits[token]), lse);
}

/* ---- logit processing ----------------------------------------------------- */

/* Remember a raw logit before overwriting it, so the chosen token's raw
 * log-probability is known without copying the whole row. */
static void save_raw(gl_sampler *s, int32_t t, float raw) {
    s->saved[s->n_saved++] = (gl_logit_bias){t, raw};
}

static float raw_logit(const gl_sampler *s, const float *logits, int32_t t) {
    for (int k = 0; k < s->n_saved; k++)
        if (s->saved[k].token == t) return s->saved[k].bias;
    return logits[t];
}

static void apply_bias(gl_sampler *s, float *logits) {
    for (int k = 0; k < s->params.n_logit_bias; k++) {
        int32_t t = s->bias[k].token;
        if (t < 0 || t >= s->n_vocab) continue;
        save_raw(s, t, logits[t]);
        logits[t] += s->bias[k].bias;
    }
}

/* Repetition penalty as in CTRL / llama.cpp (pushes the logit towards
 * "less likely" whatever its sign), then OpenAI's presence and frequency. */
static void apply_penalties(gl_sampler *s, float *logits) {
    if (!s->penalize) return;
    const gl_sampling_params *p = &s->params;
    for (int k = 0; k < s->n_hist; k++) {
        int32_t t = s->hist_tok[k];
        int count = s->hist_cnt[k];
        float l = logits[t];
        save_raw(s, t, l);
        if (p->repetition_penalty != 1.0f) l = l > 0 ? l / p->repetition_penalty : l * p->repetition_penalty;
        l -= (float)count * p->frequency_penalty + p->presence_penalty;
        logits[t] = l;
    }
}

/* DRY ("don't repeat yourself", as in koboldcpp and llama.cpp): when the
 * text ends with a run that already occurred earlier in the window, the
 * token that followed the earlier run would extend the repeat; if the run
 * is at least allowed_length long, that token loses
 * multiplier * base^(length - allowed_length). Runs stop at the last
 * sequence breaker, and a breaker token itself is never penalised.
 *
 * With x the window newest first, z[k] is the length of the longest common
 * prefix of x and x[k..]: the run ending k tokens back that repeats the
 * run ending now; x[k - 1] followed it. The Z-algorithm gets every z[k] in
 * time linear in the window. */
static void dry_repeats(int32_t *z, const int32_t *x, int n) {
    int box_lo = 0, box_hi = 0; /* x[box_lo..box_hi) equals x[0..box_hi - box_lo) */
    for (int k = 1; k < n; k++) {
        int len = 0;
        if (k < box_hi) {
            len = z[k - box_lo];
            if (len > box_hi - k) len = box_hi - k;
        }
        while (k + len < n && x[len] == x[k + len]) len++;
        if (k + len > box_hi) box_lo = k, box_hi = k + len;
        z[k] = len;
    }
}

/* The newest tokens x[0..limit) that a repeat may use: a run never reaches
 * back past the last breaker. A token holding a breaker is one; a breaker
 * spread over tokens (its start ends token i's text, the rest starts the
 * text after it) ends in the token holding its last byte, which is found
 * within brk_max tokens of i. */
static int dry_limit(gl_sampler *s, const int32_t *x, int n) {
    int limit = n, n_after = 0;
    for (int i = 0; i < n && i <= limit + s->brk_max; i++) {
        if (s->breaker[x[i]] && i < limit) limit = i;
        if (!s->piece || s->brk_max < 2) {
            if (limit < n) break;
            continue;
        }
        size_t len;
        const char *text = s->piece(s->piece_ctx, x[i], &len);
        if (!text) len = 0;
        for (int b = 0; b < s->n_brk; b++) {
            const char *brk = s->brk[b];
            int m = (int)strlen(brk);
            for (int k = 1; k < m && k <= (int)len; k++) { /* k bytes of it in this token */
                if (m - k > n_after || memcmp(text + len - k, brk, (size_t)k) ||
                    memcmp(s->after, brk + k, (size_t)(m - k)))
                    continue;
                if (s->after_tok[m - k - 1] < limit) limit = s->after_tok[m - k - 1];
            }
        }
        /* the text after token i + 1 is token i's text, then what was after it */
        int keep = (int)len < s->brk_max ? (int)len : s->brk_max;
        int moved = n_after < s->brk_max - keep ? n_after : s->brk_max - keep;
        memmove(s->after + keep, s->after, (size_t)moved);
        memmove(s->after_tok + keep, s->after_tok, (size_t)moved * sizeof *s->after_tok);
        memcpy(s->after, text, (size_t)keep);
        for (int j = 0; j < keep; j++) s->after_tok[j] = i;
        n_after = keep + moved;
    }
    return limit;
}

static void apply_dry(gl_sampler *s, float *logits) {
    const gl_sampling_params *p = &s->params;
    int n = s->dry_len, allowed = p->dry_allowed_length;
    if (!s->dry || n <= allowed) return;
    int32_t *x = s->dry_rev;
    for (int i = 0; i < n; i++) x[i] = s->dry_ring[(s->dry_head + n - 1 - i) % s->dry_cap];
    int limit = dry_limit(s, x, n);
    if (limit < allowed) return;
    dry_repeats(s->dry_z, x, n);

    int n_hit = 0;
    for (int k = 1; k < n; k++) {
        int len = s->dry_z[k] < limit ? s->dry_z[k] : limit;
        int32_t t = x[k - 1];
        if (len < allowed || s->breaker[t]) continue;
        if (s->dry_repeat[t] < 0) s->dry_hit[n_hit++] = t;
        if (len > s->dry_repeat[t]) s->dry_repeat[t] = len;
    }
    /* base^exponent stays finite: the exponent stops where it would pass FLT_MAX */
    int max_exponent = p->dry_base > 1.000001f ? (int)(logf(FLT_MAX) / logf(p->dry_base)) : INT32_MAX;
    for (int h = 0; h < n_hit; h++) {
        int32_t t = s->dry_hit[h];
        int exponent = s->dry_repeat[t] - allowed;
        if (exponent > max_exponent) exponent = max_exponent;
        save_raw(s, t, logits[t]);
        logits[t] -= p->dry_multiplier * powf(p->dry_base, (float)exponent);
        s->dry_repeat[t] = -1;
    }
}

/* The scan in 16 independent lanes (lane j sees i = j mod 16), each
 * keeping its first strictly larger value, as compares and blends of four
 * 4-lane vectors (GCC / clang vector extensions at the width every x86-64
 * and ARM64 has); then the lanes' best, ties to the lower index, and the
 * tail in order: the first index of the largest value, as one strict scan
 * from logits[0] gives (a NaN never wins; a NaN logits[0] keeps 0). A
 * one-lane scan waits on each compare: ~300 us over Gemma 3's 262144 logits,
 * each token, against ~40 us. */
typedef float argmax_vf __attribute__((vector_size(16)));
typedef int32_t argmax_vi __attribute__((vector_size(16)));
enum { ARGMAX_VECS = 4, ARGMAX_LANES = 4 * ARGMAX_VECS };

int32_t sampler_argmax(const float *logits, int n) {
    if (n <= 0 || isnan(logits[0])) return 0;
    argmax_vf lv[ARGMAX_VECS];
    argmax_vi li[ARGMAX_VECS], idx[ARGMAX_VECS];
    for (int v = 0; v < ARGMAX_VECS; v++) {
        lv[v] = (argmax_vf){logits[0], logits[0], logits[0], logits[0]};
        li[v] = (argmax_vi){0, 0, 0, 0};
        idx[v] = (argmax_vi){4 * v, 4 * v + 1, 4 * v + 2, 4 * v + 3};
    }
    int i = 0;
    for (; i + ARGMAX_LANES <= n; i += ARGMAX_LANES)
        for (int v = 0; v < ARGMAX_VECS; v++) {
            argmax_vf x;
            memcpy(&x, logits + i + 4 * v, sizeof x);
            argmax_vi up = x > lv[v];
            lv[v] = (argmax_vf)(((argmax_vi)x & up) | ((argmax_vi)lv[v] & ~up));
            li[v] = (idx[v] & up) | (li[v] & ~up);
            idx[v] += ARGMAX_LANES;
        }
    int32_t best = 0;
    float best_logit = logits[0];
    for (int v = 0; v < ARGMAX_VECS; v++)
        for (int j = 0; j < 4; j++)
            if (lv[v][j] > best_logit || (lv[v][j] == best_logit && li[v][j] < best))
                best = li[v][j], best_logit = lv[v][j];
    for (; i < n; i++)
        if (logits[i] > best_logit) best = i, best_logit = logits[i];
    return best;
}

/* ---- ranking candidate ids ------------------------------------------------ */

static inline void swap_ids(int32_t *a, int32_t *b) {
    int32_t t = *a;
    *a = *b;
    *b = t;
}

/* Min-heap by rank: the root is the worst id in the heap. */
static void sift_down(int32_t *h, int n, int i, const float *key) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && better(key, h[c], h[c + 1])) c++;
        if (!better(key, h[i], h[c])) return;
        swap_ids(&h[i], &h[c]);
        i = c;
    }
}

static void heapify(int32_t *h, int n, const float *key) {
    for (int i = n / 2 - 1; i >= 0; i--) sift_down(h, n, i, key);
}

/* The k best ids of the vocabulary into cand[0..k), in no order: a min-heap
 * of the k best so far; most tokens lose one comparison with its root. */
static void select_top_k(int32_t *cand, const float *logits, int n_vocab, int k) {
    for (int i = 0; i < k; i++) cand[i] = i;
    heapify(cand, k, logits);
    for (int i = k; i < n_vocab; i++) {
        if (!better(logits, i, cand[0])) continue;
        cand[0] = i;
        sift_down(cand, k, 0, logits);
    }
}

/* Best first: insertion sort for short runs, heapsort otherwise (the
 * min-heap hands out the worst id, which goes to the back). */
static void sort_best_first(int32_t *ids, int n, const float *key) {
    if (n <= 32) {
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && better(key, ids[j], ids[j - 1]); j--) swap_ids(&ids[j], &ids[j - 1]);
        return;
    }
    heapify(ids, n, key);
    for (int end = n - 1; end > 0; end--) {
        swap_ids(&ids[0], &ids[end]);
        sift_down(ids, end, 0, key);
    }
}

/* Reorders ids so that ids[0..end) is the smallest best-first prefix whose
 * weight reaches target, and returns end (n if rounding keeps it short).
 * A quickselect on mass: partition around a pivot, keep the side the
 * prefix ends in; expected O(n), with a heapsort once a bad run of pivots
 * has used up its budget. */
static int nucleus_end(int32_t *ids, int n, const float *w, const float *key, double target) {
    int lo = 0, hi = n; /* ids[0..lo) are in and rank above ids[lo..n); the end is <= hi */
    double mass = 0;    /* of ids[0..lo) */
    for (int budget = 64; hi - lo > 32 && budget > 0; budget--) {
        int mid = lo + (hi - lo) / 2;
        if (better(key, ids[mid], ids[lo])) swap_ids(&ids[mid], &ids[lo]);
        if (better(key, ids[hi - 1], ids[lo])) swap_ids(&ids[hi - 1], &ids[lo]);
        if (better(key, ids[mid], ids[hi - 1])) swap_ids(&ids[mid], &ids[hi - 1]);
        int32_t pivot = ids[hi - 1]; /* the median of the three */
        int q = lo;
        double upper = 0;
        for (int j = lo; j < hi - 1; j++) {
            if (!better(key, ids[j], pivot)) continue;
            swap_ids(&ids[q], &ids[j]);
            upper += w[ids[q++]];
        }
        swap_ids(&ids[q], &ids[hi - 1]);
        if (mass + upper >= target) {
            hi = q;
        } else {
            mass += upper + w[pivot];
            lo = q + 1;
            if (mass >= target) return lo;
        }
    }
    sort_best_first(ids + lo, hi - lo, key);
    for (int j = lo; j < hi; j++) {
        mass += w[ids[j]];
        if (mass >= target) return j + 1;
    }
    return hi;
}

/* ---- sampling ------------------------------------------------------------- */

/* The candidate set: all n tokens when ids is NULL, else ids[0..n). */
typedef struct cand_set {
    int32_t *ids;
    int n;
} cand_set;

static inline int32_t cand_id(cand_set c, int j) { return c.ids ? c.ids[j] : j; }

/* Keep the candidates with weight >= threshold, compacted into dst. */
static cand_set filter_weight(cand_set c, const float *w, float threshold, int32_t *dst) {
    int n = 0;
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        if (w[t] >= threshold) dst[n++] = t;
    }
    return (cand_set){dst, n};
}

/* Top-p: the smallest best-first prefix whose mass reaches top_p * z.
 * A token with probability below (1 - p) / (n - 1) can never be in it (the
 * tokens above the bound already hold more than p), so only the survivors
 * are ranked. min_w (min-p) filters in the same pass: both sets are
 * best-first prefixes, so their intersection is the shorter one. */
static cand_set nucleus(cand_set c, const float *w, const float *key, double z, float top_p,
                        float min_w, int32_t *dst) {
    double bound = c.n > 1 ? (1.0 - top_p) / (c.n - 1) * z : 0.0;
    float threshold = fmaxf((float)bound, min_w);
    if (threshold > 1.0f) threshold = 1.0f; /* the best token (weight 1) always survives */
    cand_set f = filter_weight(c, w, threshold, dst);
    double target = fmax((double)top_p * z, 0.5); /* at least the best token */
    f.n = nucleus_end(f.ids, f.n, w, key, target);
    return f;
}

/* Draw from the weights of the candidates (they need not sum to 1). */
static int32_t draw(gl_sampler *s, cand_set c) {
    double total = 0;
    for (int j = 0; j < c.n; j++) total += s->w[cand_id(c, j)];
    double r = rng_uniform(s->rng) * total, mass = 0;
    int32_t last_positive = cand_id(c, 0);
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        if (s->w[t] <= 0) continue;
        last_positive = t;
        mass += s->w[t];
        if (mass > r) return t;
    }
    return last_positive; /* r landed in the rounding error */
}

/* All the candidates' ids in s->cand (a set that was the whole vocabulary
 * becomes a list, for samplers that reorder it). */
static cand_set as_list(gl_sampler *s, cand_set c) {
    if (c.ids) return c;
    for (int j = 0; j < c.n; j++) s->cand[j] = j;
    return (cand_set){s->cand, c.n};
}

/* Top-n-sigma: the tokens whose logit is within n standard deviations
 * (over the finite logits of the vocabulary) of the largest. */
static cand_set top_n_sigma(gl_sampler *s, const float *logits) {
    int n_vocab = s->n_vocab, n_finite = 0;
    double sum = 0, max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) {
        if (logits[i] == -INFINITY) continue;
        n_finite++;
        sum += logits[i];
        if (logits[i] > max) max = logits[i];
    }
    if (n_finite == 0) return (cand_set){NULL, n_vocab};
    double mean = sum / n_finite, var = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] != -INFINITY) var += (logits[i] - mean) * (logits[i] - mean);
    float threshold = (float)(max - s->params.top_n_sigma * sqrt(var / n_finite));
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] >= threshold && logits[i] != -INFINITY) s->cand[n++] = i;
    return (cand_set){s->cand, n};
}

/* Dynamic temperature: the candidates' entropy at temperature 1, over its
 * largest possible value log n, mapped onto [T - range, T + range] through
 * x^exponent: a confident distribution is sampled cold, a flat one hot. */
static float dynamic_temperature(gl_sampler *s, cand_set c, const float *logits, float max) {
    const gl_sampling_params *p = &s->params;
    if (c.n <= 1) return p->temperature;
    double z = 0, zl = 0; /* entropy = log z - sum(w (l - max)) / z */
    for (int j = 0; j < c.n; j++) {
        float d = logits[cand_id(c, j)] - max;
        double w = exp(d);
        z += w;
        if (w > 0) zl += w * d;
    }
    double entropy = log(z) - zl / z;
    double normalized = fmin(fmax(entropy / log((double)c.n), 0.0), 1.0);
    float lo = fmaxf(p->temperature - p->dynatemp_range, 0.0f), hi = p->temperature + p->dynatemp_range;
    return lo + (hi - lo) * powf((float)normalized, p->dynatemp_exponent);
}

/* Locally typical sampling (Meister et al.): rank the candidates by how far
 * their surprise -log p lies from the entropy, closest first, and keep the
 * shortest such prefix holding typical_p of the mass. With w = exp(d),
 * d = (l - max) / T: -log p = log z - d, and the entropy is
 * log z - sum(w d) / z, so no logarithm per token is needed. */
static cand_set typical(gl_sampler *s, cand_set c, const float *logits, float max, float inv_t, double z) {
    float *w = s->w, *key = s->key;
    double wd = 0;
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        if (w[t] > 0) wd += w[t] * (double)((logits[t] - max) * inv_t);
    }
    double log_z = log(z), entropy = log_z - wd / z;
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        double surprise = log_z - (double)((logits[t] - max) * inv_t);
        key[t] = w[t] > 0 ? (float)-fabs(surprise - entropy) : -INFINITY;
    }
    c = as_list(s, c);
    c.n = nucleus_end(c.ids, c.n, w, key, (double)s->params.typical_p * z);
    if (c.n < 1) c.n = 1;
    return c;
}

/* XTC ("exclude top choices"): with probability xtc_probability, when two
 * or more candidates reach xtc_threshold, all of them but the least likely
 * go, steering away from the most predictable continuation. */
static cand_set xtc(gl_sampler *s, cand_set c, const float *logits) {
    const gl_sampling_params *p = &s->params;
    if (c.n < 2 || rng_uniform(s->rng) >= p->xtc_probability) return c;
    double z = 0;
    for (int j = 0; j < c.n; j++) z += s->w[cand_id(c, j)];
    float threshold = (float)(p->xtc_threshold * z);
    int n_above = 0;
    int32_t last_above = -1; /* the least likely of them */
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        if (s->w[t] < threshold) continue;
        n_above++;
        if (last_above < 0 || better(logits, last_above, t)) last_above = t;
    }
    if (n_above < 2) return c;
    int n = 0;
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        if (s->w[t] < threshold || t == last_above) s->cand[n++] = t;
    }
    return (cand_set){s->cand, n};
}

/* The best candidate (greedy within the set). */
static int32_t best_of(cand_set c, const float *logits) {
    int32_t best = cand_id(c, 0);
    for (int j = 1; j < c.n; j++)
        if (better(logits, cand_id(c, j), best)) best = cand_id(c, j);
    return best;
}

/* Top-n-sigma, top-k, temperature, typical-p, top-p, min-p, XTC, draw. */
static int32_t sample_truncated(gl_sampler *s, const float *logits) {
    const gl_sampling_params *p = &s->params;
    cand_set c = {NULL, s->n_vocab};
    if (p->top_n_sigma > 0) c = top_n_sigma(s, logits);
    /* more than k tokens within n sigma: the k best of the vocabulary are among them */
    if (p->top_k > 0 && p->top_k < c.n) {
        select_top_k(s->cand, logits, s->n_vocab, p->top_k);
        c = (cand_set){s->cand, p->top_k};
    }
    float max = -INFINITY;
    for (int j = 0; j < c.n; j++) max = fmaxf(max, logits[cand_id(c, j)]);
    if (max == -INFINITY) return sampler_argmax(logits, s->n_vocab); /* everything banned */

    float temperature = p->dynatemp_range > 0 ? dynamic_temperature(s, c, logits, max) : p->temperature;
    if (temperature <= 1e-6f) return best_of(c, logits);
    float inv_t = 1.0f / temperature;
    double z = 0;
    for (int j = 0; j < c.n; j++) {
        int32_t t = cand_id(c, j);
        s->w[t] = expf((logits[t] - max) * inv_t);
        z += s->w[t];
    }
    if (p->typical_p < 1.0f) {
        c = typical(s, c, logits, max, inv_t, z);
        /* the best survivor may be below weight 1: scale it back to 1, as
         * top-p and min-p expect */
        float w_max = 0;
        for (int j = 0; j < c.n; j++) w_max = fmaxf(w_max, s->w[c.ids[j]]);
        z = 0;
        for (int j = 0; j < c.n; j++) z += (s->w[c.ids[j]] /= w_max);
    }
    float min_w = p->min_p > 0 ? fminf(p->min_p, 1.0f) : 0.0f;
    if (p->top_p < 1.0f)
        c = nucleus(c, s->w, logits, z, p->top_p, min_w, s->cand);
    else if (min_w > 0)
        c = filter_weight(c, s->w, min_w, s->cand);
    if (p->xtc_probability > 0 && p->xtc_threshold <= 0.5f) c = xtc(s, c, logits);
    return draw(s, c);
}

/* Mirostat: temperature, then a truncation that steers the surprise
 * (-log2 p) of the drawn tokens towards tau; mu, the bound, learns from
 * each draw. Version 1 (Basu et al.) estimates the Zipf exponent s of the
 * top 100 tokens and keeps the k tokens whose expected surprise is mu;
 * version 2 keeps the tokens whose surprise is at most mu. */
enum { MIROSTAT_M = 100 };

static int mirostat_k(gl_sampler *s, const float *logits) {
    int m = s->n_vocab < MIROSTAT_M ? s->n_vocab : MIROSTAT_M;
    select_top_k(s->cand, logits, s->n_vocab, m);
    sort_best_first(s->cand, m, logits);
    double sum_tb = 0, sum_tt = 0;
    for (int i = 0; i + 1 < m && s->w[s->cand[i + 1]] > 0; i++) {
        double t = log((double)(i + 2) / (i + 1));
        sum_tb += t * log((double)s->w[s->cand[i]] / s->w[s->cand[i + 1]]);
        sum_tt += t * t;
    }
    if (sum_tt == 0) return 1; /* one possible token */
    double s_hat = sum_tb / sum_tt, eps = s_hat - 1, n = s->n_vocab, two_mu = exp2((double)s->mu);
    /* eps / (1 - n^-eps) tends to 1 / ln n as eps -> 0 */
    double ratio = fabs(eps) < 1e-6 ? 1.0 / log(n) : eps / (1 - pow(n, -eps));
    double k = pow(ratio * two_mu, 1 / s_hat);
    if (!(k >= 1)) return 1;
    return k >= n ? s->n_vocab : (int)k;
}

static int32_t sample_mirostat(gl_sampler *s, const float *logits) {
    const gl_sampling_params *p = &s->params;
    int n_vocab = s->n_vocab;
    float max = -INFINITY;
    for (int i = 0; i < n_vocab; i++) max = fmaxf(max, logits[i]);
    if (max == -INFINITY) return sampler_argmax(logits, n_vocab);
    float inv_t = 1.0f / p->temperature;
    double z = 0;
    for (int i = 0; i < n_vocab; i++) z += (s->w[i] = expf((logits[i] - max) * inv_t));

    cand_set c = {NULL, n_vocab};
    if (p->mirostat == 1) {
        int k = mirostat_k(s, logits);
        if (k < n_vocab) {
            select_top_k(s->cand, logits, n_vocab, k);
            c = (cand_set){s->cand, k};
        }
    } else {
        /* p >= 2^-mu; the best token (weight 1) always stays */
        c = filter_weight(c, s->w, fminf((float)(z * exp2(-(double)s->mu)), 1.0f), s->cand);
    }
    double zc = 0;
    for (int j = 0; j < c.n; j++) zc += s->w[cand_id(c, j)];
    int32_t t = draw(s, c);
    double surprise = -log2(s->w[t] / zc);
    s->mu -= p->mirostat_eta * (float)(surprise - p->mirostat_tau);
    return t;
}

int32_t sampler_sample(gl_sampler *s, float *logits, float *logprob, gl_top_logprob *top) {
    const gl_sampling_params *p = &s->params;
    int n_top = top ? p->n_logprobs : 0;

    clean_logits(logits, s->n_vocab);
    double lse = (logprob || n_top > 0) ? log_normalizer(logits, s->n_vocab, top, n_top) : 0;

    s->n_saved = 0;
    apply_bias(s, logits);
    apply_penalties(s, logits);
    apply_dry(s, logits);

    int32_t chosen;
    if (p->temperature <= 1e-6f || (p->top_k == 1 && !p->mirostat))
        chosen = sampler_argmax(logits, s->n_vocab);
    else
        chosen = p->mirostat ? sample_mirostat(s, logits) : sample_truncated(s, logits);

    if (logprob) *logprob = logprob_of(raw_logit(s, logits, chosen), lse);
    for (int j = 0; j < n_top && top[j].token >= 0; j++) top[j].logprob = logprob_of(top[j].logprob, lse);
    return chosen;
}
