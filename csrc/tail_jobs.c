/* Columnar replay of a Store-v2 tail: the common job lifecycle kept in C (storage.md §3.5-3.6).
 *
 * tay_tail_jobs() walks tail records from a record boundary while each one is a step of
 * the common lifecycle that transitions.apply and EpochReducer accept: an (8,1) insert of
 * an id it has not seen, available at once, its availability order the allocator's next;
 * an (8,1) start of that job's first attempt of its first cycle (cycle token 1), not before
 * it is eligible; then a (30,2) result_recorded of its result at revision 3 and an (8,1)
 * success finish of that execution (token 2) at revision 4, as the engine writes a success,
 * or (stores written before 2026-12-04) the finish at revision 3, then the result at
 * revision 4. After the start it also follows a worker failure of that first attempt, left
 * retryable or discarded (max_attempts 1): its (22,2) details at revision 3 and its finish
 * at revision 4 (the engine's order), or the finish at 3 with the details right after it
 * at 4 (a delayed job's one revision later; its retry goes the general way), or a
 * timeout of that attempt (the engine's finish, outcome timed out, no details) at revision
 * 3, left retryable or discarded likewise, its retry the general way; a retryable
 * one's row is then set retryable in the live table (hold_failure) and
 * the walk follows its retry: availability, start of attempt 2, its result and success at
 * revisions 5-8, a retried success. Every payload must pass the mutation or event fast
 * path (tay_mutations_scan, tay_events_scan). A delayed insert (scheduled: no order, a
 * timer push) is followed too: its (8,1) availability (the allocator's order, a ready
 * push) and then the lifecycle above, each step one revision later (a success finish at
 * revision 5). A (8,1) cancel of a job waiting at its insert (available or scheduled, at
 * revision 1) or at its delayed availability (revision 2), with no execution token nor
 * order, makes the job done, cancelled at the next revision. A record of a job it knows
 * outside that lifecycle (a timeout, a second failure, a delayed job's retry, anything
 * after a cancel...) sends the job the
 * general way: the walk goes on and all that job's records are pending (each such
 * mutation one state change, and a ready push when it carries an order, which the
 * allocator takes here). So goes a job inserted before `start` (one in flight at a
 * compaction's capture, or one whose insert an exact batch took), held by its id
 * (hold_unknown); an insert of that id stops the walk. A (30,2) of a schedule, a queue or a
 * day (of_no_job: a schedule's occurrence, a day's totals every minute) changes no job's
 * state: it is taken as pending (the exact replay checks and applies it) and the walk goes
 * on. An operator's requeue (23,2), expedite (27,2) or deletion (29,2) of a job sends that
 * job the general way (a requeue or an expedite is one state change and a ready push, its
 * order the allocator's next). It stops before the first
 * record that is anything else and never refuses: the caller replays from there the exact
 * way.
 *
 * Output, offsets absolute in buf: for each job whose four records were all taken (done,
 * in the order of its finish) TAY_BASE_JOB u64s (base_jobs.c's columns: RECORD the
 * insert's index from `start`, SNAPSHOT the insert payload, STATE completed, REVISION 4
 * (5 delayed), RESULT the (30,2) payload) and TAY_TAIL_LINK u64s (the state changes the
 * records made up to its finish, the start and finish payloads, the start's time, a
 * delayed job's availability payload); so for each cancelled job (STATE cancelled,
 * REVISION the cancel's, RESULT 0 / 0; STARTED 0 / 0, FINISHED its cancel, AVAILABILITY
 * when its delayed availability came before the cancel); for each record taken of a job not done, (index
 * from `start`, state changes before it, ready pushes before it, timer pushes of done
 * delayed jobs' inserts before it) in `pending`; totals[0..2] the same three of all
 * records taken. Each job whose only record taken is its insert, with expected revision 0
 * (so replay leaves it available at revision 1 when eligible at once, else scheduled:
 * STATE tells), and each job whose records
 * taken are its insert and its start (replay leaves it executing at revision 2), also gets
 * TAY_TAIL_LIVE u64s in `live`, in insert order (RECORD its insert's index from `start`,
 * ELIGIBLE_AT, ORDER, the definition's keys and sizes; STATE the state index, START the
 * start's index (the insert's when not started), START_AT, START_STAMP the state changes
 * from `start` up to and including the start (0 when not started)): the caller may hold it
 * as that row instead of replaying its records. A job whose four records taken are its
 * insert, start, failure finish and details gets them too (STATE retryable or discarded,
 * ELIGIBLE_AT the retry's due time (0 when discarded), FINISH, FINISH_AT, FINISH_STAMP,
 * DETAILS, FAILURE_BYTES; its records are pending, as an executing job's), and so does a
 * retried success (STATE completed; START / FINISH the first attempt's, RETRY, RESTART,
 * RESULT, COMPLETE the retry's records with their times and the success's stamp; its
 * records pending, its failure's timer pushes counted as skipped). The pure twin
 * is tay/_native/_pure_tail.py (same output, same stop).
 */
#include "value_walk.h"

#include <stdlib.h>
#include <string.h>

#define FRAME_HEADER 24

/* RESULTED: executing, its result recorded; SCHEDULED: a delayed insert waiting for its
 * availability (the job is then W_DELAYED: each later step one revision on); CANCELLED:
 * done by a cancel while it waited (after GENERAL: the live table applies no cancel, and
 * any later record of the job sends it the general way); GENERAL: a
 * record of the job is outside the lifecycle, all its records go the general way. The
 * failure lifecycle the walk holds (steps after GENERAL: the live table applies none of
 * them; once a retryable failure is held, hold_failure sets the job's row retryable):
 * FAILED, a worker failure's finish left it retryable or discarded (waiting for the
 * details); DETAILED, executing with the failure's details (waiting for the finish);
 * FAILURE_HELD, both: held as a row */
enum { INSERTED = 1, EXECUTING, FINISHED, DONE, RESULTED, SCHEDULED, GENERAL, FAILED,
       DETAILED, FAILURE_HELD, CANCELLED };
/* per job scratch beside its live row (live_rows.c, which checks each step): step, insert,
 * eligible_at, started, started_at, finished,
 * finished_at, stamp, result, result_bytes, six definition columns, the insert's index,
 * and for a failure: max_attempts, the retry's due time, the details' index and size, the
 * state the finish left (retryable or discarded); for a delayed insert: 1, and the index
 * of its availability once taken; the revisions its later steps are on (1 delayed, 4
 * retried), whether it is a retry, and a retry's first start and failure finish (index,
 * time) */
enum { W_STEP, W_INSERT, W_ELIGIBLE, W_STARTED, W_STARTED_AT, W_FINISHED,
       W_FINISHED_AT, W_STAMP, W_RESULT, W_RESULT_BYTES, W_QUEUE, W_QUEUE_LENGTH, W_WORKER,
       W_WORKER_LENGTH, W_DEFINITION_LENGTH, W_ARGS_NODES, W_INSERT_INDEX, W_ORDER,
       W_START_STAMP, W_MAX_ATTEMPTS, W_DUE, W_DETAILS, W_FAILURE_BYTES, W_FAILED_STATE,
       W_DELAYED, W_AVAILABLE, W_SHIFT, W_RETRIED, W_FIRST_START, W_FIRST_START_AT,
       W_FAIL_FINISH, W_FAIL_AT, W_REVISION, W_TIMED_OUT, W_WIDTH };

/* transitions.retry_window(1): a first attempt's retry is due 1,000 to 1,250 ms after its
 * failure (saturating at TIME_MAX) */
#define FIRST_RETRY_LOW 1000u
#define FIRST_RETRY_HIGH 1250u

/* The state a finish (mutation row `m`, of a job executing its first attempt of its first
 * cycle at revision 2, or 3 after its failure's details; a delayed job's one later) leaves
 * when the reducer accepts it as a worker failure: outcome failed, the start's execution
 * token (2, a delayed job's 3), no order, and either
 * disposition retryable with next attempt 2 within max_attempts and the retry due inside
 * the first window (TAY_STATE_RETRYABLE), or, max_attempts 1, disposition discarded
 * (TAY_STATE_DISCARDED; the scan checked that it has no next attempt nor due time); 0 for
 * any other finish. */
static int failure_finish(const uint64_t *m, const uint64_t *w, int ordered) {
    uint64_t at = m[TAY_EF_AT], due = m[TAY_EF_F];
    uint64_t low = at > TIME_MAX - FIRST_RETRY_LOW ? TIME_MAX : at + FIRST_RETRY_LOW;
    uint64_t high = at > TIME_MAX - FIRST_RETRY_HIGH ? TIME_MAX : at + FIRST_RETRY_HIGH;
    /* outcome failed (1), or timed out (2: the engine's own finish, no details) */
    int outcome_ok = m[TAY_EF_C] == 1 || (m[TAY_EF_C] == 2 && w[W_STEP] == EXECUTING);
    if (ordered || !outcome_ok || m[TAY_EF_A] != 2 + w[W_SHIFT]
        || m[TAY_EF_EXPECTED] != (w[W_STEP] == DETAILED ? 3u : 2u) + w[W_SHIFT])
        return 0;
    if (m[TAY_EF_B] == 1 && m[TAY_EF_E] == 2 && w[W_MAX_ATTEMPTS] >= 2 && low <= due
        && due <= high)
        return TAY_STATE_RETRYABLE;
    if (m[TAY_EF_B] == 2 && w[W_MAX_ATTEMPTS] == 1) return TAY_STATE_DISCARDED;
    return 0;
}

/* Whether a cancel (mutation row `m`) is one the reducer accepts of a job waiting at its
 * insert, available or scheduled (revision 1), or available after its delayed
 * availability (revision 2): at that revision, no execution token, no order. */
static int waiting_cancel(const uint64_t *m, const uint64_t *w, int ordered) {
    if (ordered || !((m[TAY_EF_NIL] >> TAY_EF_A) & 1) || w[W_RETRIED]) return 0;
    if (w[W_STEP] == SCHEDULED) return m[TAY_EF_EXPECTED] == 1;
    return w[W_STEP] == INSERTED && m[TAY_EF_EXPECTED] == (w[W_DELAYED] ? 2u : 1u);
}

/* Whether the job is done in columns: completed at its first attempt (a retried success
 * is a live row), or cancelled while it waited. */
static int in_columns(const uint64_t *w) {
    return (w[W_STEP] == DONE && !w[W_RETRIED]) || w[W_STEP] == CANCELLED;
}

/* Whether the job is held (in columns or as a failed row) past its delayed insert: replay
 * pushed the insert's timer, stale by then, and the holder does not, so the tiebreak
 * skips it. */
static int skips_insert_timer(const uint64_t *w) {
    return w[W_DELAYED] && (in_columns(w) || w[W_STEP] == FAILURE_HELD);
}

/* A worker failure held with its details leaves a retryable job's live row retryable at
 * revision 4 (next attempt 2, due at the retry's time): the table then follows the retry's
 * availability, start and success as it follows a first attempt's. A delayed job's retry,
 * or a timed-out job's, is not followed (its row stays executing: the retry goes the
 * general way). */
static void hold_failure(tay_live_table *table, const uint64_t *w, size_t number) {
    if (w[W_FAILED_STATE] == TAY_STATE_RETRYABLE && !w[W_DELAYED] && !w[W_TIMED_OUT])
        tay_live_retryable(table, number, 4, 2, w[W_DUE]);
}

/* Frees the walk's table and scratch; -1, what tay_tail_jobs returns out of memory. */
static long walk_free(tay_live_table *table, uint32_t *owner, uint32_t *finish_order,
                      uint64_t *work, uint8_t *pushes) {
    tay_live_free(table);
    free(owner);
    free(finish_order);
    free(work);
    free(pushes);
    return -1;
}

/* A job inserted before the walk's range (in flight at a compaction's capture, or one whose
 * insert an exact batch took), held in the table by its id (tay_live_hold: every apply
 * refuses it, a later insert of that id included, which stops the walk) as a job sent the
 * general way: all its records pending. Its number, or -2 out of memory. */
static long hold_unknown(tay_live_table *table, uint64_t *work, const uint8_t *id,
                         size_t *numbered) {
    long number = tay_live_hold(table, id);
    if (number < 0) return -2;  /* (never -1: the caller found no row for the id) */
    uint64_t *w = work + (size_t)number * W_WIDTH;
    memset(w, 0, W_WIDTH * sizeof(uint64_t));
    w[W_STEP] = GENERAL;
    w[W_INSERT_INDEX] = UINT64_MAX;  /* no record of the walk's is its insert */
    (*numbered)++;
    return number;
}

/* The (30,2) inner pairs (schema 2) on a chain of their own that change no job's state:
 * a schedule's delivery (11) and state (13), which the server writes at each occurrence;
 * a queue's pause (20), resume (21), scale (24) and rate limit (28); a schedule's pause
 * (25) and resume (26); a day's totals (32), which the server writes every minute. The
 * registry's epoch-carried pairs whose entity is not a job (tested equal) */
static int of_no_job(uint8_t type) {
    switch (type) {
    case 11: case 13: case 20: case 21: case 24: case 25: case 26: case 28: case 32:
        return 1;
    default:
        return 0;
    }
}

/* The (30,2) inner pairs (schema 2) of an operator's step of one job: a requeue of a
 * cancelled job (23), an expedite of a scheduled one (27), a finished job's deletion (29) */
static int job_step(uint8_t type) {
    return type == 23 || type == 27 || type == 29;
}

/* pushes[i]: bit 0 a ready push; STEP_CHANGE, a (30,2) step that changes its job's state
 * (an (8,1) always does); STEP_PENDING, a record pending though its job is in columns (the
 * deletion of a job done in the walk) */
#define STEP_CHANGE 2
#define STEP_PENDING 4

long tay_tail_jobs(const uint8_t *buf, size_t size, size_t count, const uint64_t *offsets,
                   const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                   uint64_t *next_order, uint32_t max_depth, uint64_t max_nodes,
                   uint64_t max_binary, size_t tape_capacity, uint8_t *tags, uint64_t *values,
                   uint32_t *tape_offsets, double *reals, uint64_t *jobs, uint64_t *links,
                   size_t *job_count, uint64_t *pending, size_t *pending_count,
                   uint64_t *totals, uint64_t *live, size_t *live_count) {
    size_t n = 0, finishes = 0, i;
    tay_live_table *table = NULL;  /* the jobs' durable rows; job numbers are its row numbers */
    uint32_t *owner = malloc((count ? count : 1) * sizeof(uint32_t)); /* job + 1 per record */
    uint32_t *finish_order = malloc((count ? count : 1) * sizeof(uint32_t));
    uint64_t *work = malloc((count ? count : 1) * W_WIDTH * sizeof(uint64_t));
    uint8_t *pushes = malloc(count ? count : 1);  /* per record: bit 0 a ready push */
    uint64_t row[TAY_MUTATION_ROW], stamps = 0, readies = 0;
    if (tay_live_new(count, *next_order, &table) < 0 || !owner || !finish_order || !work
        || !pushes)
        return walk_free(table, owner, finish_order, work, pushes);
    for (i = 0; i < count; i++) {
        uint64_t offset = offsets[i] + FRAME_HEADER;
        uint32_t length = lengths[i];
        const uint8_t *p = buf + offset;
        uint32_t job;
        uint64_t *w;
        long found;
        if (offsets[i] > size || size - offsets[i] < FRAME_HEADER + (uint64_t)length) break;
        pushes[i] = 0;
        if (types[i] == 8 && schemas[i] == 1) {
            tay_mutations_scan(buf, 1, &offset, &length, max_depth, max_nodes, max_binary,
                               tape_capacity, tags, values, tape_offsets, reals, row);
            if (row[TAY_EF_STATUS] != TAY_EVENT_FAST) break;
            uint64_t kind = row[TAY_MF_KIND], at = row[TAY_EF_AT];
            int ordered = !((row[TAY_EF_NIL] >> TAY_MF_ORDER) & 1);
            /* the walk's lifecycle: an insert available at once, its start, a success; the
             * live table applies each as the reducer would, or refuses it: the walk stops
             * at an insert it refuses, and any other record of a job it knows sends that
             * job the general way (below) */
            found = kind == 1 ? -1 : tay_live_find(table, p);
            /* a job inserted before `start` (in flight at a compaction's capture, or one an
             * exact batch took): held by its id, the general way (below) */
            if (kind != 1 && found < 0 && (found = hold_unknown(table, work, p, &n)) == -2)
                return walk_free(table, owner, finish_order, work, pushes);  /* out of memory */
            w = found >= 0 ? work + (size_t)found * W_WIDTH : NULL;
            long number = -1;
            int failed_state = kind == 4 && !w[W_RETRIED]
                && (w[W_STEP] == EXECUTING || w[W_STEP] == DETAILED)
                ? failure_finish(row, w, ordered) : 0;
            if (kind == 5 && waiting_cancel(row, w, ordered)) {
                /* done: cancelled at the next revision; its ready or timer push stale */
                number = found;
                job = (uint32_t)found + 1;
                w[W_STEP] = CANCELLED;
                w[W_REVISION] = row[TAY_EF_EXPECTED] + 1;
                w[W_FINISHED] = i;
                w[W_FINISHED_AT] = at;
                w[W_STAMP] = stamps + 1;
                finish_order[finishes++] = job;
            } else if (failed_state) {
                /* the live table applies no failure: the job's row there stays executing
                 * until the failure is held whole (finish and details), then it is set
                 * retryable (hold_failure) for the retry */
                number = found;
                job = (uint32_t)found + 1;
                /* a timeout has no details: held at its finish */
                w[W_TIMED_OUT] = row[TAY_EF_C] == 2;
                w[W_STEP] = w[W_STEP] == DETAILED || w[W_TIMED_OUT] ? FAILURE_HELD : FAILED;
                if (w[W_TIMED_OUT]) {
                    w[W_DETAILS] = w[W_INSERT_INDEX];
                    w[W_FAILURE_BYTES] = 0;
                }
                w[W_FAILED_STATE] = (uint64_t)failed_state;
                w[W_FINISHED] = i;
                w[W_FINISHED_AT] = at;
                w[W_STAMP] = stamps + 1;
                w[W_DUE] = failed_state == TAY_STATE_RETRYABLE ? row[TAY_EF_F] : 0;
                if (w[W_STEP] == FAILURE_HELD) hold_failure(table, w, (size_t)found);
            } else if (kind == 1 || ((kind == 3 || kind == 4) && w[W_STEP] < GENERAL)
                       || (kind == 2 && (w[W_STEP] == SCHEDULED
                                         || (w[W_STEP] == FAILURE_HELD && !w[W_DELAYED]
                                             && !w[W_TIMED_OUT]
                                             && w[W_FAILED_STATE] == TAY_STATE_RETRYABLE)))) {
                int resulted = kind == 4 && w[W_STEP] == RESULTED;
                /* the live table knows no results: it applies this finish as the finish of
                 * revision 2 (a done job's row is never read again) */
                if (resulted) row[TAY_EF_EXPECTED] -= 1;
                number = tay_live_apply_one(table, p, row);
                if (number == -2) return walk_free(table, owner, finish_order, work, pushes);
                if (number < 0 && kind == 1) break;
                if (number >= 0) {
                    job = (uint32_t)number + 1;
                    w = work + (size_t)number * W_WIDTH;
                    if (kind == 1) {
                        /* available at once (a ready push), or delayed: scheduled until
                         * its availability (a timer push, no order) */
                        n++;
                        w[W_STEP] = ordered ? INSERTED : SCHEDULED;
                        w[W_DELAYED] = w[W_SHIFT] = !ordered;
                        w[W_RETRIED] = w[W_AVAILABLE] = w[W_TIMED_OUT] = 0;
                        w[W_INSERT] = offset;
                        w[W_INSERT_INDEX] = i;
                        w[W_ELIGIBLE] = row[TAY_EF_A];
                        w[W_QUEUE] = offset + row[TAY_EF_QUEUE];
                        w[W_QUEUE_LENGTH] = row[TAY_EF_QUEUE_LENGTH];
                        w[W_WORKER] = offset + row[TAY_EF_WORKER];
                        w[W_WORKER_LENGTH] = row[TAY_EF_WORKER_LENGTH];
                        w[W_DEFINITION_LENGTH] = row[TAY_EF_DEFINITION_LENGTH];
                        w[W_ARGS_NODES] = row[TAY_EF_ARGS_NODES];
                        w[W_ORDER] = row[TAY_MF_ORDER];
                        w[W_MAX_ATTEMPTS] = row[TAY_EF_MAX_ATTEMPTS];
                        pushes[i] = (uint8_t)ordered;
                        readies += (uint64_t)ordered;
                    } else if (kind == 2) {
                        /* a delayed job's availability, or a retry's (the first attempt's
                         * start and failure finish kept aside): a ready push */
                        if (w[W_STEP] == FAILURE_HELD) {
                            w[W_RETRIED] = 1;
                            w[W_SHIFT] = 4;
                            w[W_FIRST_START] = w[W_STARTED];
                            w[W_FIRST_START_AT] = w[W_STARTED_AT];
                            w[W_FAIL_FINISH] = w[W_FINISHED];
                            w[W_FAIL_AT] = w[W_FINISHED_AT];
                        }
                        w[W_STEP] = INSERTED;
                        w[W_AVAILABLE] = i;
                        w[W_ORDER] = row[TAY_MF_ORDER];
                        pushes[i] = 1;
                        readies++;
                    } else if (kind == 3) {
                        w[W_STEP] = EXECUTING;
                        w[W_STARTED] = i;
                        w[W_STARTED_AT] = at;
                        w[W_START_STAMP] = stamps + 1;
                    } else {
                        w[W_STEP] = resulted ? DONE : FINISHED;
                        w[W_FINISHED] = i;
                        w[W_FINISHED_AT] = at;
                        w[W_STAMP] = stamps + 1;
                        finish_order[finishes++] = job;
                    }
                }
            }
            if (number < 0) {
                /* a record of a known job outside the lifecycle (a failure finish, a retry,
                 * a cancel, a second start...): the job goes the general way, all its
                 * records replayed the exact way, which refuses what the reducer refuses.
                 * Every mutation the reducer accepts changes the job's state (one state
                 * change) and pushes it ready exactly when it carries an order, which the
                 * allocator must take here (the exact replay trusts the walk's check) */
                if (ordered && tay_live_take_order(table, row[TAY_MF_ORDER]) < 0) break;
                w[W_STEP] = GENERAL;
                job = (uint32_t)found + 1;
                pushes[i] = (uint8_t)ordered;
                readies += (uint64_t)ordered;
            }
            stamps++;
        } else if (types[i] == 30 && schemas[i] == 2 && length >= 10 && p[1] == 2
                   && of_no_job(p[0])) {
            /* an event of a schedule, a queue or a day: never a job's state change nor a
             * ready push; taken as pending, so that the exact replay (which checks its
             * entity's chain) applies it in its place and the walk goes on. A schedule's
             * delivery names its job, whose link to the schedule the engine keeps beside
             * the job wherever it is held (a job done here, in its columns), so the job
             * stays in the walk */
            job = 0;
        } else if (types[i] == 30 && schemas[i] == 2) {
            /* a job's result (10,2) or a worker failure's details (22,2): never a state
             * change nor a ready push; or an operator's step of a job (job_step): its job
             * goes the general way. A payload the event scan does not vouch for stops the
             * walk (the exact decoder decides) */
            uint64_t event_offset = offset + 10, revision;
            uint32_t event_length = length - 10;
            uint8_t type = p[0], schema = 2;
            if (length < 10 || p[1] != 2 || (type != 10 && type != 22 && !job_step(type)))
                break;
            revision = rd64(p + 2);
            tay_events_scan(buf, 1, &event_offset, &event_length, &type, &schema, max_depth,
                            max_nodes, max_binary, tape_capacity, tags, values, tape_offsets,
                            reals, row);
            if (row[TAY_EF_STATUS] != TAY_EVENT_FAST) break;
            const uint8_t *id = buf + event_offset + row[TAY_EF_JOB_ID];
            found = tay_live_find(table, id);
            /* a job inserted before `start`: held, the general way (below), as above */
            if (found < 0 && (found = hold_unknown(table, work, id, &n)) == -2)
                return walk_free(table, owner, finish_order, work, pushes);  /* out of memory */
            job = (uint32_t)found + 1;
            w = work + (size_t)found * W_WIDTH;
            if (job_step(type)) {
                /* outside every lifecycle the walk holds: the job goes the general way. A
                 * requeue or an expedite leaves it available (the reducer accepts only
                 * that): one state change and a ready push, and its order is the
                 * allocator's next (the (30,2) carries none). A deletion changes neither
                 * (the engine drops the job), and a later insert of its id stops the walk
                 * (the table still holds the id). A job done here stays done: */
                if (type == 29 && in_columns(w)) {
                    /* the deletion of a job done here: the job stays in the columns, and
                     * the deletion, pending, drops it from there in its place (the
                     * consumer reads its state and revision in place) */
                    pushes[i] = STEP_PENDING;
                } else {
                    w[W_STEP] = GENERAL;
                }
                if (type != 29) {
                    tay_live_take_order(table, tay_live_next_order(table));
                    pushes[i] = 1 | STEP_CHANGE;
                    readies++;
                    stamps++;
                }
            } else if (type == 22) {
                /* held with its finish when it comes right before it (the engine's order)
                 * or right after it (stores before 2026-12-04), each at its revision (a
                 * delayed job's one later); in any other place its job goes the general
                 * way */
                if (revision == row[TAY_EF_EXPECTED] + 1 && !w[W_RETRIED]
                    && ((w[W_STEP] == EXECUTING && row[TAY_EF_EXPECTED] == 2 + w[W_SHIFT])
                        || (w[W_STEP] == FAILED && row[TAY_EF_EXPECTED] == 3 + w[W_SHIFT]
                            && w[W_FINISHED] + 1 == i))) {
                    w[W_STEP] = w[W_STEP] == EXECUTING ? DETAILED : FAILURE_HELD;
                    w[W_DETAILS] = i;
                    w[W_FAILURE_BYTES] = tay_failure_bytes(row);
                    if (w[W_STEP] == FAILURE_HELD) hold_failure(table, w, (size_t)found);
                } else {
                    w[W_STEP] = GENERAL;
                }
            } else if (revision != row[TAY_EF_EXPECTED] + 1
                       || !((w[W_STEP] == FINISHED && row[TAY_EF_EXPECTED] == 3 + w[W_SHIFT])
                            || (w[W_STEP] == EXECUTING
                                && row[TAY_EF_EXPECTED] == 2 + w[W_SHIFT]))) {
                /* a result outside the lifecycle (not where a success has it): the job
                 * goes the general way (a result changes no state) */
                w[W_STEP] = GENERAL;
            } else {
                w[W_STEP] = w[W_STEP] == FINISHED ? DONE : RESULTED;
                w[W_RESULT] = i;
                w[W_RESULT_BYTES] = row[TAY_EF_B];
            }
        } else {
            break;
        }
        owner[i] = job;
    }
    size_t done = 0, waiting = 0;
    for (size_t f = 0; f < finishes; f++) {
        const uint64_t *w = work + (size_t)(finish_order[f] - 1) * W_WIDTH;
        if (!in_columns(w)) continue;
        int cancelled = w[W_STEP] == CANCELLED;
        uint64_t *out = jobs + done * TAY_BASE_JOB, *link = links + done * TAY_TAIL_LINK;
        size_t started = w[W_STARTED], finished = w[W_FINISHED], result = w[W_RESULT];
        /* a cancelled job has no start nor result (0 / 0) and a delayed one an availability
         * only when it came before the cancel (never at index 0: its insert precedes it) */
        int available = w[W_DELAYED] && w[W_AVAILABLE];
        out[TAY_BJ_RECORD] = w[W_INSERT_INDEX];
        out[TAY_BJ_SNAPSHOT] = w[W_INSERT];
        out[TAY_BJ_SNAPSHOT_LENGTH] = lengths[w[W_INSERT_INDEX]];
        out[TAY_BJ_STATE] = cancelled ? TAY_STATE_CANCELLED : TAY_STATE_COMPLETED;
        out[TAY_BJ_REVISION] = cancelled ? w[W_REVISION] : 4 + w[W_SHIFT];
        out[TAY_BJ_TERMINAL_AT] = w[W_FINISHED_AT];
        out[TAY_BJ_QUEUE] = w[W_QUEUE];
        out[TAY_BJ_QUEUE_LENGTH] = w[W_QUEUE_LENGTH];
        out[TAY_BJ_WORKER] = w[W_WORKER];
        out[TAY_BJ_WORKER_LENGTH] = w[W_WORKER_LENGTH];
        out[TAY_BJ_DEFINITION_LENGTH] = w[W_DEFINITION_LENGTH];
        out[TAY_BJ_ARGS_NODES] = w[W_ARGS_NODES];
        out[TAY_BJ_RESULT] = cancelled ? 0 : offsets[result] + FRAME_HEADER;
        out[TAY_BJ_RESULT_LENGTH] = cancelled ? 0 : lengths[result];
        out[TAY_BJ_RESULT_BYTES] = cancelled ? 0 : w[W_RESULT_BYTES];
        out[TAY_BJ_FAILURE] = 0; /* a tail job done in columns has no failure */
        out[TAY_BJ_FAILURE_LENGTH] = 0;
        out[TAY_BJ_FAILURE_BYTES] = 0;
        link[TAY_TL_STAMP] = w[W_STAMP];
        link[TAY_TL_STARTED] = cancelled ? 0 : offsets[started] + FRAME_HEADER;
        link[TAY_TL_STARTED_LENGTH] = cancelled ? 0 : lengths[started];
        link[TAY_TL_STARTED_AT] = cancelled ? 0 : w[W_STARTED_AT];
        link[TAY_TL_FINISHED] = offsets[finished] + FRAME_HEADER;
        link[TAY_TL_FINISHED_LENGTH] = lengths[finished];
        link[TAY_TL_AVAILABILITY] = available ? offsets[w[W_AVAILABLE]] + FRAME_HEADER : 0;
        link[TAY_TL_AVAILABILITY_LENGTH] = available ? lengths[w[W_AVAILABLE]] : 0;
        done++;
    }
    /* the records of jobs not done, with the state changes, ready pushes and timer pushes
     * of done jobs (a delayed insert's) before each */
    uint64_t before = 0, ready = 0, timers = 0;
    for (size_t r = 0; r < i; r++) {
        /* owner 0: a record of no job (of_no_job), always pending */
        const uint64_t *w = owner[r] ? work + (size_t)(owner[r] - 1) * W_WIDTH : NULL;
        if (!w || !in_columns(w) || (pushes[r] & STEP_PENDING)) {
            uint64_t *out = pending + waiting++ * 4;
            out[0] = r;
            out[1] = before;
            out[2] = ready;
            out[3] = timers;
        }
        if (w) {
            int retried = w[W_STEP] == DONE && w[W_RETRIED];  /* held as a completed row */
            if (w[W_INSERT_INDEX] == r && skips_insert_timer(w)) timers++;
            /* a retried job's failure pushed its (then stale) timer at its finish, and
             * again at its details when they came after it (the older order) */
            if (retried && (r == w[W_FAIL_FINISH]
                            || (r == w[W_DETAILS] && w[W_DETAILS] > w[W_FAIL_FINISH])))
                timers++;
        }
        if (types[r] == 8 || (pushes[r] & STEP_CHANGE)) before++;
        ready += pushes[r] & 1;
    }
    /* the jobs left at their insert (available, or scheduled when delayed), their start or
     * retryable or discarded after a failure, in insert order (job numbers are given at the
     * insert); a delayed job past its insert and not failed goes the general way */
    size_t held = 0;
    for (size_t j = 0; j < n; j++) {
        const uint64_t *w = work + j * W_WIDTH;
        int executing = w[W_STEP] == EXECUTING, failed = w[W_STEP] == FAILURE_HELD;
        int started = executing || failed, scheduled = w[W_STEP] == SCHEDULED;
        int completed = w[W_STEP] == DONE && w[W_RETRIED];
        uint64_t insert = w[W_INSERT_INDEX];
        if (w[W_SHIFT] ? !scheduled && !completed && !failed
                       : w[W_STEP] != INSERTED && !started)
            continue;
        uint64_t *out = live + held++ * TAY_TAIL_LIVE;
        out[TAY_TV_RECORD] = w[W_INSERT_INDEX];
        out[TAY_TV_STATE] = completed ? TAY_STATE_COMPLETED : failed ? w[W_FAILED_STATE]
                          : executing ? TAY_STATE_EXECUTING
                          : scheduled ? TAY_STATE_SCHEDULED : TAY_STATE_AVAILABLE;
        out[TAY_TV_START] = completed ? w[W_FIRST_START] : started ? w[W_STARTED] : insert;
        out[TAY_TV_START_AT] = completed ? w[W_FIRST_START_AT] : started ? w[W_STARTED_AT] : 0;
        out[TAY_TV_START_STAMP] = started ? w[W_START_STAMP] : 0;
        out[TAY_TV_FINISH] = completed ? w[W_FAIL_FINISH] : failed ? w[W_FINISHED] : insert;
        out[TAY_TV_FINISH_AT] = completed ? w[W_FAIL_AT] : failed ? w[W_FINISHED_AT] : 0;
        out[TAY_TV_FINISH_STAMP] = failed ? w[W_STAMP] : 0;
        out[TAY_TV_DETAILS] = failed || completed ? w[W_DETAILS] : insert;
        out[TAY_TV_FAILURE_BYTES] = failed || completed ? w[W_FAILURE_BYTES] : 0;
        out[TAY_TV_ELIGIBLE_AT] = failed ? w[W_DUE] : completed ? 0 : w[W_ELIGIBLE];
        out[TAY_TV_RETRY] = completed ? w[W_AVAILABLE] : insert;
        out[TAY_TV_RESTART] = completed ? w[W_STARTED] : insert;
        out[TAY_TV_RESTART_AT] = completed ? w[W_STARTED_AT] : 0;
        out[TAY_TV_RESULT] = completed ? w[W_RESULT] : insert;
        out[TAY_TV_COMPLETE] = completed ? w[W_FINISHED] : insert;
        out[TAY_TV_COMPLETE_AT] = completed ? w[W_FINISHED_AT] : 0;
        out[TAY_TV_COMPLETE_STAMP] = completed ? w[W_STAMP] : 0;
        out[TAY_TV_RESULT_BYTES] = completed ? w[W_RESULT_BYTES] : 0;
        out[TAY_TV_AVAILABILITY_RECORD] = failed && w[W_DELAYED] ? w[W_AVAILABLE] : insert;
        out[TAY_TV_ORDER] = w[W_ORDER];
        out[TAY_TV_QUEUE] = w[W_QUEUE];
        out[TAY_TV_QUEUE_LENGTH] = w[W_QUEUE_LENGTH];
        out[TAY_TV_WORKER] = w[W_WORKER];
        out[TAY_TV_WORKER_LENGTH] = w[W_WORKER_LENGTH];
        out[TAY_TV_DEFINITION_LENGTH] = w[W_DEFINITION_LENGTH];
        out[TAY_TV_ARGS_NODES] = w[W_ARGS_NODES];
    }
    *next_order = tay_live_next_order(table);
    walk_free(table, owner, finish_order, work, pushes);
    *live_count = held;
    *job_count = done;
    *pending_count = waiting;
    totals[0] = stamps;
    totals[1] = readies;
    totals[2] = timers;
    return (long)i;
}
