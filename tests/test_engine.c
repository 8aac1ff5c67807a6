/*
 * The engine end to end on PDX_TEST_TRANSPORT (the suite is built once per
 * transport): two engines in one process, random page maps verified byte for
 * byte.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "peer.h"
#include "rooms.h"
#include "engine_fixture.h"

static side_t pf, dc, pf2;
static uint32_t peer;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
    side_close(&pf2);
}

static void open_pair(const geom_t *g, const char *const *cfg)
{
    side_open(&pf, g, cfg);
    side_open(&dc, g, cfg);
    peer = side_connect(&dc, &pf);
}

/*
 * nrooms rooms in flight at once, each of `pages` pages sent in `chunks`
 * chunks; source and destination pages are disjoint random slices of the
 * pools.
 */
static void run_transfer(const geom_t *g, uint32_t nrooms, uint32_t pages, uint32_t chunks)
{
    uint32_t *src = malloc(g->npages * sizeof(*src)), *dst = malloc(g->npages * sizeof(*dst));
    unsigned seed = 7;

    cr_assert_leq(nrooms * pages, g->npages);
    pick_pages(src, nrooms * pages, g->npages, &seed);
    pick_pages(dst, nrooms * pages, g->npages, &seed);
    for (uint32_t r = 0; r < nrooms; r++) {
        pdx_pages_t d = {dst + r * pages, pages};

        cr_assert_eq(pdx_expect(dc.e, peer, 1000 + r, dc.layout, &d, NULL, 1, 10000), PDX_OK);
        cr_expect_eq(pdx_poll(dc.e, 1000 + r), PDX_ROOM_WAITING);
        side_fill(&pf, 1000 + r, src + r * pages, pages, 0);
    }
    for (uint32_t r = 0; r < nrooms; r++) {
        uint32_t at = 0;

        for (uint32_t c = 0; c < chunks; c++) {
            uint32_t n = c + 1 == chunks ? pages - at : pages / chunks;
            pdx_pages_t s = {src + r * pages + at, n};
            pdx_status_t st;

            while ((st = pdx_send(pf.e, 1000 + r, pf.layout, &s, NULL, NULL,
                                  c + 1 == chunks ? PDX_SEND_LAST : 0)) == PDX_ERR_AGAIN)
                usleep(100);
            cr_assert_eq(st, PDX_OK, "room %u chunk %u: %s", r, c, pdx_status_str(st));
            at += n;
        }
    }
    for (uint32_t r = 0; r < nrooms; r++) {
        char err[256] = "";

        cr_assert_eq(wait_done(dc.e, 1000 + r, 10000), PDX_ROOM_SUCCESS, "decode room %u: %s", r,
                     (pdx_room_error(dc.e, 1000 + r, err, sizeof(err)), err));
        cr_assert_eq(wait_done(pf.e, 1000 + r, 10000), PDX_ROOM_SUCCESS, "prefill room %u", r);
        cr_assert_eq(side_check(&dc, 1000 + r, dst + r * pages, pages, 0), 0,
                     "room %u: bytes differ", r);
        cr_expect_eq(release_wait(dc.e, 1000 + r, 2000), PDX_OK);
        cr_expect_eq(release_wait(pf.e, 1000 + r, 2000), PDX_OK);
        cr_expect_eq(pdx_poll(dc.e, 1000 + r), PDX_ROOM_NONE);
    }
    free(src);
    free(dst);
}

Test(engine, page_size_64_many_rooms_several_chunks, .fini = fini, .timeout = 60)
{
    geom_t g = {.layers = 4, .bytes_per_page = 576 * 64, .npages = 256};

    open_pair(&g, NULL);
    run_transfer(&g, 16, 16, 3);
}

Test(engine, page_size_1, .fini = fini, .timeout = 60)
{
    geom_t g = {.layers = 8, .bytes_per_page = 576, .npages = 4096};

    open_pair(&g, NULL);
    run_transfer(&g, 8, 512, 4);
}

Test(engine, small_writes_and_one_shard, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", "PDX_MAX_MSG_SIZE=4096",
                                      "PDX_SQ_DEPTH=16", "PDX_SIGNAL_EVERY=4", NULL};
    geom_t g = {.layers = 3, .bytes_per_page = 8192, .npages = 128};

    open_pair(&g, cfg);
    run_transfer(&g, 8, 16, 2);
}

/*
 * Room tables at the largest PDX_ROOMS on both sides (once too big to
 * create: they were committed up front) carry rooms like any other; what
 * an idle one costs is bench_idle's to say.
 */
Test(engine, the_largest_room_tables_serve_rooms, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_ROOMS=16777216", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 512, .npages = 64};

    open_pair(&g, cfg);
    run_transfer(&g, 8, 4, 2);
}

/*
 * One shard, one endpoint per peer: 4 batches of 64 rooms of 4 chunks put
 * 1,024 notifies through one endpoint, whose peer has 64 receives for them:
 * the rooms complete only if the credits come back (on the endpoint itself),
 * batch after batch.
 */
Test(engine, notify_credits_come_back_on_the_endpoint, .fini = fini, .timeout = 120)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", "PDX_QPS_PER_PEER=1", NULL};
    geom_t g = {.layers = 1, .bytes_per_page = 64, .npages = 256};
    pdx_stats_t a, b;

    open_pair(&g, cfg);
    for (int batch = 0; batch < 4; batch++)
        run_transfer(&g, 64, 4, 4);
    cr_assert_eq(pdx_engine_stats(pf.e, &a), PDX_OK);
    cr_assert_eq(pdx_engine_stats(dc.e, &b), PDX_OK);
    cr_expect_geq(a.notifies_sent, 1024);
    cr_expect_eq(b.notifies_received, a.notifies_sent, "credit records are not notifies");
}

Test(engine, aux_bytes_arrive_with_the_last_chunk, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 32};
    uint32_t pages[4] = {3, 1, 4, 5};
    pdx_pages_t p = {pages, 4};
    pdx_region_t dst_aux = {.mem = 0, .offset = 256, .len = 100};
    pdx_region_t src_aux = {.mem = 0, .offset = 1000, .len = 100};

    open_pair(&g, NULL);
    dst_aux.mem = dc.aux_mem;
    src_aux.mem = pf.aux_mem;
    for (int i = 0; i < 100; i++)
        pf.aux[1000 + i] = (uint8_t)(i * 3 + 1);
    cr_assert_eq(pdx_expect(dc.e, peer, 5, dc.layout, &p, &dst_aux, 1, 5000), PDX_OK);
    side_fill(&pf, 5, pages, 4, 0);
    cr_assert_eq(pdx_send(pf.e, 5, pf.layout, &p, NULL, &src_aux, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 5, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 5, pages, 4, 0), 0);
    cr_expect_arr_eq(dc.aux + 256, pf.aux + 1000, 100);
    cr_expect_eq(dc.aux[255], 0);
    cr_expect_eq(dc.aux[356], 0);
}

/*
 * Two prefill engines feed one decode room: A sends pages sa to da, B sends
 * sb to db (B's positions follow A's). Decode must not report SUCCESS until
 * B's last chunk, even an empty one, has come.
 */
static void two_senders(uint64_t room, const pdx_pages_t *sa, const pdx_pages_t *da,
                        const pdx_pages_t *sb, const pdx_pages_t *db)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t peer_b;

    open_pair(&g, NULL);
    side_open(&pf2, &g, NULL);
    peer_b = side_connect(&dc, &pf2);
    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, da, NULL, 1, 5000), PDX_OK);
    cr_assert_eq(pdx_expect(dc.e, peer_b, room, dc.layout, db, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, room, sa->pages, sa->npages, 0);
    if (sb->npages)
        side_fill(&pf2, room, sb->pages, sb->npages, sa->npages);
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, sa, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, room, 5000), PDX_ROOM_SUCCESS);
    usleep(50000);
    cr_expect_neq(pdx_poll(dc.e, room), PDX_ROOM_SUCCESS, "SUCCESS before the second sender");
    cr_assert_eq(pdx_send(pf2.e, room, pf2.layout, sb, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, room, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, room, da->pages, da->npages, 0), 0);
    if (db->npages)
        cr_expect_eq(side_check(&dc, room, db->pages, db->npages, sa->npages), 0);
}

Test(engine, two_senders_one_room, .fini = fini, .timeout = 30)
{
    uint32_t dst_a[3] = {10, 11, 12}, dst_b[2] = {40, 7}, src_a[3] = {1, 2, 3}, src_b[2] = {9, 8};
    pdx_pages_t da = {dst_a, 3}, db = {dst_b, 2}, sa = {src_a, 3}, sb = {src_b, 2};

    two_senders(77, &sa, &da, &sb, &db);
}

/* A sender with no pages (an MLA dummy rank) still counts: its last chunk is empty. */
Test(engine, sender_without_pages, .fini = fini, .timeout = 30)
{
    uint32_t dst[2] = {10, 20}, src[2] = {1, 2};
    pdx_pages_t d = {dst, 2}, s = {src, 2}, none = {NULL, 0};

    two_senders(66, &s, &d, &none, &none);
}

/* Chunks sent before decode's pdx_expect wait for its metadata. */
Test(engine, chunks_before_expect_wait_for_metadata, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t src[5] = {5, 6, 7, 30, 2}, dst[5] = {60, 61, 1, 2, 3};
    pdx_pages_t s = {src, 5}, d = {dst, 5};

    open_pair(&g, NULL);
    side_fill(&pf, 9, src, 5, 0);
    cr_assert_eq(pdx_send(pf.e, 9, pf.layout, &s, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    usleep(20000);
    cr_expect_eq(pdx_poll(pf.e, 9), PDX_ROOM_BOOTSTRAPPING);
    cr_assert_eq(pdx_expect(dc.e, peer, 9, dc.layout, &d, NULL, 1, 5000), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 9, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 9, dst, 5, 0), 0);
}

/* A closed gate holds its room; other rooms of the same shard complete. */
Test(engine, closed_gate_does_not_block_the_shard, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_SHARDS=1", NULL};
    static volatile uint64_t word;
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t pa[2] = {1, 2}, pb[2] = {3, 4};
    pdx_pages_t a = {pa, 2}, b = {pb, 2};
    pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &word, .value = 1};

    open_pair(&g, cfg);
    cr_assert_eq(pdx_expect(dc.e, peer, 1, dc.layout, &a, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_expect(dc.e, peer, 2, dc.layout, &b, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, 1, pa, 2, 0);
    side_fill(&pf, 2, pb, 2, 0);
    cr_assert_eq(pdx_send(pf.e, 1, pf.layout, &a, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, 2, pf.layout, &b, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 2, 5000), PDX_ROOM_SUCCESS);
    cr_expect_neq(pdx_poll(dc.e, 1), PDX_ROOM_SUCCESS);
    cr_expect_neq(pdx_poll(pf.e, 1), PDX_ROOM_SUCCESS);
    __atomic_store_n(&word, 1, __ATOMIC_RELEASE);
    cr_assert_eq(wait_done(dc.e, 1, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 1, pa, 2, 0), 0);
}

/* Rounds of one room gated by a word that opens `after_us` after pdx_send;
 * the pages are written between the send and the opening, so a chunk that
 * went before its gate would carry the stale pattern. The stats' change. */
static void gate_rounds(uint32_t rounds, unsigned after_us, pdx_stats_t *delta)
{
    static volatile uint64_t words[64];
    uint32_t pages[2] = {5, 9};
    pdx_pages_t p = {pages, 2};
    pdx_stats_t a, b;

    cr_assert_leq(rounds, 64);
    cr_assert_eq(pdx_engine_stats(pf.e, &a), PDX_OK);
    for (uint32_t r = 0; r < rounds; r++) {
        const uint64_t room = 100 + r;
        pdx_gate_t gate = {.kind = PDX_GATE_WORD, .word = &words[r], .value = 1};

        words[r] = 0;
        cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &p, NULL, 1, 10000), PDX_OK);
        side_fill(&pf, room + 1000, pages, 2, 0); /* stale */
        cr_assert_eq(pdx_send(pf.e, room, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
        side_fill(&pf, room, pages, 2, 0);
        usleep(after_us);
        __atomic_store_n(&words[r], 1, __ATOMIC_RELEASE);
        cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS, "round %u", r);
        cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS, "round %u", r);
        cr_assert_eq(side_check(&dc, room, pages, 2, 0), 0, "round %u: stale bytes", r);
        cr_assert_eq(release_wait(dc.e, room, 5000), PDX_OK);
        cr_assert_eq(release_wait(pf.e, room, 5000), PDX_OK);
    }
    cr_assert_eq(pdx_engine_stats(pf.e, &b), PDX_OK);
    delta->worker_wakeups = b.worker_wakeups - a.worker_wakeups;
    delta->gates_waited = b.gates_waited - a.gates_waited;
    delta->gates_foreseen = b.gates_foreseen - a.gates_foreseen;
}

/* PDX_GATE_SPIN_US: gates that open at the age the ones before opened are
 * found open by a poll made without sleeping (gates_foreseen), never before
 * they open, and the shard wakes less often; with 0 every poll follows a
 * sleep. Wide windows and 5 ms openings keep it independent of the
 * machine's load. */
Test(engine, gates_opening_as_before_are_polled_without_sleeping, .fini = fini, .timeout = 60)
{
    static const char *const learn[] = {"PDX_SHARDS=1", "PDX_GATE_BACKOFF_US=500",
                                        "PDX_GATE_SPIN_US=4000", NULL};
    static const char *const none[] = {"PDX_SHARDS=1", "PDX_GATE_BACKOFF_US=500",
                                       "PDX_GATE_SPIN_US=0", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 16};
    pdx_stats_t d;
    double none_wakes;

    open_pair(&g, none);
    gate_rounds(8, 5000, &d);
    none_wakes = (double)d.worker_wakeups / 8;
    cr_expect_geq(d.gates_waited, 4, "%llu of 8 gates found closed",
                  (unsigned long long)d.gates_waited);
    cr_expect_eq(d.gates_foreseen, 0, "PDX_GATE_SPIN_US=0 polled a gate without sleeping");
    fini();
    open_pair(&g, learn);
    gate_rounds(16, 5000, &d);
    /* a loaded machine may first poll a gate after it opened, or wake late */
    cr_expect_geq(d.gates_waited, 8, "%llu of 16 gates found closed",
                  (unsigned long long)d.gates_waited);
    cr_expect_geq(d.gates_foreseen, 4, "%llu of %llu gates that opened after 5 ms as the ones "
                  "before were foreseen", (unsigned long long)d.gates_foreseen,
                  (unsigned long long)d.gates_waited);
    /* sleeps of 0.5 ms poll 10 a gate; polling through the window none */
    cr_expect_lt((double)d.worker_wakeups / 16, none_wakes * 0.75, "%.1f wake-ups a gate "
                 "foreseen, %.1f a gate not", (double)d.worker_wakeups / 16, none_wakes);
}

/*
 * A failed decode room stays INPROGRESS until its sender confirms that
 * nothing more of it can land (ABORT_ACK); then OK. The room is failed
 * without telling the sender, so no ABORT_ACK comes until the test sends one.
 */
Test(engine, release_is_in_progress_until_fenced, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_room_obj_t *obj;

    open_pair(&g, NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 3, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    obj = pdx_room_lookup(&dc.e->rooms, 3);
    cr_assert_not_null(obj);
    cr_assert(pdx_room_fail(obj, PDX_ERR_ABORTED, "failed here only"));
    cr_expect_eq(pdx_poll(dc.e, 3), PDX_ROOM_FAILED);
    /* the sender has not confirmed: its writes could land */
    cr_expect_eq(pdx_release(dc.e, 3), PDX_INPROGRESS);
    usleep(50000);
    cr_expect_eq(pdx_release(dc.e, 3), PDX_INPROGRESS);
    pdx_rooms_on_abort_ack(dc.e, pdx_peer_get(dc.e, peer), 3);
    cr_expect_eq(pdx_release(dc.e, 3), PDX_OK);
    cr_expect_eq(pdx_poll(dc.e, 3), PDX_ROOM_NONE);
    cr_expect_eq(pdx_release(dc.e, 3), PDX_ERR_NOT_FOUND);
}

/* An aborted room: the sender's ABORT_ACK lets release complete. */
Test(engine, release_after_abort_completes, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 64};
    uint32_t pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};
    pdx_status_t st;

    open_pair(&g, NULL);
    cr_assert_eq(pdx_expect(dc.e, peer, 3, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_abort(dc.e, 3), PDX_OK);
    cr_expect_eq(pdx_poll(dc.e, 3), PDX_ROOM_FAILED);
    st = pdx_release(dc.e, 3);
    cr_expect(st == PDX_INPROGRESS || st == PDX_OK, "%s", pdx_status_str(st));
    if (st == PDX_INPROGRESS)
        cr_expect_eq(release_wait(dc.e, 3, 5000), PDX_OK);
    cr_expect_eq(pdx_poll(dc.e, 3), PDX_ROOM_NONE);
}

/* No queued work: no worker wakes up. */
Test(engine, idle_engine_does_not_wake_its_workers, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 4096, .npages = 4};
    pdx_stats_t a, b;

    side_open(&pf, &g, NULL);
    usleep(100000);
    cr_assert_eq(pdx_engine_stats(pf.e, &a), PDX_OK);
    sleep(1);
    cr_assert_eq(pdx_engine_stats(pf.e, &b), PDX_OK);
    cr_expect_eq(b.worker_wakeups - a.worker_wakeups, 0, "%llu wakeups in one idle second",
                 (unsigned long long)(b.worker_wakeups - a.worker_wakeups));
    side_close(&pf);
}

/* One room on one shard of prefill, sent once the shard had `idle_ms` of
 * nothing to do: how many pdx_send calls woke it (send_kicks). */
static uint64_t kicks_of_a_late_send(uint32_t room, unsigned idle_ms)
{
    uint32_t pages[2] = {3, 5};
    pdx_pages_t p = {pages, 2};
    pdx_stats_t a, b;

    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    for (int i = 0; i < 5000 && pdx_poll(pf.e, room) != PDX_ROOM_WAITING; i++)
        usleep(1000);
    usleep(idle_ms * 1000u);
    cr_assert_eq(pdx_engine_stats(pf.e, &a), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(pdx_engine_stats(pf.e, &b), PDX_OK);
    cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
    return b.send_kicks - a.send_kicks;
}

/* Rooms a and b expected on prefill's one shard; a sent and done, then b
 * sent at once, while the shard still polls after a's completions: how many
 * pdx_send calls of b woke it. Setting b up before a keeps the time between
 * a's last completion and b's send to this thread's own poll, however slowly
 * the control messages of an expect travel on a loaded machine. */
static uint64_t kicks_right_after(uint32_t a, uint32_t b)
{
    uint32_t pages[2] = {3, 5};
    pdx_pages_t p = {pages, 2};
    pdx_stats_t s0, s1;

    cr_assert_eq(pdx_expect(dc.e, peer, a, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    cr_assert_eq(pdx_expect(dc.e, peer, b, dc.layout, &p, NULL, 1, 10000), PDX_OK);
    for (int i = 0; i < 5000 && (pdx_poll(pf.e, a) != PDX_ROOM_WAITING ||
                                 pdx_poll(pf.e, b) != PDX_ROOM_WAITING); i++)
        usleep(1000);
    cr_assert_eq(pdx_send(pf.e, a, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, a, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(pdx_engine_stats(pf.e, &s0), PDX_OK);
    cr_assert_eq(pdx_send(pf.e, b, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(pdx_engine_stats(pf.e, &s1), PDX_OK);
    cr_assert_eq(wait_done(dc.e, a, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(dc.e, b, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(pf.e, b, 10000), PDX_ROOM_SUCCESS);
    return s1.send_kicks - s0.send_kicks;
}

/* PDX_SHARD_SPIN_US: a shard still polling takes a chunk without a wake-up
 * (no system call on the caller's thread); one that slept is woken. */
Test(engine, a_spinning_shard_takes_chunks_without_a_wakeup, .fini = fini, .timeout = 30)
{
    static const char *const spin[] = {"PDX_SHARDS=1", "PDX_SHARD_SPIN_US=100000", NULL};
    static const char *const none[] = {"PDX_SHARDS=1", "PDX_SHARD_SPIN_US=0", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 4096, .npages = 8};

    open_pair(&g, none);
    cr_expect_eq(kicks_of_a_late_send(1, 50), 1, "a sleeping shard was not woken");
    fini();
    open_pair(&g, spin);
    cr_expect_eq(kicks_right_after(2, 3), 0, "pdx_send woke a shard that was polling");
}

/* The listening side learns each incoming peer once, and can expect on it. */
Test(engine, accept_returns_each_incoming_peer_once, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 4096, .npages = 8};
    uint32_t in = UINT32_MAX, again, pages[2] = {1, 2};
    pdx_pages_t p = {pages, 2};

    open_pair(&g, NULL);
    cr_assert_eq(pdx_peer_accept(pf.e, 5000, &in), PDX_OK);
    cr_expect_eq(pdx_peer_accept(pf.e, 100, &again), PDX_ERR_TIMEOUT);
    cr_expect_eq(pdx_peer_accept(dc.e, 100, &again), PDX_ERR_TIMEOUT, "an outgoing peer");
    /* roles reversed: the listening side expects, the connecting side sends */
    cr_assert_eq(pdx_expect(pf.e, in, 4, pf.layout, &p, NULL, 1, 5000), PDX_OK);
    side_fill(&dc, 4, pages, 2, 0);
    cr_assert_eq(pdx_send(dc.e, 4, dc.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(pf.e, 4, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&pf, 4, pages, 2, 0), 0);
}

Test(engine, bad_arguments, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 4096, .npages = 8};
    uint32_t pages[1] = {8};
    pdx_pages_t p = {pages, 1};
    uint32_t x;
    static uint8_t buf[64];

    open_pair(&g, NULL);
    cr_expect_eq(pdx_expect(dc.e, peer, 1, dc.layout, &p, NULL, 1, 1000), PDX_ERR_RANGE);
    cr_expect_eq(pdx_poll(dc.e, 1), PDX_ROOM_NONE, "a refused expect leaves no room");
    cr_expect_eq(pdx_expect(dc.e, 99, 1, dc.layout, &p, NULL, 1, 1000), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_expect(dc.e, peer, 1, 42, &p, NULL, 1, 1000), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_expect(dc.e, peer, 1, dc.layout, &p, NULL, 0, 1000), PDX_ERR_INVALID);
    cr_expect_eq(pdx_send(pf.e, 1, 42, &p, NULL, NULL, 0), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_mem_register(pf.e, buf, 0, &x), PDX_ERR_INVALID);
    cr_expect_eq(pdx_mem_deregister(pf.e, pf.mem), PDX_ERR_STATE, "a layout uses it");
    cr_expect_eq(pdx_peer_connect(dc.e, "127.0.0.1:1", 500, &x), PDX_ERR_PEER);
    cr_expect_eq(pdx_abort(pf.e, 12345), PDX_ERR_NOT_FOUND);
}

/*
 * Without a GPU (none here: the build's runtime finds no device) the engine
 * serves host memory; stream and event gates answer PDX_ERR_UNSUPPORTED with
 * a message, malformed gates PDX_ERR_INVALID, and a host-flag gate works.
 */
Test(engine, gates_without_a_gpu, .fini = fini, .timeout = 30)
{
    static const char *const cfg[] = {"PDX_GPU=3", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 256, .npages = 16};
    uint32_t pages[2] = {3, 9};
    pdx_pages_t p = {pages, 2};
    volatile uint64_t flag = 0;
    pdx_gate_t gate = {.kind = PDX_GATE_EVENT, .event = (void *)&flag};
    pdx_gate_t armed = {.kind = PDX_GATE_NONE};

    open_pair(&g, cfg); /* PDX_GPU names no device here: host memory only */
    cr_assert_eq(pdx_expect(dc.e, peer, 7, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 7, pages, 2, 0);
    cr_expect_eq(pdx_gate_arm(pf.e, (void *)0x1, &armed), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(armed.kind, PDX_GATE_NONE, "output written on failure");
    cr_expect_eq(pdx_send(pf.e, 7, pf.layout, &p, &gate, NULL, PDX_SEND_LAST),
                 PDX_ERR_UNSUPPORTED);
    gate.event = NULL;
    cr_expect_eq(pdx_send(pf.e, 7, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_ERR_INVALID);
    gate = (pdx_gate_t){.kind = PDX_GATE_WORD};
    cr_expect_eq(pdx_send(pf.e, 7, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_ERR_INVALID);
    gate = (pdx_gate_t){.kind = (pdx_gate_kind_t)9};
    cr_expect_eq(pdx_send(pf.e, 7, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_ERR_INVALID);
    cr_expect_neq(pdx_poll(pf.e, 7), PDX_ROOM_TRANSFERRING, "refused chunks queue nothing");

    cr_expect_eq(pdx_room_stream_wait(dc.e, 7, (void *)0x1), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(pdx_room_stream_wait(dc.e, 8, (void *)0x1), PDX_ERR_NOT_FOUND);
    cr_expect_eq(pdx_room_stream_wait(NULL, 7, (void *)0x1), PDX_ERR_INVALID);

    gate = (pdx_gate_t){.kind = PDX_GATE_WORD, .word = &flag, .value = 1};
    cr_assert_eq(pdx_send(pf.e, 7, pf.layout, &p, &gate, NULL, PDX_SEND_LAST), PDX_OK);
    cr_expect_eq(pdx_room_stream_wait(pf.e, 7, (void *)0x1), PDX_ERR_STATE, "a prefill room");
    usleep(20000);
    cr_expect_eq(pdx_poll(dc.e, 7), PDX_ROOM_WAITING, "nothing before the flag");
    __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
    cr_assert_eq(wait_done(dc.e, 7, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 7, pages, 2, 0), 0);
}

/*
 * Registrations are shared by identity: host memory the GPU runtime does not
 * know is shared only by regions of the same range, so registering the pool
 * again takes no new registration, another range does, and a region keeps
 * working after its twin is deregistered.
 */
Test(engine, registrations_are_shared_by_identity, .fini = fini, .timeout = 30)
{
    geom_t g = {.layers = 1, .bytes_per_page = 512, .npages = 32};
    uint32_t twin, part, pages[3] = {1, 5, 30};
    pdx_pages_t p = {pages, 3};
    pdx_stats_t st0, st;
    size_t len = (size_t)g.layers * g.npages * g.bytes_per_page;

    open_pair(&g, NULL);
    cr_assert_eq(pdx_engine_stats(pf.e, &st0), PDX_OK);
    cr_expect_eq(st0.registrations, 2, "the pool and the aux slot");
    cr_assert_eq(pdx_mem_register(pf.e, pf.pool, len, &twin), PDX_OK);
    cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
    cr_expect_eq(st.registrations, st0.registrations, "the same range: shared");
    cr_expect_neq(twin, pf.mem, "a region id of its own");
    cr_assert_eq(pdx_mem_register(pf.e, pf.pool + 512, 1024, &part), PDX_OK);
    cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
    cr_expect_eq(st.registrations, st0.registrations + 1, "another range of host memory");
    cr_expect_eq(pdx_mem_deregister(pf.e, part), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(pf.e, twin), PDX_OK);
    cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
    cr_expect_eq(st.registrations, st0.registrations);

    /* the pool's region still carries a room */
    cr_assert_eq(pdx_expect(dc.e, peer, 9, dc.layout, &p, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 9, pages, 3, 0);
    cr_assert_eq(pdx_send(pf.e, 9, pf.layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 9, 5000), PDX_ROOM_SUCCESS);
    cr_expect_eq(side_check(&dc, 9, pages, 3, 0), 0);
}
