/*
 * wire_notify: the notify record a data endpoint SENDs after a chunk's
 * writes (wire.h): its flags, the sum or layers it may carry, credits.
 * Pure: no I/O, no logging; malformed input is PDX_ERR_PROTO with a static
 * reason the caller logs.
 */
#include "wire_buf.h"

#define NOTIFY_FLAGS (PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_STATUS_ONLY | PDX_WIRE_NOTIFY_CREDIT | \
                      PDX_WIRE_NOTIFY_SUM | PDX_WIRE_NOTIFY_AUX | PDX_WIRE_NOTIFY_LAYERS)

/* Layers ride on a notify of data that is not the last: a range inside the
 * sender's cover, both ranges. */
static const char *layers_invalid(const pdx_wire_notify_t *n)
{
    if (n->flags & ~(uint32_t)PDX_WIRE_NOTIFY_LAYERS || n->status != PDX_OK)
        return "notify layers on a record that is not a successful chunk before the last";
    if (n->layer_begin > n->layer_end || n->cover_begin > n->cover_end)
        return "notify layers end before they begin";
    if (n->layer_begin < n->layer_end &&
        (n->layer_begin < n->cover_begin || n->layer_end > n->cover_end))
        return "notify layers outside the layers the sender holds";
    return NULL;
}

/* A sum rides on a LAST notify that reports data, layers on one before it;
 * without its flag, a field of either is zero. */
static const char *extras_invalid(const pdx_wire_notify_t *n)
{
    if (n->flags & PDX_WIRE_NOTIFY_LAYERS)
        return n->flags & PDX_WIRE_NOTIFY_SUM ? "notify record with both a sum and layers"
                                              : layers_invalid(n);
    if (n->cover_begin || n->cover_end || n->pages)
        return "notify layer fields without the flag";
    if (!(n->flags & PDX_WIRE_NOTIFY_SUM))
        return n->sum || n->layer_begin || n->layer_end || (n->flags & PDX_WIRE_NOTIFY_AUX)
                   ? "notify sum fields without the flag" : NULL;
    if (!(n->flags & PDX_WIRE_NOTIFY_LAST) || (n->flags & PDX_WIRE_NOTIFY_STATUS_ONLY) ||
        n->status != PDX_OK)
        return "notify sum on a record that is not a successful last chunk";
    if (n->layer_begin > n->layer_end)
        return "notify sum layers end before they begin";
    return NULL;
}

/* A credit record: that flag alone, no room, a count in range, status OK. */
static bool credit_ok(const pdx_wire_notify_t *n)
{
    return n->flags == PDX_WIRE_NOTIFY_CREDIT && n->room == 0 && n->seq == 0 &&
           n->count >= 1 && n->count <= PDX_WIRE_MAX_CREDIT && n->status == PDX_OK;
}

_Static_assert(PDX_WIRE_NOTIFY_SUM_SIZE <= PDX_TP_SEND_MAX, "a notify record must fit one SEND");
_Static_assert(PDX_WIRE_NOTIFY_SUM_SIZE == PDX_WIRE_NOTIFY_SIZE + 8 + 4 + 4, "notify sum size");
_Static_assert(PDX_WIRE_NOTIFY_LAYERS_SIZE == PDX_WIRE_NOTIFY_SIZE + 5 * 4, "notify layers size");
_Static_assert(PDX_WIRE_NOTIFY_LAYERS_SIZE <= PDX_TP_SEND_MAX, "a notify record must fit one SEND");

/* The record's size for its flags. */
static size_t notify_size(uint32_t flags)
{
    return flags & PDX_WIRE_NOTIFY_SUM      ? PDX_WIRE_NOTIFY_SUM_SIZE
           : flags & PDX_WIRE_NOTIFY_LAYERS ? PDX_WIRE_NOTIFY_LAYERS_SIZE
                                            : PDX_WIRE_NOTIFY_SIZE;
}
_Static_assert(PDX_WIRE_NOTIFY_SIZE == 4 + 2 + 2 + 8 + 8 + 4 + 4 + 4, "notify record size");

pdx_status_t pdx_wire_notify_encode(const pdx_wire_notify_t *n, void *buf, size_t cap,
                                    size_t *size_p)
{
    pdx_wire_wr_t w = {buf, 0};

    if (!n || (n->flags & ~(uint32_t)NOTIFY_FLAGS) || n->status > 0 ||
        ((n->flags & PDX_WIRE_NOTIFY_STATUS_ONLY) && n->count) ||
        ((n->flags & PDX_WIRE_NOTIFY_CREDIT) && !credit_ok(n)) || extras_invalid(n))
        return PDX_ERR_INVALID;
    if (!buf || cap < notify_size(n->flags))
        return PDX_ERR_RANGE;
    pdx_wire_wr_u32(&w, PDX_WIRE_NOTIFY_MAGIC);
    pdx_wire_wr_u16(&w, (uint16_t)n->flags);
    pdx_wire_wr_u16(&w, 0);
    pdx_wire_wr_u64(&w, n->room);
    pdx_wire_wr_u64(&w, n->sender);
    pdx_wire_wr_u32(&w, n->seq);
    pdx_wire_wr_u32(&w, n->count);
    pdx_wire_wr_i32(&w, n->status);
    if (n->flags & PDX_WIRE_NOTIFY_SUM) {
        pdx_wire_wr_u64(&w, n->sum);
        pdx_wire_wr_u32(&w, n->layer_begin);
        pdx_wire_wr_u32(&w, n->layer_end);
    } else if (n->flags & PDX_WIRE_NOTIFY_LAYERS) {
        pdx_wire_wr_u32(&w, n->layer_begin);
        pdx_wire_wr_u32(&w, n->layer_end);
        pdx_wire_wr_u32(&w, n->cover_begin);
        pdx_wire_wr_u32(&w, n->cover_end);
        pdx_wire_wr_u32(&w, n->pages);
    }
    *size_p = w.off;
    return PDX_OK;
}

pdx_status_t pdx_wire_notify_decode(const void *buf, size_t len, pdx_wire_notify_t *n_p,
                                    const char **why_p)
{
    const char *why_local;
    const char **why = why_p ? why_p : &why_local;
    pdx_wire_rd_t r = {buf, len, 0, false};
    pdx_wire_notify_t n = {0};
    uint32_t magic;
    uint16_t reserved;
    int32_t status;

    if (len != PDX_WIRE_NOTIFY_SIZE && len != PDX_WIRE_NOTIFY_SUM_SIZE &&
        len != PDX_WIRE_NOTIFY_LAYERS_SIZE) {
        *why = "notify record of the wrong size";
        return PDX_ERR_PROTO;
    }
    magic = pdx_wire_rd_u32(&r);
    n.flags = pdx_wire_rd_u16(&r);
    reserved = pdx_wire_rd_u16(&r);
    n.room = pdx_wire_rd_u64(&r);
    n.sender = pdx_wire_rd_u64(&r);
    n.seq = pdx_wire_rd_u32(&r);
    n.count = pdx_wire_rd_u32(&r);
    status = pdx_wire_rd_i32(&r);
    if (len == PDX_WIRE_NOTIFY_SUM_SIZE) {
        n.sum = pdx_wire_rd_u64(&r);
        n.layer_begin = pdx_wire_rd_u32(&r);
        n.layer_end = pdx_wire_rd_u32(&r);
    } else if (len == PDX_WIRE_NOTIFY_LAYERS_SIZE) {
        n.layer_begin = pdx_wire_rd_u32(&r);
        n.layer_end = pdx_wire_rd_u32(&r);
        n.cover_begin = pdx_wire_rd_u32(&r);
        n.cover_end = pdx_wire_rd_u32(&r);
        n.pages = pdx_wire_rd_u32(&r);
    }
    if (magic != PDX_WIRE_NOTIFY_MAGIC) {
        *why = "bad notify magic";
        return PDX_ERR_PROTO;
    }
    if ((n.flags & ~(uint32_t)NOTIFY_FLAGS) || reserved) {
        *why = "unknown notify flags";
        return PDX_ERR_PROTO;
    }
    if (status > 0) {
        *why = "notify status is neither OK nor an error";
        return PDX_ERR_PROTO;
    }
    if ((n.flags & PDX_WIRE_NOTIFY_STATUS_ONLY) && n.count) {
        *why = "status-only notify with writes";
        return PDX_ERR_PROTO;
    }
    n.status = (pdx_status_t)status;
    if ((n.flags & PDX_WIRE_NOTIFY_CREDIT) && !credit_ok(&n)) {
        *why = "credit record with other flags, a room, or a count outside 1..4096";
        return PDX_ERR_PROTO;
    }
    if (notify_size(n.flags) != len) {
        *why = "notify record of the wrong size for its flags";
        return PDX_ERR_PROTO;
    }
    if ((*why = extras_invalid(&n)) != NULL)
        return PDX_ERR_PROTO;
    *n_p = n;
    return PDX_OK;
}
