/*
 * What test_engine_churn and its child program (churn_child.c) agree on:
 * the geometry of both sides' KV pool, the pages of a room and the bytes
 * of every page.
 */
#ifndef PDX_TEST_CHURN_H
#define PDX_TEST_CHURN_H

#include <pdx/pdx.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

/* An engine listening at `listen` (host:port) over tcp with `shards`
 * shards, the pool registered and its layout made: PDX_OK, or the first
 * call's failure. */
static inline pdx_status_t churn_open(uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES],
                                      const char *shards, const char *listen,
                                      pdx_engine_t **e_p, uint32_t *layout_p)
{
    pdx_buffer_desc_t buf = {.bytes_per_page = CHURN_PAGE_BYTES};
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = 1, .npages = CHURN_PAGES,
                              .buffers = &buf};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS, .ngroups = 1,
                              .groups = &group};
    pdx_config_t cfg;
    pdx_status_t st;

    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", listen);
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", shards);
    if ((st = pdx_engine_create(&cfg, e_p)) != PDX_OK)
        return st;
    if ((st = pdx_mem_register(*e_p, pool, (size_t)CHURN_PAGES * CHURN_PAGE_BYTES,
                               &buf.mem)) != PDX_OK ||
        (st = pdx_layout_create(*e_p, &desc, layout_p)) != PDX_OK) {
        pdx_engine_destroy(*e_p);
        *e_p = NULL;
    }
    return st;
}

/* Poll the room until it ends, for at most 20 s; its state then. */
static inline pdx_room_state_t churn_wait(pdx_engine_t *e, uint64_t room)
{
    const struct timespec ms = {0, 1000000};

    for (int i = 0; i < 20000; i++) {
        pdx_room_state_t s = pdx_poll(e, room);

        if (s == PDX_ROOM_SUCCESS || s == PDX_ROOM_FAILED)
            return s;
        nanosleep(&ms, NULL);
    }
    return pdx_poll(e, room);
}

#endif
