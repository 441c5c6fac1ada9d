/* Batch fast path for Store-v2 JOB_SNAPSHOT_V2 (7,1) payloads (storage.md §3.5).
 *
 * tay_snapshots_scan() looks at many snapshot payloads in one call. For each it reads the
 * binary prefix (job id, revision, cycle, exec_present, token), runs the full canonical
 * Value check of the body (tay_value_scan, the caller's budgets), then checks the 11-key
 * body in place: domains, the definition (§6.2, as events.c checks an insert's), presence
 * by state and the credibility rules, and writes the fields into a row of TAY_SNAPSHOT_ROW
 * u64s. Like events.c it only has to accept exactly-valid snapshots: anything else is
 * marked slow and Python's exact decoder (tay.storage.v2.records) refuses or accepts it.
 * The pure twin is tay/_native/_pure_snapshots.py (same rows for the same input).
 */
#include "value_walk.h"

#define SNAPSHOT_PREFIX 33 /* job_id 16 | revision 8 | cycle 8 | exec_present 1 */
#define NIL(slot) ((row[TAY_SF_NIL] >> (slot)) & 1)

static const char *const STATE_NAMES[7] = {"scheduled", "available", "executing", "retryable",
                                           "completed", "cancelled", "discarded"};

/* The state text at v as its index in STATE_NAMES (-1: not a state). */
static int state_index(const uint8_t *d, size_t v) {
    if (d[v] != 0x06) return -1;
    uint32_t n = rd32(d + v + 1);
    for (int i = 0; i < 7; i++)
        if (strlen(STATE_NAMES[i]) == n && memcmp(d + v + 5, STATE_NAMES[i], n) == 0) return i;
    return -1;
}

/* Nil or {"code": 1..7, "version": 1}; the code goes to the row. */
static int diagnostic(const uint8_t *d, size_t v, uint64_t *row) {
    uint64_t version;
    if (d[v] == 0x00) { row[TAY_SF_NIL] |= 1ull << TAY_SF_DIAGNOSTIC; return 1; }
    size_t inner = open_map(d, v, 2), w;
    if (!inner || !(w = key(d, &inner, "code"))) return 0;
    if (!uint_in(d, w, 1, 7, &row[TAY_SF_DIAGNOSTIC])) return 0;
    inner = w + 9;
    return (w = key(d, &inner, "version")) && uint_in(d, w, 1, 1, &version);
}

/* The body's fields in canonical key order; returns the position after the map or 0. */
static size_t body_fields(const uint8_t *d, size_t start, uint64_t *row) {
    cursor_ctx c = {d, 0, 0};
    uint64_t *nil = &row[TAY_SF_NIL];
    size_t pos = open_map(d, start, 11), v;
    if (!pos) return 0;
    FIELD("attempt");
    if (!uint_in(d, v, 0, UINT64_MAX, &row[TAY_SF_ATTEMPT])) return 0;
    NEXT();
    FIELD("attempted_at");
    if (!opt_uint_in(d, v, 0, TIME_MAX, &row[TAY_SF_ATTEMPTED_AT], nil, TAY_SF_ATTEMPTED_AT))
        return 0;
    NEXT();
    FIELD("availability_order");
    if (!opt_uint_in(d, v, 1, UINT64_MAX, &row[TAY_SF_ORDER], nil, TAY_SF_ORDER)) return 0;
    NEXT();
    FIELD("completed_at");
    if (!opt_uint_in(d, v, 0, TIME_MAX, &row[TAY_SF_COMPLETED_AT], nil, TAY_SF_COMPLETED_AT))
        return 0;
    NEXT();
    FIELD("definition");
    if (!check_definition(d, v, row + TAY_SF_DEFINITION)) return 0;
    pos = v + row[TAY_SF_DEFINITION + TAY_EF_DEFINITION_LENGTH];
    FIELD("diagnostic");
    if (!diagnostic(d, v, row)) return 0;
    NEXT();
    FIELD("eligible_at");
    if (!opt_uint_in(d, v, 0, TIME_MAX, &row[TAY_SF_ELIGIBLE_AT], nil, TAY_SF_ELIGIBLE_AT))
        return 0;
    NEXT();
    FIELD("inserted_at");
    if (!uint_in(d, v, 0, TIME_MAX, &row[TAY_SF_INSERTED_AT])) return 0;
    NEXT();
    FIELD("next_attempt");
    if (!opt_uint_in(d, v, 1, UINT64_MAX, &row[TAY_SF_NEXT_ATTEMPT], nil, TAY_SF_NEXT_ATTEMPT))
        return 0;
    NEXT();
    FIELD("state");
    int state = state_index(d, v);
    if (state < 0) return 0;
    row[TAY_SF_STATE] = (uint64_t)state;
    NEXT();
    FIELD("terminal_at");
    if (!opt_uint_in(d, v, 0, TIME_MAX, &row[TAY_SF_TERMINAL_AT], nil, TAY_SF_TERMINAL_AT))
        return 0;
    return skip(&c, v);
}

/* Presence of the optional fields by state, terminal_at, then credibility (§3.5). */
static int state_rules(const uint64_t *row) {
    uint64_t state = row[TAY_SF_STATE], attempt = row[TAY_SF_ATTEMPT];
    int next = !NIL(TAY_SF_NEXT_ATTEMPT), eligible = !NIL(TAY_SF_ELIGIBLE_AT);
    int order = !NIL(TAY_SF_ORDER), completed = !NIL(TAY_SF_COMPLETED_AT);
    int execution = !NIL(TAY_SF_EXECUTION), attempted = !NIL(TAY_SF_ATTEMPTED_AT);
    int terminal = !NIL(TAY_SF_TERMINAL_AT), diag = !NIL(TAY_SF_DIAGNOSTIC);
    switch (state) {
    case 0: /* scheduled */
        return next && eligible && !order && !execution && !completed && !terminal
            && row[TAY_SF_REVISION] == 1 && row[TAY_SF_CYCLE] == 1 && attempt == 0
            && row[TAY_SF_NEXT_ATTEMPT] == 1 && !attempted && !diag;
    case 1: /* available: fresh, or after an attempt */
        return next && eligible && order && !terminal
            && ((attempt == 0 && row[TAY_SF_NEXT_ATTEMPT] == 1 && !attempted)
                || (attempt > 0 && attempted));
    case 2: /* executing */
        return next && execution && !eligible && !order && !terminal && attempt > 0
            && attempted && row[TAY_SF_EXECUTION] == row[TAY_SF_REVISION]
            && row[TAY_SF_NEXT_ATTEMPT] == attempt;
    case 3: /* retryable */
        return next && eligible && !order && !terminal && attempt > 0 && attempted && diag;
    case 4: /* completed */
        return completed && !next && !eligible && !order && !execution && terminal
            && row[TAY_SF_TERMINAL_AT] == row[TAY_SF_COMPLETED_AT] && attempt > 0 && attempted;
    default: /* cancelled, discarded */
        return !next && !eligible && !order && !execution && !completed && terminal
            && (state == 5 || (attempt > 0 && attempted && diag));
    }
}

static int check_snapshot(const uint8_t *p, size_t length, uint64_t *row) {
    static const uint8_t zero[16] = {0};
    if (length < SNAPSHOT_PREFIX || p[32] > 1) return 0;
    size_t body = SNAPSHOT_PREFIX + 8u * p[32];
    if (length <= body || memcmp(p, zero, 16) == 0) return 0;
    uint64_t revision = rd64(p + 16), cycle = rd64(p + 24);
    row[TAY_SF_REVISION] = revision;
    row[TAY_SF_CYCLE] = cycle;
    if (cycle < 1 || cycle > revision) return 0;
    if (p[32]) {
        row[TAY_SF_EXECUTION] = rd64(p + SNAPSHOT_PREFIX);
        if (row[TAY_SF_EXECUTION] < 1 || row[TAY_SF_EXECUTION] > revision) return 0;
    } else {
        row[TAY_SF_NIL] |= 1ull << TAY_SF_EXECUTION;
    }
    row[TAY_SF_BODY] = body;
    if (body_fields(p, body, row) != length) return 0;
    uint64_t max_attempts = row[TAY_SF_DEFINITION + TAY_EF_MAX_ATTEMPTS];
    if (row[TAY_SF_ATTEMPT] > max_attempts) return 0;
    if (!NIL(TAY_SF_NEXT_ATTEMPT) && row[TAY_SF_NEXT_ATTEMPT] > max_attempts) return 0;
    return state_rules(row);
}

static size_t body_of(const uint8_t *p, size_t length) {
    return length > SNAPSHOT_PREFIX ? SNAPSHOT_PREFIX + 8u * (p[32] == 1) : 0;
}

int tay_snapshots_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows) {
    return scan_batch(buf, count, offsets, lengths, max_depth, max_nodes, max_binary,
                      tape_capacity, tags, values, tape_offsets, reals, rows,
                      TAY_SNAPSHOT_ROW, body_of, check_snapshot);
}
