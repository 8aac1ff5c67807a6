/*
 * Every public function given bad arguments: NULL where a pointer is due,
 * unregistered memory, pages past a buffer, an unknown peer, layout, room
 * or region, a room id reused while in flight, a release of an unknown
 * room. Each answers a status (and logs why); nothing crashes, and the
 * engines still move a verified room afterwards.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_fixture.h"

static side_t pf, dc;
static uint32_t peer;
static const geom_t g = {.layers = 2, .bytes_per_page = 512, .npages = 16};

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

static void open_pair(void)
{
    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
}

static void still_serves(uint64_t room)
{
    static const uint32_t pages[2] = {3, 9};

    side_move(&pf, &dc, peer, room, pages, 2);
}

Test(api_args, null_everywhere, .fini = fini, .timeout = 30)
{
    pdx_pages_t p = {(uint32_t[]){1}, 1};
    pdx_stats_t st;
    uint8_t buf[256];
    size_t len;
    uint32_t x;
    char text[64];
    pdx_xfer_t h;

    open_pair();
    cr_expect_eq(pdx_config_init(NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_config_set(NULL, "PDX_SHARDS", "1"), PDX_ERR_INVALID);
    cr_expect_eq(pdx_config_describe(NULL, 0, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_create(NULL, NULL), PDX_ERR_INVALID);
    pdx_engine_destroy(NULL);
    cr_expect_not_null(pdx_status_str((pdx_status_t)-999));
    cr_expect_not_null(pdx_engine_address(NULL));
    cr_expect_not_null(pdx_engine_transport(NULL));
    cr_expect_eq(pdx_mem_register(NULL, buf, sizeof(buf), &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_register(pf.e, NULL, sizeof(buf), &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_register(pf.e, buf, sizeof(buf), NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_deregister(NULL, 0), PDX_ERR_INVALID);
    cr_expect_eq(pdx_layout_create(NULL, NULL, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_layout_create(pf.e, NULL, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_connect(NULL, "127.0.0.1:1", 100, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_connect(dc.e, NULL, 100, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_connect(dc.e, "127.0.0.1:1", 100, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_close(NULL, peer), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_accept(NULL, 0, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_accept(pf.e, 0, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_desc(NULL, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_desc(pf.e, buf, sizeof(buf), NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_desc_info(NULL, 10, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_connect_desc(NULL, buf, 10, 100, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_peer_connect_desc(dc.e, NULL, 10, 100, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_desc(NULL, 0, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_desc(pf.e, pf.mem, buf, sizeof(buf), NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_desc_info(NULL, 10, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_expect(NULL, peer, 1, dc.layout, &p, NULL, 1, 100), PDX_ERR_INVALID);
    cr_expect_eq(pdx_expect(dc.e, peer, 1, dc.layout, NULL, NULL, 1, 100), PDX_ERR_INVALID);
    cr_expect_eq(pdx_gate_arm(NULL, NULL, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_gate_release(pf.e, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_send(NULL, 1, pf.layout, &p, NULL, NULL, 0), PDX_ERR_INVALID);
    cr_expect_eq(pdx_send(pf.e, 1, pf.layout, NULL, NULL, NULL, 0), PDX_ERR_INVALID);
    cr_expect_eq(pdx_room_stream_wait(NULL, 1, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_post(NULL, PDX_XFER_WRITE, NULL, 0, NULL, 0, NULL, 100, &h),
                 PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_post(pf.e, PDX_XFER_WRITE, NULL, 1, NULL, 1, NULL, 100, &h),
                 PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_poll(NULL, 1), PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_wait(NULL, &h, 1, 10, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_wait(pf.e, NULL, 1, 10, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_error(pf.e, 1, NULL, 10), PDX_ERR_INVALID);
    cr_expect_eq(pdx_xfer_release(NULL, 1), PDX_ERR_INVALID);
    cr_expect_eq(pdx_poll(NULL, 1), PDX_ROOM_NONE);
    cr_expect_eq(pdx_room_error(NULL, 1, text, sizeof(text)), PDX_ERR_INVALID);
    cr_expect_eq(pdx_room_error(pf.e, 1, NULL, 10), PDX_ERR_INVALID);
    cr_expect_eq(pdx_abort(NULL, 1), PDX_ERR_INVALID);
    cr_expect_eq(pdx_release(NULL, 1), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_stats(NULL, &st), PDX_ERR_INVALID);
    cr_expect_eq(pdx_engine_stats(pf.e, NULL), PDX_ERR_INVALID);
    still_serves(1);
}

Test(api_args, unknown_names, .fini = fini, .timeout = 30)
{
    pdx_pages_t p = {(uint32_t[]){1}, 1};
    char text[64];
    uint8_t buf[256];
    size_t len;

    open_pair();
    cr_expect_eq(pdx_mem_deregister(pf.e, 999), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_mem_desc(pf.e, 999, buf, sizeof(buf), &len), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_peer_close(dc.e, 0xdead), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_expect(dc.e, 0xdead, 1, dc.layout, &p, NULL, 1, 100), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_expect(dc.e, peer, 1, 777, &p, NULL, 1, 100), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_send(pf.e, 1, 777, &p, NULL, NULL, 0), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_poll(pf.e, 4242), PDX_ROOM_NONE);
    cr_expect_eq(pdx_room_error(pf.e, 4242, text, sizeof(text)), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_abort(pf.e, 4242), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_release(pf.e, 4242), PDX_ERR_NOT_FOUND, "release of an unknown room");
    cr_expect_eq(pdx_xfer_poll(pf.e, 4242), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_xfer_release(pf.e, 4242), PDX_ERR_NOT_FOUND);
    still_serves(2);
}

Test(api_args, memory_and_pages_out_of_range, .fini = fini, .timeout = 30)
{
    static uint8_t small[1024];
    pdx_buffer_desc_t b = {.mem = 0, .offset = 0, .bytes_per_page = 512};
    pdx_group_desc_t grp = {.buffers_per_layer = 1, .nbuffers = 1, .npages = 4, .buffers = &b};
    pdx_layout_desc_t d = {.field_mask = PDX_LAYOUT_FIELD_GROUPS, .ngroups = 1, .groups = &grp};
    pdx_pages_t past = {(uint32_t[]){16}, 1}, way_past = {(uint32_t[]){UINT32_MAX}, 1};
    uint32_t x, mem;

    open_pair();
    /* a layout over memory that is not registered, or past its region */
    b.mem = 555;
    cr_expect_eq(pdx_layout_create(pf.e, &d, &x), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_mem_register(pf.e, small, sizeof(small), &mem), PDX_OK);
    b.mem = mem;
    cr_expect_eq(pdx_layout_create(pf.e, &d, &x), PDX_ERR_RANGE, "4 pages of 512 B in 1 KiB");
    /* decode pages past its buffers: refused at the call */
    cr_expect_eq(pdx_expect(dc.e, peer, 3, dc.layout, &past, NULL, 1, 1000), PDX_ERR_RANGE);
    cr_expect_eq(pdx_expect(dc.e, peer, 3, dc.layout, &way_past, NULL, 1, 1000), PDX_ERR_RANGE);
    cr_expect_eq(pdx_poll(dc.e, 3), PDX_ROOM_NONE);
    /* prefill pages past its buffers: refused at the call, or the room fails
     * on both sides once decode's pages are known */
    {
        pdx_pages_t ok = {(uint32_t[]){1}, 1};
        pdx_status_t st;

        cr_assert_eq(pdx_expect(dc.e, peer, 4, dc.layout, &ok, NULL, 1, 10000), PDX_OK);
        st = pdx_send(pf.e, 4, pf.layout, &past, NULL, NULL, PDX_SEND_LAST);
        cr_expect(st == PDX_ERR_RANGE || (st == PDX_OK && wait_done(pf.e, 4, 10000) ==
                                                              PDX_ROOM_FAILED),
                  "%s", pdx_status_str(st));
        if (st == PDX_OK)
            cr_expect_eq(wait_done(dc.e, 4, 10000), PDX_ROOM_FAILED);
        else
            cr_assert_eq(pdx_abort(dc.e, 4), PDX_OK);
        release_wait(pf.e, 4, 5000);
        release_wait(dc.e, 4, 5000);
    }
    /* an aux region outside registered memory */
    {
        pdx_pages_t p = {(uint32_t[]){1}, 1};
        pdx_region_t aux = {.mem = dc.aux_mem, .offset = 4000, .len = 200};

        cr_expect_eq(pdx_expect(dc.e, peer, 5, dc.layout, &p, &aux, 1, 1000), PDX_ERR_RANGE);
        aux = (pdx_region_t){.mem = 999, .len = 8};
        cr_expect_eq(pdx_expect(dc.e, peer, 5, dc.layout, &p, &aux, 1, 1000), PDX_ERR_NOT_FOUND);
    }
    still_serves(6);
}

/* A room id in flight is not taken again on either side. */
Test(api_args, a_room_id_reused_in_flight, .fini = fini, .timeout = 30)
{
    pdx_pages_t p = {(uint32_t[]){2}, 1};

    open_pair();
    cr_assert_eq(pdx_expect(dc.e, peer, 7, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_expect_eq(pdx_expect(dc.e, peer, 7, dc.layout, &p, NULL, 1, 10000), PDX_ERR_EXISTS);
    side_fill(&pf, 7, (uint32_t[]){2}, 1, 0);
    cr_assert_eq(pdx_send(pf.e, 7, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_expect_neq(pdx_send(pf.e, 7, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK,
                  "a chunk after the last one");
    cr_assert_eq(wait_done(dc.e, 7, 10000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 7, (uint32_t[]){2}, 1, 0), 0);
    cr_assert_eq(wait_done(pf.e, 7, 10000), PDX_ROOM_SUCCESS);
    cr_expect_eq(pdx_expect(dc.e, peer, 7, dc.layout, &p, NULL, 1, 10000), PDX_ERR_EXISTS,
                 "not released yet");
    cr_assert_eq(release_wait(dc.e, 7, 5000), PDX_OK);
    cr_assert_eq(release_wait(pf.e, 7, 5000), PDX_OK);
    cr_expect_eq(pdx_release(dc.e, 7), PDX_ERR_NOT_FOUND, "released twice");
    still_serves(7); /* released: the id serves again */
}

Test(api_args, a_connection_to_itself, .fini = fini, .timeout = 30)
{
    pdx_stats_t s;
    uint32_t self = UINT32_MAX;

    open_pair();
    cr_assert_eq(pdx_peer_connect(dc.e, pdx_engine_address(dc.e), 5000, &self), PDX_ERR_INVALID);
    cr_assert_eq(pdx_engine_stats(dc.e, &s), PDX_OK);
    for (int i = 0; i < 2000 && (s.peers != 1 || s.handshakes != 0); i++) {
        usleep(1000);
        cr_assert_eq(pdx_engine_stats(dc.e, &s), PDX_OK);
    }
    cr_assert_eq(s.peers, 1, "only the prefill peer holds a slot");
    cr_assert_eq(s.handshakes, 0);
    still_serves(41);
}
