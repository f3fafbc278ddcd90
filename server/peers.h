/* peers.h -- open connections counted per client address, so that one
 * address cannot take every connection slot.
 *
 * A small chained hash table keyed by the address bytes (4 for IPv4, 16
 * for IPv6; an IPv4-mapped IPv6 address counts as its IPv4 one). Entries
 * go when their count drops to zero. */
#ifndef GL_PEERS_H
#define GL_PEERS_H

#include <stddef.h>
#include <sys/socket.h>

typedef struct peers peers;
typedef struct peer peer;

peers *peers_create(void);
void peers_free(peers *p);
/* One more connection from addr; returns its address's entry (NULL when
 * out of memory: the connection is then not counted). */
peer *peers_add(peers *p, const struct sockaddr *addr);
/* One connection from e's address fewer; e may be gone after. */
void peers_remove(peers *p, peer *e);
/* Connections now open from e's address. */
int peers_count(const peer *e);

#endif
