/* The tcp transport's endpoint address (what an EP message carries): a clean
 * status for any bytes, and what decodes encodes back to them. */
#include <string.h>

#include "fuzz.h"
#include "proto.h"

FUZZ_INIT_QUIET()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pdx_tp_addr_t in = {0}, again;
    tcp_addr_t a;

    if (size > sizeof(in.bytes))
        return 0;
    in.len = (uint32_t)size;
    memcpy(in.bytes, data, size);
    if (tcp_addr_decode(&in, &a) == PDX_OK) {
        FUZZ_CHECK(a.family == 4 || a.family == 6, "family %u", a.family);
        tcp_addr_encode(&a, &again);
        FUZZ_CHECK(again.len == in.len && memcmp(again.bytes, in.bytes, in.len) == 0,
                   "tcp address encodes to other bytes");
    }
    return 0;
}
