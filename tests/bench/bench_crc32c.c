/*
 * bench_crc32c: what PDX_VERIFY's checksum costs a CPU, in GB/s over a
 * buffer larger than the caches: memcpy of the same bytes (the baseline a
 * staged copy or a tcp send pays anyway), pdx_crc32c_blocks() in 4 KiB
 * blocks (the crc32 instruction, three blocks at a time, where the CPU has
 * it) and the table implementation, each the best of several passes.
 *
 * usage: bench_crc32c [MiB]   (default 256)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "util.h"

#define BLOCK 4096u

static volatile uint32_t sink;

static double best_gbps(int which, const unsigned char *buf, unsigned char *dst, size_t len,
                        uint32_t *crcs)
{
    double best = 0;

    for (int pass = 0; pass < 5; pass++) {
        uint64_t t0 = pdx_now_ns(), ns;

        if (which == 0) {
            memcpy(dst, buf, len);
            sink ^= dst[len / 2];
        } else if (which == 1) {
            pdx_crc32c_blocks(buf, len, BLOCK, crcs);
            sink ^= crcs[0];
        } else {
            for (size_t off = 0; off < len; off += BLOCK)
                sink ^= pdx_crc32c_table(0, buf + off, BLOCK);
        }
        ns = pdx_now_ns() - t0;
        if (ns && (double)len / (double)ns > best)
            best = (double)len / (double)ns;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256, len = mib << 20;
    unsigned char *buf = malloc(len), *dst = malloc(len);
    uint32_t *crcs = malloc(len / BLOCK * sizeof(*crcs));
    double copy, hw, table;

    if (!buf || !dst || !crcs || len < BLOCK) {
        fprintf(stderr, "bench_crc32c: no memory for %zu MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(dst, 1, len);
    copy = best_gbps(0, buf, dst, len, crcs);
    hw = best_gbps(1, buf, dst, len, crcs);
    table = best_gbps(2, buf, dst, len, crcs);
    printf("bench_crc32c: %zu MiB, 4 KiB blocks, one thread\n", mib);
    printf("  memcpy (baseline)       %6.2f GB/s\n", copy);
    printf("  pdx_crc32c_blocks       %6.2f GB/s  %.2fx memcpy\n", hw, hw / copy);
    printf("  table (no instruction)  %6.2f GB/s  %.2fx memcpy\n", table, table / copy);
    free(crcs);
    free(dst);
    free(buf);
    return 0;
}
