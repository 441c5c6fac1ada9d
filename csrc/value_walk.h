/* Walking an already validated canonical Value in place (events.c, snapshots.c).
 *
 * Internal to csrc/: static helpers over bytes tay_value_scan() has accepted, so no bounds
 * checks are needed here. Each check returns 0 when the bytes are not the exact shape asked
 * for; the caller then marks the record slow and Python's exact decoder decides.
 */
#ifndef TAY_VALUE_WALK_H
#define TAY_VALUE_WALK_H

#include "tay_native.h"

#include <string.h>

#define TIME_MAX 0x7FFFFFFFFFFFFFFFull
#define ATTEMPT_MAX 65535u
#define TIMEOUT_MAX_MS 86400000u

typedef struct {
    const uint8_t *data; /* the payload; every offset below is relative to it */
    int has_bytes;       /* a tag-07 node was seen by skip() */
    uint64_t nodes;      /* values skip() stepped over (map keys included) */
} cursor_ctx;

static inline uint32_t rd32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline uint64_t rd64(const uint8_t *p) { return ((uint64_t)rd32(p) << 32) | rd32(p + 4); }

/* End of the (already validated) value at pos; notes any bytes node inside it. */
static inline size_t skip(cursor_ctx *c, size_t pos) {
    const uint8_t *d = c->data;
    c->nodes++;
    switch (d[pos]) {
    case 0x00: case 0x01: case 0x02: return pos + 1;
    case 0x03: case 0x04: case 0x05: return pos + 9;
    case 0x07: c->has_bytes = 1; /* fall through */
    case 0x06: return pos + 5 + rd32(d + pos + 1);
    case 0x08: {
        uint32_t n = rd32(d + pos + 1);
        pos += 5;
        for (uint32_t i = 0; i < n; i++) pos = skip(c, pos);
        return pos;
    }
    default: { /* 0x09: keys are text */
        uint32_t n = rd32(d + pos + 1);
        pos += 5;
        for (uint32_t i = 0; i < n; i++) pos = skip(c, skip(c, pos));
        return pos;
    }
    }
}

/* A map at pos with exactly `count` entries; returns the position of its first key or 0. */
static inline size_t open_map(const uint8_t *d, size_t pos, uint32_t count) {
    if (d[pos] != 0x09 || rd32(d + pos + 1) != count) return 0;
    return pos + 5;
}

/* The key at *pos must be `name`; returns the position of its value (0 when not). */
static inline size_t key(const uint8_t *d, size_t *pos, const char *name) {
    size_t n = strlen(name), at = *pos;
    if (rd32(d + at + 1) != n || memcmp(d + at + 5, name, n) != 0) return 0;
    return at + 5 + n;
}

/* Reads a tag-04 integer in [low, high]; returns 1 on success. */
static inline int uint_in(const uint8_t *d, size_t pos, uint64_t low, uint64_t high, uint64_t *out) {
    if (d[pos] != 0x04) return 0;
    uint64_t v = rd64(d + pos + 1);
    if (v < low || v > high) return 0;
    *out = v;
    return 1;
}

/* An optional tag-04 integer: nil sets the row's nil bit instead. */
static inline int opt_uint_in(const uint8_t *d, size_t pos, uint64_t low, uint64_t high,
                       uint64_t *out, uint64_t *nil_mask, int bit) {
    if (d[pos] == 0x00) { *out = 0; *nil_mask |= 1ull << bit; return 1; }
    return uint_in(d, pos, low, high, out);
}

/* Steps through a map's keys in order: value position of the next key `name`, or 0. */
#define FIELD(name) \
    do { if (!(v = key(d, &pos, name))) return 0; } while (0)
#define NEXT() (pos = skip(&c, v))

/* at, expected_revision (0 for an insert, else >= 1), job_id: shared by every pair. */
static inline int check_job_id(const uint8_t *d, size_t v, uint64_t *row) {
    static const uint8_t zero[16] = {0};
    if (d[v] != 0x07 || rd32(d + v + 1) != 16 || memcmp(d + v + 5, zero, 16) == 0) return 0;
    row[TAY_EF_JOB_ID] = v + 5;
    return 1;
}

static inline int check_key_text(const uint8_t *d, size_t v, uint64_t *row, int field) {
    if (d[v] != 0x06) return 0;
    uint32_t n = rd32(d + v + 1);
    if (n < 1 || n > 255 || memchr(d + v + 5, 0, n) != NULL) return 0;
    row[field] = v + 5;
    row[field + 1] = n;
    return 1;
}

static inline int check_definition(const uint8_t *d, size_t start, uint64_t *row) {
    cursor_ctx c = {d, 0, 0};
    size_t pos = open_map(d, start, 8), v;
    uint64_t scratch;
    if (!pos) return 0;
    FIELD("args");
    if (d[v] != 0x09) return 0;
    row[TAY_EF_ARGS] = v;
    c.nodes = 0;
    NEXT();
    if (c.has_bytes) return 0;
    row[TAY_EF_ARGS_LENGTH] = pos - v;
    /* every value and every map key of args, as the engine's state budget counts them */
    row[TAY_EF_ARGS_NODES] = c.nodes;
    FIELD("definition_version");
    if (!uint_in(d, v, 1, 1, &scratch)) return 0;
    NEXT();
    FIELD("max_attempts");
    if (!uint_in(d, v, 1, ATTEMPT_MAX, &row[TAY_EF_MAX_ATTEMPTS])) return 0;
    NEXT();
    FIELD("queue_key");
    if (!check_key_text(d, v, row, TAY_EF_QUEUE)) return 0;
    NEXT();
    FIELD("retry_policy");
    {
        static const char *names[4] = {"base_ms", "cap_ms", "jitter_divisor", "version"};
        static const uint64_t values[4] = {1000, 60000, 4, 1};
        size_t inner = open_map(d, v, 4), w;
        if (!inner) return 0;
        for (int i = 0; i < 4; i++) {
            if (!(w = key(d, &inner, names[i]))) return 0;
            if (!uint_in(d, w, values[i], values[i], &scratch)) return 0;
            inner = w + 9;
        }
    }
    NEXT();
    FIELD("scheduled_at");
    if (!opt_uint_in(d, v, 0, TIME_MAX, &row[TAY_EF_SCHEDULED_AT], &row[TAY_EF_NIL],
                     TAY_EF_SCHEDULED_AT)) return 0;
    NEXT();
    FIELD("timeout_ms");
    if (!uint_in(d, v, 1, TIMEOUT_MAX_MS, &row[TAY_EF_TIMEOUT_MS])) return 0;
    NEXT();
    FIELD("worker_key");
    if (!check_key_text(d, v, row, TAY_EF_WORKER)) return 0;
    NEXT();
    row[TAY_EF_DEFINITION] = start;
    row[TAY_EF_DEFINITION_LENGTH] = pos - start;
    return 1;
}

/* job_finished's outcome rules on row[TAY_EF_C] (outcome) and row[TAY_EF_B] (disposition):
 * the diagnostic at `diag` and the retry fields at `next_attempt` / `next_due` (§6.4). */
static inline int finish_rules(const uint8_t *d, size_t diag, size_t next_attempt,
                               size_t next_due, uint64_t *row) {
    uint64_t outcome = row[TAY_EF_C], disposition = row[TAY_EF_B], code, version;
    if (outcome == 0) {
        if (d[diag] != 0x00 || disposition != 0) return 0;
        row[TAY_EF_NIL] |= 1ull << TAY_EF_D;
    } else {
        size_t inner = open_map(d, diag, 2), w;
        if (!inner || !(w = key(d, &inner, "code"))) return 0;
        if (!uint_in(d, w, 1, 7, &row[TAY_EF_D])) return 0;
        inner = w + 9;
        if (!(w = key(d, &inner, "version")) || !uint_in(d, w, 1, 1, &version)) return 0;
        code = row[TAY_EF_D];
        if (outcome == 1 && (code == 5 || code == 7)) return 0;
        if (outcome == 2 && code != 5) return 0;
        if (outcome == 3 && code != 7) return 0;
        if (disposition == 0 || (outcome == 3 && disposition != 1)) return 0;
    }
    if (disposition == 1) {
        if (!uint_in(d, next_attempt, 1, ATTEMPT_MAX, &row[TAY_EF_E])) return 0;
        if (!uint_in(d, next_due, 0, TIME_MAX, &row[TAY_EF_F])) return 0;
    } else {
        if (d[next_attempt] != 0x00 || d[next_due] != 0x00) return 0;
        row[TAY_EF_NIL] |= (1ull << TAY_EF_E) | (1ull << TAY_EF_F);
    }
    return 1;
}

/* The batch loop both Store-v2 scans share: per payload, `body_of` gives where its Value
 * body starts (0: the prefix cannot hold one), the body gets the full canonical Value
 * check with the caller's budgets, and `check` fills the row of a valid record (1) or
 * leaves it to the exact decoder (0): the row is then TAY_EVENT_SLOW and zeros. */
static inline int scan_batch(const uint8_t *buf, size_t count, const uint64_t *offsets,
                             const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                             uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                             uint64_t *values, uint32_t *tape_offsets, double *reals,
                             uint64_t *rows, size_t width,
                             size_t (*body_of)(const uint8_t *, size_t),
                             int (*check)(const uint8_t *, size_t, uint64_t *)) {
    size_t fast = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t *row = rows + i * width;
        memset(row, 0, sizeof(uint64_t) * width);
        row[0] = TAY_EVENT_SLOW;
        const uint8_t *payload = buf + offsets[i];
        size_t length = lengths[i], nodes, error_offset, body = body_of(payload, length);
        if (body == 0 || length <= body || length - body > tape_capacity) continue;
        if (tay_value_scan(payload + body, length - body, max_depth, max_nodes, max_binary,
                           tape_capacity, tags, values, tape_offsets, reals, &nodes,
                           &error_offset) < 0)
            continue;
        if (!check(payload, length, row)) {
            memset(row, 0, sizeof(uint64_t) * width);
            row[0] = TAY_EVENT_SLOW;
            continue;
        }
        row[0] = TAY_EVENT_FAST;
        fast++;
    }
    return (int)(fast > 0x7FFFFFFF ? 0x7FFFFFFF : fast);
}

#endif
