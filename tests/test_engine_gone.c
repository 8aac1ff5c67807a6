/*
 * A sender that goes away (built once per transport): decode rooms it had
 * finished, or whose last notifies were already on their way, still end
 * SUCCESS; the others fail "peer gone" once every shard has polled what had
 * arrived.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "peer.h"
#include "rooms.h"
#include "engine_fixture.h"

static side_t pf, pf2, dc;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
    side_close(&pf2);
}

static pdx_wire_notify_t last_notify(const pdx_peer_t *p, uint64_t room)
{
    return (pdx_wire_notify_t){.room = room, .sender = p->remote_id, .seq = 0,
                               .flags = PDX_WIRE_NOTIFY_LAST, .count = 1, .status = PDX_OK};
}

/*
 * The order the control thread and a shard may take: the peer is gone, the
 * shard counts one room's LAST notify, the reap fences the peer's rooms, the
 * shard counts the other room's LAST notify (polled before the loss). Both
 * rooms end SUCCESS; a third room of that peer with nothing on its way
 * fails "peer gone", and its release completes.
 */
Test(gone, notifies_polled_after_the_loss_still_count, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 256, .npages = 16};
    uint32_t pages[1] = {3};
    pdx_pages_t p = {pages, 1};
    pdx_wire_notify_t n;
    pdx_peer_t *peer;
    uint32_t id;
    char err[256] = "";

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    id = side_connect(&dc, &pf);
    peer = pdx_peer_get(dc.e, id);
    cr_assert_not_null(peer);
    for (uint64_t r = 5; r <= 7; r++)
        cr_assert_eq(pdx_expect(dc.e, id, r, dc.layout, &p, NULL, 1, 20000), PDX_OK);

    pdx_rooms_peer_gone(dc.e, peer);
    n = last_notify(peer, 6);
    pdx_rooms_on_notify(dc.e, peer, &n);
    cr_expect_eq(pdx_poll(dc.e, 6), PDX_ROOM_SUCCESS, "a notify counted before the reap");
    pdx_rooms_peer_fenced(dc.e, peer);
    n = last_notify(peer, 5);
    pdx_rooms_on_notify(dc.e, peer, &n);
    cr_expect_eq(pdx_poll(dc.e, 5), PDX_ROOM_SUCCESS, "a notify counted after the reap");
    cr_assert_eq(wait_done(dc.e, 7, 5000), PDX_ROOM_FAILED, "the room nothing came for");
    pdx_room_error(dc.e, 7, err, sizeof(err));
    cr_expect(strstr(err, "is gone"), "%s", err);
    usleep(100 * 1000);
    cr_expect_eq(pdx_poll(dc.e, 5), PDX_ROOM_SUCCESS, "a SUCCESS stays");
    for (uint64_t r = 5; r <= 7; r++)
        cr_expect_eq(release_wait(dc.e, r, 5000), PDX_OK, "room %llu released",
                     (unsigned long long)r);
}

/*
 * A room fed by two prefill engines: the first delivers its whole part and
 * exits; the room goes on, and ends SUCCESS with the second's part.
 */
Test(gone, a_sender_that_finished_may_leave, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 256, .npages = 16};
    uint32_t pages[1] = {3};
    pdx_pages_t p = {pages, 1};
    uint32_t p1, p2;
    pdx_wire_notify_t n;
    char err[256] = "";

    side_open(&pf, &g, NULL);
    side_open(&pf2, &g, NULL);
    side_open(&dc, &g, NULL);
    p1 = side_connect(&dc, &pf);
    p2 = side_connect(&dc, &pf2);
    cr_assert_eq(pdx_expect(dc.e, p1, 20, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    cr_assert_eq(pdx_expect(dc.e, p2, 20, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    n = last_notify(pdx_peer_get(dc.e, p1), 20);
    pdx_rooms_on_notify(dc.e, pdx_peer_get(dc.e, p1), &n); /* p1's whole part arrived */
    cr_expect_eq(pdx_poll(dc.e, 20), PDX_ROOM_TRANSFERRING);
    side_close(&pf);
    usleep(1200 * 1000); /* past every grace */
    pdx_room_error(dc.e, 20, err, sizeof(err));
    cr_expect_eq(pdx_poll(dc.e, 20), PDX_ROOM_TRANSFERRING, "p1 delivered everything: %s", err);
    n = last_notify(pdx_peer_get(dc.e, p2), 20);
    pdx_rooms_on_notify(dc.e, pdx_peer_get(dc.e, p2), &n);
    cr_expect_eq(pdx_poll(dc.e, 20), PDX_ROOM_SUCCESS);
    cr_expect_eq(release_wait(dc.e, 20, 5000), PDX_OK);
}

/*
 * pdx_expect racing its peer's loss: the peer goes (its rooms are walked)
 * after pdx_expect found it READY and before the room named it. The room
 * learns it once its metadata went out and fails "gone" within the grace,
 * not at its own deadline (20 s here).
 */
Test(gone, an_expect_that_races_the_loss_fails_soon, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 256, .npages = 16};
    uint32_t pages[1] = {3};
    pdx_pages_t p = {pages, 1};
    uint32_t id;
    char err[256] = "";

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    id = side_connect(&dc, &pf);
    pdx_rooms_peer_gone(dc.e, pdx_peer_get(dc.e, id)); /* the walk, before the room */
    cr_assert_eq(pdx_expect(dc.e, id, 40, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 40, 3000), PDX_ROOM_FAILED, "the room waited for its deadline");
    pdx_room_error(dc.e, 40, err, sizeof(err));
    cr_expect(strstr(err, "is gone"), "%s", err);
    cr_expect_eq(release_wait(dc.e, 40, 5000), PDX_OK);
}
