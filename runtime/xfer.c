/*
 * xfer: one-sided transfers by memory descriptor (pdx.h).
 *
 * A transfer is a prefill room of its own: an id with PDX_XFER_ROOM_BIT,
 * one destination (the peer the descriptors name) and one chunk, flagged
 * last, whose job holds the transfer's runs. Everything after the queueing
 * is the rooms' machinery: the shard that the id hashes to waits for the
 * gate, plans the runs (pdx_plan_init_runs: cut at max_msg_size and at
 * pieces), posts them striped over its endpoints to the peer as far as the
 * send queues reach, and the room becomes SUCCESS as its last WR completes
 * (no notify: the peer knows nothing of it). Failures, deadlines (the sweep),
 * a gone peer and release are the rooms' too; a failed transfer tells
 * nobody.
 *
 * Everything is checked here, before the room exists: every local range
 * against its registered region, every remote range against the region the
 * descriptor names, and that descriptor against what the peer described to
 * us (a region deregistered since is refused). The shard checks each WR
 * against both regions again.
 */
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "rooms.h"
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

typedef pdx_mem_desc_info_t remote_t;

/* A READ's regions where the transport reads host memory only. */
static pdx_status_t read_host_only(const pdx_engine_t *e, bool gpu, const char *whose,
                                   uint32_t mem)
{
    if (!gpu || (e->ops->caps & PDX_TP_CAP_READ_DEVICE))
        return PDX_OK;
    pdx_error("pdx_xfer_post: the %s transport reads host memory only; %s region %u is GPU "
              "memory", e->ops->name, whose, mem);
    return PDX_ERR_UNSUPPORTED;
}

/* The peer all descriptors name, and each region; a reference to the peer. */
static pdx_status_t resolve(pdx_engine_t *e, const pdx_desc_t *remotes, uint32_t n,
                            remote_t *out, pdx_peer_t **peer_p)
{
    pdx_mem_desc_info_t info;
    pdx_peer_t *peer;
    pdx_status_t st;

    if (!remotes[0].bytes)
        return PDX_ERR_INVALID;
    st = pdx_mem_desc_info(remotes[0].bytes, remotes[0].len, &info);
    if (st != PDX_OK)
        return st;
    if (info.engine == e->sender_id) {
        pdx_error("pdx_xfer_post: the descriptors name this engine's own memory");
        return PDX_ERR_INVALID;
    }
    peer = pdx_desc_peer(e, info.engine);
    if (!peer) {
        pdx_error("pdx_xfer_post: no connection to engine %016llx: pdx_peer_connect_desc() "
                  "first", (unsigned long long)info.engine);
        return PDX_ERR_NOT_FOUND;
    }
    for (uint32_t i = 0; i < n; i++) {
        st = remotes[i].bytes ? pdx_desc_mem_of_peer(peer, remotes[i].bytes, remotes[i].len,
                                                     &out[i])
                              : PDX_ERR_INVALID;
        if (st != PDX_OK) {
            pdx_peer_put(peer);
            return st;
        }
    }
    *peer_p = peer;
    return PDX_OK;
}

/* The entries as runs into job (src: local, dst: remote), coalesced. */
static pdx_status_t make_runs(const pdx_engine_t *e, pdx_xfer_job_t *job, const remote_t *rem,
                              uint32_t nrem, const pdx_xfer_entry_t *entries, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        const pdx_xfer_entry_t *x = &entries[i];
        pdx_status_t st;

        if (x->remote >= nrem || x->len == 0) {
            pdx_error("pdx_xfer_post: entry %u: %s", i, x->len ? "no such remote descriptor"
                                                               : "0 bytes");
            return PDX_ERR_INVALID;
        }
        if (x->remote_offset > rem[x->remote].len || x->len > rem[x->remote].len -
                                                                  x->remote_offset) {
            pdx_error("pdx_xfer_post: entry %u: %llu bytes at offset %llu pass the end of the "
                      "remote region (%llu bytes)", i, (unsigned long long)x->len,
                      (unsigned long long)x->remote_offset,
                      (unsigned long long)rem[x->remote].len);
            return PDX_ERR_RANGE;
        }
        if (job->op == PDX_XFER_READ &&
            (st = read_host_only(e, rem[x->remote].flags & PDX_MEM_DESC_GPU, "the remote",
                                 rem[x->remote].mem)) != PDX_OK)
            return st;
        job->runs[i] = (pdx_run_t){.src_mem = x->mem, .dst_mem = rem[x->remote].mem,
                                   .src_offset = x->offset, .dst_offset = x->remote_offset,
                                   .len = x->len};
    }
    job->nruns = pdx_plan_coalesce(job->runs, n);
    return PDX_OK;
}

static void unpin(pdx_engine_t *e, const pdx_xfer_job_t *job)
{
    for (uint32_t i = 0; i < job->npinned; i++)
        atomic_fetch_sub(&e->mems[job->pinned[i]].users, 1);
}

/* Check every run against its local region and pin each region once. */
static pdx_status_t pin(pdx_engine_t *e, pdx_xfer_job_t *job)
{
    uint64_t seen[PDX_MAX_MEMS / 64] = {0};
    pdx_status_t st = PDX_OK;

    job->npinned = 0;
    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < job->nruns && st == PDX_OK; i++) {
        const pdx_run_t *r = &job->runs[i];
        pdx_mem_t *m;

        if (pdx_engine_mem_lookup(e, r->src_mem, &m) != PDX_OK) {
            pdx_error("pdx_xfer_post: memory %u is not registered", r->src_mem);
            st = PDX_ERR_NOT_FOUND;
        } else if (r->src_offset > m->len || r->len > m->len - r->src_offset) {
            pdx_error("pdx_xfer_post: %llu bytes at offset %llu pass the end of memory %u "
                      "(%zu bytes)", (unsigned long long)r->len,
                      (unsigned long long)r->src_offset, r->src_mem, m->len);
            st = PDX_ERR_RANGE;
        } else if (job->op == PDX_XFER_READ &&
                   (st = read_host_only(e, m->reg && m->reg->gpu, "local",
                                        r->src_mem)) != PDX_OK) {
            break;
        } else if (!(seen[r->src_mem / 64] >> (r->src_mem % 64) & 1)) {
            seen[r->src_mem / 64] |= 1ull << (r->src_mem % 64);
            atomic_fetch_add(&m->users, 1);
            job->pinned[job->npinned++] = r->src_mem;
        }
    }
    pthread_mutex_unlock(&e->lock);
    if (st != PDX_OK) {
        unpin(e, job);
        job->npinned = 0;
    }
    return st;
}

void pdx_xfer_job_free(pdx_engine_t *e, pdx_xfer_job_t *job)
{
    if (!job)
        return;
    unpin(e, job);
    free(job);
}

/* The room of a new transfer, holding job and peer (both owned by it from
 * here), queued to its shard. */
static pdx_status_t enqueue(pdx_engine_t *e, pdx_xfer_job_t *job, pdx_peer_t *peer,
                            const pdx_gate_t *gate, int timeout_ms, pdx_xfer_t *xfer_p)
{
    const uint64_t id = PDX_XFER_ROOM_BIT | atomic_fetch_add(&e->xfer_next, 1);
    const pdx_pages_t none = {NULL, 0};
    pdx_chunk_t chunk = {0};
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    pdx_shard_t *shard;
    pdx_status_t st;

    st = pdx_room_insert(&e->rooms, id, PDX_ROOM_WAITING, &obj);
    if (st != PDX_OK) {
        pdx_error("pdx_xfer_post: the room table is full (PDX_ROOMS=%u)", e->cfg.rooms);
        pdx_xfer_job_free(e, job);
        pdx_peer_put(peer);
        return st == PDX_ERR_EXISTS ? PDX_ERR_STATE : st;
    }
    pdx_ctrl_nudge(e);
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    pdx_rooms_app_claim_locked(ext);
    ext->xfer = job;
    ext->dests[0] = (pdx_dest_t){.peer = peer, .ngroups = 1};
    atomic_store_explicit(&ext->ndests, 1, memory_order_release);
    atomic_store(&ext->last_queued, 1);
    atomic_store(&ext->xfer_deadline_ns,
                 pdx_deadline_ns(timeout_ms > 0 ? (uint32_t)timeout_ms
                                                : e->cfg.transfer_timeout_ms));
    pthread_mutex_unlock(&ext->lock);

    chunk.room = id;
    chunk.layout = UINT32_MAX;
    chunk.flags = PDX_SEND_LAST;
    chunk.ngroups = 1;
    if (gate)
        chunk.gate = *gate;
    chunk.submit_ns = pdx_now_ns();
    shard = pdx_room_shard(e, id);
    atomic_fetch_add(&ext->queued, 1);
    st = pdx_ring_push(&shard->ring, &chunk, &none);
    if (st != PDX_OK) {
        atomic_fetch_sub(&ext->queued, 1);
        if (st == PDX_ERR_AGAIN)
            atomic_fetch_add_explicit(&e->stats.send_again, 1, memory_order_relaxed);
        pdx_room_fail(obj, st, "not queued"); /* nobody saw it: no log, no count */
        pdx_rooms_remove(e, obj, id);
        return st;
    }
    if (pdx_shard_wake(shard))
        atomic_fetch_add_explicit(&e->stats.send_kicks, 1, memory_order_relaxed);
    *xfer_p = id;
    return PDX_OK;
}

static pdx_status_t post(pdx_engine_t *e, pdx_xfer_op_t op, const pdx_desc_t *remotes,
                         uint32_t nremotes, const pdx_xfer_entry_t *entries, uint32_t n,
                         const pdx_gate_t *gate, int timeout_ms, pdx_xfer_t *xfer_p)
{
    pdx_xfer_job_t *job;
    pdx_peer_t *peer = NULL;
    remote_t *rem;
    pdx_status_t st;

    if (op == PDX_XFER_READ && e->ops->post_read == pdx_tp_unsupported_post_read) {
        pdx_error("pdx_xfer_post: the %s transport cannot READ", e->ops->name);
        return PDX_ERR_UNSUPPORTED;
    }
    if (gate && (st = pdx_gpu_gate_check(e, gate)) != PDX_OK)
        return st;
    rem = malloc(nremotes * sizeof(*rem));
    job = malloc(sizeof(*job) + (size_t)n * (sizeof(job->runs[0]) + sizeof(uint32_t)));
    if (!rem || !job) {
        free(rem);
        free(job);
        return PDX_ERR_NOMEM;
    }
    job->op = op;
    job->pinned = (uint32_t *)(job->runs + n);
    job->npinned = 0;
    st = resolve(e, remotes, nremotes, rem, &peer);
    if (st == PDX_OK)
        st = make_runs(e, job, rem, nremotes, entries, n);
    if (st == PDX_OK)
        st = pin(e, job);
    free(rem);
    if (st != PDX_OK) {
        free(job);
        pdx_peer_put(peer);
        return st;
    }
    return enqueue(e, job, peer, gate, timeout_ms, xfer_p);
}

pdx_status_t pdx_xfer_post(pdx_engine_t *e, pdx_xfer_op_t op, const pdx_desc_t *remotes,
                           uint32_t nremotes, const pdx_xfer_entry_t *entries, uint32_t n,
                           const pdx_gate_t *gate, int timeout_ms, pdx_xfer_t *xfer_p)
{
    pdx_status_t st;

    if (!e || !remotes || nremotes == 0 || !entries || n == 0 || n > PDX_MAX_XFER_ENTRIES ||
        !xfer_p || (op != PDX_XFER_WRITE && op != PDX_XFER_READ))
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    /* A gate of pdx_gate_arm() goes with the transfer, as with pdx_send. */
    st = pdx_gpu_gate_claim(e, gate);
    if (st != PDX_OK)
        return st;
    st = post(e, op, remotes, nremotes, entries, n, gate, timeout_ms, xfer_p);
    if (st == PDX_ERR_AGAIN)
        pdx_gpu_gate_unclaim(e, gate);
    else if (st != PDX_OK && gate)
        pdx_gpu_gate_done(e, gate);
    return st;
}

pdx_status_t pdx_xfer_poll(pdx_engine_t *e, pdx_xfer_t xfer)
{
    pdx_room_obj_t *obj;
    pdx_status_t st;

    if (!e)
        return PDX_ERR_INVALID;
    if (!pdx_room_is_xfer(xfer))
        return PDX_ERR_NOT_FOUND;
    switch (pdx_room_poll(&e->rooms, xfer)) {
    case PDX_ROOM_NONE:
        return PDX_ERR_NOT_FOUND;
    case PDX_ROOM_SUCCESS:
        return PDX_OK;
    case PDX_ROOM_FAILED:
        /* fail_status is written before the state: read it after. */
        obj = pdx_room_lookup(&e->rooms, xfer);
        st = obj ? obj->fail_status : PDX_ERR_NOT_FOUND;
        return st < 0 ? st : PDX_ERR_IO;
    default:
        return PDX_INPROGRESS;
    }
}

pdx_status_t pdx_xfer_wait(pdx_engine_t *e, const pdx_xfer_t *xfers, uint32_t n, int timeout_ms,
                           uint32_t *index_p)
{
    const uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : pdx_deadline_ns((uint32_t)timeout_ms);
    struct timespec ts = {0};
    uint64_t nap_ns = 2000, now;

    if (!e || (!xfers && n))
        return PDX_ERR_INVALID;
    for (;;) {
        uint32_t pending = n, failed = n;
        pdx_status_t st, why = PDX_OK;

        for (uint32_t i = 0; i < n; i++) {
            st = pdx_xfer_poll(e, xfers[i]);
            if (st == PDX_INPROGRESS) {
                pending = PDX_MIN(pending, i);
            } else if (st != PDX_OK && failed == n) {
                failed = i;
                why = st;
            }
        }
        now = pdx_now_ns();
        if (pending == n || now >= deadline) {
            if (index_p)
                *index_p = failed < n ? failed : pending;
            return failed < n ? why : pending == n ? PDX_OK : PDX_INPROGRESS;
        }
        /* Completions come from the shards: wait a little longer each time,
         * up to a millisecond, never past the deadline. */
        ts.tv_nsec = (long)PDX_MIN(nap_ns, deadline - now);
        nanosleep(&ts, NULL);
        nap_ns = PDX_MIN(nap_ns * 2, 1000000ull);
    }
}

pdx_status_t pdx_xfer_error(pdx_engine_t *e, pdx_xfer_t xfer, char *buf, size_t len)
{
    if (!e || !buf || len == 0)
        return PDX_ERR_INVALID;
    if (!pdx_room_is_xfer(xfer)) {
        snprintf(buf, len, "%llu is not a transfer", (unsigned long long)xfer);
        return PDX_ERR_NOT_FOUND;
    }
    return pdx_room_error(e, xfer, buf, len);
}

pdx_status_t pdx_xfer_release(pdx_engine_t *e, pdx_xfer_t xfer)
{
    if (!e)
        return PDX_ERR_INVALID;
    if (!pdx_room_is_xfer(xfer))
        return PDX_ERR_NOT_FOUND;
    return pdx_release(e, xfer);
}
