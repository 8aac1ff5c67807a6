/*
 * room_state: every change of a room's state and of what it holds:
 * failing (and telling its peers), succeeding, the abort fence and its
 * ABORT_ACKs, pinning regions, and taking a fenced room out of the table.
 * Any thread; nothing here is called with a room's lock held unless its
 * name ends in _locked.
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

void pdx_rooms_end_signal_locked(pdx_room_ext_t *ext)
{
    uint64_t base = ext->end_base;

    /* base -> base + 1 only: a stream that passed already wrote base + 2 */
    if (ext->end_word)
        __atomic_compare_exchange_n(ext->end_word, &base, base + 1, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
}

__attribute__((format(printf, 6, 0)))
static bool fail_v(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_log_level_t level,
                   pdx_status_t status, const char *fmt, va_list ap)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);
    pdx_peer_t *peers[PDX_MAX_DESTS];
    uint32_t npeers = 0;
    char msg[PDX_ROOM_ERR_MAX];
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 64 + PDX_WIRE_REASON_MAX];
    size_t len = 0;
    bool decode;

    vsnprintf(msg, sizeof(msg), fmt, ap);
    pthread_mutex_lock(&ext->lock);
    if (!pdx_rooms_live(obj, id) || !pdx_room_fail(obj, status, "%s", msg)) {
        pthread_mutex_unlock(&ext->lock);
        return false;
    }
    pdx_rooms_end_signal_locked(ext);
    pdx_layers_end_locked(ext, true);
    decode = atomic_load(&ext->decode);
    if (decode) {
        for (uint32_t i = 0; i < ext->npeers; i++)
            peers[npeers++] = ext->peers[i];
    } else {
        uint32_t n = PDX_DESTS_COUNT(atomic_load_explicit(&ext->ndests, memory_order_acquire));

        /* A one-sided transfer is nothing the peer knows of: not told. */
        for (uint32_t i = 0; i < n && !ext->xfer; i++)
            peers[npeers++] = ext->dests[i].peer;
    }
    /* The room's references go with its release, which may come before
     * the sends below: these are the sends' own. */
    for (uint32_t i = 0; i < npeers; i++)
        pdx_peer_ref(peers[i]);
    pthread_mutex_unlock(&ext->lock);
    atomic_fetch_add_explicit(&e->stats.rooms_failed, 1, memory_order_relaxed);
    pdx_log(level, "room %llu failed: %s (%s)", (unsigned long long)id, msg,
            pdx_status_str(status));

    /* Decode asks each sender to stop (and confirm: the abort fence);
     * prefill tells each destination why its data will not come. */
    if (decode) {
        pdx_wire_abort_t m = {.room = id, .status = status};

        snprintf(m.reason, sizeof(m.reason), "%s", msg);
        pdx_wire_encode_abort(&m, frame, sizeof(frame), &len);
    } else {
        pdx_wire_error_t m = {.room = id, .status = status};

        snprintf(m.message, sizeof(m.message), "%s", msg);
        pdx_wire_encode_error(&m, frame, sizeof(frame), &len);
    }
    for (uint32_t i = 0; i < npeers; i++) {
        pdx_status_t st = pdx_peer_send(peers[i], frame, len);

        if (decode && st != PDX_OK) {
            /* An ABORT that cannot be sent is no confirmation: only a sender
             * whose endpoints are in error can no longer write. A full control
             * connection fails the peer; pdx_rooms_peer_fenced() counts it once
             * its endpoints are in error. */
            if (st == PDX_ERR_AGAIN)
                pdx_peer_fail(peers[i], PDX_ERR_PEER, "control connection to %s is full",
                              peers[i]->addr);
            else if (st == PDX_ERR_PEER && atomic_load(&peers[i]->reaped))
                pdx_rooms_ack(e, obj, id, peers[i]);
        }
        pdx_peer_put(peers[i]);
    }
    if (!decode)
        pdx_shard_wake(pdx_room_shard(e, id));
    return true;
}

bool pdx_rooms_fail_id(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_status_t status,
                       const char *fmt, ...)
{
    va_list ap;
    bool r;

    va_start(ap, fmt);
    r = fail_v(e, obj, id, PDX_LOG_WARN, status, fmt, ap);
    va_end(ap);
    return r;
}

bool pdx_rooms_fail_at(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_log_level_t level,
                       pdx_status_t status, const char *fmt, ...)
{
    va_list ap;
    bool r;

    va_start(ap, fmt);
    r = fail_v(e, obj, id, level, status, fmt, ap);
    va_end(ap);
    return r;
}

/* For the room's owner (a shard with its chunks or writes, an API call):
 * the object cannot be recycled under it. */
bool pdx_rooms_fail(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_status_t status, const char *fmt,
                    ...)
{
    va_list ap;
    bool r;

    va_start(ap, fmt);
    r = fail_v(e, obj, atomic_load(&obj->id), PDX_LOG_WARN, status, fmt, ap);
    va_end(ap);
    return r;
}

void pdx_rooms_succeed(pdx_engine_t *e, pdx_room_obj_t *obj)
{
    if (pdx_room_advance(obj, PDX_ROOM_SUCCESS))
        atomic_fetch_add_explicit(&e->stats.rooms_success, 1, memory_order_relaxed);
}

void pdx_rooms_ack_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < ext->npeers; i++) {
        if (ext->peers[i] == peer) {
            /* Each peer counts once: swap it out of the list. */
            ext->peers[i] = ext->peers[--ext->npeers];
            ext->acks++;
            break;
        }
    }
    if (ext->npeers == 0)
        atomic_store_explicit(&ext->fenced, 1, memory_order_release);
}

void pdx_rooms_ack(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, const pdx_peer_t *peer)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);

    pthread_mutex_lock(&ext->lock);
    if (pdx_rooms_live(obj, id) && atomic_load(&ext->decode))
        pdx_rooms_ack_locked(ext, peer);
    pthread_mutex_unlock(&ext->lock);
}

pdx_status_t pdx_rooms_send_abort_ack(pdx_peer_t *peer, uint64_t room)
{
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 8];
    pdx_wire_abort_ack_t m = {.room = room};
    size_t len;
    pdx_status_t st = pdx_wire_encode_abort_ack(&m, frame, sizeof(frame), &len);

    return st == PDX_OK ? pdx_peer_send(peer, frame, len) : st;
}

uint32_t pdx_rooms_hold_acks_locked(pdx_room_ext_t *ext, uint32_t mask,
                                    pdx_peer_t *to[PDX_MAX_DESTS])
{
    for (uint32_t m = mask; m; m &= m - 1) {
        uint32_t d = (uint32_t)__builtin_ctz(m);

        to[d] = ext->dests[d].peer;
        pdx_peer_ref(to[d]);
    }
    return mask;
}

uint32_t pdx_rooms_send_acks(uint64_t room, uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS])
{
    uint32_t left = 0;

    for (uint32_t m = mask; m; m &= m - 1) {
        uint32_t d = (uint32_t)__builtin_ctz(m);

        if (pdx_rooms_send_abort_ack(to[d], room) == PDX_ERR_AGAIN)
            left |= 1u << d;
    }
    return left;
}

void pdx_rooms_put_acks(uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS], const char *why)
{
    for (uint32_t m = mask; m; m &= m - 1) {
        uint32_t d = (uint32_t)__builtin_ctz(m);

        if (why)
            pdx_peer_fail(to[d], PDX_ERR_PEER, "control connection to %s is full: %s",
                          to[d]->addr, why);
        pdx_peer_put(to[d]);
    }
}

/* Pin a registered region for a room (pdx_mem_deregister refuses it). */
pdx_status_t pdx_rooms_aux_pin(pdx_engine_t *e, uint32_t mem)
{
    pdx_status_t st = PDX_ERR_NOT_FOUND;

    pthread_mutex_lock(&e->lock);
    if (mem < PDX_MAX_MEMS && e->mems[mem].used) {
        atomic_fetch_add(&e->mems[mem].users, 1);
        st = PDX_OK;
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

void pdx_rooms_aux_unpin(pdx_engine_t *e, int32_t mem)
{
    if (mem >= 0)
        atomic_fetch_sub(&e->mems[mem].users, 1);
}

/* Under ext->lock: the first use of the room by the local app. */
void pdx_rooms_app_claim_locked(pdx_room_ext_t *ext)
{
    if (!atomic_load(&ext->app)) {
        ext->aux_mem = -1;
        atomic_store(&ext->app, true);
    }
}

pdx_status_t pdx_rooms_check_region(pdx_engine_t *e, const pdx_region_t *r, const char *what)
{
    pdx_mem_t *mem;

    if (pdx_engine_mem_lookup(e, r->mem, &mem) != PDX_OK) {
        pdx_error("%s: memory %u is not registered", what, r->mem);
        return PDX_ERR_NOT_FOUND;
    }
    if (r->len == 0 || r->offset > mem->len || r->len > mem->len - r->offset) {
        pdx_error("%s: %llu bytes at offset %llu pass the end of memory %u (%zu bytes)", what,
                  (unsigned long long)r->len, (unsigned long long)r->offset, r->mem, mem->len);
        return PDX_ERR_RANGE;
    }
    return PDX_OK;
}

bool pdx_rooms_fenced(pdx_room_obj_t *obj, pdx_room_ext_t *ext)
{
    /* queued before active before inflight: the shard adds to inflight
     * before it gives up a chunk (queued) and leaves the list (active). */
    if (atomic_load(&ext->queued) || atomic_load(&ext->active) || atomic_load(&ext->inflight) ||
        atomic_load(&ext->verifying))
        return false;
    if (!atomic_load(&ext->decode) || pdx_room_state(obj) == PDX_ROOM_SUCCESS)
        return true;
    return atomic_load_explicit(&ext->fenced, memory_order_acquire);
}

/* Back to the state of a fresh slot; the room is out of the table. Its
 * references to peers go. */
static void ext_reset(pdx_room_ext_t *ext)
{
    for (uint32_t d = 0; d < PDX_MAX_DESTS; d++) {
        free(ext->dests[d].pages);
        free(ext->vrecs[d]);
        pdx_peer_put(ext->dests[d].peer);
    }
    for (uint32_t i = 0; i < ext->nholds; i++)
        pdx_peer_put(ext->holds[i]);
    free(ext->senders);
    free(ext->last_left);
    memset((char *)ext + sizeof(ext->lock), 0, sizeof(*ext) - sizeof(ext->lock));
    ext->aux_mem = -1;
    ext->head_cell = ext->tail_cell = UINT32_MAX;
}

pdx_status_t pdx_rooms_remove(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);
    pdx_peer_t *to[PDX_MAX_DESTS];
    pdx_room_obj_t *got = obj;
    volatile uint64_t *end_word;
    uint64_t end_done = 0;
    pdx_layers_t *layers;
    pdx_xfer_job_t *xfer;
    uint32_t acks, left;
    int32_t aux;

    /* Out of the index first: from here no handler acts on the room (each
     * checks the id under ext->lock) and no insert can reuse the object
     * until it is freed below. Of two removals, one wins. */
    if (pdx_room_unlink(&e->rooms, id, &got) != PDX_OK)
        return PDX_ERR_NOT_FOUND;
    pthread_mutex_lock(&ext->lock);
    acks = pdx_rooms_hold_acks_locked(ext, atomic_exchange(&ext->ack_mask, 0), to);
    aux = atomic_load(&ext->app) ? ext->aux_mem : -1;
    pdx_rooms_end_signal_locked(ext); /* a stream still waiting goes on */
    pdx_layers_end_locked(ext, true);
    layers = ext->layers;
    end_word = ext->end_word;
    end_done = ext->end_base + 2;
    xfer = ext->xfer;
    ext_reset(ext);
    pthread_mutex_unlock(&ext->lock);
    if (end_word)
        pdx_gpu_word_done(e, end_word, end_done); /* back to the pool once the stream passed */
    pdx_layers_free(e, layers);
    /* The ABORT_ACKs this room owes go out before its slot can be reused; a
     * peer whose control connection is full cannot be told: fail it. */
    left = pdx_rooms_send_acks(id, acks, to);
    pdx_rooms_put_acks(acks & ~left, to, NULL);
    pdx_rooms_put_acks(left, to, "an ABORT_ACK was not sent");
    pdx_rooms_aux_unpin(e, aux);
    pdx_xfer_job_free(e, xfer);
    pdx_room_free(&e->rooms, obj);
    return PDX_OK;
}

/* Of a prefill room (under ext->lock): the destinations of `peer`, as bits. */
uint32_t pdx_rooms_dests_of_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer)
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
bool pdx_rooms_has_peer_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer)
{
    if (atomic_load(&ext->decode)) {
        for (uint32_t i = 0; i < ext->npeers; i++)
            if (ext->peers[i] == peer)
                return true;
        return false;
    }
    return pdx_rooms_dests_of_locked(ext, peer) != 0;
}

/* Under ext->lock: whether sender's last chunk was counted. */
bool pdx_rooms_sender_done_locked(const pdx_room_ext_t *ext, uint64_t sender)
{
    for (uint32_t i = 0; i < ext->nseen; i++)
        if (ext->senders[i] == sender)
            return ext->last_left[i] == 0;
    return false;
}
