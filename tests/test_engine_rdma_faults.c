/*
 * The engine over rdma under NIC faults, injected by softnic: an error
 * completion in the middle of a transfer, a lost ACK after the data and the
 * notify were placed, a decode NIC whose port goes down while another decode
 * peer of the same prefill shard keeps moving. In every case each room ends
 * SUCCESS or FAILED within its deadline on both sides, a SUCCESS is never
 * turned into FAILED later, every room can be released (no WR is left
 * unaccounted for), nothing is written outside a registered region, and the
 * failed QP is reset and reconnected: the same peer carries new rooms.
 * Also over rdma only: the flush read before decode's SUCCESS.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "shard.h"
#include "engine_fixture.h"
#include "softnic.h"

static side_t pf, dc, dc2;
static uint32_t peer, peer2;

static void fini(void)
{
    softnic_config_t c;

    side_close(&dc2);
    side_close(&dc);
    side_close(&pf);
    softnic_faults_clear();
    softnic_config_default(&c);
    softnic_configure(&c);
}

static void nic_setup(uint32_t devices)
{
    softnic_config_t c;

    softnic_config_default(&c);
    c.devices = devices;
    cr_assert_eq(softnic_configure(&c), 0);
    softnic_stats_reset();
}

/* Rooms first..first+n-1 of `pages` random pages each, sent in two chunks. */
static void start_rooms(side_t *d, uint32_t p, uint64_t first, uint32_t n, uint32_t pages,
                        uint32_t *dst)
{
    uint32_t *src = malloc(n * pages * sizeof(*src));
    unsigned seed = (unsigned)first;

    pick_pages(src, n * pages, pf.g.npages, &seed);
    pick_pages(dst, n * pages, d->g.npages, &seed);
    for (uint32_t r = 0; r < n; r++) {
        pdx_pages_t dl = {dst + r * pages, pages};

        cr_assert_eq(pdx_expect(d->e, p, first + r, d->layout, &dl, NULL, 1, 5000), PDX_OK);
        side_fill(&pf, first + r, src + r * pages, pages, 0);
    }
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0; c < 2; c++) {
            pdx_pages_t s = {src + r * pages + c * (pages / 2), c ? pages - pages / 2 : pages / 2};
            pdx_status_t st;

            while ((st = pdx_send(pf.e, first + r, pf.layout, &s, NULL, NULL,
                                  c ? PDX_SEND_LAST : 0)) == PDX_ERR_AGAIN)
                usleep(100);
            cr_assert_eq(st, PDX_OK);
        }
    free(src);
}

/*
 * Every room ends on both sides within the deadline; decode's SUCCESS rooms
 * hold the right bytes and stay SUCCESS; every room is released. Returns how
 * many decode rooms succeeded.
 */
static uint32_t settle_rooms(side_t *d, uint64_t first, uint32_t n, uint32_t pages,
                             const uint32_t *dst)
{
    pdx_room_state_t *state = calloc(n, sizeof(*state));
    uint32_t ok = 0;

    for (uint32_t r = 0; r < n; r++) {
        state[r] = wait_done(d->e, first + r, 10000);
        cr_assert(state[r] == PDX_ROOM_SUCCESS || state[r] == PDX_ROOM_FAILED,
                  "decode room %u still %d", r, state[r]);
        cr_assert(wait_done(pf.e, first + r, 10000) == PDX_ROOM_SUCCESS ||
                  pdx_poll(pf.e, first + r) == PDX_ROOM_FAILED, "prefill room %u not over", r);
        if (state[r] == PDX_ROOM_SUCCESS) {
            ok++;
            cr_expect_eq(side_check(d, first + r, dst + r * pages, pages, 0), 0,
                         "room %u: SUCCESS with wrong bytes", r);
        }
    }
    usleep(200000); /* late failures have had their chance */
    for (uint32_t r = 0; r < n; r++) {
        cr_expect_eq(pdx_poll(d->e, first + r), state[r], "room %u changed after its end", r);
        cr_expect_eq(release_wait(d->e, first + r, 5000), PDX_OK, "decode room %u", r);
        cr_expect_eq(release_wait(pf.e, first + r, 5000), PDX_OK, "prefill room %u", r);
    }
    free(state);
    return ok;
}

/* A room over peer p (the same connection as before the fault). */
static void expect_peer_still_works(side_t *d, uint32_t p, uint64_t room)
{
    uint32_t pages[2] = {3, 7};
    pdx_pages_t l = {pages, 2};

    cr_assert_eq(pdx_expect(d->e, p, room, d->layout, &l, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, room, pages, 2, 0);
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, &l, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(d->e, room, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(d, room, pages, 2, 0), 0);
}

static void expect_no_access_error(void)
{
    softnic_stats_t st;

    softnic_stats(&st);
    cr_expect_eq(st.access_errors, 0, "%llu remote accesses outside a region",
                 (unsigned long long)st.access_errors);
}

Test(rdma_faults, error_completion_mid_transfer, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", "PDX_SQ_DEPTH=32", "PDX_SIGNAL_EVERY=8",
                                      "PDX_TRANSFER_TIMEOUT_MS=5000", NULL};
    geom_t g = {.layers = 4, .bytes_per_page = 1024, .npages = 1024};
    uint32_t dst[16 * 64], ok;

    nic_setup(1);
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    peer = side_connect(&dc, &pf);
    softnic_fault_wr_status(0, 700, IBV_WC_REM_OP_ERR);
    start_rooms(&dc, peer, 100, 16, 64, dst);
    ok = settle_rooms(&dc, 100, 16, 64, dst);
    cr_expect_lt(ok, 16, "the fault failed no room");
    expect_no_access_error();
    expect_peer_still_works(&dc, peer, 200);
}

/*
 * Both NICs register at most 64 KiB at once, so each 2 MB pool is 32
 * registrations of its own keys, and pages of 1000 bytes straddle their
 * boundaries: random maps and a 200-page contiguous room arrive intact, cut
 * at every boundary, with no access outside a piece.
 */
Test(rdma_faults, regions_in_pieces, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_SHARDS=2", "PDX_MAX_MSG_SIZE=1048576", NULL};
    geom_t g = {.layers = 4, .bytes_per_page = 1000, .npages = 512};
    uint32_t dst[8 * 64], line[200];
    pdx_pages_t l = {line, 200};
    softnic_config_t c;

    softnic_config_default(&c);
    c.max_mr_size = 64u << 10;
    cr_assert_eq(softnic_configure(&c), 0);
    softnic_stats_reset();
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    cr_assert_eq(pf.e->mems[pf.mem].rkey[0].npieces, (4u * 1000 * 512 + 65535) / 65536);
    peer = side_connect(&dc, &pf);
    start_rooms(&dc, peer, 100, 8, 64, dst);
    cr_expect_eq(settle_rooms(&dc, 100, 8, 64, dst), 8);

    for (uint32_t i = 0; i < 200; i++)
        line[i] = 100 + i;
    cr_assert_eq(pdx_expect(dc.e, peer, 200, dc.layout, &l, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 200, line, 200, 0);
    cr_assert_eq(pdx_send(pf.e, 200, pf.layout, &l, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 200, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 200, line, 200, 0), 0);
    expect_no_access_error();
}

/*
 * The notify SEND's ACK is lost after decode placed the data and received
 * the notify: decode's SUCCESS stands, prefill's room fails with the retry
 * error when its retries run out.
 */
Test(rdma_faults, lost_ack_after_placement, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", "PDX_QPS_PER_PEER=1", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 16};
    uint32_t src[1] = {5}, dst[1] = {9};
    pdx_pages_t s = {src, 1}, d = {dst, 1};
    char err[256] = "";

    nic_setup(1);
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    peer = side_connect(&dc, &pf);
    /* two WRITEs (one per layer), then the notify */
    softnic_fault_lost_ack(0, 3, true);
    cr_assert_eq(pdx_expect(dc.e, peer, 300, dc.layout, &d, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 300, src, 1, 0);
    cr_assert_eq(pdx_send(pf.e, 300, pf.layout, &s, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 300, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 300, dst, 1, 0), 0);
    cr_assert_eq(wait_done(pf.e, 300, 5000), PDX_ROOM_FAILED);
    pdx_room_error(pf.e, 300, err, sizeof(err));
    cr_expect(strstr(err, "retry") || strstr(err, "RETRY"), "prefill's error: %s", err);
    usleep(200000);
    cr_expect_eq(pdx_poll(dc.e, 300), PDX_ROOM_SUCCESS, "decode's SUCCESS was flipped");
    cr_expect_eq(release_wait(dc.e, 300, 5000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, 300, 5000), PDX_OK);
    expect_no_access_error();
    expect_peer_still_works(&dc, peer, 301);
}

/*
 * One prefill engine feeds two decode engines on other NICs; `event` hits
 * the first decode NIC mid-transfer. Its rooms end (FAILED or, if done
 * before, SUCCESS) within their deadlines and the second decode engine's
 * rooms all succeed.
 */
static void fault_one_decode_nic(enum ibv_event_type event, uint64_t first)
{
    static const char *const pcfg[] = {"PDX_SHARDS=1", "PDX_IB_DEVICES=softnic0",
                                       "PDX_TRANSFER_TIMEOUT_MS=5000", NULL};
    static const char *const d1[] = {"PDX_SHARDS=1", "PDX_IB_DEVICES=softnic1",
                                     "PDX_TRANSFER_TIMEOUT_MS=5000", NULL};
    static const char *const d2[] = {"PDX_SHARDS=1", "PDX_IB_DEVICES=softnic2", NULL};
    geom_t g = {.layers = 4, .bytes_per_page = 1024, .npages = 1024};
    uint32_t dst1[8 * 64], dst2[8 * 64];

    nic_setup(3);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, d1);
    side_open(&dc2, &g, d2);
    peer = side_connect(&dc, &pf);
    peer2 = side_connect(&dc2, &pf);
    start_rooms(&dc, peer, first, 8, 64, dst1);
    cr_assert_eq(softnic_async(1, event), 0);
    start_rooms(&dc2, peer2, first + 100, 8, 64, dst2);
    settle_rooms(&dc, first, 8, 64, dst1);
    cr_expect_eq(settle_rooms(&dc2, first + 100, 8, 64, dst2), 8,
                 "the other peer's rooms failed");
    expect_no_access_error();
}

/* The port goes down (retries then run out); it comes back afterwards. */
Test(rdma_faults, port_down_on_one_decode_nic, .fini = fini, .timeout = 60)
{
    fault_one_decode_nic(IBV_EVENT_PORT_ERR, 400);
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
}

/* The NIC dies: no completion ever comes from it again. */
Test(rdma_faults, device_fatal_on_one_decode_nic, .fini = fini, .timeout = 60)
{
    fault_one_decode_nic(IBV_EVENT_DEVICE_FATAL, 900);
}

/* Far more WRs than the send queue holds, many rooms at once. */
Test(rdma_faults, burst_far_larger_than_the_send_queue, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_SHARDS=2", "PDX_SQ_DEPTH=8", "PDX_SIGNAL_EVERY=4",
                                      NULL};
    geom_t g = {.layers = 8, .bytes_per_page = 512, .npages = 2048};
    uint32_t dst[32 * 64];

    nic_setup(1);
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, cfg);
    peer = side_connect(&dc, &pf);
    start_rooms(&dc, peer, 600, 32, 64, dst);
    cr_expect_eq(settle_rooms(&dc, 600, 32, 64, dst), 32);
    expect_no_access_error();
}

static uint64_t flushes(const side_t *s)
{
    uint64_t n = 0;

    for (uint32_t i = 0; i < s->e->nshards; i++)
        n += atomic_load(&s->e->shards[i].stats.flushes);
    return n;
}

/*
 * PDX_FLUSH=on: decode's rooms become SUCCESS only through a flush read
 * (one covers every room whose data was in by then); off: no read.
 */
Test(rdma_faults, flush_read_before_decode_success, .fini = fini, .timeout = 60)
{
    static const char *const on[] = {"PDX_FLUSH=on", NULL};
    static const char *const off[] = {"PDX_FLUSH=off", NULL};
    geom_t g = {.layers = 4, .bytes_per_page = 1024, .npages = 512};
    uint32_t dst[8 * 32];
    uint64_t n;

    nic_setup(1);
    side_open(&pf, &g, NULL);
    side_open(&dc, &g, on);
    side_open(&dc2, &g, off);
    peer = side_connect(&dc, &pf);
    peer2 = side_connect(&dc2, &pf);
    start_rooms(&dc, peer, 700, 8, 32, dst);
    cr_expect_eq(settle_rooms(&dc, 700, 8, 32, dst), 8);
    n = flushes(&dc);
    cr_expect(n >= 1 && n <= 8, "%llu flush reads for 8 rooms", (unsigned long long)n);
    start_rooms(&dc2, peer2, 800, 8, 32, dst);
    cr_expect_eq(settle_rooms(&dc2, 800, 8, 32, dst), 8);
    cr_expect_eq(flushes(&dc2), 0, "PDX_FLUSH=off read anyway");
    expect_no_access_error();
}

/*
 * A prefill engine that exits right after both of its rooms succeeded,
 * while decode's shard is held with their last notifies in its CQ: once the
 * shard goes on, both decode rooms end SUCCESS.
 */
Test(rdma_faults, prefill_exits_right_after_success, .fini = fini, .timeout = 30)
{
    static const char *const dcfg[] = {"PDX_SHARDS=1", "PDX_FLUSH=on", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 256, .npages = 16};
    uint32_t a[2] = {1, 2}, b[2] = {5, 6};
    pdx_pages_t pa = {a, 2}, pb = {b, 2};
    char err[256];

    nic_setup(1);
    side_open(&pf, &g, NULL);
    side_open(&dc, &g, dcfg);
    peer = side_connect(&dc, &pf);
    cr_assert_eq(pdx_expect(dc.e, peer, 11, dc.layout, &pa, NULL, 1, 20000), PDX_OK);
    cr_assert_eq(pdx_expect(dc.e, peer, 12, dc.layout, &pb, NULL, 1, 20000), PDX_OK);
    side_fill(&pf, 11, a, 2, 0);
    side_fill(&pf, 12, b, 2, 0);
    /* decode's shard stops in pdx_flush_defer() of the first LAST notify */
    pthread_mutex_lock(&dc.e->shards[0].flush_lock);
    cr_assert_eq(pdx_send(pf.e, 11, pf.layout, &pa, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 12, pf.layout, &pb, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, 11, 5000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(pf.e, 12, 5000), PDX_ROOM_SUCCESS);
    side_close(&pf);
    usleep(200 * 1000); /* decode's control thread: gone, reap, fenced */
    pthread_mutex_unlock(&dc.e->shards[0].flush_lock);
    for (uint64_t r = 11; r <= 12; r++) {
        pdx_room_state_t st = wait_done(dc.e, r, 5000);

        err[0] = 0;
        pdx_room_error(dc.e, r, err, sizeof(err));
        cr_expect_eq(st, PDX_ROOM_SUCCESS, "decode room %llu: state %d: %s",
                     (unsigned long long)r, st, err);
        cr_expect_eq(side_check(&dc, r, r == 11 ? a : b, 2, 0), 0);
    }
}
