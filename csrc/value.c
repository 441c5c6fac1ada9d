/* Canonical Value validation (storage.md §5) producing a pre-order node tape.
 *
 * C cannot build Python objects, so tay_value_scan() does every check (tags, lengths,
 * strict UTF-8, map key order, depth/node/binary budgets) and records one tape entry per
 * node; Python then turns the tape into objects without re-checking anything.
 * Tape entry i: tags[i] = the tag; values[i] = the u64 body (tags 03/04, as raw bits), the
 * count (08/09) or the body length (06/07); offsets[i] = the body start (06/07);
 * reals[i] = the double (05).
 * The check order mirrors tay/_native/_pure_value.py exactly, so both twins report the same
 * reason at the same offset.
 */
#include "tay_native.h"

#include <string.h>

typedef struct {
    const uint8_t *data;
    size_t size;
    uint32_t max_depth;
    uint64_t nodes_left;
    uint64_t binary_left;
    size_t capacity, count;
    uint8_t *tags;
    uint64_t *values;
    uint32_t *offsets;
    double *reals;
    size_t error_offset;
} value_scan;

static uint32_t read_u32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static uint64_t read_u64(const uint8_t *p) {
    return ((uint64_t)read_u32(p) << 32) | read_u32(p + 4);
}

/* Whether the short rest s[i:n] (1 to 7 bytes) is ASCII: two loads that overlap inside
 * it (4 + 4 bytes, or 2 + 2, or the one byte) instead of a loop over its bytes. */
static int ascii_rest(const uint8_t *s, size_t i, size_t n) {
    size_t rest = n - i;
    if (rest >= 4) {
        uint32_t a, b;
        memcpy(&a, s + i, 4);
        memcpy(&b, s + n - 4, 4);
        return !((a | b) & 0x80808080u);
    }
    if (rest >= 2) {
        uint16_t a, b;
        memcpy(&a, s + i, 2);
        memcpy(&b, s + n - 2, 2);
        return !((a | b) & 0x8080u);
    }
    return s[i] < 0x80;
}

/* Returns 1 when data[0:length] is strict UTF-8 (shortest form, no surrogates,
 * <= U+10FFFF, nothing truncated), else 0. */
int tay_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        /* runs of ASCII (most text: a quarter of a restart's snapshot scan went byte by
         * byte here) 32 and then eight bytes at a time, four words tested at once (a
         * restart checks ~12 MB of args text); any byte >= 0x80 falls through to the checks */
        while (n - i >= 32) {
            uint64_t a, b, c, d;
            memcpy(&a, s + i, 8);
            memcpy(&b, s + i + 8, 8);
            memcpy(&c, s + i + 16, 8);
            memcpy(&d, s + i + 24, 8);
            if ((a | b | c | d) & 0x8080808080808080ull) break;
            i += 32;
        }
        while (n - i >= 8) {
            uint64_t word;
            memcpy(&word, s + i, 8);
            if (word & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i == n) break;
        if (n - i < 8 && ascii_rest(s, i, n)) break;  /* most map keys are short */
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;       /* overlong */
            else if (c == 0xED) hi = 0x9F;  /* surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;       /* overlong */
            else if (c == 0xF4) hi = 0x8F;  /* above U+10FFFF */
        } else return 0;
        if (n - i <= need) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += need + 1;
    }
    return 1;
}

static int fail(value_scan *v, int reason, size_t offset) {
    v->error_offset = offset;
    return -reason;
}

/* Appends a tape entry; returns its index or -1 when the tape is full. */
static long emit(value_scan *v, uint8_t tag, uint64_t value) {
    if (v->count == v->capacity) return -1;
    v->tags[v->count] = tag;
    v->values[v->count] = value;
    return (long)v->count++;
}

/* Checks the text/bytes value at pos and charges its body to the binary budget.
 * Returns 0 with *end set past the body, or -reason. */
static int scan_body(value_scan *v, size_t pos, size_t *end) {
    if (v->size - pos < 5) return fail(v, TAY_V_TRUNCATED, pos);
    uint32_t length = read_u32(v->data + pos + 1);
    if (length > v->size - pos - 5) return fail(v, TAY_V_TRUNCATED, pos);
    if (length > v->binary_left) return fail(v, TAY_V_BINARY_LIMIT, pos);
    v->binary_left -= length;
    if (v->data[pos] == 0x06 && !tay_utf8_valid(v->data + pos + 5, length))
        return fail(v, TAY_V_INVALID_UTF8, pos);
    long index = emit(v, v->data[pos], length);
    if (index < 0) return fail(v, TAY_V_TAPE_FULL, pos);
    v->offsets[index] = (uint32_t)(pos + 5);
    *end = pos + 5 + length;
    return 0;
}

/* Reads a container count at pos and checks it against the remaining bytes (each item needs
 * at least min_item bytes) and then the node budget (nodes_per_item per item). */
static int reserve(value_scan *v, size_t pos, uint32_t *count, uint64_t min_item,
                   uint64_t nodes_per_item) {
    if (v->size - pos < 5) return fail(v, TAY_V_TRUNCATED, pos);
    *count = read_u32(v->data + pos + 1);
    if ((uint64_t)*count * min_item > v->size - pos - 5) return fail(v, TAY_V_TRUNCATED, pos);
    uint64_t nodes = (uint64_t)*count * nodes_per_item;
    if (nodes > v->nodes_left) return fail(v, TAY_V_NODE_LIMIT, pos);
    v->nodes_left -= nodes;
    if (emit(v, v->data[pos], *count) < 0) return fail(v, TAY_V_TAPE_FULL, pos);
    return 0;
}

static int scan_value(value_scan *v, size_t pos, uint32_t depth, size_t *end);

/* The map at pos: keys must be tag 06 and strictly ascending by raw bytes. */
static int scan_map(value_scan *v, size_t pos, uint32_t depth, size_t *end) {
    uint32_t count;
    int rc = reserve(v, pos, &count, 6, 2);
    if (rc) return rc;
    size_t cursor = pos + 5, previous = 0, previous_length = 0;
    for (uint32_t i = 0; i < count; i++) {
        if (cursor >= v->size) return fail(v, TAY_V_TRUNCATED, cursor);
        if (depth + 1 > v->max_depth) return fail(v, TAY_V_DEPTH_LIMIT, cursor);
        if (v->data[cursor] != 0x06) return fail(v, TAY_V_MAP_KEY_NOT_TEXT, cursor);
        size_t after_key;
        if ((rc = scan_body(v, cursor, &after_key))) return rc;
        size_t length = after_key - cursor - 5;
        if (i > 0) {
            size_t common = length < previous_length ? length : previous_length;
            int order = memcmp(v->data + cursor + 5, v->data + previous, common);
            if (order < 0 || (order == 0 && length <= previous_length))
                return fail(v, TAY_V_MAP_ORDER, cursor);
        }
        previous = cursor + 5;
        previous_length = length;
        if ((rc = scan_value(v, after_key, depth + 1, &cursor))) return rc;
    }
    *end = cursor;
    return 0;
}

/* Scans the value at pos (already counted as a node) at the given depth.
 * Returns 0 with *end set past it, or -reason with v->error_offset set. */
static int scan_value(value_scan *v, size_t pos, uint32_t depth, size_t *end) {
    if (pos >= v->size) return fail(v, TAY_V_TRUNCATED, pos);
    if (depth > v->max_depth) return fail(v, TAY_V_DEPTH_LIMIT, pos);
    uint8_t tag = v->data[pos];
    if (tag <= 0x02) {
        if (emit(v, tag, 0) < 0) return fail(v, TAY_V_TAPE_FULL, pos);
        *end = pos + 1;
        return 0;
    }
    if (tag <= 0x05) {
        if (v->size - pos < 9) return fail(v, TAY_V_TRUNCATED, pos);
        uint64_t bits = read_u64(v->data + pos + 1);
        if (tag == 0x03 && !(bits >> 63)) return fail(v, TAY_V_NEGATIVE_NOT_NEGATIVE, pos);
        if (tag == 0x05 && (bits & 0x7FF0000000000000ull) == 0x7FF0000000000000ull)
            return fail(v, TAY_V_NON_FINITE_FLOAT, pos);
        long index = emit(v, tag, bits);
        if (index < 0) return fail(v, TAY_V_TAPE_FULL, pos);
        if (tag == 0x05) memcpy(&v->reals[index], &bits, sizeof bits);
        *end = pos + 9;
        return 0;
    }
    if (tag == 0x06 || tag == 0x07) return scan_body(v, pos, end);
    if (tag == 0x09) return scan_map(v, pos, depth, end);
    if (tag != 0x08) return fail(v, TAY_V_UNKNOWN_TAG, pos);
    uint32_t count;
    int rc = reserve(v, pos, &count, 1, 1);
    if (rc) return rc;
    size_t cursor = pos + 5;
    for (uint32_t i = 0; i < count; i++)
        if ((rc = scan_value(v, cursor, depth + 1, &cursor))) return rc;
    *end = cursor;
    return 0;
}

/* Validates that data[0:size] is exactly one canonical Value within the budgets and writes
 * its tape (at most `capacity` entries; size + 1 always suffices since every node takes at
 * least one byte). Returns the number of tape entries (>= 1), or -TAY_V_* with
 * *error_offset set. max_depth must be <= TAY_VALUE_DEPTH_CEILING (bounds the recursion). */
int tay_value_scan(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                   uint64_t max_binary, size_t capacity, uint8_t *tags, uint64_t *values,
                   uint32_t *offsets, double *reals, size_t *node_count,
                   size_t *error_offset) {
    value_scan v = {data, size, max_depth, 0, max_binary, capacity, 0,
                    tags, values, offsets, reals, 0};
    size_t end = 0;
    int rc;
    *node_count = 0;
    if (max_depth > TAY_VALUE_DEPTH_CEILING) rc = fail(&v, TAY_V_DEPTH_LIMIT, 0);
    else if (max_nodes < 1) rc = fail(&v, TAY_V_NODE_LIMIT, 0);
    else {
        v.nodes_left = max_nodes - 1;
        rc = scan_value(&v, 0, 1, &end);
        if (rc == 0 && end != size) rc = fail(&v, TAY_V_TRAILING_BYTES, end);
    }
    *error_offset = v.error_offset;
    *node_count = v.count;
    return rc ? rc : (int)(v.count > 0x7FFFFFFF ? 0x7FFFFFFF : v.count);
}
