/* Engine and memory descriptors, as a framework hands them over (bytes from
 * another process): a clean status for any bytes, and what is accepted
 * names something sane. */
#include <string.h>

#include "fuzz.h"

FUZZ_INIT_QUIET()

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1);
    pdx_engine_desc_info_t e;
    pdx_mem_desc_info_t m;

    memcpy(buf, data, size);
    if (pdx_engine_desc_info(buf, size, &e) == PDX_OK)
        FUZZ_CHECK(memchr(e.host, 0, sizeof(e.host)) != NULL, "host not terminated");
    if (pdx_mem_desc_info(buf, size, &m) == PDX_OK)
        FUZZ_CHECK(m.len > 0, "a region of 0 bytes");
    free(buf);
    return 0;
}
