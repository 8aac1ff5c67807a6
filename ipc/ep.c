/*
 * ipc endpoints: an inner endpoint, and for a direct peer the records that
 * keep the RC contract over copies on the GPU (ipc.h); their completions
 * are ep_done.c's.
 */
#include "ipc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define RUNS_PER_DEPTH 4           /* the run ring: room for a post that wraps */
#define BIG_RUN        (1u << 20)  /* a few runs this long: async copies, no kernel */
#define FEW_RUNS       4u
#define FLUSH_RUNS     16384u      /* an open batch this large is launched at once */
#define FLUSH_BYTES    (256ull << 20)

static ipc_ep_t *ep_of(pdx_tp_ep_t *ep)
{
    return (ipc_ep_t *)ep;
}

/* The first failure wins (the shard's, or the control thread's ep_fail). */
void ipc_ep_failure(ipc_ep_t *ep, pdx_status_t why, const char *fmt, ...)
{
    int none = PDX_OK;
    va_list ap;

    if (why >= 0)
        why = PDX_ERR_PEER;
    if (!atomic_compare_exchange_strong(&ep->failed, &none, (int)why))
        return;
    va_start(ap, fmt);
    vsnprintf(ep->error, sizeof(ep->error), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&ep->error_set, true, memory_order_release);
    ep->cq->tp->in_ops->ep_fail(ep->in, why, ep->error);
}

static void free_direct(ipc_ep_t *ep)
{
    if (ep->batches)
        for (uint32_t i = 0; i < ep->depth; i++) {
            pdx_hip_event_destroy(ep->batches[i].event);
            pdx_hip_event_destroy(ep->batches[i].up_event);
        }
    ipc_cq_ring_put(ep->cq, &(ipc_ring_t){.host = ep->runs_host, .dev = ep->runs_dev,
                                          .bytes = (size_t)ep->nruns_cap *
                                                   sizeof(pdx_hip_run_t)});
    free(ep->batches);
    free(ep->recs);
    free(ep->inq);
}

pdx_status_t ipc_ep_create(pdx_tp_t *ptp, pdx_tp_cq_t *pcq, const pdx_tp_ep_attr_t *attr,
                           pdx_tp_ep_t **ep_p)
{
    ipc_tp_t *tp = (ipc_tp_t *)ptp;
    ipc_cq_t *cq = (ipc_cq_t *)pcq;
    ipc_ep_t *ep;
    pdx_status_t st;

    if (!attr || !ep_p || attr->sq_depth == 0)
        return PDX_ERR_INVALID;
    ep = calloc(1, sizeof(*ep));
    if (!ep)
        return PDX_ERR_NOMEM;
    ep->cq = cq;
    ep->direct = attr->direct;
    ep->expiry = UINT64_MAX;
    ep->depth = attr->sq_depth;
    ep->scratch = calloc(ep->depth, sizeof(*ep->scratch));
    if (!ep->scratch) {
        free(ep);
        return PDX_ERR_NOMEM;
    }
    st = tp->in_ops->ep_create(tp->in, cq->in, attr, &ep->in);
    if (st != PDX_OK) {
        free(ep->scratch);
        free(ep);
        return st;
    }
    if (ep->direct) {
        size_t runs = (size_t)ep->depth * RUNS_PER_DEPTH * sizeof(pdx_hip_run_t);

        ep->nruns_cap = ep->depth * RUNS_PER_DEPTH;
        ep->recs = calloc(ep->depth, sizeof(*ep->recs));
        ep->batches = calloc(ep->depth, sizeof(*ep->batches));
        ep->inq = calloc(ep->depth, sizeof(*ep->inq));
        st = ep->recs && ep->batches && ep->inq ? PDX_OK : PDX_ERR_NOMEM;
        if (st == PDX_OK) /* the engine's GPU, whichever thread makes the ep */
            st = pdx_hip_set_device(tp->gpu);
        if (st == PDX_OK)
            st = ipc_cq_stream(cq);
        if (st == PDX_OK) {
            ipc_ring_t ring;

            st = ipc_cq_ring_take(cq, runs, &ring);
            ep->runs_host = ring.host;
            ep->runs_dev = ring.dev;
        }
        if (st != PDX_OK)
            pdx_error("ipc: no copy resources for an endpoint of %u WRs: %s", ep->depth,
                      pdx_status_str(st));
    }
    if (st == PDX_OK)
        st = ipc_cq_add(cq, ep);
    if (st != PDX_OK) {
        tp->in_ops->ep_destroy(ep->in);
        free_direct(ep);
        free(ep->scratch);
        free(ep);
        return st;
    }
    *ep_p = (pdx_tp_ep_t *)ep;
    return PDX_OK;
}

void ipc_ep_address(const pdx_tp_ep_t *pep, pdx_tp_addr_t *addr_p)
{
    const ipc_ep_t *ep = (const ipc_ep_t *)pep;

    ep->cq->tp->in_ops->ep_address(ep->in, addr_p);
}

pdx_status_t ipc_ep_connect(pdx_tp_ep_t *pep, const pdx_tp_addr_t *remote)
{
    ipc_ep_t *ep = ep_of(pep);

    return ep->cq->tp->in_ops->ep_connect(ep->in, remote);
}

void ipc_ep_fail(pdx_tp_ep_t *pep, pdx_status_t why, const char *msg)
{
    ipc_ep_t *ep = ep_of(pep);

    if (!ep->direct) {
        ep->cq->tp->in_ops->ep_fail(ep->in, why, msg);
        return;
    }
    ipc_ep_failure(ep, why, "%s", msg && msg[0] ? msg : pdx_status_str(why));
}

const char *ipc_ep_error(const pdx_tp_ep_t *pep)
{
    const ipc_ep_t *ep = (const ipc_ep_t *)pep;

    if (atomic_load_explicit(&ep->error_set, memory_order_acquire))
        return ep->error;
    return ep->cq->tp->in_ops->ep_error(ep->in);
}

void ipc_ep_destroy(pdx_tp_ep_t *pep)
{
    ipc_ep_t *ep = ep_of(pep);
    ipc_tp_t *tp;
    bool copies_done = true;

    if (!ep)
        return;
    tp = ep->cq->tp;
    ipc_cq_remove(ep->cq, ep);
    tp->in_ops->ep_destroy(ep->in);
    /* Copies still on the GPU read its runs and write a peer's region the
     * caller closes next: wait for them, as long as a copy may take. */
    if (ep->direct) {
        uint64_t deadline = pdx_deadline_ns(tp->timeout_ms);

        ipc_ep_gates(ep, true); /* nothing waits for a gate any more */
        for (uint64_t i = ep->b_head; i != ep->b_tail && copies_done; i++) {
            const ipc_batch_t *b = &ep->batches[i % ep->depth];

            while (!b->failed && pdx_hip_event_query(b->event) == PDX_INPROGRESS &&
                   (copies_done = pdx_now_ns() < deadline))
                usleep(50);
        }
        if (!copies_done)
            pdx_error("ipc: an endpoint's GPU copies did not finish in %u ms: their memory is "
                      "kept", tp->timeout_ms);
    }
    if (copies_done)
        free_direct(ep);
    free(ep->scratch);
    free(ep);
}

/* --------------------------------------------------------------- posting */

pdx_status_t ipc_post_recv(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len)
{
    ipc_ep_t *ep = ep_of(pep);
    const ipc_mr_t *m = (const ipc_mr_t *)mr;

    return ep->cq->tp->in_ops->post_recv(ep->in, wr_id, m ? m->in : NULL, offset, len);
}

pdx_status_t ipc_post_read(pdx_tp_ep_t *pep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey)
{
    ipc_ep_t *ep = ep_of(pep);
    const ipc_mr_t *m = (const ipc_mr_t *)mr;

    pdx_status_t st;

    if (!ep->direct)
        return ep->cq->tp->in_ops->post_read(ep->in, wr_id, m ? m->in : NULL, offset, len,
                                              remote_addr, rkey);
    if (ipc_ep_failed(ep) != PDX_OK)
        return PDX_ERR_PEER;
    if (ep->rec_tail - ep->rec_head >= ep->depth)
        return PDX_ERR_AGAIN;
    /* its completion keeps its place among the records */
    st = ep->cq->tp->in_ops->post_read(ep->in, wr_id, m ? m->in : NULL, offset, len, remote_addr,
                                        rkey);
    if (st != PDX_OK)
        return st;
    *ipc_rec_at(ep, ep->rec_tail) = (ipc_rec_t){.wr_id = wr_id, .kind = REC_INNER,
                                            .opcode = PDX_TP_OP_READ, .signaled = true};
    ipc_inq_push(ep, ep->rec_tail++);
    return PDX_OK;
}

static bool is_copy(const ipc_ep_t *ep, const pdx_tp_write_t *w)
{
    return ep->direct && w->rmr && w->mr && ((const ipc_mr_t *)w->mr)->device;
}

/* A copy's bounds: inside the local region and the opened one. */
static bool copy_fits(const pdx_tp_write_t *w)
{
    const ipc_mr_t *m = (const ipc_mr_t *)w->mr;
    const ipc_rmr_t *r = (const ipc_rmr_t *)w->rmr;
    uint64_t off = w->remote_addr - r->addr;

    return w->offset <= m->len && w->length <= m->len - w->offset && w->remote_addr >= r->addr &&
           off <= r->len && w->length <= r->len - off;
}

static void add_recs(ipc_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n, uint8_t kind)
{
    for (uint32_t i = 0; i < n; i++)
        *ipc_rec_at(ep, ep->rec_tail + i) = (ipc_rec_t){.wr_id = wr[i].wr_id, .kind = kind,
                                                    .opcode = PDX_TP_OP_WRITE,
                                                    .signaled = wr[i].flags & PDX_TP_SIGNALED};
}

/* The batch b enqueued (st PDX_OK) or not: it completes in its turn, a
 * failed one with the ep's error (the first failure puts the ep in error). */
static void push_batch(ipc_ep_t *ep, ipc_batch_t *b, pdx_status_t st, uint64_t rec_first,
                       uint32_t nrec, uint64_t run_first, uint32_t nruns, uint64_t bytes,
                       void *stream)
{
    bool waits = st == PDX_OK;

    if (st != PDX_OK && ipc_ep_failed(ep) == PDX_OK)
        ipc_ep_failure(ep, PDX_ERR_IO, "GPU copy of %llu bytes not enqueued: %s",
                (unsigned long long)bytes, pdx_hip_last_error());
    /* part of it may be on the stream: an event after it, where one can
     * still be recorded, says when nothing of it runs any more */
    if (!waits && b->event && st != ipc_ep_failed(ep))
        waits = pdx_hip_event_record(b->event, stream) == PDX_OK;
    *b = (ipc_batch_t){.rec_first = rec_first, .nrec = nrec, .nruns = nruns,
                       .run_first = run_first, .bytes = bytes, .posted_ns = pdx_now_ns(),
                       .event = b->event, .up_event = b->up_event, .failed = !waits};
    ep->b_tail++;
}

/* Launch the open batch: one gather (or a few large async copies) and its
 * event. Copies that cannot be enqueued complete with the error (none of
 * them runs). */
void ipc_ep_flush(ipc_ep_t *ep)
{
    ipc_cq_t *cq = ep->cq;
    ipc_batch_t *b = &ep->batches[ep->b_tail % ep->depth];
    pdx_hip_run_t *host = ep->runs_host + ep->open_run % ep->nruns_cap;
    pdx_hip_run_t *dev = ep->runs_dev + ep->open_run % ep->nruns_cap;
    const uint32_t n = ep->open_n;
    pdx_status_t st = PDX_OK;

    if (n == 0)
        return;
    ep->open_n = 0;
    if (ipc_ep_failed(ep) != PDX_OK)
        st = ipc_ep_failed(ep); /* in error: nothing more goes to the GPU */
    if (st == PDX_OK && !b->event)
        st = pdx_hip_event_create(&b->event);
    if (st == PDX_OK && n <= FEW_RUNS && ep->open_big == n) {
        st = pdx_hip_copy_runs_async(cq->stream, host, n);
    } else if (st == PDX_OK) {
        st = pdx_hip_runs_upload_async(cq->stream, dev, host, n);
        if (st == PDX_OK)
            st = pdx_hip_gather_async(cq->stream, dev, n);
    }
    if (st == PDX_OK)
        st = pdx_hip_event_record(b->event, cq->stream);
    push_batch(ep, b, st, ep->open_rec, n, ep->open_run, n, ep->open_bytes, cq->stream);
    cq->launches++;
}

/* n copies into the open batch, their runs at ring position at. */
static void post_copies(ipc_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n, uint64_t at)
{
    pdx_hip_run_t *host = ep->runs_host + at % ep->nruns_cap;

    if (ep->open_n == 0) {
        ep->open_rec = ep->rec_tail;
        ep->open_run = at;
        ep->open_bytes = 0;
        ep->open_big = 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        const ipc_mr_t *m = (const ipc_mr_t *)wr[i].mr;
        const ipc_rmr_t *r = (const ipc_rmr_t *)wr[i].rmr;

        host[i] = (pdx_hip_run_t){.src = (uint64_t)(uintptr_t)(m->base + wr[i].offset),
                                  .dst = (uint64_t)(uintptr_t)(r->ptr +
                                                               (wr[i].remote_addr - r->addr)),
                                  .len = wr[i].length};
        ep->open_big += wr[i].length >= BIG_RUN;
        ep->open_bytes += wr[i].length;
    }
    add_recs(ep, wr, n, REC_COPY);
    ep->rec_tail += n;
    ep->open_n += n;
    if (ep->open_n >= FLUSH_RUNS || ep->open_bytes >= FLUSH_BYTES)
        ipc_ep_flush(ep);
}

/* n WRITEs over the inner endpoint, the last signaled (its completion
 * tells when they are all done). */
static pdx_status_t post_inner(ipc_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n)
{
    pdx_status_t st;

    ipc_ep_flush(ep); /* a batch's records stay adjacent */
    for (uint32_t i = 0; i < n; i++) {
        ep->scratch[i] = wr[i];
        ep->scratch[i].mr = ((const ipc_mr_t *)wr[i].mr)->in;
        ep->scratch[i].rmr = NULL;
    }
    ep->scratch[n - 1].flags |= PDX_TP_SIGNALED;
    st = ep->cq->tp->in_ops->post_write(ep->in, ep->scratch, n);
    if (st != PDX_OK)
        return st;
    add_recs(ep, wr, n, REC_INNER);
    for (uint32_t i = 0; i < n; i++)
        ipc_inq_push(ep, ep->rec_tail + i);
    ep->rec_tail += n;
    return PDX_OK;
}

/* A passthrough ep's WRITEs, with the inner transport's regions. */
static pdx_status_t post_through(ipc_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n)
{
    if (!wr || n > ep->depth)
        return PDX_ERR_INVALID;
    for (uint32_t i = 0; i < n; i++) {
        ep->scratch[i] = wr[i];
        ep->scratch[i].mr = ((const ipc_mr_t *)wr[i].mr)->in;
        ep->scratch[i].rmr = NULL;
    }
    return ep->cq->tp->in_ops->post_write(ep->in, ep->scratch, n);
}

pdx_status_t ipc_post_write(pdx_tp_ep_t *pep, const pdx_tp_write_t *wr, uint32_t n)
{
    ipc_ep_t *ep = ep_of(pep);
    uint32_t copies = 0, groups = 0;
    uint64_t at;

    if (!ep->direct)
        return post_through(ep, wr, n);
    if (ipc_ep_failed(ep) != PDX_OK)
        return PDX_ERR_PEER;
    if (n == 0)
        return PDX_OK;
    if (!wr || n > ep->depth)
        return PDX_ERR_INVALID;
    if (ep->rec_tail - ep->rec_head + n > ep->depth)
        return PDX_ERR_AGAIN;
    for (uint32_t i = 0; i < n; i++) {
        if (!is_copy(ep, &wr[i]))
            continue;
        if (!copy_fits(&wr[i])) {
            pdx_error("ipc: a copy of %llu bytes from offset %llu to 0x%llx lies outside its "
                      "regions", (unsigned long long)wr[i].length,
                      (unsigned long long)wr[i].offset, (unsigned long long)wr[i].remote_addr);
            return PDX_ERR_RANGE;
        }
        copies++;
        groups += i == 0 || !is_copy(ep, &wr[i - 1]);
    }
    /* The copies' runs follow the open batch's in the ring, or start it
     * again where they would wrap. */
    at = ep->run_tail;
    if (copies && at % ep->nruns_cap + copies > ep->nruns_cap)
        at += ep->nruns_cap - at % ep->nruns_cap;
    if (at + copies - ep->run_head > ep->nruns_cap || ep->b_tail - ep->b_head + groups > ep->depth)
        return PDX_ERR_AGAIN;
    /* an open batch never wraps: where this post starts the ring again
     * (skipped to it, or the open batch ended at its end), it goes first */
    if (copies && at % ep->nruns_cap == 0)
        ipc_ep_flush(ep);
    for (uint32_t i = 0; i < n;) {
        bool copy = is_copy(ep, &wr[i]);
        uint32_t k = i + 1;

        while (k < n && is_copy(ep, &wr[k]) == copy)
            k++;
        if (copy) {
            post_copies(ep, wr + i, k - i, at);
            at += k - i;
            ep->run_tail = at;
        } else {
            pdx_status_t st = post_inner(ep, wr + i, k - i);

            if (st != PDX_OK)
                return st;
        }
        i = k;
    }
    return PDX_OK;
}

/* The inner transport checks its own message limit (a passthrough or a
 * WRITE over it); copies take any length. */
pdx_status_t ipc_post_runs(pdx_tp_ep_t *pep, const pdx_tp_runs_t *runs, uint32_t *bad_p)
{
    const ipc_mr_t *mr = (const ipc_mr_t *)(const void *)runs->mr;

    if (!mr)
        return PDX_ERR_INVALID;
    return pdx_tp_post_runs_as_writes(ipc_post_write, pep, runs, UINT64_MAX, mr->len, bad_p);
}

/* A page-copies WR: its tables (buffers, then both page lists) in the run
 * ring, uploaded, one pdx_pages kernel, its own batch. */
pdx_status_t ipc_post_pages(pdx_tp_ep_t *pep, const pdx_tp_pages_t *p)
{
    ipc_ep_t *ep = ep_of(pep);
    const uint64_t bpp = p ? p->bytes_per_page : 0;
    uint64_t tables, slots, at, smax = 0, dmax = 0, need;
    pdx_hip_page_buf_t *hb;
    uint32_t *hl;
    uint8_t *dev;
    ipc_batch_t *b;
    ipc_gate_t *g = NULL;
    const uint64_t *skip = NULL;
    uint32_t slot = 0;
    void *stream;
    pdx_status_t st = PDX_OK;

    if (!ep->direct)
        return PDX_ERR_UNSUPPORTED;
    if (ipc_ep_failed(ep) != PDX_OK)
        return PDX_ERR_PEER;
    if (!p || !p->bufs || !p->src || !p->dst || !p->nbufs || !p->npages || !bpp)
        return PDX_ERR_INVALID;
    tables = (uint64_t)p->nbufs * sizeof(pdx_hip_page_buf_t) + (uint64_t)p->npages * 8;
    slots = (tables + sizeof(pdx_hip_run_t) - 1) / sizeof(pdx_hip_run_t);
    if (tables > PDX_TP_PAGES_BYTES || slots > ep->nruns_cap / 2)
        return PDX_ERR_INVALID;
    if (ep->rec_tail - ep->rec_head + 1 > ep->depth)
        return PDX_ERR_AGAIN;
    for (uint32_t i = 0; i < p->npages; i++) {
        smax = PDX_MAX(smax, (uint64_t)p->src[i]);
        dmax = PDX_MAX(dmax, (uint64_t)p->dst[i]);
    }
    for (uint32_t i = 0; i < p->nbufs; i++) {
        const ipc_mr_t *m = (const ipc_mr_t *)p->bufs[i].mr;
        const ipc_rmr_t *r = (const ipc_rmr_t *)p->bufs[i].rmr;
        uint64_t off, end;

        if (!m || !m->device || !r)
            return PDX_ERR_INVALID;
        off = p->bufs[i].remote_addr - r->addr;
        if (__builtin_mul_overflow(smax + 1, bpp, &end) ||
            __builtin_add_overflow(end, p->bufs[i].offset, &end) || end > m->len ||
            __builtin_mul_overflow(dmax + 1, bpp, &need) || p->bufs[i].remote_addr < r->addr ||
            off > r->len || need > r->len - off) {
            pdx_error("ipc: pages up to %llu (source) and %llu (destination) of %llu bytes lie "
                      "outside buffer %u's regions", (unsigned long long)smax,
                      (unsigned long long)dmax, (unsigned long long)bpp, i);
            return PDX_ERR_RANGE;
        }
    }
    at = ep->run_tail;
    if (at % ep->nruns_cap + slots > ep->nruns_cap)
        at += ep->nruns_cap - at % ep->nruns_cap;
    if (at + slots - ep->run_head > ep->nruns_cap || ep->b_tail - ep->b_head + 2 > ep->depth)
        return PDX_ERR_AGAIN;
    if (p->gate && (st = ipc_gate_take(ep->cq, p->gate, &g, &slot)) != PDX_OK)
        return st;
    ipc_ep_flush(ep); /* what came before goes first */
    hb = (pdx_hip_page_buf_t *)(void *)(ep->runs_host + at % ep->nruns_cap);
    dev = (uint8_t *)(ep->runs_dev + at % ep->nruns_cap);
    for (uint32_t i = 0; i < p->nbufs; i++) {
        const ipc_mr_t *m = (const ipc_mr_t *)p->bufs[i].mr;
        const ipc_rmr_t *r = (const ipc_rmr_t *)p->bufs[i].rmr;

        hb[i] = (pdx_hip_page_buf_t){
            .src = (uint64_t)(uintptr_t)(m->base + p->bufs[i].offset),
            .dst = (uint64_t)(uintptr_t)(r->ptr + (p->bufs[i].remote_addr - r->addr))};
    }
    hl = (uint32_t *)(void *)(hb + p->nbufs);
    memcpy(hl, p->src, p->npages * sizeof(uint32_t));
    memcpy(hl + p->npages, p->dst, p->npages * sizeof(uint32_t));
    *ipc_rec_at(ep, ep->rec_tail) = (ipc_rec_t){.wr_id = p->wr_id, .kind = REC_COPY,
                                            .opcode = PDX_TP_OP_WRITE,
                                            .signaled = p->flags & PDX_TP_SIGNALED};
    b = &ep->batches[ep->b_tail % ep->depth];
    if (!b->event)
        st = pdx_hip_event_create(&b->event);
    if (st == PDX_OK && g && !b->up_event)
        st = pdx_hip_event_create(&b->up_event);
    /* gated: the tables go up on a stream that never waits, the copies
     * wait on the gate's stream for them and for the gate */
    stream = g ? ep->cq->up_stream : ep->cq->stream;
    if (st == PDX_OK)
        st = pdx_hip_runs_upload_async(stream, (pdx_hip_run_t *)(void *)dev,
                                       ep->runs_host + at % ep->nruns_cap, (uint32_t)slots);
    if (st == PDX_OK && g) {
        st = pdx_hip_event_record(b->up_event, stream);
        stream = g->stream;
        if (st == PDX_OK)
            st = pdx_hip_stream_wait_event(stream, b->up_event);
    }
    if (st == PDX_OK && g)
        st = ipc_gate_skip(g, slot, &skip);
    if (st == PDX_OK) {
        const size_t lists = p->nbufs * sizeof(pdx_hip_page_buf_t);

        st = pdx_hip_pages_async(stream, (const pdx_hip_page_buf_t *)(void *)dev,
                                 (const uint32_t *)(void *)(dev + lists),
                                 (const uint32_t *)(void *)(dev + lists) + p->npages, p->nbufs,
                                 p->npages, bpp, skip);
    }
    if (st == PDX_OK)
        st = pdx_hip_event_record(b->event, stream);
    push_batch(ep, b, st, ep->rec_tail, 1, at, (uint32_t)slots,
               (uint64_t)p->nbufs * p->npages * bpp, stream);
    if (g) {
        /* behind the gate, even when not enqueued: giving it up is how a
         * gate stream learns none of its copies is left */
        b->gate = g;
        b->slot = slot;
        b->seq = g->seq;
        b->epoch = g->epoch;
        b->deadline_ns = p->gate->deadline_ns;
        b->abandon = p->gate->abandon;
        b->abandon_if = p->gate->abandon_if;
        b->waiting = true;
        ep->waiting++;
        ep->gated++;
        ep->expiry = PDX_MIN(ep->expiry, b->deadline_ns);
    } else {
        ep->cq->launches++;
    }
    ep->rec_tail++;
    ep->run_tail = at + slots;
    return PDX_OK;
}

pdx_status_t ipc_post_send(pdx_tp_ep_t *pep, uint64_t wr_id, const void *data, uint32_t len,
                           unsigned flags)
{
    ipc_ep_t *ep = ep_of(pep);
    ipc_rec_t *rec;

    if (!ep->direct)
        return ep->cq->tp->in_ops->post_send(ep->in, wr_id, data, len, flags);
    if (ipc_ep_failed(ep) != PDX_OK)
        return PDX_ERR_PEER;
    if (len > PDX_TP_SEND_MAX || (len && !data)) {
        pdx_error("ipc: SEND of %u bytes (at most %d, inline)", len, PDX_TP_SEND_MAX);
        return PDX_ERR_INVALID;
    }
    if (ep->rec_tail - ep->rec_head >= ep->depth)
        return PDX_ERR_AGAIN;
    rec = ipc_rec_at(ep, ep->rec_tail++);
    *rec = (ipc_rec_t){.wr_id = wr_id, .kind = REC_SEND, .opcode = PDX_TP_OP_SEND,
                       .signaled = flags & PDX_TP_SIGNALED, .len = len};
    if (len)
        memcpy(rec->data, data, len);
    ipc_ep_flush(ep);    /* the copies it follows go now */
    ipc_ep_progress(ep); /* and it too when none is before it */
    return PDX_OK;
}
