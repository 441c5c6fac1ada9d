"""cffi out-of-line API-mode builder for ``tay._native._tay_native`` (named by setup.py).

The C sources live in ``csrc/``; this file only declares the functions Python may call.
Hardware CRC paths use per-function target attributes, so no global -m flags are passed.
"""

from __future__ import annotations

import os
from pathlib import Path

from cffi import FFI

_ROOT = Path(__file__).resolve().parents[2]
_CSRC = _ROOT / "csrc"
_SOURCES = ["crc32c.c", "records.c", "value.c", "frames.c", "fileops.c", "events.c", "snapshots.c", "mutations.c",
            "json_value.c", "value_json.c", "json_keys.c", "writer.c", "writer_io.c"]
_SOURCES += ["frames_check.c"]  # the protocol's per-buffer frame scan

CDEF = """
int tay_crc32c_select(int force_software);
uint32_t tay_crc32c(uint32_t crc, const uint8_t *data, size_t length);
uint32_t tay_crc32c_chars(uint32_t crc, const char *data, size_t length);

int tay_encode_records(size_t count, const int64_t *types, const int64_t *schemas,
                       const uint64_t *sequences, const uint64_t *lengths,
                       const uint8_t *payloads, uint8_t *out, size_t out_length,
                       size_t *error_index);
int tay_scan_records(const uint8_t *buf, size_t start, size_t end, uint32_t budget,
                     uint64_t first_sequence, size_t capacity, uint64_t *offsets,
                     uint8_t *types, uint8_t *schemas, uint64_t *sequences,
                     uint32_t *lengths, size_t *count, size_t *stop_offset);

int tay_value_scan(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                   uint64_t max_binary, size_t capacity, uint8_t *tags, uint64_t *values,
                   uint32_t *offsets, double *reals, size_t *node_count,
                   size_t *error_offset);
int tay_utf8_valid(const uint8_t *data, size_t length);

int tay_events_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                    const uint32_t *lengths, const uint8_t *types, const uint8_t *schemas,
                    uint32_t max_depth, uint64_t max_nodes, uint64_t max_binary,
                    size_t tape_capacity, uint8_t *tags, uint64_t *values, uint32_t *tape_offsets,
                    double *reals, uint64_t *rows);

int tay_snapshots_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows);

int tay_mutations_scan(const uint8_t *buf, size_t count, const uint64_t *offsets,
                       const uint32_t *lengths, uint32_t max_depth, uint64_t max_nodes,
                       uint64_t max_binary, size_t tape_capacity, uint8_t *tags,
                       uint64_t *values, uint32_t *tape_offsets, double *reals,
                       uint64_t *rows);

int tay_json_to_value(const uint8_t *json, size_t size, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);
int tay_value_to_json(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                      uint64_t max_binary, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);

int tay_split_frames(const uint8_t *buf, size_t size, uint32_t max_frame, size_t capacity,
                     uint64_t *starts, uint64_t *ends, size_t *count, size_t *consumed);
int tay_json_domain_clean(const uint8_t *json, size_t size, uint32_t max_depth,
                          uint64_t max_nodes, uint32_t max_key_bytes);
int tay_split_frames_checked(const uint8_t *buf, size_t size, uint32_t max_frame,
                             size_t capacity, uint32_t max_depth, uint64_t max_nodes,
                             uint32_t max_key_bytes, uint64_t *starts, uint64_t *ends,
                             uint8_t *clean, size_t *count, size_t *consumed);

size_t tay_json_member_count(const uint8_t *json, size_t size);

int tay_write_all_at(int fd, const uint8_t *data, size_t length, int64_t offset);
int tay_fdatasync(int fd);
int tay_fsync(int fd);
int tay_fsync_dir(const char *path);
int tay_flock_exclusive(int fd);
int tay_rename_noreplace(int src_dir_fd, const char *src_name, int dst_dir_fd,
                         const char *dst_name);
int tay_filesystem_magic(const char *path, uint64_t *magic);

typedef struct tay_writer tay_writer;
typedef struct {
    int dir_fds[8];
    const char *dir_names[8];
    int dir_count;
    int lock_fd;
    const char *lock_name;
    int segment_fd;
    uint8_t store_id[16];
    uint64_t segment_id, first_sequence, size, record_count, next_sequence, history_bytes;
    uint32_t segment_crc;
    int sync_mode;
    uint64_t rotation_target;
    uint32_t max_events;
    int64_t interval_ns;
    int linger;
    int ledger_fd;
    uint8_t epoch_id[16];
    uint64_t ledger_size, ledger_highest;
    int rt_priority;
} tay_writer_config;
typedef struct {
    int segment_fd;
    uint64_t segment_id, first_sequence, size, committed_size, record_count, next_sequence,
        history_bytes;
    uint32_t segment_crc;
    uint64_t ledger_size, ledger_highest;
} tay_writer_tail;
typedef struct {
    uint64_t submissions, events, batches, fsyncs, largest_batch, writes, syncs;
} tay_writer_stats;
typedef struct {
    uint64_t first_ticket, last_ticket, segment_id, offset, first_sequence, last_sequence, count;
} tay_writer_receipt;
typedef struct {
    int kind, reason, error_number;
    int cut_back;
    int cut_back_errno;
    uint64_t cut_back_to, cut_back_bytes, segment_id, links;
    char path[4096];
    char name[256];
    char detail[128];
} tay_writer_failure;
int tay_writer_start(const tay_writer_config *config, tay_writer **out);
int64_t tay_writer_submit(tay_writer *w, size_t count, const uint64_t *meta,
                          const char *payloads, size_t payload_bytes, int hold,
                          size_t *error_index);
void tay_writer_flush(tay_writer *w);
uint64_t tay_writer_durable(tay_writer *w);
int tay_writer_stopped(tay_writer *w);
int tay_writer_event_fd(tay_writer *w);
int tay_writer_wait(tay_writer *w, uint64_t ticket, int64_t timeout_ns);
int tay_writer_receipts(tay_writer *w, uint64_t after_batch, tay_writer_receipt *out,
                        size_t capacity, uint64_t *next_batch);
typedef struct {
    uint64_t batches;
    uint64_t events_counts[33], write_counts[33], sync_counts[33];
    uint64_t events_total, write_ns_total, sync_ns_total;
} tay_writer_observations;
int tay_writer_observe(tay_writer *w, const uint64_t *latency_bounds_ns, size_t latency_count,
                       const uint64_t *batch_bounds, size_t batch_count);
void tay_writer_observations_of(tay_writer *w, tay_writer_observations *out);
void tay_writer_failure_of(tay_writer *w, tay_writer_failure *out);
void tay_writer_stats_of(tay_writer *w, tay_writer_stats *out);
int tay_writer_scheduling(tay_writer *w, int *policy, int *priority);
int tay_writer_close(tay_writer *w, tay_writer_tail *tail);
void tay_writer_free(tay_writer *w);
void tay_writer_test_faults(tay_writer *w, uint64_t fail_write_at, uint64_t fail_sync_at,
                            int fail_errno, size_t short_write_bytes);
void tay_writer_test_gate(tay_writer *w, int closed);
int tay_writer_test_gate_entered(tay_writer *w);

#define TAY_WRITER_MAX_DIRS ...
#define TAY_WRITER_BUCKETS ...
#define TAY_WK_IO ...
#define TAY_WK_CHANGED_VIEW ...
#define TAY_WK_RESOURCE_LIMIT ...
#define TAY_WR_APPEND_FAILED ...
#define TAY_WR_FDATASYNC_FAILED ...
#define TAY_WR_CHECK_PATHS_FAILED ...
#define TAY_WR_PATH_CHANGED ...
#define TAY_WR_LOCK_LINKS ...
#define TAY_WR_STORE_EXHAUSTED ...
#define TAY_WR_NO_MEMORY ...
#define TAY_WRITER_ARGUMENT ...
#define TAY_WRITER_SEQUENCE ...
#define TAY_WRITER_STOPPED ...
#define TAY_WRITER_CLOSED ...
#define TAY_WRITER_TIMEOUT ...
#define TAY_WRITER_NO_MEMORY ...

#define TAY_CRC_SOFTWARE ...
#define TAY_CRC_SSE42 ...
#define TAY_CRC_ARMV8 ...
#define TAY_E_RECORD_TYPE ...
#define TAY_E_RECORD_SCHEMA ...
#define TAY_E_RECORD_SEQUENCE ...
#define TAY_E_RECORD_LENGTH ...
#define TAY_E_OUTPUT_SIZE ...
#define TAY_SCAN_END ...
#define TAY_SCAN_NOT_RECORD ...
#define TAY_SCAN_BAD_RECORD ...
#define TAY_SCAN_SEQUENCE ...
#define TAY_SCAN_FULL ...
#define TAY_V_TAPE_FULL ...
#define TAY_VALUE_DEPTH_CEILING ...
#define TAY_EVENT_FAST ...
#define TAY_SNAPSHOT_ROW ...
#define TAY_MUTATION_ROW ...
#define TAY_EVENT_SLOW ...
#define TAY_EVENT_ROW ...
#define TAY_J_MALFORMED ...
#define TAY_J_DUPLICATE_KEY ...
#define TAY_J_INTEGER_RANGE ...
#define TAY_J_UNSUPPORTED_TYPE ...
#define TAY_J_OUTPUT_FULL ...
#define TAY_J_NO_MEMORY ...
#define TAY_J_INPUT_SIZE ...
#define TAY_FRAME_OK ...
#define TAY_FRAME_TOO_LARGE ...
#define TAY_FRAME_EMPTY ...
#define TAY_FRAME_FULL ...
"""


def _build_path(path: Path, absolute: bool) -> str:
    # setuptools prefers paths relative to the project root, which is the cwd under setup.py
    # and pip; the __main__ development build compiles elsewhere and needs absolute paths.
    if not absolute and path.is_relative_to(Path.cwd()):
        return os.path.relpath(path)
    return str(path)


def make_builder(absolute: bool = False) -> FFI:
    """The FFI builder for ``tay._native._tay_native``."""
    builder = FFI()
    builder.cdef(CDEF)
    builder.set_source(
        "tay._native._tay_native",
        '#include "tay_native.h"',
        sources=[_build_path(_CSRC / name, absolute) for name in _SOURCES],
        include_dirs=[_build_path(_CSRC, absolute)],
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra", "-pthread"],
        extra_link_args=["-pthread"],  # the journal writer thread (writer.c)
    )
    return builder


ffibuilder = make_builder()

if __name__ == "__main__":
    # Development build that bypasses setuptools' project metadata: compile in a scratch
    # directory (cffi chdirs there) and copy the extension next to this file.
    import shutil

    scratch = _ROOT / ".tmp" / "native-build"
    scratch.mkdir(parents=True, exist_ok=True)
    built = make_builder(absolute=True).compile(tmpdir=str(scratch), verbose=True)
    # Remove builds of other flavours (setuptools names it *.abi3.so, cffi's compile the
    # full ABI tag): the import system would pick one by suffix order, maybe the stale one.
    for stale in Path(__file__).parent.glob("_tay_native*.so"):
        stale.unlink()
    target = Path(__file__).with_name(Path(built).name)
    shutil.copy2(built, target)
    print("installed", target)
