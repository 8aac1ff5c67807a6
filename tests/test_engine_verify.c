/*
 * PDX_VERIFY=crc32c on PDX_TEST_TRANSPORT: decode asks its senders for
 * checksums and checks the bytes it holds before SUCCESS. Rooms of several
 * chunks, aux bytes, writes cut inside pages and pages that are not a
 * whole number of checksum blocks all match; a prefill layout of fewer
 * layers than decode's is checked over the layers it wrote. Over softnic a
 * WRITE placed with one bit flipped fails its room with "checksum
 * mismatch" (PDX_ERR_CORRUPT) and the next room succeeds.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"
#ifdef PDX_TEST_SOFTNIC
#include "softnic.h"
#endif

static side_t pf, dc;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

static const char *const verify_on[] = {"PDX_VERIFY=crc32c", NULL};

static pdx_stats_t stats(pdx_engine_t *e)
{
    pdx_stats_t s;

    cr_assert_eq(pdx_engine_stats(e, &s), PDX_OK);
    return s;
}

/* room in nchunks chunks over pages, aux with the last; decode's end state. */
static pdx_room_state_t move_chunks(uint32_t peer, uint64_t room, const uint32_t *pages,
                                    uint32_t n, uint32_t nchunks)
{
    const pdx_pages_t all = {pages, n};
    const pdx_region_t dst_aux = {.mem = dc.aux_mem, .offset = 0, .len = 512};
    const pdx_region_t src_aux = {.mem = pf.aux_mem, .offset = 0, .len = 512};
    uint32_t at = 0;

    for (uint32_t i = 0; i < 512; i++)
        pf.aux[i] = (uint8_t)(room * 31 + i);
    memset(dc.aux, 0, 512);
    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &all, &dst_aux, 1, 10000), PDX_OK);
    side_fill(&pf, room, pages, n, 0);
    for (uint32_t c = 0; c < nchunks; c++) {
        uint32_t k = c + 1 == nchunks ? n - at : n / nchunks;
        const pdx_pages_t part = {pages + at, k};
        const bool last = c + 1 == nchunks;

        cr_assert_eq(pdx_send(pf.e, room, pf.layout, &part, NULL, last ? &src_aux : NULL,
                              last ? PDX_SEND_LAST : 0), PDX_OK);
        at += k;
    }
    return wait_done(dc.e, room, 10000);
}

static void release_both(uint64_t room)
{
    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
}

Test(verify, chunks_aux_and_cut_writes_match, .fini = fini, .timeout = 60)
{
    /* 3 blocks and a 24-byte tail per page; writes of at most 4 KiB */
    const geom_t g = {.layers = 3, .bytes_per_page = 3 * 4096 + 24, .npages = 64};
    const char *const prefill_cfg[] = {"PDX_MAX_MSG_SIZE=4096", NULL};
    uint32_t pages[20], peer;
    unsigned seed = 7;

    side_open(&pf, &g, prefill_cfg);
    side_open(&dc, &g, verify_on);
    peer = side_connect(&dc, &pf);
    for (uint64_t room = 1; room <= 4; room++) {
        pick_pages(pages, 20, g.npages, &seed);
        cr_assert_eq(move_chunks(peer, room, pages, 20, (uint32_t)room), PDX_ROOM_SUCCESS,
                     "room %llu", (unsigned long long)room);
        cr_assert_eq(side_check(&dc, room, pages, 20, 0), 0);
        for (uint32_t i = 0; i < 512; i++)
            cr_assert_eq(dc.aux[i], (uint8_t)(room * 31 + i));
        release_both(room);
    }
    cr_assert_eq(stats(dc.e).rooms_verified, 4);
    cr_assert_eq(stats(dc.e).checksum_mismatches, 0);
    cr_assert_eq(stats(pf.e).rooms_verified, 0, "prefill checks nothing");
}

Test(verify, off_checks_nothing, .fini = fini, .timeout = 60)
{
    const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 16};
    const uint32_t pages[] = {3, 4, 9};
    uint32_t peer;

    side_open(&pf, &g, verify_on); /* the sender's setting asks for nothing */
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
    side_move(&pf, &dc, peer, 1, pages, 3);
    cr_assert_eq(stats(dc.e).rooms_verified, 0);
}

Test(verify, fewer_prefill_layers_checked_over_those, .fini = fini, .timeout = 60)
{
    /* prefill holds layers [0, 2), decode [0, 4): layers 2 and 3 are never
     * written, and decode's sum leaves them out as the sender's did */
    const geom_t gp = {.layers = 2, .bytes_per_page = 8192, .npages = 32};
    const geom_t gd = {.layers = 4, .bytes_per_page = 8192, .npages = 32};
    const uint32_t pages[] = {1, 2, 3, 17, 30};
    const pdx_pages_t p = {pages, 5};
    uint32_t peer;

    side_open(&pf, &gp, NULL);
    side_open(&dc, &gd, verify_on);
    memset(dc.pool, 0x5a, (size_t)gd.layers * gd.npages * gd.bytes_per_page);
    peer = side_connect(&dc, &pf);
    cr_assert_eq(pdx_expect(dc.e, peer, 9, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, 9, pages, 5, 0);
    cr_assert_eq(pdx_send(pf.e, 9, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 9, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(stats(dc.e).rooms_verified, 1);
    release_both(9);
}

/* Room 3 in two chunks; between them, edit() changes decode's copy of the
 * first chunk: the room must fail with "checksum mismatch". One shard and
 * one endpoint each way: the first chunk's notify then follows all of its
 * writes (a room's runs are striped over every endpoint, and a chunk that
 * is not the last notifies on one only). */
static void changed_at_decode(const geom_t *g, void (*edit)(uint8_t *page, size_t len))
{
    const char *const one[] = {"PDX_SHARDS=1", "PDX_QPS_PER_PEER=1", NULL};
    const char *const one_verify[] = {"PDX_SHARDS=1", "PDX_QPS_PER_PEER=1", "PDX_VERIFY=crc32c",
                                      NULL};
    const uint32_t pages[] = {4, 5, 11, 12};
    const pdx_pages_t first = {pages, 2}, rest = {pages + 2, 2}, all = {pages, 4};
    char why[256];
    uint32_t peer;

    side_open(&pf, g, one);
    side_open(&dc, g, one_verify);
    peer = side_connect(&dc, &pf);
    cr_assert_eq(pdx_expect(dc.e, peer, 3, dc.layout, &all, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, 3, pages, 4, 0);
    cr_assert_eq(pdx_send(pf.e, 3, pf.layout, &first, NULL, NULL, 0), PDX_OK);
    for (int i = 0; i < 10000 && pdx_poll(dc.e, 3) != PDX_ROOM_TRANSFERRING; i++)
        usleep(1000);
    cr_assert_eq(pdx_poll(dc.e, 3), PDX_ROOM_TRANSFERRING, "the first chunk's notify came");
    edit(dc.pool + (size_t)1 * g->npages * g->bytes_per_page + 5 * g->bytes_per_page,
         g->bytes_per_page);
    cr_assert_eq(pdx_send(pf.e, 3, pf.layout, &rest, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 3, 10000), PDX_ROOM_FAILED);
    cr_assert_eq(pdx_room_error(dc.e, 3, why, sizeof(why)), PDX_OK);
    cr_assert(strstr(why, "checksum mismatch") != NULL, "%s", why);
    cr_assert_eq(stats(dc.e).checksum_mismatches, 1);
    cr_assert_eq(release_wait(dc.e, 3, 5000), PDX_OK);
}

static void swap_blocks(uint8_t *page, size_t len)
{
    uint8_t tmp[4096];

    cr_assert_geq(len, 2 * sizeof(tmp));
    memcpy(tmp, page, sizeof(tmp));
    memcpy(page, page + sizeof(tmp), sizeof(tmp));
    memcpy(page + sizeof(tmp), tmp, sizeof(tmp));
}

Test(verify, blocks_swapped_in_a_page_fail_the_room, .fini = fini, .timeout = 60)
{
    /* same bytes, other places: each block's place is in its unit */
    const geom_t g = {.layers = 2, .bytes_per_page = 3 * 4096, .npages = 16};

    changed_at_decode(&g, swap_blocks);
}

static void flip_bit(uint8_t *page, size_t len)
{
    page[len / 2 + 100] ^= 1;
}

Test(verify, a_bit_changed_at_decode_fails_the_room, .fini = fini, .timeout = 60)
{
    /* the first chunk's bytes change in decode's memory before the last
     * chunk arrives: what decode holds is what it checks */
    const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 16};

    changed_at_decode(&g, flip_bit);
}

#ifdef PDX_TEST_SOFTNIC
Test(verify, a_flipped_bit_fails_the_room, .fini = fini, .timeout = 60)
{
    const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 32};
    uint32_t pages[8], peer;
    char why[256];
    unsigned seed = 11;

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, verify_on);
    peer = side_connect(&dc, &pf);
    pick_pages(pages, 8, g.npages, &seed);
    softnic_fault_corrupt(0, 3);
    cr_assert_eq(move_chunks(peer, 1, pages, 8, 2), PDX_ROOM_FAILED);
    cr_assert_eq(pdx_room_error(dc.e, 1, why, sizeof(why)), PDX_OK);
    cr_assert(strstr(why, "checksum mismatch") != NULL, "%s", why);
    cr_assert(strstr(why, pdx_status_str(PDX_ERR_CORRUPT)) != NULL, "%s", why);
    cr_assert_eq(side_check(&dc, 1, pages, 8, 0), 8, "exactly the flipped bit's word differs");
    cr_assert_eq(stats(dc.e).checksum_mismatches, 1);
    /* the sender wrote all it had; decode's ABORT fails its room if it comes first */
    if (wait_done(pf.e, 1, 10000) == PDX_ROOM_FAILED) {
        cr_assert_eq(pdx_room_error(pf.e, 1, why, sizeof(why)), PDX_OK);
        cr_assert(strstr(why, "checksum mismatch") != NULL, "%s", why);
    } else {
        cr_assert_eq(pdx_poll(pf.e, 1), PDX_ROOM_SUCCESS);
    }
    cr_assert_eq(release_wait(dc.e, 1, 5000), PDX_OK);
    cr_assert_eq(release_wait(pf.e, 1, 5000), PDX_OK);

    /* the pair goes on */
    pick_pages(pages, 8, g.npages, &seed);
    cr_assert_eq(move_chunks(peer, 2, pages, 8, 1), PDX_ROOM_SUCCESS);
    cr_assert_eq(side_check(&dc, 2, pages, 8, 0), 0);
    release_both(2);
    cr_assert_eq(stats(dc.e).rooms_verified, 1);
}

Test(verify, a_flipped_bit_in_aux_fails_the_room, .fini = fini, .timeout = 60)
{
    const geom_t g = {.layers = 1, .bytes_per_page = 4096, .npages = 8};
    const uint32_t pages[] = {2};
    char why[256];
    uint32_t peer;

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, verify_on);
    peer = side_connect(&dc, &pf);
    softnic_fault_corrupt(0, 2); /* the page's write, then aux's */
    cr_assert_eq(move_chunks(peer, 5, pages, 1, 1), PDX_ROOM_FAILED);
    cr_assert_eq(pdx_room_error(dc.e, 5, why, sizeof(why)), PDX_OK);
    cr_assert(strstr(why, "checksum mismatch") != NULL, "%s", why);
    cr_assert_eq(side_check(&dc, 5, pages, 1, 0), 0, "the page itself arrived intact");
    cr_assert_eq(release_wait(dc.e, 5, 5000), PDX_OK);
}
#endif
