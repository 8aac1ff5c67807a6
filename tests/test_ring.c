#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

static pdx_ring_t ring;

static void fini(void) { pdx_ring_fini(&ring); }

static pdx_status_t push_n(uint64_t room, uint32_t npages, uint32_t first)
{
    uint32_t pages[4096];
    pdx_chunk_t chunk = {.room = room, .ngroups = 1};
    pdx_pages_t list = {pages, npages};

    for (uint32_t i = 0; i < npages; i++)
        pages[i] = first + i;
    return pdx_ring_push(&ring, &chunk, &list);
}

Test(ring, chunk_and_pages_are_copied, .fini = fini)
{
    uint32_t a[3] = {7, 8, 9}, b[2] = {100, 50};
    pdx_pages_t lists[2] = {{a, 3}, {b, 2}}, got[2];
    pdx_chunk_t chunk = {.room = 77, .layout = 3, .flags = PDX_SEND_LAST, .ngroups = 2};
    pdx_ring_cell_t *cell;

    cr_assert_eq(pdx_ring_init(&ring, 4, 16), PDX_OK);
    cr_assert_null(pdx_ring_pop(&ring));
    cr_assert_eq(pdx_ring_push(&ring, &chunk, lists), PDX_OK);
    a[0] = b[1] = 0xdead; /* the caller may reuse its arrays at once */
    chunk.room = 0;
    cell = pdx_ring_pop(&ring);
    cr_assert_not_null(cell);
    cr_expect_eq(cell->chunk.room, 77);
    cr_expect_eq(cell->chunk.layout, 3);
    cr_expect_eq(cell->chunk.flags, PDX_SEND_LAST);
    pdx_ring_cell_pages(&ring, cell, got);
    cr_assert_eq(got[0].npages, 3);
    cr_assert_eq(got[1].npages, 2);
    cr_expect_eq(got[0].pages[0], 7);
    cr_expect_eq(got[0].pages[2], 9);
    cr_expect_eq(got[1].pages[0], 100);
    cr_expect_eq(got[1].pages[1], 50);
    cr_expect_null(pdx_ring_pop(&ring));
    pdx_ring_done(&ring, cell);
    cr_expect_eq(pdx_ring_count(&ring), 0);
}

Test(ring, full_by_chunks_is_again, .fini = fini)
{
    cr_assert_eq(pdx_ring_init(&ring, 4, 1024), PDX_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(push_n((uint64_t)i, 1, 0), PDX_OK);
    cr_expect_eq(push_n(9, 1, 0), PDX_ERR_AGAIN);
    pdx_ring_done(&ring, pdx_ring_pop(&ring));
    cr_expect_eq(push_n(9, 1, 0), PDX_OK);
    cr_expect_eq(ring.high_water, 4);
}

Test(ring, full_by_pages_is_again, .fini = fini)
{
    cr_assert_eq(pdx_ring_init(&ring, 16, 256), PDX_OK);
    cr_assert_eq(push_n(1, 200, 0), PDX_OK);
    cr_expect_eq(push_n(2, 100, 0), PDX_ERR_AGAIN);
    cr_expect_eq(push_n(2, 56, 0), PDX_OK);
    cr_expect_eq(push_n(3, 1, 0), PDX_ERR_AGAIN);
    cr_expect_eq(push_n(4, 257, 0), PDX_ERR_INVALID, "can never fit");
}

Test(ring, space_is_reclaimed_in_order, .fini = fini)
{
    pdx_ring_cell_t *c[4];

    cr_assert_eq(pdx_ring_init(&ring, 4, 64), PDX_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(push_n((uint64_t)i, 16, 0), PDX_OK);
    for (int i = 0; i < 4; i++)
        c[i] = pdx_ring_pop(&ring);
    /* chunk 0 is held (a closed gate); later chunks finish first */
    pdx_ring_done(&ring, c[1]);
    pdx_ring_done(&ring, c[3]);
    pdx_ring_done(&ring, c[2]);
    cr_expect_eq(push_n(5, 1, 0), PDX_ERR_AGAIN);
    pdx_ring_done(&ring, c[0]);
    cr_expect_eq(pdx_ring_count(&ring), 0);
    for (int i = 0; i < 4; i++)
        cr_expect_eq(push_n((uint64_t)i, 16, 0), PDX_OK);
}

/* Page runs never straddle the end of the arena: the tail is skipped. */
Test(ring, page_arena_wraps, .fini = fini)
{
    cr_assert_eq(pdx_ring_init(&ring, 8, 100 /* -> 128 */), PDX_OK);
    for (uint32_t round = 0; round < 50; round++) {
        uint32_t n = 1 + (round * 37) % 90;
        pdx_ring_cell_t *cell;
        pdx_pages_t got;

        cr_assert_eq(push_n(round, n, round * 1000), PDX_OK, "round %u", round);
        cell = pdx_ring_pop(&ring);
        cr_assert_not_null(cell);
        pdx_ring_cell_pages(&ring, cell, &got);
        cr_assert_eq(got.npages, n);
        cr_assert_leq(cell->page_pos + n, ring.npages);
        for (uint32_t i = 0; i < n; i++)
            cr_assert_eq(got.pages[i], round * 1000 + i, "round %u page %u", round, i);
        pdx_ring_done(&ring, cell);
    }
}

/*
 * Several producers push numbered chunks whose pages encode (producer, n);
 * one consumer checks per-producer FIFO order and every page, finishing
 * chunks out of order. Run under tsan.
 */
enum { PRODUCERS = 4, PER_PRODUCER = 20000 };

static void *producer(void *arg)
{
    uint32_t p = (uint32_t)(uintptr_t)arg;
    uint32_t pages[64];

    for (uint32_t n = 0; n < PER_PRODUCER; n++) {
        uint32_t np = 1 + (n * 7 + p) % 64;
        pdx_chunk_t chunk = {.room = (uint64_t)p << 32 | n, .ngroups = 1};
        pdx_pages_t list = {pages, np};

        for (uint32_t i = 0; i < np; i++)
            pages[i] = p << 24 | (n & 0xffff) << 8 | i;
        while (pdx_ring_push(&ring, &chunk, &list) == PDX_ERR_AGAIN)
            sched_yield();
    }
    return NULL;
}

Test(ring, many_producers_one_consumer, .fini = fini, .timeout = 120)
{
    pthread_t th[PRODUCERS];
    uint32_t next[PRODUCERS] = {0};
    pdx_ring_cell_t *held[3] = {NULL};
    uint32_t got = 0, errors = 0;

    cr_assert_eq(pdx_ring_init(&ring, 64, 1024), PDX_OK);
    for (uint32_t i = 0; i < PRODUCERS; i++)
        pthread_create(&th[i], NULL, producer, (void *)(uintptr_t)i);
    while (got < PRODUCERS * PER_PRODUCER) {
        pdx_ring_cell_t *cell = pdx_ring_pop(&ring);
        pdx_pages_t list;
        uint32_t p, n;

        if (!cell) {
            sched_yield();
            continue;
        }
        p = (uint32_t)(cell->chunk.room >> 32);
        n = (uint32_t)cell->chunk.room;
        if (p >= PRODUCERS || n != next[p]) {
            errors++;
        } else {
            next[p]++;
            pdx_ring_cell_pages(&ring, cell, &list);
            if (list.npages != 1 + (n * 7 + p) % 64)
                errors++;
            for (uint32_t i = 0; i < list.npages; i++)
                if (list.pages[i] != (p << 24 | (n & 0xffff) << 8 | i))
                    errors++;
        }
        /* hold a few cells back and finish them later, out of order */
        if (held[got % 3])
            pdx_ring_done(&ring, held[got % 3]);
        held[got % 3] = cell;
        got++;
    }
    for (int i = 0; i < 3; i++)
        if (held[i])
            pdx_ring_done(&ring, held[i]);
    for (uint32_t i = 0; i < PRODUCERS; i++)
        pthread_join(th[i], NULL);
    cr_expect_eq(errors, 0);
    cr_expect_eq(pdx_ring_count(&ring), 0);
    cr_expect_null(pdx_ring_pop(&ring));
}
