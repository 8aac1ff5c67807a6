/* The fake GPU of the tcp staging suites; see fake_gpu.h. */
#include "fake_gpu.h"

#include <criterion/criterion.h>

#include "log.h"
#include "tcp/tcp.h"
#include "util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define FK_QUEUE   8192u
#define FK_LOG     (1u << 16)
#define FK_DEVS    16u
#define FK_ALLOCS  256u

enum { FK_IDLE = 0, FK_PENDING, FK_DONE, FK_FAILED };

typedef struct fk_event {
    _Atomic int state;
    bool        bad;       /* a run of its batch failed (under fk.lock) */
} fk_event_t;

typedef struct fk_copy {
    int         dir;
    uint8_t    *dst;       /* host addresses (device ones translated to shadows) */
    const uint8_t *src;
    const uint8_t *dev;    /* the device address the transport named */
    size_t      len;
    fk_event_t *ev;
    uint64_t    due_ns;
    bool        fail;
    bool        ends;      /* its event completes with it (a batch's last run) */
    /* A run of a batch: its entry in the list, read when it starts (as a
     * kernel would), and what the entry held when it was issued. */
    const pdx_tcp_run_t *run;
    pdx_tcp_run_t        raw;
    /* A batch's last run: the whole list as issued, compared with the list
     * when the batch ends (a kernel may read any entry until then). */
    const pdx_tcp_run_t *list;
    pdx_tcp_run_t       *snap;
    uint32_t             nsnap;
} fk_copy_t;

typedef struct fk_done {
    const uint8_t *dev;    /* H2D: destination */
    size_t         len;
} fk_done_t;

typedef struct fk_dev {
    uint8_t *base, *shadow;
    size_t   len;
} fk_dev_t;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    pthread_t       thread;
    bool            stop;
    fk_copy_t       q[FK_QUEUE];
    uint64_t        head, tail;
    uint64_t        last_due;
    uint32_t        delay_min_us, delay_max_us;
    uint32_t        h2d_extra_us;      /* added to host-to-device copies */
    uint64_t        fail_nth[2];       /* fail this copy of a direction (1-based), 0: none */
    uint64_t        refuse_nth[2];     /* copy_async refuses it */
    uint64_t        issued[2], finished[2];
    uint64_t        batches[2];        /* copy_runs_async calls */
    bool            prepare_fails;
    _Atomic bool    blind;             /* fx_gpu_blind */
    uint32_t        prepared;          /* runs_prepare calls */
    uint64_t        inflight[2], max_inflight[2]; /* bytes */
    fk_done_t       log[FK_LOG];       /* H2D copies finished, in order */
    uint32_t        nlog;
    fk_dev_t        devs[FK_DEVS];
    struct { void *p; size_t len; } allocs[FK_ALLOCS];
    uint32_t        nstreams, nevents;
    uint32_t        violations;
    char            why[256];          /* the first violation */
    uint64_t        rng;
} fk;

static _Thread_local char fk_err[128];

static void fk_violation(const char *what)
{
    if (fk.violations++ == 0)
        snprintf(fk.why, sizeof(fk.why), "%s", what);
}

static uint32_t fk_rand(uint32_t lo, uint32_t hi)
{
    uint64_t r = pdx_xorshift64(&fk.rng);

    return hi > lo ? lo + (uint32_t)(r % (hi - lo + 1)) : lo;
}

/* The shadow of [p, p + len) of fake device memory; NULL when it is none. */
static uint8_t *fk_shadow(const void *p, size_t len)
{
    const uint8_t *b = p;

    for (uint32_t i = 0; i < FK_DEVS; i++) {
        fk_dev_t *d = &fk.devs[i];

        if (d->base && b >= d->base && len <= d->len && (size_t)(b - d->base) <= d->len - len)
            return d->shadow + (b - d->base);
    }
    return NULL;
}

/* Whether [p, p + len) overlaps a copy still queued. */
static bool fk_in_use(const void *p, size_t len)
{
    const uint8_t *b = p;

    for (uint64_t i = fk.head; i < fk.tail; i++) {
        const fk_copy_t *c = &fk.q[i % FK_QUEUE];
        const uint8_t *h = c->dir == PDX_TCP_COPY_H2D ? c->src : c->dst;
        const uint8_t *run = (const uint8_t *)c->run;

        if (h < b + len && b < h + c->len)
            return true;
        if (run && run < b + len && b < run + sizeof(c->raw))
            return true;
    }
    return false;
}

static void *fk_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&fk.lock);
    while (!fk.stop) {
        fk_copy_t c;
        uint64_t now = pdx_now_ns();
        int state;

        if (fk.head == fk.tail) {
            pthread_cond_wait(&fk.cond, &fk.lock);
            continue;
        }
        c = fk.q[fk.head % FK_QUEUE];
        if (now < c.due_ns) {
            struct timespec ts = {.tv_sec = (time_t)(c.due_ns / 1000000000u),
                                  .tv_nsec = (long)(c.due_ns % 1000000000u)};

            pthread_cond_timedwait(&fk.cond, &fk.lock, &ts);
            continue;
        }
        if (c.run && memcmp(c.run, &c.raw, sizeof(c.raw)))
            fk_violation("a run list changed before its copies finished");
        pthread_mutex_unlock(&fk.lock);
        if (!c.fail)
            memcpy(c.dst, c.src, c.len);
        pthread_mutex_lock(&fk.lock);
        fk.head++;
        fk.finished[c.dir]++;
        fk.inflight[c.dir] -= c.len;
        if (c.dir == PDX_TCP_COPY_H2D && !c.fail && fk.nlog < FK_LOG)
            fk.log[fk.nlog++] = (fk_done_t){.dev = c.dev, .len = c.len};
        c.ev->bad |= c.fail;
        if (c.snap) {
            if (memcmp(c.list, c.snap, c.nsnap * sizeof(*c.snap)))
                fk_violation("a run list changed before its batch ended");
            free(c.snap);
        }
        if (c.ends) {
            state = c.ev->bad ? FK_FAILED : FK_DONE;
            atomic_store_explicit(&c.ev->state, state, memory_order_release);
        }
        pthread_cond_broadcast(&fk.cond);
    }
    pthread_mutex_unlock(&fk.lock);
    return NULL;
}

static pdx_status_t fk_device_of(const void *base, size_t len, int *device_p)
{
    pdx_status_t st = PDX_OK;

    pthread_mutex_lock(&fk.lock);
    if (!fk_shadow(base, len)) {
        pdx_error("fake copier: %p is not fake device memory", base);
        st = PDX_ERR_UNSUPPORTED;
    }
    pthread_mutex_unlock(&fk.lock);
    if (st == PDX_OK)
        *device_p = 3;
    return st;
}

static pdx_status_t fk_host_alloc(int device, size_t len, void **ptr_p)
{
    void *p;

    p = malloc(len);
    if (!p)
        return PDX_ERR_NOMEM;
    pthread_mutex_lock(&fk.lock);
    if (device != 3)
        fk_violation("host_alloc for another device");
    for (uint32_t i = 0; i < FK_ALLOCS; i++) {
        if (!fk.allocs[i].p) {
            fk.allocs[i].p = p;
            fk.allocs[i].len = len;
            break;
        }
    }
    pthread_mutex_unlock(&fk.lock);
    *ptr_p = p;
    return PDX_OK;
}

static void fk_host_free(int device, void *ptr)
{
    (void)device;
    pthread_mutex_lock(&fk.lock);
    for (uint32_t i = 0; i < FK_ALLOCS; i++) {
        if (fk.allocs[i].p == ptr) {
            if (fk_in_use(ptr, fk.allocs[i].len))
                fk_violation("staging or a run list freed while a copy uses it");
            fk.allocs[i].p = NULL;
            break;
        }
    }
    pthread_mutex_unlock(&fk.lock);
    free(ptr);
}

/* Whether [p, p + len) lies in one host_alloc'ed buffer (fk.lock held). */
static bool fk_allocated(const void *p, size_t len)
{
    const uint8_t *b = p;

    for (uint32_t i = 0; i < FK_ALLOCS; i++) {
        const uint8_t *a = fk.allocs[i].p;

        if (a && b >= a && len <= fk.allocs[i].len && (size_t)(b - a) <= fk.allocs[i].len - len)
            return true;
    }
    return false;
}

static pdx_status_t fk_stream_create(int device, void **stream_p)
{
    (void)device;
    pthread_mutex_lock(&fk.lock);
    fk.nstreams++;
    pthread_mutex_unlock(&fk.lock);
    *stream_p = (void *)&fk;
    return PDX_OK;
}

static void fk_stream_destroy(int device, void *stream)
{
    (void)device;
    (void)stream;
    pthread_mutex_lock(&fk.lock);
    fk.nstreams--;
    pthread_mutex_unlock(&fk.lock);
}

static pdx_status_t fk_event_create(int device, void **event_p)
{
    fk_event_t *ev = calloc(1, sizeof(*ev));

    (void)device;
    if (!ev)
        return PDX_ERR_NOMEM;
    pthread_mutex_lock(&fk.lock);
    fk.nevents++;
    pthread_mutex_unlock(&fk.lock);
    *event_p = ev;
    return PDX_OK;
}

static void fk_event_destroy(int device, void *event)
{
    fk_event_t *ev = event;

    (void)device;
    pthread_mutex_lock(&fk.lock);
    if (atomic_load(&ev->state) == FK_PENDING)
        fk_violation("event destroyed while its copy runs");
    fk.nevents--;
    pthread_mutex_unlock(&fk.lock);
    free(ev);
}

/* Queue one copy (fk.lock held): the next in line, like a stream. */
static pdx_status_t fk_enqueue(pdx_tcp_copy_dir_t dir, void *dst, const void *src, size_t len,
                               fk_event_t *ev, bool ends, uint64_t now)
{
    fk_copy_t *c;
    uint64_t due;

    if (fk.tail - fk.head == FK_QUEUE) {
        fk_violation("more copies in flight than the fake queue holds");
        return PDX_ERR_IO;
    }
    c = &fk.q[fk.tail % FK_QUEUE];
    *c = (fk_copy_t){.dir = dir, .len = len, .ev = ev, .ends = ends};
    c->fail = fk.fail_nth[dir] && fk.issued[dir] + 1 == fk.fail_nth[dir];
    if (dir == PDX_TCP_COPY_H2D) {
        c->dev = dst;
        c->dst = fk_shadow(dst, len);
        c->src = src;
        if (fk_shadow(src, len))
            fk_violation("H2D from device memory");
    } else {
        c->dev = src;
        c->src = fk_shadow(src, len);
        c->dst = dst;
        if (fk_shadow(dst, len))
            fk_violation("D2H into device memory");
    }
    if (!c->dev || !(dir == PDX_TCP_COPY_H2D ? c->dst : c->src)) {
        fk_violation("a copy names no fake device memory");
        return PDX_ERR_IO;
    }
    due = now + 1000ull * fk_rand(fk.delay_min_us, fk.delay_max_us);
    if (dir == PDX_TCP_COPY_H2D)
        due += 1000ull * fk.h2d_extra_us;
    fk.last_due = PDX_MAX(fk.last_due, due);
    c->due_ns = fk.last_due; /* in order, like a stream */
    fk.tail++;
    fk.issued[dir]++;
    fk.inflight[dir] += len;
    fk.max_inflight[dir] = PDX_MAX(fk.max_inflight[dir], fk.inflight[dir]);
    return PDX_OK;
}

/* Whether copies issued+1 .. issued+n of dir include the one to refuse
 * (fk.lock held); if so they count as issued. */
static bool fk_refused(pdx_tcp_copy_dir_t dir, uint32_t n)
{
    uint64_t nth = fk.refuse_nth[dir];

    if (!nth || nth <= fk.issued[dir] || nth > fk.issued[dir] + n)
        return false;
    fk.issued[dir] += n;
    snprintf(fk_err, sizeof(fk_err), "injected refusal to start a copy");
    return true;
}

/* n copies of dir ending in ev are issued (fk.lock held): false when they
 * are refused, else ev pends until the last ends. */
static bool fk_issued(int device, fk_event_t *ev, pdx_tcp_copy_dir_t dir, uint32_t n)
{
    if (device != 3)
        fk_violation("copy on another device");
    if (atomic_load(&ev->state) == FK_PENDING)
        fk_violation("event reused while its copy runs");
    if (fk_refused(dir, n))
        return false;
    ev->bad = false;
    atomic_store(&ev->state, FK_PENDING);
    return true;
}

static pdx_status_t fk_copy_async(int device, void *stream, pdx_tcp_copy_dir_t dir, void *dst,
                                  const void *src, size_t len, void *done)
{
    fk_event_t *ev = done;
    pdx_status_t st = PDX_ERR_IO;

    (void)stream;
    pthread_mutex_lock(&fk.lock);
    if (fk_issued(device, ev, dir, 1))
        st = fk_enqueue(dir, dst, src, len, ev, true, pdx_now_ns());
    pthread_cond_broadcast(&fk.cond);
    pthread_mutex_unlock(&fk.lock);
    return st;
}

static bool fk_overlap(const pdx_tcp_run_t *runs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (runs[i].dst < runs[j].dst + runs[j].len && runs[j].dst < runs[i].dst + runs[i].len)
                return true;
    return false;
}

static pdx_status_t fk_copy_runs_async(int device, void *stream, pdx_tcp_copy_dir_t dir,
                                       const pdx_tcp_run_t *runs, uint32_t nruns, void *done)
{
    fk_event_t *ev = done;
    pdx_status_t st = PDX_ERR_IO;
    uint64_t now = pdx_now_ns();

    (void)stream;
    pthread_mutex_lock(&fk.lock);
    if (nruns == 0 || !fk_allocated(runs, nruns * sizeof(*runs)))
        fk_violation("a run list outside host_alloc'ed memory");
    else if (fk_overlap(runs, nruns))
        fk_violation("runs of one batch write the same bytes (copied at once, in no order)");
    else if (fk_issued(device, ev, dir, nruns))
        st = PDX_OK;
    if (st == PDX_OK)
        fk.batches[dir]++;
    for (uint32_t i = 0; i < nruns && st == PDX_OK; i++) {
        fk_copy_t *c = &fk.q[fk.tail % FK_QUEUE];

        st = fk_enqueue(dir, (void *)(uintptr_t)runs[i].dst, (const void *)(uintptr_t)runs[i].src,
                        runs[i].len, ev, i + 1 == nruns, now);
        if (st != PDX_OK)
            break; /* a violation: the test fails */
        c->run = &runs[i];
        c->raw = runs[i];
        if (i + 1 == nruns) {
            c->list = runs;
            c->nsnap = nruns;
            c->snap = malloc(nruns * sizeof(*runs));
            if (c->snap)
                memcpy(c->snap, runs, nruns * sizeof(*runs));
        }
    }
    pthread_cond_broadcast(&fk.cond);
    pthread_mutex_unlock(&fk.lock);
    return st;
}

static pdx_status_t fk_query(int device, void *done)
{
    fk_event_t *ev = done;

    (void)device;
    if (atomic_load(&fk.blind)) {
        char name[16] = "";

        pthread_getname_np(pthread_self(), name, sizeof(name));
        if (strcmp(name, "pdx-tcp") != 0) {
            snprintf(fk_err, sizeof(fk_err), "injected: this thread cannot ask");
            return PDX_ERR_AGAIN;
        }
    }
    switch (atomic_load_explicit(&ev->state, memory_order_acquire)) {
    case FK_PENDING:
        return PDX_INPROGRESS;
    case FK_FAILED:
        snprintf(fk_err, sizeof(fk_err), "injected copy error");
        return PDX_ERR_IO;
    default:
        return PDX_OK;
    }
}

static const char *fk_last_error(void)
{
    return fk_err;
}

static pdx_status_t fk_runs_prepare(int device)
{
    bool fails;

    pthread_mutex_lock(&fk.lock);
    if (device != 3)
        fk_violation("runs_prepare for another device");
    if (fk.issued[0] + fk.issued[1])
        fk_violation("runs_prepare after copies started");
    fk.prepared++;
    fails = fk.prepare_fails;
    pthread_mutex_unlock(&fk.lock);
    if (fails)
        snprintf(fk_err, sizeof(fk_err), "injected failure to load the batch copier");
    return fails ? PDX_ERR_IO : PDX_OK;
}

static const pdx_tcp_copier_t fake_copier = {
    .name           = "fake",
    .device_of      = fk_device_of,
    .host_alloc     = fk_host_alloc,
    .host_free      = fk_host_free,
    .stream_create  = fk_stream_create,
    .stream_destroy = fk_stream_destroy,
    .event_create   = fk_event_create,
    .event_destroy  = fk_event_destroy,
    .copy_async     = fk_copy_async,
    .query          = fk_query,
    .last_error     = fk_last_error,
    .copy_runs_async = fk_copy_runs_async,
    .runs_prepare   = fk_runs_prepare,
};


void fx_gpu_start(uint32_t delay_min_us, uint32_t delay_max_us)
{
    pthread_condattr_t ca;

    pthread_mutex_init(&fk.lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fk.cond, &ca);
    pthread_condattr_destroy(&ca);
    fk.delay_min_us = delay_min_us;
    fk.delay_max_us = delay_max_us;
    fk.rng = 0x2545f4914f6cdd1dull;
    cr_assert_eq(pthread_create(&fk.thread, NULL, fk_main, NULL), 0);
    pdx_tcp_set_copier(&fake_copier);
}

void fx_gpu_one_by_one(void)
{
    static pdx_tcp_copier_t one_by_one;

    one_by_one = fake_copier; /* without batches: a copy_async per piece */
    one_by_one.name = "fake, one by one";
    one_by_one.copy_runs_async = NULL;
    one_by_one.runs_prepare = NULL;
    pdx_tcp_set_copier(&one_by_one);
}

void fx_gpu_blind(bool blind)
{
    atomic_store(&fk.blind, blind);
}

void fx_gpu_prepare_fails(void)
{
    pthread_mutex_lock(&fk.lock);
    fk.prepare_fails = true;
    pthread_mutex_unlock(&fk.lock);
}

void fx_gpu_delay(uint32_t min_us, uint32_t max_us)
{
    pthread_mutex_lock(&fk.lock);
    fk.delay_min_us = min_us;
    fk.delay_max_us = max_us;
    pthread_mutex_unlock(&fk.lock);
}

void fx_gpu_delay_h2d(uint32_t extra_us)
{
    pthread_mutex_lock(&fk.lock);
    fk.h2d_extra_us = extra_us;
    pthread_mutex_unlock(&fk.lock);
}

void fx_gpu_fail(int dir, uint64_t nth)
{
    pthread_mutex_lock(&fk.lock);
    fk.fail_nth[dir] = nth;
    pthread_mutex_unlock(&fk.lock);
}

void fx_gpu_refuse(int dir, uint64_t nth)
{
    pthread_mutex_lock(&fk.lock);
    fk.refuse_nth[dir] = nth;
    pthread_mutex_unlock(&fk.lock);
}

void fx_gpu_stats(fx_gpu_stats_t *stats_p)
{
    pthread_mutex_lock(&fk.lock);
    for (int d = 0; d < 2; d++) {
        stats_p->issued[d] = fk.issued[d];
        stats_p->batches[d] = fk.batches[d];
        stats_p->prepared = fk.prepared;
        stats_p->inflight[d] = fk.inflight[d];
        stats_p->max_inflight[d] = fk.max_inflight[d];
    }
    pthread_mutex_unlock(&fk.lock);
}

void fx_nap_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

    nanosleep(&ts, NULL);
}

void fx_gpu_wait_running(bool both)
{
    uint64_t deadline = pdx_deadline_ns(10000);

    for (;;) {
        fx_gpu_stats_t stats;
        bool h2d, d2h;

        fx_gpu_stats(&stats);
        h2d = stats.inflight[PDX_TCP_COPY_H2D] != 0;
        d2h = stats.inflight[PDX_TCP_COPY_D2H] != 0;
        if (both ? h2d && d2h : h2d || d2h)
            return;
        cr_assert_lt(pdx_now_ns(), deadline, "the copies never ran");
        fx_nap_ms(1);
    }
}

uint64_t fx_gpu_running(void)
{
    uint64_t n;

    pthread_mutex_lock(&fk.lock);
    n = fk.tail - fk.head;
    pthread_mutex_unlock(&fk.lock);
    return n;
}

uint64_t fx_gpu_placed(const void *dev, size_t len)
{
    const uint8_t *lo_end = dev, *hi_end = lo_end + len;
    uint64_t sum = 0;

    pthread_mutex_lock(&fk.lock);
    for (uint32_t i = 0; i < fk.nlog; i++) {
        const fk_done_t *d = &fk.log[i];
        const uint8_t *lo = PDX_MAX(d->dev, lo_end), *hi = PDX_MIN(d->dev + d->len, hi_end);

        if (lo < hi)
            sum += (uint64_t)(hi - lo);
    }
    pthread_mutex_unlock(&fk.lock);
    return sum;
}

void fx_gpu_stop(uint32_t kept)
{
    uint32_t allocs = 0;

    pthread_mutex_lock(&fk.lock);
    for (uint32_t i = 0; i < FK_ALLOCS; i++)
        allocs += fk.allocs[i].p != NULL;
    cr_assert_eq(fk.violations, 0, "fake copier: %s", fk.why);
    cr_assert_eq(fk.tail, fk.head, "%llu copies still run", (unsigned long long)(fk.tail - fk.head));
    cr_assert_eq(allocs, kept, "%u staging buffers left, %u expected", allocs, kept);
    cr_assert_eq(fk.nstreams, 0, "streams leaked");
    cr_assert_eq(fk.nevents, 0, "%u events leaked", fk.nevents);
    fk.stop = true;
    pthread_cond_broadcast(&fk.cond);
    pthread_mutex_unlock(&fk.lock);
    pthread_join(fk.thread, NULL);
    pdx_tcp_set_copier(NULL);
    pthread_cond_destroy(&fk.cond);
    pthread_mutex_destroy(&fk.lock);
}

uint8_t *fx_gpu_alloc(size_t len, uint8_t **shadow_p)
{
    void *base = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint8_t *shadow = calloc(1, len);

    cr_assert_neq(base, MAP_FAILED);
    cr_assert_not_null(shadow);
    pthread_mutex_lock(&fk.lock);
    for (uint32_t i = 0; i < FK_DEVS; i++) {
        if (!fk.devs[i].base) {
            fk.devs[i] = (fk_dev_t){.base = base, .shadow = shadow, .len = len};
            break;
        }
    }
    pthread_mutex_unlock(&fk.lock);
    *shadow_p = shadow;
    return base;
}

void fx_gpu_free(uint8_t *base)
{
    pthread_mutex_lock(&fk.lock);
    for (uint32_t i = 0; i < FK_DEVS; i++) {
        fk_dev_t *d = &fk.devs[i];

        if (d->base == base) {
            cr_assert_eq(munmap(d->base, d->len), 0);
            free(d->shadow);
            *d = (fk_dev_t){0};
        }
    }
    pthread_mutex_unlock(&fk.lock);
}
