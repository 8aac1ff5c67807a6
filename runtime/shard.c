/*
 * Shard workers: one thread per shard moves the chunks of the rooms that
 * hash to it onto the wire.
 *
 * DESIGN
 * - What the thread does: it pops chunks from its submission ring into the
 *   FIFO of their room and keeps rooms with chunks on an active list; for
 *   each active room it works the head chunk only (gate, plan, post the
 *   writes striped over the room's endpoints, aux, notifies), so a closed
 *   gate, missing metadata or a full send queue never holds up another room.
 *   It polls its completion queues (one per NIC, more when endpoints fill
 *   them): a write completion retires the WRs of its room that it covers (a
 *   room whose last chunk's WRs all completed becomes SUCCESS), error
 *   completions fail the rooms of the failed WRs and reset the endpoint;
 *   notify receives go to pdx_rooms_on_notify, are reposted and returned to
 *   the sender as credit records on the endpoint itself (shard_send.c,
 *   shard_cq.c). It drops the endpoints of retired peers once they drained.
 * - What feeds it: the ring (pdx_send on any thread pushes, then calls
 *   pdx_shard_wake), room metadata (the control thread publishes it, then
 *   calls pdx_shard_wake), endpoints (the control thread adds them with
 *   pdx_shard_add_dep and publishes them with pdx_dep_connect), and the
 *   CQs (completions, and the peers' credit records).
 * - Locks: none of its own. The post path takes none, allocates nothing
 *   and makes no syscall but the transport's post calls (and their wakeup
 *   of a sleeping progress thread). Failure, notify and credit handling call
 *   into rooms.c and peer.c, which lock briefly (ext->lock, out_lock); the
 *   worker never holds a lock across them.
 * - Invariant: a room's sending state (the (shard) fields of its
 *   pdx_room_ext_t) and its inflight count are only touched by its shard;
 *   a dep's send queue and receives only by the shard that owns it.
 *   The worker's last access to a room is the release decrement of `queued`
 *   or `inflight` that lets pdx_release free it.
 * - Sleeping: after PDX_SHARD_SPIN_US of polling without work, arm the
 *   CQ, set `sleeping`, make one more pass (pdx_shard_wake pairs with it:
 *   both sides read-modify-write `sleeping`), then sleep in epoll on the CQ
 *   fd and the eventfd: with no timeout when idle (an idle engine's workers
 *   never wake); while gates are pending, until the next poll one of them
 *   needs (PDX_GATE_BACKOFF_US, longer for gates closed long, shorter up
 *   to the next age at which gates opened before), and not at all while
 *   one is due (gate_hist.h). The thread's timer slack is 1 us, so a sleep
 *   is as long as asked and not 50 us more.
 */
#include "shard_loop.h"
#include "peer.h"
#include "rooms.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ctrl.h"
#include "epoll.h"
#include "log.h"
#include "thread.h"

/*
 * A shard has a CQ per NIC, for the endpoints on that NIC. A CQ takes
 * every completion its endpoints can have outstanding: an endpoint holds
 * sq_depth + PDX_NOTIFY_RQ of it (a transport refuses one that does not
 * fit: PDX_ERR_FULL). It is sized for PDX_MAX_PEERS peers of qps_per_peer
 * endpoints each, capped at PDX_SHARD_CQ_MAX; with the defaults
 * (2 x (256 + 64) x 64 = 40960) every peer fits. Peers that need more (more
 * QPs, or more NICs than this engine: their lanes share our NICs) get
 * another CQ of the NIC when the first is full, up to PDX_SHARD_MAX_CQS in
 * all; the shard polls and arms every one.
 */
#define PDX_SHARD_CQ_MAX   (1u << 18)
#define PDX_SHARD_RETRY_US 1000u      /* sleep while a credit record waits for a slot */
#define PDX_SHARD_JOIN_MS  10000u

enum { EV_WAKE = 0, EV_CQ = 1 }; /* EV_CQ + i: shard->cq[i] */
#define EV_MAX (1 + PDX_SHARD_MAX_CQS)

static uint32_t shard_cq_depth(const pdx_config_t *cfg)
{
    uint64_t depth = (uint64_t)PDX_MAX_PEERS * cfg->qps_per_peer *
                     ((uint64_t)cfg->sq_depth + PDX_NOTIFY_RQ);

    return (uint32_t)PDX_MIN(depth, (uint64_t)PDX_SHARD_CQ_MAX);
}

static pdx_status_t shard_epoll_add(pdx_shard_t *s, int fd, uint32_t tag)
{
    return pdx_epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, EPOLLIN, (epoll_data_t){.u32 = tag},
                         "shard %u", s->index);
}

pdx_status_t pdx_shard_init(pdx_engine_t *e, pdx_shard_t *s, uint32_t index)
{
    const pdx_config_t *cfg = &e->cfg;
    pdx_status_t status;

    memset(s, 0, sizeof(*s));
    s->engine = e;
    s->index = index;
    s->wake_fd = -1;
    s->epfd = -1;
    s->active_head = s->active_tail = PDX_SHARD_NONE;
    atomic_init(&s->stop, 0);
    atomic_init(&s->sleeping, 0);
    atomic_init(&s->ndeps, 0);
    atomic_init(&s->doomed, 0);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(s->deps); i++)
        atomic_init(&s->deps[i], NULL);
    pthread_mutex_init(&s->deps_lock, NULL);

    status = pdx_ring_init(&s->ring, cfg->ring_chunks, cfg->ring_pages);
    if (status != PDX_OK) {
        pdx_error("PDX_RING_CHUNKS=%u, PDX_RING_PAGES=%u: shard %u has no memory for its "
                  "ring (%s): lower them", cfg->ring_chunks, cfg->ring_pages, index,
                  pdx_status_str(status));
        return status;
    }
    pdx_ring_prefer_node(&s->ring, e->mem_node);
    pdx_ring_populate(&s->ring);
    s->cell_next = malloc((size_t)s->ring.nchunks * sizeof(*s->cell_next));
    if (!s->cell_next) {
        pdx_error("shard %u: out of memory for %u ring links", index, s->ring.nchunks);
        status = PDX_ERR_NOMEM;
        goto err_ring;
    }
    for (uint32_t i = 0; i < s->ring.nchunks; i++)
        s->cell_next[i] = PDX_SHARD_NONE;
    if (e->ipc && !(s->page_bufs = malloc(PDX_LAYOUT_MAX_BUFFERS * sizeof(*s->page_bufs)))) {
        pdx_error("shard %u: out of memory for its page-copy tables", index);
        status = PDX_ERR_NOMEM;
        goto err_links;
    }

    status = PDX_ERR_IO;
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->wake_fd < 0) {
        pdx_error("shard %u: eventfd: %s", index, strerror(errno));
        goto err_links;
    }
    for (uint32_t k = 0; k < e->ntps; k++) {
        status = e->ops->cq_create(e->tps[k], shard_cq_depth(cfg) + pdx_flush_cq_depth(e),
                                   &s->cq[k]);
        if (status != PDX_OK)
            goto err_cq; /* the transport said why */
        s->cq_nic[k] = k;
        s->cq_room[k] = shard_cq_depth(cfg); /* the flush pair has the rest */
    }
    atomic_init(&s->ncq, e->ntps);
    status = PDX_ERR_IO;
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        pdx_error("shard %u: epoll_create1: %s", index, strerror(errno));
        goto err_cq;
    }
    if (shard_epoll_add(s, s->wake_fd, EV_WAKE) != PDX_OK)
        goto err_epoll;
    for (uint32_t k = 0; k < e->ntps; k++)
        if (shard_epoll_add(s, e->ops->cq_fd(s->cq[k]), EV_CQ + k) != PDX_OK)
            goto err_epoll;
    status = pdx_flush_init(s);
    if (status != PDX_OK)
        goto err_flush;
    return PDX_OK;

err_flush:
    pdx_flush_fini(s);
err_epoll:
    close(s->epfd);
    s->epfd = -1;
err_cq:
    for (uint32_t k = 0; k < PDX_SHARD_MAX_CQS; k++)
        if (s->cq[k]) {
            e->ops->cq_destroy(s->cq[k]);
            s->cq[k] = NULL;
        }
    close(s->wake_fd);
    s->wake_fd = -1;
err_links:
    free(s->page_bufs);
    s->page_bufs = NULL;
    free(s->cell_next);
    s->cell_next = NULL;
err_ring:
    pdx_ring_fini(&s->ring);
    pthread_mutex_destroy(&s->deps_lock);
    s->engine = NULL; /* pdx_shard_fini() of it does nothing */
    return status;
}

void pdx_shard_fini(pdx_shard_t *s)
{
    pdx_engine_t *e = s->engine;
    uint32_t ndeps;

    if (!e)
        return;
    if (s->running) {
        /* Freeing under a running worker would be worse than the leak. */
        pdx_error("shard %u: worker still running; its memory is kept", s->index);
        return;
    }
    ndeps = atomic_load_explicit(&s->ndeps, memory_order_acquire);
    for (uint32_t i = 0; i < ndeps; i++) {
        pdx_dep_t *dep = atomic_load_explicit(&s->deps[i], memory_order_acquire);

        if (dep)
            pdx_dep_free(e, dep);
        atomic_store_explicit(&s->deps[i], NULL, memory_order_relaxed);
    }
    atomic_store_explicit(&s->ndeps, 0, memory_order_relaxed);
    /* Chunks never taken by the worker give their gate words back. */
    for (pdx_ring_cell_t *cell; (cell = pdx_ring_pop(&s->ring));) {
        pdx_gpu_gate_done(e, &cell->chunk.gate);
        pdx_ring_done(&s->ring, cell);
    }
    pdx_flush_fini(s);
    close(s->epfd);
    for (uint32_t k = 0; k < atomic_load_explicit(&s->ncq, memory_order_relaxed); k++) {
        e->ops->cq_destroy(s->cq[k]);
        s->cq[k] = NULL;
    }
    atomic_store_explicit(&s->ncq, 0, memory_order_relaxed);
    close(s->wake_fd);
    free(s->cell_next);
    free(s->page_bufs);
    s->page_bufs = NULL;
    pdx_ring_fini(&s->ring);
    pthread_mutex_destroy(&s->deps_lock);
    s->cell_next = NULL;
    s->epfd = s->wake_fd = -1;
    s->engine = NULL;
}

static void shard_kick(pdx_shard_t *s)
{
    uint64_t one = 1;

    if (write(s->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        pdx_error("shard %u: eventfd write: %s", s->index, strerror(errno));
}

bool pdx_shard_wake(pdx_shard_t *s)
{
    /*
     * A read-modify-write, like the worker's when it announces its sleep:
     * RMWs of one variable are totally ordered, so either this one reads 1
     * (the worker sleeps or is about to: kick it), or the worker's reads
     * from this one and acquires the caller's stores (ring cell, ndests,
     * credits) before its last pass. No fence: sanitizers see it all.
     */
    if (PDX_LIKELY(!atomic_fetch_or_explicit(&s->sleeping, 0, memory_order_acq_rel)))
        return false;
    shard_kick(s);
    return true;
}

/* -------------------------------------------------------------- endpoints */

/* A CQ of NIC nic with room for `need` entries, made when none has it
 * (control thread); NULL when no more may be made (logged). */
static pdx_tp_cq_t *cq_with_room(pdx_shard_t *s, uint32_t nic, uint32_t need, uint32_t *i_p)
{
    pdx_engine_t *e = s->engine;
    uint32_t n = atomic_load_explicit(&s->ncq, memory_order_relaxed);
    const uint32_t depth = PDX_MAX(shard_cq_depth(&e->cfg), need);
    pdx_tp_cq_t *cq;

    for (uint32_t i = 0; i < n; i++)
        if (s->cq_nic[i] == nic && s->cq_room[i] >= need) {
            *i_p = i;
            return s->cq[i];
        }
    if (n == PDX_SHARD_MAX_CQS) {
        pdx_error("shard %u: its %u CQs are full: no room for another endpoint on NIC %u",
                  s->index, n, nic);
        return NULL;
    }
    if (e->ops->cq_create(e->tps[nic], depth, &cq) != PDX_OK)
        return NULL; /* the transport said why */
    if (shard_epoll_add(s, e->ops->cq_fd(cq), EV_CQ + n) != PDX_OK) {
        e->ops->cq_destroy(cq);
        return NULL;
    }
    s->cq[n] = cq;
    s->cq_nic[n] = nic;
    s->cq_room[n] = depth;
    /* the worker polls and arms it from its next pass (a connect wakes it) */
    atomic_store_explicit(&s->ncq, n + 1, memory_order_release);
    pdx_info("shard %u: CQ %u (NIC %u, %u entries): the others are full", s->index, n, nic,
             depth);
    *i_p = n;
    return cq;
}

pdx_status_t pdx_shard_add_dep(pdx_shard_t *s, pdx_dep_t *dep)
{
    pdx_engine_t *e = s->engine;
    const bool direct = dep->peer && dep->peer->direct;
    /* GPU copies want deep queues: a batch's runs go in one kernel */
    const pdx_tp_ep_attr_t attr = {.sq_depth = direct ? PDX_MAX(e->cfg.sq_depth,
                                                                PDX_DIRECT_SQ_DEPTH)
                                                      : e->cfg.sq_depth,
                                   .rq_depth = PDX_NOTIFY_RQ, .direct = direct};
    const size_t rx_len = (size_t)PDX_NOTIFY_RQ * PDX_TP_SEND_MAX;
    uint32_t slot, cq_i = 0;
    pdx_status_t status;
    void *buf;

    if (!dep->peer || dep->peer->id >= PDX_MAX_PEERS) {
        pdx_error("shard %u: data endpoint without a valid peer", s->index);
        return PDX_ERR_INVALID;
    }
    /* A slot a dropped dep left, else the next unused one (the control
     * thread is the only one that adds). */
    pthread_mutex_lock(&s->deps_lock);
    slot = s->nfree ? s->free_slots[--s->nfree]
                    : atomic_load_explicit(&s->ndeps, memory_order_relaxed);
    pthread_mutex_unlock(&s->deps_lock);
    if (slot >= PDX_SHARD_MAX_DEPS) {
        pdx_error("shard %u: already %u data endpoints, the most it holds", s->index, slot);
        return PDX_ERR_FULL;
    }
    dep->shard = s;
    dep->slot = slot;
    dep->sq_depth = attr.sq_depth;
    dep->posted = dep->completed = dep->gated_to = 0;
    dep->reposted = 0;
    dep->ep = NULL;
    dep->rx_mr = NULL;
    atomic_init(&dep->connected, 0);
    atomic_init(&dep->failed, 0);
    atomic_init(&dep->credits, 0);
    atomic_init(&dep->rx_out, 0);
    atomic_init(&dep->epoch, 0);
    atomic_init(&dep->reset, PDX_DEP_RESET_NONE);
    atomic_init(&dep->streak, 0);
    dep->peer_reset = PDX_PEER_RESET_SILENT;
    pthread_mutex_init(&dep->lock, NULL);

    if (dep->nic >= e->ntps) {
        pdx_error("shard %u: data endpoint on NIC %u of %u", s->index, dep->nic, e->ntps);
        status = PDX_ERR_INVALID;
        goto err_slot;
    }
    dep->cq = cq_with_room(s, dep->nic, attr.sq_depth + attr.rq_depth, &cq_i);
    if (!dep->cq) {
        status = PDX_ERR_FULL;
        goto err_slot;
    }
    status = e->ops->ep_create(e->tps[dep->nic], dep->cq, &attr, &dep->ep);
    if (status != PDX_OK)
        goto err_slot; /* the transport said why */
    if (posix_memalign(&buf, PDX_CACHELINE, rx_len)) {
        pdx_error("shard %u: out of memory for notify receive buffers", s->index);
        status = PDX_ERR_NOMEM;
        goto err_ep;
    }
    dep->rx_buf = memset(buf, 0, rx_len);
    status = e->ops->mr_reg(e->tps[dep->nic], dep->rx_buf, rx_len, PDX_TP_ACCESS_LOCAL_WRITE,
                            &dep->rx_mr);
    if (status != PDX_OK)
        goto err_buf;

    /* Until the dep is dropped: a reset reuses it. */
    atomic_fetch_sub_explicit(&s->cq_room[cq_i], attr.sq_depth + attr.rq_depth,
                              memory_order_relaxed);
    dep->cq_i = cq_i;
    dep->in_table = true;
    atomic_fetch_add_explicit(&dep->peer->deps_live, 1, memory_order_relaxed);
    /* One writer (the control thread): the pointer, then the count. */
    atomic_store_explicit(&s->deps[slot], dep, memory_order_release);
    if (slot >= atomic_load_explicit(&s->ndeps, memory_order_relaxed))
        atomic_store_explicit(&s->ndeps, slot + 1, memory_order_release);
    return PDX_OK;

err_buf:
    free(dep->rx_buf);
    dep->rx_buf = NULL;
    dep->rx_mr = NULL;
err_ep:
    e->ops->ep_destroy(dep->ep);
    dep->ep = NULL;
err_slot:
    /* A slot reused or not: a used one goes back (a fresh one never left). */
    pthread_mutex_lock(&s->deps_lock);
    if (slot < atomic_load_explicit(&s->ndeps, memory_order_relaxed))
        s->free_slots[s->nfree++] = (uint16_t)slot;
    pthread_mutex_unlock(&s->deps_lock);
    return status;
}

/*
 * Drop the deps of reaped peers once they drained (every WR and receive of
 * their ep completed): the ep and its buffers are freed, the CQ room and
 * the slot go back, and the peer's count of deps in tables drops (its last
 * touch by this shard: the control thread may retire it at 0).
 */
void pdx_shard_drop_deps(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;
    uint32_t n = atomic_load_explicit(&s->ndeps, memory_order_acquire);

    for (uint32_t i = 0; i < n; i++) {
        pdx_dep_t *dep = atomic_load_explicit(&s->deps[i], memory_order_acquire);
        pdx_peer_t *peer;

        if (!dep || !atomic_load_explicit(&dep->peer->reaped, memory_order_acquire) ||
            atomic_load_explicit(&dep->reset, memory_order_acquire) ||
            dep->completed != dep->posted ||
            atomic_load_explicit(&dep->rx_out, memory_order_relaxed) != 0)
            continue; /* live, its reset not abandoned yet (pdx_shard_resets), or draining */
        peer = dep->peer;
        pthread_mutex_lock(&dep->lock);
        pdx_dep_free(e, dep);
        pthread_mutex_unlock(&dep->lock);
        atomic_store_explicit(&s->deps[i], NULL, memory_order_release);
        atomic_fetch_add_explicit(&s->cq_room[dep->cq_i], dep->sq_depth + PDX_NOTIFY_RQ,
                                  memory_order_relaxed);
        pthread_mutex_lock(&s->deps_lock);
        s->free_slots[s->nfree++] = (uint16_t)i;
        pthread_mutex_unlock(&s->deps_lock);
        atomic_fetch_add_explicit(&s->deps_gen, 1, memory_order_release);
        atomic_fetch_sub_explicit(&s->doomed, 1, memory_order_relaxed);
        L->progress = true;
        if (atomic_fetch_sub_explicit(&peer->deps_live, 1, memory_order_acq_rel) == 1)
            pdx_ctrl_wake(e);
    }
}

/*
 * Group the connected deps by peer id, rebuilt only while the table changes.
 * A peer with a dep not yet connected gets none: its rooms wait, so the set
 * of endpoints a LAST notify counts is the whole set.
 */
void pdx_shard_index_deps(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    uint32_t n = atomic_load_explicit(&s->ndeps, memory_order_acquire);
    uint32_t gen = atomic_load_explicit(&s->deps_gen, memory_order_acquire);
    uint16_t fill[PDX_MAX_PEERS] = {0};
    bool complete = true;

    if (n == L->idx_ndeps && gen == L->idx_gen && L->idx_complete)
        return;
    /* One look at each dep: the connected ones into L->use (scratch) by slot. */
    memset(L->idx_pending, 0, sizeof(L->idx_pending));
    for (uint32_t i = 0; i < n; i++) {
        pdx_dep_t *d = atomic_load_explicit(&s->deps[i], memory_order_acquire);

        L->use[i] = NULL;
        if (!d)
            continue; /* a free slot */
        if (!atomic_load_explicit(&d->connected, memory_order_acquire)) {
            L->idx_pending[d->peer->id] = true;
            /* A failed peer's deps stay unconnected: no reason to rebuild. */
            if (atomic_load_explicit(&d->peer->state, memory_order_acquire) != PDX_PEER_FAILED)
                complete = false;
            continue;
        }
        L->use[i] = d;
        fill[d->peer->id]++;
    }
    /* Counting sort by peer id, slot order within a peer. */
    L->idx_start[0] = 0;
    for (uint32_t p = 0; p < PDX_MAX_PEERS; p++) {
        L->idx_start[p + 1] = (uint16_t)(L->idx_start[p] + fill[p]);
        fill[p] = 0;
    }
    for (uint32_t i = 0; i < n; i++) {
        pdx_dep_t *d = L->use[i];

        if (d)
            L->idx_deps[L->idx_start[d->peer->id] + fill[d->peer->id]++] = d;
    }
    L->idx_ndeps = n;
    L->idx_gen = gen;
    L->idx_complete = complete;
}

uint32_t pdx_shard_peer_deps(pdx_shard_loop_t *L, const pdx_peer_t *peer)
{
    uint32_t n = 0, id = peer->id;

    if (id >= PDX_MAX_PEERS || L->idx_pending[id])
        return 0;
    for (uint32_t i = L->idx_start[id]; i < L->idx_start[id + 1]; i++) {
        pdx_dep_t *dp = L->idx_deps[i];

        if (dp->peer != peer)
            continue;
        /* One failed: the set a room's LAST notifies count must not shrink
         * under it (a room with writes there fails by their flush; the
         * others wait for the reset, or fail with the peer). */
        if (atomic_load_explicit(&dp->failed, memory_order_acquire))
            return 0;
        L->use[n++] = dp;
    }
    return n;
}

bool pdx_shard_peer_resetting(pdx_shard_loop_t *L, const pdx_peer_t *peer)
{
    uint32_t id = peer->id;

    if (id >= PDX_MAX_PEERS)
        return false;
    for (uint32_t i = L->idx_start[id]; i < L->idx_start[id + 1]; i++)
        if (L->idx_deps[i]->peer == peer &&
            atomic_load_explicit(&L->idx_deps[i]->reset, memory_order_acquire))
            return true;
    return false;
}

/* ------------------------------------------------------------------ loop */

void pdx_shard_intake(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;
    pdx_ring_cell_t *cell;

    while ((cell = pdx_ring_pop(&s->ring))) {
        uint32_t idx = (uint32_t)(cell - s->ring.cells);
        pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, cell->chunk.room);
        pdx_room_ext_t *ext;
        int32_t state;

        L->progress = true;
        if (!obj) {
            /* pdx_send holds the room through `queued`: not expected. */
            pdx_warn("shard %u: chunk of room %llu, which is not in the table: dropped",
                     s->index, (unsigned long long)cell->chunk.room);
            pdx_gpu_gate_done(e, &cell->chunk.gate);
            pdx_ring_done(&s->ring, cell);
            continue;
        }
        ext = pdx_room_ext(e, obj);
        state = pdx_room_state(obj);
        if (state == PDX_ROOM_FAILED || state == PDX_ROOM_SUCCESS) {
            pdx_gpu_gate_done(e, &cell->chunk.gate);
            pdx_ring_done(&s->ring, cell);
            atomic_fetch_sub_explicit(&ext->queued, 1, memory_order_release);
            continue;
        }
        s->cell_next[idx] = PDX_SHARD_NONE;
        if (ext->tail_cell == PDX_SHARD_NONE)
            ext->head_cell = idx;
        else
            s->cell_next[ext->tail_cell] = idx;
        ext->tail_cell = idx;
        if (!atomic_load_explicit(&ext->active, memory_order_relaxed)) {
            uint32_t at = (uint32_t)(obj - e->rooms.objs);

            /* Appended: rooms are served oldest first. */
            ext->next_active = PDX_SHARD_NONE;
            if (s->active_tail == PDX_SHARD_NONE)
                s->active_head = at;
            else
                e->ext[s->active_tail].next_active = at;
            s->active_tail = at;
            atomic_store_explicit(&ext->active, true, memory_order_relaxed);
        }
    }
}

/* One pass over everything the worker does; L->progress says if it did. */
static void shard_pass(pdx_shard_loop_t *L)
{
    L->progress = false;
    L->gated = false;
    L->gate_due = false;
    L->gate_wake_ns = UINT64_MAX;
    pdx_shard_poll(L);
    if (atomic_load_explicit(&L->s->resets, memory_order_relaxed))
        pdx_shard_resets(L);
    if (atomic_load_explicit(&L->s->doomed, memory_order_acquire))
        pdx_shard_drop_deps(L);
    if (L->e->flush)
        pdx_flush_run(L);
    pdx_shard_intake(L);
    pdx_shard_send(L);
    if (L->credit_retry)
        pdx_shard_credit_retry(L);
    /* this worker is its only writer */
    atomic_store_explicit(&L->s->passes,
                          atomic_load_explicit(&L->s->passes, memory_order_relaxed) + 1,
                          memory_order_release);
}

/* Sleep in epoll until an event, or a bounded backoff while work is timed:
 * the number of events (0: the backoff ran out). */
static int shard_wait(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;
    struct epoll_event ev[EV_MAX];
    uint64_t us = UINT64_MAX;
    int n;

    if (L->gated) { /* until the next poll of a closed gate */
        const uint64_t now = pdx_now_ns();

        us = L->gate_wake_ns > now ? (L->gate_wake_ns - now + 999u) / 1000u : 0;
    }
    if (L->credit_retry || L->arm_failed)
        us = PDX_MIN(us, (uint64_t)PDX_SHARD_RETRY_US);

    if (us == UINT64_MAX) {
        n = epoll_wait(s->epfd, ev, EV_MAX, -1);
    } else {
        n = -1;
        errno = ENOSYS;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 35))
        if (!L->no_pwait2) {
            struct timespec ts = {.tv_sec = (time_t)(us / 1000000u),
                                  .tv_nsec = (long)(us % 1000000u) * 1000};

            n = epoll_pwait2(s->epfd, ev, EV_MAX, &ts, NULL);
        }
#endif
        if (n < 0 && errno == ENOSYS) {
            L->no_pwait2 = true;
            n = epoll_wait(s->epfd, ev, EV_MAX, (int)((us + 999) / 1000));
        }
    }
    atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->stats.wakeups, 1, memory_order_relaxed);
    if (n < 0) {
        if (errno != EINTR && !L->wait_error) {
            pdx_error("shard %u: epoll_wait: %s", s->index, strerror(errno));
            L->wait_error = true;
        }
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (ev[i].data.u32 == EV_WAKE) {
            uint64_t v;

            if (read(s->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
                pdx_error("shard %u: eventfd read: %s", s->index, strerror(errno));
        } else if (ev[i].data.u32 - EV_CQ < atomic_load_explicit(&s->ncq,
                                                                  memory_order_acquire)) {
            e->ops->cq_ack(s->cq[ev[i].data.u32 - EV_CQ]);
        }
    }
    return n;
}

static void *shard_main(void *arg)
{
    pdx_shard_t *s = arg;
    pdx_engine_t *e = s->engine;
    pdx_shard_loop_t loop = {.s = s, .e = e}; /* on its stack: the loop never allocates */
    pdx_shard_loop_t *L = &loop;
    uint64_t idle_since = 0;
    const uint64_t spin_ns = (uint64_t)e->cfg.shard_spin_us * 1000u;
    bool armed = false, spin = true;
    char name[16];

    snprintf(name, sizeof(name), "pdx-shard%u", s->index);
    pthread_setname_np(pthread_self(), name);
    /* A gate backoff of tens of microseconds means that many, not the
     * default 50 us of timer slack on top. */
    prctl(PR_SET_TIMERSLACK, 1000ul, 0, 0, 0);
    pdx_log_tag(e->sender_id, e->address);
    pdx_gpu_thread_init(e);

    while (!atomic_load_explicit(&s->stop, memory_order_acquire)) {
        shard_pass(L);
        if (L->progress) {
            if (armed) {
                atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
                armed = false;
            }
            idle_since = 0;
            spin = true;
            continue;
        }
        if (L->gate_due) { /* a gate may open any moment now: poll it */
            if (armed) {
                atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
                armed = false;
            }
            pdx_cpu_relax();
            continue;
        }
        if (!armed) {
            uint64_t now = pdx_now_ns();

            /* Spin a little after activity (the next completion is usually
             * close); not after a backoff that ran out (gates only). */
            if (idle_since == 0)
                idle_since = now;
            if (spin && now - idle_since < spin_ns) {
                pdx_cpu_relax();
                continue;
            }
            /* Arm, announce the sleep, then one more pass sees whatever a
             * waker published before it read `sleeping`. */
            for (uint32_t k = 0; k < atomic_load_explicit(&s->ncq, memory_order_acquire); k++)
                if (e->ops->cq_arm(s->cq[k]) != PDX_OK && !L->arm_failed) {
                    pdx_error("shard %u: cannot arm its CQ %u (NIC %u): sleeps are bounded "
                              "from now on", s->index, k, s->cq_nic[k]);
                    L->arm_failed = true; /* no CQ event may come: never sleep unbounded */
                }
            atomic_exchange_explicit(&s->sleeping, 1, memory_order_acq_rel);
            armed = true;
            continue;
        }
        spin = shard_wait(L) > 0;
        armed = false;
        idle_since = 0;
    }
    atomic_store_explicit(&s->sleeping, 0, memory_order_relaxed);
    return NULL;
}

pdx_status_t pdx_shard_start(pdx_shard_t *s)
{
    int rc;

    atomic_store_explicit(&s->stop, 0, memory_order_relaxed);
    rc = pdx_thread_start_on(&s->thread, shard_main, s,
                             s->engine->bind ? &s->engine->cpus : NULL);
    if (rc) {
        pdx_error("shard %u: cannot start its worker: %s", s->index, strerror(rc));
        return PDX_ERR_IO;
    }
    s->running = true;
    return PDX_OK;
}

void pdx_shard_stop(pdx_shard_t *s)
{
    char what[32];

    if (!s->running)
        return;
    atomic_store_explicit(&s->stop, 1, memory_order_release);
    shard_kick(s);
    snprintf(what, sizeof(what), "shard %u's worker", s->index);
    if (!pdx_thread_join(s->thread, PDX_SHARD_JOIN_MS, what))
        return; /* still running: pdx_shard_fini() keeps its memory */
    s->running = false;
}
