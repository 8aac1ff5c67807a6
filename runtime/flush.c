/*
 * Decode visibility (docs/architecture.md §5): before a decode room whose data all
 * arrived becomes SUCCESS, one RDMA READ per NIC, each over a loopback QP
 * pair of the room's shard on that NIC, reads 8 bytes of this engine's
 * registered memory. A READ completes after the writes its NIC placed
 * before it are visible (the PCIe ordering recipe of RCCL/NCCL); the data
 * of a room may come through any NIC, so kernels launched after SUCCESS
 * see every byte once every NIC's READ completed. One round of READs
 * covers every room queued since the last one.
 *
 * Who does what:
 * - Any thread that counts a room's last notify (a shard, or an API thread
 *   applying held notifies) queues the room on its shard (flush_lock) and
 *   wakes the shard, instead of marking it SUCCESS.
 * - The shard takes the whole queue as a batch, posts the READs, and when
 *   the last completes moves each live room of the batch from TRANSFERRING
 *   to SUCCESS (a room aborted or failed meanwhile stays FAILED); a READ
 *   that fails fails the batch's rooms with the reason, and its pair is
 *   made anew for the next batch (if that fails too, later rooms fail with
 *   it).
 *
 * Which rooms (gpu.c, pdx_gpu_flush_mode): with PDX_FLUSH=on every decode
 * room over rdma; with auto the rooms whose destinations include GPU memory
 * on a device that needs it (amd; an nvidia device below owner-scope write
 * ordering uses the runtime's flush call instead). Host memory needs none;
 * tcp places bytes before the notify and needs none.
 */
#include "shard_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "rooms.h"

#define FLUSH_SQ 4u

uint32_t pdx_flush_cq_depth(const pdx_engine_t *e)
{
    return e->flush ? 2 * (FLUSH_SQ + 1) : 0;
}

/* The loopback pair of NIC k, made anew (the old one, if any, destroyed first). */
static pdx_status_t pair_make(pdx_shard_t *s, uint32_t k)
{
    pdx_engine_t *e = s->engine;
    const pdx_tp_ep_attr_t attr = {.sq_depth = FLUSH_SQ, .rq_depth = 1};
    pdx_tp_ep_t **ep = s->flush_ep[k];
    pdx_tp_addr_t addr[2];
    pdx_status_t st = PDX_OK;

    for (int i = 0; i < 2; i++)
        if (ep[i]) {
            e->ops->ep_destroy(ep[i]);
            ep[i] = NULL;
        }
    for (int i = 0; i < 2 && st == PDX_OK; i++)
        st = e->ops->ep_create(e->tps[k], s->cq[k], &attr, &ep[i]);
    if (st != PDX_OK)
        return st; /* the transport said why */
    e->ops->ep_address(ep[0], &addr[0]);
    e->ops->ep_address(ep[1], &addr[1]);
    st = e->ops->ep_connect(ep[0], &addr[1]);
    if (st == PDX_OK)
        st = e->ops->ep_connect(ep[1], &addr[0]);
    return st;
}

/* After an error: a fresh pair for the next batch, or why there is none. */
static void pair_rebuild(pdx_shard_t *s, uint32_t k)
{
    pdx_status_t st = pair_make(s, k);

    if (st != PDX_OK)
        snprintf(s->flush_broken, sizeof(s->flush_broken), "no new flush endpoints on NIC %u: "
                 "%s", k, pdx_status_str(st));
}

pdx_status_t pdx_flush_init(pdx_shard_t *s)
{
    pdx_engine_t *e = s->engine;
    pdx_status_t st;
    void *buf;

    pthread_mutex_init(&s->flush_lock, NULL);
    s->flush_target = -1;
    if (!e->flush)
        return PDX_OK;
    s->flush_cap = 2 * e->cfg.rooms; /* a room's layers, then its end */
    s->flush_q = calloc(s->flush_cap, sizeof(*s->flush_q));
    s->flush_batch = calloc(s->flush_cap, sizeof(*s->flush_batch));
    if (!s->flush_q || !s->flush_batch || posix_memalign(&buf, PDX_CACHELINE, PDX_CACHELINE)) {
        pdx_error("shard %u: out of memory for the flush queue", s->index);
        return PDX_ERR_NOMEM;
    }
    s->flush_buf = memset(buf, 0, PDX_CACHELINE);
    /* On failure pdx_flush_fini undoes the rest; the transport said why. */
    for (uint32_t k = 0; k < e->ntps; k++) {
        st = e->ops->mr_reg(e->tps[k], s->flush_buf, PDX_CACHELINE, PDX_TP_ACCESS_LOCAL_WRITE,
                            &s->flush_mr[k]);
        if (st == PDX_OK)
            st = pair_make(s, k);
        if (st != PDX_OK)
            return st;
    }
    return PDX_OK;
}

static void flush_unpin(pdx_engine_t *e, pdx_shard_t *s);

void pdx_flush_fini(pdx_shard_t *s)
{
    pdx_engine_t *e = s->engine;

    flush_unpin(e, s); /* a READ still in flight at teardown */
    for (uint32_t k = 0; k < PDX_MAX_NICS; k++) {
        for (int i = 0; i < 2; i++)
            if (s->flush_ep[k][i]) {
                e->ops->ep_destroy(s->flush_ep[k][i]);
                s->flush_ep[k][i] = NULL;
            }
        if (s->flush_mr[k] && e->ops->mr_dereg(s->flush_mr[k]) != PDX_OK)
            pdx_warn("shard %u: the flush buffer could not be deregistered", s->index);
        s->flush_mr[k] = NULL;
    }
    free(s->flush_buf);
    free(s->flush_q);
    free(s->flush_batch);
    s->flush_buf = NULL;
    s->flush_q = s->flush_batch = NULL;
    pthread_mutex_destroy(&s->flush_lock);
}

bool pdx_flush_defer(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room)
{
    pdx_shard_t *s = pdx_room_shard(e, room);
    bool queued = false;

    if (!e->flush)
        return false;
    pthread_mutex_lock(&s->flush_lock);
    if (s->flush_n < s->flush_cap) {
        s->flush_q[s->flush_n++] = (pdx_flush_entry_t){obj, room};
        queued = true;
    }
    pthread_mutex_unlock(&s->flush_lock);
    if (!queued) {
        /* More rooms than the table holds cannot wait: never reached. */
        pdx_rooms_fail_id(e, obj, room, PDX_ERR_FULL, "the flush queue of shard %u is full",
                          s->index);
        return true;
    }
    atomic_store_explicit(&s->flush_pending, 1, memory_order_release);
    pdx_shard_wake(s);
    return true;
}

/*
 * The READs' target: 8 bytes of a region this engine registered, pinned
 * (users) while the READs are in flight so pdx_mem_deregister refuses it.
 * A READ of GPU memory orders the NIC's earlier writes into that GPU: with
 * one GPU per engine any of its GPU regions serves. Without one (PDX_FLUSH=on
 * over host memory) the first region serves.
 */
static const pdx_mem_t *flush_target(pdx_engine_t *e, pdx_shard_t *s)
{
    const pdx_mem_t *found = NULL;

    pthread_mutex_lock(&e->lock);
    for (int pass = 0; pass < 2 && !found; pass++) { /* GPU regions first */
        for (uint32_t i = 0; i < PDX_MAX_MEMS && !found; i++) {
            pdx_mem_t *m = &e->mems[i];

            if (m->used && m->len >= 8 && (pass || m->reg->gpu)) {
                atomic_fetch_add(&m->users, 1);
                s->flush_target = (int32_t)i;
                found = m;
            }
        }
    }
    pthread_mutex_unlock(&e->lock);
    return found;
}

static void flush_unpin(pdx_engine_t *e, pdx_shard_t *s)
{
    if (s->flush_target >= 0)
        atomic_fetch_sub(&e->mems[s->flush_target].users, 1);
    s->flush_target = -1;
}

static void fail_batch(pdx_shard_loop_t *L, pdx_status_t status, const char *why)
{
    pdx_shard_t *s = L->s;

    for (uint32_t i = 0; i < s->flush_nbatch; i++)
        pdx_rooms_fail_id(L->e, s->flush_batch[i].obj, s->flush_batch[i].room, status,
                          "the flush read before SUCCESS failed: %s", why);
    s->flush_nbatch = 0;
}

/* NIC k's READ failed (status, the ep's reason): the batch will fail with
 * the first reason; the pair is made anew for the next batch. */
static void read_failed(pdx_shard_t *s, uint32_t k, pdx_status_t status)
{
    pdx_engine_t *e = s->engine;
    const char *why = e->ops->ep_error(s->flush_ep[k][0]);

    if (!why[0])
        why = pdx_status_str(status);
    pdx_error("shard %u: the flush read on NIC %u failed: %s", s->index, k, why);
    if (s->flush_status == PDX_OK) {
        s->flush_status = status;
        if (e->ntps > 1)
            snprintf(s->flush_err, sizeof(s->flush_err), "NIC %u: %s", k, why);
        else
            snprintf(s->flush_err, sizeof(s->flush_err), "%s", why);
    }
    pair_rebuild(s, k); /* why is the old ep's: used up */
}

/* Every READ of the round is back: the batch's rooms succeed or fail. */
static void round_done(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;

    L->progress = true;
    flush_unpin(e, s);
    if (s->flush_status != PDX_OK) {
        fail_batch(L, s->flush_status, s->flush_err);
        s->flush_status = PDX_OK;
        return;
    }
    /* Each the same room still: live, TRANSFERRING and every sender done (a
     * slot recycled for a new room of the same id is not). */
    for (uint32_t i = 0; i < s->flush_nbatch; i++) {
        pdx_layers_flushed(e, s->flush_batch[i].obj, s->flush_batch[i].room);
        pdx_rooms_arrive(e, s->flush_batch[i].obj, s->flush_batch[i].room);
    }
    atomic_fetch_add_explicit(&s->stats.flushes, 1, memory_order_relaxed);
    s->flush_nbatch = 0;
}

void pdx_flush_run(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;
    const pdx_mem_t *target;

    if (s->flush_reads || !atomic_load_explicit(&s->flush_pending, memory_order_acquire))
        return;
    pthread_mutex_lock(&s->flush_lock);
    memcpy(s->flush_batch, s->flush_q, s->flush_n * sizeof(*s->flush_q));
    s->flush_nbatch = s->flush_n;
    s->flush_n = 0;
    atomic_store_explicit(&s->flush_pending, 0, memory_order_relaxed);
    pthread_mutex_unlock(&s->flush_lock);
    L->progress = true;
    if (s->flush_broken[0]) {
        fail_batch(L, PDX_ERR_IO, s->flush_broken);
        return;
    }
    target = flush_target(e, s);
    if (!target) {
        fail_batch(L, PDX_ERR_STATE, "no registered memory to read");
        return;
    }
    s->flush_status = PDX_OK;
    for (uint32_t k = 0; k < e->ntps; k++) {
        const pdx_tp_rkey_t *t = &target->rkey[k];
        pdx_status_t st = e->ops->post_read(s->flush_ep[k][0], k, s->flush_mr[k], 8u * k, 8,
                                            t->addr, t->rkey);

        if (st != PDX_OK)
            read_failed(s, k, st);
        else
            s->flush_reads++;
    }
    if (s->flush_reads == 0)
        round_done(L);
}

bool pdx_flush_on_wc(pdx_shard_loop_t *L, const pdx_tp_wc_t *wc)
{
    pdx_shard_t *s = L->s;
    uint32_t k;

    for (k = 0; k < L->e->ntps; k++)
        if (wc->ep == s->flush_ep[k][0] || wc->ep == s->flush_ep[k][1])
            break;
    if (k == L->e->ntps)
        return false;
    if (wc->ep != s->flush_ep[k][0])
        return true; /* only READs are posted, on [0] */
    if (wc->status != PDX_OK)
        read_failed(s, k, wc->status);
    if (--s->flush_reads == 0)
        round_done(L);
    return true;
}
