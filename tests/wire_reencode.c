/* wire_reencode.h */
#include "wire_reencode.h"

#include <stdlib.h>

static pdx_status_t reencode_room(const pdx_wire_room_t *m, void *buf, size_t cap,
                                  size_t *len_p)
{
    pdx_pages_t pages[PDX_LAYOUT_MAX_GROUPS];
    uint64_t total = 0;
    uint32_t *idx, *p;
    pdx_status_t st = PDX_OK;

    for (uint32_t g = 0; g < m->ngroups; g++)
        total += m->npages[g];
    idx = p = malloc((total + 1) * sizeof(*idx));
    if (!idx)
        return PDX_ERR_NOMEM;
    for (uint32_t g = 0; g < m->ngroups && st == PDX_OK; g++) {
        st = pdx_wire_room_copy(m, g, p, m->npages[g]);
        pages[g] = (pdx_pages_t){p, m->npages[g]};
        p += m->npages[g];
    }
    if (st == PDX_OK)
        st = pdx_wire_encode_room(m, pages, buf, cap, len_p);
    free(idx);
    return st;
}

pdx_status_t wire_reencode(const pdx_wire_msg_t *m, void *buf, size_t cap, size_t *len_p)
{
    switch (m->type) {
    case PDX_WIRE_HELLO:
        if (m->u.hello.version != PDX_PROTOCOL_VERSION)
            return PDX_ERR_UNSUPPORTED;
        return pdx_wire_encode_hello(&m->u.hello, buf, cap, len_p);
    case PDX_WIRE_AUTH:
        if (m->u.auth.version != PDX_PROTOCOL_VERSION)
            return PDX_ERR_UNSUPPORTED;
        return pdx_wire_encode_auth(&m->u.auth, buf, cap, len_p);
    case PDX_WIRE_MEM: return pdx_wire_encode_mem(&m->u.mem, buf, cap, len_p);
    case PDX_WIRE_LAYOUT: return pdx_wire_encode_layout(&m->u.layout, buf, cap, len_p);
    case PDX_WIRE_EP: return pdx_wire_encode_ep(&m->u.ep, buf, cap, len_p);
    case PDX_WIRE_ROOM: return reencode_room(&m->u.room, buf, cap, len_p);
    case PDX_WIRE_ABORT: return pdx_wire_encode_abort(&m->u.abort, buf, cap, len_p);
    case PDX_WIRE_ABORT_ACK: return pdx_wire_encode_abort_ack(&m->u.abort_ack, buf, cap, len_p);
    case PDX_WIRE_HEARTBEAT: return pdx_wire_encode_heartbeat(&m->u.heartbeat, buf, cap, len_p);
    case PDX_WIRE_ERROR: return pdx_wire_encode_error(&m->u.error, buf, cap, len_p);
    case PDX_WIRE_CREDIT: return pdx_wire_encode_credit(&m->u.credit, buf, cap, len_p);
    case PDX_WIRE_READY: return pdx_wire_encode_ready(buf, cap, len_p);
    case PDX_WIRE_RESET: return pdx_wire_encode_reset(&m->u.reset, buf, cap, len_p);
    case PDX_WIRE_BYE: return pdx_wire_encode_bye(&m->u.bye, buf, cap, len_p);
    case PDX_WIRE_EXPORT: return pdx_wire_encode_export(&m->u.export, buf, cap, len_p);
    case PDX_WIRE_SEALED: break;
    }
    return PDX_ERR_PROTO;
}
