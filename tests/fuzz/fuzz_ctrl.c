/*
 * The control channel's decoders on an arbitrary byte stream, framed the
 * way the control thread frames it: every frame that decodes encodes back
 * to its bytes, none reads past its bytes (ASan), and a SEALED frame never
 * opens without the session's key.
 */
#include <string.h>

#include "auth.h"
#include "fuzz.h"
#include "wire.h"

FUZZ_INIT_QUIET()

static uint8_t out[PDX_WIRE_MAX_SEALED];

/* The encoder of a decoded message into out; PDX_ERR_UNSUPPORTED where a
 * message of another version may carry more than it decodes. */
static pdx_status_t reencode(const pdx_wire_msg_t *m, size_t *len)
{
    uint32_t idx[PDX_LAYOUT_MAX_GROUPS][64];
    pdx_pages_t pages[PDX_LAYOUT_MAX_GROUPS];

    switch (m->type) {
    case PDX_WIRE_HELLO:
        if (m->u.hello.version != PDX_PROTOCOL_VERSION)
            return PDX_ERR_UNSUPPORTED;
        return pdx_wire_encode_hello(&m->u.hello, out, sizeof(out), len);
    case PDX_WIRE_AUTH:
        if (m->u.auth.version != PDX_PROTOCOL_VERSION)
            return PDX_ERR_UNSUPPORTED;
        return pdx_wire_encode_auth(&m->u.auth, out, sizeof(out), len);
    case PDX_WIRE_MEM: return pdx_wire_encode_mem(&m->u.mem, out, sizeof(out), len);
    case PDX_WIRE_LAYOUT: return pdx_wire_encode_layout(&m->u.layout, out, sizeof(out), len);
    case PDX_WIRE_EP: return pdx_wire_encode_ep(&m->u.ep, out, sizeof(out), len);
    case PDX_WIRE_ROOM:
        for (uint32_t g = 0; g < m->u.room.ngroups; g++) {
            if (m->u.room.npages[g] > 64)
                return PDX_ERR_UNSUPPORTED; /* checked by the unit tests */
            FUZZ_CHECK(pdx_wire_room_copy(&m->u.room, g, idx[g], 64) == PDX_OK, "room copy");
            pages[g] = (pdx_pages_t){idx[g], m->u.room.npages[g]};
        }
        return pdx_wire_encode_room(&m->u.room, pages, out, sizeof(out), len);
    case PDX_WIRE_ABORT: return pdx_wire_encode_abort(&m->u.abort, out, sizeof(out), len);
    case PDX_WIRE_ABORT_ACK:
        return pdx_wire_encode_abort_ack(&m->u.abort_ack, out, sizeof(out), len);
    case PDX_WIRE_HEARTBEAT:
        return pdx_wire_encode_heartbeat(&m->u.heartbeat, out, sizeof(out), len);
    case PDX_WIRE_ERROR: return pdx_wire_encode_error(&m->u.error, out, sizeof(out), len);
    case PDX_WIRE_CREDIT: return pdx_wire_encode_credit(&m->u.credit, out, sizeof(out), len);
    case PDX_WIRE_READY: return pdx_wire_encode_ready(out, sizeof(out), len);
    case PDX_WIRE_RESET: return pdx_wire_encode_reset(&m->u.reset, out, sizeof(out), len);
    case PDX_WIRE_BYE: return pdx_wire_encode_bye(&m->u.bye, out, sizeof(out), len);
    case PDX_WIRE_SEALED: break;
    }
    FUZZ_CHECK(0, "a %s decoded", pdx_wire_type_str(m->type));
    return PDX_ERR_PROTO;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pdx_seal_t seal; /* a session key nobody sent these bytes with */
    uint8_t *buf = malloc(size ? size : 1);
    size_t off = 0;

    memcpy(buf, data, size);
    while (off < size) {
        pdx_wire_header_t hdr;
        pdx_wire_msg_t msg;
        const char *why = NULL;
        uint8_t *inner;
        size_t need, inner_len, len = 0;
        pdx_status_t st = pdx_wire_peek(buf + off, size - off, &hdr, &need, &why);

        if (st != PDX_OK) {
            FUZZ_CHECK(st == PDX_INPROGRESS || why, "peek failed without a reason");
            break;
        }
        FUZZ_CHECK(need <= size - off && need >= PDX_WIRE_HEADER_SIZE, "peek's size");
        if (hdr.type == PDX_WIRE_SEALED) {
            FUZZ_CHECK(!pdx_unseal(&seal, buf + off, need, &inner, &inner_len),
                       "a SEALED frame opened without its key");
        } else if (pdx_wire_decode(buf + off, need, &msg, &why) == PDX_OK) {
            st = reencode(&msg, &len);
            if (st != PDX_ERR_UNSUPPORTED) {
                FUZZ_CHECK(st == PDX_OK, "decoded %s does not encode: %d",
                           pdx_wire_type_str(hdr.type), st);
                FUZZ_CHECK(len == need && memcmp(out, buf + off, need) == 0,
                           "decoded %s encodes to other bytes", pdx_wire_type_str(hdr.type));
            }
            pdx_wire_msg_free(&msg);
        } else {
            FUZZ_CHECK(why != NULL, "decode failed without a reason");
        }
        off += need;
    }
    free(buf);
    return 0;
}
