/*
 * Peers that come and go over an engine's life (built once per transport).
 *
 * A long-lived decode engine and a long-lived prefill engine each serve
 * PDX_TEST_PEERS sequential peers (default 300: more than the 64 peer slots,
 * and more than the 256 peers a shard's endpoint table could ever hold
 * before its slots were reused), every transfer verified byte for byte. The
 * peers leave in turn by their engine's destroy (a goodbye), by
 * pdx_peer_close on the long-lived side, and by an abrupt loss (the other
 * side drops the connection without a goodbye). Peer slots and shard
 * endpoint slots are reused, and open fds and RSS after warm-up come back
 * to where they were (both printed).
 *
 * A clean shutdown of either side, and pdx_peer_close, end the other side's
 * rooms with "peer closed" and log no warning; a new incarnation of an
 * engine (same address and listener port, a new identity) replaces the
 * peer of the old one, whose rooms fail while the new one's transfer.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctrl.h"
#include "peer.h"
#include "shard.h"
#include "engine_fixture.h"
#include "proc_usage.h"
#include "sanitized.h"
#ifdef PDX_TEST_SOFTNIC
#include <errno.h>

#include "softnic.h"
#endif
#include "log.h"

static side_t pf, dc, dc2;
static const geom_t g = {.layers = 2, .bytes_per_page = 512, .npages = 64};

static void fini(void)
{
    side_close(&dc2);
    side_close(&dc);
    side_close(&pf);
}

static uint32_t test_peers(void)
{
    const char *v = getenv("PDX_TEST_PEERS");

    return v && atoi(v) > 0 ? (uint32_t)atoi(v) : 300;
}



static pdx_stats_t stats_of(pdx_engine_t *e)
{
    pdx_stats_t st;

    cr_assert_eq(pdx_engine_stats(e, &st), PDX_OK);
    return st;
}

/* Until the engine holds `peers` peers and no handshake (its gone peers retired). */
static void wait_peers(pdx_engine_t *e, uint64_t peers)
{
    pdx_stats_t st;

    for (int i = 0; i < 10000; i++) {
        st = stats_of(e);
        if (st.peers == peers && st.handshakes == 0)
            return;
        usleep(1000);
    }
    cr_assert_fail("%llu peers and %llu handshakes, not %llu peers",
                   (unsigned long long)st.peers, (unsigned long long)st.handshakes,
                   (unsigned long long)peers);
}

/* Until the engine knows the peer is gone (a loss without a goodbye is
 * noticed when its socket closes). */
static void wait_gone(pdx_engine_t *e, uint32_t handle)
{
    for (int i = 0; i < 5000; i++) {
        pdx_peer_t *p = pdx_peer_hold(e, handle, NULL);
        bool gone = !p || atomic_load(&p->state) == PDX_PEER_FAILED || atomic_load(&p->closed);

        pdx_peer_put(p);
        if (gone)
            return;
        usleep(1000);
    }
    cr_assert_fail("peer 0x%x is still there", handle);
}

/* One verified room from prefill to decode over decode's peer handle. */
static void transfer(side_t *pre, side_t *dec, uint32_t peer, uint64_t room)
{
    uint32_t pages[6];
    unsigned seed = (unsigned)room;
    pdx_pages_t p = {pages, 6};

    pick_pages(pages, 6, g.npages, &seed);
    cr_assert_eq(pdx_expect(dec->e, peer, room, dec->layout, &p, NULL, 1, 10000), PDX_OK,
                 "room %llu", (unsigned long long)room);
    side_fill(pre, room, pages, 6, 0);
    cr_assert_eq(pdx_send(pre->e, room, pre->layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dec->e, room, 10000), PDX_ROOM_SUCCESS, "room %llu",
                 (unsigned long long)room);
    cr_assert_eq(side_check(dec, room, pages, 6, 0), 0, "room %llu", (unsigned long long)room);
    cr_assert_eq(wait_done(pre->e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(release_wait(dec->e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(pre->e, room, 5000), PDX_OK);
}

/* The one peer the engine has: the side that connected in. */
static pdx_peer_t *only_peer(pdx_engine_t *e)
{
    for (uint32_t i = 0; i < PDX_MAX_PEERS; i++) {
        pdx_peer_t *p = atomic_load(&e->peers[i]);

        if (p && atomic_load(&p->state) == PDX_PEER_READY)
            return p;
    }
    cr_assert_fail("no READY peer");
    return NULL;
}

/* The most endpoint slots any shard of the engine ever used. */
static uint32_t dep_high_water(pdx_engine_t *e)
{
    uint32_t most = 0;

    for (uint32_t i = 0; i < e->nshards; i++)
        most = PDX_MAX(most, atomic_load(&e->shards[i].ndeps));
    return most;
}

typedef struct churn {
    uint32_t handles[PDX_MAX_PEERS]; /* the last handle seen in each slot */
    uint32_t reused;                 /* handles given to a slot used before */
    long     rss0;
    int      fds0;
} churn_t;

static void note_handle(churn_t *c, uint32_t handle)
{
    uint32_t slot = handle & ((1u << PDX_PEER_SLOT_BITS) - 1);

    cr_assert_lt(slot, PDX_MAX_PEERS);
    if (c->handles[slot]) {
        cr_assert_neq(c->handles[slot], handle, "a slot's new peer has a new handle");
        c->reused++;
    }
    c->handles[slot] = handle;
}

static void report(const char *who, churn_t *c, pdx_engine_t *e, uint32_t n)
{
    long rss1 = proc_rss_kib();
    int fds1 = proc_open_fds();
    pdx_stats_t st = stats_of(e);

    printf("%s engine, %u peers (%s): RSS %ld KiB after warm-up, %ld KiB at the end "
           "(%+ld KiB); open fds %d and %d; %llu peers retired; %u handles reused a slot; "
           "shard endpoint slots used at most %u\n", who, n, PDX_TEST_TRANSPORT, c->rss0, rss1,
           rss1 - c->rss0, c->fds0, fds1, (unsigned long long)st.peers_retired, c->reused,
           dep_high_water(e));
    cr_expect_eq(fds1, c->fds0, "open fds after warm-up and at the end");
#if !SANITIZED
    /* A gone peer used to keep ~0.7 MB: hundreds of them would show. (A
     * sanitizer's allocator keeps what is freed: there LeakSanitizer, or
     * ThreadSanitizer's run without it, speaks for the memory instead.) */
    cr_expect_lt(rss1 - c->rss0, 32 * 1024, "RSS grew by %ld KiB", rss1 - c->rss0);
#endif
    cr_expect_eq(st.peers_retired, n);
    cr_expect_geq(c->reused, n - PDX_MAX_PEERS);
    cr_expect_leq(dep_high_water(e), 64u, "shard endpoint slots are reused");
}

/*
 * The decode engine dials each new prefill engine; peer i leaves by the
 * prefill engine's destroy (i % 3 == 0), by pdx_peer_close from decode
 * (1), or by prefill dropping it without a goodbye (2).
 */
Test(peers, a_decode_engine_outlives_its_peers, .fini = fini, .timeout = 900)
{
    uint32_t n = test_peers(), warm = PDX_MIN(50u, n / 4);
    churn_t c = {0};

    side_open(&dc, &g, NULL);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t peer;

        if (i == warm) {
            wait_peers(dc.e, 0);
            c.rss0 = proc_rss_kib();
            c.fds0 = proc_open_fds();
        }
        side_open(&pf, &g, NULL);
        peer = side_connect(&dc, &pf);
        note_handle(&c, peer);
        transfer(&pf, &dc, peer, 1000 + i);
        if (i % 3 == 1) {
            cr_assert_eq(pdx_peer_close(dc.e, peer), PDX_OK);
        } else if (i % 3 == 2) {
            pdx_peer_t *p = only_peer(pf.e);

            pdx_peer_fail(p, PDX_ERR_PEER, "dropped by the test");
        }
        side_close(&pf);
        wait_gone(dc.e, peer);
        cr_expect_eq(pdx_expect(dc.e, peer, 5, dc.layout, &(pdx_pages_t){(uint32_t[]){1}, 1},
                                NULL, 1, 1000), PDX_ERR_PEER, "a gone peer's handle");
    }
    wait_peers(dc.e, 0);
    report("decode", &c, dc.e, n);
}

/*
 * The prefill engine is dialled by each new decode engine; peer i leaves
 * by the decode engine's destroy (i % 3 == 0), by pdx_peer_close from
 * prefill (1), or by decode dropping it without a goodbye (2).
 */
Test(peers, a_prefill_engine_outlives_its_peers, .fini = fini, .timeout = 900)
{
    uint32_t n = test_peers(), warm = PDX_MIN(50u, n / 4);
    churn_t c = {0};

    side_open(&pf, &g, NULL);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t peer, mine;

        if (i == warm) {
            wait_peers(pf.e, 0);
            c.rss0 = proc_rss_kib();
            c.fds0 = proc_open_fds();
        }
        side_open(&dc, &g, NULL);
        peer = side_connect(&dc, &pf);
        cr_assert_eq(pdx_peer_accept(pf.e, 5000, &mine), PDX_OK);
        note_handle(&c, mine);
        transfer(&pf, &dc, peer, 5000 + i);
        if (i % 3 == 1)
            cr_assert_eq(pdx_peer_close(pf.e, mine), PDX_OK);
        else if (i % 3 == 2)
            pdx_peer_fail(pdx_peer_get(dc.e, peer), PDX_ERR_PEER, "dropped by the test");
        side_close(&dc);
    }
    wait_peers(pf.e, 0);
    report("prefill", &c, pf.e, n);
}

/* The room failed, and why says "peer closed". */
static void expect_closed(pdx_engine_t *e, uint64_t room)
{
    char err[256] = "";

    cr_assert_eq(wait_done(e, room, 5000), PDX_ROOM_FAILED, "room %llu",
                 (unsigned long long)room);
    cr_assert_eq(pdx_room_error(e, room, err, sizeof(err)), PDX_OK);
    cr_expect(strstr(err, "peer closed"), "room %llu: %s", (unsigned long long)room, err);
    cr_expect_eq(release_wait(e, room, 5000), PDX_OK);
}

/* Prefill queues `room` behind a gate that stays closed, once its metadata came. */
static void send_held(uint64_t room, const volatile uint64_t *word)
{
    static uint32_t page[1] = {7};
    pdx_pages_t p = {page, 1};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = word, .value = 1};

    for (int i = 0; i < 5000 && pdx_poll(pf.e, room) != PDX_ROOM_WAITING; i++)
        usleep(1000);
    cr_assert_eq(pdx_poll(pf.e, room), PDX_ROOM_WAITING, "the ROOM message reached prefill");
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
}

Test(peers, a_clean_shutdown_ends_the_other_sides_rooms, .fini = fini, .timeout = 60)
{
    static volatile uint64_t word;
    uint32_t page[1] = {7}, peer;
    pdx_pages_t p = {page, 1};
    uint64_t warnings = pdx_log_warn_count();

    /* Prefill goes: decode's rooms that wait for it end "peer closed". */
    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
    for (uint64_t r = 1; r <= 3; r++)
        cr_assert_eq(pdx_expect(dc.e, peer, r, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    transfer(&pf, &dc, peer, 4);
    side_close(&pf);
    for (uint64_t r = 1; r <= 3; r++)
        expect_closed(dc.e, r);

    /* Decode goes: prefill's room held at its gate ends "peer closed". */
    side_open(&pf, &g, NULL);
    peer = side_connect(&dc, &pf);
    cr_assert_eq(pdx_expect(dc.e, peer, 10, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    send_held(10, &word);
    side_close(&dc);
    expect_closed(pf.e, 10);

    /* pdx_peer_close: the rooms of both sides end "peer closed". */
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
    cr_assert_eq(pdx_expect(dc.e, peer, 20, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    send_held(20, &word);
    cr_assert_eq(pdx_peer_close(dc.e, peer), PDX_OK);
    expect_closed(dc.e, 20);
    expect_closed(pf.e, 20);
    cr_expect_eq(pdx_expect(dc.e, peer, 21, dc.layout, &p, NULL, 1, 1000), PDX_ERR_PEER);
    cr_expect_eq(pdx_peer_close(dc.e, peer), PDX_OK, "closing a closed peer");
    cr_expect_eq(pdx_peer_close(dc.e, peer + (1u << PDX_PEER_SLOT_BITS)), PDX_ERR_NOT_FOUND,
                 "a handle never given");
    cr_expect_eq(pdx_expect(dc.e, peer + (1u << PDX_PEER_SLOT_BITS), 22, dc.layout, &p, NULL, 1,
                            1000), PDX_ERR_NOT_FOUND);
    wait_peers(dc.e, 0);
    wait_peers(pf.e, 0);
    side_close(&dc);
    side_close(&pf);
    cr_expect_eq(pdx_log_warn_count(), warnings, "warnings logged by clean shutdowns");
}

Test(peers, a_new_incarnation_replaces_the_old_peer, .fini = fini, .timeout = 60)
{
    static volatile uint64_t word;
    uint32_t page[1] = {7}, peer, peer2;
    pdx_pages_t p = {page, 1};
    char listen[64], err[256] = "";
    const char *cfg[] = {listen, NULL};

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
    peer = side_connect(&dc, &pf);
    transfer(&pf, &dc, peer, 29);
    cr_assert_eq(pdx_expect(dc.e, peer, 30, dc.layout, &p, NULL, 1, 20000), PDX_OK);
    send_held(30, &word); /* prefill's app holds the room: it stays to be released */
    /* The old incarnation stops answering without closing anything (as a
     * host that lost power): its connections stay open, its port is free. */
    pdx_ctrl_stop(dc.e);
    snprintf(listen, sizeof(listen), "PDX_LISTEN=127.0.0.1:%u", dc.e->port);
    side_open(&dc2, &g, cfg);
    cr_assert_eq(dc2.e->port, dc.e->port);
    peer2 = side_connect(&dc2, &pf);
    cr_assert_eq(wait_done(pf.e, 30, 5000), PDX_ROOM_FAILED, "the old incarnation's room");
    pdx_room_error(pf.e, 30, err, sizeof(err));
    cr_expect(strstr(err, "replaced by a new incarnation"), "%s", err);
    cr_expect_eq(release_wait(pf.e, 30, 5000), PDX_OK);
    transfer(&pf, &dc2, peer2, 31);
    wait_peers(pf.e, 1);
    side_close(&dc);
    side_close(&dc2);
    side_close(&pf);
}

#ifdef PDX_TEST_SOFTNIC
/*
 * Creating a data endpoint fails (the device refuses a QP) for every other
 * new peer, after earlier peers left their endpoint slots free: each slot
 * taken for the failed endpoint goes back, so the shards' tables stay as
 * small as the peers they hold.
 */
Test(peers, a_failed_endpoint_gives_its_slot_back, .fini = fini, .timeout = 120)
{
    uint32_t peer;

    side_open(&dc, &g, NULL);
    for (uint32_t i = 0; i < 120; i++) {
        side_open(&pf, &g, NULL);
        if (i % 2) {
            softnic_fault_call(SOFTNIC_CALL_CREATE_QP, 1, ENOMEM);
            cr_expect_neq(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer), PDX_OK,
                          "a connect whose first QP the device refused");
        }
        peer = side_connect(&dc, &pf);
        transfer(&pf, &dc, peer, 7000 + i);
        side_close(&pf);
    }
    wait_peers(dc.e, 0);
    cr_expect_leq(dep_high_water(dc.e), 16u, "%u endpoint slots used: failed adds leaked theirs",
                  dep_high_water(dc.e));
}
#endif
