/*
 * wire: frames and the small control messages (HELLO, EP, ABORT, ABORT_ACK,
 * HEARTBEAT, ERROR, CREDIT, READY, RESET, BYE, AUTH). The descriptor
 * messages (MEM, LAYOUT, ROOM) are in wire_desc.c, the data endpoints' notify
 * record in wire_notify.c; byte readers and writers in wire_buf.h.
 * Pure: no I/O, no logging; malformed input is PDX_ERR_PROTO with a static
 * reason the caller logs.
 */
#include "wire_buf.h"

#include "util.h"

#include <stdlib.h>

#define EP_FIXED     (4u + 4u + 4u + 4u)
#define ABORT_FIXED  (8u + 4u + 2u)  /* ABORT and ERROR: room, status, string */
#define ACK_FIXED    8u
#define BEAT_FIXED   16u
#define CREDIT_FIXED 16u
#define RESET_FIXED  (4u + 4u + 4u + 4u + 2u)
#define BYE_FIXED    2u

_Static_assert(PDX_TP_ADDR_MAX <= UINT16_MAX && PDX_WIRE_REASON_MAX <= UINT16_MAX &&
               PDX_WIRE_HOST_MAX <= UINT16_MAX, "strings have 16-bit lengths");

/* Body length bounds per type, checked by pdx_wire_peek() and the encoders. */
static const struct {
    const char *name;
    uint32_t    min, max;
} types[] = {
    /* Later versions may append to HELLO: its body is bounded only by the frame. */
    [PDX_WIRE_HELLO]     = {"HELLO", 4, PDX_WIRE_MAX_BODY},
    [PDX_WIRE_MEM]       = {"MEM", PDX_WIRE_MEM_HEAD, PDX_WIRE_MEM_MAX},
    [PDX_WIRE_LAYOUT]    = {"LAYOUT",
                            PDX_WIRE_LAYOUT_HEAD + PDX_WIRE_LAYOUT_GROUP + PDX_WIRE_LAYOUT_BUFFER,
                            PDX_WIRE_LAYOUT_MAX},
    [PDX_WIRE_EP]        = {"EP", EP_FIXED, EP_FIXED + PDX_TP_ADDR_MAX},
    [PDX_WIRE_ROOM]      = {"ROOM", PDX_WIRE_ROOM_HEAD + PDX_WIRE_ROOM_GROUP, PDX_WIRE_ROOM_MAX},
    [PDX_WIRE_ABORT]     = {"ABORT", ABORT_FIXED, ABORT_FIXED + PDX_WIRE_REASON_MAX},
    [PDX_WIRE_ABORT_ACK] = {"ABORT_ACK", ACK_FIXED, ACK_FIXED},
    [PDX_WIRE_HEARTBEAT] = {"HEARTBEAT", BEAT_FIXED, BEAT_FIXED},
    [PDX_WIRE_ERROR]     = {"ERROR", ABORT_FIXED, ABORT_FIXED + PDX_WIRE_REASON_MAX},
    [PDX_WIRE_CREDIT]    = {"CREDIT", CREDIT_FIXED, CREDIT_FIXED},
    [PDX_WIRE_READY]     = {"READY", 0, 0},
    [PDX_WIRE_RESET]     = {"RESET", RESET_FIXED, RESET_FIXED + PDX_WIRE_REASON_MAX},
    [PDX_WIRE_BYE]       = {"BYE", BYE_FIXED, BYE_FIXED + PDX_WIRE_REASON_MAX},
    /* Later versions may append to AUTH, as to HELLO. */
    [PDX_WIRE_AUTH]      = {"AUTH", 4, PDX_WIRE_MAX_BODY},
    [PDX_WIRE_SEALED]    = {"SEALED", PDX_WIRE_HEADER_SIZE + PDX_WIRE_SEAL_TAG,
                            PDX_WIRE_MAX_FRAME + PDX_WIRE_SEAL_TAG},
    [PDX_WIRE_EXPORT]    = {"EXPORT", 4 + 4 + 1, 4 + 4 + PDX_TP_EXPORT_MAX},
};

static bool type_known(uint32_t type)
{
    return type < PDX_ARRAY_SIZE(types) && types[type].name;
}

const char *pdx_wire_type_str(uint32_t type)
{
    return type_known(type) ? types[type].name : "?";
}

/* ----------------------------------------------------------------- strings */

/* A u16-length string of at most max bytes, without NUL, into out[max + 1]. */
static pdx_status_t rd_str(pdx_wire_rd_t *r, char *out, size_t max, const char **why)
{
    uint16_t n = pdx_wire_rd_u16(r);

    if (r->short_read || pdx_wire_rd_left(r) < n) {
        *why = "truncated string";
        return PDX_ERR_PROTO;
    }
    if (n > max) {
        *why = "string above its limit";
        return PDX_ERR_PROTO;
    }
    if (memchr(r->p + r->off, '\0', n)) {
        *why = "NUL byte inside a string";
        return PDX_ERR_PROTO;
    }
    for (uint16_t i = 0; i < n; i++) {
        if (r->p[r->off + i] < 0x20 || r->p[r->off + i] == 0x7f) {
            *why = "control character inside a string"; /* it would reach a log line */
            return PDX_ERR_PROTO;
        }
    }
    pdx_wire_rd_bytes(r, out, n);
    out[n] = '\0';
    return PDX_OK;
}

/* The encoder checked strlen(s) against the limit, which is below 2^16. */
static void wr_str(pdx_wire_wr_t *w, const char *s)
{
    size_t n = strlen(s);

    pdx_wire_wr_u16(w, (uint16_t)n);
    pdx_wire_wr_bytes(w, s, n);
}

/* What rd_str() takes back: at most max bytes, no control character. */
static bool str_fits(const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);

    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return n <= max;
}

/* ------------------------------------------------------------------ frames */

pdx_status_t pdx_wire_encode_frame(pdx_wire_type_t type, pdx_wire_body_fn *body, const void *m,
                                   const void *extra, void *buf, size_t cap, size_t *size_p)
{
    pdx_wire_wr_t w = {NULL, 0};
    size_t size;

    body(&w, m, extra);
    if (w.off < types[type].min || w.off > types[type].max)
        return PDX_ERR_INVALID;
    size = PDX_WIRE_HEADER_SIZE + w.off;
    if (!buf || cap < size)
        return PDX_ERR_RANGE;
    w.p = buf;
    w.off = 0;
    pdx_wire_wr_u32(&w, PDX_WIRE_MAGIC);
    pdx_wire_wr_u16(&w, (uint16_t)type);
    pdx_wire_wr_u16(&w, 0);
    pdx_wire_wr_u32(&w, (uint32_t)(size - PDX_WIRE_HEADER_SIZE));
    body(&w, m, extra);
    *size_p = size;
    return PDX_OK;
}

pdx_status_t pdx_wire_peek(const void *buf, size_t len, pdx_wire_header_t *hdr_p,
                           size_t *need_p, const char **why_p)
{
    const char *why_local;
    const char **why = why_p ? why_p : &why_local;
    pdx_wire_rd_t r = {buf, len, 0, false};
    pdx_wire_header_t hdr;
    uint32_t magic;
    size_t need;

    if (len < PDX_WIRE_HEADER_SIZE) {
        /* Reject a wrong magic as early as its first byte. */
        for (size_t i = 0; i < len && i < 4; i++) {
            if (r.p[i] != (uint8_t)(PDX_WIRE_MAGIC >> (8 * i))) {
                *why = "bad magic";
                return PDX_ERR_PROTO;
            }
        }
        *need_p = PDX_WIRE_HEADER_SIZE;
        return PDX_INPROGRESS;
    }
    magic = pdx_wire_rd_u32(&r);
    hdr.type = pdx_wire_rd_u16(&r);
    hdr.flags = pdx_wire_rd_u16(&r);
    hdr.body_len = pdx_wire_rd_u32(&r);
    if (magic != PDX_WIRE_MAGIC) {
        *why = "bad magic";
        return PDX_ERR_PROTO;
    }
    if (hdr.flags != 0) {
        *why = "unknown header flags";
        return PDX_ERR_PROTO;
    }
    if (!type_known(hdr.type)) {
        *why = "unknown message type";
        return PDX_ERR_PROTO;
    }
    if (hdr.body_len < types[hdr.type].min || hdr.body_len > types[hdr.type].max) {
        *why = "body length outside the bounds of its type";
        return PDX_ERR_PROTO;
    }
    need = PDX_WIRE_HEADER_SIZE + (size_t)hdr.body_len;
    *hdr_p = hdr;
    *need_p = need;
    return len >= need ? PDX_OK : PDX_INPROGRESS;
}

/* ------------------------------------------------------------------- HELLO */

static void put_hello(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_hello_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->version);
    pdx_wire_wr_u64(w, m->caps);
    pdx_wire_wr_bytes(w, m->id, PDX_WIRE_ID_SIZE);
    pdx_wire_wr_u32(w, m->nshards);
    wr_str(w, m->host);
    wr_str(w, m->transport);
    pdx_wire_wr_u32(w, m->nics);
    pdx_wire_wr_u32(w, m->port);
    pdx_wire_wr_bytes(w, m->host_id, PDX_WIRE_HOST_ID_SIZE);
    wr_str(w, m->gpu);
}

pdx_status_t pdx_wire_encode_hello(const pdx_wire_hello_t *m, void *buf, size_t cap,
                                   size_t *size_p)
{
    if (!m || m->nshards == 0 || m->nshards > PDX_WIRE_MAX_SHARDS || m->nics == 0 ||
        m->nics > PDX_WIRE_MAX_NICS || m->port == 0 || m->port > UINT16_MAX ||
        !str_fits(m->host, PDX_WIRE_HOST_MAX) ||
        !str_fits(m->transport, PDX_WIRE_TRANSPORT_MAX) || !str_fits(m->gpu, PDX_WIRE_GPU_MAX))
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_HELLO, put_hello, m, NULL, buf, cap, size_p);
}

static pdx_status_t get_hello(pdx_wire_rd_t *r, pdx_wire_hello_t *m, const char **why)
{
    pdx_status_t st;

    m->version = pdx_wire_rd_u32(r);
    m->caps = pdx_wire_rd_u64(r);
    pdx_wire_rd_bytes(r, m->id, PDX_WIRE_ID_SIZE);
    m->nshards = pdx_wire_rd_u32(r);
    if (r->short_read) {
        *why = "truncated HELLO";
        return PDX_ERR_PROTO;
    }
    if (m->nshards == 0 || m->nshards > PDX_WIRE_MAX_SHARDS) {
        *why = "HELLO shard count outside 1..PDX_WIRE_MAX_SHARDS";
        return PDX_ERR_PROTO;
    }
    st = rd_str(r, m->host, PDX_WIRE_HOST_MAX, why);
    if (st == PDX_OK)
        st = rd_str(r, m->transport, PDX_WIRE_TRANSPORT_MAX, why);
    if (st != PDX_OK)
        return st;
    /* Another version is decoded only as far as the handshake needs to
     * refuse it (PDX_ERR_VERSION): its NIC count and port, if any, are not
     * checked. */
    m->nics = 1;
    m->port = 0;
    if (m->version != PDX_PROTOCOL_VERSION)
        return PDX_OK;
    m->nics = pdx_wire_rd_u32(r);
    m->port = pdx_wire_rd_u32(r);
    if (r->short_read) {
        *why = "truncated HELLO";
        return PDX_ERR_PROTO;
    }
    if (m->nics == 0 || m->nics > PDX_WIRE_MAX_NICS) {
        *why = "HELLO NIC count outside 1..PDX_WIRE_MAX_NICS";
        return PDX_ERR_PROTO;
    }
    if (m->port == 0 || m->port > UINT16_MAX) {
        *why = "HELLO port outside 1..65535";
        return PDX_ERR_PROTO;
    }
    pdx_wire_rd_bytes(r, m->host_id, PDX_WIRE_HOST_ID_SIZE);
    if (r->short_read) {
        *why = "truncated HELLO";
        return PDX_ERR_PROTO;
    }
    st = rd_str(r, m->gpu, PDX_WIRE_GPU_MAX, why);
    if (st != PDX_OK)
        return st;
    /* This version's HELLO is exact. */
    if (pdx_wire_rd_left(r)) {
        *why = "bytes after the HELLO fields";
        return PDX_ERR_PROTO;
    }
    return PDX_OK;
}

/* ---------------------------------------------------------------------- EP */

static void put_ep(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_ep_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->shard);
    pdx_wire_wr_u32(w, m->index);
    pdx_wire_wr_u32(w, m->epoch);
    pdx_wire_wr_u32(w, m->addr.len);
    pdx_wire_wr_bytes(w, m->addr.bytes, m->addr.len);
}

pdx_status_t pdx_wire_encode_ep(const pdx_wire_ep_t *m, void *buf, size_t cap, size_t *size_p)
{
    if (!m || m->shard >= PDX_WIRE_MAX_SHARDS || m->addr.len > PDX_TP_ADDR_MAX)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_EP, put_ep, m, NULL, buf, cap, size_p);
}

static pdx_status_t get_ep(pdx_wire_rd_t *r, pdx_wire_ep_t *m, const char **why)
{
    m->shard = pdx_wire_rd_u32(r);
    m->index = pdx_wire_rd_u32(r);
    m->epoch = pdx_wire_rd_u32(r);
    m->addr.len = pdx_wire_rd_u32(r);
    if (r->short_read) {
        *why = "truncated EP";
        return PDX_ERR_PROTO;
    }
    if (m->shard >= PDX_WIRE_MAX_SHARDS) {
        *why = "EP shard above PDX_WIRE_MAX_SHARDS";
        return PDX_ERR_PROTO;
    }
    if (m->addr.len > PDX_TP_ADDR_MAX) {
        *why = "EP address above PDX_TP_ADDR_MAX";
        return PDX_ERR_PROTO;
    }
    if (pdx_wire_rd_left(r) != m->addr.len) {
        *why = "EP address length disagrees with the body length";
        return PDX_ERR_PROTO;
    }
    pdx_wire_rd_bytes(r, m->addr.bytes, m->addr.len);
    return PDX_OK;
}

/* ------------------------------------------------------------ ABORT, ERROR */

/* ABORT and ERROR share their shape: room, status (an error), string. */
typedef struct room_status_str {
    uint64_t     room;
    pdx_status_t status;
    const char  *str;
} room_status_str_t;

static void put_room_status_str(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const room_status_str_t *m = arg;

    (void)extra;
    pdx_wire_wr_u64(w, m->room);
    pdx_wire_wr_i32(w, m->status);
    wr_str(w, m->str);
}

static pdx_status_t encode_room_status_str(pdx_wire_type_t type, uint64_t room,
                                           pdx_status_t status, const char *str, void *buf,
                                           size_t cap, size_t *size_p)
{
    room_status_str_t m = {room, status, str};

    if (status >= 0 || !str_fits(str, PDX_WIRE_REASON_MAX))
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(type, put_room_status_str, &m, NULL, buf, cap, size_p);
}

static pdx_status_t get_room_status_str(pdx_wire_rd_t *r, uint64_t *room, pdx_status_t *status,
                                        char *str, const char **why)
{
    int32_t s;
    pdx_status_t st;

    *room = pdx_wire_rd_u64(r);
    s = pdx_wire_rd_i32(r);
    if (r->short_read) {
        *why = "truncated ABORT or ERROR";
        return PDX_ERR_PROTO;
    }
    if (s >= 0) {
        *why = "ABORT or ERROR status is not an error";
        return PDX_ERR_PROTO;
    }
    *status = (pdx_status_t)s;
    st = rd_str(r, str, PDX_WIRE_REASON_MAX, why);
    if (st == PDX_OK && pdx_wire_rd_left(r)) {
        *why = "bytes after the ABORT or ERROR string";
        st = PDX_ERR_PROTO;
    }
    return st;
}

pdx_status_t pdx_wire_encode_abort(const pdx_wire_abort_t *m, void *buf, size_t cap,
                                   size_t *size_p)
{
    if (!m)
        return PDX_ERR_INVALID;
    return encode_room_status_str(PDX_WIRE_ABORT, m->room, m->status, m->reason, buf, cap,
                                  size_p);
}

pdx_status_t pdx_wire_encode_error(const pdx_wire_error_t *m, void *buf, size_t cap,
                                   size_t *size_p)
{
    if (!m)
        return PDX_ERR_INVALID;
    return encode_room_status_str(PDX_WIRE_ERROR, m->room, m->status, m->message, buf, cap,
                                  size_p);
}

/* ------------------------------------------------------ ABORT_ACK, HEARTBEAT */

static void put_abort_ack(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_abort_ack_t *m = arg;

    (void)extra;
    pdx_wire_wr_u64(w, m->room);
}

pdx_status_t pdx_wire_encode_abort_ack(const pdx_wire_abort_ack_t *m, void *buf, size_t cap,
                                       size_t *size_p)
{
    if (!m)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_ABORT_ACK, put_abort_ack, m, NULL, buf, cap, size_p);
}

static void put_heartbeat(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_heartbeat_t *m = arg;

    (void)extra;
    pdx_wire_wr_u64(w, m->seq);
    pdx_wire_wr_u64(w, m->time_ns);
}

pdx_status_t pdx_wire_encode_heartbeat(const pdx_wire_heartbeat_t *m, void *buf, size_t cap,
                                       size_t *size_p)
{
    if (!m)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_HEARTBEAT, put_heartbeat, m, NULL, buf, cap, size_p);
}

static void put_credit(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_credit_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->pair);
    pdx_wire_wr_u32(w, m->index);
    pdx_wire_wr_u32(w, m->epoch);
    pdx_wire_wr_u32(w, m->count);
}

pdx_status_t pdx_wire_encode_credit(const pdx_wire_credit_t *m, void *buf, size_t cap,
                                    size_t *size_p)
{
    if (!m)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_CREDIT, put_credit, m, NULL, buf, cap, size_p);
}

static void put_reset(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_reset_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->pair);
    pdx_wire_wr_u32(w, m->index);
    pdx_wire_wr_u32(w, m->epoch);
    pdx_wire_wr_i32(w, m->status);
    wr_str(w, m->reason);
}

pdx_status_t pdx_wire_encode_reset(const pdx_wire_reset_t *m, void *buf, size_t cap,
                                   size_t *size_p)
{
    if (!m || m->status >= 0 || !str_fits(m->reason, PDX_WIRE_REASON_MAX))
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_RESET, put_reset, m, NULL, buf, cap, size_p);
}

static pdx_status_t get_reset(pdx_wire_rd_t *r, pdx_wire_reset_t *m, const char **why)
{
    int32_t s;
    pdx_status_t st;

    m->pair = pdx_wire_rd_u32(r);
    m->index = pdx_wire_rd_u32(r);
    m->epoch = pdx_wire_rd_u32(r);
    s = pdx_wire_rd_i32(r);
    if (r->short_read) {
        *why = "truncated RESET";
        return PDX_ERR_PROTO;
    }
    if (s >= 0) {
        *why = "RESET status is not an error";
        return PDX_ERR_PROTO;
    }
    m->status = (pdx_status_t)s;
    st = rd_str(r, m->reason, PDX_WIRE_REASON_MAX, why);
    if (st == PDX_OK && pdx_wire_rd_left(r)) {
        *why = "bytes after the RESET reason";
        st = PDX_ERR_PROTO;
    }
    return st;
}

static void put_nothing(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    (void)w; (void)arg; (void)extra;
}

pdx_status_t pdx_wire_encode_ready(void *buf, size_t cap, size_t *size_p)
{
    return pdx_wire_encode_frame(PDX_WIRE_READY, put_nothing, NULL, NULL, buf, cap, size_p);
}

static void put_bye(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    (void)extra;
    wr_str(w, ((const pdx_wire_bye_t *)arg)->reason);
}

pdx_status_t pdx_wire_encode_bye(const pdx_wire_bye_t *m, void *buf, size_t cap,
                                 size_t *size_p)
{
    if (!m || !str_fits(m->reason, PDX_WIRE_REASON_MAX))
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_BYE, put_bye, m, NULL, buf, cap, size_p);
}

/* -------------------------------------------------------------------- AUTH */

static void put_auth(pdx_wire_wr_t *w, const void *arg, const void *extra)
{
    const pdx_wire_auth_t *m = arg;

    (void)extra;
    pdx_wire_wr_u32(w, m->version);
    pdx_wire_wr_u32(w, m->step);
    pdx_wire_wr_bytes(w, m->nonce, PDX_WIRE_NONCE_SIZE);
    pdx_wire_wr_bytes(w, m->mac, PDX_WIRE_MAC_SIZE);
}

pdx_status_t pdx_wire_encode_auth(const pdx_wire_auth_t *m, void *buf, size_t cap,
                                  size_t *size_p)
{
    if (!m || m->step < 1 || m->step > 3)
        return PDX_ERR_INVALID;
    return pdx_wire_encode_frame(PDX_WIRE_AUTH, put_auth, m, NULL, buf, cap, size_p);
}

/* Like HELLO, an AUTH of another version decodes as far as its version. */
static pdx_status_t get_auth(pdx_wire_rd_t *r, pdx_wire_auth_t *m, const char **why)
{
    m->version = pdx_wire_rd_u32(r);
    if (m->version != PDX_PROTOCOL_VERSION)
        return PDX_OK;
    m->step = pdx_wire_rd_u32(r);
    pdx_wire_rd_bytes(r, m->nonce, PDX_WIRE_NONCE_SIZE);
    pdx_wire_rd_bytes(r, m->mac, PDX_WIRE_MAC_SIZE);
    if (r->short_read) {
        *why = "truncated AUTH";
        return PDX_ERR_PROTO;
    }
    if (m->step < 1 || m->step > 3) {
        *why = "AUTH step outside 1..3";
        return PDX_ERR_PROTO;
    }
    if (pdx_wire_rd_left(r)) {
        *why = "bytes after AUTH";
        return PDX_ERR_PROTO;
    }
    return PDX_OK;
}

/* ------------------------------------------------------------------ decode */

pdx_status_t pdx_wire_decode(const void *buf, size_t len, pdx_wire_msg_t *msg_p,
                             const char **why_p)
{
    const char *why_local;
    const char **why = why_p ? why_p : &why_local;
    pdx_wire_header_t hdr;
    pdx_wire_msg_t msg;
    pdx_wire_rd_t r;
    pdx_status_t st;
    size_t need;

    st = pdx_wire_peek(buf, len, &hdr, &need, why);
    if (st == PDX_INPROGRESS) {
        *why = "truncated frame";
        return PDX_ERR_PROTO;
    }
    if (st != PDX_OK)
        return st;
    if (need != len) {
        *why = "bytes after the frame";
        return PDX_ERR_PROTO;
    }
    r = (pdx_wire_rd_t){(const uint8_t *)buf + PDX_WIRE_HEADER_SIZE, hdr.body_len, 0, false};
    memset(&msg, 0, sizeof(msg));
    msg.type = (pdx_wire_type_t)hdr.type;
    switch (msg.type) {
    case PDX_WIRE_HELLO:
        st = get_hello(&r, &msg.u.hello, why);
        break;
    case PDX_WIRE_MEM:
        st = pdx_wire_get_mem(&r, &msg.u.mem, why);
        break;
    case PDX_WIRE_LAYOUT:
        st = pdx_wire_get_layout(&r, &msg.u.layout, why);
        break;
    case PDX_WIRE_EP:
        st = get_ep(&r, &msg.u.ep, why);
        break;
    case PDX_WIRE_ROOM:
        st = pdx_wire_get_room(&r, &msg.u.room, why);
        break;
    case PDX_WIRE_ABORT:
        st = get_room_status_str(&r, &msg.u.abort.room, &msg.u.abort.status,
                                 msg.u.abort.reason, why);
        break;
    case PDX_WIRE_ABORT_ACK: /* peek checked the exact length */
        msg.u.abort_ack.room = pdx_wire_rd_u64(&r);
        break;
    case PDX_WIRE_HEARTBEAT:
        msg.u.heartbeat.seq = pdx_wire_rd_u64(&r);
        msg.u.heartbeat.time_ns = pdx_wire_rd_u64(&r);
        break;
    case PDX_WIRE_ERROR:
        st = get_room_status_str(&r, &msg.u.error.room, &msg.u.error.status,
                                 msg.u.error.message, why);
        break;
    case PDX_WIRE_CREDIT: /* peek checked the exact length */
        msg.u.credit.pair = pdx_wire_rd_u32(&r);
        msg.u.credit.index = pdx_wire_rd_u32(&r);
        msg.u.credit.epoch = pdx_wire_rd_u32(&r);
        msg.u.credit.count = pdx_wire_rd_u32(&r);
        break;
    case PDX_WIRE_RESET:
        st = get_reset(&r, &msg.u.reset, why);
        break;
    case PDX_WIRE_READY:
        break;
    case PDX_WIRE_BYE:
        st = rd_str(&r, msg.u.bye.reason, PDX_WIRE_REASON_MAX, why);
        if (st == PDX_OK && pdx_wire_rd_left(&r)) {
            *why = "bytes after the BYE reason";
            st = PDX_ERR_PROTO;
        }
        break;
    case PDX_WIRE_AUTH:
        st = get_auth(&r, &msg.u.auth, why);
        break;
    case PDX_WIRE_EXPORT:
        st = pdx_wire_get_export(&r, &msg.u.export, why);
        break;
    case PDX_WIRE_SEALED:
        *why = "a SEALED frame is opened, not decoded";
        st = PDX_ERR_PROTO;
        break;
    default: /* peek rejected it */
        *why = "unknown message type";
        st = PDX_ERR_PROTO;
        break;
    }
    if (st != PDX_OK)
        return st;
    *msg_p = msg;
    return PDX_OK;
}

void pdx_wire_msg_free(pdx_wire_msg_t *msg)
{
    if (!msg)
        return;
    if (msg->type == PDX_WIRE_MEM) {
        free(msg->u.mem.entries);
        msg->u.mem.entries = NULL;
    } else if (msg->type == PDX_WIRE_LAYOUT) {
        pdx_layout_free(msg->u.layout.layout);
        msg->u.layout.layout = NULL;
    }
}
