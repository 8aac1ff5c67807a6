/*
 * A prefill room's destinations are fixed by its first chunk: a decode
 * rank that asks later is refused, the others are served in full; a last
 * chunk that leaves decode pages unwritten fails the room on both sides.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "util.h"

static side_t pf, dc, dc2;

static void fini(void)
{
    side_close(&dc);
    side_close(&dc2);
    side_close(&pf);
}

/* Poll the room until it is in `want` or the deadline passes; the last state. */
static pdx_room_state_t wait_state(pdx_engine_t *e, uint64_t room, pdx_room_state_t want,
                                   int timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);
    pdx_room_state_t st;

    while ((st = pdx_poll(e, room)) != want && pdx_now_ns() < deadline)
        usleep(1000);
    return st;
}

Test(engine_race, decode_rank_after_the_first_chunk_is_refused, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t src[4] = {1, 2, 3, 4}, dst[4] = {10, 11, 12, 13}, dst2[4] = {20, 21, 22, 23};
    pdx_pages_t d = {dst, 4}, d2 = {dst2, 4}, first = {src, 2}, second = {src + 2, 2};
    uint32_t peer, peer2;
    char err[256] = "";

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    side_open(&dc2, &g, NULL);
    peer = side_connect(&dc, &pf);
    peer2 = side_connect(&dc2, &pf);

    cr_assert_eq(pdx_expect(dc.e, peer, 5, dc.layout, &d, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(wait_state(pf.e, 5, PDX_ROOM_WAITING, 5000), PDX_ROOM_WAITING);
    side_fill(&pf, 5, src, 4, 0);
    cr_assert_eq(pdx_send(pf.e, 5, pf.layout, &first, NULL, NULL, 0), PDX_OK);
    cr_assert_eq(wait_state(pf.e, 5, PDX_ROOM_TRANSFERRING, 5000), PDX_ROOM_TRANSFERRING);

    /* Too late: the first chunk went out without it. */
    cr_assert_eq(pdx_expect(dc2.e, peer2, 5, dc2.layout, &d2, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(wait_done(dc2.e, 5, 5000), PDX_ROOM_FAILED);

    cr_assert_eq(pdx_send(pf.e, 5, pf.layout, &second, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 5, 5000), PDX_ROOM_SUCCESS, "decode: %s",
                 (pdx_room_error(dc.e, 5, err, sizeof(err)), err));
    cr_assert_eq(wait_done(pf.e, 5, 5000), PDX_ROOM_SUCCESS, "prefill: %s",
                 (pdx_room_error(pf.e, 5, err, sizeof(err)), err));
    cr_expect_eq(side_check(&dc, 5, dst, 4, 0), 0);
    cr_expect_eq(release_wait(dc.e, 5, 5000), PDX_OK);
    cr_expect_eq(release_wait(dc2.e, 5, 5000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, 5, 5000), PDX_OK);
}

Test(engine_race, last_chunk_short_of_the_expected_pages_fails, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t src[2] = {1, 2}, dst[3] = {10, 11, 12};
    pdx_pages_t d = {dst, 3}, s = {src, 2};
    uint32_t peer;
    char err[256] = "";

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);

    cr_assert_eq(pdx_expect(dc.e, peer, 8, dc.layout, &d, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, 8, src, 2, 0);
    cr_assert_eq(pdx_send(pf.e, 8, pf.layout, &s, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, 8, 5000), PDX_ROOM_FAILED);
    cr_expect_eq(pdx_room_error(pf.e, 8, err, sizeof(err)), PDX_OK);
    cr_expect(strstr(err, pdx_status_str(PDX_ERR_RANGE)) && strstr(err, "sent 2 of the 3 pages"),
              "prefill: %s", err);
    cr_assert_eq(wait_done(dc.e, 8, 5000), PDX_ROOM_FAILED);
    cr_expect_eq(release_wait(dc.e, 8, 5000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, 8, 5000), PDX_OK);
}
