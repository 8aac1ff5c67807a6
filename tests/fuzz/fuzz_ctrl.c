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
#include "wire_reencode.h"

FUZZ_INIT_QUIET()

static uint8_t out[PDX_WIRE_MAX_SEALED];

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
            st = wire_reencode(&msg, out, sizeof(out), &len);
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
