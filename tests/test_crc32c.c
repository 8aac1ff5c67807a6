/*
 * CRC-32C (base/crc32c.c): the standard check values, the instruction and
 * the table agreeing on every length and alignment, a CRC extended in
 * pieces equal to one in a go, and pdx_crc32c_blocks() equal to one CRC
 * per block, short last block included.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

Test(crc32c, check_values)
{
    static const unsigned char zeros[32], ones[32] = {
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff, 0xff};
    unsigned char inc[32];

    for (int i = 0; i < 32; i++)
        inc[i] = (unsigned char)i;
    /* RFC 3720 B.4 and the common check string */
    cr_assert_eq(pdx_crc32c(0, "123456789", 9), 0xe3069283u);
    cr_assert_eq(pdx_crc32c(0, zeros, 32), 0x8a9136aau);
    cr_assert_eq(pdx_crc32c(0, ones, 32), 0x62a8ab43u);
    cr_assert_eq(pdx_crc32c(0, inc, 32), 0x46dd794eu);
    cr_assert_eq(pdx_crc32c_table(0, "123456789", 9), 0xe3069283u);
    cr_assert_eq(pdx_crc32c(0, "", 0), 0);
}

Test(crc32c, every_length_and_alignment_agrees)
{
    unsigned char *buf = malloc(4096 + 16);
    unsigned seed = 3;

    for (int i = 0; i < 4096 + 16; i++)
        buf[i] = (unsigned char)rand_r(&seed);
    for (size_t off = 0; off < 8; off++)
        for (size_t len = 0; len < 300; len++)
            cr_assert_eq(pdx_crc32c(0, buf + off, len), pdx_crc32c_table(0, buf + off, len),
                         "offset %zu length %zu", off, len);
    for (size_t cut = 0; cut <= 4096; cut += 97)
        cr_assert_eq(pdx_crc32c(pdx_crc32c(0, buf, cut), buf + cut, 4096 - cut),
                     pdx_crc32c(0, buf, 4096), "cut at %zu", cut);
    free(buf);
}

Test(crc32c, blocks_are_crcs_of_each_block)
{
    const size_t block = 4096, len = 7 * block + 24;
    unsigned char *buf = malloc(len);
    uint32_t out[8];
    unsigned seed = 5;

    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)rand_r(&seed);
    for (size_t n = 0; n <= len; n += len / 5 + 1) {
        size_t nb = (n + block - 1) / block;

        memset(out, 0, sizeof(out));
        pdx_crc32c_blocks(buf, n, block, out);
        for (size_t b = 0; b < nb; b++) {
            size_t at = b * block, l = n - at < block ? n - at : block;

            cr_assert_eq(out[b], pdx_crc32c_table(0, buf + at, l), "length %zu block %zu", n, b);
        }
    }
    pdx_crc32c_blocks(buf, len, block, out);
    cr_assert_eq(out[7], pdx_crc32c_table(0, buf + 7 * block, 24));
    free(buf);
}
