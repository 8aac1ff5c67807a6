/*
 * rdma gathered WRITEs over softnic: WRITEs of one call whose remote ranges
 * follow each other go out as one ibv WRITE of several SGEs (rdma/post.c);
 * each still completes, lands and fails as its own WR. And regions longer
 * than the device's max_mr_size, registered in pieces with keys of their
 * own. Each test checks that it leaves no file descriptor and no verbs
 * object behind (rdma_fixture.h).
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

/* ------------------------------------------------------------ gather */

/*
 * WRITEs of one call whose remote ranges follow each other go out as one
 * ibv WRITE of several SGEs, while it stays within the QP's SGEs (16 of
 * softnic's 30, or all of a device's 4), the message limit (1 MiB here) and
 * one rkey, and until a signaled WRITE; their local ranges go anywhere, in
 * several regions. Each lands where it should; the completions are those of
 * the signaled WRITEs, and they release every region and slot.
 */
static void gather_run(uint32_t max_sge)
{
    const uint64_t k300 = 300u << 10, k320 = 320u << 10, r2 = 192u << 10;
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_write_t w[40];
    pdx_tp_wc_t wc[4];
    pdx_tp_mr_t *smr2, *dmr2;
    pdx_tp_rkey_t rk2;
    uint64_t before;
    fx_rig_t r;

    if (max_sge)
        c.max_sge = max_sge;
    fx_rig_open(&r, &c, 4u << 20, 64, 0);
    max_sge = max_sge ? max_sge : RDMA_MAX_SGE;
    cr_assert_eq(rdma_ep(r.ep[0])->max_sge, max_sge);

    /* 8 of 1 KiB, local ranges backwards: one WR (two of 4 SGEs) */
    before = fx_wrs_posted();
    for (int i = 0; i < 8; i++)
        w[i] = fx_wr(&r, (uint64_t)i, (uint64_t)(7 - i) * 20000 + 100, 1024,
                     5000 + (uint64_t)i * 1024, i == 7);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 7, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(fx_wrs_posted() - before, max_sge >= 8 ? 1u : 2u);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(memcmp(r.dst + 5000 + i * 1024, r.src + w[i].offset, 1024), 0, "write %d", i);

    /* 40 of 512 bytes: WRs of max_sge SGEs */
    before = fx_wrs_posted();
    for (int i = 0; i < 40; i++)
        w[i] = fx_wr(&r, 100u + (uint64_t)i, (uint64_t)i * 1024, 512,
                     65536 + (uint64_t)i * 512, i == 39);
    cr_assert_eq(ops->post_write(r.ep[0], w, 40), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 139, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(fx_wrs_posted() - before, (40 + max_sge - 1) / max_sge, "max_sge %u", max_sge);
    for (int i = 0; i < 40; i++)
        cr_assert_eq(memcmp(r.dst + 65536 + i * 512, r.src + i * 1024, 512), 0, "write %d", i);

    /* 5 of 300 KiB: 3 fit 1 MiB, then a WR of 2 */
    before = fx_wrs_posted();
    for (int i = 0; i < 5; i++)
        w[i] = fx_wr(&r, 200u + (uint64_t)i, (uint64_t)(4 - i) * k320, k300,
                     (uint64_t)i * k300, i == 4);
    cr_assert_eq(ops->post_write(r.ep[0], w, 5), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 204, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(fx_wrs_posted() - before, 2u);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(memcmp(r.dst + i * k300, r.src + w[i].offset, k300), 0, "write %d", i);

    /* SGEs of two regions; a second rkey over the same bytes ends the WR;
     * a signaled WRITE ends it too, and completes under its own wr_id */
    smr2 = fx_mr_new(ops, r.tp[0], r.src + r2, 65536, 0);
    dmr2 = fx_mr_new(ops, r.tp[1], r.dst, r.len, FX_RW);
    ops->mr_remote(dmr2, &rk2);
    before = fx_wrs_posted();
    for (int i = 0; i < 6; i++) {
        w[i] = fx_wr(&r, 300u + (uint64_t)i, (uint64_t)i * 4096, 1000,
                     9000 + (uint64_t)i * 1000, i == 1 || i == 5);
        if (i % 2) {
            w[i].mr = smr2;
            w[i].offset = (uint64_t)i * 3000;
        }
    }
    w[4].rkey = w[5].rkey = rk2.rkey; /* the same bytes, another registration */
    /* WRs: {0, 1} (1 signaled), {2, 3}, {4, 5} (another rkey) */
    cr_assert_eq(ops->post_write(r.ep[0], w, 6), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 2, FX_WAIT_MS), 2);
    fx_expect_wc(&wc[0], 301, PDX_OK, PDX_TP_OP_WRITE);
    fx_expect_wc(&wc[1], 305, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(fx_wrs_posted() - before, 3u);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(memcmp(r.dst + 9000 + i * 1000, (i % 2 ? r.src + r2 : r.src) + w[i].offset,
                            1000), 0, "write %d", i);
    cr_assert_eq(ops->mr_dereg(smr2), PDX_OK, "the completions released both regions");
    cr_assert_eq(ops->mr_dereg(dmr2), PDX_OK);
    /* every slot is free again */
    for (int i = 0; i < 40; i++)
        w[i] = fx_wr(&r, 400u + (uint64_t)i, 0, 64, (uint64_t)i * 64, i == 39);
    cr_assert_eq(ops->post_write(r.ep[0], w, 40), PDX_OK);
    cr_assert_eq(ops->post_write(r.ep[0], w, 25), PDX_ERR_AGAIN, "24 slots free");
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 439, PDX_OK, PDX_TP_OP_WRITE);
    fx_rig_close(&r, false);
}

Test(rdma_gather, gathered_writes)
{
    gather_run(0);
}

Test(rdma_gather, gathered_writes_up_to_max_sge)
{
    gather_run(4);
}

/*
 * A burst much larger than the send queue, of calls of 1 to 16 WRITEs that
 * gather or not (random remote pages, or the page after the last), signaled
 * or not: every signaled WRITE completes, in order, and each page holds what
 * the last WRITE to it carried.
 */
Test(rdma_gather, burst_of_gathered_and_single_writes)
{
    const uint32_t pages = 256, page = 4096, total = 6000;
    uint16_t want[256];
    pdx_tp_write_t w[16];
    pdx_tp_wc_t wc[32];
    uint64_t last = 0, before;
    uint32_t posted = 0, sig = 0, done = 0, dpage = 0;
    fx_rig_t r;

    fx_rig_open(&r, NULL, (size_t)pages * page, 16, 0);
    for (uint32_t p = 0; p < pages; p++)
        want[p] = (uint16_t)p; /* nothing written: compared with itself below */
    memcpy(r.dst, r.src, r.len);
    before = fx_wrs_posted();
    while (posted < total) {
        /* the draw apart: PDX_MIN evaluates its arguments twice */
        const uint32_t draw = (uint32_t)(fx_rng() % 16) + 1;
        uint32_t n = PDX_MIN(draw, total - posted), k = 0;
        uint64_t deadline = pdx_deadline_ns(FX_WAIT_MS);
        pdx_status_t st;

        for (uint32_t i = 0; i < n; i++) {
            uint32_t spage = (uint32_t)(fx_rng() % pages);
            bool s = i + 1 == n || fx_rng() % 7 == 0;

            dpage = fx_rng() % 3 ? (dpage + 1) % pages : (uint32_t)(fx_rng() % pages);
            w[i] = fx_wr(&r, posted + i + 1, (uint64_t)spage * page, page,
                         (uint64_t)dpage * page, s);
            want[dpage] = (uint16_t)spage;
            k += s;
        }
        while ((st = ops->post_write(r.ep[0], w, n)) == PDX_ERR_AGAIN) {
            done += fx_take(r.cq[0], wc, 32, 10, &last);
            cr_assert_lt(pdx_now_ns(), deadline, "the send queue never drained");
        }
        cr_assert_eq(st, PDX_OK);
        posted += n;
        sig += k;
    }
    while (done < sig) {
        int n = fx_take(r.cq[0], wc, 32, FX_WAIT_MS, &last);

        cr_assert_gt(n, 0, "only %u of %u signaled writes completed", done, sig);
        done += (uint32_t)n;
    }
    cr_assert_eq(last, (uint64_t)total);
    cr_assert_lt(fx_wrs_posted() - before, (uint64_t)total * 3 / 4, "few WRITEs gathered");
    for (uint32_t p = 0; p < pages; p++)
        cr_assert_eq(memcmp(r.dst + (size_t)p * page, r.src + (size_t)want[p] * page, page), 0,
                     "page %u", p);
    fx_rig_close(&r, false);
}

/* ------------------------------------------------- regions in pieces */

/*
 * A device with max_mr_size 64 KiB: regions are registered in pieces of it,
 * each with its own keys. Writes inside a piece land with that piece's rkey;
 * a local span across a piece is refused before posting; piece 0's rkey does
 * not reach piece 2 (REM_ACCESS_ERR), so the pieces are separate
 * registrations. A dmabuf region is cut the same way at the fd's offsets.
 */
Test(rdma_gather, regions_in_pieces)
{
    const uint64_t piece = 64u << 10, len = 4 * piece + 100;
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_write_t w[3];
    pdx_tp_wc_t wc;
    pdx_tp_mr_t *mr;
    pdx_tp_rkey_t rk;
    softnic_stats_t st;
    pdx_tp_mr_t *lmr;
    uint8_t *map, *lbuf;
    uint64_t before;
    fx_rig_t r;
    int fd;

    c.max_mr_size = piece + 4095; /* not a power of two: pieces of 64 KiB */
    fx_rig_open(&r, &c, len, 8, 0);
    cr_assert_eq(r.tp[0]->mr_piece, piece);
    cr_assert_eq(r.rk.npieces, 5);
    cr_assert_eq(r.rk.piece, piece);
    cr_assert_eq(r.rk.len, len);
    cr_assert_eq(r.rk.rkeys[0], r.rk.rkey);
    for (uint32_t i = 1; i < 5; i++)
        cr_assert_neq(r.rk.rkeys[i], r.rk.rkeys[i - 1], "piece %u has keys of its own", i);

    /* [100, piece) from piece 0 to piece 0; the rest of piece 1 to piece 3; the
     * short last piece to piece 4 */
    w[0] = fx_wr(&r, 1, 100, piece - 100, 100, false);
    w[1] = fx_wr(&r, 2, piece, piece, 3 * piece, false);
    w[2] = fx_wr(&r, 3, 4 * piece, 100, 4 * piece, true);
    for (int i = 0; i < 3; i++)
        w[i].rkey = pdx_tp_rkey_at(&r.rk, w[i].remote_addr - r.rk.addr);
    cr_assert_eq(ops->post_write(r.ep[0], w, 3), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 3, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst + 100, r.src + 100, piece - 100), 0);
    cr_assert_eq(memcmp(r.dst + 3 * piece, r.src + piece, piece), 0);
    cr_assert_eq(memcmp(r.dst + 4 * piece, r.src + 4 * piece, 100), 0);

    /* gathered: local ranges in pieces 2, 0 and 1, each with its piece's
     * lkey, into one range of remote piece 1: one ibv WR */
    softnic_stats(&st);
    before = st.wrs_posted;
    w[0] = fx_wr(&r, 10, 2 * piece + 50, 1000, piece + 7000, false);
    w[1] = fx_wr(&r, 11, 500, 2000, piece + 8000, false);
    w[2] = fx_wr(&r, 12, piece + 3000, 3000, piece + 10000, true);
    for (int i = 0; i < 3; i++)
        w[i].rkey = pdx_tp_rkey_at(&r.rk, piece);
    cr_assert_eq(ops->post_write(r.ep[0], w, 3), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 12, PDX_OK, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted - before, 1u);
    cr_assert_eq(memcmp(r.dst + piece + 7000, r.src + 2 * piece + 50, 1000), 0);
    cr_assert_eq(memcmp(r.dst + piece + 8000, r.src + 500, 2000), 0);
    cr_assert_eq(memcmp(r.dst + piece + 10000, r.src + piece + 3000, 3000), 0);

    /* a source span across a piece boundary is refused whole */
    w[0] = fx_wr(&r, 4, piece - 8, 16, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_INVALID);
    lbuf = calloc(1, 2 * piece);
    cr_assert(lbuf);
    lmr = fx_mr_new(ops, r.tp[0], lbuf, 2 * piece, PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_read(r.ep[0], 5, lmr, piece - 8, 16, r.rk.addr, r.rk.rkey),
                 PDX_ERR_INVALID, "a READ target across a piece");
    cr_assert_eq(ops->mr_dereg(lmr), PDX_OK);
    free(lbuf);

    /* a dmabuf region at offset 4096 of its fd, in the same pieces */
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert_geq(fd, 0);
    cr_assert_eq(ftruncate(fd, (off_t)(4096 + len)), 0);
    map = mmap(NULL, 4096 + len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    cr_assert_eq(ops->mr_reg_dmabuf(r.tp[1], map + 4096, len, fd, 4096, FX_RW, &mr), PDX_OK);
    close(fd);
    ops->mr_remote(mr, &rk);
    cr_assert_eq(rk.npieces, 5);
    w[0] = (pdx_tp_write_t){.wr_id = 6, .mr = r.smr, .offset = 0, .length = piece,
                            .remote_addr = rk.addr + 2 * piece,
                            .rkey = pdx_tp_rkey_at(&rk, 2 * piece), .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 6, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(map + 4096 + 2 * piece, r.src, piece), 0);

    /* piece 0's rkey does not cover piece 2: the QP goes to error */
    w[0] = fx_wr(&r, 7, 0, 64, 2 * piece, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 7, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.access_errors, 1, "only the access to piece 2 with piece 0's rkey");
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    munmap(map, 4096 + len);
    fx_rig_close(&r, true);
}

/* ------------------------------------------------------------ errors */

/*
 * A gathered WRITE whose remote range runs past the region fails as a whole
 * (one REM_ACCESS_ERR for the ibv WR, nothing of it placed): each of its
 * WRITEs still completes, the first with PDX_ERR_RANGE (the unsignaled WRs
 * of the call before succeeded silently), the others flushed, as is every
 * WRITE of the gathered WR after it; the regions are released.
 */
Test(rdma_gather, gathered_write_that_fails)
{
    pdx_tp_write_t w[8];
    pdx_tp_wc_t wc[9];
    fx_rig_t r;

    fx_rig_open(&r, NULL, 65536, 16, 0);
    w[0] = fx_wr(&r, 1, 0, 1024, 0, false);
    w[1] = fx_wr(&r, 2, 1024, 1024, 4096, false);
    cr_assert_eq(ops->post_write(r.ep[0], w, 2), PDX_OK);
    for (int i = 0; i < 4; i++) /* the last one past the end */
        w[i] = fx_wr(&r, 10u + (uint64_t)i, (uint64_t)(3 - i) * 2048, 1024,
                     r.len - 3 * 1024 + (uint64_t)i * 1024, false);
    for (int i = 4; i < 7; i++)
        w[i] = fx_wr(&r, 10u + (uint64_t)i, (uint64_t)i * 2048, 1024,
                     8192 + (uint64_t)i * 1024, false);
    w[7] = fx_wr(&r, 17, 0, 1024, 20000, true);
    cr_assert_eq(ops->post_write(r.ep[0], w, 8), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 8, FX_WAIT_MS), 8, "a completion per WRITE");
    cr_assert_eq(fx_wait(r.cq[0], wc + 8, 1, 50), 0, "one too many");
    fx_expect_wc(&wc[0], 10, PDX_ERR_RANGE, PDX_TP_OP_WRITE);
    for (int i = 1; i < 8; i++)
        fx_expect_wc(&wc[i], 10u + (uint64_t)i, PDX_ERR_PEER, PDX_TP_OP_WRITE);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "remote access"), "%s", ops->ep_error(r.ep[0]));
    cr_assert_eq(memcmp(r.dst, r.src, 1024), 0);
    cr_assert_eq(memcmp(r.dst + 4096, r.src + 1024, 1024), 0);
    for (size_t i = 8192; i < 2 * r.len; i++)
        cr_assert_eq(r.dst[i], 0, "byte %zu written by the failed WR or after it", i);
    cr_assert_eq(atomic_load(&rdma_mr(r.smr)->refs), 0u, "a WRITE holds its region");
    cr_assert_eq(ops->post_write(r.ep[0], w, 1), PDX_ERR_PEER);
    fx_rig_close(&r, false);
}

/* ep_fail while gathered WRITEs wait: the NIC flushes each ibv WR once, and
 * each WRITE it carries completes, in order, with ep_fail's status. */
Test(rdma_gather, ep_fail_flushes_each_gathered_write)
{
    pdx_tp_write_t w[9];
    pdx_tp_wc_t wc[10];
    uint64_t before;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4096, 16, 0);
    fx_nic_delay(&r.nic, 2000000); /* nothing executes for 2 s */
    for (int i = 0; i < 9; i++) /* WRs {0..4} and {5..8} */
        w[i] = fx_wr(&r, (uint64_t)i, (uint64_t)(8 - i) * 256, 256, (uint64_t)i * 256,
                     i == 4 || i == 8);
    before = fx_wrs_posted();
    cr_assert_eq(ops->post_write(r.ep[0], w, 9), PDX_OK);
    cr_assert_eq(fx_wrs_posted() - before, 2u);
    ops->ep_fail(r.ep[0], PDX_ERR_ABORTED, "room aborted by the test");
    cr_assert_eq(fx_wait(r.cq[0], wc, 9, FX_WAIT_MS), 9);
    cr_assert_eq(fx_wait(r.cq[0], wc + 9, 1, 50), 0);
    fx_nic_delay(&r.nic, 0);
    for (int i = 0; i < 9; i++)
        fx_expect_wc(&wc[i], (uint64_t)i, PDX_ERR_ABORTED, PDX_TP_OP_WRITE);
    fx_rig_close(&r, false);
}

/*
 * post_runs on regions in pieces: runs from local pieces 2, 0 and 1 into
 * one range of remote piece 1 go as one ibv WR, each with its piece's lkey
 * and the piece's rkey; a signaled run in the middle ends the gathered WR;
 * a run across a piece of either side is refused with its index, and so is
 * a run of no bytes past the peer's region; more runs than a call takes are
 * refused even where the send queue has room.
 */
Test(rdma_gather, post_runs_in_pieces)
{
    const uint64_t piece = 64u << 10, len = 4 * piece + 100;
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_run_t runs[PDX_TP_RUNS_MAX + 1] = {
        {.src_offset = 2 * piece + 50, .dst_offset = piece + 7000, .len = 1000},
        {.src_offset = 500, .dst_offset = piece + 8000, .len = 2000},
        {.src_offset = piece + 3000, .dst_offset = piece + 10000, .len = 3000},
        {.src_offset = 3 * piece, .dst_offset = piece + 13000, .len = 10},
    };
    pdx_tp_runs_t tr;
    softnic_stats_t st;
    pdx_tp_wc_t wc[2];
    uint64_t before;
    uint32_t bad;
    fx_rig_t r;

    c.max_mr_size = piece;
    fx_rig_open(&r, &c, len, 128, 0);
    cr_assert_eq(r.rk.npieces, 5);
    tr = (pdx_tp_runs_t){.wr_id = 40, .wr_id_mask = 0xffff, .signal_every = 0, .n = 3,
                         .runs = runs, .mr = r.smr, .src_base = 0, .src_len = len, .dst = &r.rk};
    softnic_stats(&st);
    before = st.wrs_posted;
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 42, PDX_OK, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted - before, 1u, "three runs, one gathered ibv WR");
    fx_expect_runs(runs, 3, r.src, r.dst);

    /* every second signaled: run 1 ends the first ibv WR, run 3 the second */
    memset(r.dst, 0, len);
    tr.n = 4;
    tr.signal_every = 2;
    tr.wr_id = 50;
    before = st.wrs_posted;
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 2, FX_WAIT_MS), 2);
    fx_expect_wc(&wc[0], 51, PDX_OK, PDX_TP_OP_WRITE);
    fx_expect_wc(&wc[1], 53, PDX_OK, PDX_TP_OP_WRITE);
    softnic_stats(&st);
    cr_assert_eq(st.wrs_posted - before, 2u, "a signaled run ends its ibv WR");
    fx_expect_runs(runs, 4, r.src, r.dst);

    /* refused whole, with the index of the bad run */
    runs[2] = (pdx_tp_run_t){.src_offset = 0, .dst_offset = 2 * piece - 8, .len = 16};
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_ERR_RANGE, "across a remote piece");
    cr_assert_eq(bad, 2u);
    runs[2] = (pdx_tp_run_t){.src_offset = piece - 8, .dst_offset = 0, .len = 16};
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_ERR_RANGE, "across a local piece");
    cr_assert_eq(bad, 2u);
    runs[2] = (pdx_tp_run_t){.src_offset = 0, .dst_offset = len + 1, .len = 0};
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_ERR_RANGE, "no bytes past the region");
    cr_assert_eq(bad, 2u);
    runs[2] = (pdx_tp_run_t){.src_offset = 0, .dst_offset = 4 * piece, .len = 0};
    tr.n = PDX_TP_RUNS_MAX + 1;
    cr_assert_eq(ops->post_runs(r.ep[0], &tr, &bad), PDX_ERR_INVALID,
                 "more runs than a call takes");
    cr_assert_eq(ops->cq_poll(r.cq[0], wc, 2), 0, "a refused call posted something");
    fx_rig_close(&r, true);
}
