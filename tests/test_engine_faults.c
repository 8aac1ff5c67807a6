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
#include "engine_fixture.h"

static side_t pf, dc;
static uint32_t peer;
static const geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};

static void fini(void)
{
    if (dc.e)
        side_close(&dc);
    if (pf.e)
        side_close(&pf);
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
    expect_failed(pf.e, 70, "aborted"); /* decode aborted it on the sender */
    cr_expect_eq(release_wait(dc.e, 70, 5000), PDX_OK);
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
    pdx_wire_notify_t n = {.room = 120, .sender = 0xabc, .flags = PDX_WIRE_NOTIFY_LAST,
                           .count = 1, .status = PDX_OK};

    open_pair(NULL);
    pdx_rooms_on_notify(dc.e, NULL, &n);           /* as if it came off the wire first */
    cr_expect_eq(pdx_poll(dc.e, 120), PDX_ROOM_NONE);
    cr_assert_eq(pdx_expect(dc.e, peer, 120, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    cr_expect_eq(wait_done(dc.e, 120, 2000), PDX_ROOM_SUCCESS, "the held notify was not applied");
}

/* More senders than expected fail the room instead of counting past it. */
Test(faults, unexpected_sender_fails_the_room, .fini = fini, .timeout = 30)
{
    uint32_t pages[1] = {1};
    pdx_pages_t p = {pages, 1};
    pdx_wire_notify_t a = {.room = 130, .sender = 1, .flags = PDX_WIRE_NOTIFY_LAST, .count = 2},
                      b = {.room = 130, .sender = 2, .flags = PDX_WIRE_NOTIFY_LAST, .count = 2};

    open_pair(NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 130, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    pdx_rooms_on_notify(dc.e, NULL, &a);           /* sender 1: one of its two LAST notifies */
    pdx_rooms_on_notify(dc.e, NULL, &b);           /* sender 2 was never expected */
    expect_failed(dc.e, 130, "more senders");
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
        /* this side saw it too */
        for (uint32_t i = 0; i < PDX_MAX_PEERS; i++) {
            pdx_peer_t *p = atomic_load(&pf.e->peers[i]);

            if (p && atomic_load(&p->state) == PDX_PEER_FAILED && p->status == PDX_ERR_VERSION)
                rc = 0;
        }
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
