/* peers.c -- per-address connection counts (see peers.h). */
#include "peers.h"

#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define N_BUCKETS 4096

struct peer {
    unsigned char key[16];
    unsigned char key_len;
    int n;                   /* open connections from this address */
    peer *next;              /* in its bucket */
};

struct peers {
    peer *buckets[N_BUCKETS];
};

peers *peers_create(void) { return calloc(1, sizeof(peers)); }

void peers_free(peers *p) {
    if (!p) return;
    for (int i = 0; i < N_BUCKETS; i++)
        while (p->buckets[i]) {
            peer *e = p->buckets[i];
            p->buckets[i] = e->next;
            free(e);
        }
    free(p);
}

/* The address bytes that identify a client; 0 for an unknown family. */
static size_t address_key(const struct sockaddr *addr, unsigned char key[16]) {
    if (addr->sa_family == AF_INET) {
        memcpy(key, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return 4;
    }
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            memcpy(key, a->s6_addr + 12, 4);
            return 4;
        }
        memcpy(key, a->s6_addr, 16);
        return 16;
    }
    return 0;
}

static unsigned bucket_of(const unsigned char *key, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ key[i]) * 16777619u;
    return h % N_BUCKETS;
}

peer *peers_add(peers *p, const struct sockaddr *addr) {
    unsigned char key[16] = {0};
    size_t len = addr ? address_key(addr, key) : 0;
    unsigned b = bucket_of(key, len);
    for (peer *e = p->buckets[b]; e; e = e->next)
        if (e->key_len == len && !memcmp(e->key, key, len)) {
            e->n++;
            return e;
        }
    peer *e = calloc(1, sizeof(*e));
    if (!e) return NULL;
    memcpy(e->key, key, len);
    e->key_len = (unsigned char)len;
    e->n = 1;
    e->next = p->buckets[b];
    p->buckets[b] = e;
    return e;
}

void peers_remove(peers *p, peer *e) {
    if (!e || --e->n > 0) return;
    for (peer **at = &p->buckets[bucket_of(e->key, e->key_len)]; *at; at = &(*at)->next)
        if (*at == e) {
            *at = e->next;
            free(e);
            return;
        }
}

int peers_count(const peer *e) { return e ? e->n : 0; }
