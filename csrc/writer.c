/* The journal writer thread and its submission queue (docs/journal.md, "Group commit").
 *
 * Submitters (the event loop, through cffi) encode each submission's frames straight into
 * the queue under the mutex and get a ticket (1, 2, ...). The thread takes submissions in
 * order into a batch of at most max_events records (a larger submission goes alone, none is
 * split), copies them out, and writes and syncs the batch without the mutex
 * (writer_io.c). Only after the sync and the path checks does `durable` move to the
 * batch's last ticket; then the eventfd is signalled. A held submission waits for
 * tay_writer_flush, a full batch or interval_ns after the oldest queued one arrived; under
 * load a flushed batch may wait for its siblings (tay_writer_gather_wait). Any
 * failure stops the writer for good: `stopped` is set after the failure report, `durable`
 * never moves again and everything queued is dropped. The thread blocks every asynchronous
 * signal and never calls into the interpreter. */
#define _GNU_SOURCE
#include "writer_internal.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { BUSY = 0, IDLE = 1, HOLDING = 2, GATHERING = 3 };
#define WRITER_THREAD_NAME "tay-writer"

int64_t tay_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Called after durable / stopped / exited are published. Only the writer thread signals, so
 * a set flag means the loop has not re-armed since this thread's last write: that write is
 * unread (the loop will wake) or read by a tay_writer_completed that re-arms next and only
 * then reads durable and stopped; either way what was published is seen. */
static void signal_loop(tay_writer *w) {
    if (atomic_exchange(&w->signalled, 1)) return;
    uint64_t one = 1;
    ssize_t ignored = write(w->event_fd, &one, sizeof one);  /* EAGAIN: already readable */
    (void)ignored;
}

/* Makes room for `more` items of `size` bytes after the live ones (compacting first).
 * Returns 0 or -1 (no memory). */
static int reserve(void **items, size_t *head, size_t *length, size_t *capacity, size_t more,
                   size_t size) {
    if (*length + more <= *capacity) return 0;
    if (*head) {
        memmove(*items, (char *)*items + *head * size, (*length - *head) * size);
        *length -= *head;
        *head = 0;
        if (*length + more <= *capacity) return 0;
    }
    size_t grown = *capacity ? *capacity : 64;
    while (grown < *length + more) grown *= 2;
    void *bigger = realloc(*items, grown * size);
    if (!bigger) return -1;
    *items = bigger;
    *capacity = grown;
    return 0;
}

static void *writer_main(void *arg);

/* Starts the thread for an open journal described by config (the caller keeps its
 * descriptors open, and gets the active one back from tay_writer_close). Returns 0 with
 * *out set, TAY_WRITER_ARGUMENT, TAY_WRITER_NO_MEMORY, or -errno. */
int tay_writer_start(const tay_writer_config *c, tay_writer **out) {
    if (c->dir_count < 1 || c->dir_count > TAY_WRITER_MAX_DIRS || c->max_events < 1 ||
        c->interval_ns < 0 || c->segment_fd < 0 || c->lock_fd < 0 || !c->lock_name ||
        c->segment_id == 0 || c->next_sequence == 0 || (c->linger && !c->interval_ns) ||
        c->gather_ns < 0 ||
        c->rt_priority < 0 || c->rt_priority > sched_get_priority_max(SCHED_FIFO))
        return TAY_WRITER_ARGUMENT;
    for (int i = 0; i < c->dir_count; i++)
        if (c->dir_fds[i] < 0 || !c->dir_names[i]) return TAY_WRITER_ARGUMENT;
    tay_writer *w = calloc(1, sizeof *w);
    if (!w) return TAY_WRITER_NO_MEMORY;
    if (tay_journal_init(&w->j, c)) {
        tay_journal_release(&w->j);
        free(w);
        return TAY_WRITER_NO_MEMORY;
    }
    w->max_events = c->max_events;
    w->interval_ns = c->interval_ns;
    w->slice_ns = c->rt_priority > 0 ? 0 : c->slice_ns;
    w->linger = c->linger;
    w->gather_ns = c->max_events > 1 && !c->linger ? c->gather_ns : 0;
    w->submit_next_sequence = c->next_sequence;
    w->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (w->event_fd < 0) {
        int error_number = errno;
        tay_journal_release(&w->j);
        free(w);
        return -error_number;
    }
    pthread_condattr_t monotonic;
    pthread_condattr_init(&monotonic);
    pthread_condattr_setclock(&monotonic, CLOCK_MONOTONIC);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->wake, &monotonic);
    pthread_cond_init(&w->done, &monotonic);
    pthread_condattr_destroy(&monotonic);
    /* The thread inherits this mask: asynchronous signals go to the interpreter's threads;
     * the synchronous ones its own syscalls or faults raise stay deliverable (SIGXFSZ at the
     * file-size limit acts as the process set it: ignored -> EFBIG, default -> killed). */
    sigset_t all, previous;
    sigfillset(&all);
    int synchronous[] = {SIGXFSZ, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
    for (size_t i = 0; i < sizeof synchronous / sizeof *synchronous; i++)
        sigdelset(&all, synchronous[i]);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    /* A real-time writer is woken at once when its fdatasync returns or a batch is flushed,
     * instead of queueing behind the interpreter's threads on a busy machine. Set through
     * the attributes, so a refusal (EPERM) comes from pthread_create with nothing to undo. */
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    if (c->rt_priority > 0) {
        struct sched_param priority = {.sched_priority = c->rt_priority};
        pthread_attr_setinheritsched(&attributes, PTHREAD_EXPLICIT_SCHED);
        pthread_attr_setschedpolicy(&attributes, SCHED_FIFO);
        pthread_attr_setschedparam(&attributes, &priority);
    }
    int rc = pthread_create(&w->thread, &attributes, writer_main, w);
    pthread_attr_destroy(&attributes);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (rc) {
        close(w->event_fd);
        tay_journal_release(&w->j);
        free(w);
        return -rc;
    }
    *out = w;
    return 0;
}

static int flushed_head(const tay_writer *w) {
    const tay_submission *head = &w->q_subs[w->q_subs_head];
    return w->flushed >= head->ticket || w->queued_events >= w->max_events || w->closing;
}

/* Group commit under load (docs/journal.md, "Gathering"): how long a flushed batch waits
 * for more submissions before it is written, in ns (0: it is written now). It waits only
 * when the previous batch carried several submissions (`siblings` >= 2), fewer are queued
 * now, and that batch was durable less than one recent fdatasync (`sync_ns`) ago
 * (submitters keep up with the writer); then at most `sync_ns` and `cap_ns`. The wait ends
 * early once `siblings` submissions or a full batch are queued, on close, or for a
 * tay_writer_wait caller. */
int64_t tay_writer_gather_wait(uint64_t queued, uint64_t siblings, int64_t since_done_ns,
                               int64_t sync_ns, int64_t cap_ns) {
    if (cap_ns <= 0 || siblings < 2 || queued >= siblings || since_done_ns < 0 ||
        since_done_ns >= sync_ns)
        return 0;
    return sync_ns < cap_ns ? sync_ns : cap_ns;
}

/* Whether a gathering batch may go now (mu held). */
static int gathered(const tay_writer *w) {
    return w->q_subs_len - w->q_subs_head >= w->gather_target ||
           w->queued_events >= w->max_events || w->closing ||
           w->urgent >= w->q_subs[w->q_subs_head].ticket;
}

/* Field k of record i in the caller's meta bytes (any alignment: memcpy compiles to a load). */
static uint64_t meta_field(const char *meta, size_t i, size_t k) {
    uint64_t value;
    memcpy(&value, meta + (4 * i + k) * sizeof value, sizeof value);
    return value;
}

/* Queues one submission of `count` records, meta = 4 native-endian uint64 per record (type,
 * schema, sequence, payload length), payloads concatenated. Returns its ticket (> 0; a ticket handed out after a stop
 * never becomes durable), or TAY_WRITER_ARGUMENT (*error_index: the first bad record),
 * TAY_WRITER_SEQUENCE (sequences do not continue the journal), TAY_WRITER_CLOSED,
 * TAY_WRITER_NO_MEMORY. */
int64_t tay_writer_submit(tay_writer *w, size_t count, const char *meta,
                          const char *payloads, size_t payload_bytes, int hold,
                          size_t *error_index) {
    size_t bytes = 0, lengths = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t type = meta_field(meta, i, 0), schema = meta_field(meta, i, 1),
                 sequence = meta_field(meta, i, 2), length = meta_field(meta, i, 3);
        *error_index = i;
        if (type < 1 || type > 254 || schema < 1 || schema > 255 || sequence == 0 ||
            length > TAY_RECORD_MAX_PAYLOAD)
            return TAY_WRITER_ARGUMENT;
        lengths += (size_t)length;
        bytes += 28 + (size_t)length;
    }
    if (count == 0 || lengths != payload_bytes) return TAY_WRITER_ARGUMENT;
    pthread_mutex_lock(&w->mu);
    int64_t result;
    if (atomic_load(&w->stopped)) {
        result = (int64_t)++w->tickets;
        goto out;
    }
    if (w->closing) { result = TAY_WRITER_CLOSED; goto out; }
    for (size_t i = 0; i < count; i++) {
        if (meta_field(meta, i, 2) != w->submit_next_sequence + i) {
            *error_index = i;
            result = TAY_WRITER_SEQUENCE;
            goto out;
        }
    }
    if (reserve((void **)&w->q_bytes, &w->q_bytes_head, &w->q_bytes_len, &w->q_bytes_cap, bytes, 1) ||
        reserve((void **)&w->q_frames, &w->q_frames_head, &w->q_frames_len, &w->q_frames_cap,
                count, sizeof *w->q_frames) ||
        reserve((void **)&w->q_subs, &w->q_subs_head, &w->q_subs_len, &w->q_subs_cap, 1,
                sizeof *w->q_subs)) {
        result = TAY_WRITER_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        size_t length = (size_t)meta_field(meta, i, 3);
        size_t frame = tay_encode_frame(w->q_bytes + w->q_bytes_len,
                                        (uint8_t)meta_field(meta, i, 0),
                                        (uint8_t)meta_field(meta, i, 1), meta_field(meta, i, 2),
                                        (const uint8_t *)payloads, length);
        payloads += length;
        w->q_bytes_len += frame;
        w->q_frames[w->q_frames_len++] = (uint32_t)frame;
    }
    int64_t arrival = tay_now_ns();
    tay_submission *sub = &w->q_subs[w->q_subs_len++];
    sub->ticket = ++w->tickets;
    sub->records = (uint32_t)count;
    sub->bytes = bytes;
    sub->arrival_ns = arrival;
    w->queued_events += count;
    w->submit_next_sequence += count;
    w->stats.submissions++;
    if (!hold || w->max_events == 1) w->flushed = sub->ticket;
    if (w->waiting == GATHERING) {
        if (gathered(w)) pthread_cond_signal(&w->wake);
    } else if (w->waiting != BUSY) {
        const tay_submission *head = &w->q_subs[w->q_subs_head];
        if (flushed_head(w) || (w->interval_ns > 0 &&
                                (w->waiting == IDLE || arrival >= head->arrival_ns + w->interval_ns)))
            pthread_cond_signal(&w->wake);
    }
    result = (int64_t)sub->ticket;
out:
    pthread_mutex_unlock(&w->mu);
    return result;
}

/* The submitter has no more ready input: everything queued may be written now (ignored
 * when lingering). */
void tay_writer_flush(tay_writer *w) {
    if (w->linger) return;
    pthread_mutex_lock(&w->mu);
    if (w->flushed != w->tickets) {
        w->flushed = w->tickets;
        if (w->waiting != BUSY && w->waiting != GATHERING) pthread_cond_signal(&w->wake);
    }
    pthread_mutex_unlock(&w->mu);
}

uint64_t tay_writer_durable(tay_writer *w) { return atomic_load(&w->durable); }
int tay_writer_stopped(tay_writer *w) { return atomic_load(&w->stopped); }
int tay_writer_event_fd(tay_writer *w) { return w->event_fd; }

/* The loop's look after a wake-up, in one call: consumes the eventfd's count (EAGAIN: it
 * was not signalled, fine), re-arms the signal, then returns the durable ticket, or -1
 * once the writer has stopped (the caller then reads the failure and the final durable
 * ticket itself). The re-arm comes after the read: re-armed first, a signal made between
 * the two would be consumed and leave the flag set with nothing to read. Both are read
 * after the re-arm, so neither a stop signalled with this wake-up nor a batch whose
 * signal was skipped (signal_loop) is missed. */
int64_t tay_writer_completed(tay_writer *w) {
    uint64_t count;
    ssize_t ignored = read(w->event_fd, &count, sizeof count);
    (void)ignored;
    atomic_store(&w->signalled, 0);
    if (atomic_load(&w->stopped)) return -1;
    return (int64_t)atomic_load(&w->durable);
}

static void deadline_after(struct timespec *ts, int64_t ns) {
    int64_t at = tay_now_ns() + ns;
    ts->tv_sec = (time_t)(at / 1000000000);
    ts->tv_nsec = (long)(at % 1000000000);
}

/* Blocks until `ticket` is durable (flushing it first). Returns 0, TAY_WRITER_STOPPED,
 * TAY_WRITER_CLOSED, or TAY_WRITER_TIMEOUT after timeout_ns (< 0: no limit). */
int tay_writer_wait(tay_writer *w, uint64_t ticket, int64_t timeout_ns) {
    struct timespec deadline;
    if (timeout_ns >= 0) deadline_after(&deadline, timeout_ns);
    pthread_mutex_lock(&w->mu);
    uint64_t covered = ticket < w->tickets ? ticket : w->tickets;
    if (w->flushed < covered) w->flushed = covered;
    if (w->urgent < covered) w->urgent = covered;  /* a blocked caller: no gathering for it */
    pthread_cond_signal(&w->wake);
    int rc = 0;
    while (atomic_load(&w->durable) < ticket) {
        if (atomic_load(&w->stopped)) { rc = TAY_WRITER_STOPPED; break; }
        if (w->exited) { rc = TAY_WRITER_CLOSED; break; }
        if (timeout_ns < 0) pthread_cond_wait(&w->done, &w->mu);
        else if (pthread_cond_timedwait(&w->done, &w->mu, &deadline) == ETIMEDOUT &&
                 atomic_load(&w->durable) < ticket) {
            rc = TAY_WRITER_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* Copies the receipts of durable batches from number `after_batch` on (0 is the first
 * batch; ones already overwritten in the ring are skipped) to out. Returns how many;
 * *next_batch is the number to ask for next. */
int tay_writer_receipts(tay_writer *w, uint64_t after_batch, tay_writer_receipt *out,
                        size_t capacity, uint64_t *next_batch) {
    pthread_mutex_lock(&w->mu);
    uint64_t done = w->batches_done, batch = after_batch;
    if (done > TAY_WRITER_RECEIPT_RING && batch < done - TAY_WRITER_RECEIPT_RING)
        batch = done - TAY_WRITER_RECEIPT_RING;
    size_t copied = 0;
    for (; batch < done && copied < capacity; batch++)
        out[copied++] = w->receipts[batch % TAY_WRITER_RECEIPT_RING];
    *next_batch = batch;
    pthread_mutex_unlock(&w->mu);
    return (int)copied;
}

/* Starts the per-batch histograms (events per batch; write and sync time in ns) with the
 * given ascending bounds (at most TAY_WRITER_BUCKETS each). Returns 0 or ARGUMENT. */
int tay_writer_observe(tay_writer *w, const uint64_t *latency_bounds_ns, size_t latency_count,
                       const uint64_t *batch_bounds, size_t batch_count) {
    if (latency_count > TAY_WRITER_BUCKETS || batch_count > TAY_WRITER_BUCKETS)
        return TAY_WRITER_ARGUMENT;
    pthread_mutex_lock(&w->mu);
    memcpy(w->latency_bounds, latency_bounds_ns, latency_count * sizeof *latency_bounds_ns);
    memcpy(w->batch_bounds, batch_bounds, batch_count * sizeof *batch_bounds);
    w->latency_count = latency_count;
    w->batch_count = batch_count;
    memset(&w->observed, 0, sizeof w->observed);
    pthread_mutex_unlock(&w->mu);
    return 0;
}

void tay_writer_observations_of(tay_writer *w, tay_writer_observations *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->observed;
    pthread_mutex_unlock(&w->mu);
}

/* The bucket of `value`: the first bound >= value, else the overflow bucket. */
static size_t bucket(const uint64_t *bounds, size_t count, uint64_t value) {
    size_t i = 0;
    while (i < count && value > bounds[i]) i++;
    return i;
}

static void observe_batch(tay_writer *w, uint64_t records, int64_t write_ns, int64_t sync_ns) {
    tay_writer_observations *o = &w->observed;
    if (!w->latency_count && !w->batch_count) return;
    o->batches++;
    o->events_counts[bucket(w->batch_bounds, w->batch_count, records)]++;
    o->write_counts[bucket(w->latency_bounds, w->latency_count, (uint64_t)write_ns)]++;
    o->sync_counts[bucket(w->latency_bounds, w->latency_count, (uint64_t)sync_ns)]++;
    o->events_total += records;
    o->write_ns_total += (uint64_t)write_ns;
    o->sync_ns_total += (uint64_t)sync_ns;
}

void tay_writer_failure_of(tay_writer *w, tay_writer_failure *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->failure;
    pthread_mutex_unlock(&w->mu);
}

/* The writer thread's scheduling policy (SCHED_OTHER, SCHED_FIFO, ...) and priority; 0 or
 * a positive errno. */
int tay_writer_scheduling(tay_writer *w, int *policy, int *priority) {
    struct sched_param param;
    int rc = pthread_getschedparam(w->thread, policy, &param);
    if (!rc) *priority = param.sched_priority;
    return rc;
}

void tay_writer_stats_of(tay_writer *w, tay_writer_stats *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->stats;
    out->writes = atomic_load(&w->writes);
    out->syncs = atomic_load(&w->syncs);
    pthread_mutex_unlock(&w->mu);
}

void tay_writer_phases_of(tay_writer *w, tay_writer_phases *out) {
    pthread_mutex_lock(&w->mu);
    *out = w->phases;
    pthread_mutex_unlock(&w->mu);
}

/* Waits (mu held) until a batch may be taken; returns 0 to take one, 1 to exit. */
static int await_batch(tay_writer *w) {
    int decided = 0;                /* whether the head may gather was decided */
    int64_t gather_until = 0;
    for (;;) {
        int64_t started = tay_now_ns();
        if (w->q_subs_head == w->q_subs_len) {
            if (w->closing) return 1;
            w->waiting = IDLE;
            pthread_cond_wait(&w->wake, &w->mu);
        } else if (flushed_head(w)) {
            if (!decided && w->gather_ns) {
                decided = 1;
                int64_t wait = tay_writer_gather_wait(
                    w->q_subs_len - w->q_subs_head, w->last_subs, started - w->last_done_ns,
                    w->sync_avg_ns, w->gather_ns);
                if (wait) {
                    gather_until = started + wait;
                    int64_t due = w->q_subs[w->q_subs_head].arrival_ns + w->interval_ns;
                    if (w->interval_ns > 0 && due < gather_until) gather_until = due;
                    w->gather_target = w->last_subs;
                    w->stats.gathered++;
                }
            }
            if (started >= gather_until || gathered(w)) break;
            struct timespec at = {(time_t)(gather_until / 1000000000),
                                  (long)(gather_until % 1000000000)};
            w->waiting = GATHERING;
            pthread_cond_timedwait(&w->wake, &w->mu, &at);
        } else if (w->interval_ns > 0) {
            int64_t due = w->q_subs[w->q_subs_head].arrival_ns + w->interval_ns;
            if (started >= due) break;
            struct timespec at = {(time_t)(due / 1000000000), (long)(due % 1000000000)};
            w->waiting = HOLDING;
            pthread_cond_timedwait(&w->wake, &w->mu, &at);
        } else {
            w->waiting = HOLDING;
            pthread_cond_wait(&w->wake, &w->mu);
        }
        uint64_t waited = (uint64_t)(tay_now_ns() - started);
        if (w->waiting == IDLE) w->phases.idle_ns += waited;
        else w->phases.held_ns += waited;
        w->waiting = BUSY;
    }
    w->waiting = BUSY;
    return 0;
}

/* Moves the next batch (mu held) into the thread's own buffers. Returns its record count,
 * or 0 when out of memory. */
static size_t take_batch(tay_writer *w, uint64_t *first_ticket, uint64_t *last_ticket,
                         size_t *bytes) {
    size_t subs = 0, records = 0, size = 0, head = w->q_subs_head;
    while (head + subs < w->q_subs_len) {
        const tay_submission *sub = &w->q_subs[head + subs];
        if (subs && records + sub->records > w->max_events) break;
        records += sub->records;
        size += sub->bytes;
        subs++;
    }
    if (size > w->w_bytes_cap) {
        uint8_t *grown = realloc(w->w_bytes, size);
        if (!grown) return 0;
        w->w_bytes = grown;
        w->w_bytes_cap = size;
    }
    if (records > w->w_frames_cap) {
        uint32_t *grown = realloc(w->w_frames, records * sizeof *grown);
        if (!grown) return 0;
        w->w_frames = grown;
        w->w_frames_cap = records;
    }
    memcpy(w->w_bytes, w->q_bytes + w->q_bytes_head, size);
    memcpy(w->w_frames, w->q_frames + w->q_frames_head, records * sizeof *w->w_frames);
    *first_ticket = w->q_subs[head].ticket;
    *last_ticket = w->q_subs[head + subs - 1].ticket;
    *bytes = size;
    w->q_bytes_head += size;
    w->q_frames_head += records;
    w->q_subs_head += subs;
    w->queued_events -= records;
    return records;
}

/* Stops for good (mu held): the failure is recorded; queued submissions are dropped. */
static void stop(tay_writer *w) {
    w->q_subs_head = w->q_subs_len;
    w->q_bytes_head = w->q_bytes_len;
    w->q_frames_head = w->q_frames_len;
    w->queued_events = 0;
    atomic_store(&w->stopped, 1);
    pthread_cond_broadcast(&w->done);
}

/* struct sched_attr of sched_setattr(2), declared here: not every libc has it */
typedef struct {
    uint32_t size, policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime, deadline, period;
    uint32_t util_min, util_max;
} tay_sched_attr;

static int get_attr(int tid, tay_sched_attr *attr) {
    memset(attr, 0, sizeof *attr);
    return syscall(SYS_sched_getattr, tid, attr, sizeof *attr, 0) ? errno : 0;
}

/* The writer spends each batch asleep in fdatasync and wakes several times per batch; on a
 * busy machine each wake-up waited ~85 us on a run queue behind the default slice (per-event
 * benchmarks, docs/benchmarks.md, eighth session). A short slice gives it an earlier
 * deadline when it wakes (EEVDF), without privilege and without changing its share. */
static int ask_for_slice(uint64_t slice_ns) {
    tay_sched_attr attr;
    int rc = get_attr(0, &attr);
    if (rc) return rc;
    if (attr.policy != SCHED_OTHER && attr.policy != SCHED_BATCH) return 0;  /* not fair */
    attr.size = sizeof attr;
    attr.flags = 0;
    attr.runtime = slice_ns;
    return syscall(SYS_sched_setattr, 0, &attr, 0) ? errno : 0;
}

/* The writer thread's fair-scheduler slice and nice (sched_getattr), and why asking for the
 * configured slice failed (0: it did not, or none was asked for). Returns 0 or an errno. */
int tay_writer_fair_slice(tay_writer *w, uint64_t *slice_ns, int *nice, int *set_errno) {
    pthread_mutex_lock(&w->mu);
    while (!w->started) pthread_cond_wait(&w->done, &w->mu);
    if (w->exited) {  /* its id may already name another thread */
        pthread_mutex_unlock(&w->mu);
        return ESRCH;
    }
    int tid = w->tid;
    *set_errno = w->slice_errno;
    pthread_mutex_unlock(&w->mu);
    tay_sched_attr attr;
    int rc = get_attr(tid, &attr);
    if (!rc) {
        *slice_ns = attr.runtime;
        *nice = attr.nice;
    }
    return rc;
}

static void *writer_main(void *arg) {
    tay_writer *w = arg;
    /* named for per-thread CPU (top -H, /proc/PID/task, tay bench); at most 15 bytes */
    pthread_setname_np(pthread_self(), WRITER_THREAD_NAME);
    int slice_errno = w->slice_ns ? ask_for_slice(w->slice_ns) : 0;
    pthread_mutex_lock(&w->mu);
    w->tid = (int)syscall(SYS_gettid);
    w->slice_errno = slice_errno;
    w->started = 1;
    pthread_cond_broadcast(&w->done);
    for (;;) {
        if (await_batch(w)) break;
        uint64_t first_ticket, last_ticket;
        int64_t taking = tay_now_ns();
        w->phases.queued_ns += (uint64_t)(taking - w->q_subs[w->q_subs_head].arrival_ns);
        size_t subs_before = w->q_subs_head;
        size_t bytes, records = take_batch(w, &first_ticket, &last_ticket, &bytes);
        uint64_t subs = w->q_subs_head - subs_before;
        if (!records) {
            tay_journal_fail(w, TAY_WK_IO, TAY_WR_NO_MEMORY, ENOMEM, w->j.segments_path,
                             "no memory for a batch");
            stop(w);
            break;
        }
        pthread_mutex_unlock(&w->mu);
        tay_writer_receipt receipt = {first_ticket, last_ticket, 0, 0,
                                      w->j.next_sequence, w->j.next_sequence + records - 1, records};
        int64_t started = tay_now_ns();
        w->j.write_ns = w->j.verify_ns = w->j.sync_ns = w->j.check_ns = 0;
        int failed = tay_journal_append(w, w->w_bytes, w->w_frames, records, &receipt);
        int64_t written = tay_now_ns();
        failed = failed || tay_journal_sync(w);
        int64_t synced = tay_now_ns();
        if (failed) {
            int reason = w->failure.reason;
            if (reason == TAY_WR_APPEND_FAILED || reason == TAY_WR_FDATASYNC_FAILED)
                tay_journal_cut_back(w);
            if (w->j.fd >= 0) {
                close(w->j.fd);
                w->j.fd = -1;
            }
        }
        pthread_mutex_lock(&w->mu);
        if (failed) {
            stop(w);
            break;
        }
        tay_writer_stats *stats = &w->stats;
        stats->batches++;
        stats->events += records;
        if (records > stats->largest_batch) stats->largest_batch = records;
        if (w->j.sync_mode) stats->fsyncs++;
        w->receipts[w->batches_done++ % TAY_WRITER_RECEIPT_RING] = receipt;
        observe_batch(w, records, written - started, synced - written);
        tay_writer_phases *phases = &w->phases;
        phases->batches++;
        phases->take_ns += (uint64_t)(started - taking);
        phases->write_ns += w->j.write_ns;
        phases->verify_ns += w->j.verify_ns;
        phases->sync_ns += w->j.sync_ns;
        phases->check_ns += w->j.check_ns;
        w->last_subs = subs;
        w->last_done_ns = tay_now_ns();
        /* recent fdatasync time: an average with weight 1/8 for the newest batch */
        int64_t sync_ns = (int64_t)w->j.sync_ns;
        w->sync_avg_ns = w->sync_avg_ns ? w->sync_avg_ns + (sync_ns - w->sync_avg_ns) / 8 : sync_ns;
        atomic_store(&w->durable, last_ticket);
        pthread_cond_broadcast(&w->done);
        pthread_mutex_unlock(&w->mu);
        signal_loop(w);
        pthread_mutex_lock(&w->mu);
        /* added once the signal is out: a batch's publish time lags its other steps */
        phases->publish_ns += (uint64_t)(tay_now_ns() - synced);
    }
    w->exited = 1;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
    signal_loop(w);
    return NULL;
}

/* Drains what is queued, stops the thread and reports where the journal stands (the
 * active descriptor, -1 if the writer stopped, goes back to the caller). Returns 0. */
int tay_writer_close(tay_writer *w, tay_writer_tail *tail) {
    pthread_mutex_lock(&w->mu);
    int joined = w->exited && w->closing;
    w->closing = 1;
    w->gate_closed = 0;
    pthread_cond_broadcast(&w->wake);
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
    if (!joined) pthread_join(w->thread, NULL);
    tay_journal *j = &w->j;
    tail->segment_fd = j->fd;
    tail->segment_id = j->segment_id;
    tail->first_sequence = j->first_sequence;
    tail->size = j->size;
    tail->committed_size = j->committed_size;
    tail->record_count = j->record_count;
    tail->next_sequence = j->next_sequence;
    tail->history_bytes = j->history_bytes;
    tail->segment_crc = j->segment_crc;
    tail->ledger_size = j->ledger_size;
    tail->ledger_highest = j->ledger_highest;
    return 0;
}

/* Frees a closed writer (after tay_writer_close). */
void tay_writer_free(tay_writer *w) {
    if (!w) return;
    close(w->event_fd);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->wake);
    pthread_cond_destroy(&w->done);
    tay_journal_release(&w->j);
    free(w->q_bytes);
    free(w->q_frames);
    free(w->q_subs);
    free(w->w_bytes);
    free(w->w_frames);
    free(w);
}

void tay_writer_test_faults(tay_writer *w, uint64_t fail_write_at, uint64_t fail_sync_at,
                            int fail_errno, size_t short_write_bytes) {
    pthread_mutex_lock(&w->mu);
    w->fail_write_at = fail_write_at;
    w->fail_sync_at = fail_sync_at;
    w->fail_errno = fail_errno;
    w->short_write_bytes = short_write_bytes;
    pthread_mutex_unlock(&w->mu);
}

void tay_writer_test_gate(tay_writer *w, int closed) {
    pthread_mutex_lock(&w->mu);
    w->gate_closed = closed;
    if (!closed) w->gate_entered = 0;
    pthread_cond_broadcast(&w->done);
    pthread_mutex_unlock(&w->mu);
}

/* Sets the recent fdatasync time gathering goes by (a test's slow disk). */
void tay_writer_test_sync_avg(tay_writer *w, int64_t sync_avg_ns) {
    pthread_mutex_lock(&w->mu);
    w->sync_avg_ns = sync_avg_ns;
    pthread_mutex_unlock(&w->mu);
}

int tay_writer_test_gate_entered(tay_writer *w) {
    pthread_mutex_lock(&w->mu);
    int entered = w->gate_entered;
    pthread_mutex_unlock(&w->mu);
    return entered;
}

/* Writer thread, before a data fdatasync: hold while a test keeps the gate closed. */
void tay_writer_gate_wait(tay_writer *w) {
    pthread_mutex_lock(&w->mu);
    while (w->gate_closed) {
        w->gate_entered = 1;
        pthread_cond_wait(&w->done, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}
