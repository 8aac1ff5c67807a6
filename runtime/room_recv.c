/*
 * room_recv: the decode side of a room: pdx_expect (its pages to the
 * sender in a ROOM message), notify records counted per sender until every
 * byte is placed and visible, notifies held before their room is expected,
 * ABORT_ACKs, and pdx_room_stream_wait.
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
#include "verify.h"

static pdx_status_t expect_held(pdx_engine_t *e, pdx_peer_t *peer, pdx_room_t room,
                                uint32_t layout_id, const pdx_pages_t *dst,
                                const pdx_region_t *aux, uint32_t nsenders, uint32_t timeout);

static uint32_t timeout_or(int timeout_ms, uint32_t dflt)
{
    return timeout_ms > 0 ? (uint32_t)timeout_ms : dflt;
}

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

/* PDX_VERIFY: a copy of what pdx_expect() names, checked once it arrived. */
static pdx_verify_rec_t *verify_rec_new(uint32_t layout_id, const pdx_layout_t *layout,
                                        const pdx_pages_t *dst, const pdx_region_t *aux,
                                        uint64_t total)
{
    pdx_verify_rec_t *rec = calloc(1, sizeof(*rec) + total * sizeof(rec->pages[0]));
    uint32_t *p;

    if (!rec)
        return NULL;
    rec->layout = layout_id;
    p = rec->pages;
    for (uint32_t g = 0; g < layout->ngroups; g++) {
        if (dst[g].npages)
            memcpy(p, dst[g].pages, dst[g].npages * sizeof(*p));
        rec->lists[g] = (pdx_pages_t){p, dst[g].npages};
        p += dst[g].npages;
    }
    if (aux) {
        rec->has_aux = true;
        rec->aux = *aux;
    }
    return rec;
}

/* Record that `peer` will send for the decode room (under ext->lock). */
static bool expects_peer(const pdx_room_ext_t *ext, const pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < ext->npeers; i++)
        if (ext->peers[i] == peer)
            return true;
    return false;
}

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

/*
 * The room's metadata could not be sent (its peer went, or its control
 * connection is full): the peer knows nothing of the room. A room this call
 * made goes again, so its id is free for the next pdx_expect; failed first
 * under its lock, so a pdx_expect of another thread that finds it meanwhile
 * refuses it rather than joins it. A room an earlier pdx_expect made (for
 * another peer) fails, and is released as usual.
 */
static pdx_status_t expect_unsent(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_room_t room,
                                  const pdx_peer_t *peer, bool created, pdx_status_t st)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);
    bool drop = false;

    pthread_mutex_lock(&ext->lock);
    if (created && pdx_rooms_live(obj, room) && ext->npeers == 1)
        drop = pdx_room_fail(obj, st, "its metadata could not be sent to %s", peer->addr);
    pthread_mutex_unlock(&ext->lock);
    if (!drop) {
        pdx_rooms_fail_id(e, obj, room, st, "could not send the room's metadata to %s: %s",
                          peer->addr, pdx_status_str(st));
        return st;
    }
    pdx_error("pdx_expect: room %llu: its metadata could not be sent to %s: %s",
              (unsigned long long)room, peer->addr, pdx_status_str(st));
    pdx_rooms_remove(e, obj, room);
    return st;
}

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
    if (pdx_room_is_xfer(room)) {
        pdx_error("pdx_expect: room %llu: room ids stop below 2^63 (transfers use the rest)",
                  (unsigned long long)room);
        return PDX_ERR_INVALID;
    }
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
    pdx_verify_rec_t *rec = NULL;
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
        st = pdx_rooms_check_region(e, aux, "pdx_expect aux");
    if (st != PDX_OK)
        return st;

    if (e->cfg.verify != PDX_VERIFY_OFF && !(rec = verify_rec_new(layout_id, layout, dst, aux,
                                                                  total)))
        return PDX_ERR_NOMEM;
    if (aux && (st = pdx_rooms_aux_pin(e, aux->mem)) != PDX_OK) {
        free(rec);
        return st;
    }
    st = pdx_room_insert(&e->rooms, room, PDX_ROOM_WAITING, &obj);
    created = st == PDX_OK;
    if (created)
        pdx_ctrl_nudge(e);
    if (st != PDX_OK && st != PDX_ERR_EXISTS) {
        pdx_error("pdx_expect: room %llu: the room table is full (PDX_ROOMS=%u)",
                  (unsigned long long)room, e->cfg.rooms);
        if (aux)
            pdx_rooms_aux_unpin(e, (int32_t)aux->mem);
        free(rec);
        return st;
    }
    ext = pdx_room_ext(e, obj);
    pthread_mutex_lock(&ext->lock);
    if (!pdx_rooms_live(obj, room) || (!created && !atomic_load(&ext->decode))) {
        st = PDX_ERR_STATE;  /* a prefill room of the same id, or one just removed */
    } else if (!created && (pdx_rooms_terminal(pdx_room_state(obj)) ||
                            expects_peer(ext, peer))) {
        st = PDX_ERR_EXISTS; /* ended and not released, or this peer's already */
    } else if (aux && atomic_load(&ext->app) && ext->aux_mem >= 0 &&
               ext->aux_mem != (int32_t)aux->mem) {
        st = PDX_ERR_INVALID;
    } else {
        /* before decode: a notify counted from here sees it */
        atomic_store(&ext->flush, PDX_MAX(atomic_load(&ext->flush), pdx_gpu_flush_mode(e, layout)));
        atomic_store(&ext->decode, true);
        st = expect_peer(ext, peer, nsenders);
        if (st == PDX_OK) {
            pdx_layers_expect_locked(ext, layout, dst, ext->nholds - 1);
            ext->vrecs[ext->nholds - 1] = rec; /* NULL without PDX_VERIFY */
            rec = NULL;
            pdx_rooms_app_claim_locked(ext);
            if (aux && ext->aux_mem < 0) {
                ext->aux_mem = (int32_t)aux->mem;
                pinned = true;
            }
        }
    }
    pthread_mutex_unlock(&ext->lock);
    free(rec); /* refused */
    if (aux && !pinned)
        pdx_rooms_aux_unpin(e, (int32_t)aux->mem); /* refused, or the room pins it already */
    if (st != PDX_OK) {
        pdx_error("pdx_expect: room %llu: %s", (unsigned long long)room,
                  st == PDX_ERR_STATE     ? "the id is in use by a room sent from here"
                  : st == PDX_ERR_EXISTS  ? "expected from this peer already, or ended and "
                                            "not released"
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
    if (e->cfg.verify != PDX_VERIFY_OFF)
        m.flags |= PDX_WIRE_ROOM_VERIFY;
    st = send_room_msg(peer, &m, dst, total);
    if (st != PDX_OK)
        return expect_unsent(e, obj, room, peer, created, st);
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
        uint64_t base = 0;

        st = pdx_gpu_stream_wait(e, hip_stream, &word, &base);
        if (st == PDX_OK) {
            ext->end_word = word;
            ext->end_base = base;
            if (pdx_rooms_terminal(pdx_room_state(obj)))
                pdx_rooms_end_signal_locked(ext);
        }
    }
    pthread_mutex_unlock(&ext->lock);
    if (st == PDX_ERR_STATE || st == PDX_ERR_EXISTS)
        pdx_error("pdx_room_stream_wait: room %llu %s", (unsigned long long)room,
                  st == PDX_ERR_STATE ? "is not expected here" : "has a stream wait already");
    return st;
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

static void hold(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_notify_t *n)
{
    pthread_mutex_lock(&e->held_lock);
    if (e->nheld < e->cfg.held_notifies) {
        pdx_peer_ref(peer); /* the held notify's */
        e->held[e->nheld++] = (pdx_held_notify_t){peer, *n, pdx_now_ns()};
        n = NULL;
    }
    pthread_mutex_unlock(&e->held_lock);
    if (!n)
        pdx_ctrl_nudge(e);
    else
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
    pdx_layers_end_locked(ext, false);
    atomic_fetch_add_explicit(&e->stats.rooms_success, 1, memory_order_relaxed);
    PDX_MARKER_PUSH_ROOM("pdx room arrived", room);
    PDX_MARKER_POP();
}

/* PDX_VERIFY, under ext->lock: keep the checksum of peer's LAST notify;
 * why it cannot be used, else NULL. Without PDX_VERIFY here: nothing. */
static const char *sum_note_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer,
                                   const pdx_wire_notify_t *n)
{
    pdx_verify_rec_t *rec = NULL;

    for (uint32_t i = 0; i < ext->nholds && !rec; i++)
        if (ext->holds[i] == peer)
            rec = ext->vrecs[i];
    if (!rec)
        return NULL;
    if (!(n->flags & PDX_WIRE_NOTIFY_SUM))
        return "checksum mismatch: the sender's last notify carries no checksum";
    if (rec->has_sum && (rec->sum != n->sum || rec->layer_begin != n->layer_begin ||
                         rec->layer_end != n->layer_end ||
                         rec->sum_aux != !!(n->flags & PDX_WIRE_NOTIFY_AUX)))
        return "checksum mismatch: the sender's last notifies carry different checksums";
    rec->has_sum = true;
    rec->sum_aux = n->flags & PDX_WIRE_NOTIFY_AUX;
    rec->sum = n->sum;
    rec->layer_begin = n->layer_begin;
    rec->layer_end = n->layer_end;
    return NULL;
}

/* Live, TRANSFERRING and every sender done (under ext->lock). */
static bool all_arrived_locked(pdx_room_obj_t *obj, const pdx_room_ext_t *ext,
                               uint64_t room)
{
    return pdx_rooms_live(obj, room) && pdx_room_state(obj) == PDX_ROOM_TRANSFERRING &&
           ext->nsenders && ext->ndone == ext->nsenders;
}

/* Under ext->lock, once the room's senders may all be done: SUCCESS at once
 * when no PDX_VERIFY record is there; true when its bytes must be checked
 * first (pdx_rooms_arrive). */
static bool arrive_locked(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_room_ext_t *ext,
                          uint64_t room)
{
    if (!all_arrived_locked(obj, ext, room))
        return false;
    for (uint32_t i = 0; i < ext->nholds; i++)
        if (ext->vrecs[i])
            return true;
    arrived_locked(e, obj, ext, room);
    return false;
}

/* The bytes one peer's expect names against its sender's checksum; err
 * says why not. */
static pdx_status_t verify_rec(pdx_engine_t *e, const pdx_verify_rec_t *rec, char *err,
                               size_t len)
{
    const pdx_layout_t *layout = pdx_engine_layout(e, rec->layout);
    uint64_t sum = 0;
    pdx_plan_t plan;
    pdx_status_t st;

    if (!layout) {
        snprintf(err, len, "layout %u is gone", rec->layout);
        return PDX_ERR_NOT_FOUND;
    }
    st = pdx_plan_init(&plan, layout, layout, rec->lists, rec->lists, 1ull << 30, PDX_PLAN_STATE,
                       err, len);
    if (st != PDX_OK)
        return st;
    if (rec->layer_begin < layout->layer_begin || rec->layer_end > layout->layer_end) {
        snprintf(err, len, "checksum mismatch: the sender names layers [%u, %u), the layout "
                 "holds [%u, %u)", rec->layer_begin, rec->layer_end, layout->layer_begin,
                 layout->layer_end);
        return PDX_ERR_CORRUPT;
    }
    if (rec->sum_aux && !rec->has_aux) {
        snprintf(err, len, "checksum mismatch: the sender wrote aux bytes where none were "
                 "expected");
        return PDX_ERR_CORRUPT;
    }
    /* the units of the layers the sender wrote, named as it named them */
    plan.src_layer0 = plan.dst_layer0 = rec->layer_begin - layout->layer_begin;
    plan.nlayers = rec->layer_end - rec->layer_begin;
    st = pdx_verify_plan(e, &plan, &sum, err, len);
    if (st == PDX_OK && rec->sum_aux)
        st = pdx_verify_aux(e, rec->aux.mem, rec->aux.offset, rec->aux.len, &sum, err, len);
    if (st != PDX_OK)
        return st;
    if (sum != rec->sum) {
        snprintf(err, len, "checksum mismatch: the bytes received sum to %016llx, the sender's "
                 "to %016llx", (unsigned long long)sum, (unsigned long long)rec->sum);
        return PDX_ERR_CORRUPT;
    }
    return PDX_OK;
}

void pdx_rooms_arrive(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room)
{
    pdx_room_ext_t *ext = pdx_room_ext(e, obj);
    const pdx_verify_rec_t *recs[PDX_MAX_DESTS];
    const pdx_peer_t *peers[PDX_MAX_DESTS];
    char err[PDX_ERRMSG_MAX];
    pdx_status_t st = PDX_OK;
    uint32_t n = 0, i;
    bool check;

    pthread_mutex_lock(&ext->lock);
    check = arrive_locked(e, obj, ext, room);
    for (i = 0; check && i < ext->nholds; i++) {
        if (ext->vrecs[i]) {
            recs[n] = ext->vrecs[i];
            peers[n++] = ext->holds[i];
        }
    }
    if (check) /* the records stay: the room is not removed while this is set */
        atomic_fetch_add_explicit(&ext->verifying, 1, memory_order_relaxed);
    pthread_mutex_unlock(&ext->lock);
    if (!check)
        return;

    for (i = 0; i < n; i++)
        if ((st = verify_rec(e, recs[i], err, sizeof(err))) != PDX_OK)
            break;
    if (st == PDX_OK)
        atomic_fetch_add_explicit(&e->stats.rooms_verified, 1, memory_order_relaxed);
    else if (st == PDX_ERR_CORRUPT)
        atomic_fetch_add_explicit(&e->stats.checksum_mismatches, 1, memory_order_relaxed);

    pthread_mutex_lock(&ext->lock);
    atomic_fetch_sub_explicit(&ext->verifying, 1, memory_order_relaxed);
    if (st == PDX_OK && all_arrived_locked(obj, ext, room))
        arrived_locked(e, obj, ext, room);
    pthread_mutex_unlock(&ext->lock);
    if (st != PDX_OK)
        pdx_rooms_fail_id(e, obj, room, st, "%s (from %s)", err, peers[i]->addr);
}

void pdx_rooms_on_notify(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_notify_t *n)
{
    pdx_room_obj_t *obj;
    const char *why = NULL;
    pdx_room_ext_t *ext;
    bool done = false, ignore = false, flush = false, host_flush = false, arrive = false;
    pdx_status_t fail = PDX_ERR_PROTO;
    uint32_t mode, layers_flush = PDX_FLUSH_NONE;

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
    if (!pdx_rooms_has_peer_locked(ext, peer) || n->sender != peer->remote_id) {
        ignore = true;
    } else if (n->status == PDX_OK) {
        pdx_room_advance(obj, PDX_ROOM_TRANSFERRING);
        if (n->flags & PDX_WIRE_NOTIFY_LAYERS)
            why = pdx_layers_on_notify_locked(e, ext, peer, n, &layers_flush);
        else if ((n->flags & PDX_WIRE_NOTIFY_LAST) &&
                 (why = sum_note_locked(ext, peer, n)) != NULL)
            fail = PDX_ERR_CORRUPT;
        else if (n->flags & PDX_WIRE_NOTIFY_LAST) {
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
                arrive = arrive_locked(e, obj, ext, n->room); /* true: check first */
        }
    }
    pthread_mutex_unlock(&ext->lock);
    if (layers_flush != PDX_FLUSH_NONE)
        pdx_layers_flush(e, obj, n->room, layers_flush);
    if (flush)
        pdx_flush_defer(e, obj, n->room);
    if (host_flush) {
        if ((fail = pdx_gpu_flush_host(e)) != PDX_OK)
            why = "the GPU runtime's flush of RDMA writes failed";
        else
            arrive = true;
    }
    if (arrive)
        pdx_rooms_arrive(e, obj, n->room);
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
