/*
 * pdx_send_layers on PDX_TEST_TRANSPORT: a chunk sent as layer ranges, each
 * behind its own gate (host flags here), the way a forward pass hands over
 * its layers. Rooms arrive whole whatever order the gates open in; decode
 * is not done before the last range went; single-layer ranges over many
 * chunks and rooms; a range out of order, a chunk whose ranges stop short,
 * a last chunk that stops short, page counts that change and PDX_VERIFY
 * each fail the room with a message, and an abort between two ranges
 * releases the room. Every byte is compared.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"

#define LAYERS 8

static side_t pf, dc;
static const geom_t geom = {.layers = LAYERS, .bytes_per_page = 512, .npages = 64};

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

static uint32_t open_both(const char *const *decode_cfg)
{
    side_open(&pf, &geom, NULL);
    side_open(&dc, &geom, decode_cfg);
    return side_connect(&dc, &pf);
}

static pdx_gate_t flag_gate(const volatile uint64_t *flag)
{
    return (pdx_gate_t){.kind = PDX_GATE_WORD, .word = flag, .value = 1};
}

/* The room's prefill error contains what. */
static void failed_with(uint64_t room, const char *what)
{
    char err[256] = "";

    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_FAILED);
    cr_assert_eq(pdx_room_error(pf.e, room, err, sizeof(err)), PDX_OK);
    cr_assert(strstr(err, what), "error \"%s\" lacks \"%s\"", err, what);
    cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_FAILED, "decode's room fails too");
    cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
}

Test(layers, ranges_arrive_whole_in_any_gate_order, .fini = fini, .timeout = 60)
{
    enum { CHUNKS = 2, PER = 8, RANGES = 4 };
    uint32_t pages[CHUNKS * PER], peer = open_both(NULL);
    volatile uint64_t flags[CHUNKS * RANGES] = {0};
    uint32_t order[CHUNKS * RANGES];
    const pdx_pages_t all = {pages, CHUNKS * PER};
    unsigned seed = 11;

    for (uint64_t room = 1; room <= 3; room++) {
        pick_pages(pages, CHUNKS * PER, geom.npages, &seed);
        cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &all, NULL, 1, 10000), PDX_OK);
        side_fill(&pf, room, pages, CHUNKS * PER, 0);
        for (uint32_t i = 0; i < CHUNKS * RANGES; i++) {
            flags[i] = 0;
            order[i] = i;
        }
        for (uint32_t c = 0; c < CHUNKS; c++)
            for (uint32_t r = 0; r < RANGES; r++) {
                const pdx_pages_t part = {pages + c * PER, PER};
                const pdx_gate_t gate = flag_gate(&flags[c * RANGES + r]);
                const bool last = c + 1 == CHUNKS && r + 1 == RANGES;

                cr_assert_eq(pdx_send_layers(pf.e, room, pf.layout, r * 2, r * 2 + 2, &part,
                                             &gate, NULL, last ? PDX_SEND_LAST : 0), PDX_OK);
            }
        for (uint32_t i = CHUNKS * RANGES - 1; i > 0; i--) { /* a random opening order */
            uint32_t j = (uint32_t)rand_r(&seed) % (i + 1), t = order[i];

            order[i] = order[j];
            order[j] = t;
        }
        for (uint32_t i = 0; i < CHUNKS * RANGES; i++) {
            pdx_room_state_t st = pdx_poll(dc.e, room);

            cr_assert(st != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED,
                      "room %llu ended with %u of %u gates open", (unsigned long long)room, i,
                      CHUNKS * RANGES);
            __atomic_store_n(&flags[order[i]], 1, __ATOMIC_RELEASE);
            usleep(2000);
        }
        cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS);
        cr_assert_eq(side_check(&dc, room, pages, CHUNKS * PER, 0), 0);
        cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
        cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
        cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
    }
}

Test(layers, one_layer_at_a_time_many_chunks_and_rooms, .fini = fini, .timeout = 60)
{
    enum { ROOMS = 6, CHUNKS = 3, PER = 5 };
    uint32_t pages[ROOMS][CHUNKS * PER], peer = open_both(NULL);
    pdx_stats_t before, after;
    unsigned seed = 3;

    cr_assert_eq(pdx_engine_stats(pf.e, &before), PDX_OK);
    for (uint32_t r = 0; r < ROOMS; r++) {
        const pdx_pages_t all = {pages[r], CHUNKS * PER};

        pick_pages(pages[r], CHUNKS * PER, geom.npages, &seed);
        cr_assert_eq(pdx_expect(dc.e, peer, 100 + r, dc.layout, &all, NULL, 1, 10000), PDX_OK);
    }
    /* rooms interleaved layer by layer; a room's pages are its own here and
     * may overlap another room's: each room is checked before the next is
     * filled */
    for (uint32_t r = 0; r < ROOMS; r++) {
        side_fill(&pf, 100 + r, pages[r], CHUNKS * PER, 0);
        for (uint32_t c = 0; c < CHUNKS; c++)
            for (uint32_t l = 0; l < LAYERS; l++) {
                const pdx_pages_t part = {pages[r] + c * PER, PER};
                const bool last = c + 1 == CHUNKS && l + 1 == LAYERS;

                cr_assert_eq(pdx_send_layers(pf.e, 100 + r, pf.layout, l, l + 1, &part, NULL,
                                             NULL, last ? PDX_SEND_LAST : 0), PDX_OK);
            }
        cr_assert_eq(wait_done(dc.e, 100 + r, 10000), PDX_ROOM_SUCCESS);
        cr_assert_eq(side_check(&dc, 100 + r, pages[r], CHUNKS * PER, 0), 0, "room %u", r);
        cr_assert_eq(wait_done(pf.e, 100 + r, 10000), PDX_ROOM_SUCCESS);
        cr_assert_eq(release_wait(dc.e, 100 + r, 5000), PDX_OK);
        cr_assert_eq(release_wait(pf.e, 100 + r, 5000), PDX_OK);
    }
    /* each range moved its own layer, not the chunk's every layer */
    cr_assert_eq(pdx_engine_stats(pf.e, &after), PDX_OK);
    cr_assert_eq(after.bytes_sent - before.bytes_sent,
                 (uint64_t)ROOMS * CHUNKS * PER * LAYERS * geom.bytes_per_page);
}

/* Decode's count of the room's layers that landed. */
static uint32_t landed(uint64_t room)
{
    uint32_t n = UINT32_MAX;

    cr_assert_eq(pdx_room_layers(dc.e, room, &n), PDX_OK);
    return n;
}

/* ... polled until it reaches want (5 s at most): the count then. */
static uint32_t landed_wait(uint64_t room, uint32_t want)
{
    for (int i = 0; i < 5000 && landed(room) < want; i++)
        usleep(1000);
    return landed(room);
}

Test(layers, ranges_ready_together_go_together, .fini = fini, .timeout = 60)
{
    enum { CHUNKS = 2, PER = 5, RANGES = 4 };
    const uint64_t room = 60;
    uint32_t pages[CHUNKS * PER], peer = open_both(NULL);
    volatile uint64_t flags[CHUNKS * RANGES];
    const pdx_pages_t all = {pages, CHUNKS * PER};
    pdx_stats_t before, after;
    unsigned seed = 23;

    pick_pages(pages, CHUNKS * PER, geom.npages, &seed);
    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &all, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, room, pages, CHUNKS * PER, 0);
    for (uint32_t i = 0; i < CHUNKS * RANGES; i++)
        flags[i] = i != 0 && i != RANGES + 2; /* the first range closed, and one of the second chunk */
    for (uint32_t c = 0; c < CHUNKS; c++)
        for (uint32_t r = 0; r < RANGES; r++) {
            const pdx_pages_t part = {pages + c * PER, PER};
            const pdx_gate_t gate = flag_gate(&flags[c * RANGES + r]);

            cr_assert_eq(pdx_send_layers(pf.e, room, pf.layout, r * 2, r * 2 + 2, &part, &gate,
                                         NULL, c + 1 == CHUNKS && r + 1 == RANGES ? PDX_SEND_LAST
                                                                                  : 0), PDX_OK);
        }
    usleep(20000);
    cr_assert_eq(pdx_engine_stats(pf.e, &before), PDX_OK);
    __atomic_store_n(&flags[0], 1, __ATOMIC_RELEASE);
    /* the first chunk's ranges go as one; the second's first two as one, up
     * to the closed gate */
    cr_assert_eq(landed_wait(room, 4), 4, "the first chunk and the second's ranges before the "
                 "closed gate: layers [0, 4)");
    cr_assert_neq(pdx_poll(dc.e, room), PDX_ROOM_SUCCESS);
    __atomic_store_n(&flags[RANGES + 2], 1, __ATOMIC_RELEASE);
    cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(side_check(&dc, room, pages, CHUNKS * PER, 0), 0);
    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(pdx_engine_stats(pf.e, &after), PDX_OK);
    cr_assert_eq(after.ranges_merged - before.ranges_merged, (RANGES - 1) + 1 + 1,
                 "%llu ranges went with the one before",
                 (unsigned long long)(after.ranges_merged - before.ranges_merged));
    cr_assert_eq(after.chunks_sent - before.chunks_sent, CHUNKS * RANGES);
    cr_assert_eq(after.bytes_sent - before.bytes_sent,
                 (uint64_t)CHUNKS * PER * LAYERS * geom.bytes_per_page);
    cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
}

/* Two chunks sent layer by layer, the second's gates opened one at a time:
 * decode counts a layer once both chunks wrote it, with its bytes there. */
static void learn_layers(const char *const *decode_cfg)
{
    enum { CHUNKS = 2, PER = 6 };
    const uint64_t room = 40;
    uint32_t pages[CHUNKS * PER], peer = open_both(decode_cfg), n;
    volatile uint64_t flags[CHUNKS][LAYERS];
    const pdx_pages_t all = {pages, CHUNKS * PER};
    unsigned seed = 17;

    memset((void *)flags, 0, sizeof(flags));
    pick_pages(pages, CHUNKS * PER, geom.npages, &seed);
    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &all, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, room, pages, CHUNKS * PER, 0);
    for (uint32_t c = 0; c < CHUNKS; c++)
        for (uint32_t l = 0; l < LAYERS; l++) {
            const pdx_pages_t part = {pages + c * PER, PER};
            const pdx_gate_t gate = flag_gate(&flags[c][l]);

            cr_assert_eq(pdx_send_layers(pf.e, room, pf.layout, l, l + 1, &part, &gate, NULL,
                                         c + 1 == CHUNKS && l + 1 == LAYERS ? PDX_SEND_LAST : 0),
                         PDX_OK);
        }
    cr_assert_eq(landed(room), 0);
    /* the first chunk whole: every layer still waits for the second */
    for (uint32_t l = 0; l < LAYERS; l++)
        __atomic_store_n(&flags[0][l], 1, __ATOMIC_RELEASE);
    usleep(50000);
    cr_assert_eq(landed(room), 0, "a layer landed with one of its two chunks");
    /* then the second chunk's layers one by one: each lands with its bytes */
    for (uint32_t l = 0; l + 1 < LAYERS; l++) {
        __atomic_store_n(&flags[1][l], 1, __ATOMIC_RELEASE);
        cr_assert_eq(landed_wait(room, l + 1), l + 1, "after layer %u", l);
        cr_assert_eq(side_check_layers(&dc, room, pages, CHUNKS * PER, 0, 0, l + 1), 0,
                     "%u layers landed before all their bytes", l + 1);
        cr_assert_neq(pdx_poll(dc.e, room), PDX_ROOM_SUCCESS);
    }
    __atomic_store_n(&flags[1][LAYERS - 1], 1, __ATOMIC_RELEASE);
    cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(landed(room), LAYERS);
    cr_assert_eq(side_check(&dc, room, pages, CHUNKS * PER, 0), 0);
    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
    /* not a decode room, no room, no stream waits without a GPU */
    cr_assert_eq(pdx_room_layers(pf.e, room, &n), PDX_ERR_STATE);
    cr_assert_eq(pdx_room_layers(dc.e, room + 1, &n), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_room_stream_wait_layer(dc.e, room, 0, NULL, NULL), PDX_ERR_UNSUPPORTED);
    cr_assert_eq(pdx_room_stream_wait_layer(dc.e, room, LAYERS, NULL, NULL), PDX_ERR_RANGE);
    cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
}

Test(layers, decode_learns_each_layer_as_it_lands, .fini = fini, .timeout = 60)
{
    learn_layers(NULL);
}

/* over rdma, a layer counts once a flush read made it visible (tcp needs
 * none) */
Test(layers, decode_learns_layers_behind_flush_reads, .fini = fini, .timeout = 60)
{
    const char *const flush_on[] = {"PDX_FLUSH=on", NULL};

    learn_layers(flush_on);
}

/* Room `room` expected over pages, then layer ranges of it sent: {begin,
 * end, npages, last} each (npages of pages). */
typedef struct range {
    uint32_t begin, end, npages;
    bool     last;
} range_t;

static void send_ranges(uint32_t peer, uint64_t room, const uint32_t *pages, const range_t *r,
                        uint32_t n)
{
    const pdx_pages_t all = {pages, 4};

    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &all, NULL, 1, 10000), PDX_OK);
    for (uint32_t i = 0; i < n; i++) {
        const pdx_pages_t p = {pages, r[i].npages};

        cr_assert_eq(pdx_send_layers(pf.e, room, pf.layout, r[i].begin, r[i].end, &p, NULL,
                                     NULL, r[i].last ? PDX_SEND_LAST : 0), PDX_OK);
    }
}

Test(layers, ranges_out_of_order_or_short_fail_the_room, .fini = fini, .timeout = 60)
{
    const uint32_t pages[] = {1, 2, 3, 4};
    const range_t late[] = {{4, 8, 4, true}};
    const range_t half[] = {{0, 4, 4, false}, {0, LAYERS, 4, true}};
    const range_t short_last[] = {{0, 6, 4, true}};
    const range_t counts[] = {{0, 4, 4, false}, {4, 8, 3, true}};
    uint32_t peer = open_both(NULL);

    send_ranges(peer, 1, pages, late, 1); /* a chunk's layers [4, 8) before [0, 4) */
    failed_with(1, "layers [0, 4) were not sent before them");
    send_ranges(peer, 2, pages, half, 2); /* a chunk's first half, then another chunk */
    failed_with(2, "layers [4, 8) were never sent");
    send_ranges(peer, 3, pages, short_last, 1);
    failed_with(3, "the last chunk stops at layer 6");
    send_ranges(peer, 4, pages, counts, 2); /* the second range with other page counts */
    failed_with(4, "with 3 pages in group 0");
    /* the engine still serves whole rooms and layer ranges */
    side_move(&pf, &dc, peer, 5, pages, 4);
}

Test(layers, bad_ranges_are_refused_at_once, .fini = fini, .timeout = 30)
{
    const uint32_t pages[] = {1, 2};
    const pdx_pages_t p = {pages, 2};

    open_both(NULL);
    cr_assert_eq(pdx_send_layers(pf.e, 1, pf.layout, 3, 3, &p, NULL, NULL, 0), PDX_ERR_INVALID);
    cr_assert_eq(pdx_send_layers(pf.e, 1, pf.layout, 5, 2, &p, NULL, NULL, 0), PDX_ERR_INVALID);
    cr_assert_eq(pdx_send_layers(pf.e, 1, pf.layout, 6, LAYERS + 1, &p, NULL, NULL, 0),
                 PDX_ERR_RANGE);
    cr_assert_eq(pdx_send_layers(NULL, 1, pf.layout, 0, 1, &p, NULL, NULL, 0), PDX_ERR_INVALID);
    cr_assert_eq(pdx_poll(pf.e, 1), PDX_ROOM_NONE, "nothing was queued");
}

Test(layers, an_abort_between_ranges_releases_the_room, .fini = fini, .timeout = 60)
{
    const uint32_t pages[] = {8, 9, 10};
    const pdx_pages_t p = {pages, 3};
    volatile uint64_t open = 1, closed = 0;
    const pdx_gate_t g_open = flag_gate(&open), g_closed = flag_gate(&closed);
    uint32_t peer = open_both(NULL);

    cr_assert_eq(pdx_expect(dc.e, peer, 7, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, 7, pages, 3, 0);
    cr_assert_eq(pdx_send_layers(pf.e, 7, pf.layout, 0, 4, &p, &g_open, NULL, 0), PDX_OK);
    cr_assert_eq(pdx_send_layers(pf.e, 7, pf.layout, 4, 8, &p, &g_closed, NULL, PDX_SEND_LAST),
                 PDX_OK);
    usleep(20000);
    cr_assert_neq(pdx_poll(dc.e, 7), PDX_ROOM_SUCCESS);
    cr_assert_eq(pdx_abort(pf.e, 7), PDX_OK);
    cr_assert_eq(release_wait(pf.e, 7, 5000), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 7, 10000), PDX_ROOM_FAILED);
    cr_assert_eq(release_wait(dc.e, 7, 5000), PDX_OK);
    closed = 1;
    side_move(&pf, &dc, peer, 8, pages, 3);
}

Test(layers, verify_refuses_ranges, .fini = fini, .timeout = 60)
{
    const char *const verify_on[] = {"PDX_VERIFY=crc32c", NULL};
    const uint32_t pages[] = {1, 2};
    const pdx_pages_t p = {pages, 2};
    uint32_t peer = open_both(verify_on);

    cr_assert_eq(pdx_expect(dc.e, peer, 1, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_send_layers(pf.e, 1, pf.layout, 0, 2, &p, NULL, NULL, 0), PDX_OK);
    failed_with(1, "PDX_VERIFY");
    side_move(&pf, &dc, peer, 2, pages, 2); /* whole chunks are summed as before */
}
