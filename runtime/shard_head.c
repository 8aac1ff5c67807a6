/*
 * The head chunk of a room before it is planned (shard_send.c calls these):
 * its layer range in order after the ranges before it (pdx_send_layers),
 * and its gate: open, left to the GPU (page copies to a direct peer), or
 * polled by the shard.
 */
#include "shard_send.h"
#include "peer.h"
#include "rooms.h"

#include <string.h>


/* ---------------------------------------------------------------- layers */

/* Whether the head chunk reaches its layout's last layer (a whole chunk, or
 * the last of its layer ranges). */
bool pdx_send_layers_end(const send_ctx_t *c)
{
    const pdx_layout_t *src = pdx_engine_layout(c->L->e, c->chunk->layout);

    return !src || c->chunk->layer_end >= src->layer_end;
}

bool pdx_send_layers_pinned(const send_ctx_t *c)
{
    return (c->chunk->flags & PDX_CHUNK_RANGE) && !(c->chunk->flags & PDX_SEND_LAST);
}

/* Whether chunk b is the range that follows chunk a in the same chunk of
 * tokens: the next layers, the same pages. */
static bool range_follows(const pdx_ring_t *ring, const pdx_ring_cell_t *a,
                          const pdx_ring_cell_t *b, const pdx_layout_t *src)
{
    const pdx_chunk_t *x = &a->chunk, *y = &b->chunk;
    uint32_t n = 0;

    if (!(y->flags & PDX_CHUNK_RANGE) || y->layout != x->layout ||
        y->layer_begin != x->layer_end || x->layer_end >= src->layer_end ||
        y->ngroups != x->ngroups || memcmp(y->npages, x->npages, sizeof(x->npages)) != 0 ||
        ((y->flags & PDX_SEND_LAST) && y->layer_end < src->layer_end))
        return false; /* as the head of its own, it fails the room or goes alone */
    for (uint32_t g = 0; g < x->ngroups; g++)
        n += x->npages[g];
    return memcmp(ring->pages + a->page_pos, ring->pages + b->page_pos,
                  (size_t)n * sizeof(uint32_t)) == 0;
}

void pdx_send_layers_merge(send_ctx_t *c)
{
    pdx_shard_t *s = c->L->s;
    pdx_room_ext_t *ext = c->ext;
    pdx_chunk_t *ch = &c->cell->chunk;
    const uint32_t at = (uint32_t)(c->cell - s->ring.cells);
    const pdx_layout_t *src;
    char err[PDX_ERRMSG_MAX];

    if (!(ch->flags & PDX_CHUNK_RANGE) || (ch->flags & PDX_SEND_LAST) || ext->gpu_gate ||
        ext->xfer || s->cell_next[at] == PDX_SHARD_NONE)
        return; /* the common case: a whole chunk, or nothing queued behind it */
    if (!(src = pdx_engine_layout(c->L->e, ch->layout)))
        return;
    while (!(ch->flags & PDX_SEND_LAST) && s->cell_next[at] != PDX_SHARD_NONE) {
        const uint32_t nx = s->cell_next[at];
        pdx_ring_cell_t *next = &s->ring.cells[nx];

        if (!range_follows(&s->ring, c->cell, next, src) ||
            pdx_gpu_gate_poll(&next->chunk.gate, err, sizeof(err)) != PDX_OK)
            break;
        ch->layer_end = next->chunk.layer_end;
        ch->flags |= next->chunk.flags & PDX_SEND_LAST;
        if (next->chunk.has_aux) {
            ch->has_aux = 1;
            ch->aux = next->chunk.aux;
        }
        s->cell_next[at] = s->cell_next[nx];
        if (ext->tail_cell == nx)
            ext->tail_cell = at;
        pdx_gpu_gate_done(c->L->e, &next->chunk.gate);
        pdx_ring_done(&s->ring, next);
        atomic_fetch_add_explicit(&s->stats.chunks_sent, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->stats.ranges_merged, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&ext->queued, 1, memory_order_release); /* the head holds it */
    }
}

void pdx_send_layers_notify(const send_ctx_t *c, pdx_wire_notify_t *n)
{
    const pdx_layout_t *src = c->ext->plan.src, *dst = c->ext->plan.dst;
    const pdx_chunk_t *ch = c->chunk;

    n->cover_begin = PDX_MAX(src->layer_begin, dst->layer_begin);
    n->cover_end = PDX_MAX(n->cover_begin, PDX_MIN(src->layer_end, dst->layer_end));
    n->layer_begin = PDX_MIN(PDX_MAX(ch->layer_begin, n->cover_begin), n->cover_end);
    n->layer_end = PDX_MAX(PDX_MIN(ch->layer_end, n->cover_end), n->layer_begin);
    n->pages = 0;
    for (uint32_t g = 0; g < ch->ngroups && g < src->ngroups; g++)
        if (pdx_group_layered(&src->groups[g]))
            n->pages += ch->npages[g];
}

/* A fresh chunk's layers: the first range of a chunk starts at the layout's
 * first layer, each next one where the one before ended, with the same page
 * counts; a chunk's last range ends at its last layer before another chunk
 * or PDX_SEND_LAST. */
step_t pdx_send_layers_check(send_ctx_t *c, uint32_t ndests)
{
    const pdx_chunk_t *ch = c->chunk;
    pdx_room_ext_t *ext = c->ext;
    const pdx_layout_t *src = pdx_engine_layout(c->L->e, ch->layout);
    uint32_t first, want;

    if (ext->xfer || !src)
        return STEP_DONE; /* an unknown layout fails in plan_dest */
    first = src->layer_begin;
    want = ext->layers_open ? ext->layer_next : first;
    if (ch->layer_begin != want && ext->layers_open && ch->layer_begin == first)
        return pdx_send_fail(c, PDX_ERR_RANGE, "a chunk's layers [%u, %u) were never sent: the "
                             "next chunk came first", want, src->layer_end);
    if (ch->layer_begin != want)
        return pdx_send_fail(c, PDX_ERR_RANGE, "layers [%u, %u) of a chunk whose layers "
                             "[%u, %u) were not sent before them", ch->layer_begin,
                             ch->layer_end, want, ch->layer_begin);
    for (uint32_t g = 0; g < ch->ngroups && ext->layers_open; g++)
        if (ch->npages[g] != ext->layer_npages[g])
            return pdx_send_fail(c, PDX_ERR_RANGE, "layers [%u, %u) with %u pages in group %u, "
                                 "the chunk's layers before them %u", ch->layer_begin,
                                 ch->layer_end, ch->npages[g], g, ext->layer_npages[g]);
    if ((ch->flags & PDX_SEND_LAST) && !pdx_send_layers_end(c))
        return pdx_send_fail(c, PDX_ERR_RANGE, "the last chunk stops at layer %u: layers [%u, "
                             "%u) were never sent", ch->layer_end, ch->layer_end,
                             src->layer_end);
    for (uint32_t i = 0; i < ndests && (ch->layer_begin != first || !pdx_send_layers_end(c)); i++)
        if (ext->dests[i].verify)
            return pdx_send_fail(c, PDX_ERR_INVALID, "PDX_VERIFY at %s sums whole chunks: "
                                 "layers [%u, %u) alone cannot be checked",
                                 ext->dests[i].peer->addr, ch->layer_begin, ch->layer_end);
    return STEP_DONE;
}

/* The head chunk went to every destination: where its next range starts. */
void pdx_send_layers_sent(send_ctx_t *c)
{
    pdx_room_ext_t *ext = c->ext;

    ext->layers_open = !ext->xfer && !pdx_send_layers_end(c);
    ext->layer_next = c->chunk->layer_end;
    for (uint32_t g = 0; g < c->chunk->ngroups; g++)
        ext->layer_npages[g] = c->chunk->npages[g];
}

/* ----------------------------------------------------------------- gates */

/* A closed gate whose chunk may go ahead, its page copies waiting for it
 * on the GPU: every destination a direct peer that sums nothing (a sum is
 * taken of the bytes as they are when planned), not a one-sided transfer,
 * and a gate the GPU can wait for. */
static bool gate_on_gpu(send_ctx_t *c, uint32_t ndests)
{
    if (c->ext->xfer || !c->L->s->page_bufs || !pdx_gpu_gate_on_device(c->L->e, &c->chunk->gate))
        return false;
    for (uint32_t i = 0; i < ndests; i++)
        if (!c->ext->dests[i].peer->direct || c->ext->dests[i].verify)
            return false;
    return true;
}

/* The head chunk's gate found closed: from its age, whether it is due now
 * (L->gate_due: the shard polls without sleeping), else when to poll it
 * next (L->gate_wake_ns, the earliest of the pass): gate_hist.h. */
static void gate_closed(send_ctx_t *c)
{
    pdx_shard_loop_t *L = c->L;
    pdx_room_ext_t *ext = c->ext;
    const uint64_t now = pdx_now_ns();
    uint64_t age, wait;

    if (ext->gate_seen_ns == 0)
        ext->gate_seen_ns = now;
    ext->gate_closed_ns = now;
    age = now - ext->gate_seen_ns;
    wait = pdx_gate_hist_next(&L->gate_hist, age, (uint64_t)L->e->cfg.gate_spin_us * 1000u);
    ext->gate_due = wait == 0;
    if (wait == 0)
        L->gate_due = true;
    wait = PDX_MIN(wait, pdx_gate_sleep_ns(age, (uint64_t)L->e->cfg.gate_backoff_us * 1000u));
    L->gate_wake_ns = PDX_MIN(L->gate_wake_ns, now + wait);
    L->gated = true;
}

/* ... and found open: the interval it opened in joins the shard's history. */
static void gate_opened(send_ctx_t *c)
{
    pdx_shard_loop_t *L = c->L;
    pdx_room_ext_t *ext = c->ext;
    uint64_t age;

    if (ext->gate_seen_ns == 0)
        return; /* open when first polled */
    age = pdx_now_ns() - ext->gate_seen_ns;
    /* kept when known about as closely as the shard's sleeps allow (wider:
     * the shard was busy elsewhere) */
    pdx_gate_hist_add(&L->gate_hist, ext->gate_closed_ns - ext->gate_seen_ns, age,
                      2 * pdx_gate_sleep_ns(age, (uint64_t)L->e->cfg.gate_backoff_us * 1000u));
    atomic_fetch_add_explicit(&L->s->stats.gates_waited, 1, memory_order_relaxed);
    if (ext->gate_due)
        atomic_fetch_add_explicit(&L->s->stats.gates_foreseen, 1, memory_order_relaxed);
    ext->gate_seen_ns = 0;
    ext->gate_due = false;
}

/* A poll of the head chunk's gate: DONE when open, WAIT while closed (the
 * shard sleeps bounded, or not at all while it is due), else the room
 * fails. */
static step_t gate_polled(send_ctx_t *c, pdx_status_t st, const char *err)
{
    if (PDX_LIKELY(st == PDX_OK)) {
        c->ext->gpu_gate = false;
        if (c->chunk->gate.kind != PDX_GATE_NONE) {
            gate_opened(c);
            PDX_MARKER_PUSH_ROOM("pdx gate open", c->chunk->room);
            PDX_MARKER_POP();
        }
        return STEP_DONE;
    }
    if (st == PDX_INPROGRESS) {
        gate_closed(c);
        return STEP_WAIT;
    }
    return pdx_send_fail(c, st, "%s", err);
}

/* Gate of the head chunk: DONE when open, or when it is left to the GPU. */
step_t pdx_send_gate_check(send_ctx_t *c, uint32_t ndests)
{
    char err[PDX_ERRMSG_MAX] = "";
    pdx_status_t st = pdx_gpu_gate_poll(&c->chunk->gate, err, sizeof(err));

    c->ext->gpu_gate = st == PDX_INPROGRESS && gate_on_gpu(c, ndests);
    return c->ext->gpu_gate ? STEP_DONE : gate_polled(c, st, err);
}

/* A chunk left to the GPU's gate that is about to go another way (runs, or
 * a transport with no room for the gate): DONE once the gate opened. */
step_t pdx_send_gate_host(send_ctx_t *c)
{
    char err[PDX_ERRMSG_MAX] = "";

    return gate_polled(c, pdx_gpu_gate_poll(&c->chunk->gate, err, sizeof(err)), err);
}
