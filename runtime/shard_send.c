/*
 * The shard's send path: ring cells -> rooms' FIFOs -> writes, aux, notifies.
 *
 * Per room, its head chunk goes through: destination known (the room left
 * BOOTSTRAPPING), gate open (checked once per chunk), destinations closed
 * before the first chunk (PDX_DESTS_CLOSED: a decode rank that asks later is
 * refused, so none misses a chunk), then for each
 * destination in turn: plan (validated against both layouts before
 * anything is posted), data (runs pulled only as far as send-queue room
 * reaches, striped in batches over the room's endpoints to that peer; the
 * plan cursor keeps the place), finish (aux and notifies, all at once, only
 * when every endpoint needed has a notify credit and a free slot, so a
 * resumed finish never repeats a notify), cursors forward. Then the cell is
 * done and the next chunk is the head. The last chunk must fill every page
 * a destination expects (checked at its plan, before anything is posted),
 * or its LAST notify would report SUCCESS over pages never written.
 *
 * Runs on the shard's worker only: no locks, no allocation, no syscalls
 * but the transport's post calls. Failing a room (pdx_rooms_fail) leaves
 * the post path.
 *
 * Notify protocol, per (chunk, destination): a chunk that is not the last
 * sends one notify {seq, count = WRs of the chunk} on one endpoint after its
 * data; the last chunk sends a LAST notify on every endpoint of this shard to
 * that peer, each with count = the number of those endpoints, after the aux
 * write. Decode counts LAST notifies per sender, so its SUCCESS follows the
 * data of every endpoint (RC order: a SEND lands after the WRITEs before it).
 */
#include "shard_send.h"
#include "peer.h"
#include "rooms.h"
#include "verify.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

step_t pdx_send_fail(send_ctx_t *c, pdx_status_t status, const char *fmt, ...)
{
    char msg[PDX_ERRMSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pdx_rooms_fail(c->L->e, c->obj, status, "%s", msg); /* false: it failed already */
    return STEP_FAILED;
}

/* ----------------------------------------------------------- endpoints */

/* No endpoint to the destination's peer: wait for one, or fail. */
static step_t no_deps(send_ctx_t *c, const pdx_peer_t *peer)
{
    int state = atomic_load_explicit(&peer->state, memory_order_acquire);

    if (state == PDX_PEER_FAILED)
        return pdx_send_fail(c, PDX_ERR_PEER, "peer %s failed: %s", peer->addr, peer->err);
    if (peer->id < PDX_MAX_PEERS && c->L->idx_pending[peer->id])
        return STEP_WAIT; /* pdx_dep_connect() wakes the shard */
    if (pdx_shard_peer_resetting(c->L, peer))
        return STEP_WAIT; /* the reconnect wakes the shard */
    if (state == PDX_PEER_READY)
        return pdx_send_fail(c, PDX_ERR_PEER, "no usable data endpoint to peer %s on shard %u",
                         peer->addr, c->L->s->index);
    return STEP_WAIT;
}

/* -------------------------------------------------------------- posting */

/* A post was refused: the room fails; a dead endpoint also fails its peer. */
step_t pdx_send_refused(send_ctx_t *c, pdx_dep_t *dep, pdx_status_t status, const char *what)
{
    pdx_engine_t *e = c->L->e;
    const char *why = e->ops->ep_error(dep->ep);

    if (status == PDX_ERR_AGAIN)
        return pdx_send_fail(c, PDX_ERR_STATE, "%s to %s: the send queue refused a slot the shard "
                         "counted free", what, dep->peer->addr);
    pdx_send_fail(c, status, "%s to %s failed: %s", what, dep->peer->addr,
              why[0] ? why : pdx_status_str(status));
    if (status == PDX_ERR_PEER) /* after the room took the precise message */
        pdx_shard_dep_broken(dep, status, why[0] ? why : "endpoint in error");
    return STEP_FAILED;
}

/* The regions of one memory pair on an endpoint. */
typedef struct pair {
    pdx_tp_mr_t         *mr;
    uint64_t             src_off;   /* the memory's byte 0 inside mr */
    uint64_t             src_len;
    const pdx_tp_rkey_t *dst;
    const pdx_tp_rmr_t  *rmr;
    bool                 copy;      /* ipc copies the bytes on the GPU */
} pair_t;

static bool __attribute__((cold, noinline))
run_fail(send_ctx_t *c, const pdx_peer_t *peer, const pdx_dep_t *dep, const pdx_run_t *r,
         const pair_t *p)
{
    if (!p->mr || r->src_offset > p->src_len || r->len > p->src_len - r->src_offset)
        pdx_send_fail(c, PDX_ERR_RANGE, "%llu bytes at offset %llu are outside local memory %u",
                      (unsigned long long)r->len, (unsigned long long)r->src_offset, r->src_mem);
    else if (!p->dst)
        pdx_send_fail(c, PDX_ERR_RANGE, "memory %u of peer %s is unknown (on its NIC %u)",
                      r->dst_mem, peer->addr, dep->rnic);
    else if (r->dst_offset > p->dst->len || r->len > p->dst->len - r->dst_offset)
        pdx_send_fail(c, PDX_ERR_RANGE, "%llu bytes at offset %llu are outside memory %u of "
                      "peer %s (%llu bytes)", (unsigned long long)r->len,
                      (unsigned long long)r->dst_offset, r->dst_mem, peer->addr,
                      (unsigned long long)p->dst->len);
    else if (!pdx_tp_rkey_one_piece(p->dst, r->dst_offset, r->len))
        /* the plan cuts runs at the peer's pieces (pdx_engine_plan_piece()) */
        pdx_send_fail(c, PDX_ERR_STATE, "%llu bytes at offset %llu cross a piece of memory %u of "
                      "peer %s (registered in pieces of %llu bytes)", (unsigned long long)r->len,
                      (unsigned long long)r->dst_offset, r->dst_mem, peer->addr,
                      (unsigned long long)p->dst->piece);
    else
        pdx_send_fail(c, PDX_ERR_INVALID, "%llu bytes at offset %llu of local memory %u cross a "
                      "piece of its registration or exceed the transport's message size",
                      (unsigned long long)r->len, (unsigned long long)r->src_offset, r->src_mem);
    return false;
}

/* The regions of run r's memory pair on dep; false (room failed) when one
 * is not there. */
static bool pair_find(send_ctx_t *c, const pdx_peer_t *peer, const pdx_dep_t *dep,
                      const pdx_run_t *r, pair_t *p)
{
    const pdx_engine_t *e = c->L->e;
    const pdx_mem_t *m = r->src_mem < PDX_MAX_MEMS ? &e->mems[r->src_mem] : NULL;
    const pdx_remote_mem_t *rm = r->dst_mem < PDX_MAX_MEMS ? &peer->mems[r->dst_mem] : NULL;

    *p = (pair_t){0};
    if (PDX_UNLIKELY(!m || !m->used || !m->mr[dep->nic]))
        return run_fail(c, peer, dep, r, p);
    p->mr = m->mr[dep->nic];
    p->src_off = m->mr_off;
    p->src_len = m->len;
    if (PDX_UNLIKELY(!rm || !(atomic_load_explicit(&rm->valid, memory_order_acquire) >>
                              dep->rnic & 1)))
        return run_fail(c, peer, dep, r, p);
    p->dst = &rm->rkey[dep->rnic];
    p->rmr = atomic_load_explicit(&rm->rmr, memory_order_acquire);
    p->copy = p->rmr && peer->direct && m->reg && m->reg->gpu; /* what ipc copies */
    return true;
}

/* A run's memory pair as one word. */
static inline uint64_t run_pair(const pdx_run_t *r)
{
    uint64_t v;

    _Static_assert(offsetof(pdx_run_t, dst_mem) == offsetof(pdx_run_t, src_mem) + 4,
                   "the pair is one word");
    memcpy(&v, &r->src_mem, sizeof(v));
    return v;
}

/*
 * Post runs[0, n) on dep: one post_runs per stretch of one memory pair,
 * each run checked and written once, by the transport. Signaled: every
 * K-th of a stretch, and its last: the worker may wait after it, and a
 * completion then covers this room's WRs only (dep.h). The plan's order
 * (group, layer, part, page) keeps a buffer's runs together, so stretches
 * are long but where every buffer is one run. A stretch refused fails the
 * room with those before it posted and counted: their completions come.
 */
_Static_assert(PDX_SHARD_BATCH <= PDX_TP_RUNS_MAX, "a batch of runs is one post_runs at most");
static step_t post_runs(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t *dep,
                        const pdx_run_t *runs, uint32_t n, const char *what)
{
    pdx_engine_t *e = c->L->e;
    const uint32_t every = PDX_MAX(e->cfg.signal_every, 1u);

    for (uint32_t i = 0, j; i < n; i = j) {
        const uint64_t pair = run_pair(&runs[i]);
        uint64_t bytes = runs[i].len;
        uint32_t bad = UINT32_MAX; /* a RANGE of a later check names no run */
        pdx_status_t status;
        pdx_tp_runs_t tr;
        pair_t p;

        for (j = i + 1; j < n && run_pair(&runs[j]) == pair; j++)
            bytes += runs[j].len;
        if (!pair_find(c, dest->peer, dep, &runs[i], &p))
            return STEP_FAILED;
        tr = (pdx_tp_runs_t){
            .wr_id = pdx_wr_id_send(dep, wr_room(c), dep->posted), .wr_id_mask = PDX_WR_SEQ_MASK,
            .signal_every = every, .n = j - i, .runs = runs + i, .mr = p.mr,
            .src_base = p.src_off, .src_len = p.src_len, .dst = p.dst, .rmr = p.rmr,
        };
        PDX_MARKER_PUSH_ROOM("pdx post", c->chunk->room);
        status = e->ops->post_runs(dep->ep, &tr, &bad);
        PDX_MARKER_POP();
        if (PDX_UNLIKELY(status == PDX_ERR_RANGE && bad < j - i)) {
            run_fail(c, dest->peer, dep, &runs[i + bad], &p);
            return STEP_FAILED;
        }
        if (PDX_UNLIKELY(status != PDX_OK))
            return pdx_send_refused(c, dep, status, what);
        pdx_send_count(c, dep, j - i, bytes, p.copy ? bytes : 0);
    }
    return STEP_DONE;
}

/* A READ transfer's runs as L->wrs[0, n) (each READ's local region is the
 * source side of its run); false (room failed) when one cannot be read. */
static bool build_reads(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t *dep,
                        const pdx_run_t *runs, uint32_t n)
{
    const uint64_t id_base = pdx_wr_id_send(dep, wr_room(c), 0);
    uint64_t seq = dep->posted;

    for (uint32_t i = 0; i < n; i++, seq++) {
        const pdx_run_t *r = &runs[i];
        pair_t p;

        if (!pair_find(c, dest->peer, dep, r, &p))
            return false;
        if (r->src_offset > p.src_len || r->len > p.src_len - r->src_offset ||
            r->dst_offset > p.dst->len || r->len > p.dst->len - r->dst_offset ||
            !pdx_tp_rkey_one_piece(p.dst, r->dst_offset, r->len))
            return run_fail(c, dest->peer, dep, r, &p);
        c->L->wrs[i] = (pdx_tp_write_t){
            .wr_id = id_base | (seq & PDX_WR_SEQ_MASK), .mr = p.mr,
            .offset = p.src_off + r->src_offset, .length = r->len,
            .remote_addr = p.dst->addr + r->dst_offset,
            .rkey = pdx_tp_rkey_at(p.dst, r->dst_offset), .flags = PDX_TP_SIGNALED,
        };
    }
    return true;
}

/* n WRs of L->wrs went out on dep: the room's counters; direct of their
 * bytes were GPU copies. */
void pdx_send_count(send_ctx_t *c, pdx_dep_t *dep, uint32_t n, uint64_t bytes, uint64_t direct)
{
    pdx_shard_loop_t *L = c->L;

    dep->posted += n;
    /* This worker is their only writer (shard.c): a load and a store, not a
     * locked read-modify-write that waits for every store above to drain. */
    atomic_store_explicit(&c->ext->inflight,
                          atomic_load_explicit(&c->ext->inflight, memory_order_relaxed) + n,
                          memory_order_relaxed);
    atomic_store_explicit(&L->s->stats.writes_posted,
                          atomic_load_explicit(&L->s->stats.writes_posted, memory_order_relaxed) +
                              n, memory_order_relaxed);
    atomic_store_explicit(&L->s->stats.bytes_sent,
                          atomic_load_explicit(&L->s->stats.bytes_sent, memory_order_relaxed) +
                              bytes, memory_order_relaxed);
    if (direct)
        atomic_store_explicit(&L->s->stats.bytes_direct,
                              atomic_load_explicit(&L->s->stats.bytes_direct,
                                                   memory_order_relaxed) + direct,
                              memory_order_relaxed);
    if (c->ext->wrs == 0)
        c->ext->wr_dep = dep;
    else if (dep != c->ext->wr_dep)
        c->ext->wr_deps = true;
    c->ext->wrs += n;
    c->budget = n < c->budget ? c->budget - n : 0;
    L->progress = true;
}

/* A READ transfer's WRs: L->wrs read into their local regions, one signaled
 * READ each; those posted before a refusal are counted. */
static pdx_status_t post_reads(send_ctx_t *c, pdx_dep_t *dep, uint32_t n)
{
    const pdx_tp_write_t *w = c->L->wrs;
    pdx_status_t status = PDX_OK;
    uint64_t bytes = 0;
    uint32_t i;

    PDX_MARKER_PUSH_ROOM("pdx post", c->chunk->room);
    for (i = 0; i < n; i++, w++) {
        status = c->L->e->ops->post_read(dep->ep, w->wr_id, w->mr, w->offset,
                                         (uint32_t)w->length, w->remote_addr, w->rkey);
        if (status != PDX_OK)
            break;
        bytes += w->length;
    }
    PDX_MARKER_POP();
    if (i)
        pdx_send_count(c, dep, i, bytes, 0);
    return status;
}

/* The plan's runs, striped in batches over deps[0, n), or all on the
 * first one's dep for a layer range before the last; DONE once exhausted. */
static step_t post_data(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t **deps, uint32_t n)
{
    pdx_shard_loop_t *L = c->L;
    pdx_room_ext_t *ext = c->ext;
    const bool pinned = pdx_send_layers_pinned(c);

    while (c->budget > 0) {
        const pdx_dep_t *pin = NULL;
        pdx_dep_t *dep = NULL;
        uint32_t room = 0, k;
        pdx_plan_t saved;
        pdx_status_t status;

        for (uint32_t i = 0; i < n && pinned && ext->wrs && !pin; i++)
            if (deps[i] == ext->wr_dep)
                pin = deps[i]; /* gone (reset): the rest go where they can */
        for (uint32_t i = 0; i < n && !dep; i++) {
            pdx_dep_t *d = deps[(ext->rr + i) % n];

            if (pin && d != pin)
                continue;
            room = pdx_dep_room(d, pdx_dep_reserve(d));
            if (room) {
                dep = d;
                ext->rr += i;
            }
        }
        if (!dep) {
            /* Exhausted already? Then the finish may use the reserve now. */
            saved = ext->plan;
            return pdx_plan_next(&saved, L->runs, 1) ? STEP_WAIT /* completions free slots */
                                                     : STEP_DONE;
        }
        k = pdx_plan_next(&ext->plan, L->runs, PDX_MIN(PDX_MIN(room, PDX_SHARD_BATCH), c->budget));
        if (k == 0)
            return STEP_DONE;
        if (ext->xfer && ext->xfer->op == PDX_XFER_READ) {
            if (!build_reads(c, dest, dep, L->runs, k))
                return STEP_FAILED;
            status = post_reads(c, dep, k);
            if (status != PDX_OK)
                return pdx_send_refused(c, dep, status, "reading");
        } else if (post_runs(c, dest, dep, L->runs, k, "writing the chunk") != STEP_DONE) {
            return STEP_FAILED;
        }
        ext->rr++;
    }
    return STEP_WAIT; /* budget spent: other rooms get a turn */
}

/* One signaled notify SEND on dep (a credit and a slot are there); a LAST
 * one to a destination that verifies carries sum (verify.h). */
static pdx_status_t post_notify(send_ctx_t *c, pdx_dep_t *dep, uint32_t flags, uint32_t count,
                                const pdx_dest_t *dest, uint64_t sum)
{
    pdx_shard_loop_t *L = c->L;
    const bool with_sum = (flags & PDX_WIRE_NOTIFY_LAST) && dest->verify;
    pdx_wire_notify_t n = {
        .room = c->chunk->room, .sender = L->e->sender_id, .seq = c->ext->seq,
        .flags = with_sum ? flags | PDX_WIRE_NOTIFY_SUM : flags, .count = count,
        .status = PDX_OK, .sum = with_sum ? sum : 0,
        .layer_begin = with_sum ? dest->layer_begin : 0,
        .layer_end = with_sum ? dest->layer_end : 0,
    };
    uint8_t buf[PDX_TP_SEND_MAX];
    pdx_status_t status;
    size_t len;

    if (flags & PDX_WIRE_NOTIFY_LAYERS)
        pdx_send_layers_notify(c, &n);
    status = pdx_wire_notify_encode(&n, buf, sizeof(buf), &len);
    if (status != PDX_OK)
        return status;
    PDX_MARKER_PUSH_ROOM("pdx notify", c->chunk->room);
    status = L->e->ops->post_send(dep->ep, pdx_wr_id_send(dep, wr_room(c), dep->posted), buf,
                                  (uint32_t)len, PDX_TP_SIGNALED);
    PDX_MARKER_POP();
    if (status != PDX_OK)
        return status;
    atomic_fetch_sub_explicit(&dep->credits, 1, memory_order_relaxed);
    dep->posted++;
    atomic_fetch_add_explicit(&c->ext->inflight, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&L->s->stats.notifies_sent, 1, memory_order_relaxed);
    L->progress = true;
    return PDX_OK;
}

static inline bool dep_can_notify(const pdx_dep_t *dep, uint32_t extra)
{
    return atomic_load_explicit(&dep->credits, memory_order_acquire) > 0 &&
           pdx_dep_room(dep, 0) >= 1 + extra;
}

/* Runs to peer end at piece boundaries: the smaller of ours and the peer's
 * piece (both powers of two), 0: none. */
static uint64_t plan_piece(const pdx_engine_t *e, const pdx_peer_t *peer)
{
    uint64_t mine = e->mr_piece;
    uint64_t theirs = atomic_load_explicit(&peer->mem_piece, memory_order_relaxed);

    return !mine ? theirs : !theirs ? mine : PDX_MIN(mine, theirs);
}

/*
 * The aux bytes of the last chunk into decode's slot: L->runs[0, *n_p) to
 * post (0: none), cut at max_msg_size and piece boundaries.
 */
static step_t aux_check(send_ctx_t *c, const pdx_dest_t *dest, uint32_t *n_p)
{
    const pdx_chunk_t *ch = c->chunk;
    const pdx_region_t *a = &ch->aux;
    const uint64_t max = c->L->e->cfg.max_msg_size, piece = plan_piece(c->L->e, dest->peer);
    uint32_t n = 0;

    *n_p = 0;
    if (!(ch->flags & PDX_SEND_LAST) || !ch->has_aux || !dest->has_aux)
        return STEP_DONE;
    if (a->len != dest->aux.len)
        return pdx_send_fail(c, PDX_ERR_INVALID, "aux is %llu bytes, decode's slot at %s %llu",
                         (unsigned long long)a->len, dest->peer->addr,
                         (unsigned long long)dest->aux.len);
    for (uint64_t off = 0; off < a->len; n++) {
        const uint64_t so = a->offset + off, d = dest->aux.offset + off;
        const uint64_t len = PDX_MIN(pdx_plan_run_cap(max, piece, so, d), a->len - off);

        if (n == PDX_SHARD_BATCH)
            return pdx_send_fail(c, PDX_ERR_INVALID, "aux of %llu bytes needs more than %u writes "
                             "of PDX_MAX_MSG_SIZE", (unsigned long long)a->len, PDX_SHARD_BATCH);
        c->L->runs[n] = (pdx_run_t){.src_mem = a->mem, .dst_mem = dest->aux.mem,
                                    .src_offset = so, .dst_offset = d, .len = len};
        off += len;
    }
    *n_p = n;
    return STEP_DONE;
}

/*
 * After the data: aux and the notifies, all or nothing. Nothing is posted
 * until every endpoint needed has a credit and the slots, so a resumed
 * finish never sends a notify twice.
 */
static step_t finish_dest(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t **deps, uint32_t n)
{
    pdx_room_ext_t *ext = c->ext;
    char err[PDX_ERRMSG_MAX];
    uint32_t pieces;
    pdx_dep_t *aux_dep;
    pdx_status_t status;
    uint64_t sum;
    step_t r;

    if (ext->xfer)
        return STEP_DONE; /* a one-sided transfer: its completions are all */
    if (!(c->chunk->flags & PDX_SEND_LAST)) {
        /* Every write of the chunk on one endpoint (or none): its notify
         * there follows them, so it names the layers that landed. */
        pdx_dep_t *one = NULL;

        for (uint32_t i = 0; i < n && ext->wrs && !ext->wr_deps && !one; i++)
            if (deps[i] == ext->wr_dep)
                one = deps[i];
        for (uint32_t i = 0; i < n; i++) {
            pdx_dep_t *d = one ? one : deps[(ext->rr + i) % n];
            const uint32_t flags = one || !ext->wrs ? PDX_WIRE_NOTIFY_LAYERS : 0;

            if (!dep_can_notify(d, 0)) {
                if (one)
                    break;
                continue;
            }
            status = post_notify(c, d, flags, ext->wrs, dest, 0);
            return status == PDX_OK ? STEP_DONE : pdx_send_refused(c, d, status, "notifying");
        }
        return STEP_WAIT; /* CREDIT messages or completions wake the shard */
    }

    r = aux_check(c, dest, &pieces);
    if (r != STEP_DONE)
        return r;
    aux_dep = deps[ext->rr % n];
    if (pieces + 1 > aux_dep->sq_depth)
        return pdx_send_fail(c, PDX_ERR_INVALID, "aux of %llu bytes needs %u writes, more than "
                         "PDX_SQ_DEPTH=%u leaves", (unsigned long long)c->chunk->aux.len, pieces,
                         aux_dep->sq_depth);
    for (uint32_t i = 0; i < n; i++)
        if (!dep_can_notify(deps[i], deps[i] == aux_dep ? pieces : 0))
            return STEP_WAIT;
    sum = dest->sum;
    if (pieces && dest->verify) {
        /* aux_check() left the runs in L->runs: verify.c does not touch them */
        const pdx_region_t *a = &c->chunk->aux;

        status = pdx_verify_aux(c->L->e, a->mem, a->offset, a->len, &sum, err, sizeof(err));
        if (status != PDX_OK)
            return pdx_send_fail(c, status, "checksum of the aux bytes: %s", err);
    }
    if (pieces) {
        r = post_runs(c, dest, aux_dep, c->L->runs, pieces, "writing aux"); /* aux_check()'s */
        if (r != STEP_DONE)
            return r;
    }
    for (uint32_t i = 0; i < n; i++) {
        status = post_notify(c, deps[i], PDX_WIRE_NOTIFY_LAST |
                             (pieces && dest->verify ? PDX_WIRE_NOTIFY_AUX : 0), n, dest, sum);
        if (status != PDX_OK)
            return pdx_send_refused(c, deps[i], status, "notifying the last chunk");
    }
    return STEP_DONE;
}

/* ----------------------------------------------------------------- plan */

static bool group_skipped(const pdx_layout_t *src, uint32_t g, bool last)
{
    return (src->groups[g].flags & PDX_GROUP_STATE) && !last;
}

/*
 * PDX_VERIFY: the chunk's units into dest's sum, from the bytes as they are
 * now that its gate opened (what the NIC reads next). Every chunk must cover
 * the same layers of decode's layout: its LAST notify names one range.
 */
static step_t plan_sum(send_ctx_t *c, pdx_dest_t *dest, const pdx_layout_t *dst)
{
    const pdx_plan_t *plan = &c->ext->plan;
    const uint32_t begin = dst->layer_begin + plan->dst_layer0, end = begin + plan->nlayers;
    char err[PDX_ERRMSG_MAX];
    pdx_status_t status;

    if (dest->sum_layers && (dest->layer_begin != begin || dest->layer_end != end))
        return pdx_send_fail(c, PDX_ERR_INVALID, "PDX_VERIFY: a chunk covers layers [%u, %u) of "
                         "decode's layout at %s, the chunks before it [%u, %u)", begin, end,
                         dest->peer->addr, dest->layer_begin, dest->layer_end);
    dest->layer_begin = begin;
    dest->layer_end = end;
    dest->sum_layers = true;
    status = pdx_verify_plan(c->L->e, plan, &dest->sum, err, sizeof(err));
    if (status != PDX_OK)
        return pdx_send_fail(c, status, "checksum of the chunk for %s: %s", dest->peer->addr, err);
    return STEP_DONE;
}

/* Plan the head chunk for dest: the chunk's pages onto dest's next unused ones. */
static step_t plan_dest(send_ctx_t *c, pdx_dest_t *dest)
{
    pdx_shard_loop_t *L = c->L;
    pdx_engine_t *e = L->e;
    pdx_room_ext_t *ext = c->ext;
    const pdx_chunk_t *ch = c->chunk;
    const bool last = ch->flags & PDX_SEND_LAST;
    const pdx_layout_t *src = pdx_engine_layout(e, ch->layout);
    const pdx_layout_t *dst = NULL;
    char err[PDX_ERRMSG_MAX];
    uint64_t off = 0;
    pdx_status_t status;

    if (ext->xfer) {
        /* READs carry at most 4 GiB - 1 each (the transport's length) */
        const uint64_t max = ext->xfer->op == PDX_XFER_READ
                                 ? PDX_MIN(e->cfg.max_msg_size, 1ull << 31)
                                 : e->cfg.max_msg_size;

        pdx_plan_init_runs(&ext->plan, ext->xfer->runs, ext->xfer->nruns, max);
        ext->plan.piece = plan_piece(e, dest->peer);
        ext->planning = true;
        ext->paged = false;
        ext->wrs = 0;
        return STEP_DONE;
    }
    if (!src)
        return pdx_send_fail(c, PDX_ERR_NOT_FOUND, "layout %u unknown", ch->layout);
    if (dest->layout < PDX_MAX_LAYOUTS)
        dst = atomic_load_explicit(&dest->peer->layouts[dest->layout], memory_order_acquire);
    if (!dst)
        return pdx_send_fail(c, PDX_ERR_NOT_FOUND, "peer %s layout %u unknown", dest->peer->addr,
                         dest->layout);
    if (ch->ngroups != src->ngroups || dest->ngroups != src->ngroups)
        return pdx_send_fail(c, PDX_ERR_INVALID, "the chunk has %u page lists, layout %u %u groups, "
                         "decode's page lists at %s %u", ch->ngroups, ch->layout, src->ngroups,
                         dest->peer->addr, dest->ngroups);

    pdx_ring_cell_pages(&L->s->ring, c->cell, ext->plan_src);
    for (uint32_t g = 0; g < src->ngroups; g++) {
        uint32_t have = dest->npages[g], at = dest->cursor[g], want = ch->npages[g];

        if (group_skipped(src, g, last)) {
            ext->plan_dst[g] = (pdx_pages_t){NULL, 0}; /* not read */
        } else if (at > have || want > have - at) {
            return pdx_send_fail(c, PDX_ERR_RANGE, "group %u: the chunk needs %u more pages after "
                             "%u, decode at %s expects %u", g, want, at, dest->peer->addr, have);
        } else if (last && at + want < have) {
            /* A LAST notify would report SUCCESS over pages never written. */
            return pdx_send_fail(c, PDX_ERR_RANGE, "sent %u of the %u pages decode expected for "
                             "group %u", at + want, have, g);
        } else {
            ext->plan_dst[g] = (pdx_pages_t){dest->pages + off + at, want};
        }
        off += have;
    }
    status = pdx_plan_init(&ext->plan, src, dst, ext->plan_src, ext->plan_dst,
                           e->cfg.max_msg_size, last ? PDX_PLAN_STATE : 0, err, sizeof(err));
    if (status != PDX_OK)
        return pdx_send_fail(c, status, "to %s: %s", dest->peer->addr, err);
    pdx_plan_layers(&ext->plan, ch->layer_begin, ch->layer_end, ch->layer_end >= src->layer_end);
    if (dest->verify && plan_sum(c, dest, dst) != STEP_DONE)
        return STEP_FAILED;
    ext->plan.piece = plan_piece(e, dest->peer);
    ext->planning = true;
    ext->paged = false;
    ext->wrs = 0;
    ext->wr_dep = NULL;
    ext->wr_deps = false;
    return STEP_DONE;
}

/* --------------------------------------------------------------- chunks */

/* The head chunk for one destination: plan, data, finish, cursors. */
static step_t send_dest(send_ctx_t *c, pdx_dest_t *dest)
{
    pdx_room_ext_t *ext = c->ext;
    const bool last = c->chunk->flags & PDX_SEND_LAST;
    uint32_t n = pdx_shard_peer_deps(c->L, dest->peer);
    pdx_dep_t **deps = c->L->use;
    step_t r;

    if (n == 0)
        return no_deps(c, dest->peer);
    if (!ext->planning && (r = plan_dest(c, dest)) != STEP_DONE)
        return r;
    if (c->L->s->page_bufs && (r = pdx_send_pages(c, dest, deps, n)) != STEP_DONE)
        return r;
    if (ext->gpu_gate && !ext->paged && (r = pdx_send_gate_host(c)) != STEP_DONE)
        return r; /* runs never wait on the GPU */
    if ((r = post_data(c, dest, deps, n)) != STEP_DONE)
        return r;
    if ((r = finish_dest(c, dest, deps, n)) != STEP_DONE)
        return r;
    /* the chunk's pages take up decode's once its last layers went */
    for (uint32_t g = 0; g < c->chunk->ngroups && !ext->xfer && pdx_send_layers_end(c); g++)
        if (!group_skipped(ext->plan.src, g, last))
            dest->cursor[g] += c->chunk->npages[g];
    ext->planning = false;
    ext->wrs = 0;
    return STEP_DONE;
}

static step_t send_chunk(send_ctx_t *c)
{
    pdx_room_ext_t *ext = c->ext;
    uint32_t ndests;
    step_t r;

    if (ext->dest_at == 0 && !ext->planning) {
        /* A fresh chunk: metadata, then the gate, before anything of it. */
        if (ext->last_sent)
            return pdx_send_fail(c, PDX_ERR_STATE, "a chunk after the last one");
        ndests = atomic_load_explicit(&ext->ndests, memory_order_acquire);
        if (pdx_room_state(c->obj) == PDX_ROOM_BOOTSTRAPPING || PDX_DESTS_COUNT(ndests) == 0)
            return STEP_WAIT; /* the ROOM message wakes the shard */
        if ((r = pdx_send_layers_check(c, PDX_DESTS_COUNT(ndests))) != STEP_DONE)
            return r;
        if ((r = pdx_send_gate_check(c, PDX_DESTS_COUNT(ndests))) != STEP_DONE)
            return r;
        pdx_send_layers_merge(c);
        /* Before the first chunk: no destination joins from here on (a ROOM
         * message's CAS fails once CLOSED is set), so every destination gets
         * every chunk from its first page on. The count does not change after. */
        if (!(ndests & PDX_DESTS_CLOSED))
            atomic_fetch_or_explicit(&ext->ndests, PDX_DESTS_CLOSED, memory_order_acq_rel);
        pdx_room_advance(c->obj, PDX_ROOM_TRANSFERRING);
    }
    ndests = PDX_DESTS_COUNT(atomic_load_explicit(&ext->ndests, memory_order_acquire));
    while (ext->dest_at < ndests) {
        if ((r = send_dest(c, &ext->dests[ext->dest_at])) != STEP_DONE)
            return r;
        ext->dest_at++;
    }
    return STEP_DONE;
}

/* ---------------------------------------------------------------- rooms */

/* Drop every chunk of a terminal room; it leaves the active list. */
static void room_drop(pdx_shard_loop_t *L, pdx_room_ext_t *ext)
{
    pdx_shard_t *s = L->s;
    uint32_t n = 0;

    for (uint32_t i = ext->head_cell; i != PDX_SHARD_NONE; n++) {
        uint32_t next = s->cell_next[i];

        pdx_gpu_gate_done(L->e, &s->ring.cells[i].chunk.gate);
        pdx_ring_done(&s->ring, &s->ring.cells[i]);
        i = next;
    }
    ext->head_cell = ext->tail_cell = PDX_SHARD_NONE;
    ext->planning = false;
    ext->gpu_gate = false;
    ext->gate_seen_ns = 0;
    ext->dest_at = 0;
    atomic_store_explicit(&ext->active, false, memory_order_release);
    /* Last touch: from here pdx_release may free the room. */
    atomic_fetch_sub_explicit(&ext->queued, n, memory_order_release);
    L->progress = true;
}

/* Work a room's chunks in order; true when it leaves the active list. */
static bool send_room(pdx_shard_loop_t *L, pdx_room_obj_t *obj, pdx_room_ext_t *ext)
{
    pdx_shard_t *s = L->s;
    send_ctx_t c = {.L = L, .obj = obj, .ext = ext, .budget = PDX_SHARD_ROOM_WRS};

    for (;;) {
        int32_t state = pdx_room_state(obj);
        uint32_t head = ext->head_cell, next;
        bool last;
        step_t r;

        if (state == PDX_ROOM_FAILED || state == PDX_ROOM_SUCCESS) {
            room_drop(L, ext);
            return true;
        }
        c.cell = &s->ring.cells[head];
        c.chunk = &c.cell->chunk;
        r = send_chunk(&c);
        if (r == STEP_FAILED) {
            room_drop(L, ext);
            return true;
        }
        if (r == STEP_WAIT)
            return false;

        /* The chunk went to every destination. */
        last = c.chunk->flags & PDX_SEND_LAST;
        next = s->cell_next[head];
        ext->head_cell = next;
        if (next == PDX_SHARD_NONE)
            ext->tail_cell = PDX_SHARD_NONE;
        ext->dest_at = 0;
        ext->seq++;
        if (last)
            ext->last_sent = true; /* the notifies just posted keep inflight > 0 */
        ext->gpu_gate = false;
        ext->gate_seen_ns = 0; /* a gate left to the GPU went without being seen open */
        pdx_send_layers_sent(&c);
        pdx_gpu_gate_done(L->e, &c.chunk->gate);
        pdx_ring_done(&s->ring, c.cell);
        atomic_fetch_add_explicit(&s->stats.chunks_sent, 1, memory_order_relaxed);
        L->progress = true;
        if (next == PDX_SHARD_NONE) {
            atomic_store_explicit(&ext->active, false, memory_order_release);
            atomic_fetch_sub_explicit(&ext->queued, 1, memory_order_release); /* last touch */
            return true;
        }
        atomic_fetch_sub_explicit(&ext->queued, 1, memory_order_release); /* more are held */
        if (c.budget == 0)
            return false;
    }
}

void pdx_shard_send(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    pdx_engine_t *e = L->e;
    uint32_t prev = PDX_SHARD_NONE, cur = s->active_head;

    if (cur == PDX_SHARD_NONE)
        return;
    pdx_shard_index_deps(L);
    while (cur != PDX_SHARD_NONE) {
        pdx_room_ext_t *ext = &e->ext[cur];
        uint32_t next = ext->next_active; /* ext may be freed once it leaves */

        if (send_room(L, &e->rooms.objs[cur], ext)) {
            if (prev == PDX_SHARD_NONE)
                s->active_head = next;
            else
                e->ext[prev].next_active = next;
            if (s->active_tail == cur)
                s->active_tail = prev;
        } else {
            prev = cur;
        }
        cur = next;
    }
}
