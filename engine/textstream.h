/* textstream.h -- the text a client sees, built from token pieces.
 *
 * Two jobs between the detokenizer and the client: never release an
 * incomplete UTF-8 sequence, and never release text that could still turn
 * out to be the beginning of a stop string. When a stop string completes,
 * everything before it is released and the stop string and anything after
 * it are dropped. Allocates only when a piece outgrows the buffer. */
#ifndef GL_TEXTSTREAM_H
#define GL_TEXTSTREAM_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ts_stream ts_stream;

/* stops: n_stops strings (copied); empty strings are ignored. */
ts_stream *ts_create(const char *const *stops, int n_stops);
void ts_free(ts_stream *s);

/* Append bytes of one token. *out / *out_len receive the text that is now
 * safe to send (points into s, valid until the next call). Returns true when
 * a stop string matched: the stream is then finished and ignores input
 * (later pushes return true with no text). Running out of memory for a huge
 * piece also ends the stream this way, as there is no other way to say so.
 * Invalid UTF-8 comes out as U+FFFD, one per maximal invalid subpart. */
bool ts_push(ts_stream *s, const char *bytes, size_t n, const char **out, size_t *out_len);

/* End of generation: release what was held back for stop-string matching.
 * A trailing incomplete UTF-8 sequence is replaced by U+FFFD. */
void ts_finish(ts_stream *s, const char **out, size_t *out_len);

/* Bytes released so far (for logprobs text_offset). */
size_t ts_released(const ts_stream *s);
/* The index of the stop string that ended the text, -1 while none has. */
int ts_stop_matched(const ts_stream *s);

#endif
