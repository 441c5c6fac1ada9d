/* Columnar replay of a Store-v2 base: finished jobs as rows of integers (storage.md §3.5-3.6).
 *
 * tay_base_jobs() walks the records of one base segment from a record boundary and takes
 * every finished job it can vouch for whole: a (7,1) snapshot the snapshot fast path
 * accepts, in a terminal state (completed, cancelled, discarded; such a snapshot carries no
 * availability order), its job id above the previous one, then the (31,2) attachments the
 * event fast path accepts for that job at its revision, in pair order: at most one (10,2)
 * result when the job is completed, then at most one (22,2) failure's details.
 * For each it writes TAY_BASE_JOB u64s (offsets absolute in buf). With take_live it also
 * takes a live job (available, scheduled or retryable, with a due time, and at most one
 * attachment: its failure's details, for that job at its revision) as a TAY_BASE_LIVE row
 * in `live`, with the count of the finished jobs before it, so that a base's backlog and
 * its lone live jobs need not stop the run (the engine holds them as rows:
 * tay.storage.v2.rows.BaseLiveRow). With open_end the records after `count` may hold the
 * attachments of the last job: a job whose records end the range is not taken.
 * It stops before the first record it cannot take so (any other pair, a slow payload, a
 * job it does not take, attachments out of that order, one it does not take, a record
 * outside buf's size bytes, a job that may have attachments past the range): the caller
 * replays from there the exact way, so every refusal keeps its class, reason and offset.
 * It never refuses. The pure twin is tay/_native/_pure_base.py (same rows, same stop).
 */
#include "tay_native.h"

#include <string.h>

#define FRAME_HEADER 24 /* Record v1: the payload starts 24 bytes after the record */
#define FAILURE_FIXED_BYTES 64u

uint64_t tay_failure_bytes(const uint64_t *row) {
    uint64_t bytes = FAILURE_FIXED_BYTES;
    for (int slot = TAY_EF_A; slot <= TAY_EF_E; slot += 2)
        if (!((row[TAY_EF_NIL] >> slot) & 1)) bytes += row[slot + 1];
    return bytes;
}

/* A job's keys and definition sizes from its snapshot row's definition slots `d` (the
 * snapshot's payload at `offset`), in the order both row layouts keep them: QUEUE offset
 * and length, WORKER offset and length, DEFINITION_LENGTH, ARGS_NODES. */
static void definition_slots(uint64_t *out, uint64_t offset, const uint64_t *d) {
    out[0] = offset + d[TAY_EF_QUEUE];
    out[1] = d[TAY_EF_QUEUE_LENGTH];
    out[2] = offset + d[TAY_EF_WORKER];
    out[3] = d[TAY_EF_WORKER_LENGTH];
    out[4] = d[TAY_EF_DEFINITION_LENGTH];
    out[5] = d[TAY_EF_ARGS_NODES];
}

/* The event scan's limits and tape, as the caller gave them. */
typedef struct {
    uint32_t max_depth;
    uint64_t max_nodes, max_binary;
    size_t tape_capacity;
    uint8_t *tags;
    uint64_t *values;
    uint32_t *tape_offsets;
    double *reals;
} scan_tape;

/* The (31,2) record at `record` (Record v1, inside buf's size bytes) carrying a (wanted,2)
 * event the event scan accepts for job_id at revision: out is (payload offset, length,
 * charge): a result's canonical size (10) or the failure details' (22); 0 when it is not
 * one. */
static int attachment_taken(const uint8_t *buf, size_t size, uint64_t record,
                            uint32_t length, uint8_t wanted, const uint8_t *job_id,
                            uint64_t revision, const scan_tape *t, uint64_t *out) {
    uint64_t offset = record + FRAME_HEADER, event_offset = offset + 2;
    uint32_t event_length;
    uint8_t type = wanted, schema = 2;
    uint64_t row[TAY_EVENT_ROW];
    if (record > size || size - record < FRAME_HEADER + (uint64_t)length) return 0;
    const uint8_t *p = buf + offset;
    if (length < 2 || p[0] != wanted || p[1] != 2) return 0;
    event_length = length - 2;
    tay_events_scan(buf, 1, &event_offset, &event_length, &type, &schema, t->max_depth,
                    t->max_nodes, t->max_binary, t->tape_capacity, t->tags, t->values,
                    t->tape_offsets, t->reals, row);
    if (row[TAY_EF_STATUS] != TAY_EVENT_FAST || row[TAY_EF_EXPECTED] != revision
        || memcmp(buf + event_offset + row[TAY_EF_JOB_ID], job_id, 16) != 0)
        return 0;
    out[0] = offset;
    out[1] = length;
    out[2] = wanted == 10 ? row[TAY_EF_B] : tay_failure_bytes(row);
    return 1;
}

/* A job's (31,2) attachments, the records from `first` (right after its snapshot) on, in
 * the order a base writes them: at most one result where `result` is not NULL (a completed
 * job), then at most one failure's details; each written as attachment_taken writes it
 * (3 u64s; left as it is when there is none). Returns how many records they are, -1 when
 * one is not an attachment the walk takes or they come in another order (the job goes the
 * exact way). Both row layouts take their attachments here. */
static long job_attachments(const uint8_t *buf, size_t size, size_t first, size_t count,
                            const uint64_t *offsets, const uint32_t *lengths,
                            const uint8_t *types, const uint8_t *schemas,
                            const uint8_t *job_id, uint64_t revision, const scan_tape *t,
                            uint64_t *result, uint64_t *failure) {
    size_t used = 0;
    int failed = 0;
    while (first + used < count && types[first + used] == 31 && schemas[first + used] == 2) {
        uint64_t record = offsets[first + used];
        uint8_t inner = record < size && size - record > FRAME_HEADER
                            ? buf[record + FRAME_HEADER] : 0;
        uint64_t *slot = inner == 10 && used == 0 && result != NULL ? result
                         : inner == 22 && !failed ? failure : NULL;
        if (slot == NULL || !attachment_taken(buf, size, record, lengths[first + used], inner,
                                              job_id, revision, t, slot))
            return -1;
        failed |= slot == failure;
        used++;
    }
    return (long)used;
}

size_t tay_base_jobs(const uint8_t *buf, size_t size, size_t count, const uint64_t *offsets,
                     const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                     const uint8_t *last_id, uint32_t max_depth, uint64_t max_nodes,
                     uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                     uint64_t *values, uint32_t *tape_offsets, double *reals, uint64_t *jobs,
                     size_t *job_count, int take_live, uint64_t *live, size_t *live_count,
                     int open_end) {
    uint64_t row[TAY_SNAPSHOT_ROW];
    const scan_tape tape = {max_depth, max_nodes, max_binary, tape_capacity, tags, values,
                            tape_offsets, reals};
    const uint8_t *previous = last_id;
    size_t i = 0, n = 0, held = 0;
    while (i < count) {
        if (types[i] != 7 || schemas[i] != 1) break;
        uint64_t offset = offsets[i] + FRAME_HEADER;
        uint32_t length = lengths[i];
        if (offsets[i] > size || size - offsets[i] < FRAME_HEADER + (uint64_t)length) break;
        const uint8_t *p = buf + offset;
        tay_snapshots_scan(buf, 1, &offset, &length, max_depth, max_nodes, max_binary,
                           tape_capacity, tags, values, tape_offsets, reals, row);
        if (row[0] != TAY_EVENT_FAST || (previous != NULL && memcmp(p, previous, 16) <= 0))
            break;
        const uint64_t *d = row + TAY_SF_DEFINITION;
        if (row[TAY_SF_STATE] < 4) {
            /* a live job waiting for a worker or its time, with at most its failure's
             * details: one that is executing, has no due time or other attachments goes
             * the exact way */
            uint64_t state = row[TAY_SF_STATE], failure[3] = {0, 0, 0};
            if (!take_live || state == 2 || ((row[TAY_SF_NIL] >> TAY_SF_ELIGIBLE_AT) & 1))
                break;
            long attached = job_attachments(buf, size, i + 1, count, offsets, lengths, types,
                                            schemas, p, row[TAY_SF_REVISION], &tape, NULL,
                                            failure);
            size_t used = 1 + (size_t)attached;
            if (attached < 0 || (open_end && i + used == count)) break;
            uint64_t *out = live + held * TAY_BASE_LIVE;
            out[TAY_BL_BEFORE] = n;
            out[TAY_BL_RECORD] = i;
            out[TAY_BL_SNAPSHOT] = offset;
            out[TAY_BL_SNAPSHOT_LENGTH] = length;
            out[TAY_BL_STATE] = state;
            out[TAY_BL_REVISION] = row[TAY_SF_REVISION];
            out[TAY_BL_HAS_ORDER] = !((row[TAY_SF_NIL] >> TAY_SF_ORDER) & 1);
            out[TAY_BL_ORDER] = out[TAY_BL_HAS_ORDER] ? row[TAY_SF_ORDER] : 0;
            out[TAY_BL_ELIGIBLE_AT] = row[TAY_SF_ELIGIBLE_AT];
            definition_slots(out + TAY_BL_QUEUE, offset, d);
            out[TAY_BL_FAILURE] = failure[0];
            out[TAY_BL_FAILURE_LENGTH] = failure[1];
            out[TAY_BL_FAILURE_BYTES] = failure[2];
            previous = p;
            i += used;
            held++;
            continue;
        }
        if (!((row[TAY_SF_NIL] >> TAY_SF_ORDER) & 1)) break;
        uint64_t *out = jobs + n * TAY_BASE_JOB;
        out[TAY_BJ_SNAPSHOT] = offset;
        out[TAY_BJ_SNAPSHOT_LENGTH] = length;
        out[TAY_BJ_STATE] = row[TAY_SF_STATE];
        out[TAY_BJ_REVISION] = row[TAY_SF_REVISION];
        out[TAY_BJ_TERMINAL_AT] = row[TAY_SF_TERMINAL_AT]; /* present in every terminal state */
        definition_slots(out + TAY_BJ_QUEUE, offset, d);
        memset(out + TAY_BJ_RESULT, 0, 6 * sizeof *out); /* no result, no failure */
        /* a completed job's result, then the details of its last failure (any finished job
         * may have them) */
        long attached = job_attachments(buf, size, i + 1, count, offsets, lengths, types,
                                        schemas, p, row[TAY_SF_REVISION], &tape,
                                        row[TAY_SF_STATE] == 4 ? out + TAY_BJ_RESULT : NULL,
                                        out + TAY_BJ_FAILURE);
        size_t used = 1 + (size_t)attached;
        if (attached < 0 || (open_end && i + used == count)) break;
        out[TAY_BJ_RECORD] = i;
        previous = p;
        i += used;
        n++;
    }
    *job_count = n;
    *live_count = held;
    return i;
}

/* What an engine keeps of a run per job (tay.storage.v2.rows.HeldJobs), gathered here so
 * replay does not slice the segment once per job and key in Python. `jobs` is `count` rows
 * of TAY_BASE_JOB u64s as tay_base_jobs() wrote them, `buf` the bytes from segment offset
 * `origin` on (`size` of them).
 *
 * tay_base_ids(): the 16-byte job id of every job, in order, into `out` (16 * count bytes).
 * Returns 0, or -1 if an id lies outside buf (nothing written past `out`'s end either way). */
int tay_base_ids(const uint8_t *buf, size_t size, uint64_t origin, const uint64_t *jobs,
                 size_t count, uint8_t *out) {
    for (size_t k = 0; k < count; k++) {
        uint64_t start = jobs[k * TAY_BASE_JOB + TAY_BJ_SNAPSHOT];
        if (start < origin || start - origin > size || size - (start - origin) < 16) return -1;
        memcpy(out + 16 * k, buf + (start - origin), 16);
    }
    return 0;
}

/* tay_base_keys(): the key at column `slot` (TAY_BJ_QUEUE or TAY_BJ_WORKER, its length in
 * the next column) of every job as an index into the run's distinct keys, numbered in
 * order of first appearance: index[k] for job k, firsts[d] the job where key d first
 * appears. Keys compare as bytes. Returns the number of distinct keys; -1 if a key lies
 * outside buf or slot is neither column; -2 if there are more than `max_distinct` (index
 * and firsts are then partly written and mean nothing). A run has few distinct keys, so a
 * linear search after the previous job's key is enough. */
long tay_base_keys(const uint8_t *buf, size_t size, uint64_t origin, const uint64_t *jobs,
                   size_t count, int slot, size_t max_distinct, uint32_t *index,
                   size_t *firsts) {
    size_t distinct = 0, last = 0;
    if (slot != TAY_BJ_QUEUE && slot != TAY_BJ_WORKER) return -1;
    for (size_t k = 0; k < count; k++) {
        uint64_t start = jobs[k * TAY_BASE_JOB + slot];
        uint64_t length = jobs[k * TAY_BASE_JOB + slot + 1];
        const uint8_t *key;
        size_t d;
        if (start < origin || start - origin > size || size - (start - origin) < length)
            return -1;
        key = buf + (start - origin);
        for (d = 0; d < distinct; d++) {
            size_t probe = (last + d) % distinct; /* the previous job's key first */
            const uint64_t *seen = jobs + firsts[probe] * TAY_BASE_JOB + slot;
            if (seen[1] == length && memcmp(buf + (seen[0] - origin), key, length) == 0) {
                d = probe;
                break;
            }
        }
        if (d == distinct) {
            if (distinct == max_distinct) return -2;
            firsts[distinct++] = k;
        }
        index[k] = (uint32_t)d;
        last = d;
    }
    return (long)distinct;
}
