/*
 * Control messages about rooms, notify records, deadlines and gone peers.
 *
 * Called from the control thread (ROOM, ABORT, ABORT_ACK, ERROR, the sweep,
 * a gone peer) and from shards (notify records). Room bookkeeping that
 * several threads touch is under ext->lock; no function here is called with
 * it held, and pdx_rooms_fail() is always called without it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "log.h"
#include "rooms.h"

static void send_room_error(pdx_peer_t *peer, uint64_t room, pdx_status_t status,
                            const char *msg)
{
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 64 + PDX_WIRE_REASON_MAX];
    pdx_wire_error_t m = {.room = room, .status = status};
    size_t len;

    pdx_warn("room %llu from %s refused: %s", (unsigned long long)room, peer->addr, msg);
    snprintf(m.message, sizeof(m.message), "%s", msg);
    if (pdx_wire_encode_error(&m, frame, sizeof(frame), &len) == PDX_OK)
        pdx_peer_send(peer, frame, len);
}

/* Of a prefill room (under ext->lock): the destinations of `peer`, as bits. */
static uint32_t dests_of(pdx_room_ext_t *ext, const pdx_peer_t *peer)
{
    uint32_t n = PDX_DESTS_COUNT(atomic_load_explicit(&ext->ndests, memory_order_acquire));
    uint32_t mask = 0;

    for (uint32_t i = 0; i < n; i++)
        if (ext->dests[i].peer == peer)
            mask |= 1u << i;
    return mask;
}

/* Of a room (under ext->lock): `peer` is one of its senders (decode) or
 * destinations (prefill). */
static bool room_has_peer(pdx_room_ext_t *ext, const pdx_peer_t *peer)
{
    if (atomic_load(&ext->decode)) {
        for (uint32_t i = 0; i < ext->npeers; i++)
            if (ext->peers[i] == peer)
                return true;
        return false;
    }
    return dests_of(ext, peer) != 0;
}

/*
 * A prefill room owes ABORT_ACKs (ack_mask): send them once nothing of the
 * room is queued, active or in flight. A bit whose send found the control
 * buffer full goes back for the next sweep.
 */
static void flush_acks(pdx_room_obj_t *obj, pdx_room_ext_t *ext, uint64_t id)
{
    pdx_peer_t *to[PDX_MAX_DESTS];
    uint32_t mask = 0, left;

    if (atomic_load(&ext->queued) || atomic_load(&ext->active) || atomic_load(&ext->inflight))
        return;
    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, id))
        mask = pdx_rooms_hold_acks_locked(ext, atomic_exchange(&ext->ack_mask, 0), to);
    pthread_mutex_unlock(&ext->lock);
    if (!mask)
        return;
    left = pdx_rooms_send_acks(id, mask, to);
    pdx_rooms_put_acks(mask & ~left, to, NULL);
    if (!left)
        return;
    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, id)) {
        atomic_fetch_or(&ext->ack_mask, left);
        pdx_rooms_put_acks(left, to, NULL);
        left = 0;
    }
    pthread_mutex_unlock(&ext->lock);
    /* Released meanwhile: its release could not send these. */
    pdx_rooms_put_acks(left, to, "an ABORT_ACK was not sent");
}

/* --------------------------------------------------- metadata (prefill side) */

/* Copy a decoded ROOM into a destination; its pages point into the frame. */
static pdx_status_t dest_fill(pdx_dest_t *d, pdx_peer_t *peer, const pdx_wire_room_t *m,
                              const pdx_layout_t *layout)
{
    uint64_t total = 0;
    uint32_t *p;

    if (m->ngroups != layout->ngroups)
        return PDX_ERR_INVALID;
    for (uint32_t g = 0; g < m->ngroups; g++)
        total += m->npages[g];
    d->pages = malloc(PDX_MAX(total, 1) * sizeof(*d->pages));
    if (!d->pages)
        return PDX_ERR_NOMEM;
    p = d->pages;
    for (uint32_t g = 0; g < m->ngroups; g++) {
        pdx_wire_room_copy(m, g, p, m->npages[g]);
        d->npages[g] = m->npages[g];
        d->cursor[g] = 0;
        p += m->npages[g];
    }
    d->peer = peer;
    pdx_peer_ref(peer); /* the room's, until its release */
    d->layout = m->layout;
    d->nsenders = m->nsenders;
    d->ngroups = m->ngroups;
    d->has_aux = m->flags & PDX_WIRE_ROOM_AUX;
    d->aux = m->aux;
    return PDX_OK;
}

void pdx_rooms_on_room_msg(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_room_t *m)
{
    const pdx_layout_t *layout = atomic_load_explicit(
        &peer->layouts[m->layout < PDX_MAX_LAYOUTS ? m->layout : 0], memory_order_acquire);
    const char *why = NULL;
    pdx_room_obj_t *obj = NULL;
    pdx_room_ext_t *ext = NULL;
    pdx_status_t st = PDX_OK;
    bool created = false, drop = false;
    int32_t state;
    uint32_t n;

    if (m->layout >= PDX_MAX_LAYOUTS || !layout) {
        send_room_error(peer, m->room, PDX_ERR_NOT_FOUND, "its layout was never described");
        return;
    }
    /* Found a room that is being removed: insert again (a new room of the id). */
    for (int tries = 0; !ext; tries++) {
        st = pdx_room_insert(&e->rooms, m->room, PDX_ROOM_WAITING, &obj);
        if (st != PDX_OK && st != PDX_ERR_EXISTS) {
            send_room_error(peer, m->room, st, "the prefill room table is full");
            return;
        }
        created = st == PDX_OK;
        ext = pdx_room_ext(e, obj);
        pthread_mutex_lock(&ext->lock);
        if (!pdx_rooms_live(obj, m->room)) {
            pthread_mutex_unlock(&ext->lock);
            ext = NULL;
            if (tries == 100) {
                send_room_error(peer, m->room, PDX_ERR_AGAIN, "the room is being released");
                return;
            }
            pdx_cpu_relax();
        }
    }
    st = PDX_OK;
    if (created) {
        /* Fails unless the app sends for it in time. Twice decode's timeout:
         * decode's own deadline (and its ABORT) comes first when it can. */
        uint64_t ms = m->timeout_ms ? m->timeout_ms : e->cfg.transfer_timeout_ms;

        atomic_store(&ext->deadline_ns, pdx_now_ns() + 2 * ms * 1000000ull);
    }
    state = pdx_room_state(obj);
    n = atomic_load_explicit(&ext->ndests, memory_order_acquire);
    if (atomic_load(&ext->decode))
        why = "the id is expected on this side too";
    else if (state == PDX_ROOM_FAILED || state == PDX_ROOM_SUCCESS)
        why = "the room is already over on the prefill side";
    else if (state == PDX_ROOM_TRANSFERRING || (n & PDX_DESTS_CLOSED))
        why = "its metadata came after the transfer started";
    else if (PDX_DESTS_COUNT(n) == PDX_MAX_DESTS)
        why = "too many decode ranks for one room";
    else if ((st = dest_fill(&ext->dests[n], peer, m, layout)) != PDX_OK)
        why = st == PDX_ERR_NOMEM ? "out of memory" : "its groups do not match its layout";
    else if (!atomic_compare_exchange_strong_explicit(&ext->ndests, &n, n + 1,
                                                      memory_order_acq_rel,
                                                      memory_order_acquire)) {
        /* The shard closed the list (its first chunk) after our check. */
        free(ext->dests[PDX_DESTS_COUNT(n)].pages);
        pdx_peer_put(ext->dests[PDX_DESTS_COUNT(n)].peer);
        memset(&ext->dests[PDX_DESTS_COUNT(n)], 0, sizeof(ext->dests[0]));
        why = "its metadata came after the transfer started";
    }
    if (why && created && !atomic_load(&ext->app)) {
        /* A room only this message made: take it out again. Failed first, so
         * a pdx_send that finds it meanwhile refuses it rather than claims it. */
        pdx_room_fail(obj, PDX_ERR_STATE, "its metadata was refused: %s", why);
        drop = true;
    }
    pthread_mutex_unlock(&ext->lock);
    if (why) {
        send_room_error(peer, m->room, st != PDX_OK && st != PDX_ERR_EXISTS ? st : PDX_ERR_STATE,
                        why);
        if (drop)
            pdx_rooms_remove(e, obj, m->room);
        return;
    }
    pdx_room_advance(obj, PDX_ROOM_WAITING);
    pdx_shard_wake(pdx_room_shard(e, m->room));
}

void pdx_rooms_on_abort(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_abort_t *m)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, m->room);
    pdx_room_ext_t *ext;
    bool ours = false;

    if (!obj) {
        pdx_rooms_send_abort_ack(peer, m->room); /* nothing of it is in flight from here */
        return;
    }
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, m->room) && !atomic_load(&ext->decode) && dests_of(ext, peer)) {
        /* Answered once nothing of the room is queued, active or in flight
         * (here, by the sweep, or by pdx_release): to each of the peer's
         * destinations (one ABORT_ACK per expect that decode sent). */
        atomic_fetch_or(&ext->ack_mask, dests_of(ext, peer));
        ours = true;
    }
    pthread_mutex_unlock(&ext->lock);
    if (!ours) {
        /* Not a room that sends to this peer: nothing of it is in flight to it. */
        pdx_rooms_send_abort_ack(peer, m->room);
        return;
    }
    pdx_rooms_fail_id(e, obj, m->room, PDX_ERR_ABORTED, "aborted by %s: %s", peer->addr,
                      m->reason);
    flush_acks(obj, ext, m->room);
}

void pdx_rooms_on_abort_ack(pdx_engine_t *e, pdx_peer_t *peer, uint64_t room)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, room);
    pdx_room_ext_t *ext;

    if (!obj)
        return;
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    /* Only a failed decode room asked, and only its senders answer. */
    if (pdx_rooms_live(obj, room) && atomic_load(&ext->decode) &&
        pdx_room_state(obj) == PDX_ROOM_FAILED)
        pdx_rooms_ack_locked(ext, peer);
    pthread_mutex_unlock(&ext->lock);
}

void pdx_rooms_on_error(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_error_t *m)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, m->room);
    pdx_room_ext_t *ext;
    bool ours;

    if (!obj)
        return;
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    ours = pdx_rooms_live(obj, m->room) && room_has_peer(ext, peer);
    pthread_mutex_unlock(&ext->lock);
    if (!ours) {
        pdx_warn("room %llu: error from %s, which is not one of its peers, ignored: %s",
                 (unsigned long long)m->room, peer->addr, m->message);
        return;
    }
    pdx_rooms_fail_id(e, obj, m->room, m->status < 0 ? m->status : PDX_ERR_PEER,
                      "%s reported: %s", peer->addr, m->message);
}

/* ----------------------------------------------------- notifies (decode side) */

static void hold(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_notify_t *n)
{
    pthread_mutex_lock(&e->held_lock);
    if (e->nheld < e->cfg.held_notifies) {
        pdx_peer_ref(peer); /* the held notify's */
        e->held[e->nheld++] = (pdx_held_notify_t){peer, *n, pdx_now_ns()};
        n = NULL;
    }
    pthread_mutex_unlock(&e->held_lock);
    if (n)
        pdx_warn("room %llu: notify dropped, %u already held (PDX_HELD_NOTIFIES)",
                 (unsigned long long)n->room, e->cfg.held_notifies);
}

void pdx_rooms_apply_held(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id)
{
    pdx_held_notify_t *mine = NULL;
    uint32_t nmine = 0, kept = 0;

    (void)obj;
    pthread_mutex_lock(&e->held_lock);
    for (uint32_t i = 0; i < e->nheld; i++) {
        if (e->held[i].notify.room == id) {
            if (!mine)
                mine = malloc(e->nheld * sizeof(*mine));
            if (mine) {
                mine[nmine++] = e->held[i];
                continue;
            }
        }
        e->held[kept++] = e->held[i];
    }
    e->nheld = kept;
    pthread_mutex_unlock(&e->held_lock);
    for (uint32_t i = 0; i < nmine; i++) {
        pdx_rooms_on_notify(e, mine[i].peer, &mine[i].notify);
        pdx_peer_put(mine[i].peer);
    }
    free(mine);
}

/* Under ext->lock: whether sender's last chunk was counted. */
static bool sender_done_locked(const pdx_room_ext_t *ext, uint64_t sender)
{
    for (uint32_t i = 0; i < ext->nseen; i++)
        if (ext->senders[i] == sender)
            return ext->last_left[i] == 0;
    return false;
}

/* Count a LAST notify under ext->lock; true once every sender is done. */
static bool count_last(pdx_room_ext_t *ext, const pdx_wire_notify_t *n, const char **why)
{
    uint32_t i;

    for (i = 0; i < ext->nseen && ext->senders[i] != n->sender; i++)
        ;
    if (i == ext->nseen) {
        if (ext->nseen == ext->nsenders) {
            *why = "a last chunk from more senders than expected";
            return false;
        }
        ext->senders[i] = n->sender;
        ext->last_left[i] = PDX_MAX(n->count, 1u);
        ext->nseen++;
    }
    if (ext->last_left[i] == 0) {
        *why = "a sender's last chunk was announced twice";
        return false;
    }
    if (--ext->last_left[i] == 0)
        ext->ndone++;
    return ext->ndone == ext->nsenders;
}

/* Under ext->lock: every byte of the decode room is placed and visible. */
static void arrived_locked(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_room_ext_t *ext,
                           uint64_t room)
{
    if (!pdx_room_advance(obj, PDX_ROOM_SUCCESS))
        return;
    pdx_rooms_end_signal_locked(ext);
    atomic_fetch_add_explicit(&e->stats.rooms_success, 1, memory_order_relaxed);
    PDX_MARKER_PUSH_ROOM("pdx room arrived", room);
    PDX_MARKER_POP();
}

void pdx_rooms_on_notify(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_notify_t *n)
{
    pdx_room_obj_t *obj;
    const char *why = NULL;
    pdx_room_ext_t *ext;
    bool done = false, ignore = false, flush = false, host_flush = false;
    pdx_status_t fail = PDX_ERR_PROTO;
    uint32_t mode;

    if (!peer) {
        pdx_warn("room %llu: notify without a peer ignored", (unsigned long long)n->room);
        return;
    }
    obj = pdx_room_lookup(&e->rooms, n->room);
    if (!obj || !atomic_load(&pdx_room_ext(e, obj)->decode)) {
        hold(e, peer, n);
        return;
    }
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (!pdx_rooms_live(obj, n->room)) {
        pthread_mutex_unlock(&ext->lock);
        return; /* released meanwhile: a late notify */
    }
    if (!room_has_peer(ext, peer) || n->sender != peer->remote_id) {
        ignore = true;
    } else if (n->status == PDX_OK) {
        pdx_room_advance(obj, PDX_ROOM_TRANSFERRING);
        if (n->flags & PDX_WIRE_NOTIFY_LAST) {
            done = count_last(ext, n, &why);
            /* Every byte is placed (RC order: data before the notify);
             * visible to kernels at once, after a flush read (flush.c), or
             * after the GPU runtime's flush (gpu.c). */
            mode = done ? atomic_load_explicit(&ext->flush, memory_order_relaxed) : 0;
            if (mode == PDX_FLUSH_READ)
                flush = true;
            else if (mode == PDX_FLUSH_HOST)
                host_flush = true; /* a GPU runtime call: not under the room's lock */
            else if (done)
                arrived_locked(e, obj, ext, n->room);
        }
    }
    pthread_mutex_unlock(&ext->lock);
    if (flush)
        pdx_flush_defer(e, obj, n->room);
    if (host_flush) {
        if ((fail = pdx_gpu_flush_host(e)) != PDX_OK) {
            why = "the GPU runtime's flush of RDMA writes failed";
        } else {
            pthread_mutex_lock(&ext->lock);
            if (pdx_rooms_live(obj, n->room))
                arrived_locked(e, obj, ext, n->room);
            pthread_mutex_unlock(&ext->lock);
        }
    }
    if (ignore)
        pdx_warn("room %llu: notify from %s (sender %016llx) ignored: not one of the room's "
                 "senders", (unsigned long long)n->room, peer->addr,
                 (unsigned long long)n->sender);
    else if (n->status != PDX_OK)
        pdx_rooms_fail_id(e, obj, n->room, n->status, "sender %016llx failed its chunk %u",
                          (unsigned long long)n->sender, n->seq);
    else if (why)
        pdx_rooms_fail_id(e, obj, n->room, fail == PDX_OK ? PDX_ERR_PROTO : fail,
                          "%s (sender %016llx)", why,
                          (unsigned long long)n->sender);
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
    done = sender_done_locked(ext, gone->remote_id);
    pthread_mutex_unlock(&ext->lock);
    return done;
}

static void sweep_room(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_room_ext_t *ext, uint64_t id,
                       int32_t state, uint64_t now)
{
    uint64_t dl = atomic_load(&ext->deadline_ns), xd = atomic_load(&ext->xfer_deadline_ns);
    bool decode = atomic_load(&ext->decode);

    if (atomic_load(&ext->ack_mask))
        flush_acks(obj, ext, id);
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
                atomic_fetch_and(&ext->ack_mask, ~dests_of(ext, peer));
            needs = room_has_peer(ext, peer);
            if (needs && atomic_load(&ext->decode)) {
                needs = false;
                /* the sweep fails it once the shards drained, unless the
                 * peer's last chunk was counted already */
                if (!sender_done_locked(ext, peer->remote_id) && !atomic_load(&ext->gone_peer))
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
