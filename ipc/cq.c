/*
 * ipc CQs: the inner CQ's completions, routed to their endpoints, and the
 * direct endpoints' records, in order (ipc.h).
 */
#include "ipc.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "epoll.h"
#include "log.h"
#include "util.h"

#define MAP_TOMB ((const pdx_tp_ep_t *)(uintptr_t)1)
#define SCRATCH  256
#define DESTROY_WAIT_MS 10000u
/* Copies launched this recently keep the shard polling (the fd stays
 * readable) rather than sleeping until a host callback: most finish well
 * within it, and the callback's wake-up costs tens of microseconds. */
#define POLL_COPIES_NS  300000u

static ipc_cq_t *cq_of(pdx_tp_cq_t *cq)
{
    return (ipc_cq_t *)cq;
}

static uint32_t map_hash(const pdx_tp_ep_t *key, uint32_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9e3779b97f4a7c15ull;

    return (uint32_t)(h >> 32) & (cap - 1);
}

static ipc_ep_t *map_find(const ipc_cq_t *cq, const pdx_tp_ep_t *key)
{
    if (!cq->map_cap)
        return NULL;
    for (uint32_t i = map_hash(key, cq->map_cap), n = 0; n < cq->map_cap;
         i = (i + 1) & (cq->map_cap - 1), n++) {
        if (cq->map[i].key == key)
            return cq->map[i].ep;
        if (!cq->map[i].key)
            return NULL;
    }
    return NULL;
}

static void map_put(ipc_map_slot_t *map, uint32_t cap, const pdx_tp_ep_t *key, ipc_ep_t *ep)
{
    uint32_t i = map_hash(key, cap);

    while (map[i].key && map[i].key != MAP_TOMB)
        i = (i + 1) & (cap - 1);
    map[i] = (ipc_map_slot_t){.key = key, .ep = ep};
}

/* Room for one more (tombstones count as used until a regrow drops them). */
static pdx_status_t map_reserve(ipc_cq_t *cq)
{
    ipc_map_slot_t *map;
    uint32_t cap = cq->map_cap ? cq->map_cap : 16;

    if (cq->map_cap && (cq->map_used + 1) * 2 <= cq->map_cap)
        return PDX_OK;
    while ((cq->map_used + 1) * 2 > cap)
        cap *= 2;
    map = calloc(cap, sizeof(*map));
    if (!map)
        return PDX_ERR_NOMEM;
    cq->map_used = 0;
    for (uint32_t i = 0; i < cq->map_cap; i++)
        if (cq->map[i].key && cq->map[i].key != MAP_TOMB) {
            map_put(map, cap, cq->map[i].key, cq->map[i].ep);
            cq->map_used++;
        }
    free(cq->map);
    cq->map = map;
    cq->map_cap = cap;
    return PDX_OK;
}

pdx_status_t ipc_cq_add(ipc_cq_t *cq, ipc_ep_t *ep)
{
    pdx_status_t st;

    pthread_mutex_lock(&cq->lock);
    st = map_reserve(cq);
    if (st != PDX_OK) {
        pthread_mutex_unlock(&cq->lock);
        return st;
    }
    if (ep->direct && cq->ndirect == cq->direct_cap) {
        uint32_t cap = cq->direct_cap ? cq->direct_cap * 2 : 8;
        ipc_ep_t **d = realloc(cq->direct, cap * sizeof(*d));

        if (!d) {
            pthread_mutex_unlock(&cq->lock);
            return PDX_ERR_NOMEM;
        }
        cq->direct = d;
        cq->direct_cap = cap;
    }
    map_put(cq->map, cq->map_cap, ep->in, ep);
    cq->map_used++;
    if (ep->direct) {
        ep->index = cq->ndirect;
        cq->direct[cq->ndirect++] = ep;
    }
    pthread_mutex_unlock(&cq->lock);
    return PDX_OK;
}

void ipc_cq_remove(ipc_cq_t *cq, ipc_ep_t *ep)
{
    pthread_mutex_lock(&cq->lock);
    for (uint32_t i = map_hash(ep->in, cq->map_cap), n = 0; cq->map_cap && n < cq->map_cap;
         i = (i + 1) & (cq->map_cap - 1), n++) {
        if (cq->map[i].key == ep->in) {
            cq->map[i].key = MAP_TOMB;
            break;
        }
        if (!cq->map[i].key)
            break;
    }
    if (ep->direct && ep->index < cq->ndirect && cq->direct[ep->index] == ep) {
        cq->direct[ep->index] = cq->direct[--cq->ndirect];
        cq->direct[ep->index]->index = ep->index;
    }
    pthread_mutex_unlock(&cq->lock);
}

/* The copy stream, made with the first direct endpoint (on the tp's GPU). */
pdx_status_t ipc_cq_stream(ipc_cq_t *cq)
{
    pdx_status_t st;

    if (cq->stream)
        return PDX_OK;
    st = pdx_hip_set_device(cq->tp->gpu);
    if (st == PDX_OK)
        st = pdx_hip_stream_create(&cq->up_stream);
    if (st == PDX_OK)
        st = ipc_gates_alloc(cq);
    if (st == PDX_OK)
        st = pdx_hip_stream_create(&cq->stream);
    return st;
}

pdx_status_t ipc_cq_ring_take(ipc_cq_t *cq, size_t bytes, ipc_ring_t *ring)
{
    pdx_status_t st;

    pthread_mutex_lock(&cq->lock);
    for (uint32_t i = 0; i < cq->nspare; i++)
        if (cq->spare[i].bytes == bytes) {
            *ring = cq->spare[i];
            cq->spare[i] = cq->spare[--cq->nspare];
            pthread_mutex_unlock(&cq->lock);
            return PDX_OK;
        }
    pthread_mutex_unlock(&cq->lock);
    *ring = (ipc_ring_t){.bytes = bytes};
    st = pdx_hip_host_alloc(bytes, (void **)&ring->host);
    if (st == PDX_OK)
        st = pdx_hip_device_alloc(bytes, (void **)&ring->dev);
    if (st != PDX_OK) {
        pdx_hip_host_free(ring->host);
        *ring = (ipc_ring_t){0};
    }
    return st;
}

static void ring_free(const ipc_ring_t *ring)
{
    pdx_hip_host_free(ring->host);
    pdx_hip_device_free(ring->dev);
}

void ipc_cq_ring_put(ipc_cq_t *cq, const ipc_ring_t *ring)
{
    if (!ring->host)
        return;
    pthread_mutex_lock(&cq->lock);
    if (cq->nspare < IPC_SPARE_RINGS) {
        cq->spare[cq->nspare++] = *ring;
        ring = NULL;
    }
    pthread_mutex_unlock(&cq->lock);
    if (ring)
        ring_free(ring);
}

pdx_status_t ipc_cq_create(pdx_tp_t *ptp, uint32_t depth, pdx_tp_cq_t **cq_p)
{
    ipc_tp_t *tp = (ipc_tp_t *)ptp;
    ipc_cq_t *cq = calloc(1, sizeof(*cq));
    pdx_status_t st;

    if (!cq)
        return PDX_ERR_NOMEM;
    cq->tp = tp;
    cq->depth = depth;
    pthread_mutex_init(&cq->lock, NULL);
    cq->epfd = cq->wake_fd = cq->timer_fd = -1;
    cq->scratch_cap = SCRATCH;
    cq->scratch = calloc(SCRATCH, sizeof(*cq->scratch));
    if (!cq->scratch) {
        free(cq);
        return PDX_ERR_NOMEM;
    }
    st = tp->in_ops->cq_create(tp->in, depth, &cq->in);
    if (st != PDX_OK) {
        free(cq->scratch);
        free(cq);
        return st;
    }
    cq->epfd = epoll_create1(EPOLL_CLOEXEC);
    cq->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    cq->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (cq->epfd < 0 || cq->wake_fd < 0 || cq->timer_fd < 0) {
        pdx_error("ipc: CQ: %s: %s", cq->epfd < 0 ? "epoll_create1" : cq->wake_fd < 0 ? "eventfd"
                                                                    : "timerfd_create",
                  strerror(errno));
        st = PDX_ERR_IO;
    }
    if (st == PDX_OK)
        st = pdx_epoll_ctl(cq->epfd, EPOLL_CTL_ADD, tp->in_ops->cq_fd(cq->in), EPOLLIN,
                           (epoll_data_t){.u32 = 0}, "ipc CQ");
    if (st == PDX_OK)
        st = pdx_epoll_ctl(cq->epfd, EPOLL_CTL_ADD, cq->wake_fd, EPOLLIN,
                           (epoll_data_t){.u32 = 1}, "ipc CQ");
    if (st == PDX_OK) /* gated copies: their poll, a deadline */
        st = pdx_epoll_ctl(cq->epfd, EPOLL_CTL_ADD, cq->timer_fd, EPOLLIN,
                           (epoll_data_t){.u32 = 2}, "ipc CQ");
    if (st != PDX_OK) {
        ipc_cq_destroy((pdx_tp_cq_t *)cq);
        return st;
    }
    *cq_p = (pdx_tp_cq_t *)cq;
    return PDX_OK;
}

void ipc_cq_destroy(pdx_tp_cq_t *pcq)
{
    ipc_cq_t *cq = cq_of(pcq);

    if (!cq)
        return;
    /* A host callback still to run writes wake_fd: wait for it (the
     * endpoints, destroyed first, waited for their copies). */
    if (atomic_load_explicit(&cq->callbacks, memory_order_acquire)) {
        uint64_t deadline = pdx_deadline_ns(DESTROY_WAIT_MS);

        while (atomic_load_explicit(&cq->callbacks, memory_order_acquire) &&
               pdx_now_ns() < deadline)
            usleep(100);
        if (atomic_load_explicit(&cq->callbacks, memory_order_acquire)) {
            pdx_error("ipc: a CQ's stream did not finish in %u ms: its memory is kept",
                      DESTROY_WAIT_MS);
            return;
        }
    }
    ipc_gates_destroy(cq);
    for (uint32_t i = 0; i < cq->nspare; i++)
        ring_free(&cq->spare[i]);
    pdx_hip_stream_destroy(cq->stream);
    pdx_hip_stream_destroy(cq->up_stream);
    if (cq->in)
        cq->tp->in_ops->cq_destroy(cq->in);
    if (cq->epfd >= 0)
        close(cq->epfd);
    if (cq->wake_fd >= 0)
        close(cq->wake_fd);
    if (cq->timer_fd >= 0)
        close(cq->timer_fd);
    free(cq->map);
    free(cq->direct);
    free(cq->scratch);
    pthread_mutex_destroy(&cq->lock);
    free(cq);
}

int ipc_cq_poll(pdx_tp_cq_t *pcq, pdx_tp_wc_t *wc, int max)
{
    ipc_cq_t *cq = cq_of(pcq);
    int out = 0, n;

    pthread_mutex_lock(&cq->lock);
    /* Inner completions: passed on (their ep translated), or taken by a
     * direct ep's records. Never more than the caller has room for. */
    while (out < max) {
        int want = (int)PDX_MIN((uint32_t)(max - out), cq->scratch_cap);

        n = cq->tp->in_ops->cq_poll(cq->in, cq->scratch, want);
        for (int i = 0; i < n; i++) {
            pdx_tp_wc_t *w = &cq->scratch[i];
            ipc_ep_t *ep = map_find(cq, w->ep);

            if (!ep)
                continue; /* destroyed: none of its completions is reported */
            w->ep = (pdx_tp_ep_t *)ep;
            if (ep->direct && w->opcode != PDX_TP_OP_RECV)
                ipc_ep_inner_done(ep, w);
            else
                wc[out++] = *w;
        }
        if (n < want)
            break;
    }
    /* every ep progresses; completions leave from a rotating first one */
    for (uint32_t i = 0; i < cq->ndirect; i++)
        ipc_ep_progress(cq->direct[i]);
    for (uint32_t i = 0; i < cq->ndirect && out < max; i++)
        out += ipc_ep_emit(cq->direct[(cq->next_ep + i) % cq->ndirect], wc + out, max - out);
    if (cq->ndirect)
        cq->next_ep = (cq->next_ep + 1) % cq->ndirect;
    pthread_mutex_unlock(&cq->lock);
    return out;
}

static void wake(void *arg)
{
    ipc_cq_t *cq = arg;
    uint64_t one = 1;

    if (write(cq->wake_fd, &one, sizeof(one)) < 0) {
        /* EAGAIN: the counter is full, the fd readable anyway */
    }
    atomic_fetch_sub_explicit(&cq->callbacks, 1, memory_order_release);
}

pdx_status_t ipc_cq_arm(pdx_tp_cq_t *pcq)
{
    ipc_cq_t *cq = cq_of(pcq);
    pdx_status_t st = cq->tp->in_ops->cq_arm(cq->in);
    uint64_t oldest = UINT64_MAX, expiry = UINT64_MAX;
    bool copies = false, own = false, gated = false, spin;

    pthread_mutex_lock(&cq->lock);
    for (uint32_t i = 0; i < cq->ndirect; i++) {
        ipc_ep_flush(cq->direct[i]); /* nothing waits in the open batch while we sleep */
        copies = copies || ipc_ep_copies_pending(cq->direct[i]);
        own = own || ipc_ep_stream_pending(cq->direct[i]);
        gated = gated || cq->direct[i]->gated;
        oldest = PDX_MIN(oldest, ipc_ep_oldest_ns(cq->direct[i]));
        expiry = PDX_MIN(expiry, ipc_ep_expiry(cq->direct[i]));
    }
    if (cq->naside)
        ipc_gates_reclaim(cq);
    pthread_mutex_unlock(&cq->lock);
    /* Gated copies are polled, as the shard polls a gate on the host: a
     * copy starts when its gate opens, and the shard sees it done within a
     * poll (a host callback would wake it later, and hold up the GPU's
     * queue meanwhile). */
    if (gated && cq->tp->gate_poll_ns)
        expiry = PDX_MIN(expiry, pdx_now_ns() + cq->tp->gate_poll_ns);
    spin = (gated && !cq->tp->gate_poll_ns) ||
           (copies && oldest != UINT64_MAX && pdx_now_ns() - oldest < POLL_COPIES_NS);
    if (st == PDX_OK && expiry != UINT64_MAX) {
        /* wake up to poll gated copies, or when one is to be given up (1 ns
         * after: not 0, which disarms) */
        struct itimerspec at = {.it_value = {.tv_sec = (time_t)((expiry + 1) / 1000000000u),
                                             .tv_nsec = (long)((expiry + 1) % 1000000000u)}};

        if (timerfd_settime(cq->timer_fd, TFD_TIMER_ABSTIME, &at, NULL) != 0) {
            pdx_error("ipc: CQ: timerfd_settime: %s", strerror(errno));
            st = PDX_ERR_IO;
        }
    }
    if (st == PDX_OK && spin) {
        uint64_t one = 1;

        if (write(cq->wake_fd, &one, sizeof(one)) < 0) {
            /* EAGAIN: the counter is full, the fd readable anyway */
        }
        return PDX_OK;
    }
    /* Copies in flight: a callback after them makes the fd readable. One
     * enqueued after the last launch covers them all (it runs once every
     * copy before it finished); a launch since then needs another. */
    if (st == PDX_OK && own &&
        (cq->cb_launches != cq->launches ||
         !atomic_load_explicit(&cq->callbacks, memory_order_acquire))) {
        atomic_fetch_add_explicit(&cq->callbacks, 1, memory_order_acq_rel);
        st = pdx_hip_stream_callback(cq->stream, wake, cq);
        if (st != PDX_OK)
            atomic_fetch_sub_explicit(&cq->callbacks, 1, memory_order_release);
        else
            cq->cb_launches = cq->launches;
    }
    return st;
}

int ipc_cq_fd(pdx_tp_cq_t *pcq)
{
    return cq_of(pcq)->epfd;
}

void ipc_cq_ack(pdx_tp_cq_t *pcq)
{
    ipc_cq_t *cq = cq_of(pcq);
    struct pollfd p = {.fd = cq->tp->in_ops->cq_fd(cq->in), .events = POLLIN};
    uint64_t v;

    if (read(cq->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        pdx_error("ipc: CQ eventfd read: %s", strerror(errno));
    if (read(cq->timer_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
        pdx_error("ipc: CQ timerfd read: %s", strerror(errno));
    if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
        cq->tp->in_ops->cq_ack(cq->in);
}
