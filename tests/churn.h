/*
 * What test_engine_churn and its child program (churn_child.c) agree on:
 * the geometry of both sides' KV pool, the pages of a room and the bytes
 * of every page.
 */
#ifndef PDX_TEST_CHURN_H
#define PDX_TEST_CHURN_H

#include <stdint.h>
#include <string.h>

#define CHURN_PAGES      64
#define CHURN_PAGE_BYTES 256
#define CHURN_ROOM_PAGES 4

/* The room's pages: distinct (17 is odd, the pool a power of two). */
static inline void churn_pages(uint64_t room, uint32_t out[CHURN_ROOM_PAGES])
{
    for (uint32_t k = 0; k < CHURN_ROOM_PAGES; k++)
        out[k] = (uint32_t)((room + 17u * k) % CHURN_PAGES);
}

static inline uint64_t churn_word(uint64_t room, uint32_t k, uint32_t w)
{
    uint64_t x = room * 0x9e3779b97f4a7c15ull ^ (uint64_t)k << 40 ^ w;

    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    return x ^ x >> 29;
}

static inline void churn_fill(uint8_t *pool, uint64_t room)
{
    uint32_t pages[CHURN_ROOM_PAGES];

    churn_pages(room, pages);
    for (uint32_t k = 0; k < CHURN_ROOM_PAGES; k++)
        for (uint32_t w = 0; w < CHURN_PAGE_BYTES / 8; w++) {
            uint64_t v = churn_word(room, k, w);

            memcpy(pool + (size_t)pages[k] * CHURN_PAGE_BYTES + w * 8, &v, 8);
        }
}

/* Bytes of the room's pages that differ from what churn_fill() writes. */
static inline uint64_t churn_check(const uint8_t *pool, uint64_t room)
{
    uint32_t pages[CHURN_ROOM_PAGES];
    uint64_t bad = 0;

    churn_pages(room, pages);
    for (uint32_t k = 0; k < CHURN_ROOM_PAGES; k++)
        for (uint32_t w = 0; w < CHURN_PAGE_BYTES / 8; w++) {
            uint64_t v = churn_word(room, k, w), got;

            memcpy(&got, pool + (size_t)pages[k] * CHURN_PAGE_BYTES + w * 8, 8);
            bad += got != v ? 8 : 0;
        }
    return bad;
}

#endif
