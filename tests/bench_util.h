/* bench_util.h -- what the benchmark programs (not tests) share: a clock
 * and the median of repeated timings. */
#ifndef GL_BENCH_UTIL_H
#define GL_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts ts in place. */
static inline double bench_median(double *ts, int n) {
    qsort(ts, (size_t)n, sizeof *ts, bench_cmp_double);
    return ts[n / 2];
}

#endif
