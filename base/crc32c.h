/*
 * CRC-32C (Castagnoli, the iSCSI polynomial 0x1EDC6F41, reflected), as
 * PDX_VERIFY uses it. pdx_crc32c(0, "123456789", 9) is 0xE3069283.
 *
 * x86-64 with SSE4.2 uses the crc32 instruction, three independent blocks
 * at a time in pdx_crc32c_blocks(); elsewhere a table, eight bytes a step.
 * The choice is made once, at the first call.
 */
#ifndef PDX_CRC32C_H
#define PDX_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of the bytes before these (0 to begin) extended by len bytes. */
uint32_t pdx_crc32c(uint32_t crc, const void *buf, size_t len);

/* The CRC of each block of buf into out: ceil(len / block) values, the last
 * block shorter when block does not divide len. */
void pdx_crc32c_blocks(const void *buf, size_t len, size_t block, uint32_t *out);

/* The table implementation, whatever the CPU has (for tests). */
uint32_t pdx_crc32c_table(uint32_t crc, const void *buf, size_t len);

#endif
