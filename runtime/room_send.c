/*
 * room_send: the prefill side of a room: pdx_send (a chunk into its shard's
 * ring), the gates it takes, decode's metadata (ROOM) becoming a
 * destination, and decode's ABORT. The shard's send path is shard_send.c.
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

static pdx_status_t send_chunk(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                               const uint32_t layers[2], const pdx_pages_t *src,
                               const pdx_gate_t *gate, const pdx_region_t *aux, unsigned flags);

/* The room of a pdx_send: found, or created BOOTSTRAPPING. */
static pdx_status_t send_room(pdx_engine_t *e, pdx_room_t room, pdx_room_obj_t **obj_p)
{
    pdx_room_obj_t *obj = pdx_room_lookup(&e->rooms, room);
    pdx_status_t st;

    if (!obj) {
        st = pdx_room_insert(&e->rooms, room, PDX_ROOM_BOOTSTRAPPING, &obj);
        if (st == PDX_OK) {
            atomic_store(&pdx_room_ext(e, obj)->deadline_ns,
                         pdx_deadline_ns(e->cfg.bootstrap_timeout_ms));
            pdx_ctrl_nudge(e);
        } else if (st != PDX_ERR_EXISTS) { /* EXISTS: its metadata came meanwhile */
            pdx_error("pdx_send: room %llu: the room table is full (PDX_ROOMS=%u)",
                      (unsigned long long)room, e->cfg.rooms);
            return st;
        }
    }
    if (pdx_room_ext(e, obj)->decode) {
        pdx_error("pdx_send: room %llu is expected here (decode side)", (unsigned long long)room);
        return PDX_ERR_STATE;
    }
    *obj_p = obj;
    return PDX_OK;
}

/* A gate of pdx_gate_arm() gates one chunk: taken here, it goes with the
 * chunk, back to the caller on AGAIN, or back to the pool on any other
 * failure (gpu.c). */
pdx_status_t pdx_send(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                      const pdx_pages_t *src, const pdx_gate_t *gate, const pdx_region_t *aux,
                      unsigned flags)
{
    return pdx_send_layers(e, room, layout_id, 0, UINT32_MAX, src, gate, aux, flags);
}

pdx_status_t pdx_send_layers(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                             uint32_t layer_begin, uint32_t layer_end, const pdx_pages_t *src,
                             const pdx_gate_t *gate, const pdx_region_t *aux, unsigned flags)
{
    const uint32_t layers[2] = {layer_begin, layer_end};
    pdx_status_t st;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    st = pdx_gpu_gate_claim(e, gate);
    if (st != PDX_OK)
        return st;
    st = send_chunk(e, room, layout_id, layers, src, gate, aux, flags);
    if (st == PDX_ERR_AGAIN)
        pdx_gpu_gate_unclaim(e, gate);
    else if (st != PDX_OK && gate)
        pdx_gpu_gate_done(e, gate);
    return st;
}

pdx_status_t pdx_gate_release(pdx_engine_t *e, const pdx_gate_t *gate)
{
    if (!e || !gate)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    return pdx_gpu_gate_release(e, gate);
}

static pdx_status_t send_chunk(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                               const uint32_t layers[2], const pdx_pages_t *src,
                               const pdx_gate_t *gate, const pdx_region_t *aux, unsigned flags)
{
    const pdx_layout_t *layout;
    pdx_chunk_t chunk = {0};
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    pdx_shard_t *shard;
    pdx_status_t st;
    int32_t state;

    if (!e || !src || (flags & ~PDX_SEND_LAST))
        return PDX_ERR_INVALID;
    if (pdx_room_is_xfer(room)) {
        pdx_error("pdx_send: room %llu: room ids stop below 2^63 (transfers use the rest)",
                  (unsigned long long)room);
        return PDX_ERR_INVALID;
    }
    layout = pdx_engine_layout(e, layout_id);
    if (!layout) {
        pdx_error("pdx_send: room %llu: unknown layout %u", (unsigned long long)room, layout_id);
        return PDX_ERR_NOT_FOUND;
    }
    if (layers[0] >= layers[1]) {
        pdx_error("pdx_send_layers: room %llu: no layer in [%u, %u)", (unsigned long long)room,
                  layers[0], layers[1]);
        return PDX_ERR_INVALID;
    }
    if (layers[1] != UINT32_MAX &&
        (layers[0] < layout->layer_begin || layers[1] > layout->layer_end)) {
        pdx_error("pdx_send_layers: room %llu: layers [%u, %u) outside layout %u's [%u, %u)",
                  (unsigned long long)room, layers[0], layers[1], layout_id,
                  layout->layer_begin, layout->layer_end);
        return PDX_ERR_RANGE;
    }
    if (gate && (st = pdx_gpu_gate_check(e, gate)) != PDX_OK)
        return st;
    if (aux && (!(flags & PDX_SEND_LAST) || (st = pdx_rooms_check_region(e, aux, "pdx_send aux")) != PDX_OK))
        return aux && !(flags & PDX_SEND_LAST) ? PDX_ERR_INVALID : st;
    for (uint32_t g = 0; g < layout->ngroups; g++)
        if (src[g].npages && !src[g].pages)
            return PDX_ERR_INVALID;

    st = send_room(e, room, &obj);
    if (st != PDX_OK)
        return st;
    ext = pdx_room_ext(e, obj);
    state = pdx_room_state(obj);
    if (pdx_rooms_terminal(state) || atomic_load(&ext->last_queued)) {
        pdx_error("pdx_send: room %llu is %s", (unsigned long long)room,
                  state == PDX_ROOM_FAILED ? "failed" : "complete");
        return PDX_ERR_STATE;
    }
    if (aux && (st = pdx_rooms_aux_pin(e, aux->mem)) != PDX_OK)
        return st;
    /* Claim the room for the app; a room removed meanwhile (a refused ROOM,
     * the sweep) is failed first, so the state is checked again here. */
    pthread_mutex_lock(&ext->lock);
    state = pdx_room_state(obj);
    if (!pdx_rooms_live(obj, room) || pdx_rooms_terminal(state) || (aux && atomic_load(&ext->app) &&
                                                           ext->aux_mem >= 0)) {
        st = PDX_ERR_STATE;
    } else {
        pdx_rooms_app_claim_locked(ext);
        if (aux)
            ext->aux_mem = (int32_t)aux->mem;
    }
    pthread_mutex_unlock(&ext->lock);
    if (st != PDX_OK) {
        pdx_error("pdx_send: room %llu is over or already has its last chunk",
                  (unsigned long long)room);
        if (aux)
            pdx_rooms_aux_unpin(e, (int32_t)aux->mem);
        return st;
    }

    chunk.room = room;
    chunk.layout = layout_id;
    chunk.flags = flags;
    if (layers[1] != UINT32_MAX &&
        (layers[0] > layout->layer_begin || layers[1] < layout->layer_end))
        chunk.flags |= PDX_CHUNK_RANGE;
    chunk.ngroups = layout->ngroups;
    chunk.layer_begin = layers[1] == UINT32_MAX ? layout->layer_begin : layers[0];
    chunk.layer_end = layers[1] == UINT32_MAX ? layout->layer_end : layers[1];
    if (aux) {
        chunk.has_aux = 1;
        chunk.aux = *aux;
    }
    if (gate)
        chunk.gate = *gate;
    chunk.submit_ns = pdx_now_ns();

    shard = pdx_room_shard(e, room);
    atomic_fetch_add(&ext->queued, 1);
    st = pdx_ring_push(&shard->ring, &chunk, src);
    if (st != PDX_OK) {
        atomic_fetch_sub(&ext->queued, 1);
        if (aux) {
            bool drop = false;

            pthread_mutex_lock(&ext->lock);
            if (pdx_rooms_live(obj, room) && ext->aux_mem == (int32_t)aux->mem) {
                ext->aux_mem = -1;
                drop = true;
            }
            pthread_mutex_unlock(&ext->lock);
            if (drop)
                pdx_rooms_aux_unpin(e, (int32_t)aux->mem);
        }
        if (st == PDX_ERR_AGAIN)
            atomic_fetch_add_explicit(&e->stats.send_again, 1, memory_order_relaxed);
        else
            pdx_error("pdx_send: room %llu: a chunk that can never fit the ring (PDX_RING_PAGES)",
                      (unsigned long long)room);
        return st;
    }
    if (flags & PDX_SEND_LAST)
        atomic_store(&ext->last_queued, 1);
    if (atomic_load(&ext->xfer_deadline_ns) == 0)
        atomic_store(&ext->xfer_deadline_ns, pdx_deadline_ns(e->cfg.transfer_timeout_ms));
    if (pdx_shard_wake(shard))
        atomic_fetch_add_explicit(&e->stats.send_kicks, 1, memory_order_relaxed);
    return PDX_OK;
}

pdx_status_t pdx_gate_arm(pdx_engine_t *e, void *hip_stream, pdx_gate_t *gate_p)
{
    if (!e || !gate_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    return pdx_gpu_gate_arm(e, hip_stream, gate_p);
}

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

/*
 * A prefill room owes ABORT_ACKs (ack_mask): send them once nothing of the
 * room is queued, active or in flight. A bit whose send found the control
 * buffer full goes back for the next sweep.
 */
void pdx_rooms_flush_acks(pdx_room_obj_t *obj, pdx_room_ext_t *ext, uint64_t id)
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
    d->verify = m->flags & PDX_WIRE_ROOM_VERIFY;
    d->sum = 0;
    d->sum_layers = false;
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

    if (pdx_room_is_xfer(m->room)) {
        send_room_error(peer, m->room, PDX_ERR_INVALID, "room ids stop below 2^63");
        return;
    }
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
    if (pdx_rooms_live(obj, m->room) && !atomic_load(&ext->decode) && pdx_rooms_dests_of_locked(ext, peer)) {
        /* Answered once nothing of the room is queued, active or in flight
         * (here, by the sweep, or by pdx_release): to each of the peer's
         * destinations (one ABORT_ACK per expect that decode sent). */
        atomic_fetch_or(&ext->ack_mask, pdx_rooms_dests_of_locked(ext, peer));
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
    pdx_rooms_flush_acks(obj, ext, m->room);
}
