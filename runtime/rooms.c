/*
 * The room-side API: pdx_send, pdx_expect, pdx_poll, pdx_room_error,
 * pdx_abort, pdx_release; failing and completing rooms.
 *
 * A room lives in the room table (room.c) with its engine data in
 * engine->ext (engine.h). API threads create rooms and queue chunks; the
 * control thread adds destinations (rooms_ctl.c); the room's shard sends.
 * Nothing here blocks: a full ring or a full control buffer is
 * PDX_ERR_AGAIN.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "log.h"
#include "rooms.h"

static uint32_t timeout_or(int timeout_ms, uint32_t dflt)
{
    return timeout_ms > 0 ? (uint32_t)timeout_ms : dflt;
}

/* ------------------------------------------------------------ fail, succeed */

static bool terminal(int32_t state)
{
    return state == PDX_ROOM_SUCCESS || state == PDX_ROOM_FAILED;
}

void pdx_rooms_end_signal_locked(pdx_room_ext_t *ext)
{
    uint64_t zero = 0;

    /* 0 -> 1 only: a stream that passed already wrote 2 */
    if (ext->end_word)
        __atomic_compare_exchange_n(ext->end_word, &zero, 1, false, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
}

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
    decode = atomic_load(&ext->decode);
    if (decode) {
        for (uint32_t i = 0; i < ext->npeers; i++)
            peers[npeers++] = ext->peers[i];
    } else {
        uint32_t n = PDX_DESTS_COUNT(atomic_load_explicit(&ext->ndests, memory_order_acquire));

        for (uint32_t i = 0; i < n; i++)
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
static pdx_status_t aux_pin(pdx_engine_t *e, uint32_t mem)
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

static void aux_unpin(pdx_engine_t *e, int32_t mem)
{
    if (mem >= 0)
        atomic_fetch_sub(&e->mems[mem].users, 1);
}

/* Under ext->lock: the first use of the room by the local app. */
static void app_claim(pdx_room_ext_t *ext)
{
    if (!atomic_load(&ext->app)) {
        ext->aux_mem = -1;
        atomic_store(&ext->app, true);
    }
}

/* -------------------------------------------------------------------- send */

static pdx_status_t check_region(pdx_engine_t *e, const pdx_region_t *r, const char *what)
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

static pdx_status_t send_chunk(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                               const pdx_pages_t *src, const pdx_gate_t *gate,
                               const pdx_region_t *aux, unsigned flags);

/* A gate of pdx_gate_arm() gates one chunk: taken here, it goes with the
 * chunk, back to the caller on AGAIN, or back to the pool on any other
 * failure (gpu.c). */
pdx_status_t pdx_send(pdx_engine_t *e, pdx_room_t room, uint32_t layout_id,
                      const pdx_pages_t *src, const pdx_gate_t *gate, const pdx_region_t *aux,
                      unsigned flags)
{
    pdx_status_t st;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    st = pdx_gpu_gate_claim(e, gate);
    if (st != PDX_OK)
        return st;
    st = send_chunk(e, room, layout_id, src, gate, aux, flags);
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
                               const pdx_pages_t *src, const pdx_gate_t *gate,
                               const pdx_region_t *aux, unsigned flags)
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
    layout = pdx_engine_layout(e, layout_id);
    if (!layout) {
        pdx_error("pdx_send: room %llu: unknown layout %u", (unsigned long long)room, layout_id);
        return PDX_ERR_NOT_FOUND;
    }
    if (gate && (st = pdx_gpu_gate_check(e, gate)) != PDX_OK)
        return st;
    if (aux && (!(flags & PDX_SEND_LAST) || (st = check_region(e, aux, "pdx_send aux")) != PDX_OK))
        return aux && !(flags & PDX_SEND_LAST) ? PDX_ERR_INVALID : st;
    for (uint32_t g = 0; g < layout->ngroups; g++)
        if (src[g].npages && !src[g].pages)
            return PDX_ERR_INVALID;

    st = send_room(e, room, &obj);
    if (st != PDX_OK)
        return st;
    ext = pdx_room_ext(e, obj);
    state = pdx_room_state(obj);
    if (terminal(state) || atomic_load(&ext->last_queued)) {
        pdx_error("pdx_send: room %llu is %s", (unsigned long long)room,
                  state == PDX_ROOM_FAILED ? "failed" : "complete");
        return PDX_ERR_STATE;
    }
    if (aux && (st = aux_pin(e, aux->mem)) != PDX_OK)
        return st;
    /* Claim the room for the app; a room removed meanwhile (a refused ROOM,
     * the sweep) is failed first, so the state is checked again here. */
    pthread_mutex_lock(&ext->lock);
    state = pdx_room_state(obj);
    if (!pdx_rooms_live(obj, room) || terminal(state) || (aux && atomic_load(&ext->app) &&
                                                           ext->aux_mem >= 0)) {
        st = PDX_ERR_STATE;
    } else {
        app_claim(ext);
        if (aux)
            ext->aux_mem = (int32_t)aux->mem;
    }
    pthread_mutex_unlock(&ext->lock);
    if (st != PDX_OK) {
        pdx_error("pdx_send: room %llu is over or already has its last chunk",
                  (unsigned long long)room);
        if (aux)
            aux_unpin(e, (int32_t)aux->mem);
        return st;
    }

    chunk.room = room;
    chunk.layout = layout_id;
    chunk.flags = flags;
    chunk.ngroups = layout->ngroups;
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
                aux_unpin(e, (int32_t)aux->mem);
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
    pdx_shard_wake(shard);
    return PDX_OK;
}

pdx_status_t pdx_gate_arm(pdx_engine_t *e, void *hip_stream, pdx_gate_t *gate_p)
{
    if (!e || !gate_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    return pdx_gpu_gate_arm(e, hip_stream, gate_p);
}

/* ------------------------------------------------------------------ expect */

static pdx_status_t check_dst(const pdx_layout_t *layout, const pdx_pages_t *dst,
                              uint64_t *total_p)
{
    uint64_t total = 0;

    for (uint32_t g = 0; g < layout->ngroups; g++) {
        if (dst[g].npages && !dst[g].pages)
            return PDX_ERR_INVALID;
        for (uint32_t i = 0; i < dst[g].npages; i++) {
            if (dst[g].pages[i] >= layout->groups[g].npages) {
                pdx_error("pdx_expect: group %u: page %u at position %u is out of range "
                          "(%llu pages)", g, dst[g].pages[i], i,
                          (unsigned long long)layout->groups[g].npages);
                return PDX_ERR_RANGE;
            }
        }
        total += dst[g].npages;
    }
    if (total > PDX_MAX_ROOM_PAGES) {
        pdx_error("pdx_expect: %llu pages, at most %u", (unsigned long long)total,
                  PDX_MAX_ROOM_PAGES);
        return PDX_ERR_INVALID;
    }
    *total_p = total;
    return PDX_OK;
}

/* Record that `peer` will send for the decode room (under ext->lock). */
static pdx_status_t expect_peer(pdx_room_ext_t *ext, pdx_peer_t *peer, uint32_t nsenders)
{
    uint32_t n = ext->nsenders + nsenders;
    uint64_t *senders;
    uint32_t *left;

    if (ext->npeers == PDX_MAX_DESTS || ext->nholds == PDX_MAX_DESTS || n > PDX_MAX_SENDERS)
        return PDX_ERR_FULL;
    senders = realloc(ext->senders, n * sizeof(*senders));
    if (!senders)
        return PDX_ERR_NOMEM;
    ext->senders = senders;
    left = realloc(ext->last_left, n * sizeof(*left));
    if (!left)
        return PDX_ERR_NOMEM;
    ext->last_left = left;
    ext->peers[ext->npeers++] = peer;
    ext->holds[ext->nholds++] = peer;
    pdx_peer_ref(peer);
    ext->nsenders = n;
    return PDX_OK;
}

static pdx_status_t send_room_msg(pdx_peer_t *peer, const pdx_wire_room_t *m,
                                  const pdx_pages_t *dst, uint64_t total)
{
    size_t cap = PDX_WIRE_HEADER_SIZE + 256 + PDX_LAYOUT_MAX_GROUPS * 8 + total * 4, len;
    uint8_t *frame = malloc(cap);
    pdx_status_t st;

    if (!frame)
        return PDX_ERR_NOMEM;
    st = pdx_wire_encode_room(m, dst, frame, cap, &len);
    if (st == PDX_OK)
        st = pdx_peer_send(peer, frame, len);
    free(frame);
    return st;
}

static pdx_status_t expect_held(pdx_engine_t *e, pdx_peer_t *peer, pdx_room_t room,
                                uint32_t layout_id, const pdx_pages_t *dst,
                                const pdx_region_t *aux, uint32_t nsenders, uint32_t timeout);

pdx_status_t pdx_expect(pdx_engine_t *e, uint32_t peer_id, pdx_room_t room, uint32_t layout_id,
                        const pdx_pages_t *dst, const pdx_region_t *aux, uint32_t nsenders,
                        int timeout_ms)
{
    uint32_t timeout = 0;
    pdx_peer_t *peer;
    pdx_status_t st;
    bool gone = false;

    if (!e || !dst || nsenders == 0 || nsenders > PDX_MAX_SENDERS)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    timeout = timeout_or(timeout_ms, e->cfg.transfer_timeout_ms);
    peer = pdx_peer_hold(e, peer_id, &gone);
    if (!peer || atomic_load(&peer->state) != PDX_PEER_READY || atomic_load(&peer->closed)) {
        pdx_error("pdx_expect: room %llu: peer 0x%x is %s", (unsigned long long)room, peer_id,
                  peer || gone ? "no longer connected" : "unknown");
        pdx_peer_put(peer);
        return peer || gone ? PDX_ERR_PEER : PDX_ERR_NOT_FOUND;
    }
    st = expect_held(e, peer, room, layout_id, dst, aux, nsenders, timeout);
    pdx_peer_put(peer);
    return st;
}

/* pdx_expect() with a reference to its peer. */
static pdx_status_t expect_held(pdx_engine_t *e, pdx_peer_t *peer, pdx_room_t room,
                                uint32_t layout_id, const pdx_pages_t *dst,
                                const pdx_region_t *aux, uint32_t nsenders, uint32_t timeout)
{
    const pdx_layout_t *layout;
    pdx_wire_room_t m = {0};
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    uint64_t total;
    pdx_status_t st;
    bool created, pinned = false;

    layout = pdx_engine_layout(e, layout_id);
    if (!layout) {
        pdx_error("pdx_expect: room %llu: unknown layout %u", (unsigned long long)room, layout_id);
        return PDX_ERR_NOT_FOUND;
    }
    st = check_dst(layout, dst, &total);
    if (st == PDX_OK && aux)
        st = check_region(e, aux, "pdx_expect aux");
    if (st != PDX_OK)
        return st;

    if (aux && (st = aux_pin(e, aux->mem)) != PDX_OK)
        return st;
    st = pdx_room_insert(&e->rooms, room, PDX_ROOM_WAITING, &obj);
    created = st == PDX_OK;
    if (st != PDX_OK && st != PDX_ERR_EXISTS) {
        pdx_error("pdx_expect: room %llu: the room table is full (PDX_ROOMS=%u)",
                  (unsigned long long)room, e->cfg.rooms);
        if (aux)
            aux_unpin(e, (int32_t)aux->mem);
        return st;
    }
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (!pdx_rooms_live(obj, room) || (!created && !atomic_load(&ext->decode))) {
        st = PDX_ERR_STATE;  /* a prefill room of the same id, or one just removed */
    } else if (aux && atomic_load(&ext->app) && ext->aux_mem >= 0 &&
               ext->aux_mem != (int32_t)aux->mem) {
        st = PDX_ERR_INVALID;
    } else {
        /* before decode: a notify counted from here sees it */
        atomic_store(&ext->flush, PDX_MAX(atomic_load(&ext->flush), pdx_gpu_flush_mode(e, layout)));
        atomic_store(&ext->decode, true);
        st = expect_peer(ext, peer, nsenders);
        if (st == PDX_OK) {
            app_claim(ext);
            if (aux && ext->aux_mem < 0) {
                ext->aux_mem = (int32_t)aux->mem;
                pinned = true;
            }
        }
    }
    pthread_mutex_unlock(&ext->lock);
    if (aux && !pinned)
        aux_unpin(e, (int32_t)aux->mem); /* refused, or the room pins it already */
    if (st != PDX_OK) {
        pdx_error("pdx_expect: room %llu: %s", (unsigned long long)room,
                  st == PDX_ERR_STATE     ? "the id is in use by a room sent from here"
                  : st == PDX_ERR_INVALID ? "its aux regions must share one memory region"
                                          : "too many peers or senders for one room");
        if (created)
            pdx_rooms_remove(e, obj, room);
        return st;
    }
    if (created)
        atomic_store(&ext->deadline_ns, pdx_deadline_ns(timeout));

    m.room = room;
    m.layout = layout_id;
    m.nsenders = nsenders;
    m.timeout_ms = timeout;
    m.ngroups = layout->ngroups;
    if (aux) {
        m.flags = PDX_WIRE_ROOM_AUX;
        m.aux = *aux;
    }
    st = send_room_msg(peer, &m, dst, total);
    if (st != PDX_OK) {
        pdx_rooms_fail_id(e, obj, room, st, "could not send the room's metadata to %s: %s",
                          peer->addr, pdx_status_str(st));
        return st;
    }
    /* The peer may have gone after our READY check, its walk over the rooms
     * (pdx_rooms_peer_gone, which marks it gone first) passing this one
     * before it named the peer: then the room learns it here, and the sweep
     * decides as for any room of a gone sender. */
    if (atomic_load_explicit(&peer->gone_ns, memory_order_acquire)) {
        pthread_mutex_lock(&ext->lock);
        if (pdx_rooms_live(obj, room) && !atomic_load(&ext->gone_peer))
            atomic_store(&ext->gone_peer, peer);
        pthread_mutex_unlock(&ext->lock);
    }
    pdx_rooms_apply_held(e, obj, room);
    return PDX_OK;
}

/* -------------------------------------------------------------- both sides */

pdx_room_state_t pdx_poll(pdx_engine_t *e, pdx_room_t room)
{
    return pdx_room_poll(&e->rooms, room);
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

bool pdx_rooms_fenced(pdx_room_obj_t *obj, pdx_room_ext_t *ext)
{
    /* queued before active before inflight: the shard adds to inflight
     * before it gives up a chunk (queued) and leaves the list (active). */
    if (atomic_load(&ext->queued) || atomic_load(&ext->active) || atomic_load(&ext->inflight))
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
    end_word = ext->end_word;
    ext_reset(ext);
    pthread_mutex_unlock(&ext->lock);
    if (end_word)
        pdx_gpu_word_done(e, end_word, 2); /* back to the pool once the stream passed */
    /* The ABORT_ACKs this room owes go out before its slot can be reused; a
     * peer whose control connection is full cannot be told: fail it. */
    left = pdx_rooms_send_acks(id, acks, to);
    pdx_rooms_put_acks(acks & ~left, to, NULL);
    pdx_rooms_put_acks(left, to, "an ABORT_ACK was not sent");
    aux_unpin(e, aux);
    pdx_room_free(&e->rooms, obj);
    return PDX_OK;
}

pdx_status_t pdx_room_stream_wait(pdx_engine_t *e, pdx_room_t room, void *hip_stream)
{
    volatile uint64_t *word = NULL;
    pdx_room_obj_t *obj;
    pdx_room_ext_t *ext;
    pdx_status_t st;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    obj = pdx_room_lookup(&e->rooms, room);
    if (!obj)
        return PDX_ERR_NOT_FOUND;
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (!pdx_rooms_live(obj, room) || !atomic_load(&ext->decode)) {
        st = PDX_ERR_STATE;
    } else if (ext->end_word) {
        st = PDX_ERR_EXISTS;
    } else {
        st = pdx_gpu_stream_wait(e, hip_stream, &word);
        if (st == PDX_OK) {
            ext->end_word = word;
            if (terminal(pdx_room_state(obj)))
                pdx_rooms_end_signal_locked(ext);
        }
    }
    pthread_mutex_unlock(&ext->lock);
    if (st == PDX_ERR_STATE || st == PDX_ERR_EXISTS)
        pdx_error("pdx_room_stream_wait: room %llu %s", (unsigned long long)room,
                  st == PDX_ERR_STATE ? "is not expected here" : "has a stream wait already");
    return st;
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
    if (!terminal(pdx_room_state(obj)))
        pdx_rooms_fail_id(e, obj, room, PDX_ERR_ABORTED, "released before it was done");
    if (!pdx_rooms_fenced(obj, ext))
        return PDX_INPROGRESS;
    return pdx_rooms_remove(e, obj, room);
}
