/*
 * Load on PDX_TEST_TRANSPORT: 2,048 rooms of 61 layers in flight at once
 * through one engine pair (sglang's MoRI connector was validated with
 * 2,048 concurrent 8K-token requests; the pages are sized to this machine),
 * with rings smaller than the load so that pdx_send says PDX_ERR_AGAIN and
 * the caller retries: every room SUCCESS and every byte checked, no ring
 * past its configured size, and the memory it took printed.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "proc_usage.h"
#include "util.h"

#define ROOMS      2048u
#define PER_ROOM   2u       /* pages per room, in each of the 61 layers */
#define RING       "256"    /* PDX_RING_CHUNKS per shard: below ROOMS / shards */

static side_t pf, dc;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

static pdx_pages_t room_pages(uint64_t room, uint32_t *buf)
{
    for (uint32_t i = 0; i < PER_ROOM; i++)
        buf[i] = (uint32_t)((room - 1) * PER_ROOM + i);
    return (pdx_pages_t){buf, PER_ROOM};
}

/* Poll every room until all ended (or the deadline); how many ended SUCCESS. */
static uint32_t wait_all(pdx_engine_t *e, int timeout_ms)
{
    uint64_t until = pdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
    uint32_t ok = 0, ended;

    do {
        ok = ended = 0;
        for (uint64_t r = 1; r <= ROOMS; r++) {
            pdx_room_state_t s = pdx_poll(e, r);

            ended += s == PDX_ROOM_SUCCESS || s == PDX_ROOM_FAILED;
            ok += s == PDX_ROOM_SUCCESS;
        }
        if (ended < ROOMS)
            usleep(1000);
    } while (ended < ROOMS && pdx_now_ns() < until);
    return ok;
}

Test(load, rooms_2048_of_61_layers_at_once, .fini = fini, .timeout = 240)
{
    const geom_t g = {.layers = 61, .bytes_per_page = 256, .npages = ROOMS * PER_ROOM};
    const char *const cfg[] = {"PDX_RING_CHUNKS=" RING, "PDX_TRANSFER_TIMEOUT_MS=120000",
                               "PDX_BOOTSTRAP_TIMEOUT_MS=120000", NULL};
    uint32_t buf[PER_ROOM], peer, ok;
    uint64_t again = 0, t0;
    long rss0 = proc_rss_kib(), rss1;
    pdx_stats_t spf, sdc;

    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    peer = side_connect(&dc, &pf);
    t0 = pdx_now_ns();
    for (uint64_t r = 1; r <= ROOMS; r++) {
        pdx_pages_t p = room_pages(r, buf);

        cr_assert_eq(pdx_expect(dc.e, peer, r, dc.layout, &p, NULL, 1, 120000), PDX_OK,
                     "room %llu", (unsigned long long)r);
        side_fill(&pf, r, buf, PER_ROOM, 0);
    }
    for (uint64_t r = 1; r <= ROOMS; r++) {
        pdx_pages_t p = room_pages(r, buf);
        pdx_status_t st;

        while ((st = pdx_send(pf.e, r, pf.layout, &p, NULL, NULL, PDX_SEND_LAST)) ==
               PDX_ERR_AGAIN) {
            again++;
            usleep(50);
        }
        cr_assert_eq(st, PDX_OK, "room %llu: %s", (unsigned long long)r, pdx_status_str(st));
    }
    ok = wait_all(dc.e, 120000);
    cr_assert_eq(ok, ROOMS, "decode rooms SUCCESS");
    rss1 = proc_rss_kib();
    for (uint64_t r = 1; r <= ROOMS; r++) {
        room_pages(r, buf);
        cr_assert_eq(side_check(&dc, r, buf, PER_ROOM, 0), 0, "room %llu's bytes",
                     (unsigned long long)r);
    }
    cr_assert_eq(wait_all(pf.e, 30000), ROOMS, "prefill rooms SUCCESS");
    cr_assert_eq(pdx_engine_stats(pf.e, &spf), PDX_OK);
    cr_assert_eq(pdx_engine_stats(dc.e, &sdc), PDX_OK);
    printf("load (%s): %u rooms x 61 layers x %u pages in %.0f ms; pdx_send AGAIN %llu times "
           "(retried); ring high water %llu of " RING "; RSS %ld -> %ld KiB (pools %zu KiB)\n",
           PDX_TEST_TRANSPORT, ROOMS, PER_ROOM, (double)(pdx_now_ns() - t0) / 1e6,
           (unsigned long long)again, (unsigned long long)spf.ring_high_water, rss0, rss1,
           (size_t)2 * g.layers * g.npages * g.bytes_per_page / 1024);
    fflush(stdout);
    cr_expect_eq(spf.rooms_success, ROOMS);
    cr_expect_eq(sdc.rooms_success, ROOMS);
    cr_expect_eq(spf.rooms_failed + sdc.rooms_failed, 0);
    cr_expect_eq(spf.send_again, again, "every AGAIN is counted");
    cr_expect_gt(again, 0, "the load passed the rings: AGAIN was retried");
    cr_expect_leq(spf.ring_high_water, 256);
    for (uint64_t r = 1; r <= ROOMS; r++) {
        cr_assert_eq(release_wait(dc.e, r, 5000), PDX_OK);
        cr_assert_eq(release_wait(pf.e, r, 5000), PDX_OK);
    }
}
