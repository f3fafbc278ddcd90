/* tokenizer.c -- text <-> token ids from a GGUF's tokenizer.ggml.* metadata.
 *
 * Three algorithms, chosen by tokenizer.ggml.model:
 *   "llama"  SentencePiece BPE: spaces become U+2581, adjacent symbols are
 *            merged highest-score first, leftovers fall back to <0xXX> tokens.
 *   "gpt2"   byte-level BPE: the text is split by the pre-tokenizer regexes
 *            named by tokenizer.ggml.pre, every byte is mapped to a printable
 *            character, and pairs merge lowest merge-rank first.
 *   "bert"   WordPiece: lower-cased, accent-stripped words matched greedily
 *            longest-first (the GGUF spells word starts with a U+2581 prefix).
 *
 * Before any of that, the text is cut at special tokens (user-defined ones
 * always, control ones when the caller asks), as Hugging Face tokenizers do.
 * Both merge loops keep the symbols in a linked list and the candidate pairs
 * in a binary heap, so encoding is O(n log n) in the length of a word. */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include "gl_error.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum { KIND_SPM, KIND_BPE, KIND_WPM };
enum { FLAG_EOG = 1 };

#define MAX_PRE_REGEX 6
#define SPACE_MARK "\xe2\x96\x81" /* U+2581, SentencePiece's visible space */

struct gl_tokenizer {
    int kind;                 /* KIND_* */
    int n_vocab;
    char *text_blob;          /* every token's spelling, each NUL-terminated */
    uint32_t *text_off;       /* per id: offset into text_blob */
    uint32_t *text_len;       /* per id: bytes */
    char *piece_blob;         /* every token's output bytes (tok_piece) */
    uint32_t *piece_off;
    uint32_t *piece_len;
    float *scores;            /* per id; SentencePiece merge priority */
    uint8_t *types;           /* per id: TT_* */
    uint8_t *flags;           /* per id: FLAG_* */

    int32_t *vocab_slots;     /* open-addressing table: spelling -> id, -1 = empty */
    uint32_t vocab_mask;

    uint64_t *merge_keys;     /* open addressing: (left id << 32 | right id) -> merge */
    int32_t *merge_rank;      /* lower merges first */
    int32_t *merge_result;    /* id of the merged token */
    uint32_t merge_mask;      /* 0 when there are no merges */

    int32_t byte_id[256];     /* token for a raw byte: <0xXX> (SPM) or its mapped char (BPE) */
    uint8_t byte_of_cp[324];  /* byte-level BPE reverse map; valid where cp_is_byte */
    bool cp_is_byte[324];

    pcre2_code *pre[MAX_PRE_REGEX]; /* pre-tokenizer: applied in order, each splitting every piece */
    int n_pre;
    bool ignore_merges;       /* llama-3: a word that is itself a token is not merged */
    bool nfc;                 /* normalise input to NFC first (qwen2) */

    int32_t *special;         /* control/user-defined/unknown ids by first byte, longest first */
    int sp_begin[257];        /* special[sp_begin[b] .. sp_begin[b+1]) start with byte b */

    int32_t bos, eos, unk;    /* -1 when absent */
    bool add_bos, add_eos;
    bool add_space_prefix;    /* SPM: text starts with a (visible) space */
    bool remove_extra_ws;     /* SPM: trim and collapse runs of spaces */
    bool spm_word_split;      /* SPM: no token has U+2581 after another char (see spm_encode) */
    int max_token_len;        /* WPM: longest spelling, bounds the greedy match */
};

/* ---- small helpers ----------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_u64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static uint32_t table_size_for(uint64_t n) {
    uint32_t size = 16;
    while (size < n * 2) size <<= 1;
    return size;
}

static const char *text_of(const gl_tokenizer *t, int32_t id) { return t->text_blob + t->text_off[id]; }

/* Id whose spelling is exactly s[0..n), or -1. */
static int32_t lookup(const gl_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->vocab_mask;
    for (;; i = (i + 1) & t->vocab_mask) {
        int32_t id = t->vocab_slots[i];
        if (id < 0) return -1;
        if (t->text_len[id] == n && memcmp(text_of(t, id), s, n) == 0) return id;
    }
}

static int32_t find_merge(const gl_tokenizer *t, int32_t a, int32_t b, int32_t *rank) {
    if (!t->merge_mask || a < 0 || b < 0) return -1;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (uint32_t i = (uint32_t)hash_u64(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merge_keys[i] == UINT64_MAX) return -1;
        if (t->merge_keys[i] == key) { *rank = t->merge_rank[i]; return t->merge_result[i]; }
    }
}

static int utf8_len(uint8_t c) {
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    return 4;
}

static int utf8_put(char *out, uint32_t cp) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12); out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f)); return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18); out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Byte offset of the first invalid UTF-8 sequence (overlong forms, surrogates
 * and code points past U+10FFFF included), or -1 when the text is valid. */
static long utf8_invalid_at(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need; uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c == 0xe0) { need = 2; lo = 0xa0; }
        else if (c >= 0xe1 && c <= 0xec) need = 2;
        else if (c == 0xed) { need = 2; hi = 0x9f; }
        else if (c >= 0xee && c <= 0xef) need = 2;
        else if (c == 0xf0) { need = 3; lo = 0x90; }
        else if (c >= 0xf1 && c <= 0xf3) need = 3;
        else if (c == 0xf4) { need = 3; hi = 0x8f; }
        else return (long)i;
        if (i + need >= n) return (long)i;
        if (s[i + 1] < lo || s[i + 1] > hi) return (long)i;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80) return (long)i;
        i += need + 1;
    }
    return -1;
}

/* GPT-2's printable stand-in for every byte: printable Latin-1 bytes map to
 * themselves, the other 68 to U+0100 onwards in byte order. */
static uint32_t byte_to_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256 + (uint32_t)n;
}

/* ---- growable arrays for one encode call -------------------------------------- */

typedef struct ids_buf { int32_t *v; size_t n, cap; } ids_buf;

static bool ids_push(ids_buf *b, int32_t id) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return false;
        b->v = v; b->cap = cap;
    }
    b->v[b->n++] = id;
    return true;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q; *cap = c;
    return true;
}

/* A symbol in a merge loop: a byte span of the text (SPM) or a token (BPE). */
typedef struct symbol { int prev, next; uint32_t start, len; int32_t id; } symbol;

/* A candidate merge of two adjacent symbols. Lower cost first, then leftmost. */
typedef struct pair { double cost; int left, right; uint32_t size; int32_t left_id, right_id; } pair;

typedef struct scratch {
    ids_buf out;
    symbol *sym; size_t sym_cap;
    pair *heap; size_t heap_n, heap_cap;
    uint32_t *frag, *frag2; size_t frag_cap, frag2_cap; /* (start, len) pairs */
    char *buf; size_t buf_cap;
    pcre2_match_data *md;
} scratch;

static bool pair_less(const pair *a, const pair *b) {
    return a->cost < b->cost || (a->cost == b->cost && a->left < b->left);
}

static bool heap_push(scratch *s, pair p) {
    if (!grow((void **)&s->heap, &s->heap_cap, s->heap_n + 1, sizeof(pair))) return false;
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_less(&p, &s->heap[parent])) break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
    return true;
}

static pair heap_pop(scratch *s) {
    pair top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && pair_less(&s->heap[c + 1], &s->heap[c])) c++;
        if (!pair_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

/* ---- SentencePiece BPE ---------------------------------------------------------- */

/* The pair (l, r) is a candidate when its text is an ordinary token. Control
 * and unknown tokens are never spelled out of plain text. */
static bool spm_try_pair(const gl_tokenizer *t, scratch *s, const char *text, int l, int r) {
    if (l < 0 || r < 0) return true;
    uint32_t start = s->sym[l].start, size = s->sym[l].len + s->sym[r].len;
    int32_t id = lookup(t, text + start, size);
    if (id < 0 || t->types[id] == TT_CONTROL || t->types[id] == TT_UNKNOWN) return true;
    pair p = { .cost = -(double)t->scores[id], .left = l, .right = r, .size = size };
    return heap_push(s, p);
}

/* Tokenize one run of already-escaped text (spaces as U+2581). */
static bool spm_encode_run(const gl_tokenizer *t, scratch *s, const char *text, size_t n) {
    if (n == 0) return true;
    if (!grow((void **)&s->sym, &s->sym_cap, n, sizeof(symbol))) return false;
    int count = 0;
    for (size_t off = 0; off < n;) {
        uint32_t len = (uint32_t)utf8_len((uint8_t)text[off]);
        if (off + len > n) len = (uint32_t)(n - off);
        s->sym[count] = (symbol){ .prev = count - 1, .next = off + len < n ? count + 1 : -1,
                                  .start = (uint32_t)off, .len = len, .id = -1 };
        off += len;
        count++;
    }
    s->heap_n = 0;
    for (int i = 1; i < count; i++)
        if (!spm_try_pair(t, s, text, i - 1, i)) return false;
    while (s->heap_n) {
        pair p = heap_pop(s);
        symbol *l = &s->sym[p.left], *r = &s->sym[p.right];
        /* Lengths only grow, so a changed sum means one side was merged since. */
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        if (!spm_try_pair(t, s, text, l->prev, p.left) || !spm_try_pair(t, s, text, p.left, l->next))
            return false;
    }
    for (int i = 0; i >= 0; i = s->sym[i].next) {
        const symbol *sy = &s->sym[i];
        int32_t id = lookup(t, text + sy->start, sy->len);
        if (id >= 0 && t->types[id] != TT_CONTROL && t->types[id] != TT_UNKNOWN) {
            if (!ids_push(&s->out, id)) return false;
            continue;
        }
        bool have_bytes = true;
        for (uint32_t k = 0; k < sy->len; k++)
            if (t->byte_id[(uint8_t)text[sy->start + k]] < 0) have_bytes = false;
        if (have_bytes) {
            for (uint32_t k = 0; k < sy->len; k++)
                if (!ids_push(&s->out, t->byte_id[(uint8_t)text[sy->start + k]])) return false;
        } else if (t->unk >= 0) {
            if (!ids_push(&s->out, t->unk)) return false;
        }
    }
    return true;
}

static bool is_mark_at(const char *text, size_t i) { return memcmp(text + i, SPACE_MARK, 3) == 0; }

/* When no token has a U+2581 after another character, no merge can cross the
 * start of a word (a U+2581 after something else), so the words merge on
 * their own with the same result, and a small heap instead of one the size of
 * the whole text. */
static bool spm_encode(const gl_tokenizer *t, scratch *s, const char *text, size_t n) {
    if (!t->spm_word_split) return spm_encode_run(t, s, text, n);
    size_t start = 0;
    for (size_t i = 3; i + 3 <= n; i++) {
        if (text[i] != SPACE_MARK[0] || !is_mark_at(text, i) || is_mark_at(text, i - 3)) continue;
        if (!spm_encode_run(t, s, text + start, i - start)) return false;
        start = i;
        i += 2;
    }
    return spm_encode_run(t, s, text + start, n - start);
}

/* Escape one run of plain text the SentencePiece way and tokenize it. */
static bool spm_encode_text(const gl_tokenizer *t, scratch *s, const char *text, size_t n, bool prefix) {
    size_t start = 0, end = n;
    if (t->remove_extra_ws) {
        while (start < end && text[start] == ' ') start++;
        while (end > start && text[end - 1] == ' ') end--;
    }
    if (!grow((void **)&s->buf, &s->buf_cap, 3 * (end - start) + 3, 1)) return false;
    size_t m = 0;
    if (prefix && t->add_space_prefix) { memcpy(s->buf, SPACE_MARK, 3); m = 3; }
    for (size_t i = start; i < end; i++) {
        if (text[i] == ' ') {
            if (t->remove_extra_ws && i > start && text[i - 1] == ' ') continue;
            memcpy(s->buf + m, SPACE_MARK, 3);
            m += 3;
        } else {
            s->buf[m++] = text[i];
        }
    }
    return spm_encode(t, s, s->buf, m);
}

/* ---- byte-level BPE ------------------------------------------------------------- */

static bool bpe_try_pair(const gl_tokenizer *t, scratch *s, int l, int r) {
    if (l < 0 || r < 0) return true;
    int32_t rank, id = find_merge(t, s->sym[l].id, s->sym[r].id, &rank);
    if (id < 0) return true;
    pair p = { .cost = rank, .left = l, .right = r, .left_id = s->sym[l].id, .right_id = s->sym[r].id };
    return heap_push(s, p);
}

/* A byte the vocabulary has no token for (SmolLM2 lacks a few, e.g. 0x04 and
 * 0xF2) is dropped, as Hugging Face and llama.cpp do: an unknown token here
 * could be <|endoftext|>. */
static bool bpe_emit(scratch *s, int32_t id) {
    return id >= 0 ? ids_push(&s->out, id) : true;
}

/* Merge one pre-tokenized word. */
static bool bpe_encode_word(const gl_tokenizer *t, scratch *s, const uint8_t *w, size_t n) {
    if (n == 0) return true;
    if (t->ignore_merges) {
        if (!grow((void **)&s->buf, &s->buf_cap, 2 * n, 1)) return false;
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += (size_t)utf8_put(s->buf + m, byte_to_cp(w[i]));
        int32_t id = lookup(t, s->buf, m);
        if (id >= 0) return ids_push(&s->out, id);
    }
    if (n == 1) return bpe_emit(s, t->byte_id[w[0]]);
    if (!grow((void **)&s->sym, &s->sym_cap, n, sizeof(symbol))) return false;
    int count = (int)n;
    for (int i = 0; i < count; i++)
        s->sym[i] = (symbol){ .prev = i - 1, .next = i + 1 < count ? i + 1 : -1, .len = 1, .id = t->byte_id[w[i]] };
    s->heap_n = 0;
    for (int i = 1; i < count; i++)
        if (!bpe_try_pair(t, s, i - 1, i)) return false;
    while (s->heap_n) {
        pair p = heap_pop(s);
        symbol *l = &s->sym[p.left], *r = &s->sym[p.right];
        if (l->len == 0 || r->len == 0 || l->next != p.right || l->id != p.left_id || r->id != p.right_id)
            continue;
        int32_t rank;
        l->id = find_merge(t, l->id, r->id, &rank);
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) s->sym[r->next].prev = p.left;
        if (!bpe_try_pair(t, s, l->prev, p.left) || !bpe_try_pair(t, s, p.left, l->next)) return false;
    }
    for (int i = 0; i >= 0; i = s->sym[i].next)
        if (!bpe_emit(s, s->sym[i].id)) return false;
    return true;
}

/* Split every (start, len) piece in s->frag with one regex, keeping both the
 * matches and the text between them (Hugging Face's "Isolated" split). */
static int regex_split(const pcre2_code *re, scratch *s, const char *text, size_t *n_frag, gl_error *err) {
    size_t out = 0;
    for (size_t f = 0; f < *n_frag; f++) {
        const char *subject = text + s->frag[2 * f];
        size_t len = s->frag[2 * f + 1], pos = 0, done = 0;
        while (pos < len) {
            /* The text was validated once up front; PCRE2 would re-check it on every call. */
            int rc = pcre2_match(re, (PCRE2_SPTR)subject, len, pos, PCRE2_NO_UTF_CHECK, s->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                char msg[120];
                pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
                return gl_error_set(err, "pre-tokenizer regex failed: %s", msg);
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
            size_t ms = ov[0], me = ov[1];
            if (!grow((void **)&s->frag2, &s->frag2_cap, 2 * out + 4, sizeof(uint32_t)))
                return gl_error_set(err, "out of memory");
            if (ms > done) {
                s->frag2[2 * out] = (uint32_t)(s->frag[2 * f] + done);
                s->frag2[2 * out + 1] = (uint32_t)(ms - done);
                out++;
            }
            if (me > ms) {
                s->frag2[2 * out] = (uint32_t)(s->frag[2 * f] + ms);
                s->frag2[2 * out + 1] = (uint32_t)(me - ms);
                out++;
                done = me;
                pos = me;
            } else { /* empty match: step one character */
                pos = ms + (size_t)utf8_len((uint8_t)subject[ms]);
            }
        }
        if (done < len) {
            if (!grow((void **)&s->frag2, &s->frag2_cap, 2 * out + 2, sizeof(uint32_t)))
                return gl_error_set(err, "out of memory");
            s->frag2[2 * out] = (uint32_t)(s->frag[2 * f] + done);
            s->frag2[2 * out + 1] = (uint32_t)(len - done);
            out++;
        }
    }
    uint32_t *tmp = s->frag; s->frag = s->frag2; s->frag2 = tmp;
    size_t tcap = s->frag_cap; s->frag_cap = s->frag2_cap; s->frag2_cap = tcap;
    *n_frag = out;
    return 0;
}

static int bpe_encode_text(const gl_tokenizer *t, scratch *s, const char *text, size_t n, gl_error *err) {
    if (n == 0) return 0;
    if (!grow((void **)&s->frag, &s->frag_cap, 2, sizeof(uint32_t))) return gl_error_set(err, "out of memory");
    s->frag[0] = 0;
    s->frag[1] = (uint32_t)n;
    size_t n_frag = 1;
    for (int r = 0; r < t->n_pre; r++)
        if (regex_split(t->pre[r], s, text, &n_frag, err) < 0) return -1;
    for (size_t f = 0; f < n_frag; f++)
        if (!bpe_encode_word(t, s, (const uint8_t *)text + s->frag[2 * f], s->frag[2 * f + 1]))
            return gl_error_set(err, "out of memory");
    return 0;
}

/* ---- WordPiece ------------------------------------------------------------------ */

static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
           (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word ("▁" + word is already in buf[0..n)). A
 * word with any unmatched position becomes a single unknown token. */
static bool wpm_encode_word(const gl_tokenizer *t, scratch *s, const char *w, size_t n) {
    size_t mark = s->out.n;
    for (size_t i = 0; i < n;) {
        size_t j = i + (size_t)t->max_token_len < n ? i + (size_t)t->max_token_len : n;
        int32_t id = -1;
        for (; j > i; j--)
            if ((id = lookup(t, w + i, j - i)) >= 0) break;
        if (id < 0) { s->out.n = mark; return t->unk >= 0 ? ids_push(&s->out, t->unk) : true; }
        if (!ids_push(&s->out, id)) return false;
        i = j;
    }
    return true;
}

/* BERT's basic tokenizer: NFD, lower-case, drop accents and control
 * characters, split on whitespace, punctuation and CJK ideographs. */
static int wpm_encode_text(const gl_tokenizer *t, scratch *s, const char *text, size_t n, gl_error *err) {
    if (n == 0) return 0;
    utf8proc_uint8_t *nfd = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)n, &nfd,
                                      UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    if (m < 0) return gl_error_set(err, "normalisation failed: %s", utf8proc_errmsg(m));
    if (!grow((void **)&s->buf, &s->buf_cap, 4 * (size_t)m + 8, 1)) { free(nfd); return gl_error_set(err, "out of memory"); }
    size_t w = 0; /* bytes of the current word in buf, after its "▁" */
    memcpy(s->buf, SPACE_MARK, 3);
#define FLUSH() do { if (w && !wpm_encode_word(t, s, s->buf, w + 3)) goto oom; w = 0; } while (0)
    for (utf8proc_ssize_t i = 0; i < m;) {
        utf8proc_int32_t c;
        i += utf8proc_iterate(nfd + i, m - i, &c);
        utf8proc_category_t cat = utf8proc_category(c);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || cat == UTF8PROC_CATEGORY_ZS) { FLUSH(); continue; }
        if (c == 0 || c == 0xFFFD || cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF ||
            cat == UTF8PROC_CATEGORY_MN)
            continue;
        bool punct = (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) ||
                     (c < 0x7F && cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO);
        c = utf8proc_tolower(c);
        if (punct || is_cjk((uint32_t)c)) {
            FLUSH();
            w = (size_t)utf8_put(s->buf + 3, (uint32_t)c);
            FLUSH();
        } else {
            w += (size_t)utf8_put(s->buf + 3 + w, (uint32_t)c);
        }
    }
    FLUSH();
#undef FLUSH
    free(nfd);
    return 0;
oom:
    free(nfd);
    return gl_error_set(err, "out of memory");
}

/* ---- encode ---------------------------------------------------------------------- */

/* The longest special token spelled at text[0..n), or -1. */
static int32_t match_special(const gl_tokenizer *t, const char *text, size_t n, bool parse_special) {
    uint8_t b = (uint8_t)text[0];
    for (int k = t->sp_begin[b]; k < t->sp_begin[b + 1]; k++) {
        int32_t id = t->special[k];
        if (!parse_special && t->types[id] != TT_USER) continue;
        size_t len = t->text_len[id];
        if (len <= n && memcmp(text, text_of(t, id), len) == 0) return id;
    }
    return -1;
}

static int encode_text(const gl_tokenizer *t, scratch *s, const char *text, size_t n, bool after_special,
                       gl_error *err) {
    switch (t->kind) {
    case KIND_SPM: return spm_encode_text(t, s, text, n, after_special) ? 0 : gl_error_set(err, "out of memory");
    case KIND_BPE: return bpe_encode_text(t, s, text, n, err);
    default: return wpm_encode_text(t, s, text, n, err);
    }
}

int tok_encode(const gl_tokenizer *t, const char *text, size_t len, int flags, int32_t **out, gl_error *err) {
    *out = NULL;
    if (len > (size_t)INT32_MAX / 4) return gl_error_set(err, "text too long (%zu bytes)", len);
    long bad = utf8_invalid_at((const uint8_t *)text, len);
    if (bad >= 0) return gl_error_set(err, "invalid UTF-8 at byte %ld", bad);

    utf8proc_uint8_t *normalised = NULL;
    if (t->nfc && len) {
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)len, &normalised,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) return gl_error_set(err, "normalisation failed: %s", utf8proc_errmsg(m));
        text = (const char *)normalised;
        len = (size_t)m;
    }

    scratch s = {0};
    int rc = -1;
    bool add_special = flags & GL_TOKENIZE_ADD_SPECIAL, parse_special = flags & GL_TOKENIZE_PARSE_SPECIAL;
    if (t->kind == KIND_BPE && !(s.md = pcre2_match_data_create(4, NULL))) {
        gl_error_set(err, "out of memory");
        goto done;
    }
    if (add_special && t->add_bos && t->bos >= 0 && !ids_push(&s.out, t->bos)) goto oom;
    size_t plain = 0;          /* start of the text not yet tokenized */
    bool after_special = true; /* SPM adds its space prefix at the start and after each special token */
    for (size_t i = 0; i <= len; i++) {
        int32_t id = -1;
        if (i < len && t->sp_begin[(uint8_t)text[i]] < t->sp_begin[(uint8_t)text[i] + 1])
            id = match_special(t, text + i, len - i, parse_special);
        if (id < 0 && i < len) continue;
        if (i > plain) {
            if (encode_text(t, &s, text + plain, i - plain, after_special, err) < 0) goto done;
            after_special = false;
        }
        if (id < 0) break;
        /* BOS spelled out at the very start replaces the one added above. */
        bool dup_bos = id == t->bos && s.out.n == 1 && s.out.v[0] == t->bos && add_special && t->add_bos && i == 0;
        if (!dup_bos && !ids_push(&s.out, id)) goto oom;
        after_special = true;
        i += t->text_len[id] - 1;
        plain = i + 1;
    }
    if (add_special && t->kind == KIND_WPM && t->eos >= 0 && !ids_push(&s.out, t->eos)) goto oom;
    if (add_special && t->add_eos && t->eos >= 0 && t->kind != KIND_WPM && !ids_push(&s.out, t->eos)) goto oom;
    if (s.out.n > INT32_MAX) { gl_error_set(err, "too many tokens"); goto done; }
    *out = s.out.v ? s.out.v : malloc(sizeof(int32_t));
    if (!*out) goto oom;
    s.out.v = NULL;
    rc = (int)s.out.n;
    goto done;
oom:
    gl_error_set(err, "out of memory");
done:
    free(s.out.v);
    free(s.sym);
    free(s.heap);
    free(s.frag);
    free(s.frag2);
    free(s.buf);
    pcre2_match_data_free(s.md);
    free(normalised);
    return rc;
}

/* ---- decode ---------------------------------------------------------------------- */

const char *tok_piece(const gl_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    if (len) *len = t->piece_len[id];
    return t->piece_blob + t->piece_off[id];
}

char *tok_decode(const gl_tokenizer *t, const int32_t *ids, size_t n, gl_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) {
            gl_error_set(err, "token id %d out of range (vocabulary has %d)", ids[i], t->n_vocab);
            return NULL;
        }
        total += t->piece_len[ids[i]];
    }
    char *text = malloc(total + 1);
    if (!text) { gl_error_set(err, "out of memory"); return NULL; }
    size_t m = 0;
    bool strip = t->kind != KIND_BPE && t->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *p = tok_piece(t, ids[i], &len);
        if (strip && len) {
            /* The space the encoder put in front of the text is not part of it. */
            if (p[0] == ' ') { p++; len--; }
            strip = false;
        }
        memcpy(text + m, p, len);
        m += len;
    }
    text[m] = 0;
    return text;
}

/* ---- queries ---------------------------------------------------------------------- */

int tok_n_vocab(const gl_tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const gl_tokenizer *t) { return t->bos; }
int32_t tok_eos(const gl_tokenizer *t) { return t->eos; }
bool tok_add_bos(const gl_tokenizer *t) { return t->add_bos && t->bos >= 0; }
bool tok_is_eog(const gl_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && (t->flags[id] & FLAG_EOG); }
bool tok_is_control(const gl_tokenizer *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->types[id] == TT_CONTROL; }
const char *tok_text(const gl_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? text_of(t, id) : NULL;
}

/* ---- load -------------------------------------------------------------------------- */

/* Pre-tokenizer regex sets by tokenizer.ggml.pre, as the models' Hugging Face
 * tokenizer.json files define them (PCRE2 runs them unmodified). */
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_GPT4O                                                                                                  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?" \
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* DeepSeek spells its cased-letter class as an explicit list of ranges; it is
 * Unicode's L& (Lu, Ll, Lt). The CJK class runs U+0800..U+9FA5 and Hangul. */
#define RE_DS_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

typedef struct pre_set {
    const char *names;        /* '|'-separated tokenizer.ggml.pre values */
    const char *regex[MAX_PRE_REGEX];
    bool ignore_merges, add_bos, nfc;
} pre_set;

static const pre_set PRE_SETS[] = {
    { "default", { "[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]" }, false, false, false },
    { "gpt-2|phi-2|roberta-bpe|mpt|olmo|jais|jina-es|jina-de|jina-v1-en|jina-v2-es|jina-v2-de|jina-v2-code",
      { RE_GPT2 }, false, false, false },
    { "llama3|llama-v3|llama-bpe|falcon3|dbrx|smaug-bpe", { RE_LLAMA3 }, true, true, false },
    { "qwen2", { RE_QWEN2 }, false, false, true },
    { "stablelm2|megrez", { RE_QWEN2 }, false, false, false },
    { "starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b", { "\\p{N}", RE_GPT2 }, false, false, false },
    { "falcon", { "[\\p{P}\\$\\+<=>\\^~\\|`]+", RE_GPT2, "[0-9][0-9][0-9]" }, false, false, false },
    { "deepseek-llm",
      { "[\\r\\n]", "\\s?\\p{L&}+",
        "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+", "\\s+$",
        RE_DS_CJK, "\\p{N}+" },
      false, false, false },
    { "deepseek-coder", { "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", RE_DS_CJK, "\\p{N}" }, false, false, false },
    { "gpt-4o", { RE_GPT4O }, false, false, false },
};

static const pre_set *find_pre_set(gguf_str name) {
    for (size_t i = 0; i < sizeof PRE_SETS / sizeof PRE_SETS[0]; i++) {
        const char *p = PRE_SETS[i].names;
        while (*p) {
            const char *bar = strchr(p, '|');
            size_t n = bar ? (size_t)(bar - p) : strlen(p);
            if (n == name.len && memcmp(p, name.ptr, n) == 0) return &PRE_SETS[i];
            p += n + (bar ? 1 : 0);
        }
    }
    return NULL;
}

static int load_pre(gl_tokenizer *t, const gguf_file *f, gl_error *err) {
    gguf_str name = { 7, "default" };
    gguf_get_str(f, "tokenizer.ggml.pre", &name);
    const pre_set *set = find_pre_set(name);
    if (!set)
        return gl_error_set(err, "unsupported pre-tokenizer '%.*s' (tokenizer.ggml.pre)", (int)(name.len > 64 ? 64 : name.len), name.ptr);
    t->ignore_merges = set->ignore_merges;
    t->add_bos = set->add_bos;
    t->nfc = set->nfc;
    for (int i = 0; i < MAX_PRE_REGEX && set->regex[i]; i++) {
        int code;
        PCRE2_SIZE at;
        t->pre[i] = pcre2_compile((PCRE2_SPTR)set->regex[i], PCRE2_ZERO_TERMINATED,
                                  PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_NO_UTF_CHECK, &code, &at, NULL);
        if (!t->pre[i]) {
            char msg[120];
            pcre2_get_error_message(code, (PCRE2_UCHAR *)msg, sizeof msg);
            return gl_error_set(err, "pre-tokenizer regex %d: %s at %zu", i, msg, (size_t)at);
        }
        pcre2_jit_compile(t->pre[i], PCRE2_JIT_COMPLETE); /* optional speed-up; falls back to the interpreter */
        t->n_pre = i + 1;
    }
    return 0;
}

static int load_merges(gl_tokenizer *t, const gguf_file *f, gl_error *err) {
    const gguf_value *m = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING);
    if (!m) return gl_error_set(err, "byte-level BPE vocabulary without tokenizer.ggml.merges");
    uint32_t size = table_size_for(m->arr.n);
    t->merge_keys = malloc(size * sizeof *t->merge_keys);
    t->merge_rank = malloc(size * sizeof *t->merge_rank);
    t->merge_result = malloc(size * sizeof *t->merge_result);
    if (!t->merge_keys || !t->merge_rank || !t->merge_result) return gl_error_set(err, "out of memory");
    memset(t->merge_keys, 0xff, size * sizeof *t->merge_keys);
    t->merge_mask = size - 1;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (uint64_t r = 0; r < m->arr.n; r++) {
        gguf_str s = m->arr.strs[r];
        /* "left right": split at the first space after the first byte, so a
         * left side that is itself a space-like char stays whole. */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) continue;
        size_t ln = (size_t)(sp - s.ptr), rn = s.len - ln - 1;
        int32_t a = lookup(t, s.ptr, ln), b = lookup(t, sp + 1, rn);
        if (!grow((void **)&joined, &joined_cap, ln + rn, 1)) { free(joined); return gl_error_set(err, "out of memory"); }
        memcpy(joined, s.ptr, ln);
        memcpy(joined + ln, sp + 1, rn);
        int32_t c = lookup(t, joined, ln + rn);
        if (a < 0 || b < 0 || c < 0) continue; /* cannot apply to token ids; real vocabularies have none */
        uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
        uint32_t i = (uint32_t)hash_u64(key) & t->merge_mask;
        while (t->merge_keys[i] != UINT64_MAX && t->merge_keys[i] != key) i = (i + 1) & t->merge_mask;
        if (t->merge_keys[i] == key) continue; /* the first (lowest) rank wins */
        t->merge_keys[i] = key;
        t->merge_rank[i] = (int32_t)(r > INT32_MAX ? INT32_MAX : r);
        t->merge_result[i] = c;
    }
    free(joined);
    return 0;
}

/* What a token contributes to output text (see tok_piece). */
static size_t make_piece(const gl_tokenizer *t, int32_t id, char *out) {
    const char *s = text_of(t, id);
    size_t n = t->text_len[id];
    uint8_t type = t->types[id];
    if (type == TT_CONTROL || type == TT_UNKNOWN || type == TT_UNUSED) return 0;
    if (type == TT_USER) { memcpy(out, s, n); return n; }
    if (t->kind == KIND_SPM && type == TT_BYTE && n == 6 && memcmp(s, "<0x", 3) == 0) {
        out[0] = (char)strtol(s + 3, NULL, 16);
        return 1;
    }
    size_t m = 0;
    if (t->kind == KIND_BPE) {
        for (size_t i = 0; i < n;) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
            if (k <= 0) { out[m++] = s[i++]; continue; }
            if (cp < 324 && t->cp_is_byte[cp]) out[m++] = (char)t->byte_of_cp[cp];
            else { memcpy(out + m, s + i, (size_t)k); m += (size_t)k; }
            i += (size_t)k;
        }
        return m;
    }
    for (size_t i = 0; i < n;) { /* SPM and WPM: visible space back to a space */
        if (i + 3 <= n && memcmp(s + i, SPACE_MARK, 3) == 0) { out[m++] = ' '; i += 3; }
        else out[m++] = s[i++];
    }
    return m;
}

static int32_t special_id(const gguf_file *f, const char *key, int n_vocab, int32_t fallback) {
    uint32_t v;
    if (!gguf_get_u32(f, key, &v)) return fallback < n_vocab ? fallback : -1;
    return v < (uint32_t)n_vocab ? (int32_t)v : -1;
}

/* Sort key of a special token: first byte, then longest first, then id. */
typedef struct special_key { uint8_t first; uint32_t len; int32_t id; } special_key;

static int cmp_special(const void *a, const void *b) {
    const special_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool is_special_type(uint8_t ty) { return ty == TT_CONTROL || ty == TT_USER || ty == TT_UNKNOWN; }

static int load_specials(gl_tokenizer *t, gl_error *err) {
    int n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->types[id]) && t->text_len[id] > 0) n++;
    special_key *keys = malloc((size_t)(n ? n : 1) * sizeof *keys);
    t->special = malloc((size_t)(n ? n : 1) * sizeof *t->special);
    if (!keys || !t->special) { free(keys); return gl_error_set(err, "out of memory"); }
    n = 0;
    for (int id = 0; id < t->n_vocab; id++)
        if (is_special_type(t->types[id]) && t->text_len[id] > 0)
            keys[n++] = (special_key){ (uint8_t)text_of(t, id)[0], t->text_len[id], id };
    qsort(keys, (size_t)n, sizeof *keys, cmp_special);
    for (int k = 0; k < n; k++) t->special[k] = keys[k].id;
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < n && keys[k].first < b) k++;
        t->sp_begin[b] = b == 256 ? n : k;
    }
    free(keys);
    return 0;
}

static void mark_eog(gl_tokenizer *t, const gguf_file *f) {
    static const char *const names[] = { "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>",
                                         "<|endoftext|>", "</s>", "<EOT>" };
    if (t->eos >= 0) t->flags[t->eos] |= FLAG_EOG;
    int32_t eot = special_id(f, "tokenizer.ggml.eot_token_id", t->n_vocab, -1);
    int32_t eom = special_id(f, "tokenizer.ggml.eom_token_id", t->n_vocab, -1);
    if (eot >= 0) t->flags[eot] |= FLAG_EOG;
    if (eom >= 0) t->flags[eom] |= FLAG_EOG;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int32_t id = lookup(t, names[i], strlen(names[i]));
        if (id >= 0 && t->types[id] == TT_CONTROL) t->flags[id] |= FLAG_EOG;
    }
}

static int load_vocab(gl_tokenizer *t, const gguf_file *f, gl_error *err) {
    const gguf_value *tokens = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    if (!tokens) return gl_error_set(err, "no tokenizer.ggml.tokens in the metadata");
    if (tokens->arr.n == 0 || tokens->arr.n > (1u << 24))
        return gl_error_set(err, "tokenizer.ggml.tokens has %llu entries", (unsigned long long)tokens->arr.n);
    int n = t->n_vocab = (int)tokens->arr.n;

    uint64_t blob = 0;
    for (int i = 0; i < n; i++) blob += tokens->arr.strs[i].len + 1;
    if (blob > UINT32_MAX / 2) return gl_error_set(err, "tokenizer.ggml.tokens too large");
    t->text_blob = malloc(blob);
    t->text_off = malloc((size_t)n * sizeof *t->text_off);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->scores = calloc((size_t)n, sizeof *t->scores);
    t->types = malloc((size_t)n);
    t->flags = calloc((size_t)n, 1);
    uint32_t slots = table_size_for((uint64_t)n);
    t->vocab_slots = malloc(slots * sizeof *t->vocab_slots);
    if (!t->text_blob || !t->text_off || !t->text_len || !t->scores || !t->types || !t->flags || !t->vocab_slots)
        return gl_error_set(err, "out of memory");
    memset(t->vocab_slots, 0xff, slots * sizeof *t->vocab_slots);
    t->vocab_mask = slots - 1;

    const gguf_value *scores = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_F32);
    if (scores && scores->arr.n != (uint64_t)n)
        return gl_error_set(err, "tokenizer.ggml.scores has %llu entries, expected %d", (unsigned long long)scores->arr.n, n);
    const gguf_value *types = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_I32);
    if (types && types->arr.n != (uint64_t)n)
        return gl_error_set(err, "tokenizer.ggml.token_type has %llu entries, expected %d", (unsigned long long)types->arr.n, n);

    uint32_t off = 0;
    for (int i = 0; i < n; i++) {
        gguf_str s = tokens->arr.strs[i];
        t->text_off[i] = off;
        t->text_len[i] = (uint32_t)s.len;
        memcpy(t->text_blob + off, s.ptr, s.len);
        t->text_blob[off + s.len] = 0;
        off += (uint32_t)s.len + 1;
        if (scores) memcpy(&t->scores[i], (const char *)scores->arr.raw + 4 * (size_t)i, 4);
        int32_t ty = TT_NORMAL;
        if (types) memcpy(&ty, (const char *)types->arr.raw + 4 * (size_t)i, 4);
        t->types[i] = ty >= TT_NORMAL && ty <= TT_BYTE ? (uint8_t)ty : TT_UNUSED;
        if ((int)s.len > t->max_token_len) t->max_token_len = (int)s.len;
        if (s.len == 0) continue;
        /* A repeated spelling resolves to the last id, as llama.cpp does. */
        uint32_t k = (uint32_t)hash_bytes(s.ptr, s.len) & t->vocab_mask;
        for (;; k = (k + 1) & t->vocab_mask) {
            int32_t id = t->vocab_slots[k];
            if (id < 0 || (t->text_len[id] == s.len && memcmp(text_of(t, id), s.ptr, s.len) == 0)) break;
        }
        t->vocab_slots[k] = i;
    }
    return 0;
}

static int load_pieces(gl_tokenizer *t, gl_error *err) {
    /* A byte-level char is at most 2 bytes of UTF-8 for 1 byte out, so no piece is longer than its spelling. */
    uint64_t blob = 0;
    for (int i = 0; i < t->n_vocab; i++) blob += t->text_len[i] + 1;
    t->piece_blob = malloc(blob);
    t->piece_off = malloc((size_t)t->n_vocab * sizeof *t->piece_off);
    t->piece_len = malloc((size_t)t->n_vocab * sizeof *t->piece_len);
    if (!t->piece_blob || !t->piece_off || !t->piece_len) return gl_error_set(err, "out of memory");
    uint32_t off = 0;
    for (int i = 0; i < t->n_vocab; i++) {
        size_t n = make_piece(t, i, t->piece_blob + off);
        t->piece_blob[off + n] = 0;
        t->piece_off[i] = off;
        t->piece_len[i] = (uint32_t)n;
        off += (uint32_t)n + 1;
    }
    return 0;
}

gl_tokenizer *tok_load(const gguf_file *f, gl_error *err) {
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model)) {
        gl_error_set(err, "no tokenizer in the metadata (tokenizer.ggml.model missing)");
        return NULL;
    }
    gl_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { gl_error_set(err, "out of memory"); return NULL; }
    if (gguf_str_eq(model, "llama")) t->kind = KIND_SPM;
    else if (gguf_str_eq(model, "gpt2")) t->kind = KIND_BPE;
    else if (gguf_str_eq(model, "bert")) t->kind = KIND_WPM;
    else {
        gl_error_set(err, "unsupported tokenizer model '%.*s' (supported: llama, gpt2, bert)",
                     (int)(model.len > 64 ? 64 : model.len), model.ptr);
        goto fail;
    }
    if (load_vocab(t, f, err) < 0) goto fail;

    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    if (t->kind == KIND_SPM) {
        for (int b = 0; b < 256; b++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = lookup(t, name, 6);
        }
        t->bos = special_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, 1);
        t->eos = special_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, 2);
        t->unk = special_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, 0);
        t->add_bos = true;
        t->add_space_prefix = true;
        t->spm_word_split = true;
        for (int id = 0; id < t->n_vocab && t->spm_word_split; id++) {
            const char *w = text_of(t, id);
            size_t len = t->text_len[id], i = 0;
            while (i + 3 <= len && is_mark_at(w, i)) i += 3;
            for (; i + 3 <= len; i++)
                if (is_mark_at(w, i)) t->spm_word_split = false;
        }
    } else if (t->kind == KIND_BPE) {
        for (int b = 0; b < 256; b++) {
            uint32_t cp = byte_to_cp(b);
            char u[4];
            t->byte_id[b] = lookup(t, u, (size_t)utf8_put(u, cp));
            t->byte_of_cp[cp] = (uint8_t)b;
            t->cp_is_byte[cp] = true;
        }
        if (load_pre(t, f, err) < 0 || load_merges(t, f, err) < 0) goto fail;
        t->bos = special_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, -1);
        t->eos = special_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, -1);
        t->unk = special_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, -1);
    } else { /* WordPiece: [CLS] text [SEP] */
        t->bos = special_id(f, "tokenizer.ggml.cls_token_id", t->n_vocab, -1);
        if (t->bos < 0) t->bos = special_id(f, "tokenizer.ggml.bos_token_id", t->n_vocab, -1);
        t->eos = special_id(f, "tokenizer.ggml.seperator_token_id", t->n_vocab, -1);
        if (t->eos < 0) t->eos = special_id(f, "tokenizer.ggml.eos_token_id", t->n_vocab, -1);
        t->unk = special_id(f, "tokenizer.ggml.unknown_token_id", t->n_vocab, -1);
        t->add_bos = true;
        t->add_space_prefix = true;
    }
    gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos);
    gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos);
    if (t->kind == KIND_SPM) {
        gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
        gguf_get_bool(f, "tokenizer.ggml.remove_extra_whitespaces", &t->remove_extra_ws);
    }
    if (load_specials(t, err) < 0 || load_pieces(t, err) < 0) goto fail;
    mark_eog(t, f);
    return t;
fail:
    tok_free(t);
    return NULL;
}

void tok_free(gl_tokenizer *t) {
    if (!t) return;
    free(t->text_blob); free(t->text_off); free(t->text_len);
    free(t->piece_blob); free(t->piece_off); free(t->piece_len);
    free(t->scores); free(t->types); free(t->flags); free(t->vocab_slots);
    free(t->merge_keys); free(t->merge_rank); free(t->merge_result);
    for (int i = 0; i < t->n_pre; i++) pcre2_code_free(t->pre[i]);
    free(t->special);
    free(t);
}
