/* Batch fast path for Store-v2 JOB_MUTATION_V2 (8,1) payloads (storage.md §3.5).
 *
 * tay_mutations_scan() looks at many mutation payloads in one call. For each it reads the
 * prefix (job id, kind, expected and new revision, at), runs the full canonical Value check
 * of the body (tay_value_scan, the caller's budgets), then checks the body as the Event-v1
 * event of its kind that the mutation stands for (the same rules as events.c, with job_id,
 * expected_revision and at from the prefix) plus the availability order. The row is the
 * Event-v1 row of that event (TAY_EF_* slots, offsets relative to the mutation payload, the
 * job id at offset 0) followed by TAY_MF_ORDER (nil: bit TAY_MF_ORDER of TAY_EF_NIL) and
 * TAY_MF_KIND. Anything else is marked slow for Python's exact decoder
 * (tay.storage.v2.records.decode_mutation). The pure twin is
 * tay/_native/_pure_mutations.py.
 */
#include "value_walk.h"

#define MUTATION_PREFIX 41 /* job_id 16 | kind 1 | expected 8 | new 8 | at 8 */

static const uint8_t KEY_COUNTS[6] = {3, 2, 2, 6, 1, 3};

/* The body of one kind; 1 = valid, row filled. */
static int check_body(const uint8_t *d, int kind, uint64_t *row) {
    cursor_ctx c = {d, 0, 0};
    size_t pos = open_map(d, MUTATION_PREFIX, KEY_COUNTS[kind - 1]), v;
    uint64_t at = row[TAY_EF_AT], *nil = &row[TAY_EF_NIL];
    if (!pos) return 0;
    if (kind == 1 || kind == 2 || kind == 6) {
        FIELD("availability_order");
        if (!opt_uint_in(d, v, 0, UINT64_MAX, &row[TAY_MF_ORDER], nil, TAY_MF_ORDER)) return 0;
        NEXT();
    } else {
        *nil |= 1ull << TAY_MF_ORDER;
    }
    switch (kind) {
    case 1: /* inserted: an order exactly when eligible_at <= at */
        FIELD("definition");
        if (!check_definition(d, v, row)) return 0;
        pos = v + row[TAY_EF_DEFINITION_LENGTH];
        FIELD("eligible_at");
        if (!uint_in(d, v, 0, TIME_MAX, &row[TAY_EF_A])) return 0;
        if (row[TAY_EF_A] != ((*nil >> TAY_EF_SCHEDULED_AT) & 1 ? at
                              : row[TAY_EF_SCHEDULED_AT])) return 0;
        if ((row[TAY_EF_A] <= at) != !((*nil >> TAY_MF_ORDER) & 1)) return 0;
        NEXT();
        break;
    case 2: /* available */
        if ((*nil >> TAY_MF_ORDER) & 1) return 0;
        FIELD("due_at");
        if (!uint_in(d, v, 0, at, &row[TAY_EF_A])) return 0;
        NEXT();
        break;
    case 3: /* started */
        FIELD("attempt");
        if (!uint_in(d, v, 1, ATTEMPT_MAX, &row[TAY_EF_A])) return 0;
        NEXT();
        FIELD("cycle_token");
        if (!uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_B])) return 0;
        NEXT();
        break;
    case 4: { /* finished */
        FIELD("diagnostic");
        size_t diag = v;
        NEXT();
        FIELD("disposition");
        if (!uint_in(d, v, 0, 2, &row[TAY_EF_B])) return 0;
        NEXT();
        FIELD("execution_token");
        if (!uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_A])) return 0;
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
        if (!finish_rules(d, diag, next_attempt, next_due, row)) return 0;
        break;
    }
    case 5: /* cancelled */
        FIELD("execution_token");
        if (!opt_uint_in(d, v, 1, UINT64_MAX, &row[TAY_EF_A], nil, TAY_EF_A)) return 0;
        NEXT();
        break;
    default: /* retried */
        if ((*nil >> TAY_MF_ORDER) & 1) return 0;
        FIELD("mode");
        if (!uint_in(d, v, 0, 1, &row[TAY_EF_A])) return 0;
        NEXT();
        FIELD("new_due_at");
        if (!uint_in(d, v, at, at, &row[TAY_EF_B])) return 0;
        NEXT();
    }
    return pos == row[TAY_EF_END];
}

static int check_mutation(const uint8_t *p, size_t length, uint64_t *row) {
    static const uint8_t zero[16] = {0};
    if (length <= MUTATION_PREFIX || memcmp(p, zero, 16) == 0) return 0;
    int kind = p[16];
    uint64_t expected = rd64(p + 17), revision = rd64(p + 25), at = rd64(p + 33);
    if (kind < 1 || kind > 6 || expected == UINT64_MAX || revision != expected + 1) return 0;
    if ((expected == 0) != (kind == 1) || at > TIME_MAX) return 0;
    row[TAY_EF_AT] = at;
    row[TAY_EF_EXPECTED] = expected;
    row[TAY_EF_JOB_ID] = 0;
    row[TAY_EF_END] = length;
    row[TAY_MF_KIND] = (uint64_t)kind;
    return check_body(p, kind, row);
}

static size_t body_of(const uint8_t *p, size_t length) {
    (void)p;
    return length > MUTATION_PREFIX ? MUTATION_PREFIX : 0;
}

int tay_mutations_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows) {
    return scan_batch(buf, count, offsets, lengths, max_depth, max_nodes, max_binary,
                      tape_capacity, tags, values, tape_offsets, reals, rows,
                      TAY_MUTATION_ROW, body_of, check_mutation);
}
