/* The I/O of one batch on the journal writer thread (storage.md §2.8-2.9; docs/journal.md):
 * append (one pwrite per segment touched, size check, read-back, running CRC), rotation
 * (seal R0-R2, successor R3-R7), the per-batch barrier (fdatasync, path re-checks) and the
 * cut-back after a failed write or sync. Same steps, order and fault rules as the Python
 * writer (tay/storage/journal/writer.py, rotation.py); every write and sync goes through
 * the counted helpers below, which the tests can make fail exactly like FaultyIO. */
#define _GNU_SOURCE
#include "writer_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define HEADER_SIZE 44u
#define FOOTER_SIZE 64u
#define SEAL_READ (1u << 20)

void tay_writer_gate_wait(tay_writer *w); /* writer.c: the test gate before a data sync */

static void put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

static void put_u64(uint8_t *p, uint64_t v) {
    put_u32(p, (uint32_t)(v >> 32));
    put_u32(p + 4, (uint32_t)v);
}

static char *copy_string(const char *text) {
    size_t n = strlen(text) + 1;
    char *copy = malloc(n);
    if (copy) memcpy(copy, text, n);
    return copy;
}

/* Copies the config's names. Returns 0 or -1 (no memory). */
int tay_journal_init(tay_journal *j, const tay_writer_config *c) {
    memset(j, 0, sizeof *j);
    j->dir_count = c->dir_count;
    size_t path_length = 1;
    for (int i = 0; i < c->dir_count; i++) {
        j->dir_fds[i] = c->dir_fds[i];
        j->dir_names[i] = copy_string(c->dir_names[i]);
        if (!j->dir_names[i]) return -1;
        path_length += strlen(c->dir_names[i]) + 1;
    }
    j->segments_path = malloc(path_length);
    j->lock_name = copy_string(c->lock_name);
    if (!j->segments_path || !j->lock_name) return -1;
    strcpy(j->segments_path, j->dir_names[0]);
    for (int i = 1; i < c->dir_count; i++) {
        strcat(j->segments_path, "/");
        strcat(j->segments_path, j->dir_names[i]);
    }
    j->lock_fd = c->lock_fd;
    j->fd = c->segment_fd;
    memcpy(j->store_id, c->store_id, 16);
    j->segment_id = c->segment_id;
    j->first_sequence = c->first_sequence;
    j->size = j->committed_size = c->size;
    j->record_count = c->record_count;
    j->next_sequence = c->next_sequence;
    j->history_bytes = c->history_bytes;
    j->segment_crc = c->segment_crc;
    j->sync_mode = c->sync_mode;
    j->rotation_target = c->rotation_target;
    j->pinned_fd = -1;
    j->ledger_fd = c->ledger_fd;
    memcpy(j->epoch_id, c->epoch_id, 16);
    j->ledger_size = c->ledger_size;
    j->ledger_highest = c->ledger_highest;
    j->ledger_path = malloc(strlen(j->dir_names[0]) + sizeof "/SEGMENT-LEDGER");
    if (!j->ledger_path) return -1;
    strcpy(j->ledger_path, j->dir_names[0]);
    strcat(j->ledger_path, "/SEGMENT-LEDGER");
    return 0;
}

void tay_journal_release(tay_journal *j) {
    for (int i = 0; i < j->dir_count; i++) free(j->dir_names[i]);
    free(j->segments_path);
    free(j->lock_name);
    free(j->ledger_path);
    free(j->readback);
    memset(j, 0, sizeof *j);
}

static void segment_name(char out[32], uint64_t segment_id) {
    snprintf(out, 32, "%020llu.tay", (unsigned long long)segment_id);
}

/* Records why the writer stops (the first call wins). */
void tay_journal_fail(tay_writer *w, int kind, int reason, int error_number, const char *path,
                      const char *detail) {
    tay_writer_failure *f = &w->failure;
    if (f->kind) return;
    f->kind = kind;
    f->reason = reason;
    f->error_number = error_number;
    f->segment_id = w->j.segment_id;
    snprintf(f->path, sizeof f->path, "%s", path ? path : "");
    snprintf(f->detail, sizeof f->detail, "%s", detail ? detail : "");
}

/* A failure of the append step at the active segment (or `path` when given). Returns -1. */
static int append_failed(tay_writer *w, int error_number, const char *path, const char *detail) {
    char buffer[4096 + 32];
    if (!path) {
        char name[32];
        segment_name(name, w->j.segment_id);
        snprintf(buffer, sizeof buffer, "%s/%s", w->j.segments_path, name);
        path = buffer;
    }
    tay_journal_fail(w, TAY_WK_IO, TAY_WR_APPEND_FAILED, error_number, path, detail);
    return -1;
}

/* pwrite of all n bytes, counted like FaultyIO: from the fail_write_at-th write on, write
 * short_write_bytes of it for real and fail. Returns 0 or -errno. */
static int counted_write(tay_writer *w, int fd, const uint8_t *data, size_t n, uint64_t offset) {
    uint64_t count = atomic_fetch_add(&w->writes, 1) + 1;
    if (w->fail_write_at && count >= w->fail_write_at) {
        size_t prefix = w->short_write_bytes < n ? w->short_write_bytes : n;
        if (prefix) (void)tay_write_all_at(fd, data, prefix, (int64_t)offset);
        return -w->fail_errno;
    }
    return tay_write_all_at(fd, data, n, (int64_t)offset);
}

/* fdatasync (data_only) or fsync, counted and failed like counted_write. */
static int counted_sync(tay_writer *w, int fd, int data_only) {
    uint64_t count = atomic_fetch_add(&w->syncs, 1) + 1;
    if (w->fail_sync_at && count >= w->fail_sync_at) return -w->fail_errno;
    return data_only ? tay_fdatasync(fd) : tay_fsync(fd);
}

/* pread of exactly n bytes. Returns 0, -errno, or -EIO at a premature end of file. */
static int read_exact(int fd, uint8_t *out, size_t n, uint64_t offset) {
    while (n > 0) {
        ssize_t got = pread(fd, out, n, (off_t)offset);
        if (got < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (got == 0) return -EIO;
        out += got;
        n -= (size_t)got;
        offset += (uint64_t)got;
    }
    return 0;
}

static int ensure_readback(tay_journal *j, size_t n) {
    if (j->readback_capacity >= n) return 0;
    size_t capacity = j->readback_capacity ? j->readback_capacity : 65536;
    while (capacity < n) capacity *= 2;
    uint8_t *grown = realloc(j->readback, capacity);
    if (!grown) return -ENOMEM;
    j->readback = grown;
    j->readback_capacity = capacity;
    return 0;
}

static int file_size_is(int fd, uint64_t expected, int *error_number) {
    struct stat st;
    if (fstat(fd, &st) != 0) { *error_number = errno; return 0; }
    *error_number = EIO;
    return (uint64_t)st.st_size == expected;
}

/* One pwrite of `records` whole frames at EOF, then size and read-back checks (§2.9). */
static int write_frames(tay_writer *w, const uint8_t *data, size_t n, size_t records) {
    tay_journal *j = &w->j;
    uint64_t offset = j->size;
    int64_t started = tay_now_ns();
    int rc = counted_write(w, j->fd, data, n, offset), error_number;
    int64_t written = tay_now_ns();
    j->write_ns += (uint64_t)(written - started);
    if (rc) return append_failed(w, -rc, NULL, "write failed");
    if (!file_size_is(j->fd, offset + n, &error_number))
        return append_failed(w, error_number, NULL, "size after write does not match");
    if ((rc = ensure_readback(j, n)) || (rc = read_exact(j->fd, j->readback, n, offset)))
        return append_failed(w, -rc, NULL, "read-back failed");
    if (memcmp(j->readback, data, n) != 0)
        return append_failed(w, EIO, NULL, "read-back does not match the written frames");
    j->segment_crc = tay_crc32c(j->segment_crc, data, n);
    j->verify_ns += (uint64_t)(tay_now_ns() - written);
    j->history_bytes += n;
    j->size = offset + n;
    j->record_count += records;
    j->next_sequence += records;
    return 0;
}

static void encode_header(uint8_t out[HEADER_SIZE], uint64_t id, uint64_t first,
                          const uint8_t store_id[16]) {
    memcpy(out, "TAYS", 4);
    out[4] = 1; out[5] = 0; out[6] = 0; out[7] = 0;
    put_u64(out + 8, id);
    put_u64(out + 16, first);
    memcpy(out + 24, store_id, 16);
    put_u32(out + 40, tay_crc32c(0, out, 40));
}

/* R0-R2: the file is exactly what was written; append the footer; fsync; close. */
static int seal(tay_writer *w) {
    tay_journal *j = &w->j;
    int error_number, rc;
    if (!file_size_is(j->fd, j->size, &error_number))
        return append_failed(w, error_number, NULL, "segment size changed before seal");
    if ((rc = ensure_readback(j, SEAL_READ))) return append_failed(w, -rc, NULL, "no memory");
    uint32_t crc = 0;
    for (uint64_t offset = 0; offset < j->size;) {
        size_t piece = j->size - offset < SEAL_READ ? (size_t)(j->size - offset) : SEAL_READ;
        if ((rc = read_exact(j->fd, j->readback, piece, offset)))
            return append_failed(w, -rc, NULL, "segment shorter than its recorded size");
        crc = tay_crc32c(crc, j->readback, piece);
        offset += piece;
    }
    if (crc != j->segment_crc)
        return append_failed(w, EIO, NULL, "segment bytes changed before seal");
    uint8_t footer[FOOTER_SIZE];
    memcpy(footer, "TAYF", 4);
    footer[4] = 1; footer[5] = 0; footer[6] = 0; footer[7] = 0;
    put_u64(footer + 8, j->segment_id);
    put_u64(footer + 16, j->first_sequence);
    put_u64(footer + 24, j->first_sequence + j->record_count - 1);
    put_u64(footer + 32, j->record_count);
    memcpy(footer + 40, j->store_id, 16);
    put_u32(footer + 56, j->segment_crc);
    put_u32(footer + 60, tay_crc32c(0, footer, 60));
    if ((rc = counted_write(w, j->fd, footer, FOOTER_SIZE, j->size)))  /* R1 */
        return append_failed(w, -rc, NULL, "footer write failed");
    if (!file_size_is(j->fd, j->size + FOOTER_SIZE, &error_number))
        return append_failed(w, error_number, NULL, "size after footer write does not match");
    if ((rc = counted_sync(w, j->fd, 0))) return append_failed(w, -rc, NULL, "seal fsync failed");
    j->history_bytes += FOOTER_SIZE;
    close(j->fd);
    j->fd = -1;
    return 0;
}

/* R8 (tay's own): append the new segment's 64-byte SEGMENT-LEDGER entry and fsync it, after
 * its publication and before any record goes in (tay/storage/journal/ledger.py is the
 * twin; the layout is tay/storage/formats/segment_ledger.py). */
static int record_segment(tay_writer *w) {
    tay_journal *j = &w->j;
    if (j->ledger_fd < 0 || j->segment_id <= j->ledger_highest) return 0;
    uint8_t entry[64];
    memcpy(entry, "TAYL", 4);
    entry[4] = 1; entry[5] = 0; entry[6] = 0; entry[7] = 0;
    memcpy(entry + 8, j->store_id, 16);
    memcpy(entry + 24, j->epoch_id, 16);
    put_u64(entry + 40, j->segment_id);
    put_u64(entry + 48, j->first_sequence);
    put_u32(entry + 56, 0);
    put_u32(entry + 60, tay_crc32c(0, entry, 60));
    int rc = counted_write(w, j->ledger_fd, entry, sizeof entry, j->ledger_size);
    if (!rc) rc = counted_sync(w, j->ledger_fd, 0);
    if (rc) return append_failed(w, -rc, j->ledger_path, "segment ledger append failed");
    j->ledger_size += sizeof entry;
    j->ledger_highest = j->segment_id;
    return 0;
}

/* R3-R7: fsync the sealed file, stage the successor's header O_EXCL, fsync, publish with a
 * no-replace rename, fsync the directory, re-read the published file, open it writable. */
static int successor(tay_writer *w) {
    tay_journal *j = &w->j;
    int dir = j->dir_fds[j->dir_count - 1], rc, error_number;
    char old_name[32], new_name[32], staging[96], path[4096 + 96];
    segment_name(old_name, j->segment_id);
    segment_name(new_name, j->segment_id + 1);
    int fd = openat(dir, old_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);  /* R3 */
    if (fd < 0) return append_failed(w, errno, NULL, "open of the sealed segment failed");
    rc = counted_sync(w, fd, 0);
    close(fd);
    if (rc) return append_failed(w, -rc, NULL, "fsync of the sealed segment failed");
    uint8_t nonce[16], header[HEADER_SIZE];
    if (getrandom(nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        return append_failed(w, errno ? errno : EIO, NULL, "getrandom failed");
    int used = snprintf(staging, sizeof staging, ".tay-new-%020llu-",
                        (unsigned long long)(j->segment_id + 1));
    for (int i = 0; i < 16; i++) used += snprintf(staging + used, 3, "%02x", nonce[i]);
    snprintf(staging + used, sizeof staging - (size_t)used, ".tmp");
    snprintf(path, sizeof path, "%s/%s", j->segments_path, staging);
    encode_header(header, j->segment_id + 1, j->next_sequence, j->store_id);
    fd = openat(dir, staging, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);  /* R4 */
    if (fd < 0) return append_failed(w, errno, path, "staging create failed");
    rc = counted_write(w, fd, header, HEADER_SIZE, 0);
    if (!rc && !file_size_is(fd, HEADER_SIZE, &error_number)) rc = -error_number;
    if (!rc) rc = counted_sync(w, fd, 0);
    close(fd);
    if (rc) return append_failed(w, -rc, path, "staging write failed");
    if ((rc = tay_rename_noreplace(dir, staging, dir, new_name)))  /* R5 */
        return append_failed(w, -rc, path, "no-replace rename failed");
    if ((rc = counted_sync(w, dir, 0)))
        return append_failed(w, -rc, j->segments_path, "directory fsync failed");
    snprintf(path, sizeof path, "%s/%s", j->segments_path, new_name);
    fd = openat(dir, new_name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);  /* R6-R7 */
    if (fd < 0) return append_failed(w, errno, path, "open of the successor failed");
    uint8_t seen[HEADER_SIZE];
    if (!file_size_is(fd, HEADER_SIZE, &error_number) || read_exact(fd, seen, HEADER_SIZE, 0) ||
        memcmp(seen, header, HEADER_SIZE) != 0) {
        close(fd);
        return append_failed(w, EIO, path, "published successor is not the expected empty segment");
    }
    j->fd = fd;
    j->history_bytes += HEADER_SIZE;
    j->segment_id += 1;
    j->first_sequence = j->next_sequence;
    j->size = j->committed_size = HEADER_SIZE;
    j->record_count = 0;
    j->segment_crc = tay_crc32c(0, header, HEADER_SIZE);
    return record_segment(w);
}

static int rotate(tay_writer *w) {
    tay_journal *j = &w->j;
    if (j->segment_id == UINT64_MAX || j->next_sequence == 0) {  /* 0: past 2^64-1 */
        tay_journal_fail(w, TAY_WK_RESOURCE_LIMIT, TAY_WR_STORE_EXHAUSTED, 0, j->segments_path,
                         "store exhausted");
        return -1;
    }
    return seal(w) ? -1 : successor(w);
}

/* §2.8: seal before a frame that leaves no room for the footer within the target; an
 * empty active segment never rotates. */
static int rotation_needed(const tay_journal *j, uint64_t active, uint64_t frame) {
    return active != HEADER_SIZE && active + frame + FOOTER_SIZE > j->rotation_target;
}

/* Writes the batch's frames (frames[i] = size of frame i), rotating before a frame that
 * would cross the target: one pwrite per segment touched; frames never span files. Fills
 * where the batch starts. Not durable until tay_journal_sync. */
int tay_journal_append(tay_writer *w, const uint8_t *bytes, const uint32_t *frames,
                       size_t count, tay_writer_receipt *receipt) {
    tay_journal *j = &w->j;
    size_t start = 0, chunk = 0, chunk_records = 0;
    for (size_t i = 0; i < count; i++) {
        if (rotation_needed(j, j->size + chunk, frames[i])) {
            if (chunk_records && write_frames(w, bytes + start, chunk, chunk_records)) return -1;
            start += chunk;
            chunk = chunk_records = 0;
            if (rotate(w)) return -1;
        }
        if (i == 0) {
            receipt->segment_id = j->segment_id;
            receipt->offset = j->size;
        }
        chunk += frames[i];
        chunk_records++;
    }
    return write_frames(w, bytes + start, chunk, chunk_records);
}

/* The held inode of fd against the name's inode; 0 same, 1 different/missing, -errno. */
static int identity_check(int fd_parent, const char *name, uint64_t ino, uint64_t dev,
                          struct stat *named) {
    int rc = fd_parent < 0 ? lstat(name, named)
                           : fstatat(fd_parent, name, named, AT_SYMLINK_NOFOLLOW);
    if (rc != 0) return errno == ENOENT ? 1 : -errno;
    return ((uint64_t)named->st_ino != ino || (uint64_t)named->st_dev != dev) ? 1 : 0;
}

static int pin(tay_writer *w, int slot, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tay_journal_fail(w, TAY_WK_IO, TAY_WR_CHECK_PATHS_FAILED, errno, w->j.segments_path,
                         "fstat of a held descriptor failed");
        return -1;
    }
    w->j.pin_ino[slot] = (uint64_t)st.st_ino;
    w->j.pin_dev[slot] = (uint64_t)st.st_dev;
    return 0;
}

/* §2.9 append step 4: every pinned directory, the active segment and the lock still name
 * the inodes held open, and the lock has one link. */
static int check_paths(tay_writer *w) {
    tay_journal *j = &w->j;
    int dirs = j->dir_count, lock_slot = dirs, segment_slot = dirs + 1;
    if (j->pinned_fd != j->fd || j->pinned_segment != j->segment_id) {
        segment_name(j->pinned_name, j->segment_id);  /* not per sync: ~1k instructions */
        for (int i = 0; i < dirs; i++)
            if (pin(w, i, j->dir_fds[i])) return -1;
        if (pin(w, lock_slot, j->lock_fd) || pin(w, segment_slot, j->fd)) return -1;
        j->pinned_fd = j->fd;
        j->pinned_segment = j->segment_id;
    }
    const char *name = j->pinned_name;
    char path[4096 + 64];
    struct stat named;
    for (int slot = 0; slot < dirs + 2; slot++) {
        int parent = slot == 0 ? -1 : slot < dirs ? j->dir_fds[slot - 1]
                   : slot == lock_slot ? j->dir_fds[0] : j->dir_fds[dirs - 1];
        const char *entry = slot < dirs ? j->dir_names[slot] : slot == lock_slot ? j->lock_name : name;
        int rc = identity_check(parent, entry, j->pin_ino[slot], j->pin_dev[slot], &named);
        if (rc == 0 && (slot != lock_slot || named.st_nlink == 1)) continue;
        /* the path is only formatted for the failure report */
        if (slot == 0) snprintf(path, sizeof path, "%s", entry);
        else if (slot == segment_slot) snprintf(path, sizeof path, "%s/%s", j->segments_path, entry);
        else snprintf(path, sizeof path, "%s/%s", j->dir_names[0], entry);
        if (rc < 0) {
            tay_journal_fail(w, TAY_WK_IO, TAY_WR_CHECK_PATHS_FAILED, -rc, path, "lookup failed");
            return -1;
        }
        if (rc > 0 || (slot == lock_slot && named.st_nlink != 1)) {
            tay_journal_fail(w, TAY_WK_CHANGED_VIEW, TAY_WR_PATH_CHANGED, 0, path,
                             rc > 0 ? "path changed" : "lock has more than one link");
            snprintf(w->failure.name, sizeof w->failure.name, "%s", entry);
            if (rc == 0) w->failure.links = (uint64_t)named.st_nlink;
            return -1;
        }
    }
    return 0;
}

/* The barrier before anything is acknowledged: fdatasync (sync mode), then the path
 * checks; the cut-back point moves to the synced size. */
int tay_journal_sync(tay_writer *w) {
    tay_journal *j = &w->j;
    int64_t started = tay_now_ns();
    if (j->sync_mode) {
        tay_writer_gate_wait(w);
        started = tay_now_ns();
        int rc = counted_sync(w, j->fd, 1);
        if (rc) {
            char name[32], path[4096 + 64];
            segment_name(name, j->segment_id);
            snprintf(path, sizeof path, "%s/%s", j->segments_path, name);
            tay_journal_fail(w, TAY_WK_IO, TAY_WR_FDATASYNC_FAILED, -rc, path, "fdatasync failed");
            return -1;
        }
    }
    int64_t synced = tay_now_ns();
    j->sync_ns += (uint64_t)(synced - started);
    if (check_paths(w)) return -1;
    j->check_ns += (uint64_t)(tay_now_ns() - synced);
    j->committed_size = j->size;
    return 0;
}

/* After a failed write or sync: truncate the active segment to its last barrier and fsync
 * it, so no torn, never acknowledged frame is left behind; the outcome goes into the
 * failure report. */
void tay_journal_cut_back(tay_writer *w) {
    tay_journal *j = &w->j;
    tay_writer_failure *f = &w->failure;
    if (j->fd < 0) return;
    struct stat st;
    if (fstat(j->fd, &st) != 0) {
        f->cut_back = 2;
        f->cut_back_errno = errno;
        return;
    }
    if ((uint64_t)st.st_size <= j->committed_size) return;
    int rc = 0;
    while (ftruncate(j->fd, (off_t)j->committed_size) != 0) {
        if (errno != EINTR) { rc = -errno; break; }
    }
    if (!rc) rc = counted_sync(w, j->fd, 0);
    if (rc) {
        f->cut_back = 2;
        f->cut_back_errno = -rc;
        return;
    }
    f->cut_back = 1;
    f->cut_back_to = j->committed_size;
    f->cut_back_bytes = (uint64_t)st.st_size - j->committed_size;
}
