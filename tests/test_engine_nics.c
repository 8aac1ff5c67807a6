/*
 * Engines of several NICs (PDX_NICS): a data endpoint of lane k joins NIC
 * k % nics of each side, every NIC of an engine registers every region with
 * its own keys, and a room's runs are striped over the endpoints of every
 * lane. Over rdma the NICs are softnic devices, whose responders refuse an
 * rkey of another device's PD, so a write sent with the wrong NIC's key
 * fails its room; over tcp every NIC is a transport instance of its own.
 * Also over rdma: a flush read on every NIC before decode's SUCCESS, and
 * fewer usable devices than asked for.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "dep.h"
#include "peer.h"
#include "shard.h"
#include "engine_fixture.h"
#ifdef PDX_TEST_SOFTNIC
#include "rdma/rdma.h"
#include "softnic.h"
#endif

static side_t pf, dc, dc2;
static uint32_t peer;

static void fini(void)
{
    side_close(&dc2);
    side_close(&dc);
    side_close(&pf);
#ifdef PDX_TEST_SOFTNIC
    softnic_config_t c;

    softnic_faults_clear();
    softnic_config_default(&c);
    softnic_configure(&c);
#endif
}

static void nic_setup(uint32_t devices)
{
#ifdef PDX_TEST_SOFTNIC
    softnic_config_t c;

    softnic_config_default(&c);
    c.devices = devices;
    cr_assert_eq(softnic_configure(&c), 0);
    softnic_stats_reset();
#else
    (void)devices;
#endif
}

static void expect_no_access_error(void)
{
#ifdef PDX_TEST_SOFTNIC
    softnic_stats_t st;

    softnic_stats(&st);
    cr_expect_eq(st.access_errors, 0, "%llu remote accesses refused",
                 (unsigned long long)st.access_errors);
#endif
}

/*
 * n rooms from `first` of `pages` random pages each, in 3 chunks, the last
 * with 100 aux bytes; every room SUCCESS on both sides with the right
 * bytes, then released.
 */
static void transfer(uint64_t first, uint32_t n, uint32_t pages)
{
    uint32_t *src = malloc(n * pages * sizeof(*src)), *dst = malloc(n * pages * sizeof(*dst));
    pdx_region_t src_aux = {.mem = pf.aux_mem, .offset = 1000, .len = 100};
    unsigned seed = (unsigned)first;

    pick_pages(src, n * pages, pf.g.npages, &seed);
    pick_pages(dst, n * pages, dc.g.npages, &seed);
    for (uint32_t i = 0; i < 100; i++)
        pf.aux[1000 + i] = (uint8_t)(i * 7 + first);
    for (uint32_t r = 0; r < n; r++) {
        pdx_pages_t dl = {dst + r * pages, pages};
        pdx_region_t dst_aux = {.mem = dc.aux_mem, .offset = 128 * (r % 16), .len = 100};

        cr_assert_eq(pdx_expect(dc.e, peer, first + r, dc.layout, &dl, &dst_aux, 1, 5000),
                     PDX_OK);
        side_fill(&pf, first + r, src + r * pages, pages, 0);
    }
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0, at = 0; c < 3; c++) {
            uint32_t len = c < 2 ? pages / 3 : pages - at;
            pdx_pages_t s = {src + r * pages + at, len};
            pdx_status_t st;

            while ((st = pdx_send(pf.e, first + r, pf.layout, &s, NULL, c == 2 ? &src_aux : NULL,
                                  c == 2 ? PDX_SEND_LAST : 0)) == PDX_ERR_AGAIN)
                usleep(100);
            cr_assert_eq(st, PDX_OK);
            at += len;
        }
    for (uint32_t r = 0; r < n; r++) {
        char why[PDX_ROOM_ERR_MAX] = "";

        if (wait_done(dc.e, first + r, 10000) != PDX_ROOM_SUCCESS)
            pdx_room_error(dc.e, first + r, why, sizeof(why));
        cr_assert_eq(pdx_poll(dc.e, first + r), PDX_ROOM_SUCCESS, "room %u: %s", r, why);
        cr_assert_eq(wait_done(pf.e, first + r, 10000), PDX_ROOM_SUCCESS, "prefill room %u", r);
        cr_expect_eq(side_check(&dc, first + r, dst + r * pages, pages, 0), 0, "room %u bytes",
                     r);
        cr_expect_arr_eq(dc.aux + 128 * (r % 16), pf.aux + 1000, 100, "room %u aux", r);
        cr_expect_eq(release_wait(dc.e, first + r, 5000), PDX_OK);
        cr_expect_eq(release_wait(pf.e, first + r, 5000), PDX_OK);
    }
    free(src);
    free(dst);
}

/* WRs e posted to its peers by its own NIC (remote false) or by the
 * peer's NIC they went to (remote true), into posted[nic]. */
static void posted_per_nic(pdx_engine_t *e, bool remote, uint64_t posted[PDX_MAX_NICS])
{
    memset(posted, 0, PDX_MAX_NICS * sizeof(posted[0]));
    for (uint32_t s = 0; s < e->nshards; s++) {
        pdx_shard_t *sh = &e->shards[s];
        uint32_t n = atomic_load(&sh->ndeps);

        for (uint32_t i = 0; i < n; i++) {
            pdx_dep_t *dep = atomic_load(&sh->deps[i]);

            if (dep)
                posted[remote ? dep->rnic : dep->nic] += dep->posted;
        }
    }
}

/* The peer's endpoints join every pair of NICs the lanes name. */
static void expect_lanes(pdx_peer_t *pr, uint32_t lanes, uint32_t nics, uint32_t rnics)
{
    uint32_t seen = 0;

    cr_assert_not_null(pr);
    cr_assert_eq(pr->lanes, lanes);
    cr_assert_eq(pr->remote_nics, rnics);
    cr_assert_eq(pr->qps % lanes, 0);
    for (uint32_t i = 0; i < pr->npairs * pr->qps; i++) {
        const pdx_dep_t *dep = &pr->deps[i];

        cr_assert_eq(dep->nic, dep->index % lanes % nics, "endpoint %u", i);
        cr_assert_eq(dep->rnic, dep->index % lanes % rnics, "endpoint %u", i);
        seen |= 1u << (dep->nic * PDX_MAX_NICS + dep->rnic);
    }
    for (uint32_t k = 0; k < lanes; k++)
        cr_expect(seen >> (k % nics * PDX_MAX_NICS + k % rnics) & 1, "lane %u unused", k);
}

Test(engine_nics, two_nics_each_side, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic0,softnic1", NULL};
    static const char *const dcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic2,softnic3", NULL};
    geom_t g = {.layers = 4, .bytes_per_page = 1024, .npages = 1024};
    uint64_t posted[PDX_MAX_NICS];

    nic_setup(4);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    cr_assert_eq(pf.e->ntps, 2);
    cr_assert_eq(dc.e->ntps, 2);
    peer = side_connect(&dc, &pf);
    expect_lanes(pdx_peer_get(dc.e, peer), 2, 2, 2);
    transfer(100, 16, 60);
    posted_per_nic(pf.e, false, posted);
    cr_expect_gt(posted[0], 100, "NIC 0 posted %llu WRs", (unsigned long long)posted[0]);
    cr_expect_gt(posted[1], 100, "NIC 1 posted %llu WRs", (unsigned long long)posted[1]);
    expect_no_access_error();
}

/* Prefill with 2 NICs, decode with 1: both lanes end on decode's one NIC. */
Test(engine_nics, more_nics_on_prefill, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic0,softnic1", NULL};
    static const char *const dcfg[] = {"PDX_IB_DEVICES=softnic2", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 2048, .npages = 512};
    uint64_t posted[PDX_MAX_NICS];

    nic_setup(3);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    peer = side_connect(&dc, &pf);
    expect_lanes(pdx_peer_get(dc.e, peer), 2, 1, 2);
    transfer(300, 8, 48);
    posted_per_nic(pf.e, false, posted);
    cr_expect(posted[0] && posted[1], "NIC WRs %llu, %llu", (unsigned long long)posted[0],
              (unsigned long long)posted[1]);
    expect_no_access_error();
}

/* Prefill with 1 NIC, decode with 3: prefill's one NIC writes with each of
 * decode's three keys. */
Test(engine_nics, more_nics_on_decode, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_IB_DEVICES=softnic0", "PDX_QPS_PER_PEER=1", NULL};
    static const char *const dcfg[] = {"PDX_NICS=3", "PDX_IB_DEVICES=softnic1,softnic2,softnic3",
                                       NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 2048, .npages = 512};
    uint64_t posted[PDX_MAX_NICS];

    nic_setup(4);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    cr_assert_eq(dc.e->ntps, 3);
    peer = side_connect(&dc, &pf);
    /* decode connected, so its PDX_QPS_PER_PEER (2) times 3 lanes */
    expect_lanes(pdx_peer_get(dc.e, peer), 3, 3, 1);
    expect_lanes(atomic_load(&pf.e->peers[0]), 3, 1, 3);
    transfer(400, 8, 48);
    posted_per_nic(pf.e, true, posted);
    for (uint32_t k = 0; k < 3; k++)
        cr_expect_gt(posted[k], 0, "nothing went to decode's NIC %u", k);
    expect_no_access_error();
}

/* 2 NICs against 3: lanes are not one to one; every pair of NICs a lane
 * names carries data. */
Test(engine_nics, two_against_three, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic0,softnic1", NULL};
    static const char *const dcfg[] = {"PDX_NICS=3", "PDX_IB_DEVICES=softnic2,softnic3,softnic4",
                                       NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 2048, .npages = 512};
    uint64_t mine[PDX_MAX_NICS], theirs[PDX_MAX_NICS];

    nic_setup(5);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    peer = side_connect(&dc, &pf);
    expect_lanes(pdx_peer_get(dc.e, peer), 3, 3, 2);
    expect_lanes(atomic_load(&pf.e->peers[0]), 3, 2, 3);
    transfer(450, 8, 60);
    posted_per_nic(pf.e, false, mine);
    posted_per_nic(pf.e, true, theirs);
    cr_expect(mine[0] && mine[1], "prefill NIC WRs %llu, %llu", (unsigned long long)mine[0],
              (unsigned long long)mine[1]);
    for (uint32_t k = 0; k < 3; k++)
        cr_expect_gt(theirs[k], 0, "nothing went to decode's NIC %u", k);
    expect_no_access_error();
}

#ifdef PDX_TEST_SOFTNIC
/* PDX_NICS above the usable devices (or naming one device twice): the
 * engine serves with those it has. */
Test(engine_nics, fewer_devices_than_asked, .fini = fini, .timeout = 60)
{
    static const char *const cfg[] = {"PDX_NICS=4", NULL};

    static const char *const twice[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic1,softnic1", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 256};
    pdx_stats_t st;

    nic_setup(2);
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, twice);
    cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
    cr_assert_eq(st.nics, 2);
    cr_assert_eq(pf.e->ntps, 2);
    cr_assert_eq(dc.e->ntps, 1, "one device named twice is one NIC");
    peer = side_connect(&dc, &pf);
    expect_lanes(pdx_peer_get(dc.e, peer), 2, 1, 2);
    transfer(500, 4, 30);
}

/*
 * Peers with more NICs than prefill fill its one CQ: prefill's CQ holds 64
 * endpoints (PDX_QPS_PER_PEER=1, one shard), each decode asks for 64 (16
 * QPs on each of 4 lanes, all on prefill's one NIC). The second decode's
 * endpoints go to a second CQ, and both carry rooms.
 */
Test(engine_nics, a_full_cq_gets_another, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_IB_DEVICES=softnic0", "PDX_SHARDS=1",
                                       "PDX_QPS_PER_PEER=1", "PDX_SQ_DEPTH=16",
                                       "PDX_SIGNAL_EVERY=4", NULL};
    static const char *const dcfg[] = {"PDX_NICS=4", "PDX_SHARDS=1", "PDX_QPS_PER_PEER=16",
                                       "PDX_IB_DEVICES=softnic1,softnic2,softnic3,softnic4",
                                       "PDX_SQ_DEPTH=16", "PDX_SIGNAL_EVERY=4", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 256};
    pdx_shard_t *s;
    side_t first;
    uint32_t p1, p2;

    nic_setup(5);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    side_open(&dc2, &g, dcfg);
    s = &pf.e->shards[0];
    p1 = side_connect(&dc, &pf);
    cr_assert_eq(atomic_load(&s->ncq), 1);
    p2 = side_connect(&dc2, &pf);
    cr_assert_eq(atomic_load(&s->ncq), 2, "no second CQ");
    cr_assert_eq(s->cq_nic[1], 0);
    /* rooms to each decode engine (transfer() goes to dc over peer) */
    peer = p1;
    transfer(1000, 8, 24);
    first = dc;
    dc = dc2;
    dc2 = first;
    peer = p2;
    transfer(1100, 8, 24);
    expect_no_access_error();
}

/* A data endpoint on NIC 1 goes fatal (as a NIC does): it is reset and
 * rebuilt on NIC 1, its peer stays, and rooms keep using both NICs. */
Test(engine_nics, endpoint_on_the_second_nic_is_reset_there, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic0,softnic1",
                                       "PDX_SHARDS=1", NULL};
    static const char *const dcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic2,softnic3",
                                       "PDX_SHARDS=1", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 256};
    uint64_t before[PDX_MAX_NICS], after[PDX_MAX_NICS];
    pdx_peer_t *pp;
    pdx_dep_t *dep = NULL;

    nic_setup(4);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    peer = side_connect(&dc, &pf);
    transfer(900, 4, 24);
    pp = atomic_load(&pf.e->peers[0]);
    cr_assert_not_null(pp);
    for (uint32_t i = 0; i < pp->npairs * pp->qps && !dep; i++)
        if (pp->deps[i].nic == 1)
            dep = &pp->deps[i];
    cr_assert_not_null(dep);
    cr_assert_eq(softnic_qp_fatal(rdma_ep(dep->ep)->qp->qp_num), 0);
    for (int i = 0; i < 5000 && !(atomic_load(&dep->epoch) >= 1 && atomic_load(&dep->connected) &&
                                  !atomic_load(&dep->reset)); i++)
        usleep(1000);
    cr_assert_geq(atomic_load(&dep->epoch), 1, "not reset");
    cr_assert(atomic_load(&dep->connected) && !atomic_load(&dep->reset), "not reconnected");
    cr_assert_eq(rdma_ep(dep->ep)->tp, rdma_tp(pf.e->tps[1]), "rebuilt on another NIC");
    posted_per_nic(pf.e, false, before);
    transfer(950, 8, 24);
    posted_per_nic(pf.e, false, after);
    cr_expect(after[0] > before[0] && after[1] > before[1], "NIC WRs %llu -> %llu, %llu -> %llu",
              (unsigned long long)before[0], (unsigned long long)after[0],
              (unsigned long long)before[1], (unsigned long long)after[1]);
    cr_expect_eq(atomic_load(&pp->state), PDX_PEER_READY, "the peer failed");
    expect_no_access_error();
}

/*
 * PDX_FLUSH=on with 2 NICs: every round reads through both NICs before
 * SUCCESS. A READ that fails on NIC 1 fails the rooms of its round with
 * the NIC named; the pair is made anew and later rooms succeed.
 */
Test(engine_nics, flush_reads_on_every_nic, .fini = fini, .timeout = 60)
{
    static const char *const pcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic0,softnic1",
                                       "PDX_SHARDS=1", NULL};
    static const char *const dcfg[] = {"PDX_NICS=2", "PDX_IB_DEVICES=softnic2,softnic3",
                                       "PDX_SHARDS=1", "PDX_FLUSH=on", NULL};
    geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 256};
    uint32_t pages[2] = {5, 9};
    pdx_pages_t l = {pages, 2};
    char why[PDX_ROOM_ERR_MAX] = "";
    pdx_shard_t *s;
    uint64_t flushes;

    nic_setup(4);
    side_open(&pf, &g, pcfg);
    side_open(&dc, &g, dcfg);
    peer = side_connect(&dc, &pf);
    transfer(600, 8, 12);
    s = &dc.e->shards[0];
    flushes = atomic_load(&s->stats.flushes);
    cr_expect_gt(flushes, 0);

    /* NIC 1's next READ completes in error */
    softnic_fault_wr_status(rdma_ep(s->flush_ep[1][0])->qp->qp_num, 1, IBV_WC_REM_OP_ERR);
    cr_assert_eq(pdx_expect(dc.e, peer, 700, dc.layout, &l, NULL, 1, 5000), PDX_OK);
    side_fill(&pf, 700, pages, 2, 0);
    cr_assert_eq(pdx_send(pf.e, 700, pf.layout, &l, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, 700, 5000), PDX_ROOM_FAILED);
    cr_assert_eq(pdx_room_error(dc.e, 700, why, sizeof(why)), PDX_OK);
    cr_expect(strstr(why, "flush read") && strstr(why, "NIC 1"), "%s", why);
    cr_expect_eq(atomic_load(&s->stats.flushes), flushes, "a failed round counted");
    cr_expect_eq(release_wait(dc.e, 700, 5000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, 700, 5000), PDX_OK);

    transfer(800, 4, 12);
    cr_expect_gt(atomic_load(&s->stats.flushes), flushes);
    expect_no_access_error();
}
#endif
