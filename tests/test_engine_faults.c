/*
 * The engine under faults: every deadline fails its room and the shard
 * keeps serving; a peer closed mid-transfer fails rooms on both sides; a
 * protocol version mismatch; out-of-range pages fail only their room.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine.h"
#include "dep.h"
#include "peer.h"
#include "rooms.h"
#include "engine_fixture.h"

static side_t pf, dc, pf2;
static uint32_t peer;
static const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
    side_close(&pf2);
}

static void open_pair(const char *const *cfg)
{
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    peer = side_connect(&dc, &pf);
}

static void expect_failed(pdx_engine_t *e, uint64_t room, const char *needle)
{
    char err[256] = "";

    cr_assert_eq(wait_done(e, room, 5000), PDX_ROOM_FAILED, "room %llu did not fail",
                 (unsigned long long)room);
    cr_assert_eq(pdx_room_error(e, room, err, sizeof(err)), PDX_OK);
    cr_expect(strstr(err, needle) != NULL, "room %llu: \"%s\" lacks \"%s\"",
              (unsigned long long)room, err, needle);
}

/* A room that completes: the engines still serve after a failure. */
static void expect_a_good_room(uint64_t room)
{
    uint32_t pages[3] = {20, 21, 40};
    pdx_pages_t p = {pages, 3};

    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, room, pages, 3, 0);
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, room, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, room, pages, 3, 0), 0);
}

Test(faults, bootstrap_deadline, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_BOOTSTRAP_TIMEOUT_MS=200", "PDX_SHARDS=1", NULL};
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};

    open_pair(cfg);
    cr_assert_eq(pdx_send(pf.e, 50, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    expect_failed(pf.e, 50, "PDX_BOOTSTRAP_TIMEOUT_MS");
    expect_a_good_room(51);
}

/* An idle engine's control thread naps until the next heartbeat; a room
 * made then wakes it, so its deadline is kept to the tick, not the nap. */
Test(faults, deadlines_after_an_idle_nap, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_BOOTSTRAP_TIMEOUT_MS=200", "PDX_HEARTBEAT_MS=5000",
                                      "PDX_SHARDS=1", NULL};
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};
    uint64_t t0;

    open_pair(cfg);
    for (int i = 0; i < 3000 && !(atomic_load(&pf.e->ctrl_napping) &&
                                  atomic_load(&dc.e->ctrl_napping)); i++)
        usleep(1000);
    cr_assert(atomic_load(&pf.e->ctrl_napping) && atomic_load(&dc.e->ctrl_napping),
              "an idle engine's control thread still ticks");
    t0 = pdx_now_ns();
    cr_assert_eq(pdx_send(pf.e, 80, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    expect_failed(pf.e, 80, "PDX_BOOTSTRAP_TIMEOUT_MS");
    cr_expect_lt(pdx_now_ns() - t0, 2500000000ull, "the deadline waited for the nap: %llu ms",
                 (unsigned long long)((pdx_now_ns() - t0) / 1000000u));
    cr_assert_eq(release_wait(pf.e, 80, 5000), PDX_OK);
    for (int i = 0; i < 3000 && !atomic_load(&dc.e->ctrl_napping); i++)
        usleep(1000);
    cr_assert(atomic_load(&dc.e->ctrl_napping));
    t0 = pdx_now_ns();
    cr_assert_eq(pdx_expect(dc.e, peer, 81, dc.layout, &p, NULL, 1, 200), PDX_OK);
    expect_failed(dc.e, 81, "deadline");
    cr_expect_lt(pdx_now_ns() - t0, 2500000000ull, "the deadline waited for the nap");
    expect_a_good_room(82);
}

Test(faults, transfer_deadline, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_TRANSFER_TIMEOUT_MS=300", "PDX_SHARDS=1", NULL};
    static volatile uint64_t never;
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &never, .value = 1};

    open_pair(cfg);
    cr_assert_eq(pdx_expect(dc.e, peer, 60, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 60, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    expect_failed(pf.e, 60, "PDX_TRANSFER_TIMEOUT_MS");
    expect_failed(dc.e, 60, "PDX_TRANSFER_TIMEOUT_MS"); /* told by prefill */
    expect_a_good_room(61);
}

Test(faults, expect_deadline, .fini = fini, .timeout = 30)
{
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 70, dc.layout, &p, NULL, 1, 200), PDX_OK);
    expect_failed(dc.e, 70, "deadline");
    cr_expect_eq(release_wait(dc.e, 70, 5000), PDX_OK);
    /* decode aborted it on the sender, which drops a room only decode's
     * metadata made once it is failed */
    for (int i = 0; i < 5000 && pdx_poll(pf.e, 70) != PDX_ROOM_NONE; i++)
        usleep(1000);
    cr_expect_eq(pdx_poll(pf.e, 70), PDX_ROOM_NONE);
    expect_a_good_room(71);
}

Test(faults, out_of_range_source_pages_fail_only_their_room, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", NULL};
    uint32_t bad[2] = {1, 64}, dst[2] = {1, 2};
    pdx_pages_t b = {bad, 2}, d = {dst, 2};

    open_pair(cfg);
    cr_assert_eq(pdx_expect(dc.e, peer, 80, dc.layout, &d, NULL, 1, 5000), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 80, pf.layout, &b, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    expect_failed(pf.e, 80, "out of range");
    expect_failed(dc.e, 80, "out of range");
    expect_a_good_room(81);
}

Test(faults, more_pages_than_decode_expected, .fini = fini, .timeout = 30)
{
    uint32_t src[3] = {1, 2, 3}, dst[2] = {1, 2};
    pdx_pages_t s = {src, 3}, d = {dst, 2};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 85, dc.layout, &d, NULL, 1, 5000), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 85, pf.layout, &s, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, 85, 5000), PDX_ROOM_FAILED);
    cr_assert_eq(wait_done(dc.e, 85, 5000), PDX_ROOM_FAILED);
    expect_a_good_room(86);
}

/* The decode engine goes away mid-transfer: prefill's room fails. */
Test(faults, decode_closed_mid_transfer, .fini = fini, .timeout = 30)
{
    static volatile uint64_t word;
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 90, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 90, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    usleep(20000);
    side_close(&dc);
    expect_failed(pf.e, 90, "gone");
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    cr_expect_eq(release_wait(pf.e, 90, 5000), PDX_OK);
}

/* The prefill engine goes away mid-transfer: decode's room fails. */
Test(faults, prefill_closed_mid_transfer, .fini = fini, .timeout = 30)
{
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 95, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    usleep(20000);
    side_close(&pf);
    expect_failed(dc.e, 95, "gone");
    cr_expect_eq(release_wait(dc.e, 95, 5000), PDX_OK, "a gone sender cannot write");
}

/* A notify that arrives before its room's pdx_expect is held, then applied. */
Test(faults, notify_before_expect_is_held, .fini = fini, .timeout = 30)
{
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};
    pdx_peer_t *from;
    pdx_wire_notify_t n = {.room = 120, .flags = PDX_WIRE_NOTIFY_LAST, .count = 1,
                           .status = PDX_OK};

    open_pair(NULL);
    from = pdx_peer_get(dc.e, peer);       /* the prefill side, as decode sees it */
    cr_assert_not_null(from);
    n.sender = from->remote_id;
    pdx_rooms_on_notify(dc.e, from, &n);   /* as if it came off the wire first */
    cr_expect_eq(pdx_poll(dc.e, 120), PDX_ROOM_NONE);
    cr_assert_eq(pdx_expect(dc.e, peer, 120, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    cr_expect_eq(wait_done(dc.e, 120, 2000), PDX_ROOM_SUCCESS, "the held notify was not applied");
}

/* A notify counts only from one of the room's peers, under that peer's own
 * sender id: others are ignored, not counted. */
Test(faults, notify_from_a_stranger_is_ignored, .fini = fini, .timeout = 30)
{
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};
    pdx_peer_t *from, *other;
    uint32_t peer_b;
    pdx_wire_notify_t n = {.room = 130, .flags = PDX_WIRE_NOTIFY_LAST, .count = 1,
                           .status = PDX_OK};

    open_pair(NULL);
    side_open(&pf2, &g, NULL);
    peer_b = side_connect(&dc, &pf2);
    from = pdx_peer_get(dc.e, peer);
    other = pdx_peer_get(dc.e, peer_b);
    cr_assert(from && other);
    cr_assert_eq(pdx_expect(dc.e, peer, 130, dc.layout, &p, NULL, 1, 5000), PDX_OK);

    n.sender = from->remote_id ^ 1;        /* the right peer, another sender's id */
    pdx_rooms_on_notify(dc.e, from, &n);
    n.sender = other->remote_id;           /* a real peer the room does not name */
    pdx_rooms_on_notify(dc.e, other, &n);
    n.status = PDX_ERR_IO;                 /* not even a failure counts from it */
    pdx_rooms_on_notify(dc.e, other, &n);
    cr_expect_eq(pdx_poll(dc.e, 130), PDX_ROOM_WAITING, "a stranger's notify was counted");

    n.status = PDX_OK;
    n.sender = from->remote_id;
    pdx_rooms_on_notify(dc.e, from, &n);
    cr_expect_eq(wait_done(dc.e, 130, 2000), PDX_ROOM_SUCCESS);
}

/* An ERROR or ABORT_ACK from a peer that is not the room's changes nothing. */
Test(faults, messages_from_a_stranger_are_ignored, .fini = fini, .timeout = 30)
{
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};
    pdx_wire_error_t err = {.room = 140, .status = PDX_ERR_IO, .message = "not yours"};
    pdx_peer_t *other;
    uint32_t peer_b;

    open_pair(NULL);
    side_open(&pf2, &g, NULL);
    peer_b = side_connect(&dc, &pf2);
    other = pdx_peer_get(dc.e, peer_b);
    cr_assert_eq(pdx_expect(dc.e, peer, 140, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    pdx_rooms_on_error(dc.e, other, &err);
    cr_expect_eq(pdx_poll(dc.e, 140), PDX_ROOM_WAITING, "a stranger's error failed the room");
    cr_assert_eq(pdx_abort(dc.e, 140), PDX_OK);
    pdx_rooms_on_abort_ack(dc.e, other, 140);
    /* the real sender's ABORT_ACK still fences it */
    cr_expect_eq(release_wait(dc.e, 140, 5000), PDX_OK);
}

/*
 * Prefill releases an aborted room as soon as it sees it FAILED, before a
 * sweep could answer the abort: the ABORT_ACK still goes out, so decode's
 * release completes.
 */
Test(faults, abort_ack_survives_an_early_release, .fini = fini, .timeout = 30)
{
    static volatile uint64_t never;
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &never, .value = 1};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 150, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 150, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    usleep(20000);
    cr_assert_eq(pdx_abort(dc.e, 150), PDX_OK);
    cr_assert_eq(wait_done(pf.e, 150, 5000), PDX_ROOM_FAILED);
    cr_expect_eq(release_wait(pf.e, 150, 5000), PDX_OK);
    cr_expect_eq(release_wait(dc.e, 150, 5000), PDX_OK, "decode never got its ABORT_ACK");
    expect_a_good_room(151);
}

/* A room pins its aux regions: they cannot be deregistered until release. */
Test(faults, aux_regions_are_pinned_until_release, .fini = fini, .timeout = 30)
{
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_region_t daux = {.mem = 0, .offset = 0, .len = 64}, saux = {.mem = 0, .offset = 0,
                                                                   .len = 64};

    open_pair(NULL);
    daux.mem = dc.aux_mem;
    saux.mem = pf.aux_mem;
    cr_assert_eq(pdx_expect(dc.e, peer, 160, dc.layout, &p, &daux, 1, 5000), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(dc.e, dc.aux_mem), PDX_ERR_STATE);
    side_fill(&pf, 160, pages, 2, 0);
    cr_assert_eq(pdx_send(pf.e, 160, pf.layout, &p, NULL, &saux, PDX_SEND_LAST), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(pf.e, pf.aux_mem), PDX_ERR_STATE);
    cr_assert_eq(wait_done(dc.e, 160, 5000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(pf.e, 160, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(release_wait(dc.e, 160, 5000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, 160, 5000), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(dc.e, dc.aux_mem), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(pf.e, pf.aux_mem), PDX_OK);
}

/*
 * Rooms that only decode's metadata made on the prefill side, never sent
 * for there, fail and leave the table by themselves: the table does not fill.
 */
Test(faults, prefill_table_does_not_keep_rooms_it_never_used, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_ROOMS=16", NULL};
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};

    open_pair(cfg);
    for (uint64_t r = 0; r < 16; r++)
        cr_assert_eq(pdx_expect(dc.e, peer, 200 + r, dc.layout, &p, NULL, 1, 150), PDX_OK);
    for (uint64_t r = 0; r < 16; r++) {
        cr_assert_eq(wait_done(dc.e, 200 + r, 5000), PDX_ROOM_FAILED);
        cr_assert_eq(release_wait(dc.e, 200 + r, 5000), PDX_OK, "room %llu",
                     (unsigned long long)(200 + r));
    }
    for (uint64_t r = 0; r < 16; r++)
        for (int i = 0; i < 5000 && pdx_poll(pf.e, 200 + r) != PDX_ROOM_NONE; i++)
            usleep(1000);
    cr_expect_eq(pdx_send(pf.e, 300, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK,
                 "the prefill table filled with rooms nobody there will release");
}

/* No pdx_send on the prefill side within decode's timeout: prefill's own
 * room fails too (and leaves the table), not only decode's. */
Test(faults, room_never_sent_fails_on_prefill, .fini = fini, .timeout = 30)
{
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 170, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    /* decode's deadline is 10 s; the ROOM says 10 s: lower prefill's to now */
    for (int i = 0; i < 5000 && pdx_poll(pf.e, 170) != PDX_ROOM_WAITING; i++)
        usleep(1000);
    cr_assert_eq(pdx_poll(pf.e, 170), PDX_ROOM_WAITING);
    {
        pdx_room_obj_t *obj = pdx_room_lookup(&pf.e->rooms, 170);

        cr_assert_not_null(obj);
        atomic_store(&pdx_room_ext(pf.e, obj)->deadline_ns, pdx_now_ns());
    }
    expect_failed(dc.e, 170, "no pdx_send");  /* told by prefill */
    cr_expect_eq(release_wait(dc.e, 170, 5000), PDX_OK);
    for (int i = 0; i < 5000 && pdx_poll(pf.e, 170) != PDX_ROOM_NONE; i++)
        usleep(1000);
    cr_expect_eq(pdx_poll(pf.e, 170), PDX_ROOM_NONE, "prefill kept a room it never used");
}

/*
 * A peer of another protocol version: PDX_ERR_VERSION on both sides. The
 * other side runs in a child process (the version is per process).
 */
Test(faults, version_mismatch, .timeout = 30)
{
    int to_parent[2], to_child[2];
    char addr[PDX_NAME_MAX] = "";
    uint32_t x;
    pid_t pid;
    int status;

    cr_assert_eq(pipe(to_parent), 0);
    cr_assert_eq(pipe(to_child), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        char c;
        int rc = 1;

        pdx_protocol_version = PDX_PROTOCOL_VERSION + 1;
        side_open(&pf, &g, NULL);
        if (write(to_parent[1], pdx_engine_address(pf.e), PDX_NAME_MAX) != PDX_NAME_MAX)
            _exit(2);
        if (read(to_child[0], &c, 1) != 1)
            _exit(3);
        /* this side saw it too: the connection never became a peer */
        if (atomic_load(&pf.e->last_refusal) == PDX_ERR_VERSION)
            rc = 0;
        side_close(&pf);
        _exit(rc);
    }
    cr_assert_eq(read(to_parent[0], addr, PDX_NAME_MAX), PDX_NAME_MAX);
    side_open(&dc, &g, NULL);
    cr_expect_eq(pdx_peer_connect(dc.e, addr, 5000, &x), PDX_ERR_VERSION);
    usleep(100000);
    cr_assert_eq(write(to_child[1], "x", 1), 1);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the other side did not see PDX_ERR_VERSION (status %d)", status);
    side_close(&dc);
}

/* Prefill's data endpoint `index` to its first peer, once that peer is READY
 * there too (decode's connect returns when decode has prefill's READY). */
static pdx_dep_t *prefill_dep(uint32_t index)
{
    pdx_peer_t *p = atomic_load(&pf.e->peers[0]);

    cr_assert_not_null(p);
    for (int i = 0; i < 5000 && atomic_load(&p->state) != PDX_PEER_READY; i++)
        usleep(1000);
    cr_assert_eq(atomic_load(&p->state), PDX_PEER_READY);
    cr_assert_lt(index, p->npairs * p->qps);
    return &p->deps[index];
}

/* The endpoint to error, as a NIC does (under the dep's lock, as the engine
 * does: a shard replaces the ep of a dep being reset). */
static void fail_endpoint(pdx_engine_t *e, pdx_dep_t *dep, const char *why)
{
    pthread_mutex_lock(&dep->lock);
    e->ops->ep_fail(dep->ep, PDX_ERR_IO, why);
    pthread_mutex_unlock(&dep->lock);
}

static void wait_reconnected(pdx_dep_t *dep, uint32_t epoch)
{
    for (int i = 0; i < 5000; i++) {
        if (atomic_load(&dep->epoch) >= epoch && atomic_load(&dep->connected) &&
            !atomic_load(&dep->reset))
            return;
        usleep(1000);
    }
    cr_assert_fail("endpoint %u.%u not reconnected at epoch %u (now %u)", dep->pair, dep->index,
                   epoch, atomic_load(&dep->epoch));
}

/*
 * One data endpoint goes to error (as a NIC does on a fatal error): a room
 * that was sending over it fails on both sides, the endpoint is reset and
 * reconnected on both sides, and the same peer carries new rooms; rooms
 * queued meanwhile wait for it and succeed.
 */
Test(faults, failed_endpoint_is_reset_and_reconnected, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", "PDX_QPS_PER_PEER=2", NULL};
    static volatile uint64_t word;
    uint32_t pages[4] = {1, 2, 3, 4}, later[2] = {10, 11};
    pdx_pages_t p = {pages, 4}, l = {later, 2};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};
    pdx_dep_t *dep;

    open_pair(cfg);
    dep = prefill_dep(1);
    /* Idle endpoint to error: its flushed receives tell the engine. */
    fail_endpoint(pf.e, dep, "injected fault");
    wait_reconnected(dep, 1);
    expect_a_good_room(130);

    /* Again, with a room queued behind a closed gate meanwhile. */
    cr_assert_eq(pdx_expect(dc.e, peer, 131, dc.layout, &l, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 131, later, 2, 0);
    cr_assert_eq(pdx_send(pf.e, 131, pf.layout, &l, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    fail_endpoint(pf.e, dep, "injected fault");
    wait_reconnected(dep, 2);
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    cr_assert_eq(wait_done(dc.e, 131, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 131, later, 2, 0), 0);

    /* The decode side's endpoint fails: prefill is told and resets too. */
    cr_assert_eq(pdx_expect(dc.e, peer, 132, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 132, pages, 4, 0);
    {
        pdx_peer_t *dp = pdx_peer_get(dc.e, peer);

        fail_endpoint(dc.e, &dp->deps[0], "injected fault on decode");
        wait_reconnected(dep, 2);
        for (int i = 0; i < 5000 && atomic_load(&dp->deps[0].epoch) < 1; i++)
            usleep(1000);
        wait_reconnected(&dp->deps[0], 1);
    }
    cr_assert_eq(pdx_send(pf.e, 132, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 132, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 132, pages, 4, 0), 0);
    cr_expect_eq(atomic_load(&atomic_load(&pf.e->peers[0])->state), PDX_PEER_READY,
                 "the peer failed instead of the endpoint");
}
