/*
 * tcp and GPU memory (docs/architecture.md §8): the CPU never touches the bytes of a
 * region registered with PDX_TP_ACCESS_DEVICE; they travel through pinned
 * staging buffers with asynchronous copies (pdx_tcp_copier_t, tcp.h).
 *
 * Resources. The tp's first GPU region names the GPU and gets the tp two
 * copy streams (host-to-device, device-to-host), made on the registering
 * thread. Staging is per ep: tp->stage_bytes of pinned memory, half a ring
 * per direction, and one event per piece. An ep created once the tp has a
 * GPU region gets it at ep_create; an ep created before gets it from the
 * progress thread when it first moves GPU bytes (once; the allocation is a
 * runtime call, never a copy). Per ep rather than shared per tp: a ring one
 * stalled peer fills stalls only that peer, and the two directions of one
 * connection never wait for each other's space (a shared ring could
 * deadlock two tps whose senders hold it while their receivers wait).
 * Eps of tps without GPU regions allocate nothing and do no extra work.
 *
 * Sender: a WRITE from GPU memory is cut into pieces of at most piece_max
 * bytes; each gets ring space and a device-to-host copy. Its frame goes out
 * (tx.c) once its first piece is copied, its payload piece by piece from the
 * ring as they finish; a piece is freed once the socket took it. No ring
 * space or piece: staging waits for sends to free some.
 *
 * Batches: the copies a pass of the progress thread queues (the sender's
 * WRITEs, the pieces one receive pass filled) are issued together at the
 * end of the pass, as one copy_runs_async (one kernel) with one event, the
 * last piece's: issuing a copy and an event costs the thread microseconds,
 * a small WRITE's whole budget. A piece of TCP_BATCH_PIECE_MAX bytes or
 * more goes alone to the copy engine, which moves it faster than a kernel;
 * so does a batch of one, and every piece when the copier has no batches.
 * A piece whose destination overlaps one queued starts the next batch (the
 * runs of a batch are copied at once, in no order). The copier makes its batch
 * copies ready (runs_prepare) with the streams, on the registering thread:
 * the first batch must not wait for a GPU that waits for it.
 *
 * Receiver: the payload of a WRITE into GPU memory is read into ring
 * pieces; a full piece queues its host-to-device copy. The frame counts as
 * placed once its last piece finished (pieces finish in order), and only
 * frames before the first unplaced one are acknowledged: later frames wait
 * in ep->stage->rec (a SEND's receive completion, an ERR) and retire in
 * order (rx.c). No ring space, piece or record: the ep stops reading until
 * a copy finishes. The progress thread never waits for a copy: it polls the
 * events of eps on tp->copying every loop, spinning while copies finish and
 * sleeping at most a millisecond while they run.
 *
 * Errors: a failed copy fails its ep, naming the copy and the runtime's
 * error; every outstanding WR and receive completes with an error. A copy
 * keeps its piece (its ring and its region's reference) until it ended,
 * done or failed, whatever happens to the ep; ep_destroy waits for them
 * (bounded by the tp's timeout, at most TCP_CMD_TIMEOUT_MS), then keeps the
 * staging on tp->orphans, freed once they ended or, at tp close, leaked
 * with an error when they never do. A copy that failed to start may still have
 * been enqueued (hip records its event after enqueueing the copy), and
 * nothing tells when it ends: that staging is never freed (logged).
 */
#include "tcp_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TCP_COPY_SPIN_NS 1000000u /* poll copies without sleeping this long after one finished */
#define TCP_DRAIN_POLL_NS 100000u
#define TCP_BATCH_PIECE_MAX (256u << 10) /* larger pieces are copied alone */

/* Staging a copy may still use when it cannot be waited for: never freed. */
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static tcp_stage_t *kept;

/* ------------------------------------------------------------------ setup */

static pdx_status_t unreachable(pdx_status_t st)
{
    return st == PDX_ERR_NOMEM || st == PDX_ERR_RANGE ? st : PDX_ERR_UNSUPPORTED;
}

pdx_status_t tcp_staging_init(tcp_tp_t *tp, const void *base, size_t len)
{
    const pdx_tcp_copier_t *c = tp->copier;
    void *stream[2] = {NULL, NULL};
    pdx_status_t st;
    int device;

    st = c->device_of(base, len, &device);
    if (st != PDX_OK)
        return unreachable(st);
    pthread_mutex_lock(&tp->stage_lock);
    if (atomic_load(&tp->staging)) {
        pthread_mutex_unlock(&tp->stage_lock);
        if (device == tp->device)
            return PDX_OK;
        pdx_error("tcp: %s stages GPU memory of GPU %d; %p is memory of GPU %d", tp->name,
                  tp->device, base, device);
        return PDX_ERR_UNSUPPORTED;
    }
    st = c->stream_create(device, &stream[PDX_TCP_COPY_H2D]);
    if (st == PDX_OK)
        st = c->stream_create(device, &stream[PDX_TCP_COPY_D2H]);
    if (st != PDX_OK) {
        if (stream[PDX_TCP_COPY_H2D])
            c->stream_destroy(device, stream[PDX_TCP_COPY_H2D]);
        pthread_mutex_unlock(&tp->stage_lock);
        return unreachable(st);
    }
    tp->batch = c->copy_runs_async && (!c->runs_prepare || c->runs_prepare(device) == PDX_OK);
    if (c->copy_runs_async && !tp->batch)
        pdx_warn("tcp: %s: GPU copies go piece by piece, not in batches: %s", tp->name,
                 c->last_error());
    tp->device = device;
    tp->stream[PDX_TCP_COPY_H2D] = stream[PDX_TCP_COPY_H2D];
    tp->stream[PDX_TCP_COPY_D2H] = stream[PDX_TCP_COPY_D2H];
    atomic_store(&tp->staging, true);
    pthread_mutex_unlock(&tp->stage_lock);
    pdx_debug("tcp: %s stages GPU memory of GPU %d through %llu bytes per endpoint (%s)",
              tp->name, device, (unsigned long long)tp->stage_bytes, c->name);
    return PDX_OK;
}

void tcp_staging_fini(tcp_tp_t *tp)
{
    if (!atomic_load(&tp->staging))
        return;
    for (int d = 0; d < 2; d++)
        tp->copier->stream_destroy(tp->device, tp->stream[d]);
}

static void ring_init(tcp_ring_t *r, uint8_t *buf, uint64_t size)
{
    r->buf = buf;
    r->size = size;
    r->head = r->tail = 0;
    r->p_head = r->p_done = r->p_tail = 0;
}

static void stage_free(tcp_tp_t *tp, tcp_stage_t *s)
{
    const pdx_tcp_copier_t *c = tp->copier;

    for (uint32_t i = 0; i < TCP_STAGE_PIECES; i++) {
        if (s->tx.piece[i].done)
            c->event_destroy(tp->device, s->tx.piece[i].done);
        if (s->rx.piece[i].done)
            c->event_destroy(tp->device, s->rx.piece[i].done);
    }
    if (s->mem)
        c->host_free(tp->device, s->mem);
    if (s->tx.runs)
        c->host_free(tp->device, s->tx.runs);
    if (s->rx.runs)
        c->host_free(tp->device, s->rx.runs);
    free(s);
}

pdx_status_t tcp_stage_create(tcp_tp_t *tp, tcp_stage_t **stage_p)
{
    const pdx_tcp_copier_t *c = tp->copier;
    uint64_t half = tp->stage_bytes / 2;
    uint32_t piece = TCP_PIECE_MAX;
    pdx_status_t st;
    tcp_stage_t *s;
    void *mem;

    s = calloc(1, sizeof(*s));
    if (!s) {
        pdx_error("tcp: %s: out of memory for GPU staging", tp->name);
        return PDX_ERR_NOMEM;
    }
    while (piece > TCP_PIECE_MIN && (uint64_t)piece * 8 > half)
        piece /= 2;
    s->piece_max = piece;
    st = c->host_alloc(tp->device, 2 * half, &mem);
    if (st != PDX_OK)
        goto err_free;
    s->mem = mem;
    ring_init(&s->tx, s->mem, half);
    ring_init(&s->rx, s->mem + half, half);
    if (tp->batch) {
        size_t runs = TCP_STAGE_PIECES * sizeof(pdx_tcp_run_t);

        st = c->host_alloc(tp->device, runs, (void **)&s->tx.runs);
        if (st == PDX_OK)
            st = c->host_alloc(tp->device, runs, (void **)&s->rx.runs);
        if (st != PDX_OK)
            goto err_free;
    }
    for (uint32_t i = 0; i < TCP_STAGE_PIECES && st == PDX_OK; i++) {
        st = c->event_create(tp->device, &s->tx.piece[i].done);
        if (st == PDX_OK)
            st = c->event_create(tp->device, &s->rx.piece[i].done);
    }
    if (st != PDX_OK)
        goto err_free;
    *stage_p = s;
    return PDX_OK;

err_free:
    pdx_error("tcp: %s: no staging for GPU memory (%llu pinned bytes, %u events, run lists): %s",
              tp->name, (unsigned long long)(2 * half), 2 * TCP_STAGE_PIECES, c->last_error());
    stage_free(tp, s);
    return st == PDX_ERR_NOMEM ? st : PDX_ERR_IO;
}

/* ------------------------------------------------------------ teardown */

typedef enum { DRAIN_DONE, DRAIN_RUNNING, DRAIN_UNKNOWN } drain_t;

/* Query every copy still running (any order), each event once: a copy that
 * ended, done or failed, frees its piece. DRAIN_UNKNOWN: this thread cannot
 * ask the GPU; waiting would only ask (and log) again: a later reap, on a
 * thread that can, or the tp's close decides. */
static drain_t stage_drain(tcp_tp_t *tp, tcp_stage_t *s)
{
    tcp_ring_t *rings[2] = {&s->tx, &s->rx};
    void *ev = NULL;
    pdx_status_t st = PDX_INPROGRESS;

    for (int r = 0; r < 2 && s->ncopying; r++) {
        for (uint32_t i = 0; i < TCP_STAGE_PIECES; i++) {
            tcp_piece_t *p = &rings[r]->piece[i];

            if (!p->copying)
                continue;
            if (p->ends != ev) {
                ev = p->ends;
                st = tp->copier->query(tp->device, ev);
            }
            if (st == PDX_ERR_AGAIN)
                return DRAIN_UNKNOWN;
            if (st == PDX_INPROGRESS)
                continue;
            p->copying = false;
            tcp_mr_unref(p->mr, 1);
            s->ncopying--;
        }
    }
    return s->ncopying == 0 ? DRAIN_DONE : DRAIN_RUNNING;
}

static uint32_t drain_ms(const tcp_tp_t *tp)
{
    return PDX_MIN(tp->timeout_ms, TCP_CMD_TIMEOUT_MS);
}

static void nap(void)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = TCP_DRAIN_POLL_NS};

    nanosleep(&ts, NULL);
}

static void keep(tcp_tp_t *tp, tcp_stage_t *s)
{
    if (s->ncopying)
        pdx_error("tcp: %s: %u GPU copies were never seen to end: %llu bytes of staging are "
                  "never freed", tp->name, s->ncopying,
                  (unsigned long long)(s->tx.size + s->rx.size));
    else
        pdx_error("tcp: %s: a GPU copy that failed to start may still run: %llu bytes of "
                  "staging are never freed", tp->name,
                  (unsigned long long)(s->tx.size + s->rx.size));
    for (uint32_t i = 0; i < TCP_STAGE_PIECES && s->ncopying == 0; i++) {
        tp->copier->event_destroy(tp->device, s->tx.piece[i].done); /* unused by that copy */
        tp->copier->event_destroy(tp->device, s->rx.piece[i].done);
        s->tx.piece[i].done = s->rx.piece[i].done = NULL;
    }
    pthread_mutex_lock(&kept_lock);
    s->next = kept;
    kept = s;
    pthread_mutex_unlock(&kept_lock);
}

void tcp_stage_destroy(tcp_tp_t *tp, tcp_stage_t *s)
{
    uint64_t deadline = pdx_deadline_ns(drain_ms(tp));
    drain_t d;

    while ((d = stage_drain(tp, s)) == DRAIN_RUNNING && pdx_now_ns() < deadline)
        nap();
    if (d != DRAIN_DONE) {
        if (d == DRAIN_RUNNING)
            pdx_warn("tcp: %s: %u GPU copies of a destroyed endpoint still run after %u ms; "
                     "its staging is kept until they finish", tp->name, s->ncopying,
                     drain_ms(tp));
        else
            pdx_warn("tcp: %s: this thread cannot ask the GPU whether %u copies of a destroyed "
                     "endpoint ended; its staging is kept until a thread that can sees them "
                     "end", tp->name, s->ncopying);
        pthread_mutex_lock(&tp->stage_lock);
        s->next = tp->orphans;
        tp->orphans = s;
        pthread_mutex_unlock(&tp->stage_lock);
        return;
    }
    if (s->lost)
        keep(tp, s);
    else
        stage_free(tp, s);
}

void tcp_stage_reap(tcp_tp_t *tp, bool wait)
{
    uint64_t until = wait ? pdx_deadline_ns(drain_ms(tp)) : 0;
    tcp_stage_t *list, *s, *left = NULL;

    pthread_mutex_lock(&tp->stage_lock);
    list = tp->orphans;
    tp->orphans = NULL;
    pthread_mutex_unlock(&tp->stage_lock);
    while ((s = list)) {
        list = s->next;
        while (stage_drain(tp, s) == DRAIN_RUNNING && pdx_now_ns() < until)
            nap();
        if (s->ncopying == 0 && !s->lost) {
            stage_free(tp, s);
        } else if (s->ncopying == 0 || wait) {
            keep(tp, s); /* freeing memory a copy may still write: worse than the leak */
        } else {
            s->next = left;
            left = s;
        }
    }
    if (left) {
        pthread_mutex_lock(&tp->stage_lock);
        for (s = left; s->next; s = s->next)
            ;
        s->next = tp->orphans;
        tp->orphans = left;
        pthread_mutex_unlock(&tp->stage_lock);
    }
}

/* ------------------------------------------------------ progress thread */

/* The ep's staging, made here (once) when it was created before the tp's
 * first GPU region; false when that failed (the ep failed). */
static bool stage_need(tcp_ep_t *ep)
{
    pdx_status_t st;

    if (PDX_LIKELY(ep->stage != NULL))
        return true;
    pdx_info("tcp: %s: endpoint to %s moves GPU bytes; staging made on the progress thread",
             ep->tp->name, ep->peer);
    st = tcp_stage_create(ep->tp, &ep->stage);
    if (st != PDX_OK)
        tcp_ep_set_error(ep, st, true, "no staging for GPU memory: %s",
                         ep->tp->copier->last_error());
    return st == PDX_OK;
}

static void track(tcp_ep_t *ep)
{
    tcp_tp_t *tp = ep->tp;

    tp->copy_spin_until = pdx_now_ns() + TCP_COPY_SPIN_NS;
    if (ep->in_copy)
        return;
    ep->in_copy = true;
    ep->copy_ns = pdx_now_ns();
    ep->copy_next = tp->copying;
    tp->copying = ep;
}

void tcp_stage_untrack(tcp_ep_t *ep)
{
    tcp_ep_t **pp;

    if (!ep->in_copy)
        return;
    for (pp = &ep->tp->copying; *pp; pp = &(*pp)->copy_next) {
        if (*pp == ep) {
            *pp = ep->copy_next;
            break;
        }
    }
    ep->in_copy = false;
}

/* Ring space for up to want bytes, never across the ring's end; NULL when
 * no piece is free or less than a quarter piece is (unless the end of the
 * ring is what limits it). */
static tcp_piece_t *ring_take(tcp_ring_t *r, uint64_t want, uint32_t piece_max)
{
    uint64_t idx = r->head % r->size, to_end = r->size - idx;
    uint64_t len = PDX_MIN(want, PDX_MIN(r->size - (r->head - r->tail), to_end));
    tcp_piece_t *p;

    if (r->p_head - r->p_tail == TCP_STAGE_PIECES || len == 0 ||
        (len < want && len < to_end && len < piece_max / 4))
        return NULL;
    p = &r->piece[r->p_head++ % TCP_STAGE_PIECES];
    p->buf = r->buf + idx;
    p->len = (uint32_t)len;
    p->fill = 0;
    p->copying = false;
    p->last = false;
    p->mr = NULL;
    r->head += len;
    return p;
}

static void ring_drop(tcp_ring_t *r, tcp_piece_t *p)
{
    r->tail += p->len;
    r->p_tail++;
}

static const char *dir_name(pdx_tcp_copy_dir_t dir)
{
    return dir == PDX_TCP_COPY_H2D ? "host-to-device" : "device-to-host";
}

static const char *dir_peer(pdx_tcp_copy_dir_t dir)
{
    return dir == PDX_TCP_COPY_H2D ? "from" : "to";
}

/* From here until its copy is seen finished, p holds its region and its
 * ring space. */
static void start(tcp_stage_t *s, tcp_piece_t *p)
{
    atomic_fetch_add_explicit(&p->mr->refs, 1, memory_order_relaxed);
    p->copying = true;
    s->ncopying++;
}

static void unstart(tcp_stage_t *s, tcp_piece_t *p)
{
    p->copying = false;
    tcp_mr_unref(p->mr, 1);
    s->ncopying--;
}

/* Pieces [first, first + n) of r failed to start: the ep fails and its
 * staging is never reused (a copy may have been enqueued all the same). */
static void refused(tcp_ep_t *ep, tcp_ring_t *r, pdx_tcp_copy_dir_t dir, uint32_t first,
                    uint32_t n, pdx_status_t st)
{
    uint64_t bytes = 0;

    for (uint32_t i = first; i < first + n; i++) {
        bytes += r->piece[i].len;
        unstart(ep->stage, &r->piece[i]);
    }
    ep->stage->lost = true;
    tcp_ep_set_error(ep, st < 0 ? st : PDX_ERR_IO, true,
                     "%s copy of %llu bytes (%u piece%s) for WRITEs %s peer %s could not start: "
                     "%s", dir_name(dir), (unsigned long long)bytes, n, n == 1 ? "" : "s",
                     dir_peer(dir), ep->peer, ep->tp->copier->last_error());
}

/* Issue p's copy alone, with its own event. */
static pdx_status_t issue_one(tcp_ep_t *ep, tcp_ring_t *r, pdx_tcp_copy_dir_t dir, tcp_piece_t *p,
                              void *dst, const void *src)
{
    tcp_tp_t *tp = ep->tp;
    pdx_status_t st;

    p->ends = p->done;
    st = tp->copier->copy_async(tp->device, tp->stream[dir], dir, dst, src, p->len, p->done);
    if (PDX_UNLIKELY(st != PDX_OK)) {
        refused(ep, r, dir, (uint32_t)(p - r->piece), 1, st);
        return st;
    }
    track(ep);
    return PDX_OK;
}

/* Issue the copies queued on r: one alone, several as one batch. */
static pdx_status_t flush(tcp_ep_t *ep, tcp_ring_t *r, pdx_tcp_copy_dir_t dir)
{
    tcp_tp_t *tp = ep->tp;
    uint32_t first = r->q_first, n = r->q_n;
    const pdx_tcp_run_t *run = &r->runs[first];
    void *done;
    pdx_status_t st;

    if (n == 0)
        return PDX_OK;
    r->q_n = 0;
    if (n == 1)
        return issue_one(ep, r, dir, &r->piece[first], (void *)(uintptr_t)run->dst,
                         (const void *)(uintptr_t)run->src);
    done = r->piece[first + n - 1].done;
    for (uint32_t i = first; i < first + n; i++)
        r->piece[i].ends = done;
    st = tp->copier->copy_runs_async(tp->device, tp->stream[dir], dir, run, n, done);
    if (PDX_UNLIKELY(st != PDX_OK)) {
        refused(ep, r, dir, first, n, st);
        return st;
    }
    track(ep);
    return PDX_OK;
}

/* Whether [dst, dst + len) overlaps a destination queued on r: copies of a
 * batch run at once, so a later WRITE to the same bytes waits for the next. */
static bool overlaps(const tcp_ring_t *r, uint64_t dst, uint64_t len)
{
    for (uint32_t i = r->q_first; i < r->q_first + r->q_n; i++)
        if (dst < r->runs[i].dst + r->runs[i].len && r->runs[i].dst < dst + len)
            return true;
    return false;
}

/* Copy p's bytes from src to dst: queued for the pass's batch, or issued
 * now when it goes alone. */
static pdx_status_t queue(tcp_ep_t *ep, tcp_ring_t *r, pdx_tcp_copy_dir_t dir, tcp_piece_t *p,
                          void *dst, const void *src)
{
    uint32_t slot = (uint32_t)(p - r->piece);
    bool alone = !r->runs || p->len >= TCP_BATCH_PIECE_MAX;

    /* A batch is slots in a row, and copies run in order on the stream. */
    if (r->q_n && (alone || slot == 0 || overlaps(r, (uintptr_t)dst, p->len)) &&
        flush(ep, r, dir) != PDX_OK)
        return PDX_ERR_IO; /* the ep failed */
    start(ep->stage, p);
    if (alone)
        return issue_one(ep, r, dir, p, dst, src);
    if (r->q_n++ == 0)
        r->q_first = slot;
    r->runs[slot] = (pdx_tcp_run_t){.src = (uintptr_t)src, .dst = (uintptr_t)dst, .len = p->len};
    return PDX_OK;
}

/* Queue the device-to-host copies of WRITEs posted since the last pass. */
static void stage_tx(tcp_ep_t *ep)
{
    if (ep->st_wr < ep->sq_sent) {
        ep->st_wr = ep->sq_sent; /* host WRs went out past the cursor */
        ep->st_off = 0;
    }
    for (; ep->st_wr < ep->sq_seen; ep->st_wr++, ep->st_off = 0) {
        const tcp_wqe_t *w = &ep->sq[ep->st_wr & ep->sq_mask];

        if (!w->dev)
            continue;
        if (!stage_need(ep))
            return;
        while (ep->st_off < w->len) {
            tcp_stage_t *s = ep->stage;
            tcp_piece_t *p = ring_take(&s->tx, PDX_MIN(w->len - ep->st_off, s->piece_max),
                                       s->piece_max);

            if (!p)
                return; /* backpressure: sends free ring space */
            p->seq = ep->st_wr;
            p->off = ep->st_off;
            p->mr = w->mr;
            if (queue(ep, &s->tx, PDX_TCP_COPY_D2H, p, p->buf, w->src + ep->st_off) != PDX_OK)
                return;
            ep->st_off += p->len;
        }
    }
}

void tcp_stage_tx(tcp_ep_t *ep)
{
    stage_tx(ep);
    if (ep->stage && ep->stage->tx.q_n)
        flush(ep, &ep->stage->tx, PDX_TCP_COPY_D2H);
}

void tcp_stage_rx_flush(tcp_ep_t *ep)
{
    if (ep->stage && ep->stage->rx.q_n)
        flush(ep, &ep->stage->rx, PDX_TCP_COPY_H2D);
}

void tcp_stage_tx_sent(tcp_ep_t *ep)
{
    tcp_ring_t *r = &ep->stage->tx;

    while (r->p_tail < r->p_done) {
        const tcp_piece_t *p = &r->piece[r->p_tail % TCP_STAGE_PIECES];

        if (p->seq == ep->sq_sent) {
            const tcp_wqe_t *w = &ep->sq[p->seq & ep->sq_mask];

            if (ep->tx_off < w->frame_len + p->off + p->len)
                return;
        } else if (p->seq > ep->sq_sent) {
            return;
        }
        r->tail += p->len;
        r->p_tail++;
    }
}

void tcp_stage_tx_reset(tcp_ep_t *ep)
{
    tcp_ring_t *r;

    if (!ep->stage)
        return;
    r = &ep->stage->tx;
    while (r->p_tail < r->p_done)
        ring_drop(r, &r->piece[r->p_tail % TCP_STAGE_PIECES]);
    ep->st_wr = atomic_load_explicit(&ep->sq_pub, memory_order_acquire);
    ep->st_off = 0;
}

tcp_piece_t *tcp_stage_rx_open(tcp_ep_t *ep)
{
    tcp_ring_t *r;
    tcp_piece_t *p;

    if (!stage_need(ep))
        return NULL;
    r = &ep->stage->rx;
    if (r->p_head != r->p_tail) {
        p = &r->piece[(r->p_head - 1) % TCP_STAGE_PIECES];
        if (!p->copying)
            return p; /* open: a full piece starts copying at once */
    }
    p = ring_take(r, PDX_MIN(ep->rx_left, (uint64_t)ep->stage->piece_max), ep->stage->piece_max);
    if (!p) {
        ep->rx_stalled = true; /* a copy finishing frees space */
        return NULL;
    }
    p->dev = ep->rx_dst;
    p->seq = ep->rx_seq;
    p->mr = ep->rx_mr;
    return p;
}

void tcp_stage_rx_fill(tcp_ep_t *ep, tcp_piece_t *p, uint32_t n)
{
    p->fill += n;
    ep->rx_dst += n;
    ep->rx_left -= n;
    if (p->fill < p->len)
        return;
    p->last = ep->rx_left == 0;
    queue(ep, &ep->stage->rx, PDX_TCP_COPY_H2D, p, p->dev, p->buf);
}

void tcp_stage_rx_reset(tcp_ep_t *ep)
{
    tcp_ring_t *r;

    if (!ep->stage)
        return;
    r = &ep->stage->rx;
    if (r->p_head != r->p_tail) {
        tcp_piece_t *p = &r->piece[(r->p_head - 1) % TCP_STAGE_PIECES];

        if (!p->copying) { /* the open piece */
            r->head -= p->len;
            r->p_head--;
        }
    }
    ep->rx_placed = ep->rx_seq;
    ep->rx_stalled = false;
}

static void copy_failed(tcp_ep_t *ep, const tcp_piece_t *p, pdx_tcp_copy_dir_t dir,
                        pdx_status_t st)
{
    if (ep->state == TCP_EP_DEAD)
        return;
    tcp_ep_set_error(ep, st < 0 ? st : PDX_ERR_IO, true,
                     "%s copy of %u bytes for a WRITE %s peer %s failed: %s",
                     dir == PDX_TCP_COPY_H2D ? "host-to-device" : "device-to-host", p->len,
                     dir == PDX_TCP_COPY_H2D ? "from" : "to", ep->peer,
                     ep->tp->copier->last_error());
}

/* A copy ended, done or failed: the piece no longer uses its region. */
static void finished(tcp_ep_t *ep, tcp_piece_t *p)
{
    p->copying = false;
    tcp_mr_unref(p->mr, 1);
    ep->stage->ncopying--;
    ep->copy_ns = pdx_now_ns();
}

/* Whether p's copy ended (PDX_INPROGRESS: not yet); the pieces of a batch
 * share one event, asked once a poll (*ev_p, *st_p: the last answer). */
static pdx_status_t ended(tcp_tp_t *tp, const tcp_piece_t *p, void **ev_p, pdx_status_t *st_p)
{
    if (p->ends != *ev_p) {
        *ev_p = p->ends;
        *st_p = tp->copier->query(tp->device, p->ends);
    }
    return *st_p;
}

static bool poll_ep(tcp_ep_t *ep)
{
    tcp_tp_t *tp = ep->tp;
    tcp_stage_t *s = ep->stage;
    bool tx_more = false, rx_more = false;
    void *ev = NULL;
    pdx_status_t ev_st = PDX_INPROGRESS, st;

    while (s->tx.p_done < s->tx.p_head) {
        tcp_piece_t *p = &s->tx.piece[s->tx.p_done % TCP_STAGE_PIECES];

        if (!p->copying) /* failed to start: the ep failed with it */
            break;
        st = ended(tp, p, &ev, &ev_st);
        if (st == PDX_INPROGRESS)
            break;
        finished(ep, p);
        if (st != PDX_OK)
            copy_failed(ep, p, PDX_TCP_COPY_D2H, st);
        s->tx.p_done++;
        tx_more = true;
    }
    while (s->rx.p_tail < s->rx.p_head) {
        tcp_piece_t *p = &s->rx.piece[s->rx.p_tail % TCP_STAGE_PIECES];

        if (!p->copying) /* the open piece */
            break;
        st = ended(tp, p, &ev, &ev_st);
        if (st == PDX_INPROGRESS)
            break;
        finished(ep, p);
        ring_drop(&s->rx, p); /* first: failing the ep drops the open piece */
        if (st != PDX_OK)
            copy_failed(ep, p, PDX_TCP_COPY_H2D, st);
        else if (p->last && ep->state == TCP_EP_UP)
            s->rec[p->seq % TCP_RX_DEFER].done = true;
        rx_more = true;
    }
    if (ep->state != TCP_EP_UP) {
        tcp_stage_tx_reset(ep); /* nothing will be sent */
        return tx_more || rx_more;
    }
    if (tx_more)
        tcp_work_add(ep); /* frames to send from the ring */
    if (rx_more) {
        if (ep->rx_placed != ep->rx_seq)
            tcp_rx_retire(ep);
        if (ep->rx_stalled) {
            ep->rx_stalled = false;
            tcp_work_add(ep);
        }
    }
    return tx_more || rx_more;
}

bool tcp_stage_poll(tcp_tp_t *tp)
{
    bool progress = false;
    tcp_ep_t **pp = &tp->copying, *ep;

    while ((ep = *pp)) {
        progress |= poll_ep(ep);
        if (ep->stage->ncopying == 0) {
            *pp = ep->copy_next;
            ep->in_copy = false;
        } else {
            pp = &ep->copy_next;
        }
    }
    if (progress)
        tp->copy_spin_until = pdx_now_ns() + TCP_COPY_SPIN_NS;
    return progress;
}
