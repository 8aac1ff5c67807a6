/* CRC-32C: the crc32 instruction where the CPU has it, else slicing by 8. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#define POLY 0x82f63b78u /* 0x1EDC6F41 reflected */

static uint32_t table[8][256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;

        for (int k = 0; k < 8; k++)
            c = c & 1 ? c >> 1 ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = table[t - 1][i] >> 8 ^ table[0][table[t - 1][i] & 0xff];
}

static inline uint64_t load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof(v));
    return v; /* little-endian hosts only: the slicing below assumes it */
}

/* The raw register (no inversion) over len bytes. */
static uint32_t sw_raw(uint32_t c, const unsigned char *p, size_t len)
{
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t v = load64(p) ^ c;

        c = table[7][v & 0xff] ^ table[6][v >> 8 & 0xff] ^ table[5][v >> 16 & 0xff] ^
            table[4][v >> 24 & 0xff] ^ table[3][v >> 32 & 0xff] ^ table[2][v >> 40 & 0xff] ^
            table[1][v >> 48 & 0xff] ^ table[0][v >> 56];
    }
    while (len--)
        c = c >> 8 ^ table[0][(c ^ *p++) & 0xff];
    return c;
}

uint32_t pdx_crc32c_table(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&table_once, table_init);
    return ~sw_raw(~crc, buf, len);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HW 1
#define HW_FN __attribute__((target("sse4.2")))

HW_FN static uint32_t hw_raw(uint32_t c, const unsigned char *p, size_t len)
{
    uint64_t c64 = c;

    for (; len >= 8; p += 8, len -= 8)
        c64 = __builtin_ia32_crc32di(c64, load64(p));
    c = (uint32_t)c64;
    while (len--)
        c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

/* Three blocks of n bytes (a multiple of 8) side by side: the instruction's
 * latency is three times its issue interval. */
HW_FN static void hw_raw3(const unsigned char *p, size_t n, uint32_t *out)
{
    uint64_t a = ~0u, b = ~0u, c = ~0u;
    const unsigned char *q = p + n, *r = p + 2 * n;

    for (size_t i = 0; i < n; i += 8) {
        a = __builtin_ia32_crc32di(a, load64(p + i));
        b = __builtin_ia32_crc32di(b, load64(q + i));
        c = __builtin_ia32_crc32di(c, load64(r + i));
    }
    out[0] = ~(uint32_t)a;
    out[1] = ~(uint32_t)b;
    out[2] = ~(uint32_t)c;
}
#else
#define HW 0
#endif

static int use_hw = -1; /* -1: not decided yet */

static int hw(void)
{
    int v = __atomic_load_n(&use_hw, __ATOMIC_RELAXED);

    if (v < 0) {
#if HW
        v = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
        v = 0;
#endif
        if (!v)
            pthread_once(&table_once, table_init);
        __atomic_store_n(&use_hw, v, __ATOMIC_RELAXED);
    }
    return v;
}

uint32_t pdx_crc32c(uint32_t crc, const void *buf, size_t len)
{
#if HW
    if (hw())
        return ~hw_raw(~crc, buf, len);
#endif
    return pdx_crc32c_table(crc, buf, len);
}

void pdx_crc32c_blocks(const void *buf, size_t len, size_t block, uint32_t *out)
{
    const unsigned char *p = buf;
    size_t n = block ? (len + block - 1) / block : 0, i = 0;

#if HW
    if (hw() && block % 8 == 0)
        for (; i + 3 <= n && (i + 3) * block <= len; i += 3)
            hw_raw3(p + i * block, block, out + i);
#endif
    for (; i < n; i++) {
        size_t at = i * block;

        out[i] = pdx_crc32c(0, p + at, len - at < block ? len - at : block);
    }
}
