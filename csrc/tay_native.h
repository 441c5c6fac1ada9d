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

/* ---- Unix-socket framing (frames.c) ---- */
#define TAY_FRAME_OK 0
#define TAY_FRAME_TOO_LARGE 1
#define TAY_FRAME_EMPTY 2
#define TAY_FRAME_FULL 3
int tay_split_frames(const uint8_t *buf, size_t size, uint32_t max_frame, size_t capacity,
                     uint64_t *starts, uint64_t *ends, size_t *count, size_t *consumed);

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

#endif
