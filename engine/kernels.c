/* kernels.c -- portable kernels and the thread pool.
 *
 * Matmul dequantizes one weight row at a time into a per-thread buffer and
 * dots it with every token of the call: each weight byte is read once per
 * call whatever the batch, and each output uses the same summation order. */
#include "kernels.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"

/* ---- thread pool ------------------------------------------------------------
 * Workers spin briefly on a generation counter before sleeping on a condition
 * variable: a decode step issues hundreds of small jobs, and a futex round
 * trip per job would cost more than the job itself. */

#define POOL_SPIN 20000

typedef struct pool_worker {
    struct kern_pool *pool;
    int ith;                   /* 1..n_threads-1; the caller is 0 */
    pthread_t thread;
    float *scratch;            /* per-thread buffer, see pool_scratch */
    size_t scratch_len;        /* floats */
} pool_worker;

struct kern_pool {
    int n_threads;
    pool_worker *workers;      /* [n_threads], slot 0 unused */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    atomic_uint generation;    /* bumped for each job */
    atomic_int pending;        /* workers still running the current job */
    atomic_bool quit;
    void (*fn)(void *, int, int);
    void *arg;
};

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
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
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool->mutex);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->quit))
                pthread_cond_wait(&pool->cond, &pool->mutex);
            pthread_mutex_unlock(&pool->mutex);
            spins = 0;
        }
        if (atomic_load(&pool->quit)) return NULL;
        seen = gen;
        pool->fn(pool->arg, w->ith, pool->n_threads);
        atomic_fetch_sub_explicit(&pool->pending, 1, memory_order_acq_rel);
    }
}

kern_pool *kern_pool_new(int n_threads) {
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
    pthread_mutex_destroy(&p->mutex);
    pthread_cond_destroy(&p->cond);
    free(p->workers);
    free(p);
}

int kern_pool_size(const kern_pool *p) { return p->n_threads; }

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
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mutex);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    fn(arg, 0, p->n_threads);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) cpu_relax();
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

void kern_rope(float *x, int n_heads, int head_dim, int rope_dim, int pos, float freq_base, float freq_scale) {
    for (int i = 0; i < rope_dim; i += 2) {
        float theta = freq_scale * (float)pos * powf(freq_base, -(float)i / (float)rope_dim);
        float c = cosf(theta), s = sinf(theta);
        for (int h = 0; h < n_heads; h++) {
            float *v = x + h * head_dim + i;
            float v0 = v[0], v1 = v[1];
            v[0] = v0 * c - v1 * s;
            v[1] = v0 * s + v1 * c;
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

void kern_swiglu(float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void kern_get_row(const gl_tensor *w, int64_t row, float *out) {
    size_t row_bytes = gl_type_row_bytes(w->type, w->n_cols);
    gl_type_get(w->type)->to_float((const uint8_t *)w->data + (size_t)row * row_bytes, out, w->n_cols);
}

/* ---- matmul ------------------------------------------------------------------ */

/* Rows handed to a thread at a time: big enough to amortise the hand-out,
 * small enough that both cores finish together. */
#define MATMUL_CHUNK 16

typedef struct matmul_job {
    kern_pool *pool;
    const gl_tensor *w;
    const float *x;
    int n_tokens;
    float *out;
    size_t row_bytes;
    atomic_long next_row;      /* work stealing by chunks */
} matmul_job;

static void matmul_worker(void *arg, int ith, int nth) {
    matmul_job *job = arg;
    const gl_tensor *w = job->w;
    int64_t n_cols = w->n_cols;
    float *row_buf = job->pool->workers[ith].scratch; /* kern_pool_reserve'd >= n_cols */
    gl_to_float_fn to_float = gl_type_get(w->type)->to_float;
    for (;;) {
        long r0 = atomic_fetch_add_explicit(&job->next_row, MATMUL_CHUNK, memory_order_relaxed);
        if (r0 >= w->n_rows) break;
        long r1 = r0 + MATMUL_CHUNK < w->n_rows ? r0 + MATMUL_CHUNK : (long)w->n_rows;
        for (long r = r0; r < r1; r++) {
            const float *row;
            if (w->type == GL_TYPE_F32) {
                row = (const float *)w->data + (size_t)r * (size_t)n_cols;
            } else {
                to_float((const uint8_t *)w->data + (size_t)r * job->row_bytes, row_buf, n_cols);
                row = row_buf;
            }
            for (int t = 0; t < job->n_tokens; t++)
                job->out[(size_t)t * (size_t)w->n_rows + (size_t)r] = kern_dot(row, job->x + (size_t)t * (size_t)n_cols, (int)n_cols);
        }
    }
    (void)nth;
}

void kern_matmul(kern_pool *p, const gl_tensor *w, const float *x, int n_tokens, float *out) {
    matmul_job job = {.pool = p, .w = w, .x = x, .n_tokens = n_tokens, .out = out,
                      .row_bytes = gl_type_row_bytes(w->type, w->n_cols)};
    atomic_init(&job.next_row, 0);
    kern_pool_run(p, matmul_worker, &job);
}
