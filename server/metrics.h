/* metrics.h -- a small Prometheus registry (text exposition format 0.0.4).
 *
 * Families are created once at startup and updated from one thread (the
 * server's loop thread); the registry does no locking. A counter may carry
 * one label (e.g. finish_reason); each distinct value becomes a series. */
#ifndef GL_METRICS_H
#define GL_METRICS_H

#include <stddef.h>

typedef struct metrics metrics;
typedef struct metrics_family metrics_family;

metrics *metrics_create(const char *prefix);  /* prefix is prepended to every name */
/* A label every series carries (model_name="..."); value escaped here. */
void metrics_set_const_label(metrics *m, const char *name, const char *value);
void metrics_free(metrics *m);

/* label_name NULL = an unlabelled counter. */
metrics_family *metrics_counter(metrics *m, const char *name, const char *help,
                                const char *label_name);
metrics_family *metrics_gauge(metrics *m, const char *name, const char *help);
/* A gauge with one label (model="..."): one series per label value. */
metrics_family *metrics_gauge_labelled(metrics *m, const char *name, const char *help,
                                       const char *label_name);
/* bounds: ascending upper bounds, without +Inf (added implicitly); copied. */
metrics_family *metrics_histogram(metrics *m, const char *name, const char *help,
                                  const double *bounds, int n_bounds);

/* Counters: add (by >= 0) to the series of label_value (NULL if unlabelled);
 * by = 0 creates the series so it shows before its first event. */
void metrics_inc(metrics_family *f, const char *label_value, double by);
/* Gauges, and counters mirrored from a monotonic source: set the value. */
void metrics_set(metrics_family *f, const char *label_value, double v);
void metrics_observe(metrics_family *f, double v);      /* histograms */
double metrics_get(const metrics_family *f, const char *label_value);

/* The exposition text (malloc'd, NUL-terminated); *len gets its length. */
char *metrics_render(const metrics *m, size_t *len);

#endif
