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
_SOURCES = ["crc32c.c", "records.c", "value.c", "frames.c", "fileops.c", "events.c",
            "json_value.c", "value_json.c", "json_keys.c"]

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

int tay_json_to_value(const uint8_t *json, size_t size, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);
int tay_value_to_json(const uint8_t *data, size_t size, uint32_t max_depth, uint64_t max_nodes,
                      uint64_t max_binary, uint8_t *out, size_t out_capacity,
                      size_t *out_length, size_t *error_offset);

int tay_split_frames(const uint8_t *buf, size_t size, uint32_t max_frame, size_t capacity,
                     uint64_t *starts, uint64_t *ends, size_t *count, size_t *consumed);

size_t tay_json_member_count(const uint8_t *json, size_t size);

int tay_write_all_at(int fd, const uint8_t *data, size_t length, int64_t offset);
int tay_fdatasync(int fd);
int tay_fsync(int fd);
int tay_fsync_dir(const char *path);
int tay_flock_exclusive(int fd);
int tay_rename_noreplace(int src_dir_fd, const char *src_name, int dst_dir_fd,
                         const char *dst_name);
int tay_filesystem_magic(const char *path, uint64_t *magic);

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
        extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
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
