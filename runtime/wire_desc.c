/*
 * wire_desc: the descriptor messages of the control channel: MEM (regions a
 * peer may write), EXPORT (what a direct peer opens one of them with),
 * LAYOUT (where an engine's KV pages live) and ROOM (the destination pages
 * of one request). Frames and the other messages are in wire.c.
 *
 * LAYOUT decodes with the checks of pdx_layout_from_desc() (layout.c) plus
 * the invariants of a pdx_layout_t, so plan.c may trust a peer's layout as
 * much as a local one. ROOM decodes without allocating: its page lists stay
 * in the frame.
 */
#include "wire_buf.h"

#include <stdlib.h>

#define GROUP_FLAGS (PDX_GROUP_NO_LAYERS | PDX_GROUP_STATE)

/* --------------------------------------------------------------------- MEM */

/* The region and, in pieces, npieces == ceil(len / piece) for a power of two. */
static bool rkey_valid(const pdx_tp_rkey_t *k)
{
    if (k->len == 0 || k->addr > UINT64_MAX - k->len)
        return false;
    if (k->npieces == 1)
        return true;
    return k->npieces >= 2 && k->npieces <= PDX_TP_PIECES_MAX && k->piece &&
           !(k->piece & (k->piece - 1)) && k->piece < k->len &&
           (k->len - 1) / k->piece + 1 == k->npieces;
}

static void put_mem(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_mem_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->count);
    for (uint32_t i = 0; i < m->count; i++) {
        const pdx_tp_rkey_t *k = &m->entries[i].rkey;

        pdx_wire_wr_u32(w, m->entries[i].mem);
        pdx_wire_wr_u32(w, m->entries[i].nic);
        pdx_wire_wr_u64(w, k->addr);
        pdx_wire_wr_u64(w, k->len);
        pdx_wire_wr_u32(w, k->rkey);
        pdx_wire_wr_u32(w, k->npieces);
        if (k->npieces > 1) {
            pdx_wire_wr_u64(w, k->piece);
            for (uint32_t p = 1; p < k->npieces; p++)
                pdx_wire_wr_u32(w, k->rkeys[p]);
        }
    }
}

pdx_status_t pdx_wire_encode_mem(const pdx_wire_mem_t *m, void *buf, size_t cap,
                                 size_t *size_p)
{
    uint64_t keys = 0;

    if (!m || m->count > PDX_WIRE_MAX_MEMS || (m->count && !m->entries))
        return PDX_ERR_INVALID;
    for (uint32_t i = 0; i < m->count; i++) {
        const pdx_tp_rkey_t *k = &m->entries[i].rkey;

        if (!rkey_valid(k) || (k->npieces > 1 && (!k->rkeys || k->rkeys[0] != k->rkey)) ||
            m->entries[i].nic >= PDX_WIRE_MAX_NICS)
            return PDX_ERR_INVALID;
        keys += k->npieces - 1;
    }
    if (keys > PDX_WIRE_MAX_MEM_KEYS)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_MEM, put_mem, m, NULL, buf, cap, size_p);
}

pdx_status_t pdx_wire_get_mem(pdx_wire_rd_t *r, pdx_wire_mem_t *m, const char **why)
{
    pdx_wire_mem_entry_t *e;
    uint32_t *keys, *keys_end;
    size_t nkeys;

    m->count = pdx_wire_rd_u32(r);
    m->entries = NULL;
    if (r->short_read) {
        *why = "truncated MEM";
        return PDX_ERR_PROTO;
    }
    if (m->count > PDX_WIRE_MAX_MEMS) {
        *why = "MEM count above PDX_WIRE_MAX_MEMS";
        return PDX_ERR_PROTO;
    }
    if (pdx_wire_rd_left(r) < (size_t)m->count * PDX_WIRE_MEM_ENTRY) {
        *why = "MEM count disagrees with the body length";
        return PDX_ERR_PROTO;
    }
    if (m->count == 0) {
        if (pdx_wire_rd_left(r)) {
            *why = "MEM count disagrees with the body length";
            return PDX_ERR_PROTO;
        }
        return PDX_OK;
    }
    /* The entries, then room for every rkey: those the body could hold plus
     * each entry's first (not repeated on the wire). */
    nkeys = pdx_wire_rd_left(r) / 4 + m->count;
    e = malloc(m->count * sizeof(*e) + nkeys * sizeof(uint32_t));
    if (!e) {
        *why = "out of memory for MEM entries";
        return PDX_ERR_NOMEM;
    }
    keys = (uint32_t *)(void *)(e + m->count);
    keys_end = keys + nkeys;
    for (uint32_t i = 0; i < m->count; i++) {
        pdx_tp_rkey_t *k = &e[i].rkey;

        e[i].mem = pdx_wire_rd_u32(r);
        e[i].nic = pdx_wire_rd_u32(r);
        *k = (pdx_tp_rkey_t){.addr = pdx_wire_rd_u64(r), .len = pdx_wire_rd_u64(r),
                             .rkey = pdx_wire_rd_u32(r), .npieces = pdx_wire_rd_u32(r)};
        if (k->npieces > 1 && !r->short_read) {
            k->piece = pdx_wire_rd_u64(r);
            if (r->short_read) {
                *why = "truncated MEM";
                goto err;
            }
            if (k->npieces > PDX_TP_PIECES_MAX ||
                pdx_wire_rd_left(r) < (size_t)(k->npieces - 1) * 4u ||
                (size_t)(keys_end - keys) < k->npieces) {
                *why = "MEM pieces beyond the limit or the body";
                goto err;
            }
            k->rkeys = keys;
            keys[0] = k->rkey;
            for (uint32_t p = 1; p < k->npieces; p++)
                keys[p] = pdx_wire_rd_u32(r);
            keys += k->npieces;
        }
        if (r->short_read) {
            *why = "truncated MEM";
            goto err;
        }
        if (!rkey_valid(k)) {
            *why = "MEM region empty, wrapping the address space, or its pieces inconsistent";
            goto err;
        }
        if (e[i].nic >= PDX_WIRE_MAX_NICS) {
            *why = "MEM NIC outside 0..PDX_WIRE_MAX_NICS - 1";
            goto err;
        }
    }
    if (pdx_wire_rd_left(r)) {
        *why = "MEM count disagrees with the body length";
        goto err;
    }
    m->entries = e;
    return PDX_OK;

err:
    free(e);
    return PDX_ERR_PROTO;
}

/* ------------------------------------------------------------------ EXPORT */

static void put_export(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_export_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->mem);
    pdx_wire_wr_u32(w, m->len);
    pdx_wire_wr_bytes(w, m->bytes, m->len);
}

pdx_status_t pdx_wire_encode_export(const pdx_wire_export_t *m, void *buf, size_t cap,
                                    size_t *size_p)
{
    if (!m || m->len == 0 || m->len > PDX_TP_EXPORT_MAX)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_EXPORT, put_export, m, NULL, buf, cap, size_p);
}

pdx_status_t pdx_wire_get_export(pdx_wire_rd_t *r, pdx_wire_export_t *m, const char **why)
{
    m->mem = pdx_wire_rd_u32(r);
    m->len = pdx_wire_rd_u32(r);
    if (m->len == 0 || m->len > PDX_TP_EXPORT_MAX || m->len != pdx_wire_rd_left(r)) {
        *why = "EXPORT length outside 1..PDX_TP_EXPORT_MAX or unlike its body";
        return PDX_ERR_PROTO;
    }
    pdx_wire_rd_bytes(r, m->bytes, m->len);
    return PDX_OK;
}

/* ------------------------------------------------------------------ LAYOUT */

static const char *layout_range_invalid(uint32_t ngroups, uint32_t begin, uint32_t end)
{
    if (ngroups == 0 || ngroups > PDX_LAYOUT_MAX_GROUPS)
        return "LAYOUT group count outside 1..PDX_LAYOUT_MAX_GROUPS";
    if (end <= begin || end - begin > PDX_LAYOUT_MAX_LAYERS)
        return "LAYOUT layer range empty or above PDX_LAYOUT_MAX_LAYERS";
    return NULL;
}

static const char *group_invalid(uint32_t flags, uint32_t bpl, uint32_t nbuffers,
                                 uint64_t npages, uint32_t nlayers)
{
    if (flags & ~(uint32_t)GROUP_FLAGS)
        return "LAYOUT group has unknown flags";
    if (nbuffers == 0 || nbuffers > PDX_LAYOUT_MAX_BUFFERS)
        return "LAYOUT buffer count outside 1..PDX_LAYOUT_MAX_BUFFERS";
    if (npages == 0 || npages > UINT32_MAX)
        return "LAYOUT page count outside 1..2^32-1";
    if (flags & PDX_GROUP_NO_LAYERS) {
        if (bpl != nbuffers)
            return "LAYOUT group without layers: buffers_per_layer != nbuffers";
    } else if ((uint64_t)nlayers * bpl != nbuffers) {
        return "LAYOUT buffer count != layers x buffers_per_layer";
    }
    return NULL;
}

static const char *buffer_invalid(uint64_t offset, uint64_t bpp, uint64_t npages)
{
    if (bpp == 0 || bpp > (UINT64_MAX - offset) / npages)
        return "LAYOUT page size 0 or buffer end overflows";
    return NULL;
}

static void put_layout(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_layout_t *m = arg;
    const pdx_layout_t *l = m->layout;

    (void)extra;
    pdx_wire_wr_u32(w, m->id);
    pdx_wire_wr_u32(w, l->ngroups);
    pdx_wire_wr_u32(w, l->layer_begin);
    pdx_wire_wr_u32(w, l->layer_end);
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const pdx_group_t *grp = &l->groups[g];

        pdx_wire_wr_u32(w, grp->flags);
        pdx_wire_wr_u32(w, grp->buffers_per_layer);
        pdx_wire_wr_u32(w, grp->nbuffers);
        pdx_wire_wr_u64(w, grp->npages);
        for (uint32_t b = 0; b < grp->nbuffers; b++) {
            pdx_wire_wr_u32(w, grp->buffers[b].mem);
            pdx_wire_wr_u64(w, grp->buffers[b].offset);
            pdx_wire_wr_u64(w, grp->buffers[b].bytes_per_page);
        }
    }
}

pdx_status_t pdx_wire_encode_layout(const pdx_wire_layout_t *m, void *buf, size_t cap,
                                    size_t *size_p)
{
    const pdx_layout_t *l;

    if (!m || !m->layout)
        return PDX_ERR_INVALID;
    l = m->layout;
    if (layout_range_invalid(l->ngroups, l->layer_begin, l->layer_end) || !l->groups)
        return PDX_ERR_INVALID;
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const pdx_group_t *grp = &l->groups[g];

        if (group_invalid(grp->flags, grp->buffers_per_layer, grp->nbuffers, grp->npages,
                          l->layer_end - l->layer_begin) || !grp->buffers)
            return PDX_ERR_INVALID;
        for (uint32_t b = 0; b < grp->nbuffers; b++)
            if (buffer_invalid(grp->buffers[b].offset, grp->buffers[b].bytes_per_page,
                               grp->npages))
                return PDX_ERR_INVALID;
    }
    return pdx_wire_encode_frame(PDX_WIRE_LAYOUT, put_layout, m, NULL, buf, cap, size_p);
}

/*
 * Walk the groups that follow the layout head. Without `out`: check every
 * count against its limit and the bytes left, and collect nbuffers[]. With
 * `out` (allocated from nbuffers[] after a first walk passed): fill it.
 */
static pdx_status_t walk_groups(pdx_wire_rd_t *r, uint32_t ngroups, uint32_t nlayers,
                                uint32_t *nbuffers, pdx_layout_t *out, const char **why)
{
    for (uint32_t g = 0; g < ngroups; g++) {
        uint32_t flags = pdx_wire_rd_u32(r);
        uint32_t bpl = pdx_wire_rd_u32(r);
        uint32_t nb = pdx_wire_rd_u32(r);
        uint64_t npages = pdx_wire_rd_u64(r);
        const char *bad;

        if (r->short_read) {
            *why = "LAYOUT group count disagrees with the body length";
            return PDX_ERR_PROTO;
        }
        bad = group_invalid(flags, bpl, nb, npages, nlayers);
        if (!bad && pdx_wire_rd_left(r) < (size_t)nb * PDX_WIRE_LAYOUT_BUFFER)
            bad = "LAYOUT buffer count disagrees with the body length";
        if (bad) {
            *why = bad;
            return PDX_ERR_PROTO;
        }
        if (out) {
            out->groups[g].flags = flags;
            out->groups[g].buffers_per_layer = bpl;
            out->groups[g].npages = npages;
        }
        for (uint32_t b = 0; b < nb; b++) {
            pdx_buffer_t buf;

            buf.mem = pdx_wire_rd_u32(r);
            buf.offset = pdx_wire_rd_u64(r);
            buf.bytes_per_page = pdx_wire_rd_u64(r);
            bad = buffer_invalid(buf.offset, buf.bytes_per_page, npages);
            if (bad) {
                *why = bad;
                return PDX_ERR_PROTO;
            }
            if (out)
                out->groups[g].buffers[b] = buf;
        }
        nbuffers[g] = nb;
    }
    if (pdx_wire_rd_left(r)) {
        *why = "bytes after the last LAYOUT group";
        return PDX_ERR_PROTO;
    }
    return PDX_OK;
}

pdx_status_t pdx_wire_get_layout(pdx_wire_rd_t *r, pdx_wire_layout_t *m, const char **why)
{
    uint32_t nbuffers[PDX_LAYOUT_MAX_GROUPS];
    uint32_t id, ngroups, begin, end;
    pdx_layout_t *layout;
    pdx_status_t st;
    const char *bad;
    size_t groups_at;

    id = pdx_wire_rd_u32(r);
    ngroups = pdx_wire_rd_u32(r);
    begin = pdx_wire_rd_u32(r);
    end = pdx_wire_rd_u32(r);
    if (r->short_read) {
        *why = "truncated LAYOUT";
        return PDX_ERR_PROTO;
    }
    bad = layout_range_invalid(ngroups, begin, end);
    if (bad) {
        *why = bad;
        return PDX_ERR_PROTO;
    }
    groups_at = r->off;
    st = walk_groups(r, ngroups, end - begin, nbuffers, NULL, why);
    if (st != PDX_OK)
        return st;
    layout = pdx_layout_alloc(ngroups, nbuffers);
    if (!layout) {
        *why = "out of memory for a LAYOUT";
        return PDX_ERR_NOMEM;
    }
    layout->layer_begin = begin;
    layout->layer_end = end;
    r->off = groups_at;
    st = walk_groups(r, ngroups, end - begin, nbuffers, layout, why);
    if (st != PDX_OK) { /* the first walk passed: not reached */
        pdx_layout_free(layout);
        return st;
    }
    m->id = id;
    m->layout = layout;
    return PDX_OK;
}

/* -------------------------------------------------------------------- ROOM */

static const char *room_invalid(const pdx_wire_room_t *m)
{
    if (m->nsenders == 0 || m->nsenders > PDX_WIRE_MAX_SENDERS)
        return "ROOM sender count outside 1..PDX_WIRE_MAX_SENDERS";
    if (m->flags & ~(uint32_t)(PDX_WIRE_ROOM_AUX | PDX_WIRE_ROOM_VERIFY))
        return "ROOM has unknown flags";
    if (m->flags & PDX_WIRE_ROOM_AUX) {
        if (m->aux.len == 0 || m->aux.offset > UINT64_MAX - m->aux.len)
            return "ROOM aux region empty or wrapping";
    } else if (m->aux.mem || m->aux.offset || m->aux.len) {
        return "ROOM aux region set without its flag";
    }
    if (m->ngroups == 0 || m->ngroups > PDX_LAYOUT_MAX_GROUPS)
        return "ROOM group count outside 1..PDX_LAYOUT_MAX_GROUPS";
    return NULL;
}

static void put_room(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_room_t *m = arg;
    const pdx_pages_t *pages = extra;

    pdx_wire_wr_u64(w, m->room);
    pdx_wire_wr_u32(w, m->layout);
    pdx_wire_wr_u32(w, m->nsenders);
    pdx_wire_wr_u32(w, m->timeout_ms);
    pdx_wire_wr_u32(w, m->flags);
    pdx_wire_wr_u32(w, m->aux.mem);
    pdx_wire_wr_u64(w, m->aux.offset);
    pdx_wire_wr_u64(w, m->aux.len);
    pdx_wire_wr_u32(w, m->ngroups);
    for (uint32_t g = 0; g < m->ngroups; g++) {
        pdx_wire_wr_u32(w, pages[g].npages);
        if (!w->p) {
            w->off += (size_t)pages[g].npages * 4u;
            continue;
        }
        for (uint32_t i = 0; i < pages[g].npages; i++)
            pdx_wire_wr_u32(w, pages[g].pages[i]);
    }
}

pdx_status_t pdx_wire_encode_room(const pdx_wire_room_t *m, const pdx_pages_t *pages, void *buf,
                                  size_t cap, size_t *size_p)
{
    uint64_t total = 0;

    if (!m || !pages || room_invalid(m))
        return PDX_ERR_INVALID;
    for (uint32_t g = 0; g < m->ngroups; g++) {
        if (pages[g].npages && !pages[g].pages)
            return PDX_ERR_INVALID;
        total += pages[g].npages;
    }
    if (total > PDX_WIRE_MAX_ROOM_PAGES)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_ROOM, put_room, m, pages, buf, cap, size_p);
}

pdx_status_t pdx_wire_get_room(pdx_wire_rd_t *r, pdx_wire_room_t *m, const char **why)
{
    uint64_t total = 0;
    const char *bad;

    memset(m, 0, sizeof(*m));
    m->room = pdx_wire_rd_u64(r);
    m->layout = pdx_wire_rd_u32(r);
    m->nsenders = pdx_wire_rd_u32(r);
    m->timeout_ms = pdx_wire_rd_u32(r);
    m->flags = pdx_wire_rd_u32(r);
    m->aux.mem = pdx_wire_rd_u32(r);
    m->aux.offset = pdx_wire_rd_u64(r);
    m->aux.len = pdx_wire_rd_u64(r);
    m->ngroups = pdx_wire_rd_u32(r);
    if (r->short_read) {
        *why = "truncated ROOM";
        return PDX_ERR_PROTO;
    }
    bad = room_invalid(m);
    if (bad) {
        *why = bad;
        return PDX_ERR_PROTO;
    }
    for (uint32_t g = 0; g < m->ngroups; g++) {
        uint32_t n = pdx_wire_rd_u32(r);

        if (r->short_read)
            bad = "ROOM group count disagrees with the body length";
        else if ((total += n) > PDX_WIRE_MAX_ROOM_PAGES)
            bad = "ROOM pages above PDX_WIRE_MAX_ROOM_PAGES";
        else if (pdx_wire_rd_left(r) < (size_t)n * 4u)
            bad = "ROOM page count disagrees with the body length";
        if (bad) {
            *why = bad;
            return PDX_ERR_PROTO;
        }
        m->npages[g] = n;
        m->pages_at[g] = r->p + r->off;
        r->off += (size_t)n * 4u;
    }
    if (pdx_wire_rd_left(r)) {
        *why = "bytes after the last ROOM page list";
        return PDX_ERR_PROTO;
    }
    return PDX_OK;
}

uint32_t pdx_wire_room_page(const pdx_wire_room_t *m, uint32_t g, uint32_t i)
{
    return (uint32_t)pdx_wire_le(m->pages_at[g] + (size_t)i * 4u, 4);
}

pdx_status_t pdx_wire_room_copy(const pdx_wire_room_t *m, uint32_t g, uint32_t *out,
                                uint32_t cap)
{
    if (g >= m->ngroups)
        return PDX_ERR_INVALID;
    if (cap < m->npages[g])
        return PDX_ERR_RANGE;
    for (uint32_t i = 0; i < m->npages[g]; i++)
        out[i] = pdx_wire_room_page(m, g, i);
    return PDX_OK;
}
