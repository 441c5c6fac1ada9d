/* Private state of the journal writer (writer.c: queue and thread; writer_io.c: the I/O of
 * one batch). Not part of the cffi interface. */
#ifndef TAY_WRITER_INTERNAL_H
#define TAY_WRITER_INTERNAL_H

#include "tay_native.h"

#include <pthread.h>
#include <stdatomic.h>

#define TAY_WRITER_RECEIPT_RING 4096

typedef struct {
    uint64_t ticket;
    uint32_t records;   /* frames of this submission */
    size_t bytes;       /* their encoded size */
    int64_t arrival_ns; /* CLOCK_MONOTONIC at submission */
} tay_submission;

/* The open segment and everything the writer thread alone touches while it runs. */
typedef struct {
    int dir_fds[TAY_WRITER_MAX_DIRS];
    char *dir_names[TAY_WRITER_MAX_DIRS];
    int dir_count;
    char *segments_path;            /* the directories joined: for error reports */
    int lock_fd;
    char *lock_name;
    int fd;                         /* the active segment, -1 once stopped or sealed */
    uint8_t store_id[16];
    uint64_t segment_id, first_sequence, size, committed_size, record_count, next_sequence,
        history_bytes;
    uint32_t segment_crc;
    int sync_mode;
    uint64_t rotation_target;
    /* (st_ino, st_dev) of the held descriptors: dirs, then the lock, then the segment;
     * fstat'ed again whenever the segment descriptor changes */
    uint64_t pin_ino[TAY_WRITER_MAX_DIRS + 2], pin_dev[TAY_WRITER_MAX_DIRS + 2];
    int pinned_fd;                  /* the segment fd the pins belong to (-1: none) and */
    uint64_t pinned_segment;        /* its segment (a new segment may reuse the number) */
    char pinned_name[32];           /* that segment's file name, formatted once per pin */
    int ledger_fd;                  /* SEGMENT-LEDGER (docs/storage-format.md) */
    char *ledger_path;              /* for error reports */
    uint8_t epoch_id[16];
    uint64_t ledger_size, ledger_highest;
    uint8_t *readback;              /* scratch for read-back verification */
    size_t readback_capacity;
    uint64_t write_ns, verify_ns, sync_ns, check_ns;  /* this batch's time in each step */
} tay_journal;

struct tay_writer {
    pthread_mutex_t mu;
    pthread_cond_t wake;            /* the writer thread waits for work here */
    pthread_cond_t done;            /* tay_writer_wait callers and the test gate wait here */
    pthread_t thread;
    /* the queue (under mu); items before the heads are taken, compacted on growth */
    uint8_t *q_bytes;
    size_t q_bytes_head, q_bytes_len, q_bytes_cap;
    uint32_t *q_frames;
    size_t q_frames_head, q_frames_len, q_frames_cap;
    tay_submission *q_subs;
    size_t q_subs_head, q_subs_len, q_subs_cap;
    uint64_t tickets, flushed, queued_events, submit_next_sequence;
    int closing, exited, waiting;   /* waiting: 0 busy, 1 idle, 2 holding, 3 gathering */
    int started;                    /* the thread has set tid and its slice (under mu) */
    int tid;                        /* the writer thread's id, for sched_getattr */
    int slice_errno;                /* why asking for slice_ns failed (0: it did not) */
    uint64_t slice_ns;              /* asked for at start (0: none) */
    uint32_t max_events;
    int64_t interval_ns;
    int linger;
    /* gathering (tay_writer_gather_wait; under mu): the previous batch's submissions, when
     * it was published, an average of recent fdatasync times, the target (siblings) of the
     * batch being gathered, and the highest ticket a tay_writer_wait caller needs now */
    int64_t gather_ns;
    uint64_t last_subs;
    int64_t last_done_ns, sync_avg_ns;
    uint64_t gather_target, urgent;
    /* results */
    _Atomic uint64_t durable;
    _Atomic int stopped;
    tay_writer_failure failure;     /* written before `stopped` is set, then never */
    tay_writer_stats stats;         /* under mu */
    tay_writer_phases phases;       /* under mu */
    tay_writer_observations observed;  /* under mu, once tay_writer_observe set bounds */
    uint64_t latency_bounds[TAY_WRITER_BUCKETS], batch_bounds[TAY_WRITER_BUCKETS];
    size_t latency_count, batch_count;
    tay_writer_receipt receipts[TAY_WRITER_RECEIPT_RING];
    uint64_t batches_done;          /* under mu */
    int event_fd;
    /* 1 from a write to event_fd until the loop's next tay_writer_completed re-arms it (after
     * its read): a signal meanwhile skips its write (signal_loop) */
    _Atomic int signalled;
    /* the writer thread's own batch buffers */
    uint8_t *w_bytes;
    size_t w_bytes_cap;
    uint32_t *w_frames;
    size_t w_frames_cap;
    tay_journal j;
    /* test seams (set under mu before traffic) */
    _Atomic uint64_t writes, syncs;
    uint64_t fail_write_at, fail_sync_at;
    int fail_errno;
    size_t short_write_bytes;
    int gate_closed, gate_entered;
};

int64_t tay_now_ns(void);  /* CLOCK_MONOTONIC */

/* writer_io.c: one batch, on the writer thread. Each returns 0, or -1 with w->failure set
 * (the writer then stops for good). */
int tay_journal_init(tay_journal *j, const tay_writer_config *config);
void tay_journal_release(tay_journal *j);
int tay_journal_append(tay_writer *w, const uint8_t *bytes, const uint32_t *frames,
                       size_t count, tay_writer_receipt *receipt);
int tay_journal_sync(tay_writer *w);
void tay_journal_fail(tay_writer *w, int kind, int reason, int error_number, const char *path,
                      const char *detail);
void tay_journal_cut_back(tay_writer *w);

#endif
