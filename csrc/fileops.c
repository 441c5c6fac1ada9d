/* File operations for the journal and store: every function returns 0 (or a documented
 * nonnegative result) on success and -errno on failure, and retries EINTR itself. */
#define _GNU_SOURCE
#include "tay_native.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

/* Writes all `length` bytes at `offset` with pwrite, retrying EINTR and short writes (a
 * short write is legal for regular files on a full disk or a signal; the retry then either
 * completes or reports the real errno). Returns 0 or -errno (-EIO if pwrite returns 0). */
int tay_write_all_at(int fd, const uint8_t *data, size_t length, int64_t offset) {
    while (length > 0) {
        ssize_t written = pwrite(fd, data, length, (off_t)offset);
        if (written < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (written == 0) return -EIO;
        data += written;
        length -= (size_t)written;
        offset += written;
    }
    return 0;
}

/* fdatasync(fd). Returns 0 or -errno. EINTR is retried; any other failure must be treated
 * as fatal by the caller (the page cache state is unknown after a failed sync). */
int tay_fdatasync(int fd) {
    while (fdatasync(fd) != 0)
        if (errno != EINTR) return -errno;
    return 0;
}

/* fsync(fd). Returns 0 or -errno, with the same contract as tay_fdatasync. */
int tay_fsync(int fd) {
    while (fsync(fd) != 0)
        if (errno != EINTR) return -errno;
    return 0;
}

/* Opens the directory at path read-only, fsyncs it and closes it. Returns 0 or -errno. */
int tay_fsync_dir(const char *path) {
    int fd;
    do fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) return -errno;
    int rc = tay_fsync(fd);
    close(fd);
    return rc;
}

/* flock(LOCK_EX | LOCK_NB). Returns 1 when acquired, 0 when another open file description
 * holds the lock (EWOULDBLOCK), -errno otherwise. */
int tay_flock_exclusive(int fd) {
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) return 0;
        if (errno != EINTR) return -errno;
    }
    return 1;
}

/* renameat2(..., RENAME_NOREPLACE) through the raw syscall (older libcs lack the wrapper).
 * Returns 0, or -errno: -EEXIST when the target exists, -EINVAL/-ENOSYS when the
 * filesystem or kernel cannot do it. Never falls back to a replacing rename. */
int tay_rename_noreplace(int src_dir_fd, const char *src_name, int dst_dir_fd,
                         const char *dst_name) {
    while (syscall(SYS_renameat2, src_dir_fd, src_name, dst_dir_fd, dst_name,
                   RENAME_NOREPLACE) != 0)
        if (errno != EINTR) return -errno;
    return 0;
}

/* statfs(path) -> *magic = f_type (0xEF53 ext4, 0x58465342 XFS, ...). Returns 0 or -errno. */
int tay_filesystem_magic(const char *path, uint64_t *magic) {
    struct statfs info;
    while (statfs(path, &info) != 0)
        if (errno != EINTR) return -errno;
    *magic = (uint64_t)(uint32_t)info.f_type;
    return 0;
}
