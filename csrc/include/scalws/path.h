/* Request paths as routes and files see them (RFC 3986 §2.1, §5.2.4).
 *
 * sws_normalize_path() turns the path of a request-target (the bytes before
 * '?') into the form every route is matched against and every file is looked
 * up by: percent-escapes decoded, "." and ".." segments resolved, runs of
 * '/' merged, as nginx does for `location`. Decoding comes first, so an
 * encoded dot or slash ("%2e%2e", "%2F") is resolved like a literal one and
 * can never climb above "/".
 *
 * No allocation: the caller owns `out`, which must hold `len` bytes (the
 * result is never longer than the input). Returns the length of the result
 * (>= 1, always starting with '/'), or -1 when the path must be refused
 * with 400: it does not start with '/', has a malformed escape ("%4", "%zz"),
 * an encoded NUL, a ".." above the root, or an overlong UTF-8 sequence
 * (0xC0/0xC1 leads, 0xE0 0x80-0x9F, 0xF0 0x80-0x8F: alternative spellings of
 * ASCII such as "%c0%ae" for '.').
 *
 * Floor: a leaf (csrc/http/path.c); it calls nothing of the engine's.
 */
#ifndef SCALWS_PATH_H
#define SCALWS_PATH_H

#include <stddef.h>
#include <sys/types.h>

ssize_t sws_normalize_path(const char *in, size_t len, char *out);

#endif
