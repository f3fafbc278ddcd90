/* args.c -- strict parsing of command-line values, shared by the subcommands. */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "genloop.h"

/* s as a whole decimal integer, nothing before or after it. */
static bool parse_whole_long(const char *s, long *out) {
    char *end;
    errno = 0;
    *out = strtol(s, &end, 10);
    return !errno && end != s && !*end;
}

bool cli_parse_int(const char *flag, const char *s, long lo, long hi, long *out) {
    long v;
    if (!parse_whole_long(s, &v) || v < lo || v > hi) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected an integer in [%ld, %ld]\n", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-') {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected a non-negative integer\n", s, flag);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_float(const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < lo || v > hi) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected a number in [%g, %g]\n", s, flag, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_parse_act_bits(const char *flag, const char *s, int *out) {
    long v;
    if (!parse_whole_long(s, &v) || v != (int)v || !gl_activation_bits_valid((int)v)) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: activation_bits must be 8, 12 or 16\n", s, flag);
        return false;
    }
    *out = (int)v;
    return true;
}

bool cli_parse_kv_type(const char *flag, const char *s, gl_kv_type *out) {
    if (!gl_kv_type_parse(s, out)) {
        fprintf(stderr, "genloop: invalid value '%s' for %s: expected f16, q8_0 or f32\n", s, flag);
        return false;
    }
    return true;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "genloop: option %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool cli_set_once(const char *flag, const char **slot, const char *value) {
    if (*slot) {
        fprintf(stderr, "genloop: %s given twice ('%s', then '%s')\n", flag, *slot, value);
        return false;
    }
    *slot = value;
    return true;
}

void cli_copy_spec(gl_engine_params *to, const gl_engine_params *from) {
    to->spec_mode = from->spec_mode;
    to->spec_max_tokens = from->spec_max_tokens;
    to->spec_ngram_min = from->spec_ngram_min;
    to->spec_ngram_max = from->spec_ngram_max;
    to->spec_fixed = from->spec_fixed;
    to->spec_draft_model = from->spec_draft_model;
}

int cli_parse_spec(int argc, char **argv, int *i, gl_engine_params *p) {
    const char *a = argv[*i], *v;
    long l;
    if (!strcmp(a, "--spec")) {
        if (!(v = cli_value(argc, argv, i))) return -1;
        if (!strcmp(v, "ngram")) p->spec_mode = GL_SPEC_NGRAM;
        else if (!strcmp(v, "draft")) p->spec_mode = GL_SPEC_DRAFT;
        else if (!strcmp(v, "off")) p->spec_mode = GL_SPEC_OFF;
        else {
            fprintf(stderr, "genloop: invalid value '%s' for --spec: ngram, draft or off\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--model-draft")) {
        if (!(v = cli_value(argc, argv, i)) || !cli_set_once(a, &p->spec_draft_model, v)) return -1;
        return 1;
    }
    if (!strcmp(a, "--spec-fixed")) {
        p->spec_fixed = true;
        return 1;
    }
    int *slot = !strcmp(a, "--spec-max-tokens") ? &p->spec_max_tokens
                : !strcmp(a, "--spec-ngram-min") ? &p->spec_ngram_min
                : !strcmp(a, "--spec-ngram-max") ? &p->spec_ngram_max : NULL;
    if (!slot) return 0;
    long hi = slot == &p->spec_max_tokens ? GL_SPEC_MAX : 64;
    if (!(v = cli_value(argc, argv, i)) || !cli_parse_int(a, v, 1, hi, &l)) return -1;
    *slot = (int)l;
    return 1;
}

/* A float sampler flag: its name, range and field. */
typedef struct sampler_flag {
    const char *name;
    double lo, hi;
    size_t offset;
} sampler_flag;

static const sampler_flag sampler_flags[] = {
    {"--typical", 0, 1, offsetof(gl_sampling_params, typical_p)},
    {"--top-nsigma", -1, 1000, offsetof(gl_sampling_params, top_n_sigma)},
    {"--xtc-probability", 0, 1, offsetof(gl_sampling_params, xtc_probability)},
    {"--xtc-threshold", 0, 1, offsetof(gl_sampling_params, xtc_threshold)},
    {"--dynatemp-range", 0, 100, offsetof(gl_sampling_params, dynatemp_range)},
    {"--dynatemp-exp", 0, 100, offsetof(gl_sampling_params, dynatemp_exponent)},
    {"--mirostat-ent", 0, 100, offsetof(gl_sampling_params, mirostat_tau)},
    {"--mirostat-lr", 0, 1, offsetof(gl_sampling_params, mirostat_eta)},
    {"--dry-multiplier", 0, 100, offsetof(gl_sampling_params, dry_multiplier)},
    {"--dry-base", 1, 100, offsetof(gl_sampling_params, dry_base)},
};

int cli_parse_sampler(int argc, char **argv, int *i, gl_sampling_params *sp, const char **breakers, int cap) {
    const char *a = argv[*i], *v;
    double d;
    long l;
    for (size_t k = 0; k < sizeof sampler_flags / sizeof sampler_flags[0]; k++) {
        const sampler_flag *f = &sampler_flags[k];
        if (strcmp(a, f->name)) continue;
        if (!(v = cli_value(argc, argv, i)) || !cli_parse_float(a, v, f->lo, f->hi, &d)) return -1;
        *(float *)((char *)sp + f->offset) = (float)d;
        return 1;
    }
    int *slot = !strcmp(a, "--mirostat") ? &sp->mirostat
                : !strcmp(a, "--dry-allowed-length") ? &sp->dry_allowed_length
                : !strcmp(a, "--dry-penalty-last-n") ? &sp->dry_penalty_last_n : NULL;
    if (slot) {
        long lo = slot == &sp->dry_penalty_last_n ? -1 : 0, hi = slot == &sp->mirostat ? 2 : 1 << 24;
        if (!(v = cli_value(argc, argv, i)) || !cli_parse_int(a, v, lo, hi, &l)) return -1;
        *slot = (int)l;
        return 1;
    }
    if (strcmp(a, "--dry-sequence-breaker")) return 0;
    if (!(v = cli_value(argc, argv, i))) return -1;
    if (sp->dry_breakers != breakers) sp->n_dry_breakers = 0; /* the first replaces the defaults */
    if (!v[0] || sp->n_dry_breakers == cap) {
        fprintf(stderr, "genloop: %s takes a non-empty string, at most %d times\n", a, cap);
        return -1;
    }
    breakers[sp->n_dry_breakers++] = v;
    sp->dry_breakers = breakers;
    return 1;
}
