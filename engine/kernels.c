/* kernels.c -- the thread pool, the choice of kernel implementation, the
 * portable (scalar reference) kernels, and the work split of matmul and
 * attention over the pool.
 *
 * Matmul has two paths. The scalar one dequantizes a weight row into a
 * per-thread buffer and dots it with every token. The fast ones (simd.h)
 * quantize the activations to 8 bits once per call and run integer dot
 * products on tiles of rows x tokens. Either way every output is computed by
 * one thread with a summation order fixed by its row and token alone. */
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "quant.h"
#include "simd.h"

/* ---- thread pool ------------------------------------------------------------
 * Workers spin briefly on a generation counter before sleeping on a condition
 * variable: a decode step issues hundreds of small jobs, and a futex round
 * trip per job would cost more than the job itself. After POOL_PAUSES pauses
 * a waiting thread (a worker between jobs, the caller waiting for a worker's
 * last piece) yields its CPU at each check instead: on a host with more
 * runnable threads than cores, the thread it waits for may be the one the OS
 * left without a CPU, and pure spinning keeps it off for a whole time slice
 * (on a quiet host a yield returns at once, a microsecond's delay). */

#define POOL_PAUSES 256
#define POOL_SPIN (POOL_PAUSES + 2000) /* checks before a worker sleeps */

typedef struct pool_worker {
    struct kern_pool *pool;
    int ith;                   /* 1..n_threads-1; the caller is 0 */
    pthread_t thread;
    float *scratch;            /* per-thread buffer, see pool_scratch */
    size_t scratch_len;        /* floats */
} pool_worker;

struct kern_pool {
    int n_threads;
    pool_worker *workers;      /* [n_threads], slot 0 is the caller's */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    atomic_uint generation;    /* bumped for each job */
    atomic_uint closed;        /* generation whose work is all handed out */
    atomic_int inside;         /* workers running fn now */
    atomic_int sleepers;       /* workers blocked on cond: only then is a wake-up needed */
    atomic_bool quit;
    void (*fn)(void *, int, int);
    void *arg;
    uint8_t *act;              /* quantized activations of the current matmul */
    size_t act_cap;            /* bytes */
    int act_bits;              /* 16, 12 or 8, kern_pool_set_act_bits */
    float *attn_parts;         /* segment parts of a split attention call */
    size_t attn_parts_cap;     /* floats */
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* One wait of a thread that has checked spins times already. */
static inline void pool_pause(int spins) {
    if (spins < POOL_PAUSES) cpu_relax();
    else sched_yield();
}

static void *pool_main(void *p) {
    pool_worker *w = p;
    kern_pool *pool = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned gen;
        int spins = 0;
        while ((gen = atomic_load_explicit(&pool->generation, memory_order_acquire)) == seen &&
               !atomic_load(&pool->quit)) {
            if (++spins < POOL_SPIN) {
                pool_pause(spins);
                continue;
            }
            /* Announce the sleep before re-checking, so kern_pool_run either
             * sees a sleeper and signals, or we see its new generation. */
            pthread_mutex_lock(&pool->mutex);
            atomic_fetch_add(&pool->sleepers, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->quit))
                pthread_cond_wait(&pool->cond, &pool->mutex);
            atomic_fetch_sub(&pool->sleepers, 1);
            pthread_mutex_unlock(&pool->mutex);
            spins = 0;
        }
        if (atomic_load(&pool->quit)) return NULL;
        seen = gen;
        /* Join only while the job is open: a worker the OS ran late finds
         * it closed and skips it, instead of holding up the caller. */
        atomic_fetch_add(&pool->inside, 1);
        /* Once inside, the caller cannot pass its wait, so fn and arg stay
         * those of `gen` -- if `gen` is still the newest job. */
        if (atomic_load(&pool->generation) == gen && atomic_load(&pool->closed) != gen)
            pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_sub(&pool->inside, 1);
    }
}

kern_pool *kern_pool_create(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    kern_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->mutex, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->n_threads = 1;
    p->act_bits = 16;
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        if (pthread_create(&p->workers[i].thread, NULL, pool_main, &p->workers[i]) != 0) break;
        p->n_threads = i + 1;
    }
    return p;
}

void kern_pool_free(kern_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mutex);
    atomic_store(&p->quit, true);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i].thread, NULL);
    for (int i = 0; i < p->n_threads; i++) free(p->workers[i].scratch);
    free(p->act);
    free(p->attn_parts);
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->cond);
    free(p->workers);
    free(p);
}

int kern_pool_size(const kern_pool *p) { return p->n_threads; }

int kern_pool_set_act_bits(kern_pool *p, int bits) {
    if (bits != 8 && bits != 12 && bits != 16) return -1;
    p->act_bits = bits;
    return 0;
}

int kern_pool_reserve(kern_pool *p, size_t n_floats) {
    for (int i = 0; i < p->n_threads; i++) {
        pool_worker *w = &p->workers[i];
        if (w->scratch_len >= n_floats) continue;
        float *buf = realloc(w->scratch, n_floats * sizeof *buf);
        if (!buf) return -1;
        w->scratch = buf;
        w->scratch_len = n_floats;
    }
    return 0;
}

void kern_pool_run(kern_pool *p, void (*fn)(void *arg, int ith, int nth), void *arg) {
    if (p->n_threads == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    unsigned gen = atomic_fetch_add(&p->generation, 1) + 1;
    /* Spinning workers see the generation; only sleeping ones need the lock. */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mutex);
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mutex);
    }
    fn(arg, 0, p->n_threads);
    /* The caller's fn returns when no work is left to take; wait only for
     * workers still finishing a piece they took. */
    atomic_store(&p->closed, gen);
    for (int spins = 0; atomic_load(&p->inside) > 0; spins++) pool_pause(spins);
}

/* ---- vector ops -------------------------------------------------------------- */

/* Eight independent partial sums: lets the compiler vectorise, and fixes the
 * summation order so results never depend on the caller. */
float kern_dot(const float *a, const float *b, int n) {
    float acc[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    for (; i < n; i++) acc[i & 7] += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void kern_rmsnorm(float *out, const float *x, const float *weight, int n, float eps) {
    float ss = kern_dot(x, x, n);
    float scale = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * weight[i];
}

void kern_rope_freqs(float *inv_freq, int rope_dim, float freq_base) {
    for (int i = 0; i < rope_dim; i += 2) inv_freq[i / 2] = powf(freq_base, -(float)i / (float)rope_dim);
}

void kern_rope_angles(float *cs, int rope_dim, int pos, const float *inv_freq, float freq_scale) {
    for (int i = 0; i < rope_dim / 2; i++) {
        float theta = freq_scale * (float)pos * inv_freq[i];
        cs[2 * i] = cosf(theta);
        cs[2 * i + 1] = sinf(theta);
    }
}

void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, const float *cs) {
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * (size_t)head_dim;
        for (int i = 0; i < rope_dim; i += 2) {
            float c = cs[i], s = cs[i + 1], v0 = v[i], v1 = v[i + 1];
            v[i] = v0 * c - v1 * s;
            v[i + 1] = v0 * s + v1 * c;
        }
    }
}

void kern_rope_neox(float *x, int n_heads, int head_dim, int rope_dim, const float *cs) {
    int half = rope_dim / 2;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * (size_t)head_dim;
        for (int i = 0; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1], v0 = v[i], v1 = v[i + half];
            v[i] = v0 * c - v1 * s;
            v[i + half] = v0 * s + v1 * c;
        }
    }
}

void kern_softmax(float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++) x[i] /= sum;
}

void kern_to_f16(const float *x, uint16_t *y, int n) {
    const kern_impl *impl = kern_impl_active();
    if (impl) {
        impl->to_f16(x, y, n);
        return;
    }
    for (int i = 0; i < n; i++) y[i] = gl_fp32_to_fp16(x[i]);
}

static void swiglu_scalar(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* GELU by its tanh approximation, as Gemma's gelu_pytorch_tanh, written as
 * 0.5 g (1 + tanh(a / 2)) = g / (1 + e^-a), a = 2 sqrt(2 / pi) (g + 0.044715 g^3):
 * one exp instead of tanh, as the vector kernels (simd_body.h) compute it. */
static void geglu_scalar(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        float g = gate[i];
        float a = g * (1.5957691216057308f + 0.07135481627260025f * g * g);
        gate[i] = g / (1.0f + expf(-a)) * up[i];
    }
}

typedef struct swiglu_job {
    float *gate;
    const float *up;
    int n;
    void (*fn)(float *gate, const float *up, int n);
    atomic_int next;          /* next piece */
} swiglu_job;

enum { SWIGLU_PIECE = 8192 };

static void swiglu_worker(void *arg, int ith, int nth) {
    swiglu_job *job = arg;
    for (;;) {
        int i = atomic_fetch_add_explicit(&job->next, SWIGLU_PIECE, memory_order_relaxed);
        if (i >= job->n) break;
        job->fn(job->gate + i, job->up + i, job->n - i < SWIGLU_PIECE ? job->n - i : SWIGLU_PIECE);
    }
    (void)ith, (void)nth;
}

static void glu_run(kern_pool *p, float *gate, const float *up, int n, void (*fn)(float *, const float *, int)) {
    swiglu_job job = {.gate = gate, .up = up, .n = n, .fn = fn};
    atomic_init(&job.next, 0);
    if (n <= SWIGLU_PIECE) swiglu_worker(&job, 0, 1); /* a decode step's worth: not worth a hand-out */
    else kern_pool_run(p, swiglu_worker, &job);
}

void kern_swiglu(kern_pool *p, float *gate, const float *up, int n) {
    const kern_impl *impl = kern_impl_active();
    glu_run(p, gate, up, n, impl ? impl->swiglu : swiglu_scalar);
}

void kern_geglu(kern_pool *p, float *gate, const float *up, int n) {
    const kern_impl *impl = kern_impl_active();
    glu_run(p, gate, up, n, impl ? impl->geglu : geglu_scalar);
}

void kern_get_row(const gl_tensor *w, int64_t row, float *out) {
    size_t row_bytes = gl_type_row_bytes(w->type, w->n_cols);
    gl_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * row_bytes, out, w->n_cols);
}

/* ---- choosing the implementation ----------------------------------------------- */

static pthread_once_t backend_once = PTHREAD_ONCE_INIT;
static const kern_impl *backend; /* NULL = scalar */

static const kern_impl *best_impl(void) {
    const kern_impl *impl = kern_impl_amx();
    if (!impl) impl = kern_impl_avx512();
    return impl ? impl : kern_impl_avx2();
}

/* The implementation a name asks for; false when unknown or not runnable. */
static bool impl_by_name(const char *name, const kern_impl **out) {
    if (!strcmp(name, "scalar")) *out = NULL;
    else if (!strcmp(name, "auto")) *out = best_impl();
    else if (!strcmp(name, "avx512")) *out = kern_impl_avx512();
    else if (!strcmp(name, "amx")) *out = kern_impl_amx();
    else if (!strcmp(name, "avx2")) *out = kern_impl_avx2();
    else return false;
    return *out || !strcmp(name, "scalar") || !strcmp(name, "auto");
}

static void backend_init(void) {
    const kern_impl *impl;
    const char *env = getenv("GENLOOP_KERNELS");
    /* An unknown or unsupported name keeps the best. */
    backend = env && *env && impl_by_name(env, &impl) ? impl : best_impl();
}

int kern_set_backend(const char *name) {
    pthread_once(&backend_once, backend_init);
    const kern_impl *impl;
    if (!impl_by_name(name, &impl)) return -1;
    backend = impl;
    return 0;
}

const kern_impl *kern_impl_active(void) {
    pthread_once(&backend_once, backend_init);
    return backend;
}

const char *kern_backend(void) {
    const kern_impl *impl = kern_impl_active();
    return impl ? impl->name : "scalar";
}

/* ---- activation quantization (the reference the SIMD versions match) ---------- */

/* n floats -> coarse q and residual q2 (see simd.h); returns the unit. */
/* res steps of the residual per coarse one (KQ_RES16, KQ_RES12): q2 holds
 * 256 / res times the residual's code, so x ~ unit * (256 q + q2) either way. */
static float quantize_block_ref(const float *x, int n, int8_t *q, int8_t *q2, int res) {
    float amax = 0;
    for (int i = 0; i < n; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f, id2 = id * (float)res;
    const float rmax = (float)kq_res_max(res);
    for (int i = 0; i < n; i++) {
        float qf = nearbyintf(x[i] * id);
        float r2 = nearbyintf(fmaf(-qf, d, x[i]) * id2);
        q[i] = (int8_t)qf;
        q2[i] = (int8_t)((int)(r2 > rmax ? rmax : r2 < -rmax ? -rmax : r2) * (1 << kq_res_shift(res)));
    }
    return d * (1.0f / 256.0f);
}

void kern_quantize_32_ref(const float *x, kq8_32 *y, int64_t n, int res) {
    for (int64_t b = 0; b < n / 32; b++, x += 32) {
        y[b].d = quantize_block_ref(x, 32, y[b].q, y[b].q2, res);
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += 256 * y[b].q[i] + y[b].q2[i];
        y[b].s = y[b].d * (float)sum;
    }
}

void kern_quantize_256_ref(const float *x, kq8_256 *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        y[b].d = quantize_block_ref(x, 256, y[b].q, y[b].q2, KQ_RES16);
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += 256 * y[b].q[16 * j + i] + y[b].q2[16 * j + i];
            y[b].bsums[j] = sum;
        }
    }
}

void kern_quantize_32_coarse(const kern_impl *impl, const float *x, kq8_32 *y, int64_t n) {
    impl->quantize_32(x, y, n, KQ_RES16);
    for (int64_t b = 0; b < n / 32; b++) {
        int sum = 0;
        for (int i = 0; i < 32; i++) sum += y[b].q[i];
        memset(y[b].q2, 0, sizeof y[b].q2);
        y[b].s = y[b].d * (float)(256 * sum);
    }
}

void kern_quantize_256_coarse(const kern_impl *impl, const float *x, kq8_256 *y, int64_t n) {
    impl->quantize_256(x, y, n);
    for (int64_t b = 0; b < n / 256; b++) {
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += y[b].q[16 * j + i];
            y[b].bsums[j] = 256 * sum;
        }
        memset(y[b].q2, 0, sizeof y[b].q2);
    }
}

/* A short tail's m blocks (tmp) into lanes (simd.h): the coarse parts into
 * q, the residuals into q2 when there is room for them (16 bits), each
 * lane's sum of its values (256 q + q2, or the coarse q alone) times -128
 * into off, block j's unit (its d times unit_scale) into d. */
static void fill_short_tail(const kq8_32 *tmp, int m, int8_t q[2][64], int8_t q2[2][64], int32_t off[16], float d[16],
                            float unit_scale) {
    for (int j = 0; j < m; j++) d[j] = tmp[j].d * unit_scale;
    for (int v = 0; v < 2; v++)
        for (int lane = 0; lane < 16; lane++) {
            int j = 0, e0 = 0;
            if (!kq_tail_lane(m, v, lane, &j, &e0)) continue;
            memcpy(&q[v][4 * lane], &tmp[j].q[e0], 4);
            if (q2) memcpy(&q2[v][4 * lane], &tmp[j].q2[e0], 4);
            for (int e = 0; e < 4; e++) off[lane] -= 128 * (q2 ? 256 * tmp[j].q[e0 + e] + tmp[j].q2[e0 + e] : tmp[j].q[e0 + e]);
        }
}

void kern_quantize_x16(const kern_impl *impl, const float *x, kq16_chunk *y, int64_t n, int res) {
    int64_t nb = n / 32;
    for (int64_t c = 0; c * 16 < nb; c++) {
        int m = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        if (m == 16 && impl->quantize_x16) {
            impl->quantize_x16(x + 512 * c, &y[c], res);
            continue;
        }
        kq8_32 tmp[16];
        impl->quantize_32(x + 512 * c, tmp, 32 * (int64_t)m, res);
        kq16_chunk *ch = &y[c];
        memset(ch, 0, sizeof *ch);
        if (m <= KQ_SHORT_TAIL) {
            kq16_tail *tail = (kq16_tail *)ch;
            for (int j = 0; j < m; j++) tail->s[j] = tmp[j].s;
            fill_short_tail(tmp, m, tail->q, tail->q2, tail->off, tail->d, 1.0f);
            continue;
        }
        /* pair order: pair v of block j at P = 16 v + j (simd.h) */
        const bool half_tail = m <= KQ16_HALF_TAIL;
        uint8_t *pairs = (uint8_t *)&ch->q[0][0];
        for (int j = 0; j < m; j++) {
            int16_t v[32];
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) v[i] = (int16_t)(256 * tmp[j].q[i] + tmp[j].q2[i]), sum += v[i];
            for (int pv = 0; pv < 16; pv++) {
                memcpy(pairs + 4 * (16 * pv + j), &v[2 * pv], 4);
                if (half_tail) memcpy(pairs + 4 * (16 * pv + j + 8), &v[2 * pv], 4);
            }
            ch->d[j] = tmp[j].d;
            ch->s[j] = tmp[j].s;
            ch->off[j] = -8 * sum;
            if (half_tail) ch->off[j + 8] = -8 * sum;
        }
    }
}

void kern_turn_k16_group(const kern_impl *impl, uint8_t *act, int n_tok, size_t act_stride, int64_t n_cols, int g) {
    kq16_kt *turned = (kq16_kt *)kern_amx_region(act, n_tok, act_stride);
    impl->turn_k16(act + (size_t)g * KQT_TOKENS * act_stride, act_stride, (int)(n_cols / 256),
                   turned + (size_t)g * (size_t)(n_cols / 256));
}

void kern_turn_k16(const kern_impl *impl, uint8_t *act, int n_tok, size_t act_stride, int64_t n_cols) {
    if (!impl->turn_k16 || !kern_k16_turned(n_cols, n_tok)) return;
    for (int g = 0; g < n_tok / KQT_TOKENS; g++) kern_turn_k16_group(impl, act, n_tok, act_stride, n_cols, g);
}

/* The K-quants' activations take one unit per super-block (quantize_256),
 * so a super-block's dots summed with the weights' integer scales stay one
 * exact integer (simd.h, kq16_k). */
void kern_quantize_k16(const kern_impl *impl, const float *x, kq16_k *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        kq8_256 tmp;
        impl->quantize_256(x, &tmp, 256);
        if (impl->k16_layout) {
            impl->k16_layout(&tmp, &y[b]);
            continue;
        }
        int32_t pair_sum = 0; /* the even sub-block's, for the 32-element block's s */
        for (int j = 0; j < 16; j++) {
            int32_t sum = 0;
            for (int i = 0; i < 16; i++) { /* element 16 j + i is in pair v = i / 2 */
                int16_t v = (int16_t)(256 * tmp.q[16 * j + i] + tmp.q2[16 * j + i]);
                y[b].q[i / 2][2 * j + i % 2] = v;
                sum += v;
            }
            y[b].d[j] = tmp.d;
            y[b].off[j] = -32 * sum;
            if (j % 2) {
                y[b].s[j - 1] = y[b].d[j] * (float)(sum + pair_sum), y[b].s[j] = 0;
                y[b].nbs[j / 2] = y[b].nbs[8 + j / 2] = -(sum + pair_sum);
            }
            pair_sum = sum;
        }
    }
}

/* The coarse part's step in units of kq8_32's d; exact, a power of two. */
static const float coarse_step = 256.0f;

void kern_quantize_k8(const kern_impl *impl, const float *x, kq8_k *y, int64_t n) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        kq8_256 tmp;
        impl->quantize_256(x, &tmp, 256);
        int32_t pair_sum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sum = 0;
            for (int i = 0; i < 16; i++) { /* element 16 j + i is byte i % 4 of vector i / 4 */
                int8_t q = tmp.q[16 * j + i];
                y[b].q[i / 4][4 * j + i % 4] = q;
                sum += q;
            }
            y[b].d[j] = tmp.d * coarse_step;
            y[b].off[j] = -32 * sum;
            if (j % 2) {
                y[b].s[j - 1] = y[b].d[j] * (float)(sum + pair_sum), y[b].s[j] = 0;
                y[b].nbs[j / 2] = y[b].nbs[8 + j / 2] = -(sum + pair_sum);
            }
            pair_sum = sum;
        }
    }
}

/* Token t's part of an AMX group. */
static void quantize_qa_token(const kern_impl *impl, const float *x, uint8_t *group, int t, int64_t n, bool x8) {
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        kq8_256 tmp;
        impl->quantize_256(x, &tmp, 256);
        kqa16_k *y16 = (kqa16_k *)group + b;
        kqa8_k *y8 = (kqa8_k *)group + b;
        const float d = x8 ? tmp.d * coarse_step : tmp.d;
        for (int j = 0; j < 16; j += 2) { /* a 32-element block: sub-blocks j, j + 1, as kern_quantize_k16 / k8 */
            const int8_t *q = tmp.q + 16 * j, *q2 = tmp.q2 + 16 * j;
            int32_t sum = 0; /* of the block's 256 q + q2 (x8: q) */
            for (int e = 0; e < 32; e++) sum += x8 ? q[e] : 256 * q[e] + q2[e];
            for (int h = 0; h < 2; h++)
                for (int k = 0; k < 4; k++) { /* elements 16 h + 4 k .. + 3: quad k of sub-block j + h */
                    memcpy(x8 ? y8->q[j + h][k][t] : y16->q[j + h][k][t], q + 16 * h + 4 * k, 4);
                    if (!x8) memcpy(y16->q2[j + h][k][t], q2 + 16 * h + 4 * k, 4);
                }
            float (*dv)[16] = x8 ? y8->d : y16->d, (*sv)[16] = x8 ? y8->s : y16->s;
            dv[j][t] = dv[j + 1][t] = d;
            sv[j][t] = d * (float)sum;
            sv[j + 1][t] = 0;
        }
    }
}

void kern_quantize_qa(const kern_impl *impl, const float *x, int64_t n, int nt, uint8_t *group, bool x8) {
    if (impl->quantize_qa) {
        impl->quantize_qa(x, (size_t)n, nt, n / 256, group, x8);
        return;
    }
    for (int t = 0; t < nt; t++) quantize_qa_token(impl, x + (size_t)t * (size_t)n, group, t, n, x8);
}

/* A block's coarse part alone: its unit, the unit times its sum, and (off not NULL) -8 times the sum. */
static float coarse_unit(const kq8_32 *b, float *s, int32_t *off) {
    int sum = 0;
    for (int i = 0; i < 32; i++) sum += b->q[i];
    float d = b->d * coarse_step;
    *s = d * (float)sum;
    if (off) *off = -8 * sum;
    return d;
}

void kern_quantize_x8(const kern_impl *impl, const float *x, uint8_t *y, int64_t n) {
    const int64_t n_full = n / 512;
    const int m = (int)(n % 512 / 32);
    kq8_chunk *ch = (kq8_chunk *)y;
    kq8_32 tmp[16];
    /* whole chunks, then a last one of more than KQ_SHORT_TAIL blocks, zero past the row */
    const int64_t n_chunks = n_full + (m > KQ_SHORT_TAIL);
    for (int64_t c = 0; c < n_chunks; c++, x += 512) {
        const int mc = c < n_full ? 16 : m;
        if (mc == 16 && impl->quantize_x8) {
            impl->quantize_x8(x, &ch[c]);
            continue;
        }
        if (mc < 16) memset(&ch[c], 0, sizeof ch[c]);
        impl->quantize_32(x, tmp, 32 * (int64_t)mc, KQ_RES16);
        for (int j = 0; j < mc; j++) {
            for (int v = 0; v < 8; v++) memcpy(&ch[c].q[v][4 * j], &tmp[j].q[4 * v], 4);
            ch[c].d[j] = coarse_unit(&tmp[j], &ch[c].s[j], &ch[c].off[j]);
        }
    }
    if (m > 0 && m <= KQ_SHORT_TAIL) {
        kq8_tail *tail = (kq8_tail *)(ch + n_full);
        memset(tail, 0, sizeof *tail);
        impl->quantize_32(x, tmp, 32 * (int64_t)m, KQ_RES16);
        for (int j = 0; j < m; j++) (void)coarse_unit(&tmp[j], &tail->s[j], NULL);
        fill_short_tail(tmp, m, tail->q, NULL, tail->off, tail->d, coarse_step);
    }
}

/* ---- packed weights (layout in simd.h) --------------------------------------- */

static bool packable(uint32_t type) {
    return type == GL_TYPE_Q4_0 || type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_0 || type == GL_TYPE_Q5_1 ||
           type == GL_TYPE_Q8_0 || type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K || type == GL_TYPE_Q6_K;
}

kern_act_kind kern_packed_act_kind(uint32_t type) {
    return type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K || type == GL_TYPE_Q6_K ? KERN_ACT_Q16_K : KERN_ACT_Q16_X16;
}

kern_act_kind kern_packed_x8_act_kind(uint32_t type) {
    return type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K || type == GL_TYPE_Q6_K ? KERN_ACT_Q8_K : KERN_ACT_Q8_X8;
}

/* One Q6_K super-block into the packed order of simd.h. */
static void pack_q6_k(const uint8_t *src, uint8_t *dst) {
    const uint8_t *ql = src, *qh = src + 128;
    uint8_t q[256]; /* the 6-bit quants in element order, as the reference dequantizer reads them */
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
            const uint8_t *L = ql + 64 * h, *H = qh + 32 * h;
            q[128 * h + l] = (uint8_t)((L[l] & 0xf) | ((H[l] >> 0) & 3) << 4);
            q[128 * h + l + 32] = (uint8_t)((L[l + 32] & 0xf) | ((H[l] >> 2) & 3) << 4);
            q[128 * h + l + 64] = (uint8_t)((L[l] >> 4) | ((H[l] >> 4) & 3) << 4);
            q[128 * h + l + 96] = (uint8_t)((L[l + 32] >> 4) | ((H[l] >> 6) & 3) << 4);
        }
    memcpy(dst, src + 208, 2);        /* d */
    memcpy(dst + 2, src + 192, 16);   /* scales */
    uint8_t *lo = dst + 18, *hi = dst + 18 + 128;
    memset(hi, 0, 64);
    for (int v = 0; v < 8; v++)
        for (int b = 0; b < 32; b++) { /* byte b of group v: element 16 (b / 2) + 2 v + b % 2 */
            uint8_t e = q[16 * (b / 2) + 2 * v + b % 2];
            if (v < 4) lo[32 * v + b] = e & 0xf;
            else lo[32 * (v - 4) + b] |= (uint8_t)((e & 0xf) << 4);
            hi[32 * (v % 2) + b] |= (uint8_t)((e >> 4) << (2 * (v / 2)));
        }
}

/* One Q4_K or Q5_K super-block into the packed order of simd.h. */
static void pack_q45_k(const uint8_t *src, uint8_t *dst, bool five) {
    const uint8_t *qh = src + 16, *qs = src + (five ? 48 : 16);
    uint8_t q[256]; /* the quants in element order: 32 low nibbles, then their high ones; Q5_K's bit 2c + h on top */
    for (int c = 0; c < 4; c++)
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++)
                q[64 * c + 32 * h + l] =
                    (uint8_t)((qs[32 * c + l] >> (4 * h) & 0xf) | (five ? (qh[l] >> (2 * c + h) & 1) << 4 : 0));
    memcpy(dst, src, 16); /* d, dmin, the scales */
    uint8_t *hi = dst + 144;
    if (five) memset(hi, 0, 32);
    for (int k = 0; k < 4; k++)
        for (int b = 0; b < 32; b++) { /* byte b of piece k: groups k and k + 4, element 16 (b / 2) + 2 v + b % 2 */
            uint8_t e0 = q[16 * (b / 2) + 2 * k + b % 2], e1 = q[16 * (b / 2) + 2 * (k + 4) + b % 2];
            dst[16 + 32 * k + b] = (uint8_t)((e0 & 0xf) | (e1 & 0xf) << 4);
            if (five) hi[b] |= (uint8_t)((e0 >> 4) << k | (e1 >> 4) << (k + 4));
        }
}

/* A short tail of m blocks (m even) after its scales and minimums: Q5's fifth
 * bits as one 64-bit mask per tail vector (bit 4 L + e: lane L's element
 * e, kq_tail_lane), then the quants in lane order, so the tail's tile takes
 * each vector with one load: Q8_0's bytes lane by lane (64 a vector), Q4's
 * bytes of lanes 0..7 (32 a vector; their high nibbles are lanes 8..15's).
 * The m blocks' bytes fill it exactly (4 m, 32 m, 16 m). */
static uint8_t *pack_tail_lanes(const uint8_t *blk, int bb, int quants, int m, bool five, bool q8, uint8_t *dst) {
    const int n_vec = kq_tail_vectors(m);
    if (five) {
        for (int v = 0; v < n_vec; v++, dst += 8) {
            uint64_t k = 0;
            for (int L = 0; L < 16; L++) {
                int j = 0, e0 = 0;
                if (!kq_tail_lane(m, v, L, &j, &e0)) continue;
                const uint8_t *qh = blk + (size_t)j * bb + quants - 4;
                const uint32_t bits = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
                for (int e = 0; e < 4; e++) k |= (uint64_t)(bits >> (e0 + e) & 1) << (4 * L + e);
            }
            for (int i = 0; i < 8; i++) dst[i] = (uint8_t)(k >> (8 * i));
        }
    }
    for (int v = 0; v < n_vec; v++)
        for (int L = 0; L < (q8 ? 16 : 8); L++, dst += 4) {
            int j = 0, e0 = 0;
            (void)kq_tail_lane(m, v, L, &j, &e0); /* every lane of an even tail is used */
            memcpy(dst, blk + (size_t)j * bb + quants + e0, 4);
        }
    return dst;
}

static void pack_row(uint32_t type, const uint8_t *src, uint8_t *dst, int64_t nb) {
    const int bb = gl_type_get(type)->block_bytes;
    if (type == GL_TYPE_Q4_K || type == GL_TYPE_Q5_K || type == GL_TYPE_Q6_K) {
        for (int64_t b = 0; b < nb / 8; b++) {
            if (type == GL_TYPE_Q6_K) pack_q6_k(src + bb * b, dst + bb * b);
            else pack_q45_k(src + bb * b, dst + bb * b, type == GL_TYPE_Q5_K);
        }
        return;
    }
    const int hdr = type == GL_TYPE_Q4_1 || type == GL_TYPE_Q5_1 ? 4 : 2;
    const bool five = type == GL_TYPE_Q5_0 || type == GL_TYPE_Q5_1;
    const int quants = hdr + (five ? 4 : 0); /* where a block's nibbles (or Q8_0's bytes) start */
    const int n_groups = type == GL_TYPE_Q8_0 ? 16 : 8;
    for (int64_t c0 = 0; c0 < nb; c0 += 16) {
        int m = nb - c0 < 16 ? (int)(nb - c0) : 16;
        const uint8_t *blk = src + c0 * bb;
        for (int j = 0; j < m; j++) {
            memcpy(dst + 2 * j, blk + (size_t)j * bb, 2);
            if (hdr == 4) memcpy(dst + 2 * (m + j), blk + (size_t)j * bb + 2, 2);
        }
        dst += (size_t)hdr * m;
        if (m <= KQ_SHORT_TAIL && m % 2 == 0) { /* a short tail of 2 or 4 blocks, in its lanes (simd.h) */
            dst = pack_tail_lanes(blk, bb, quants, m, five, type == GL_TYPE_Q8_0, dst);
            continue;
        }
        if (five) { /* fifth bits, byte b of block j: bit p of element 4 p + b, bit 4 + p of element 16 + 4 p + b */
            for (int j = 0; j < m; j++, dst += 4) {
                const uint8_t *qh = blk + (size_t)j * bb + hdr;
                uint32_t bits = (uint32_t)qh[0] | (uint32_t)qh[1] << 8 | (uint32_t)qh[2] << 16 | (uint32_t)qh[3] << 24;
                for (int b = 0; b < 4; b++) {
                    uint8_t v = 0;
                    for (int p = 0; p < 4; p++)
                        v |= (uint8_t)((bits >> (4 * p + b) & 1) << p | (bits >> (16 + 4 * p + b) & 1) << (4 + p));
                    dst[b] = v;
                }
            }
        }
        for (int g = 0; g < n_groups; g++)
            for (int j = 0; j < m; j++, dst += 2) memcpy(dst, blk + (size_t)j * bb + quants + 2 * g, 2);
    }
}

#define HUGE_PAGE ((size_t)2 << 20)

size_t kern_pack_bytes(const gl_tensor *w) {
    const kern_impl *impl = kern_impl_active();
    /* Only for kernels that read the packed form: others would leave it unused. */
    if (w->packed || !packable(w->type) || !impl || !impl->packed_rows[w->type] ||
        w->n_cols % gl_type_get(w->type)->block_size)
        return 0;
    return gl_type_row_bytes(w->type, w->n_cols) * (size_t)w->n_rows;
}

void kern_pack_into(gl_tensor *w, void *buf) {
    size_t row_bytes = gl_type_row_bytes(w->type, w->n_cols);
    for (int64_t r = 0; r < w->n_rows; r++)
        pack_row(w->type, (const uint8_t *)w->data + (size_t)r * row_bytes, (uint8_t *)buf + (size_t)r * row_bytes,
                 w->n_cols / 32);
    w->packed = buf;
}

/* A decode step streams every weight once: on 4 KiB pages that is a TLB
 * miss every 64 lines, and the hardware prefetchers stop at every page's
 * end. So memory for weights of 2 MiB or more is asked for in 2 MiB pages
 * (transparent huge pages, which the kernel gives on madvise when its
 * setting is "madvise" or "always"), before the first write: a large
 * output matrix (Gemma 3's) reads measurably faster so (bench_matmul). */
void *kern_weights_alloc(size_t n) {
    void *buf = NULL;
    bool huge = n >= HUGE_PAGE;
    if (posix_memalign(&buf, huge ? HUGE_PAGE : 64, n ? n : 64)) return NULL;
#ifdef MADV_HUGEPAGE
    if (huge) madvise(buf, n / HUGE_PAGE * HUGE_PAGE, MADV_HUGEPAGE); /* a hint: failure leaves small pages */
#endif
    return buf;
}

_Atomic bool kern_weights_stream;

void kern_note_weights(long long delta) {
    static _Atomic long long total;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = 32L << 20; /* unknown: a desktop's */
    long long now = atomic_fetch_add(&total, delta) + delta;
    atomic_store(&kern_weights_stream, now > llc / 3);
}

int kern_pack(gl_tensor *w) {
    size_t n = kern_pack_bytes(w);
    if (!n) return 0;
    void *buf = kern_weights_alloc(n);
    if (!buf) return -1;
    kern_pack_into(w, buf);
    return 0;
}

void kern_unpack(gl_tensor *w) {
    free(w->packed);
    w->packed = NULL;
}

kern_act_kind kern_act_kind_of(uint32_t type) {
    switch (type) {
    case GL_TYPE_Q4_0: case GL_TYPE_Q4_1: case GL_TYPE_Q5_0: case GL_TYPE_Q5_1: case GL_TYPE_Q8_0:
        return KERN_ACT_Q8_32;
    case GL_TYPE_Q4_K: case GL_TYPE_Q5_K: case GL_TYPE_Q6_K:
        return KERN_ACT_Q8_256;
    default:
        return KERN_ACT_F32;
    }
}

static size_t act_row_bytes(kern_act_kind kind, int64_t n_cols) {
    if (kind == KERN_ACT_Q8_32 || kind == KERN_ACT_Q8_32_COARSE || kind == KERN_ACT_Q12_32)
        return (size_t)(n_cols / 32) * sizeof(kq8_32);
    if (kind == KERN_ACT_Q16_X16 || kind == KERN_ACT_Q12_X16) return (size_t)kq16_chunks(n_cols) * sizeof(kq16_chunk);
    if (kind == KERN_ACT_Q16_K) return (size_t)(n_cols / 256) * sizeof(kq16_k);
    if (kind == KERN_ACT_Q8_256 || kind == KERN_ACT_Q8_256_COARSE) return (size_t)(n_cols / 256) * sizeof(kq8_256);
    if (kind == KERN_ACT_Q8_X8 || kind == KERN_ACT_AMX_X8) return kq8_x8_row_bytes(n_cols);
    if (kind == KERN_ACT_AMX_X16 || kind == KERN_ACT_AMX_X12) return (size_t)kq16_chunks(n_cols) * sizeof(kq16_chunk);
    if (kind == KERN_ACT_Q8_K) return (size_t)(n_cols / 256) * sizeof(kq8_k);
    if (kind == KERN_ACT_QA_K16) return (size_t)(n_cols / 256) * sizeof(kqa16_k) / KQA_GROUP;
    if (kind == KERN_ACT_QA_K8) return (size_t)(n_cols / 256) * sizeof(kqa8_k) / KQA_GROUP;
    return (size_t)n_cols * sizeof(float);
}

/* The precision of a block-32 AMX form: 8, 12 or 16; 0 for any other kind. */
static int amx_bits(kern_act_kind kind) {
    return kind == KERN_ACT_AMX_X8 ? 8 : kind == KERN_ACT_AMX_X12 ? 12 : kind == KERN_ACT_AMX_X16 ? 16 : 0;
}

/* The residual's steps (simd.h) of the kinds quantize_32 and kern_quantize_x16 write. */
static int act_res(kern_act_kind kind) {
    return kind == KERN_ACT_Q12_32 || kind == KERN_ACT_Q12_X16 || kind == KERN_ACT_AMX_X12 ? KQ_RES12 : KQ_RES16;
}

/* The AMX form (simd.h) of n_tokens activation rows, in groups of 16. */
static size_t amx_region_bytes(kern_act_kind kind, int64_t n_cols, int n_tokens) {
    if (!amx_bits(kind)) return 0;
    return (size_t)((n_tokens + 15) / 16) * kern_amx_group_bytes(n_cols, amx_bits(kind) != 8);
}

static bool is_qa_kind(kern_act_kind kind) { return kind == KERN_ACT_QA_K16 || kind == KERN_ACT_QA_K8; }

/* Forms that keep tokens in groups of 16 (AMX's B tiles), block-32 or K-quant. */
static bool is_amx_kind(kern_act_kind kind) { return amx_bits(kind) || is_qa_kind(kind); }

/* The whole buffer of a call: the per-token rows, then any AMX form; the
 * K-quants' AMX form alone, in whole groups of tokens. */
static size_t act_bytes(kern_act_kind kind, int64_t n_cols, int n_tokens) {
    if (is_qa_kind(kind)) return (size_t)((n_tokens + KQA_GROUP - 1) / KQA_GROUP * KQA_GROUP) * act_row_bytes(kind, n_cols);
    if (kind == KERN_ACT_Q16_K) return kern_k16_act_bytes(act_row_bytes(kind, n_cols), n_cols, n_tokens);
    size_t rows = ((size_t)n_tokens * act_row_bytes(kind, n_cols) + 63) & ~(size_t)63;
    return rows + amx_region_bytes(kind, n_cols, n_tokens);
}

/* A residual byte as the AMX form at bits holds it: at 12 bits r, not 16 r. */
static int8_t amx_residual(int8_t q2, int bits) { return bits == 12 ? (int8_t)(q2 / 16) : q2; }

/* Token tt's short tail of m blocks (src: its kq8_tail or kq16_tail) into
 * their records (recs on): the tail's blocks are ordinary blocks in the AMX
 * form, so each lane's 4 bytes go back to their block's element slots. */
static void amx_fill_tail(int bits, const uint8_t *src, int m, uint8_t *recs, int tt) {
    const bool x16 = bits != 8;
    const kq8_tail *a8 = (const kq8_tail *)src;
    const kq16_tail *a16 = (const kq16_tail *)src;
    const size_t rec_bytes = x16 ? sizeof(kamx16_blk) : sizeof(kamx8_blk);
    for (int v = 0; v < kq_tail_vectors(m); v++)
        for (int L = 0; L < 16; L++) {
            int j = 0, e0 = 0;
            if (!kq_tail_lane(m, v, L, &j, &e0)) continue;
            uint8_t *rec = recs + (size_t)j * rec_bytes;
            memcpy(&((kamx8_blk *)rec)->q[e0 / 4][4 * tt], x16 ? &a16->q[v][4 * L] : &a8->q[v][4 * L], 4);
            if (x16)
                for (int e = 0; e < 4; e++) ((kamx16_blk *)rec)->q2[e0 / 4][4 * tt + e] = amx_residual(a16->q2[v][4 * L + e], bits);
        }
    for (int j = 0; j < m; j++) {
        uint8_t *rec = recs + (size_t)j * rec_bytes;
        if (x16) ((kamx16_blk *)rec)->d[tt] = a16->d[j], ((kamx16_blk *)rec)->s[tt] = a16->s[j];
        else ((kamx8_blk *)rec)->d[tt] = a8->d[j], ((kamx8_blk *)rec)->s[tt] = a8->s[j];
    }
}

/* Token tt's blocks 0..m-1 of one chunk (kq8_chunk or kq16_chunk) into their records (recs on). */
static void amx_fill_chunk(int bits, const uint8_t *chunk, int m, uint8_t *recs, int tt) {
    for (int j = 0; j < m; j++) {
        if (bits == 8) {
            const kq8_chunk *ch = (const kq8_chunk *)chunk;
            kamx8_blk *rec = (kamx8_blk *)recs + j;
            for (int v = 0; v < 8; v++) memcpy(&rec->q[v][4 * tt], &ch->q[v][4 * j], 4);
            rec->d[tt] = ch->d[j];
            rec->s[tt] = ch->s[j];
        } else {
            const kq16_chunk *ch = (const kq16_chunk *)chunk;
            kamx16_blk *rec = (kamx16_blk *)recs + j;
            for (int k = 0; k < 32; k++) { /* element k: pair k / 2 of block j, 256 q + q2 with |q2| <= 127 */
                const int val = ch->q[k / 2][2 * j + k % 2];
                const int8_t q2 = (int8_t)(uint8_t)(val & 0xff);
                rec->q[k / 4][4 * tt + k % 4] = (int8_t)((val - q2) >> 8);
                rec->q2[k / 4][4 * tt + k % 4] = amx_residual(q2, bits);
            }
            rec->d[tt] = ch->d[j];
            rec->s[tt] = ch->s[j];
        }
    }
}

/* Token t's chunks (its row as kern_quantize_x8 / kern_quantize_x16 wrote
 * it) into its slots of the AMX form. The coarse and residual bytes of
 * 256 q + q2 come back exactly: q2 is the low byte taken signed. */
static void amx_fill_token(int bits, const uint8_t *row, int64_t n_cols, uint8_t *region, int t) {
    const bool x16 = bits != 8;
    const int64_t nb = n_cols / 32;
    const size_t rec = x16 ? sizeof(kamx16_blk) : sizeof(kamx8_blk), chunk = x16 ? sizeof(kq16_chunk) : sizeof(kq8_chunk);
    uint8_t *group = region + (size_t)(t / 16) * kern_amx_group_bytes(n_cols, x16);
    for (int64_t c = 0; c * 16 < nb; c++) {
        const int m = nb - 16 * c < 16 ? (int)(nb - 16 * c) : 16;
        if (m <= KQ_SHORT_TAIL) amx_fill_tail(bits, row + (size_t)c * chunk, m, group + (size_t)(16 * c) * rec, t % 16);
        else amx_fill_chunk(bits, row + (size_t)c * chunk, m, group + (size_t)(16 * c) * rec, t % 16);
    }
}

void kern_quantize_amx(const kern_impl *impl, const float *x, int64_t n, int nt, uint8_t *group, uint8_t *rows,
                       size_t row_stride, int bits) {
    const int64_t nb = n / 32;
    if (!impl->quantize_amx) {
        for (int t = 0; t < nt; t++) {
            uint8_t *row = rows + (size_t)t * row_stride;
            if (bits != 8) kern_quantize_x16(impl, x + (size_t)t * (size_t)n, (kq16_chunk *)row, n, kq_res_of_bits(bits));
            else kern_quantize_x8(impl, x + (size_t)t * (size_t)n, row, n);
            amx_fill_token(bits, row, n, group, t);
        }
        return;
    }
    /* every block straight: a block's codes, unit and sum are quantize_32's whichever chunk or tail
     * of the per-token rows holds it, and in the AMX form each block is a record of its own */
    impl->quantize_amx(x, (size_t)n, nt, nb, group, bits);
}

static int act_reserve(kern_pool *p, size_t bytes) {
    if (p->act_cap >= bytes) return 0;
    void *buf = NULL;
    if (posix_memalign(&buf, 64, bytes)) return -1;
    free(p->act);
    p->act = buf;
    p->act_cap = bytes;
    return 0;
}

int kern_pool_reserve_tokens(kern_pool *p, int max_tokens, int64_t max_cols) {
    /* The largest activation form, for the widest row rounded up to whole chunks. */
    int64_t cols = (max_cols + 511) / 512 * 512;
    size_t need = 0;
    for (int kind = KERN_ACT_Q8_32; kind < KERN_ACT_COUNT; kind++) {
        size_t b = act_bytes((kern_act_kind)kind, cols, max_tokens);
        need = b > need ? b : need;
    }
    return act_reserve(p, need);
}

/* ---- matmul ------------------------------------------------------------------ */

/* One matrix of a matmul job. */
typedef struct matmul_part {
    const gl_tensor *w;
    float *out;
    size_t row_bytes;
    kern_rows_fn rows;         /* NULL: the scalar path */
    kern_amx_rows_fn amx;      /* non-NULL: the AMX prompt tiles instead of rows */
    const uint8_t *weights;    /* what rows() reads: w->data or w->packed */
    long first_row;            /* of the job's row space, which runs through the parts in order */
} matmul_part;

#define MATMUL_MAX_PARTS 4
#define MATMUL_MAX_SEGS 16

typedef struct matmul_job {
    kern_pool *pool;
    const float *x;
    int64_t n_cols;
    int n_tokens;
    const kern_impl *impl;
    kern_act_kind act_kind;    /* shared by every part */
    const uint8_t *act;        /* what rows() reads: x itself or its quantized copy */
    size_t act_stride;
    bool turn_k16;             /* the quantize step turns whole groups for Q4_K's rows (simd.h, kq16_kt) */
    matmul_part parts[MATMUL_MAX_PARTS];
    int n_parts;
    long n_rows;               /* all parts together */
    int chunk;                 /* rows handed to a thread at a time, at least */
    int guided;                /* > 0: a piece is also the remaining rows / guided, while larger */
    int tok_block;             /* tokens of one block of the AMX parts' hand-out; n_tokens: one block */
    atomic_int next_tok;       /* quantization: next activation row */
    atomic_long next_row;      /* work stealing by chunks */
    int n_segs;                /* > 0: the rows go out by segments (claim_in_segments), not from next_row */
    struct { _Alignas(64) atomic_ullong range; } segs[MATMUL_MAX_SEGS]; /* front | end << 32, a cache line each */
} matmul_job;

/* Quantize token rows taken one at a time: one thread per row. */
static void quantize_rows(matmul_job *job) {
    int64_t n = job->n_cols;
    /* The AMX forms interleave 16 tokens' bytes in every cache line of a
     * group: a thread takes whole groups, or the two would write the same
     * lines by turns (2 threads ran a 576 x 576 x 512 matmul at half the
     * speed of one). */
    const int step = is_amx_kind(job->act_kind) || job->turn_k16 ? 16 : 1;
    /* The AMX tiles read their form alone: each group straight from the floats. */
    const int bits = amx_bits(job->act_kind);
    if (bits && job->parts[0].amx) {
        uint8_t *region = (uint8_t *)kern_amx_region(job->act, job->n_tokens, job->act_stride);
        for (;;) {
            int t = atomic_fetch_add_explicit(&job->next_tok, 16, memory_order_relaxed);
            if (t >= job->n_tokens) return;
            int nt = job->n_tokens - t < 16 ? job->n_tokens - t : 16;
            kern_quantize_amx(job->impl, job->x + (size_t)t * (size_t)n, n, nt,
                              region + (size_t)(t / 16) * kern_amx_group_bytes(n, bits != 8),
                              (uint8_t *)job->act + (size_t)t * job->act_stride, job->act_stride, bits);
        }
    }
    if (is_qa_kind(job->act_kind)) { /* the K-quants' form is its groups alone */
        for (;;) {
            int t = atomic_fetch_add_explicit(&job->next_tok, KQA_GROUP, memory_order_relaxed);
            if (t >= job->n_tokens) return;
            int nt = job->n_tokens - t < KQA_GROUP ? job->n_tokens - t : KQA_GROUP;
            kern_quantize_qa(job->impl, job->x + (size_t)t * (size_t)n, n, nt, (uint8_t *)job->act + (size_t)t * job->act_stride,
                             job->act_kind == KERN_ACT_QA_K8);
        }
    }
    for (int t = 0, end = 0;; t++) {
        if (t == end) {
            t = atomic_fetch_add_explicit(&job->next_tok, step, memory_order_relaxed);
            end = t + step;
        }
        if (t >= job->n_tokens) break;
        const float *x = job->x + (size_t)t * (size_t)n;
        uint8_t *dst = (uint8_t *)job->act + (size_t)t * job->act_stride;
        if (job->act_kind == KERN_ACT_Q8_32 || job->act_kind == KERN_ACT_Q12_32) {
            job->impl->quantize_32(x, (kq8_32 *)dst, n, act_res(job->act_kind));
        } else if (job->act_kind == KERN_ACT_Q16_X16 || job->act_kind == KERN_ACT_Q12_X16) {
            kern_quantize_x16(job->impl, x, (kq16_chunk *)dst, n, act_res(job->act_kind));
        } else if (job->act_kind == KERN_ACT_Q16_K) {
            kern_quantize_k16(job->impl, x, (kq16_k *)dst, n);
            if (job->turn_k16 && t % KQT_TOKENS == KQT_TOKENS - 1) /* this thread's group is whole: turned once, for every rows call */
                kern_turn_k16_group(job->impl, (uint8_t *)job->act, job->n_tokens, job->act_stride, n, t / KQT_TOKENS);
        } else if (job->act_kind == KERN_ACT_Q8_X8) {
            kern_quantize_x8(job->impl, x, dst, n);
        } else if (job->act_kind == KERN_ACT_AMX_X8) { /* no AMX scratch: VNNI reads the rows alone */
            kern_quantize_x8(job->impl, x, dst, n);
        } else if (job->act_kind == KERN_ACT_AMX_X16 || job->act_kind == KERN_ACT_AMX_X12) {
            kern_quantize_x16(job->impl, x, (kq16_chunk *)dst, n, act_res(job->act_kind));
        } else if (job->act_kind == KERN_ACT_Q8_K) {
            kern_quantize_k8(job->impl, x, (kq8_k *)dst, n);
        } else if (job->act_kind == KERN_ACT_Q8_32_COARSE) {
            kern_quantize_32_coarse(job->impl, x, (kq8_32 *)dst, n);
        } else if (job->act_kind == KERN_ACT_Q8_256_COARSE) {
            kern_quantize_256_coarse(job->impl, x, (kq8_256 *)dst, n);
        } else {
            job->impl->quantize_256(x, (kq8_256 *)dst, n);
        }
    }
}

static void quantize_worker(void *arg, int ith, int nth) { quantize_rows(arg); }

static void matmul_scalar_rows(matmul_job *job, const matmul_part *part, int ith, long r0, long r1) {
    const gl_tensor *w = part->w;
    int64_t n_cols = w->n_cols;
    float *row_buf = job->pool->workers[ith].scratch; /* kern_pool_reserve'd >= n_cols */
    gl_to_float_fn to_float = gl_type_get(w->type)->to_float;
    for (long r = r0; r < r1; r++) {
        const float *row;
        if (w->type == GL_TYPE_F32) {
            row = (const float *)w->data + (size_t)r * (size_t)n_cols;
        } else {
            to_float((const uint8_t *)w->data + (size_t)r * part->row_bytes, row_buf, n_cols);
            row = row_buf;
        }
        for (int t = 0; t < job->n_tokens; t++)
            part->out[(size_t)t * (size_t)w->n_rows + (size_t)r] =
                kern_dot(row, job->x + (size_t)t * (size_t)n_cols, (int)n_cols);
    }
}

/* The AMX rows' view of tokens t0..t0+nt-1 (t0 a multiple of 16) of act:
 * a buffer whose form starts at their first group. The block-32 rows find
 * it at kern_amx_region(act, nt, stride) and read nothing else (simd.h);
 * the K-quants' groups are the buffer itself. */
static const uint8_t *amx_token_view(const matmul_job *job, int t0, int nt) {
    if (is_qa_kind(job->act_kind)) return job->act + (size_t)t0 * job->act_stride;
    const uint8_t *group = kern_amx_region(job->act, job->n_tokens, job->act_stride) +
                           (size_t)(t0 / 16) * kern_amx_group_bytes(job->n_cols, amx_bits(job->act_kind) != 8);
    return group - (kern_amx_region(job->act, nt, job->act_stride) - job->act);
}

/* The hand-out of a memory-bound call (a few tokens): thread i owns
 * segment i of the rows and takes it from the front, half of what is left
 * at a time, so its pieces follow each other and its stream never breaks:
 * the decode rows' prefetches run on into the next piece, where a piece
 * that starts elsewhere starts cold (small scattered pieces read a decode
 * at well under the bandwidth of whole streams). A thread whose segment is done takes half of what is left of the
 * next unfinished one from its end, so the threads still finish together,
 * and the caller alone runs through every segment when no worker comes. */
static bool claim_in_segments(matmul_job *job, int ith, int *seg, long *g0, long *g1) {
    for (int k = 0; k < job->n_segs; k++) {
        const int s = (*seg + k) % job->n_segs;
        const bool own = s == ith;
        unsigned long long cur = atomic_load_explicit(&job->segs[s].range, memory_order_relaxed), next;
        long front, end, lo, hi;
        do {
            front = (long)(cur & 0xffffffffu), end = (long)(cur >> 32);
            if (front >= end) break;
            long left = end - front, piece = (left / 2) & ~3L;
            if (piece < job->chunk) piece = job->chunk;
            if (piece > left) piece = left;
            lo = own ? front : end - piece, hi = own ? front + piece : end;
            next = own ? (unsigned long long)end << 32 | (unsigned long long)hi
                       : (unsigned long long)lo << 32 | (unsigned long long)front;
        } while (!atomic_compare_exchange_weak_explicit(&job->segs[s].range, &cur, next, memory_order_relaxed,
                                                        memory_order_relaxed));
        if (front >= end) continue;
        *seg = s, *g0 = lo, *g1 = hi;
        return true;
    }
    return false;
}

static void matmul_worker(void *arg, int ith, int nth) {
    matmul_job *job = arg;
    /* Token blocks one after another, each over all rows: a block's
     * activations stay in the cache while every thread's rows pass them. */
    const int n_blocks = (job->n_tokens + job->tok_block - 1) / job->tok_block;
    const long n_units = job->n_rows * n_blocks;
    int seg = job->n_segs ? ith % job->n_segs : 0;
    for (;;) {
        long g0, g1, base = 0;
        if (job->n_segs) {
            if (!claim_in_segments(job, ith, &seg, &g0, &g1)) return;
        } else {
            g0 = atomic_load_explicit(&job->next_row, memory_order_relaxed);
            do {
                if (g0 >= n_units) return;
                base = g0 / job->n_rows * job->n_rows; /* a piece ends with its token block */
                long piece = job->guided ? ((job->n_rows - g0) / job->guided) & ~3L : 0;
                if (piece < job->chunk) piece = job->chunk;
                g1 = g0 + piece < base + job->n_rows ? g0 + piece : base + job->n_rows;
            } while (!atomic_compare_exchange_weak_explicit(&job->next_row, &g0, g1, memory_order_relaxed,
                                                            memory_order_relaxed));
        }
        const int t0 = (int)(base / job->n_rows) * job->tok_block;
        const int nt = job->n_tokens - t0 < job->tok_block ? job->n_tokens - t0 : job->tok_block;
        g0 -= base, g1 -= base;
        /* The hand-out may span parts: each piece goes to its own matrix. */
        for (int i = 0; i < job->n_parts; i++) {
            const matmul_part *part = &job->parts[i];
            long lo = part->first_row, hi = lo + (long)part->w->n_rows;
            long r0 = (g0 > lo ? g0 : lo) - lo, r1 = (g1 < hi ? g1 : hi) - lo;
            if (r0 >= r1) continue;
            if (!part->rows) {
                matmul_scalar_rows(job, part, ith, r0, r1);
                continue;
            }
            if (part->amx) {
                const uint8_t *act = nt < job->n_tokens ? amx_token_view(job, t0, nt) : job->act;
                part->amx(part->w, r0, r1, act, job->act_stride, nt, part->out + (size_t)t0 * (size_t)part->w->n_rows,
                          (size_t)part->w->n_rows, (uint8_t *)job->pool->workers[ith].scratch);
                continue;
            }
            part->rows(part->weights + (size_t)r0 * part->row_bytes, part->row_bytes, (int)(r1 - r0), job->n_cols,
                       job->act, job->act_stride, job->n_tokens, part->out + r0, (size_t)part->w->n_rows);
        }
    }
    (void)nth;
}

/* The rows function of a type against 8-bit activations as the file has the
 * weights. Only the AVX2 implementation has these: it runs on every x86
 * host with a kern_impl, and the quantized rows it reads are the same bits
 * whichever implementation's quantize_32 / quantize_256 made them. */
static kern_rows_fn rows_x8_of(const kern_impl *impl, uint32_t type) {
    if (impl->rows_x8[type]) return impl->rows_x8[type];
    const kern_impl *avx2 = kern_impl_avx2();
    return avx2 ? avx2->rows_x8[type] : NULL;
}

/* How w is multiplied under impl: its rows function, weights and activation form. */
static kern_act_kind plan_part(const kern_impl *impl, const gl_tensor *w, int act_bits, int n_tokens,
                               matmul_part *part) {
    part->w = w;
    part->row_bytes = gl_type_row_bytes(w->type, w->n_cols);
    part->rows = impl && w->type < GL_TYPE_COUNT ? impl->rows[w->type] : NULL;
    part->weights = w->data;
    part->amx = NULL;
    /* Prompts on AMX: the same bits as the packed VNNI rows below, faster. */
    /* 12 bits for Q4_0 and Q4_1 alone (simd.h); 16 for the others */
    const bool k_quant = kern_packed_act_kind(w->type) == KERN_ACT_Q16_K;
    if (act_bits == 12 && w->type != GL_TYPE_Q4_0 && w->type != GL_TYPE_Q4_1) act_bits = 16;
    const int amx_min = w->type == GL_TYPE_Q4_K ? KERN_AMX_Q4_K_MIN_TOKENS
                        : kern_amx_unpacks_16(w->type) ? (act_bits == 8 ? KERN_AMX_UNPACK16_X8_MIN_TOKENS
                                                                       : KERN_AMX_UNPACK16_MIN_TOKENS)
                        : act_bits != 16 ? KERN_AMX_MIN_TOKENS
                        : w->type == GL_TYPE_Q5_0 ? KERN_AMX_Q5_0_MIN_TOKENS : KERN_AMX_MIN_TOKENS;
    if (part->rows && w->packed && n_tokens >= amx_min &&
        (w->type != GL_TYPE_Q6_K || act_bits != 8 || n_tokens >= KQA_Q6_K_X8_MIN_TOKENS)) {
        kern_amx_rows_fn amx = act_bits == 8 ? impl->amx_rows_x8[w->type]
                               : act_bits == 12 ? impl->amx_rows_x12[w->type] : impl->amx_rows[w->type];
        if (amx) {
            part->amx = amx;
            part->rows = act_bits == 8 ? impl->packed_rows_x8[w->type] : impl->packed_rows[w->type];
            part->weights = w->packed;
            if (k_quant) return act_bits == 8 ? KERN_ACT_QA_K8 : KERN_ACT_QA_K16;
            return act_bits == 8 ? KERN_ACT_AMX_X8 : act_bits == 12 ? KERN_ACT_AMX_X12 : KERN_ACT_AMX_X16;
        }
    }
    if (part->rows && w->packed && act_bits == 8 && impl->packed_rows_x8[w->type]) {
        part->rows = impl->packed_rows_x8[w->type];
        part->weights = w->packed;
        return kern_packed_x8_act_kind(w->type);
    }
    if (part->rows && w->packed && impl->packed_rows[w->type]) {
        part->rows = impl->packed_rows[w->type];
        part->weights = w->packed;
        return act_bits == 12 ? KERN_ACT_Q12_X16 : kern_packed_act_kind(w->type);
    }
    kern_rows_fn x8 = part->rows && act_bits == 8 ? rows_x8_of(impl, w->type) : NULL;
    if (x8) {
        part->rows = x8;
        return kern_act_kind_of(w->type) == KERN_ACT_Q8_32 ? KERN_ACT_Q8_32_COARSE : KERN_ACT_Q8_256_COARSE;
    }
    return act_bits == 12 && part->rows ? KERN_ACT_Q12_32 : kern_act_kind_of(w->type);
}

/* The tiles read whole groups of 16 tokens: the last group's slots past
 * the call's tokens must hold zeros, not an earlier call's activations. */
static void zero_group_padding(const matmul_job *job) {
    int n = job->n_tokens;
    if (n % KQA_GROUP == 0) return;
    uint8_t *act = (uint8_t *)job->act;
    if (is_qa_kind(job->act_kind)) { /* the K-quants' form is its groups alone */
        memset(act + (size_t)(n / KQA_GROUP) * KQA_GROUP * job->act_stride, 0, (size_t)KQA_GROUP * job->act_stride);
        return;
    }
    size_t last = amx_region_bytes(job->act_kind, job->n_cols, KQA_GROUP);
    memset((uint8_t *)kern_amx_region(act, n, job->act_stride) + amx_region_bytes(job->act_kind, job->n_cols, n) - last,
           0, last);
}

/* Tokens of one block of an AMX call's hand-out: whole groups whose
 * activation form takes at most AMX_BLOCK_BYTES (a 16-row tile reads all
 * of them, so they should stay in L2, 2 MiB, from one tile to the next),
 * at least AMX_BLOCK_MIN_TOKENS (each block unpacks every 16 rows' weights
 * again): long prompts gain from blocks against one block for the whole
 * call (bench_matmul q4_0), most where the activation form outgrows L2;
 * much smaller blocks lose at 8 bits, where the unpacking weighs more. */
#define AMX_BLOCK_BYTES ((size_t)1536 << 10)
#define AMX_BLOCK_MIN_TOKENS 64
static int amx_token_block(const matmul_job *job) {
    size_t group = is_qa_kind(job->act_kind) ? (size_t)KQA_GROUP * job->act_stride
                                             : kern_amx_group_bytes(job->n_cols, amx_bits(job->act_kind) != 8);
    int tb = 16 * (int)(AMX_BLOCK_BYTES / group);
    if (tb < AMX_BLOCK_MIN_TOKENS) tb = AMX_BLOCK_MIN_TOKENS;
    return tb < job->n_tokens ? tb : job->n_tokens;
}

void kern_matmul_n(kern_pool *p, int n, const gl_tensor *const *ws, const float *x, int n_tokens, float *const *outs) {
    const kern_impl *impl = kern_impl_active();
    matmul_job job = {.pool = p, .x = x, .n_tokens = n_tokens, .impl = impl};
    /* Parts that take the same activations share one quantized copy; the
     * rest (a different weight type among them) run as jobs of their own. */
    for (int i = 0; i < n; i++) {
        matmul_part part = {.out = outs[i]};
        kern_act_kind kind = plan_part(impl, ws[i], p->act_bits, n_tokens, &part);
        bool fits = job.n_parts < MATMUL_MAX_PARTS && ws[i]->n_cols == ws[0]->n_cols &&
                    (job.n_parts == 0 || (kind == job.act_kind && !part.rows == !job.parts[0].rows));
        if (!fits) {
            kern_matmul_n(p, 1, &ws[i], x, n_tokens, &outs[i]);
            continue;
        }
        job.act_kind = kind;
        part.first_row = job.n_rows;
        job.n_rows += (long)ws[i]->n_rows;
        job.parts[job.n_parts++] = part;
    }
    if (job.n_parts == 0) return;
    job.n_cols = job.parts[0].w->n_cols;
    if (job.parts[0].rows) {
        job.act_stride = act_row_bytes(job.act_kind, job.n_cols);
        if (job.act_kind == KERN_ACT_F32) {
            job.act = (const uint8_t *)x;
        } else if (act_reserve(p, act_bytes(job.act_kind, job.n_cols, n_tokens)) == 0) {
            job.act = p->act;
            /* No scratch for the AMX tiles: the block-32 forms' VNNI rows read the same per-token rows,
             * to the same bits; the K-quants' form has no such rows, so the scalar path (no scratch) runs. */
            if (job.parts[0].amx && kern_pool_reserve(p, KERN_AMX_SCRATCH(job.n_cols) / sizeof(float) + 1))
                for (int i = 0; i < job.n_parts; i++) {
                    job.parts[i].amx = NULL;
                    if (is_qa_kind(job.act_kind)) job.parts[i].rows = NULL;
                }
            if (is_amx_kind(job.act_kind)) zero_group_padding(&job);
            if (job.act_kind == KERN_ACT_Q16_K && impl->turn_k16 && kern_k16_turned(job.n_cols, n_tokens))
                for (int i = 0; i < job.n_parts; i++) job.turn_k16 |= job.parts[i].rows && job.parts[i].w->type == GL_TYPE_Q4_K;
            /* One row is quicker to quantize here than to hand out. */
            atomic_init(&job.next_tok, 0);
            if (n_tokens < 2 * p->n_threads) quantize_rows(&job);
            else kern_pool_run(p, quantize_worker, &job);
        } else {
            /* no memory for the quantized copy: the scalar path needs none */
            for (int i = 0; i < job.n_parts; i++) job.parts[i].rows = NULL, job.parts[i].amx = NULL;
        }
    }
    /* Hand-outs: a memory-bound call (a few tokens) streams its weights best
     * in long runs -- each new run starts without prefetched lines -- so it
     * goes out by segments, one unbroken run per thread (claim_in_segments),
     * in pieces down to about 32 KB of weights, so the threads finish
     * together even when one started late or runs slower (a fixed quarter
     * of Gemma 3's 170 MB output matrix could leave one thread waiting
     * ~2 ms); on a pool of more threads than segments, from one counter,
     * half of each thread's share of what is left at a time (guided). A
     * compute-bound one takes about eight pieces per thread. A multiple of 4
     * rows keeps the 4-row tiles of single-token calls whole; no result
     * depends on where the pieces start. */
    long chunk;
    if (n_tokens <= 4) {
        size_t row_bytes = job.parts[0].row_bytes ? job.parts[0].row_bytes : 1;
        chunk = (long)(32768 / row_bytes);
        job.guided = 2 * p->n_threads;
    } else {
        chunk = job.n_rows / (8 * p->n_threads);
    }
    chunk = chunk < 4 ? 4 : chunk & ~3L;
    if (job.parts[0].amx) chunk = (chunk + 15) & ~15L; /* whole 16-row tiles */
    job.chunk = (int)chunk;
    job.tok_block = n_tokens;
    if (job.parts[0].amx) job.tok_block = amx_token_block(&job);
    atomic_init(&job.next_row, 0);
    job.n_segs = 0;
    if (job.guided && !job.parts[0].amx && p->n_threads > 1 && p->n_threads <= MATMUL_MAX_SEGS &&
        job.n_rows < (1L << 31)) {
        job.n_segs = p->n_threads;
        for (int s = 0; s < job.n_segs; s++) { /* bounds on multiples of 4 rows: whole 4-row tiles */
            long lo = job.n_rows * s / job.n_segs & ~3L;
            long hi = s + 1 == job.n_segs ? job.n_rows : job.n_rows * (s + 1) / job.n_segs & ~3L;
            atomic_init(&job.segs[s].range, (unsigned long long)hi << 32 | (unsigned long long)lo);
        }
    }
    kern_pool_run(p, matmul_worker, &job);
}

void kern_matmul(kern_pool *p, const gl_tensor *w, const float *x, int n_tokens, float *out) {
    kern_matmul_n(p, 1, &w, x, n_tokens, &out);
}

/* ---- attention ------------------------------------------------------------------
 * The scalar reference: attend_body.h with plain C helpers. */

static void row_scalar(const uint8_t *src, float *dst, int n, bool f16) {
    for (int i = 0; i < n; i++) {
        if (f16) {
            uint16_t h;
            memcpy(&h, src + 2 * (size_t)i, 2);
            dst[i] = gl_fp16_to_fp32(h);
        } else {
            memcpy(&dst[i], src + 4 * (size_t)i, 4);
        }
    }
}

static void row_q8_scalar(const uint8_t *src, const uint16_t *sc, int per, float *dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = (float)(int8_t)src[i] * gl_fp16_to_fp32(sc[i / per]);
}

static void axpy_scalar(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale_scalar(float *y, float a, int n) {
    for (int i = 0; i < n; i++) y[i] *= a;
}

static float exp_sum_scalar(float *y, int n, float m) {
    float s = 0;
    for (int i = 0; i < n; i++) s += (y[i] = expf(y[i] - m));
    return s;
}

#define ATTEND_NAME attend_scalar
#define ATTEND_ROW row_scalar
#define ATTEND_ROW_Q8 row_q8_scalar
#define ATTEND_AXPY axpy_scalar
#define ATTEND_SCALE scale_scalar
#define ATTEND_EXP_SUM exp_sum_scalar
#include "attend_body.h"

void kern_attend_merge(float *out, float *mx, float *sum, const float *o2, float m2, float s2, int hd) {
    if (s2 == 0) return; /* the row has no positions in that segment */
    float m = *mx > m2 ? *mx : m2, c1 = expf(*mx - m), c2 = expf(m2 - m);
    for (int i = 0; i < hd; i++) out[i] = out[i] * c1 + o2[i] * c2;
    *sum = *sum * c1 + s2 * c2;
    *mx = m;
}

typedef struct attn_job {
    kern_pool *pool;
    const kern_attn *a;
    kern_attend_fn attend;
    int heads_per_unit;        /* a whole KV group, or single heads when units are scarce */
    int units_per_tile;
    int tile_tokens;           /* a unit's tokens: a tile of the batch */
    int n_segs;                /* > 0: units are one token x one group x one segment, parts to the pool */
    int n_units;
    atomic_int next;
} attn_job;

/* Where the part of token t, group g, segment sg starts: a group's rows one after another. */
static float *attn_part(const attn_job *job, int t, int g, int sg) {
    const kern_attn *a = job->a;
    size_t group = (size_t)(a->n_heads / a->n_kv_heads), row = (size_t)a->head_dim + 2;
    return job->pool->attn_parts + (((size_t)t * (size_t)a->n_kv_heads + (size_t)g) * (size_t)job->n_segs + (size_t)sg) * group * row;
}

/* A unit is one tile of consecutive batch tokens x heads_per_unit heads. The
 * tile's runs of one sequence at consecutive positions (a prompt chunk) go
 * to the attend function together, so their rows share each K/V block; a
 * decode step's tokens (one per sequence) go one by one. Split calls: one
 * token's group over one segment. */
static void attn_worker(void *arg, int ith, int nth) {
    attn_job *job = arg;
    const kern_attn *a = job->a;
    float *scratch = job->pool->workers[ith].scratch;
    for (;;) {
        int u = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (u >= job->n_units) break;
        u = job->n_units - 1 - u; /* last tokens of a prompt attend furthest: start with them */
        if (job->n_segs) {
            int sg = u % job->n_segs, g = u / job->n_segs % a->n_kv_heads, t = u / job->n_segs / a->n_kv_heads;
            int group = a->n_heads / a->n_kv_heads, seg_len = kern_attend_segment(a->block_size);
            if (sg <= a->positions[t] / seg_len)
                job->attend(a, t, 1, g * group, group, sg, attn_part(job, t, g, sg), scratch);
            continue;
        }
        int t0 = u / job->units_per_tile * job->tile_tokens, h0 = u % job->units_per_tile * job->heads_per_unit;
        int t1 = t0 + job->tile_tokens < a->n_tokens ? t0 + job->tile_tokens : a->n_tokens;
        for (int t = t0; t < t1;) {
            int end = t + 1;
            while (end < t1 && a->seq_of_token[end] == a->seq_of_token[t] &&
                   a->positions[end] == a->positions[end - 1] + 1)
                end++;
            job->attend(a, t, end - t, h0, job->heads_per_unit, -1, NULL, scratch);
            t = end;
        }
    }
    (void)nth;
}

/* Each token's segments in order, as the attend function merges them. */
static void attn_merge_parts(const attn_job *job) {
    const kern_attn *a = job->a;
    int hd = a->head_dim, group = a->n_heads / a->n_kv_heads, seg_len = kern_attend_segment(a->block_size);
    for (int t = 0; t < a->n_tokens; t++)
        for (int h = 0; h < a->n_heads; h++) {
            float *out = a->out + ((size_t)t * (size_t)a->n_heads + (size_t)h) * (size_t)hd;
            const float *p0 = attn_part(job, t, h / group, 0) + (size_t)(h % group) * (size_t)(hd + 2);
            float mx = p0[hd], sum = p0[hd + 1];
            memcpy(out, p0, (size_t)hd * sizeof *out);
            for (int sg = 1; sg <= a->positions[t] / seg_len; sg++) {
                const float *ps = attn_part(job, t, h / group, sg) + (size_t)(h % group) * (size_t)(hd + 2);
                kern_attend_merge(out, &mx, &sum, ps, ps[hd], ps[hd + 1], hd);
            }
            float inv = 1.0f / sum;
            for (int i = 0; i < hd; i++) out[i] *= inv;
        }
}

int kern_attention(kern_pool *p, const kern_attn *a) {
    const kern_impl *impl = kern_impl_active();
    attn_job job = {.pool = p, .a = a, .attend = impl ? impl->attend : attend_scalar};
    int group = a->n_heads / a->n_kv_heads;
    /* Tiles of up to 16 tokens (for single-head groups faster than 8:
     * each K/V block read from L2 serves twice the rows); whole groups
     * share each K/V conversion and interleave their heads' dependency
     * chains, so they run as units even when there are barely more units
     * than threads. Single heads (the same arithmetic per head) only when
     * there would be fewer units than threads or a group has too many
     * heads for one call. */
    int group_tile = group <= KERN_ATTEND_MAX_ROWS ? KERN_ATTEND_MAX_ROWS / group : 0;
    /* 16 tokens to a tile when the batch opens with a prompt run (a decode
     * batch of 16 sequences read its cache slower in tiles of 16) */
    bool run16 = a->n_tokens >= 16 && a->seq_of_token[15] == a->seq_of_token[0] &&
                 a->positions[15] == a->positions[0] + 15;
    group_tile = group_tile > (run16 ? 16 : 8) ? (run16 ? 16 : 8) : group_tile;
    /* whole groups if tiles of up to 8 tokens give every thread a unit (the
     * loop below shrinks the tiles to that when needed) */
    int tile8 = group_tile < 8 ? group_tile : 8;
    bool whole = group_tile > 0 && (a->n_tokens + tile8 - 1) / tile8 * a->n_kv_heads >= p->n_threads;
    job.heads_per_unit = whole ? group : 1;
    job.tile_tokens = whole ? group_tile : 8;
    job.units_per_tile = a->n_heads / job.heads_per_unit;
    /* Smaller tiles until every thread has several units to take, so that
     * a decode batch's sequences of different lengths even out over the
     * threads: 16 tokens in tiles of 8 were 6 units for 2 threads. Tiles
     * only decide which of a prompt's consecutive tokens share K/V loads,
     * never a result. */
    while (job.tile_tokens > 1 &&
           (a->n_tokens + job.tile_tokens - 1) / job.tile_tokens * job.units_per_tile < 8 * p->n_threads)
        job.tile_tokens /= 2;
    job.n_units = (a->n_tokens + job.tile_tokens - 1) / job.tile_tokens * job.units_per_tile;
    /* Still few units (a decode step of few sequences, SmolLM2's 3 groups on
     * 2 threads) and long contexts: each token's group goes by segments,
     * merged after, so all threads share the long rows. */
    int max_pos = 0;
    bool few_units = whole && job.tile_tokens == 1 && job.n_units < 4 * p->n_threads && p->n_threads > 1;
    for (int t = 0; few_units && t < a->n_tokens; t++) max_pos = a->positions[t] > max_pos ? a->positions[t] : max_pos;
    int n_segs = max_pos / kern_attend_segment(a->block_size) + 1;
    if (few_units && n_segs > 1) {
        size_t need = (size_t)a->n_tokens * (size_t)a->n_heads * (size_t)n_segs * (size_t)(a->head_dim + 2);
        if (p->attn_parts_cap < need) {
            float *buf = realloc(p->attn_parts, need * sizeof *buf);
            if (buf) p->attn_parts = buf, p->attn_parts_cap = need;
        }
        if (p->attn_parts_cap >= need) {
            job.n_segs = n_segs;
            job.n_units = a->n_tokens * a->n_kv_heads * n_segs;
        }
    }
    if (kern_pool_reserve(p, kern_attend_scratch(job.tile_tokens * job.heads_per_unit, a->head_dim, a->block_size)))
        return -1;
    atomic_init(&job.next, 0);
    kern_pool_run(p, attn_worker, &job);
    if (job.n_segs) attn_merge_parts(&job);
    return 0;
}
