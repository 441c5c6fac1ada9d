/* tay native core: the C side of tay._native (plain C11, no interpreter includes; cffi API mode calls it).
 *
 * Conventions: functions return int; 0 (or a documented nonnegative code) is success and a
 * negative value is an error (-errno for system calls, a negative TAY_* code otherwise).
 * Every call handles a whole batch (all records, a whole mapped segment, a whole buffer).
 */
#ifndef TAY_NATIVE_H
#define TAY_NATIVE_H

#include <stddef.h>
#include <stdint.h>

/* ---- CRC32C (crc32c.c) ---- */
#define TAY_CRC_SOFTWARE 0
#define TAY_CRC_SSE42 1
#define TAY_CRC_ARMV8 2
int tay_crc32c_select(int force_software);
uint32_t tay_crc32c(uint32_t crc, const uint8_t *data, size_t length);
uint32_t tay_crc32c_chars(uint32_t crc, const char *data, size_t length);

/* ---- Record v1 frames (records.c) ---- */
#define TAY_RECORD_MAX_PAYLOAD 16777216u
#define TAY_E_RECORD_TYPE (-1001)
#define TAY_E_RECORD_SCHEMA (-1002)
#define TAY_E_RECORD_SEQUENCE (-1003)
#define TAY_E_RECORD_LENGTH (-1004)
#define TAY_E_OUTPUT_SIZE (-1005)
int tay_encode_records(size_t count, const int64_t *types, const int64_t *schemas,
                       const uint64_t *sequences, const uint64_t *lengths,
                       const uint8_t *payloads, uint8_t *out, size_t out_length,
                       size_t *error_index);

size_t tay_encode_frame(uint8_t *out, uint8_t type, uint8_t schema, uint64_t sequence,
                        const uint8_t *payload, size_t n);

#define TAY_SCAN_END 0
#define TAY_SCAN_NOT_RECORD 1
#define TAY_SCAN_BAD_RECORD 2
#define TAY_SCAN_SEQUENCE 3
#define TAY_SCAN_FULL 4
int tay_scan_records(const uint8_t *buf, size_t start, size_t end, uint32_t budget,
                     uint64_t first_sequence, size_t capacity, uint64_t *offsets,
                     uint8_t *types, uint8_t *schemas, uint64_t *sequences,
                     uint32_t *lengths, size_t *count, size_t *stop_offset);

/* ---- canonical Value validation + node tape (value.c) ---- */
#define TAY_V_UNKNOWN_TAG 1
#define TAY_V_TRUNCATED 2
#define TAY_V_TRAILING_BYTES 3
#define TAY_V_MAP_ORDER 4
#define TAY_V_MAP_KEY_NOT_TEXT 5
#define TAY_V_NEGATIVE_NOT_NEGATIVE 6
#define TAY_V_NON_FINITE_FLOAT 7
#define TAY_V_INVALID_UTF8 8
#define TAY_V_DEPTH_LIMIT 9
#define TAY_V_NODE_LIMIT 10
#define TAY_V_BINARY_LIMIT 11
#define TAY_V_TAPE_FULL 12
#define TAY_VALUE_DEPTH_CEILING 256
int tay_value_scan(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                   uint64_t max_binary, size_t capacity, uint8_t *tags, uint64_t *values,
                   uint32_t *offsets, double *reals, size_t *node_count,
                   size_t *error_offset);
int tay_utf8_valid(const uint8_t *data, size_t length);

/* ---- JSON <-> canonical Value transcoding (json_value.c, value_json.c) ----
 * Return 0 or -code: the TAY_V_* codes above where the reason is shared with the Value
 * codec (invalid_utf8, non_finite_float, depth_limit, and every decode reason for
 * value_to_json), or one of these. */
#define TAY_J_MALFORMED 13
#define TAY_J_DUPLICATE_KEY 14
#define TAY_J_INTEGER_RANGE 15
#define TAY_J_UNSUPPORTED_TYPE 16
#define TAY_J_OUTPUT_FULL 17
#define TAY_J_NO_MEMORY 18
#define TAY_J_INPUT_SIZE 19
int tay_json_to_value(const uint8_t *json, size_t size, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);
/* tay_json_to_value, also counting what tay.engine.values.measure counts: results[0] the
 * output length, [1] the error offset, [2] nodes (every value and object key), [3] depth
 * (the root 1, a member's key and value one below its object). */
int tay_json_to_value_measured(const uint8_t *json, size_t size, uint8_t *out,
                               size_t out_capacity, size_t *results);
int tay_value_to_json(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                      uint64_t max_binary, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);
/* strtod in the "C" locale whatever LC_NUMERIC says (used by both directions) */
double tay_strtod_c(const char *text, char **end);

/* ---- Event-v1 batch fast path (events.c) ---- */
#define TAY_EVENT_FAST 0
#define TAY_EVENT_SLOW 1
#define TAY_EVENT_ROW 24
/* row slots; TAY_EF_NIL has bit k set when slot k holds nil */
#define TAY_EF_STATUS 0
#define TAY_EF_AT 1
#define TAY_EF_EXPECTED 2
#define TAY_EF_JOB_ID 3
#define TAY_EF_NIL 4
#define TAY_EF_A 5
#define TAY_EF_B 6
#define TAY_EF_C 7
#define TAY_EF_D 8
#define TAY_EF_E 9
#define TAY_EF_F 10
#define TAY_EF_DEFINITION 11
#define TAY_EF_DEFINITION_LENGTH 12
#define TAY_EF_ARGS 13
#define TAY_EF_ARGS_LENGTH 14
#define TAY_EF_MAX_ATTEMPTS 15
#define TAY_EF_QUEUE 16
#define TAY_EF_QUEUE_LENGTH 17
#define TAY_EF_WORKER 18
#define TAY_EF_WORKER_LENGTH 19
#define TAY_EF_SCHEDULED_AT 20
#define TAY_EF_TIMEOUT_MS 21
#define TAY_EF_END 22
#define TAY_EF_ARGS_NODES 23
int tay_events_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                    const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                    uint32_t max_depth, uint64_t max_nodes, uint64_t max_binary,
                    size_t tape_capacity, uint8_t *tags, uint64_t *values, uint32_t *tape_offsets,
                    double *reals, uint64_t *rows);

/* ---- Store-v2 snapshot batch fast path (snapshots.c) ----
 * Slot 0 is TAY_EVENT_FAST or TAY_EVENT_SLOW; TAY_SF_NIL has bit k set when slot k is nil;
 * TAY_SF_BODY is the body's offset in the payload (the job id is its first 16 bytes);
 * TAY_SF_STATE indexes scheduled, available, executing, retryable, completed, cancelled,
 * discarded; slots from TAY_SF_DEFINITION on are an Event-v1 row's definition slots
 * (TAY_EF_DEFINITION.. relative to it, its own TAY_EF_NIL for scheduled_at). Offsets are
 * relative to the payload start. */
#define TAY_SNAPSHOT_ROW 40
#define TAY_SF_REVISION 1
#define TAY_SF_CYCLE 2
#define TAY_SF_EXECUTION 3
#define TAY_SF_NIL 4
#define TAY_SF_ATTEMPT 5
#define TAY_SF_ATTEMPTED_AT 6
#define TAY_SF_ORDER 7
#define TAY_SF_COMPLETED_AT 8
#define TAY_SF_DIAGNOSTIC 9
#define TAY_SF_ELIGIBLE_AT 10
#define TAY_SF_INSERTED_AT 11
#define TAY_SF_NEXT_ATTEMPT 12
#define TAY_SF_STATE 13
#define TAY_SF_TERMINAL_AT 14
#define TAY_SF_BODY 15
#define TAY_SF_DEFINITION 16
int tay_snapshots_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows);

/* ---- Store-v2 base replay in columns (base_jobs.c) ----
 * Finished jobs taken whole from a run of base records (Record v1 offsets, payload at +24;
 * types, schemas and lengths as the record scan gives them), TAY_BASE_JOB u64s each:
 * offsets absolute in buf; RESULT_LENGTH 0 when no result is attached, FAILURE_LENGTH 0
 * when no failure's details are (FAILURE_BYTES their charge, tay_failure_bytes); RECORD the
 * index of the job's snapshot. ``last_id``: the job id before the run (NULL: none). Returns
 * how many records it took (it stops before the first one it cannot take); *job_count the
 * jobs. */
#define TAY_BASE_JOB 18
#define TAY_BJ_RECORD 0
#define TAY_BJ_SNAPSHOT 1
#define TAY_BJ_SNAPSHOT_LENGTH 2
#define TAY_BJ_STATE 3
#define TAY_BJ_REVISION 4
#define TAY_BJ_TERMINAL_AT 5
#define TAY_BJ_QUEUE 6
#define TAY_BJ_QUEUE_LENGTH 7
#define TAY_BJ_WORKER 8
#define TAY_BJ_WORKER_LENGTH 9
#define TAY_BJ_DEFINITION_LENGTH 10
#define TAY_BJ_ARGS_NODES 11
#define TAY_BJ_RESULT 12
#define TAY_BJ_RESULT_LENGTH 13
#define TAY_BJ_RESULT_BYTES 14
#define TAY_BJ_FAILURE 15
#define TAY_BJ_FAILURE_LENGTH 16
#define TAY_BJ_FAILURE_BYTES 17
/* With take_live, a live job (available, scheduled or retryable; its eligible_at present
 * and at most one attachment after its snapshot, its failure's details) is taken too, as
 * TAY_BASE_LIVE u64s in `live`: BEFORE the finished jobs of the run before it, ORDER its
 * availability order when HAS_ORDER is 1, FAILURE the details' attachment (its length 0:
 * none) and FAILURE_BYTES their charge (tay_failure_bytes), the other slots as TAY_BJ's;
 * *live_count the live jobs. With open_end (the records after `count` may be the last
 * job's attachments: the range ends at the run's cap before a (31,2), or at the end of a
 * base segment the base's next segment follows) a job whose records end the range is not
 * taken. */
#define TAY_BASE_LIVE 18
#define TAY_BL_BEFORE 0
#define TAY_BL_RECORD 1
#define TAY_BL_SNAPSHOT 2
#define TAY_BL_SNAPSHOT_LENGTH 3
#define TAY_BL_STATE 4
#define TAY_BL_REVISION 5
#define TAY_BL_ORDER 6
#define TAY_BL_HAS_ORDER 7
#define TAY_BL_ELIGIBLE_AT 8
#define TAY_BL_QUEUE 9
#define TAY_BL_QUEUE_LENGTH 10
#define TAY_BL_WORKER 11
#define TAY_BL_WORKER_LENGTH 12
#define TAY_BL_DEFINITION_LENGTH 13
#define TAY_BL_ARGS_NODES 14
#define TAY_BL_FAILURE 15
#define TAY_BL_FAILURE_LENGTH 16
#define TAY_BL_FAILURE_BYTES 17
/* The engine's charge of kept failure details (tay.engine.state.failure_bytes: the error
 * texts' UTF-8 bytes plus 64) from a failure_recorded events-scan row (message A,
 * traceback C, type E; an absent one's nil bit set). */
uint64_t tay_failure_bytes(const uint64_t *row);
size_t tay_base_jobs(const uint8_t *buf, size_t size, size_t count, const uint64_t *offsets,
                     const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                     const uint8_t *last_id, uint32_t max_depth, uint64_t max_nodes,
                     uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                     uint64_t *values, uint32_t *tape_offsets, double *reals, uint64_t *jobs,
                     size_t *job_count, int take_live, uint64_t *live, size_t *live_count,
                     int open_end);
/* What an engine keeps of a run per job, gathered from tay_base_jobs() rows over the bytes
 * from segment offset `origin` on: every job id (16 bytes each into out; 0, or -1 if one
 * lies outside buf), and every key of column `slot` (TAY_BJ_QUEUE or TAY_BJ_WORKER) as an
 * index into the distinct keys in order of first appearance, firsts[d] the first job with
 * key d (returns how many distinct keys; -1 outside buf or a bad slot; -2 more than
 * max_distinct). */
int tay_base_ids(const uint8_t *buf, size_t size, uint64_t origin, const uint64_t *jobs,
                 size_t count, uint8_t *out);
long tay_base_keys(const uint8_t *buf, size_t size, uint64_t origin, const uint64_t *jobs,
                   size_t count, int slot, size_t max_distinct, uint32_t *index,
                   size_t *firsts);

/* ---- Store-v2 tail replay in columns (tail_jobs.c) ----
 * The common job lifecycle (insert, start, success finish, nil result) of tail records
 * taken while each is one, from a record boundary (Record v1 offsets, payload at +24); a
 * delayed insert is followed through its availability (each later step one revision on);
 * a cancel of a job waiting at its insert or availability makes it done too; a record of a
 * known job outside it (a second failure, a delayed job's retry, a timeout) sends that
 * job's records to `pending` and the walk goes on.
 * Per done job TAY_BASE_JOB u64s (as above; RECORD the insert's index, REVISION 4, or 5
 * when delayed; a cancelled job's STATE cancelled, REVISION the cancel's, no RESULT) and
 * TAY_TAIL_LINK u64s (AVAILABILITY / _LENGTH a delayed job's availability payload, 0 / 0
 * otherwise; a cancelled job's STARTED 0 / 0, FINISHED its cancel); per record taken of a job not done, (index,
 * state changes before it, ready pushes before it, done delayed jobs' inserts before it:
 * timer pushes replay makes that the columns skip) in `pending`; totals: state changes,
 * ready pushes and those timer pushes of all records taken;
 * *next_order: the allocator, advanced. Per job whose only record taken is its insert
 * (expected revision 0: replay leaves it available at revision 1 when eligible at once,
 * else scheduled), or
 * whose only records taken are its insert and its first start (executing at revision 2),
 * TAY_TAIL_LIVE u64s in `live`, in insert order (STATE, START, START_AT, START_STAMP: the
 * start's index, time and state changes up to it, for an executing job). So does each job
 * whose four records taken are its insert, its first start, a worker failure's finish left
 * retryable or discarded and that failure's (22,2) details (STATE retryable or discarded,
 * ELIGIBLE_AT the retry's due time or 0, FINISH / FINISH_AT / FINISH_STAMP the finish,
 * DETAILS the details' index, FAILURE_BYTES the details' texts in UTF-8 bytes plus 64;
 * a delayed job's failure, its availability between its insert and start, is one such job
 * too, each record one revision later, AVAILABILITY_RECORD its availability's index; its insert's
 * timer push counted with the skipped ones), and each retried success: that failure, the retry's availability, start, nil result and
 * success finish (STATE completed, RETRY / RESTART / RESTART_AT / RESULT / COMPLETE /
 * COMPLETE_AT / COMPLETE_STAMP the retry's records, times and the success's stamp; its
 * failure's timer pushes counted with the skipped ones). Returns how many records it
 * took, -1 out of memory. Each output holds up to `count` entries (pending: 4 * count
 * u64s; totals: 3). */
#define TAY_TAIL_LINK 8
#define TAY_TL_STAMP 0
#define TAY_TL_STARTED 1
#define TAY_TL_STARTED_LENGTH 2
#define TAY_TL_STARTED_AT 3
#define TAY_TL_FINISHED 4
#define TAY_TL_FINISHED_LENGTH 5
#define TAY_TL_AVAILABILITY 6
#define TAY_TL_AVAILABILITY_LENGTH 7
#define TAY_TAIL_LIVE 27
#define TAY_TV_RECORD 0
#define TAY_TV_ELIGIBLE_AT 1
#define TAY_TV_ORDER 2
#define TAY_TV_QUEUE 3
#define TAY_TV_QUEUE_LENGTH 4
#define TAY_TV_WORKER 5
#define TAY_TV_WORKER_LENGTH 6
#define TAY_TV_DEFINITION_LENGTH 7
#define TAY_TV_ARGS_NODES 8
#define TAY_TV_STATE 9
#define TAY_TV_START 10
#define TAY_TV_START_AT 11
#define TAY_TV_START_STAMP 12
#define TAY_TV_FINISH 13
#define TAY_TV_FINISH_AT 14
#define TAY_TV_FINISH_STAMP 15
#define TAY_TV_DETAILS 16
#define TAY_TV_FAILURE_BYTES 17
#define TAY_TV_RETRY 18
#define TAY_TV_RESTART 19
#define TAY_TV_RESTART_AT 20
#define TAY_TV_RESULT 21
#define TAY_TV_COMPLETE 22
#define TAY_TV_COMPLETE_AT 23
#define TAY_TV_COMPLETE_STAMP 24
#define TAY_TV_RESULT_BYTES 25
#define TAY_TV_AVAILABILITY_RECORD 26
#define TAY_STATE_SCHEDULED 0
#define TAY_STATE_AVAILABLE 1
#define TAY_STATE_EXECUTING 2
#define TAY_STATE_RETRYABLE 3
#define TAY_STATE_COMPLETED 4
#define TAY_STATE_CANCELLED 5
#define TAY_STATE_DISCARDED 6
long tay_tail_jobs(const uint8_t *buf, size_t size, size_t count, const uint64_t *offsets,
                   const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                   uint64_t *next_order, uint32_t max_depth, uint64_t max_nodes,
                   uint64_t max_binary, size_t tape_capacity, uint8_t *tags, uint64_t *values,
                   uint32_t *tape_offsets, double *reals, uint64_t *jobs, uint64_t *links,
                   size_t *job_count, uint64_t *pending, size_t *pending_count,
                   uint64_t *totals, uint64_t *live, size_t *live_count);

/* ---- Store-v2 mutation batch fast path (mutations.c) ----
 * The row is the Event-v1 row (TAY_EF_*) of the event the mutation stands for, offsets
 * relative to the mutation payload (job id at 0), then the availability order (nil: bit
 * TAY_MF_ORDER of TAY_EF_NIL) and the kind. */
#define TAY_MUTATION_ROW 26
#define TAY_MF_ORDER 24
#define TAY_MF_KIND 25
int tay_mutations_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows);

/* ---- live job rows (live_rows.c) ----
 * An open-addressing map from a 16-byte job id to a row of TAY_LIVE_ROW u64 durable fields
 * (STATE indexes scheduled, available, executing, retryable, completed, cancelled,
 * discarded; TAY_LR_NIL has bit k set when slot k is None), rows numbered in insert order.
 * tay_live_apply() applies `count` tay_mutations_scan rows (id at buf + offsets[k]) in
 * order as transitions.apply and EpochReducer.mutation would (the allocator's order
 * included) and returns how many it applied (-1 out of memory): it stops before the first
 * one it cannot apply (a slow row, a failure finish, a retry, or one the reducer refuses),
 * changing nothing for it; applied[k] (NULL: not written) is row k's job's row number.
 * tay_live_find: the row number of `id`, -1 absent. tay_live_get: -1 outside the rows. */
#define TAY_LIVE_ROW 14
#define TAY_LR_STATE 0
#define TAY_LR_REVISION 1
#define TAY_LR_ATTEMPT 2
#define TAY_LR_NEXT_ATTEMPT 3
#define TAY_LR_CYCLE 4
#define TAY_LR_EXECUTION 5
#define TAY_LR_ELIGIBLE_AT 6
#define TAY_LR_READY_ORDER 7
#define TAY_LR_INSERTED_AT 8
#define TAY_LR_ATTEMPTED_AT 9
#define TAY_LR_COMPLETED_AT 10
#define TAY_LR_TERMINAL_AT 11
#define TAY_LR_MAX_ATTEMPTS 12
#define TAY_LR_NIL 13
typedef struct tay_live_table tay_live_table;
int tay_live_new(size_t capacity, uint64_t next_order, tay_live_table **out);
void tay_live_free(tay_live_table *t);
size_t tay_live_count(const tay_live_table *t);
uint64_t tay_live_next_order(const tay_live_table *t);
long tay_live_find(const tay_live_table *t, const uint8_t *id);
int tay_live_get(const tay_live_table *t, size_t index, uint8_t *id, uint64_t *row);
long tay_live_apply(tay_live_table *t, const uint8_t *buf, size_t count,
                    const uint64_t *offsets, const uint64_t *rows, uint64_t *applied);
/* one row (the walk of tail_jobs.c applies row by row as it scans): its row number, -1 not
 * applicable, -2 out of memory */
long tay_live_apply_one(tay_live_table *t, const uint8_t *id, const uint64_t *row);
/* the allocator takes `order` when it is the next one (0), else -1, nothing changed (a
 * record the walk of tail_jobs.c leaves to the exact replay carries it) */
int tay_live_take_order(tay_live_table *t, uint64_t order);
/* row `number` left retryable at `revision` by a worker failure the walk of tail_jobs.c
 * checked (the table applies no failure): its next attempt and the retry's due time, no
 * execution nor order; -1 outside the rows */
int tay_live_retryable(tay_live_table *t, size_t number, uint64_t revision,
                       uint64_t next_attempt, uint64_t eligible_at);
/* a row for a job known only by its id (the walk of tail_jobs.c meets a record of a job
 * inserted before its range): state TAY_LIVE_HELD, which every later apply refuses, an
 * insert of that id included; its row number, -1 when the id has a row, -2 out of memory */
#define TAY_LIVE_HELD 7
long tay_live_hold(tay_live_table *t, const uint8_t *id);

/* ---- Unix-socket framing (frames.c) ---- */
#define TAY_FRAME_OK 0
#define TAY_FRAME_TOO_LARGE 1
#define TAY_FRAME_EMPTY 2
#define TAY_FRAME_FULL 3
int tay_split_frames(const uint8_t *buf, size_t size, uint32_t max_frame, size_t capacity,
                     uint64_t *starts, uint64_t *ends, size_t *count, size_t *consumed);
/* frames_check.c: a payload is clean (1) when within the protocol's value domain for sure,
 * if valid JSON; 0 leaves it to the exact (slow) check */
int tay_json_domain_clean(const uint8_t *json, size_t size, uint32_t max_depth,
                          uint64_t max_nodes, uint32_t max_key_bytes);
/* A worker's started / succeeded report written in a strict subset of JSON (the six report
 * keys once each, printable-ASCII strings without escapes, version 1, result null): its
 * mark and the (start, end) offsets of request_id, reservation_id and execution_id in
 * fields[0..5]; TAY_REPORT_NONE leaves the payload to the decoder (never a refusal). */
#define TAY_REPORT_NONE 0
#define TAY_REPORT_STARTED 2
#define TAY_REPORT_SUCCEEDED 3
#define TAY_REPORT_MAX_ID 128
int tay_json_report(const uint8_t *json, size_t size, uint64_t *fields);
/* The offset after the string whose opening quote is json[at] (at < size) when it is
 * printable ASCII without a backslash and closes before size; 0 otherwise. The strings the
 * report and enqueue readers take as their own text (exported for the twins' tests). */
size_t tay_json_plain_string_end(const uint8_t *json, size_t size, size_t at);
/* An enqueue written in a strict subset of JSON: one object of "version": 1, "type":
 * "enqueue", "request_id" (a printable-ASCII string without escapes, 1..128 bytes), "task"
 * (the same, 1..255 bytes), "args" (an object) and optionally "options" (an object), each
 * once, and any other key but "v" with a plain string value. TAY_ENQUEUE with the (start,
 * end) offsets of request_id, task, args and options in fields[0..7] (options 0, 0 when
 * absent). The args span is only where that object would be: its text is the decoder's to
 * read (the caller decodes it and takes the exact path if it is not valid JSON); so is the
 * options span unless the options are plain: absent, or an object of queue, retries,
 * backoff and durability, each once, each null or a value the engine takes as it is (queue
 * a plain string of 1..255 bytes, retries an integer literal 0..65534, backoff
 * "exponential", durability "persistent" or "volatile"), valid JSON by construction. Then
 * fields[8] is retries + 1 (0: the options are not plain; 1 also for null or absent),
 * fields[9] the durability (0 null or absent, 1 persistent, 2 volatile) and fields[10..11]
 * the queue's offsets (equal: null or absent). TAY_REPORT_NONE leaves the payload to the decoder (never a refusal). */
#define TAY_ENQUEUE 4
#define TAY_ENQUEUE_MAX_TASK 255
#define TAY_ENQUEUE_MAX_RETRIES 65534
int tay_json_enqueue(const uint8_t *json, size_t size, uint64_t *fields);
/* An `enqueued` reply written as tay serve writes it, all in a strict subset of JSON (see
 * frames_check.c): TAY_ENQUEUED with the (start, end) offsets of request_id, job_id and the
 * job's durability string in fields[0..5] (durability 0, 0 when the job has no member of
 * that name with a plain string value); TAY_ENQUEUED_NONE leaves the payload to the
 * decoder (never a refusal). */
#define TAY_ENQUEUED_NONE 0
#define TAY_ENQUEUED 1
int tay_json_enqueued(const uint8_t *json, size_t size, uint64_t *fields);
/* 1 when json is an object written exactly as orjson.dumps(orjson.loads(json),
 * option=OPT_SORT_KEYS) writes it, for sure: no whitespace, each object's keys in strictly
 * increasing byte order, strings of valid UTF-8 with no escape and no control byte,
 * integers only (no -0, no leading zero, within -2^63..2^64-1), true, false, null, at most
 * TAY_CANONICAL_DEPTH containers deep. 0 is "not known", never a refusal (the caller
 * decodes and writes the text the usual way). */
#define TAY_CANONICAL_DEPTH 128
int tay_json_canonical(const uint8_t *json, size_t size);
/* Added to an enqueue's fields[9] by tay_split_frames_marked when its options are plain and
 * its args text is canonical (tay_json_canonical): the caller may take that text as the
 * args' sorted JSON without decoding it. */
#define TAY_ENQUEUE_CANONICAL 3
/* The offsets and values per frame in fields: a report's six, an enqueue's twelve. */
#define TAY_FRAME_FIELDS 12
/* tay_split_frames, each payload marked 0 (unclean), 1 (clean) or, for a clean report or
 * enqueue, its mark with its offsets (relative to buf) in fields[TAY_FRAME_FIELDS * k ..] */
int tay_split_frames_marked(const uint8_t *buf, size_t size, uint32_t max_frame,
                            size_t capacity, uint32_t max_depth, uint64_t max_nodes,
                            uint32_t max_key_bytes, uint64_t *starts, uint64_t *ends,
                            uint8_t *marks, uint64_t *fields, size_t *count, size_t *consumed);
/* A decoder's prepared scan: its limits, set once, and the result columns of one call,
 * reused (so a read passes one pointer, not thirteen arguments).
 * tay_frame_scan_split(scan, buf, size) is tay_split_frames_marked with them: up to
 * TAY_FRAME_SCAN_ROWS frames per call, count and consumed in the struct. It also fills
 * head: the call's code, count and consumed, then the first frame's start, end, mark and
 * its TAY_FRAME_FIELDS offsets (zeros when there is none), so the common read (one whole
 * frame) is taken in by the caller with one unpack instead of a field access per value. */
#define TAY_FRAME_SCAN_ROWS 64
#define TAY_FRAME_SCAN_HEAD 18
typedef struct {
    uint64_t head[TAY_FRAME_SCAN_HEAD];
    uint32_t max_frame;
    uint32_t max_depth;
    uint64_t max_nodes;
    uint32_t max_key_bytes;
    size_t count;
    size_t consumed;
    uint64_t starts[TAY_FRAME_SCAN_ROWS];
    uint64_t ends[TAY_FRAME_SCAN_ROWS];
    uint8_t marks[TAY_FRAME_SCAN_ROWS];
    uint64_t fields[TAY_FRAME_FIELDS * TAY_FRAME_SCAN_ROWS];
} tay_frame_scan;
int tay_frame_scan_split(tay_frame_scan *scan, const uint8_t *buf, size_t size);

/* ---- JSON object members: colons outside strings (json_keys.c) ---- */
size_t tay_json_member_count(const uint8_t *json, size_t size);

/* ---- file operations (fileops.c) ---- */
int tay_write_all_at(int fd, const uint8_t *data, size_t length, int64_t offset);
int tay_fdatasync(int fd);
int tay_fsync(int fd);
int tay_fsync_dir(const char *path);
int tay_flock_exclusive(int fd);
int tay_rename_noreplace(int src_dir_fd, const char *src_name, int dst_dir_fd,
                         const char *dst_name);
int tay_filesystem_magic(const char *path, uint64_t *magic);

/* ---- the journal writer thread (writer.c, writer_io.c) ----
 * A native thread that owns the active segment of an open store: it takes queued
 * submissions (Record v1 frames encoded at submission), writes each batch with one pwrite
 * per segment, verifies size and read-back, fdatasyncs (sync mode), re-checks the pinned
 * paths, rotates (seal + successor), and only then advances `durable` and signals an
 * eventfd. It never calls into the interpreter. */
#define TAY_WRITER_MAX_DIRS 8
typedef struct tay_writer tay_writer;

typedef struct {
    int dir_fds[TAY_WRITER_MAX_DIRS];          /* pinned directories, root first */
    const char *dir_names[TAY_WRITER_MAX_DIRS]; /* [0]: the root's absolute path; then each
                                                   name inside the one before; the last
                                                   directory holds the segments */
    int dir_count;
    int lock_fd;
    const char *lock_name;                     /* inside the root */
    int segment_fd;                            /* the active segment, open read-write */
    uint8_t store_id[16];
    uint64_t segment_id, first_sequence, size, record_count, next_sequence, history_bytes;
    uint32_t segment_crc;
    int sync_mode;                             /* 1: fdatasync before `durable` moves */
    uint64_t rotation_target;
    uint32_t max_events;
    int64_t interval_ns;                       /* 0: no cap on how long a held batch waits */
    int linger;                                /* 1: flush is ignored (wait to fill) */
    int64_t gather_ns;                         /* group commit under load: the longest a
                                                  flushed batch waits for its siblings (see
                                                  tay_writer_gather_wait; 0: never waits) */
    int ledger_fd;                             /* SEGMENT-LEDGER in the root, open read-write;
                                                  each successor's entry is appended to it */
    uint8_t epoch_id[16];                      /* whose segments: all zero for v1 segments/ */
    uint64_t ledger_size, ledger_highest;      /* its append offset and newest segment id */
    int rt_priority;                           /* 0: the creator's scheduling; 1..99: the
                                                  thread runs SCHED_FIFO at this priority
                                                  (start fails with -EPERM without
                                                  CAP_SYS_NICE or RLIMIT_RTPRIO) */
    uint64_t slice_ns;                         /* 0: the creator's slice; else the thread
                                                  asks the fair scheduler for this slice
                                                  (sched_setattr sched_runtime, no privilege;
                                                  Linux 6.12+, older kernels ignore it),
                                                  keeping its policy and nice; not with
                                                  rt_priority */
} tay_writer_config;

typedef struct {                               /* where the writer stands (after close) */
    int segment_fd;
    uint64_t segment_id, first_sequence, size, committed_size, record_count, next_sequence,
        history_bytes;
    uint32_t segment_crc;
    uint64_t ledger_size, ledger_highest;
} tay_writer_tail;

typedef struct {
    uint64_t submissions, events, batches, fsyncs, largest_batch, writes, syncs;
    uint64_t gathered;      /* batches that waited for siblings (tay_writer_gather_wait) */
} tay_writer_stats;

typedef struct {            /* where the writer thread's time goes, summed in ns over every
                               batch (CLOCK_MONOTONIC; docs/benchmarks.md, eighth session) */
    uint64_t batches;
    uint64_t idle_ns;       /* waiting with nothing queued */
    uint64_t held_ns;       /* waiting while a held submission is not yet flushed */
    uint64_t queued_ns;     /* a batch's first submission: from its arrival to its take */
    uint64_t take_ns;       /* copying the batch out of the queue */
    uint64_t write_ns;      /* the pwrite(s), rotation included */
    uint64_t verify_ns;     /* fstat size check, read-back, compare, CRC */
    uint64_t sync_ns;       /* fdatasync */
    uint64_t check_ns;      /* the path and lock re-checks */
    uint64_t publish_ns;    /* counters, receipt, durable, wake-ups, the eventfd write
                               (the newest batch's is added after its signal is out) */
} tay_writer_phases;

typedef struct {                               /* one durable batch */
    uint64_t first_ticket, last_ticket, segment_id, offset, first_sequence, last_sequence, count;
} tay_writer_receipt;

#define TAY_WK_IO 1
#define TAY_WK_CHANGED_VIEW 2
#define TAY_WK_RESOURCE_LIMIT 3
#define TAY_WR_APPEND_FAILED 1
#define TAY_WR_FDATASYNC_FAILED 2
#define TAY_WR_CHECK_PATHS_FAILED 3
#define TAY_WR_PATH_CHANGED 4
#define TAY_WR_LOCK_LINKS 5
#define TAY_WR_STORE_EXHAUSTED 6
#define TAY_WR_NO_MEMORY 7
typedef struct {                               /* why the writer stopped (set once) */
    int kind, reason, error_number;
    int cut_back;                              /* 0 nothing to cut, 1 cut, 2 cut failed */
    int cut_back_errno;
    uint64_t cut_back_to, cut_back_bytes, segment_id, links;
    char path[4096];
    char name[256];
    char detail[128];
} tay_writer_failure;

#define TAY_WRITER_ARGUMENT (-2001)            /* a bad config or submission */
#define TAY_WRITER_SEQUENCE (-2002)            /* sequences do not continue the journal */
#define TAY_WRITER_STOPPED (-2003)
#define TAY_WRITER_CLOSED (-2004)
#define TAY_WRITER_TIMEOUT (-2005)
#define TAY_WRITER_NO_MEMORY (-2006)
int tay_writer_start(const tay_writer_config *config, tay_writer **out);
/* meta: 4 native-endian uint64 per record (type, schema, sequence, payload length), as
 * bytes of any alignment (Python packs them with struct "=4Q") */
int64_t tay_writer_submit(tay_writer *w, size_t count, const char *meta,
                          const char *payloads, size_t payload_bytes, int hold,
                          size_t *error_index);
void tay_writer_flush(tay_writer *w);
int64_t tay_writer_gather_wait(uint64_t queued, uint64_t siblings, int64_t since_done_ns,
                               int64_t sync_ns, int64_t cap_ns);
uint64_t tay_writer_durable(tay_writer *w);
int tay_writer_stopped(tay_writer *w);
int tay_writer_event_fd(tay_writer *w);
int64_t tay_writer_completed(tay_writer *w);
int tay_writer_wait(tay_writer *w, uint64_t ticket, int64_t timeout_ns);
int tay_writer_receipts(tay_writer *w, uint64_t after_batch, tay_writer_receipt *out,
                        size_t capacity, uint64_t *next_batch);
#define TAY_WRITER_BUCKETS 32
typedef struct {            /* cumulative per-batch histograms (counts[i]: value <= bound i,
                               counts[n]: above every bound), as Prometheus wants them */
    uint64_t batches;
    uint64_t events_counts[TAY_WRITER_BUCKETS + 1], write_counts[TAY_WRITER_BUCKETS + 1],
        sync_counts[TAY_WRITER_BUCKETS + 1];
    uint64_t events_total, write_ns_total, sync_ns_total;
} tay_writer_observations;
int tay_writer_observe(tay_writer *w, const uint64_t *latency_bounds_ns, size_t latency_count,
                       const uint64_t *batch_bounds, size_t batch_count);
void tay_writer_observations_of(tay_writer *w, tay_writer_observations *out);
void tay_writer_failure_of(tay_writer *w, tay_writer_failure *out);
void tay_writer_stats_of(tay_writer *w, tay_writer_stats *out);
void tay_writer_phases_of(tay_writer *w, tay_writer_phases *out);
int tay_writer_scheduling(tay_writer *w, int *policy, int *priority);
int tay_writer_fair_slice(tay_writer *w, uint64_t *slice_ns, int *nice, int *set_errno);
int tay_writer_close(tay_writer *w, tay_writer_tail *tail);
void tay_writer_free(tay_writer *w);
/* test seams: fail the Nth write / sync (counted like FaultyIO: every later one fails too),
 * optionally writing a prefix first; hold data fdatasyncs until the gate opens. */
void tay_writer_test_faults(tay_writer *w, uint64_t fail_write_at, uint64_t fail_sync_at,
                            int fail_errno, size_t short_write_bytes);
void tay_writer_test_gate(tay_writer *w, int closed);
void tay_writer_test_sync_avg(tay_writer *w, int64_t sync_avg_ns);
int tay_writer_test_gate_entered(tay_writer *w);

#endif
