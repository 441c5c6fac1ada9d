/* Batch fast path for Event-v1 payloads (pairs (1..6,1), (10,2), (22,2), the operator's job
 * steps (23,2), (27,2), (29,2), and a day's totals (32,2); storage-events.md).
 *
 * tay_events_scan() looks at many payloads in one call. For each it first runs the full
 * canonical Value check (tay_value_scan, with the caller's depth/node/binary budgets), then
 * checks the pair's schema (exact key set, domains, cross-field rules) directly on the
 * validated bytes and writes the scalar fields into a flat row of TAY_EVENT_ROW u64s.
 * A payload that is not a well-formed event of a known pair is only *marked* slow
 * (row[0] = TAY_EVENT_SLOW): Python re-decodes it with the exact decoder, so refusal
 * classes and messages come from one place. This file therefore only has to accept
 * exactly-valid events; rejecting a valid one merely costs speed.
 * The pure twin is tay/_native/_pure_events.py (same rows for the same input).
 */
#include "value_walk.h"

/* A failure's error object (22,2): a map of 1..3 of message, traceback and type (in that,
 * the canonical, order), each a text, the type at most ERROR_TYPE_MAX_BYTES. Each text's
 * offset and length go to row[slot], row[slot + 1] (message A, traceback C, type E); an
 * absent key sets the nil bit of its offset slot. */
#define ERROR_TYPE_MAX_BYTES 128u
/* the last UTC day whose first millisecond is a Time: (2^63 - 1) / 86,400,000 */
#define DAY_MAX 106751991167ull
static int check_error(const uint8_t *d, size_t v, uint64_t *row) {
    static const char *const names[3] = {"message", "traceback", "type"};
    static const int slots[3] = {TAY_EF_A, TAY_EF_C, TAY_EF_E};
    if (d[v] != 0x09) return 0;
    uint32_t count = rd32(d + v + 1), next = 0;
    if (count < 1 || count > 3) return 0;
    row[TAY_EF_NIL] |= (1ull << TAY_EF_A) | (1ull << TAY_EF_C) | (1ull << TAY_EF_E);
    size_t pos = v + 5;
    for (uint32_t i = 0; i < count; i++) {
        size_t value = 0;
        while (next < 3 && !(value = key(d, &pos, names[next]))) next++;
        if (next == 3 || d[value] != 0x06) return 0;
        uint32_t n = rd32(d + value + 1);
        if (next == 2 && n > ERROR_TYPE_MAX_BYTES) return 0;
        row[slots[next]] = value + 5;
        row[slots[next] + 1] = n;
        row[TAY_EF_NIL] &= ~(1ull << slots[next]);
        next++;
        pos = value + 5 + n;
    }
    return 1;
}

/* The payload-local rules of every supported pair; 1 = well-formed, row filled. */
static int check_event(const uint8_t *d, int type, int schema, uint64_t *row) {
    static const uint8_t key_counts[10] = {5, 4, 5, 9, 4, 5, 4, 4, 3, 5};
    cursor_ctx c = {d, 0, 0};
    /* slot 8: a job step with no field of its own (at, expected_revision, job_id): an
     * operator's requeue (23,2), expedite (27,2) or deletion (29,2); slot 9: a day's totals
     * (32,2), which names no job */
    int slot = schema == 2 && type == 10 ? 6 : schema == 2 && type == 22 ? 7
        : schema == 2 && (type == 23 || type == 27 || type == 29) ? 8
        : schema == 2 && type == 32 ? 9
        : (schema == 1 && type >= 1 && type <= 6 ? type - 1 : -1);
    if (slot < 0) return 0;
    size_t pos = open_map(d, 0, key_counts[slot]), v;
    uint64_t at;
    if (!pos) return 0;
    FIELD("at");
    if (!uint_in(d, v, 0, TIME_MAX, &row[TAY_EF_AT])) return 0;
    at = row[TAY_EF_AT];
    NEXT();
    switch (slot) {
    case 0: /* job_inserted */
        FIELD("definition");
        if (!check_definition(d, v, row)) return 0;
        pos = row[TAY_EF_DEFINITION] + row[TAY_EF_DEFINITION_LENGTH];
        FIELD("eligible_at");
        if (!uint_in(d, v, 0, TIME_MAX, &row[TAY_EF_A])) return 0;
        if (row[TAY_EF_A] != ((row[TAY_EF_NIL] >> TAY_EF_SCHEDULED_AT) & 1 ? at
                              : row[TAY_EF_SCHEDULED_AT])) return 0;
        NEXT();
        break;
    case 1: /* job_available */
        FIELD("due_at");
        if (!uint_in(d, v, 0, at, &row[TAY_EF_A])) return 0;
        NEXT();
        break;
    case 2: /* job_started */
        FIELD("attempt");
        if (!uint_in(d, v, 1, ATTEMPT_MAX, &row[TAY_EF_A])) return 0;
        NEXT();
        FIELD("cycle_token");
        if (!uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_B])) return 0;
        NEXT();
        break;
    case 3: /* job_finished: outcome decides diagnostic, disposition and the retry fields */
        FIELD("diagnostic");
        {
            size_t diag = v;
            NEXT();
            FIELD("disposition");
            if (!uint_in(d, v, 0, 2, &row[TAY_EF_B])) return 0;
            NEXT();
            FIELD("execution_token");
            if (!uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_A])) return 0;
            NEXT();
            FIELD("expected_revision");
            size_t revision_value = v;
            NEXT();
            FIELD("job_id");
            if (!check_job_id(d, v, row)) return 0;
            NEXT();
            FIELD("next_attempt");
            size_t next_attempt = v;
            NEXT();
            FIELD("next_due_at");
            size_t next_due = v;
            NEXT();
            FIELD("outcome");
            if (!uint_in(d, v, 0, 3, &row[TAY_EF_C])) return 0;
            NEXT();
            if (!uint_in(d, revision_value, 1, UINT64_MAX, &row[TAY_EF_EXPECTED])) return 0;
            if (!finish_rules(d, diag, next_attempt, next_due, row)) return 0;
        }
        return pos == row[TAY_EF_END];
    case 4: /* job_cancelled */
        FIELD("execution_token");
        if (!opt_uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_A], &row[TAY_EF_NIL], TAY_EF_A))
            return 0;
        NEXT();
        break;
    case 7: /* failure_recorded */
        FIELD("error");
        if (!check_error(d, v, row)) return 0;
        NEXT();
        break;
    case 9: /* day_totals: completed A, day B (a UTC day whose start is a Time), enqueued C,
             * failed D; no expected_revision nor job_id */
        FIELD("completed");
        if (!uint_in(d, v, 0, UINT64_MAX, &row[TAY_EF_A])) return 0;
        NEXT();
        FIELD("day");
        if (!uint_in(d, v, 0, DAY_MAX, &row[TAY_EF_B])) return 0;
        NEXT();
        FIELD("enqueued");
        if (!uint_in(d, v, 0, UINT64_MAX, &row[TAY_EF_C])) return 0;
        NEXT();
        FIELD("failed");
        if (!uint_in(d, v, 0, UINT64_MAX, &row[TAY_EF_D])) return 0;
        NEXT();
        return pos == row[TAY_EF_END];
    }
    FIELD("expected_revision");
    if (!uint_in(d, v, slot == 0 ? 0 : 1, slot == 0 ? 0 : UINT64_MAX, &row[TAY_EF_EXPECTED]))
        return 0;
    NEXT();
    FIELD("job_id");
    if (!check_job_id(d, v, row)) return 0;
    NEXT();
    if (slot == 5) { /* job_retried */
        FIELD("mode");
        if (!uint_in(d, v, 0, 1, &row[TAY_EF_A])) return 0;
        NEXT();
        FIELD("new_due_at");
        if (!uint_in(d, v, at, at, &row[TAY_EF_B])) return 0;
        NEXT();
    } else if (slot == 6) { /* result_recorded: any JSON-like value (no bytes inside) */
        FIELD("result");
        c.has_bytes = 0;
        row[TAY_EF_A] = v;
        NEXT();
        if (c.has_bytes) return 0;
        row[TAY_EF_B] = pos - v;
    }
    return pos == row[TAY_EF_END];
}

int tay_events_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                    const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                    uint32_t max_depth, uint64_t max_nodes, uint64_t max_binary,
                    size_t tape_capacity, uint8_t *tags, uint64_t *values, uint32_t *tape_offsets,
                    double *reals, uint64_t *rows) {
    size_t fast = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t *row = rows + i * TAY_EVENT_ROW;
        memset(row, 0, sizeof(uint64_t) * TAY_EVENT_ROW);
        row[0] = TAY_EVENT_SLOW;
        const uint8_t *payload = buf + offsets[i];
        size_t length = lengths[i], nodes, error_offset;
        if (length == 0 || length > tape_capacity) continue;
        if (tay_value_scan(payload, length, max_depth, max_nodes, max_binary, tape_capacity,
                           tags, values, tape_offsets, reals, &nodes, &error_offset) < 0)
            continue;
        row[TAY_EF_END] = length;
        if (!check_event(payload, types[i], schemas[i], row)) {
            memset(row, 0, sizeof(uint64_t) * TAY_EVENT_ROW);
            row[0] = TAY_EVENT_SLOW;
            continue;
        }
        row[0] = TAY_EVENT_FAST;
        fast++;
    }
    return (int)(fast > 0x7FFFFFFF ? 0x7FFFFFFF : fast);
}
