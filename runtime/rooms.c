/*
 * rooms: the room calls of both sides (pdx_poll, pdx_room_error,
 * pdx_abort, pdx_release), a room's ERROR from its peer, the deadline
 * sweep, and what a gone peer means for the rooms that need it. The
 * sides are room_send.c and room_recv.c; state changes room_state.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "peer.h"
#include "shard.h"
#include "log.h"
#include "rooms.h"

/* -------------------------------------------------------------- both sides */

pdx_room_state_t pdx_poll(pdx_engine_t *e, pdx_room_t room)
{
    return PDX_LIKELY(e) ? pdx_room_poll(&e->rooms, room) : PDX_ROOM_NONE;
}

pdx_status_t pdx_room_error(pdx_engine_t *e, pdx_room_t room, char *buf, size_t len)
{
    pdx_room_obj_t *obj;

    if (!e || !buf || len == 0)
        return PDX_ERR_INVALID;
    obj = pdx_room_lookup(&e->rooms, room);
    if (!obj) {
        snprintf(buf, len, "room %llu is not in the table", (unsigned long long)room);
        return PDX_ERR_NOT_FOUND;
    }
    /* Under the room's lock a live room cannot be removed and recycled. */
    pthread_mutex_lock(&pdx_room_ext(e, obj)->lock);
    if (!pdx_rooms_live(obj, room) || pdx_room_state(obj) != PDX_ROOM_FAILED) {
        pthread_mutex_unlock(&pdx_room_ext(e, obj)->lock);
        snprintf(buf, len, "room %llu has not failed", (unsigned long long)room);
        return PDX_ERR_STATE;
    }
    snprintf(buf, len, "%s: %s", pdx_status_str(obj->fail_status), obj->fail_msg);
    pthread_mutex_unlock(&pdx_room_ext(e, obj)->lock);
    return PDX_OK;
}

pdx_status_t pdx_abort(pdx_engine_t *e, pdx_room_t room)
{
    pdx_room_obj_t *obj;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    obj = pdx_room_lookup(&e->rooms, room);
    if (!obj)
        return PDX_ERR_NOT_FOUND;
    pdx_rooms_fail_id(e, obj, room, PDX_ERR_ABORTED, "aborted by the caller");
    return PDX_OK;
}

pdx_status_t pdx_release(pdx_engine_t *e, pdx_room_t room)
{
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    obj = pdx_room_lookup(&e->rooms, room);
    if (!obj)
        return PDX_ERR_NOT_FOUND;
    ext = pdx_room_ext(e, obj);
    if (!pdx_rooms_terminal(pdx_room_state(obj)))
        pdx_rooms_fail_id(e, obj, room, PDX_ERR_ABORTED, "released before it was done");
    if (!pdx_rooms_fenced(obj, ext))
        return PDX_INPROGRESS;
    return pdx_rooms_remove(e, obj, room);
}

/* A room's ERROR from its peer (either side). */
void pdx_rooms_on_error(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_error_t *m)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, m->room);
    pdx_room_ext_t *ext;
    bool ours;

    if (!obj)
        return;
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    ours = pdx_rooms_live(obj, m->room) && pdx_rooms_has_peer_locked(ext, peer);
    pthread_mutex_unlock(&ext->lock);
    if (!ours) {
        pdx_warn("room %llu: error from %s, which is not one of its peers, ignored: %s",
                 (unsigned long long)m->room, peer->addr, m->message);
        return;
    }
    pdx_rooms_fail_id(e, obj, m->room, m->status < 0 ? m->status : PDX_ERR_PEER,
                      "%s reported: %s", peer->addr, m->message);
}

/* ------------------------------------------------------------- deadlines */

/*
 * A sender's last notifies may already sit in a shard's completion queue when
 * its control connection closes (a prefill engine that exits right after its
 * rooms succeeded): its decode rooms fail only once every shard has made two
 * passes since (each pass polls its CQ) and 100 ms went by, or after a
 * second, so a room whose data all arrived still becomes SUCCESS. A room
 * whose last notifies from the peer were all counted (it waits for its
 * flush read) does not fail for the peer: the flush decides. Prefill rooms
 * fail at once, unless every WR of theirs is posted: then their completions
 * decide (an error for each the peer's reap flushed).
 */
static bool peer_drained(pdx_engine_t *e, pdx_peer_t *peer, uint64_t now)
{
    uint64_t gone = atomic_load_explicit(&peer->gone_ns, memory_order_acquire);

    if (!gone)
        return false;
    if (now - gone > 1000000000ull)
        return true;
    if (now - gone < 100000000ull)
        return false; /* two passes poll a bounded batch each: a backlog, or a
                       * thread counting a notify it already holds, takes longer */
    for (uint32_t i = 0; i < e->nshards; i++)
        if (atomic_load_explicit(&e->shards[i].passes, memory_order_acquire) <
            peer->gone_passes[i] + 2)
            return false;
    return true;
}

/* A room needs a peer that is gone: "peer closed" when it said goodbye (or
 * we did), logged as routine. */
static void fail_gone(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, const pdx_peer_t *peer)
{
    if (atomic_load_explicit(&peer->closed, memory_order_acquire))
        pdx_rooms_fail_at(e, obj, id, PDX_LOG_INFO, PDX_ERR_PEER, "peer closed: %s", peer->err);
    else
        pdx_rooms_fail_id(e, obj, id, PDX_ERR_PEER, "peer %s is gone: %s", peer->addr,
                          peer->err);
}

static bool gone_sender_done(pdx_room_ext_t *ext, const pdx_peer_t *gone)
{
    bool done;

    pthread_mutex_lock(&ext->lock);
    done = pdx_rooms_sender_done_locked(ext, gone->remote_id);
    pthread_mutex_unlock(&ext->lock);
    return done;
}

static void sweep_room(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_room_ext_t *ext, uint64_t id,
                       int32_t state, uint64_t now)
{
    uint64_t dl = atomic_load(&ext->deadline_ns), xd = atomic_load(&ext->xfer_deadline_ns);
    bool decode = atomic_load(&ext->decode);

    if (atomic_load(&ext->ack_mask))
        pdx_rooms_flush_acks(obj, ext, id);
    if (state == PDX_ROOM_FAILED && decode && atomic_load(&ext->gone_peer))
        pdx_rooms_ack(e, obj, id, atomic_load(&ext->gone_peer)); /* its fence, held back */
    if (state == PDX_ROOM_SUCCESS || state == PDX_ROOM_FAILED) {
        /* A prefill room the app never used (only a ROOM message made it):
         * nobody here will release it. */
        if (!decode && !atomic_load(&ext->app) && pdx_rooms_fenced(obj, ext))
            pdx_rooms_remove(e, obj, id);
        return;
    }
    if (decode) {
        pdx_peer_t *gone = NULL;

        if (dl && now > dl) {
            pdx_rooms_fail_id(e, obj, id, PDX_ERR_TIMEOUT, "the transfer did not complete by "
                              "the pdx_expect deadline");
            return;
        }
        /* A reference of our own: a release may drop the room's meanwhile. */
        pthread_mutex_lock(&ext->lock);
        if (pdx_rooms_live(obj, id) && (gone = atomic_load(&ext->gone_peer)))
            pdx_peer_ref(gone);
        pthread_mutex_unlock(&ext->lock);
        if (gone && peer_drained(e, gone, now) && !gone_sender_done(ext, gone))
            fail_gone(e, obj, id, gone);
        pdx_peer_put(gone);
    } else if (state == PDX_ROOM_BOOTSTRAPPING && dl && now > dl) {
        pdx_rooms_fail_id(e, obj, id, PDX_ERR_TIMEOUT, "no metadata from decode within "
                          "PDX_BOOTSTRAP_TIMEOUT_MS=%u ms", e->cfg.bootstrap_timeout_ms);
    } else if (state == PDX_ROOM_WAITING && xd == 0 && dl && now > dl) {
        pdx_rooms_fail_id(e, obj, id, PDX_ERR_TIMEOUT, "no pdx_send for the room within "
                          "twice decode's timeout");
    } else if (xd && now > xd && pdx_room_is_xfer(id)) {
        pdx_rooms_fail_id(e, obj, id, PDX_ERR_TIMEOUT, "the transfer was not done by its "
                          "deadline");
    } else if (xd && now > xd) {
        pdx_rooms_fail_id(e, obj, id, PDX_ERR_TIMEOUT, "not done within "
                          "PDX_TRANSFER_TIMEOUT_MS=%u ms of its first chunk",
                          e->cfg.transfer_timeout_ms);
    }
}

void pdx_rooms_sweep(pdx_engine_t *e, uint64_t now)
{
    uint64_t held_limit = (uint64_t)e->cfg.bootstrap_timeout_ms * 1000000ull;
    uint32_t kept = 0, dropped = 0;

    for (uint32_t i = 0; i < pdx_room_span(&e->rooms); i++) {
        pdx_room_obj_t *obj = &e->rooms.objs[i];
        uint64_t id = atomic_load_explicit(&obj->id, memory_order_relaxed);
        int32_t state;

        if (pdx_room_read(obj, id, &state))
            sweep_room(e, obj, &e->ext[i], id, state, now);
    }
    pthread_mutex_lock(&e->held_lock);
    for (uint32_t i = 0; i < e->nheld; i++) {
        if (now - e->held[i].at_ns > held_limit) {
            pdx_peer_put(e->held[i].peer);
            dropped++;
        } else {
            e->held[kept++] = e->held[i];
        }
    }
    e->nheld = kept;
    pthread_mutex_unlock(&e->held_lock);
    if (dropped)
        pdx_warn("%u held notifies expired: no pdx_expect for their rooms", dropped);
}

/* ------------------------------------------------------------- gone peers */

void pdx_rooms_peer_gone(pdx_engine_t *e, pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < e->nshards; i++)
        peer->gone_passes[i] = atomic_load_explicit(&e->shards[i].passes, memory_order_acquire);
    atomic_store_explicit(&peer->gone_ns, pdx_now_ns(), memory_order_release);
    for (uint32_t i = 0; i < e->nshards; i++)
        pdx_shard_wake(&e->shards[i]);
    for (uint32_t i = 0; i < pdx_room_span(&e->rooms); i++) {
        pdx_room_obj_t *obj = &e->rooms.objs[i];
        pdx_room_ext_t *ext = &e->ext[i];
        uint64_t id = atomic_load_explicit(&obj->id, memory_order_relaxed);
        bool needs = false;

        if (!pdx_rooms_live(obj, id))
            continue;
        pthread_mutex_lock(&ext->lock);
        if (pdx_rooms_live(obj, id)) {
            /* No ABORT_ACK can reach it any more. */
            if (!atomic_load(&ext->decode))
                atomic_fetch_and(&ext->ack_mask, ~pdx_rooms_dests_of_locked(ext, peer));
            needs = pdx_rooms_has_peer_locked(ext, peer);
            if (needs && atomic_load(&ext->decode)) {
                needs = false;
                /* the sweep fails it once the shards drained, unless the
                 * peer's last chunk was counted already */
                if (!pdx_rooms_sender_done_locked(ext, peer->remote_id) && !atomic_load(&ext->gone_peer))
                    atomic_store(&ext->gone_peer, peer);
            } else if (needs && atomic_load(&ext->last_queued) && !atomic_load(&ext->queued) &&
                       atomic_load(&ext->inflight)) {
                /* Every WR of the room is posted (the shard counts them in
                 * flight before it lets the last chunk go): their
                 * completions decide, failed ones by the reap's flush. The
                 * peer may have had it all before it left. */
                needs = false;
            }
        }
        pthread_mutex_unlock(&ext->lock);
        /* Decode rooms stop waiting for its ABORT_ACK only once its endpoints
         * are in error: pdx_rooms_peer_fenced(). */
        if (needs)
            fail_gone(e, obj, id, peer);
    }
}

void pdx_rooms_drop_peers(pdx_engine_t *e)
{
    for (uint32_t i = 0; i < e->rooms.touched; i++) {
        pdx_room_ext_t *ext = &e->ext[i];

        for (uint32_t d = 0; d < PDX_MAX_DESTS; d++) {
            pdx_peer_put(ext->dests[d].peer);
            ext->dests[d].peer = NULL;
        }
        for (uint32_t k = 0; k < ext->nholds; k++)
            pdx_peer_put(ext->holds[k]);
        ext->nholds = 0;
    }
    for (uint32_t i = 0; i < e->nheld; i++)
        pdx_peer_put(e->held[i].peer);
    e->nheld = 0;
}

void pdx_rooms_peer_fenced(pdx_engine_t *e, pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < pdx_room_span(&e->rooms); i++) {
        pdx_room_obj_t *obj = &e->rooms.objs[i];
        pdx_room_ext_t *ext = &e->ext[i];
        uint64_t id = atomic_load_explicit(&obj->id, memory_order_relaxed);
        int32_t state;

        if (!pdx_rooms_live(obj, id))
            continue;
        pthread_mutex_lock(&ext->lock);
        state = pdx_room_state(obj);
        /* Nothing of it can land any more. A room still waiting for the
         * shards to poll what the peer sent (pdx_rooms_peer_gone) keeps the
         * peer as a sender until the sweep decides; it is acked then. */
        if (pdx_rooms_live(obj, id) && atomic_load(&ext->decode) &&
            !(atomic_load(&ext->gone_peer) == peer && state != PDX_ROOM_SUCCESS &&
              state != PDX_ROOM_FAILED))
            pdx_rooms_ack_locked(ext, peer);
        pthread_mutex_unlock(&ext->lock);
    }
}
