/* Frames of a read buffer, split and pre-checked against the protocol's value domain in one
 * call (the server's per-buffer fast path; see tay/protocol/values.py for the domain).
 *
 * A frame is marked clean when its payload, *if it is valid JSON*, is an object that the
 * Python decoder would accept as it is: nesting of at most max_depth containers, at most
 * max_nodes nodes (1 + every value inside a container), object keys of at most
 * max_key_bytes, no repeated key in any object, and no integer literal of 19 digits or more
 * (those may leave the 64-bit range). The scan never decides a refusal: anything it is not
 * sure of (an escaped key, an object of more than CHECK_KEYS keys, nesting past
 * CHECK_DEPTH, a byte that cannot start a JSON token) leaves the frame unclean, and the
 * caller checks it the slow way, which names the error. JSON syntax itself is orjson's
 * job: for text that is not valid JSON the mark means nothing. */
#include "tay_native.h"

#include <string.h>

#define CHECK_DEPTH 255   /* containers tracked; deeper frames are left to the slow path */
#define CHECK_KEYS 64     /* keys compared pairwise per object */
#define CHECK_OPEN_KEYS 256 /* keys of all open objects together */

typedef struct { uint32_t start, length; } key_span;

static int is_space(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The offset after the string whose opening quote is at s[i]; sets *escaped when it holds
 * a backslash. Returns 0 when the string is not closed. */
static size_t string_end(const uint8_t *s, size_t n, size_t i, int *escaped) {
    i++;
    while (i < n) {
        const uint8_t *quote = memchr(s + i, '"', n - i);
        const uint8_t *slash = memchr(s + i, '\\', quote ? (size_t)(quote - (s + i)) : n - i);
        if (slash) {
            *escaped = 1;
            i = (size_t)(slash - s) + 2;  /* skip the escaped byte */
            continue;
        }
        return quote ? (size_t)(quote - s) + 1 : 0;
    }
    return 0;
}

static int keys_distinct(const uint8_t *s, const key_span *keys, size_t from, size_t to) {
    for (size_t a = from; a < to; a++)
        for (size_t b = a + 1; b < to; b++)
            if (keys[a].length == keys[b].length &&
                memcmp(s + keys[a].start, s + keys[b].start, keys[a].length) == 0)
                return 0;
    return 1;
}

int tay_json_domain_clean(const uint8_t *s, size_t n, uint32_t max_depth, uint64_t max_nodes,
                          uint32_t max_key_bytes) {
    uint8_t is_object[CHECK_DEPTH + 1];
    size_t key_base[CHECK_DEPTH + 1];
    key_span keys[CHECK_OPEN_KEYS];
    size_t open_keys = 0, depth = 0, i = 0;
    uint64_t nodes = 1;  /* the top-level object */
    int expect_key = 0, started = 0;
    while (i < n && is_space(s[i])) i++;
    if (i == n || s[i] != '{') return 0;
    while (i < n) {
        uint8_t c = s[i];
        if (is_space(c) || c == ':') { i++; continue; }
        if (started && depth == 0) return 0;  /* bytes after the top-level object */
        if (c == '{' || c == '[') {
            if (started && ++nodes > max_nodes) return 0;
            started = 1;
            if (++depth > max_depth || depth > CHECK_DEPTH) return 0;
            is_object[depth] = c == '{';
            key_base[depth] = open_keys;
            expect_key = c == '{';
            i++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) return 0;
            if (is_object[depth] && !keys_distinct(s, keys, key_base[depth], open_keys)) return 0;
            open_keys = key_base[depth];
            depth--;
            expect_key = 0;
            i++;
        } else if (c == ',') {
            if (depth == 0) return 0;
            expect_key = is_object[depth];
            i++;
        } else if (c == '"') {
            int escaped = 0;
            size_t end = string_end(s, n, i, &escaped);
            if (end == 0) return 0;
            if (expect_key) {
                size_t length = end - i - 2;
                if (escaped || length > max_key_bytes) return 0;
                if (open_keys == CHECK_OPEN_KEYS ||
                    open_keys - key_base[depth] == CHECK_KEYS) return 0;
                keys[open_keys].start = (uint32_t)(i + 1);
                keys[open_keys].length = (uint32_t)length;
                open_keys++;
                expect_key = 0;
            } else if (++nodes > max_nodes) {
                return 0;
            }
            i = end;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t run = 0;
            for (; i < n; i++) {
                uint8_t d = s[i];
                if (d >= '0' && d <= '9') {
                    if (++run >= 19) return 0;
                } else if (d == '-' || d == '+' || d == '.' || d == 'e' || d == 'E') {
                    run = 0;
                } else {
                    break;
                }
            }
            if (++nodes > max_nodes) return 0;
        } else if (c == 't' || c == 'f' || c == 'n') {
            while (i < n && s[i] >= 'a' && s[i] <= 'z') i++;
            if (++nodes > max_nodes) return 0;
        } else {
            return 0;
        }
    }
    return started && depth == 0;
}

int tay_split_frames_checked(const uint8_t *buf, size_t size, uint32_t max_frame,
                             size_t capacity, uint32_t max_depth, uint64_t max_nodes,
                             uint32_t max_key_bytes, uint64_t *starts, uint64_t *ends,
                             uint8_t *clean, size_t *count, size_t *consumed) {
    int code = tay_split_frames(buf, size, max_frame, capacity, starts, ends, count, consumed);
    for (size_t k = 0; k < *count; k++)
        clean[k] = (uint8_t)tay_json_domain_clean(buf + starts[k], ends[k] - starts[k],
                                                  max_depth, max_nodes, max_key_bytes);
    return code;
}
