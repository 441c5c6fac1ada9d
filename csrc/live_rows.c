/* Live job rows: an open-addressing map from a 16-byte job id to a row of u64 durable fields,
 * and the apply of (8,1) mutation rows to it (storage.md §3.6, docs/benchmarks.md "a C
 * engine path", stage 1).
 *
 * A row holds the JobState fields a u64 can (TAY_LR_*; STATE indexes transitions.STATES,
 * TAY_LR_NIL has bit k set when slot k is None). tay_live_apply() applies a batch of
 * tay_mutations_scan rows in order, with the rules of transitions.apply and
 * EpochReducer.mutation (the allocator's order check, the order kept as ready_order), for
 * the kinds a row can hold without a mapping: insert, available, started, a success finish
 * (no diagnostic), cancel. It stops before the first row it cannot apply (a slow row,
 * another kind or outcome, or one the reducer would refuse) and never refuses: the caller
 * takes that job the general way. The pure twin is tay/_native/_pure_live.py.
 */
#include "tay_native.h"

#include <stdlib.h>
#include <string.h>

enum { SCHEDULED, AVAILABLE, EXECUTING, RETRYABLE, COMPLETED, CANCELLED, DISCARDED };
#define NIL(slot) ((uint64_t)1 << (slot))

struct tay_live_table {
    uint32_t *slots;   /* row number + 1 per slot, 0: empty */
    size_t mask;       /* slots - 1 (a power of two, at least twice the rows) */
    uint8_t *ids;      /* 16 bytes per row */
    uint64_t *rows;    /* TAY_LIVE_ROW u64s per row */
    size_t count, capacity;
    uint64_t next_order;
};

/* A slot from the id's two halves read in the machine's byte order (the table lives in one
 * process: only consistency matters), mixed so that sequential ids spread. */
static size_t slot_of(const uint8_t *id, size_t mask) {
    uint64_t low, high;
    memcpy(&low, id, 8);
    memcpy(&high, id + 8, 8);
    uint64_t h = (low ^ (high * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    return (size_t)(h >> 17) & mask;
}

/* The slot holding `id`, or the empty slot where it would go. */
static size_t probe(const tay_live_table *t, const uint8_t *id) {
    size_t s = slot_of(id, t->mask);
    while (t->slots[s] && memcmp(t->ids + (size_t)(t->slots[s] - 1) * 16, id, 16) != 0)
        s = (s + 1) & t->mask;
    return s;
}

int tay_live_new(size_t capacity, uint64_t next_order, tay_live_table **out) {
    tay_live_table *t = calloc(1, sizeof *t);
    size_t slots = 16;
    if (capacity < 8) capacity = 8;
    while (slots < 2 * capacity) slots <<= 1;
    if (t) {
        t->slots = calloc(slots, sizeof(uint32_t));
        t->ids = malloc(capacity * 16);
        t->rows = malloc(capacity * TAY_LIVE_ROW * sizeof(uint64_t));
    }
    if (!t || !t->slots || !t->ids || !t->rows) {
        tay_live_free(t);
        return -1;
    }
    t->mask = slots - 1;
    t->capacity = capacity;
    t->next_order = next_order;
    *out = t;
    return 0;
}

void tay_live_free(tay_live_table *t) {
    if (!t) return;
    free(t->slots), free(t->ids), free(t->rows), free(t);
}

size_t tay_live_count(const tay_live_table *t) { return t->count; }

uint64_t tay_live_next_order(const tay_live_table *t) { return t->next_order; }

long tay_live_find(const tay_live_table *t, const uint8_t *id) {
    size_t s = probe(t, id);
    return t->slots[s] ? (long)t->slots[s] - 1 : -1;
}

int tay_live_get(const tay_live_table *t, size_t index, uint8_t *id, uint64_t *row) {
    if (index >= t->count) return -1;
    memcpy(id, t->ids + index * 16, 16);
    memcpy(row, t->rows + index * TAY_LIVE_ROW, TAY_LIVE_ROW * sizeof(uint64_t));
    return 0;
}

/* Room for one more row (the slot array rebuilt at twice its size when half full): 1 when
 * the slots were rebuilt, 0 when not, -1 out of memory. */
static int grow(tay_live_table *t) {
    if (t->count == UINT32_MAX - 1) return -1;
    if (t->count == t->capacity) {
        size_t capacity = t->capacity * 2;
        uint8_t *ids = realloc(t->ids, capacity * 16);
        if (!ids) return -1;
        t->ids = ids;
        uint64_t *rows = realloc(t->rows, capacity * TAY_LIVE_ROW * sizeof(uint64_t));
        if (!rows) return -1;
        t->rows = rows;
        t->capacity = capacity;
    }
    if (2 * (t->count + 1) > t->mask + 1) {
        size_t mask = t->mask * 2 + 1;
        uint32_t *slots = calloc(mask + 1, sizeof(uint32_t));
        if (!slots) return -1;
        free(t->slots);
        t->slots = slots;
        t->mask = mask;
        for (size_t r = 0; r < t->count; r++) {
            size_t s = slot_of(t->ids + r * 16, mask);
            while (slots[s]) s = (s + 1) & mask;
            slots[s] = (uint32_t)(r + 1);
        }
        return 1;
    }
    return 0;
}

/* A new zeroed row for `id`, which `s` (probe's empty slot for it) will point to: its
 * number, or -2 out of memory. */
static long add_row(tay_live_table *t, const uint8_t *id, size_t s) {
    int grown = grow(t);
    if (grown < 0) return -2;
    if (grown) s = probe(t, id);
    size_t r = t->count++;
    memcpy(t->ids + r * 16, id, 16);
    t->slots[s] = (uint32_t)(r + 1);
    memset(t->rows + r * TAY_LIVE_ROW, 0, TAY_LIVE_ROW * sizeof(uint64_t));
    return (long)r;
}

/* One mutation row applied to the table: its job's row number, -1 not applicable (nothing
 * changed), -2 out of memory. `id` is the mutation payload's first 16 bytes. */
static long apply_one(tay_live_table *t, const uint8_t *id, const uint64_t *m) {
    uint64_t kind = m[TAY_MF_KIND], at = m[TAY_EF_AT], revision = m[TAY_EF_EXPECTED] + 1;
    uint64_t nil = m[TAY_EF_NIL], order = m[TAY_MF_ORDER];
    int ordered = !((nil >> TAY_MF_ORDER) & 1);
    if (m[TAY_EF_STATUS] != TAY_EVENT_FAST) return -1;
    if (ordered && order != t->next_order) return -1;
    size_t s = probe(t, id);
    if (kind == 1) {
        if (t->slots[s]) return -1;
        int available = m[TAY_EF_A] <= at;
        if (available != ordered) return -1;  /* the scan holds this; the row relies on it */
        long r = add_row(t, id, s);
        if (r < 0) return -2;
        uint64_t *w = t->rows + (size_t)r * TAY_LIVE_ROW;
        w[TAY_LR_STATE] = available ? AVAILABLE : SCHEDULED;
        w[TAY_LR_REVISION] = revision;
        w[TAY_LR_NEXT_ATTEMPT] = 1;
        w[TAY_LR_CYCLE] = revision;
        w[TAY_LR_ELIGIBLE_AT] = m[TAY_EF_A];
        w[TAY_LR_READY_ORDER] = available ? order : 0;
        w[TAY_LR_INSERTED_AT] = at;
        w[TAY_LR_MAX_ATTEMPTS] = m[TAY_EF_MAX_ATTEMPTS];
        w[TAY_LR_NIL] = NIL(TAY_LR_EXECUTION) | NIL(TAY_LR_ATTEMPTED_AT)
                        | NIL(TAY_LR_COMPLETED_AT) | NIL(TAY_LR_TERMINAL_AT)
                        | (available ? 0 : NIL(TAY_LR_READY_ORDER));
        if (ordered) t->next_order++;
        return r;
    }
    if (!t->slots[s]) return -1;
    size_t r = t->slots[s] - 1;
    uint64_t *w = t->rows + r * TAY_LIVE_ROW, state = w[TAY_LR_STATE], wnil = w[TAY_LR_NIL];
    if (w[TAY_LR_REVISION] != m[TAY_EF_EXPECTED]) return -1;
    if (kind == 2) {  /* available: due, from scheduled or retryable */
        if ((state != SCHEDULED && state != RETRYABLE) || (wnil & NIL(TAY_LR_ELIGIBLE_AT))
            || w[TAY_LR_ELIGIBLE_AT] != m[TAY_EF_A])
            return -1;
        w[TAY_LR_STATE] = AVAILABLE;
        w[TAY_LR_READY_ORDER] = order;
        wnil &= ~NIL(TAY_LR_READY_ORDER);
    } else if (kind == 3) {  /* started */
        uint64_t attempt = m[TAY_EF_A];
        if (state != AVAILABLE || (wnil & NIL(TAY_LR_NEXT_ATTEMPT))
            || attempt != w[TAY_LR_NEXT_ATTEMPT] || attempt > w[TAY_LR_MAX_ATTEMPTS]
            || m[TAY_EF_B] != w[TAY_LR_CYCLE] || (wnil & NIL(TAY_LR_ELIGIBLE_AT))
            || at < w[TAY_LR_ELIGIBLE_AT])
            return -1;
        w[TAY_LR_STATE] = EXECUTING;
        w[TAY_LR_EXECUTION] = revision;
        w[TAY_LR_ATTEMPT] = attempt;
        w[TAY_LR_ATTEMPTED_AT] = at;
        w[TAY_LR_ELIGIBLE_AT] = w[TAY_LR_READY_ORDER] = 0;
        wnil = (wnil & ~(NIL(TAY_LR_EXECUTION) | NIL(TAY_LR_ATTEMPTED_AT)))
               | NIL(TAY_LR_ELIGIBLE_AT) | NIL(TAY_LR_READY_ORDER);
    } else if (kind == 4) {  /* finished: a success only (the scan holds its other fields) */
        if (state != EXECUTING || (wnil & NIL(TAY_LR_EXECUTION))
            || m[TAY_EF_A] != w[TAY_LR_EXECUTION] || m[TAY_EF_C] != 0 || m[TAY_EF_B] != 0)
            return -1;
        w[TAY_LR_STATE] = COMPLETED;
        w[TAY_LR_NEXT_ATTEMPT] = w[TAY_LR_ELIGIBLE_AT] = w[TAY_LR_EXECUTION] = 0;
        w[TAY_LR_COMPLETED_AT] = w[TAY_LR_TERMINAL_AT] = at;
        wnil = (wnil & ~(NIL(TAY_LR_COMPLETED_AT) | NIL(TAY_LR_TERMINAL_AT)))
               | NIL(TAY_LR_NEXT_ATTEMPT) | NIL(TAY_LR_ELIGIBLE_AT) | NIL(TAY_LR_EXECUTION);
    } else if (kind == 5) {  /* cancelled: the token is the execution's while executing */
        int token_nil = (nil >> TAY_EF_A) & 1;
        if (state != SCHEDULED && state != AVAILABLE && state != RETRYABLE && state != EXECUTING)
            return -1;
        if (state == EXECUTING ? (token_nil || (wnil & NIL(TAY_LR_EXECUTION))
                                  || m[TAY_EF_A] != w[TAY_LR_EXECUTION])
                               : !token_nil)
            return -1;
        w[TAY_LR_STATE] = CANCELLED;
        w[TAY_LR_EXECUTION] = w[TAY_LR_NEXT_ATTEMPT] = w[TAY_LR_ELIGIBLE_AT] = 0;
        w[TAY_LR_READY_ORDER] = 0;
        w[TAY_LR_TERMINAL_AT] = at;
        wnil = (wnil & ~NIL(TAY_LR_TERMINAL_AT)) | NIL(TAY_LR_EXECUTION)
               | NIL(TAY_LR_NEXT_ATTEMPT) | NIL(TAY_LR_ELIGIBLE_AT) | NIL(TAY_LR_READY_ORDER);
    } else {
        return -1;
    }
    w[TAY_LR_REVISION] = revision;
    w[TAY_LR_NIL] = wnil;
    if (ordered) t->next_order++;
    return (long)r;
}

int tay_live_retryable(tay_live_table *t, size_t number, uint64_t revision,
                       uint64_t next_attempt, uint64_t eligible_at) {
    if (number >= t->count) return -1;
    uint64_t *w = t->rows + number * TAY_LIVE_ROW;
    w[TAY_LR_STATE] = RETRYABLE;
    w[TAY_LR_REVISION] = revision;
    w[TAY_LR_NEXT_ATTEMPT] = next_attempt;
    w[TAY_LR_ELIGIBLE_AT] = eligible_at;
    w[TAY_LR_EXECUTION] = w[TAY_LR_READY_ORDER] = 0;
    w[TAY_LR_NIL] = (w[TAY_LR_NIL] & ~(NIL(TAY_LR_NEXT_ATTEMPT) | NIL(TAY_LR_ELIGIBLE_AT)))
                    | NIL(TAY_LR_EXECUTION) | NIL(TAY_LR_READY_ORDER);
    return 0;
}

long tay_live_hold(tay_live_table *t, const uint8_t *id) {
    size_t s = probe(t, id);
    if (t->slots[s]) return -1;
    long r = add_row(t, id, s);
    if (r < 0) return -2;
    uint64_t *w = t->rows + (size_t)r * TAY_LIVE_ROW;
    /* no state the applies accept, no revision a record expects: every slot nil */
    w[TAY_LR_STATE] = TAY_LIVE_HELD;
    w[TAY_LR_REVISION] = UINT64_MAX;
    w[TAY_LR_NIL] = NIL(TAY_LR_NIL) - 1;
    return r;
}

int tay_live_take_order(tay_live_table *t, uint64_t order) {
    if (order != t->next_order) return -1;
    t->next_order++;
    return 0;
}

long tay_live_apply_one(tay_live_table *t, const uint8_t *id, const uint64_t *row) {
    return apply_one(t, id, row);
}

long tay_live_apply(tay_live_table *t, const uint8_t *buf, size_t count,
                    const uint64_t *offsets, const uint64_t *rows, uint64_t *applied) {
    size_t k;
    for (k = 0; k < count; k++) {
        long r = apply_one(t, buf + offsets[k], rows + k * TAY_MUTATION_ROW);
        if (r == -2) return -1;
        if (r < 0) break;
        if (applied) applied[k] = (uint64_t)r;
    }
    return (long)k;
}
