/* metrics.c -- families in creation order, each a list of series. */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } family_kind;

typedef struct series {
    char *label_value;       /* NULL for the unlabelled series */
    double value;
} series;

struct metrics_family {
    family_kind kind;
    char *name;              /* with the registry prefix */
    char *help;
    char *label_name;        /* counters only; NULL = unlabelled */
    series *series;
    int n_series, cap_series;
    double *bounds;          /* histograms: upper bounds without +Inf */
    int n_bounds;
    unsigned long long *bucket_counts; /* per bound, not cumulative */
    unsigned long long count;
    double sum;
    metrics_family *next;
};

struct metrics {
    char *prefix;
    char *const_label;       /* `name="escaped value"` on every series, or NULL */
    metrics_family *first, *last;
};

metrics *metrics_create(const char *prefix) {
    metrics *m = calloc(1, sizeof(*m));
    if (m) m->prefix = strdup(prefix ? prefix : "");
    return m;
}

void metrics_free(metrics *m) {
    if (!m) return;
    for (metrics_family *f = m->first, *next; f; f = next) {
        next = f->next;
        for (int i = 0; i < f->n_series; i++) free(f->series[i].label_value);
        free(f->series);
        free(f->name);
        free(f->help);
        free(f->label_name);
        free(f->bounds);
        free(f->bucket_counts);
        free(f);
    }
    free(m->prefix);
    free(m->const_label);
    free(m);
}

void metrics_set_const_label(metrics *m, const char *name, const char *value) {
    size_t n = strlen(name) + 2 * strlen(value) + 4;
    char *out = malloc(n), *p = out;
    if (!out) return;
    p += sprintf(p, "%s=\"", name);
    for (const char *v = value; *v; v++) { /* the exposition format's three escapes */
        if (*v == '\\' || *v == '"') *p++ = '\\';
        if (*v == '\n') { *p++ = '\\'; *p++ = 'n'; continue; }
        *p++ = *v;
    }
    *p++ = '"';
    *p = 0;
    free(m->const_label);
    m->const_label = out;
}

static metrics_family *add_family(metrics *m, family_kind kind, const char *name,
                                  const char *help) {
    metrics_family *f = calloc(1, sizeof(*f));
    size_t len = strlen(m->prefix) + strlen(name) + 1;
    f->kind = kind;
    f->name = malloc(len);
    snprintf(f->name, len, "%s%s", m->prefix, name);
    f->help = strdup(help);
    if (m->last) m->last->next = f; else m->first = f;
    m->last = f;
    return f;
}

metrics_family *metrics_counter(metrics *m, const char *name, const char *help,
                                const char *label_name) {
    metrics_family *f = add_family(m, KIND_COUNTER, name, help);
    if (label_name) f->label_name = strdup(label_name);
    return f;
}

metrics_family *metrics_gauge(metrics *m, const char *name, const char *help) {
    return add_family(m, KIND_GAUGE, name, help);
}

metrics_family *metrics_gauge_labelled(metrics *m, const char *name, const char *help,
                                       const char *label_name) {
    metrics_family *f = add_family(m, KIND_GAUGE, name, help);
    f->label_name = strdup(label_name);
    return f;
}

metrics_family *metrics_histogram(metrics *m, const char *name, const char *help,
                                  const double *bounds, int n_bounds) {
    metrics_family *f = add_family(m, KIND_HISTOGRAM, name, help);
    f->bounds = malloc(sizeof(double) * (size_t)n_bounds);
    memcpy(f->bounds, bounds, sizeof(double) * (size_t)n_bounds);
    f->bucket_counts = calloc((size_t)n_bounds + 1, sizeof(unsigned long long));
    f->n_bounds = n_bounds;
    return f;
}

static series *find_series(metrics_family *f, const char *label_value, int create) {
    for (int i = 0; i < f->n_series; i++) {
        const char *lv = f->series[i].label_value;
        if ((!lv && !label_value) || (lv && label_value && !strcmp(lv, label_value)))
            return &f->series[i];
    }
    if (!create) return NULL;
    if (f->n_series == f->cap_series) {
        int cap = f->cap_series ? f->cap_series * 2 : 4;
        series *s = realloc(f->series, sizeof(series) * (size_t)cap);
        if (!s) return NULL;
        f->series = s;
        f->cap_series = cap;
    }
    series *s = &f->series[f->n_series++];
    s->label_value = label_value ? strdup(label_value) : NULL;
    s->value = 0;
    return s;
}

void metrics_inc(metrics_family *f, const char *label_value, double by) {
    series *s = f->kind != KIND_HISTOGRAM ? find_series(f, label_value, 1) : NULL;
    if (s) s->value += by;
}

void metrics_set(metrics_family *f, const char *label_value, double v) {
    series *s = f->kind != KIND_HISTOGRAM ? find_series(f, label_value, 1) : NULL;
    if (s) s->value = v;
}

void metrics_observe(metrics_family *f, double v) {
    if (f->kind != KIND_HISTOGRAM) return;
    int i = 0;
    while (i < f->n_bounds && v > f->bounds[i]) i++;
    f->bucket_counts[i]++;
    f->count++;
    f->sum += v;
}

double metrics_get(const metrics_family *f, const char *label_value) {
    if (f->kind == KIND_HISTOGRAM) return (double)f->count;
    series *s = find_series((metrics_family *)f, label_value, 0);
    return s ? s->value : 0;
}

/* ---- rendering ------------------------------------------------------------- */

typedef struct text_buf { char *data; size_t len, cap; int failed; } text_buf;

static void put(text_buf *b, const char *fmt, ...) {
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) { b->failed = 1; return; }
        if ((size_t)n < b->cap - b->len) { b->len += (size_t)n; return; }
        size_t cap = (b->cap + (size_t)n) * 2;
        char *d = realloc(b->data, cap);
        if (!d) { b->failed = 1; return; }
        b->data = d;
        b->cap = cap;
    }
}

/* Prometheus floats, in the fewest digits that read back the same value
 * (0.005, not 0.0050000000000000001). */
static const char *fmt_num(char *out, size_t n, double v) {
    /* Whole numbers in plain digits: %g writes 10 as "1e+01", and a
     * selector le="10" would match no bucket. */
    if (fabs(v) < 1e15 && v == (double)(long long)v) { /* the bound first: NaN and huge values skip the cast */
        snprintf(out, n, "%lld", (long long)v);
        return out;
    }
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(out, n, "%.*g", digits, v);
        if (strtod(out, NULL) == v) break;
    }
    return out;
}

/* A series' label set: the registry's constant label, then name="value"
 * (name NULL: none); "" when there are none. */
static const char *label_set(char *out, size_t n, const metrics *m, const char *name,
                             const char *value) {
    const char *c = m->const_label;
    if (!c && !name) out[0] = 0;
    else if (!name) snprintf(out, n, "{%s}", c);
    else snprintf(out, n, "{%s%s%s=\"%s\"}", c ? c : "", c ? "," : "", name, value);
    return out;
}

char *metrics_render(const metrics *m, size_t *len) {
    text_buf b = { malloc(4096), 0, 4096, 0 };
    if (!b.data) return NULL;
    b.data[0] = 0;
    char num[64], le[64], labels[768];
    static const char *type_names[] = { "counter", "gauge", "histogram" };
    for (const metrics_family *f = m->first; f; f = f->next) {
        put(&b, "# HELP %s %s\n# TYPE %s %s\n", f->name, f->help, f->name, type_names[f->kind]);
        if (f->kind == KIND_HISTOGRAM) {
            unsigned long long cumulative = 0;
            for (int i = 0; i < f->n_bounds; i++) {
                cumulative += f->bucket_counts[i];
                put(&b, "%s_bucket%s %llu\n", f->name,
                    label_set(labels, sizeof(labels), m, "le", fmt_num(le, sizeof(le), f->bounds[i])),
                    cumulative);
            }
            put(&b, "%s_bucket%s %llu\n", f->name, label_set(labels, sizeof(labels), m, "le", "+Inf"),
                f->count);
            label_set(labels, sizeof(labels), m, NULL, NULL);
            put(&b, "%s_sum%s %s\n", f->name, labels, fmt_num(num, sizeof(num), f->sum));
            put(&b, "%s_count%s %llu\n", f->name, labels, f->count);
            continue;
        }
        if (f->n_series == 0 && !f->label_name)
            put(&b, "%s%s 0\n", f->name, label_set(labels, sizeof(labels), m, NULL, NULL));
        for (int i = 0; i < f->n_series; i++) {
            const series *s = &f->series[i];
            label_set(labels, sizeof(labels), m, s->label_value ? f->label_name : NULL, s->label_value);
            put(&b, "%s%s %s\n", f->name, labels, fmt_num(num, sizeof(num), s->value));
        }
    }
    if (b.failed) { free(b.data); return NULL; }
    *len = b.len;
    return b.data;
}
