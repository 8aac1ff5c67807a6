/* The notify record of the data endpoints: a clean status for any bytes, and
 * what decodes encodes back to them. */
#include <string.h>

#include "fuzz.h"
#include "wire.h"

FUZZ_INIT_QUIET()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1), out[PDX_WIRE_NOTIFY_LAYERS_SIZE];
    pdx_wire_notify_t n;
    const char *why = NULL;
    size_t len = 0;

    memcpy(buf, data, size);
    if (pdx_wire_notify_decode(buf, size, &n, &why) == PDX_OK) {
        FUZZ_CHECK(size == (n.flags & PDX_WIRE_NOTIFY_SUM      ? PDX_WIRE_NOTIFY_SUM_SIZE
                            : n.flags & PDX_WIRE_NOTIFY_LAYERS ? PDX_WIRE_NOTIFY_LAYERS_SIZE
                                                               : PDX_WIRE_NOTIFY_SIZE),
                   "a notify of %zu bytes", size);
        FUZZ_CHECK(pdx_wire_notify_encode(&n, out, sizeof(out), &len) == PDX_OK,
                   "a decoded notify does not encode");
        FUZZ_CHECK(len == size && memcmp(out, buf, size) == 0, "notify encodes to other bytes");
    } else {
        FUZZ_CHECK(why != NULL, "notify refused without a reason");
    }
    free(buf);
    return 0;
}
