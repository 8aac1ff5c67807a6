/*
 * tcp completion queues: a bounded ring filled by the tp's progress thread
 * and drained by one owner thread (cq_poll). The ring lock is held only to
 * copy entries; an empty CQ is seen without it.
 *
 * Consuming a completion frees the SQ/RQ slots it covers (the signaled WR
 * and the unsignaled ones before it), so an ep never has more completions
 * queued than sq_depth + rq_depth, and ep_create refuses an ep whose depths
 * do not fit in what is left of the CQ: the ring never overflows.
 *
 * cq_fd is an eventfd written only when armed: cq_arm, poll once more, sleep
 * on the fd, cq_ack.
 */
#include "tcp_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

static tcp_cq_t *tcp_cq(pdx_tp_cq_t *cq)
{
    return (tcp_cq_t *)(void *)cq;
}

pdx_status_t tcp_cq_create(pdx_tp_t *ptp, uint32_t depth, pdx_tp_cq_t **cq_p)
{
    tcp_tp_t *tp = tcp_tp(ptp);
    tcp_cq_t *cq;
    int rc;

    if (depth == 0 || depth > 4 * TCP_MAX_DEPTH) {
        pdx_error("tcp: CQ depth %u outside 1..%u", depth, 4 * TCP_MAX_DEPTH);
        return PDX_ERR_INVALID;
    }
    cq = calloc(1, sizeof(*cq));
    if (!cq)
        goto err_nomem;
    cq->ring = calloc(depth, sizeof(*cq->ring));
    if (!cq->ring)
        goto err_free_cq;
    cq->tp = tp;
    cq->depth = depth;
    atomic_init(&cq->count, 0);
    atomic_init(&cq->armed, 0);
    rc = pthread_mutex_init(&cq->lock, NULL);
    if (rc) {
        pdx_error("tcp: mutex init: %s", strerror(rc));
        goto err_free_ring;
    }
    cq->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (cq->efd < 0) {
        pdx_error("tcp: eventfd for a CQ: %s", strerror(errno));
        goto err_mutex;
    }
    pthread_mutex_lock(&tp->obj_lock);
    PDX_LIST_PUSH(tp->cqs, cq);
    pthread_mutex_unlock(&tp->obj_lock);
    *cq_p = (pdx_tp_cq_t *)(void *)cq;
    return PDX_OK;

err_mutex:
    pthread_mutex_destroy(&cq->lock);
err_free_ring:
    free(cq->ring);
    free(cq);
    return PDX_ERR_IO;
err_free_cq:
    free(cq);
err_nomem:
    pdx_error("tcp: out of memory for a CQ of depth %u", depth);
    return PDX_ERR_NOMEM;
}

void tcp_cq_free(tcp_cq_t *cq)
{
    close(cq->efd);
    pthread_mutex_destroy(&cq->lock);
    free(cq->ring);
    free(cq);
}

void tcp_cq_destroy(pdx_tp_cq_t *pcq)
{
    tcp_cq_t *cq = tcp_cq(pcq);
    tcp_tp_t *tp = cq->tp;
    uint32_t nep;

    pthread_mutex_lock(&cq->lock);
    nep = cq->nep;
    pthread_mutex_unlock(&cq->lock);
    if (nep) {
        /* Freeing it would leave eps completing into freed memory. */
        pdx_error("tcp: CQ destroyed while %u endpoints use it; kept until the tp closes", nep);
        return;
    }
    pthread_mutex_lock(&tp->obj_lock);
    PDX_LIST_UNLINK(tp->cqs, cq);
    pthread_mutex_unlock(&tp->obj_lock);
    tcp_cq_free(cq);
}

pdx_status_t tcp_cq_reserve(tcp_cq_t *cq, uint32_t slots)
{
    pdx_status_t status = PDX_OK;

    pthread_mutex_lock(&cq->lock);
    if (slots > cq->depth - cq->reserved) {
        pdx_error("tcp: CQ of depth %u has %u completions left, an endpoint needs %u",
                  cq->depth, cq->depth - cq->reserved, slots);
        status = PDX_ERR_FULL;
    } else {
        cq->reserved += slots;
        cq->nep++;
    }
    pthread_mutex_unlock(&cq->lock);
    return status;
}

void tcp_cq_release(tcp_cq_t *cq, const tcp_ep_t *ep, uint32_t slots)
{
    uint64_t out;

    pthread_mutex_lock(&cq->lock);
    out = cq->head;
    for (uint64_t i = cq->head; i != cq->tail; i++) {
        tcp_cqe_t *e = &cq->ring[i % cq->depth];

        if (e->wc.ep != (const pdx_tp_ep_t *)(const void *)ep)
            cq->ring[out++ % cq->depth] = *e;
    }
    cq->tail = out;
    atomic_store(&cq->count, (uint32_t)(cq->tail - cq->head));
    cq->reserved -= slots;
    cq->nep--;
    pthread_mutex_unlock(&cq->lock);
}

void tcp_cq_push(tcp_cq_t *cq, const tcp_cqe_t *cqe, uint32_t n)
{
    uint32_t room;

    if (n == 0)
        return;
    pthread_mutex_lock(&cq->lock);
    room = cq->depth - (uint32_t)(cq->tail - cq->head);
    if (PDX_UNLIKELY(n > room)) {
        /* Cannot happen while slots are freed only by consumed completions. */
        pdx_error("tcp: CQ overrun (depth %u): %u completions lost", cq->depth, n - room);
        n = room;
    }
    for (uint32_t i = 0; i < n; i++)
        cq->ring[(cq->tail + i) % cq->depth] = cqe[i];
    cq->tail += n;
    atomic_fetch_add(&cq->count, n); /* seq_cst: pairs with cq_arm */
    pthread_mutex_unlock(&cq->lock);
    if (atomic_load(&cq->armed) && atomic_exchange(&cq->armed, 0)) {
        uint64_t one = 1;

        if (write(cq->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
            pdx_error("tcp: CQ eventfd write: %s", strerror(errno));
    }
}

int tcp_cq_poll(pdx_tp_cq_t *pcq, pdx_tp_wc_t *wc, int max)
{
    tcp_cq_t *cq = tcp_cq(pcq);
    uint32_t n;

    if (max <= 0 || atomic_load(&cq->count) == 0) /* seq_cst: pairs with push */
        return 0;
    pthread_mutex_lock(&cq->lock);
    n = (uint32_t)PDX_MIN((uint64_t)max, cq->tail - cq->head);
    for (uint32_t i = 0; i < n; i++) {
        const tcp_cqe_t *e = &cq->ring[(cq->head + i) % cq->depth];
        tcp_ep_t *ep = tcp_ep(e->wc.ep);

        wc[i] = e->wc;
        if (e->sq_slots)
            atomic_fetch_add_explicit(&ep->sq_freed, e->sq_slots, memory_order_release);
        if (e->rq_slots)
            atomic_fetch_add_explicit(&ep->rq_freed, e->rq_slots, memory_order_release);
    }
    cq->head += n;
    atomic_fetch_sub_explicit(&cq->count, n, memory_order_relaxed);
    pthread_mutex_unlock(&cq->lock);
    return (int)n;
}

pdx_status_t tcp_cq_arm(pdx_tp_cq_t *pcq)
{
    tcp_cq_t *cq = tcp_cq(pcq);

    atomic_store(&cq->armed, 1); /* seq_cst: the caller's next poll sees racing pushes */
    return PDX_OK;
}

int tcp_cq_fd(pdx_tp_cq_t *pcq)
{
    return tcp_cq(pcq)->efd;
}

void tcp_cq_ack(pdx_tp_cq_t *pcq)
{
    tcp_cq_t *cq = tcp_cq(pcq);
    uint64_t v;

    while (read(cq->efd, &v, sizeof(v)) < 0 && errno == EINTR)
        ;
}
