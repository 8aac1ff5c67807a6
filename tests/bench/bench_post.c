/*
 * The rdma post path, measured on softnic (tests/softnic) in one run:
 *
 * 1. Null mode (every WR completes inside ibv_post_send, no bytes move):
 *    pdx's whole send path per WR (ring intake, plan, chained post,
 *    completions) next to a minimal hand-written poster: a loop of chained
 *    ibv_post_send calls and ibv_poll_cq on the same softnic, with the same
 *    send-queue depth, chain length and signaling interval.
 * 2. WRs and bytes per WR of one 4,096-token request for DeepSeek-R1 (MLA,
 *    page 1 and 64) and Llama-3-70B at TP8 (K and V, page 16), on
 *    contiguous and random page maps, and random source pages into
 *    contiguous destination pages (the runs stay one page long; the rdma
 *    transport gathers them into WRITEs of several SGEs: the "ibv WRs"
 *    column counts what reached ibv_post_send, notifies included).
 * 3. Thread mode with a per-QP bandwidth cap (bytes moved): PDX_QPS_PER_PEER
 *    1 against 2.
 * 4. Thread mode with a per-NIC bandwidth cap: PDX_NICS 1 against 2 on both
 *    sides (each engine on NICs of its own).
 *
 * softnic stands in for a NIC; what a real NIC adds (doorbells, PCIe, the
 * wire) is not in these numbers.
 *
 * bench_post --null runs part 1 alone: what callgrind counts (valgrind
 * --tool=callgrind --fair-sched=yes: the bench's waits poll, and valgrind's
 * default scheduler lets a polling thread starve the engines' own).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pdx/pdx.h>

#include "bench_stats.h"
#include "softnic.h"
#include "util.h"

#define TOKENS     4096u
#define CHAIN      32u   /* WRs per ibv_post_send, as the shard's batch */
#define SQ_DEPTH   256u  /* PDX_SQ_DEPTH default */
#define SIGNAL     16u   /* PDX_SIGNAL_EVERY default */
#define REPS       5

typedef struct model {
    const char *name;
    uint32_t    layers;
    uint32_t    parts;          /* buffers per layer: 1 (MLA) or 2 (K, V) */
    uint32_t    bytes_per_token; /* per buffer */
    uint32_t    page;           /* tokens per page */
} model_t;

static const model_t models[] = {
    {"DeepSeek-R1 MLA, page 1", 61, 1, 576, 1},
    {"DeepSeek-R1 MLA, page 64", 61, 1, 576, 64},
    {"Llama-3-70B TP8 K+V, page 16", 80, 2, 256, 16},
};

typedef struct side {
    pdx_engine_t *e;
    uint8_t      *pool;
    size_t        len;
    uint32_t      mem, layout;
} side_t;

/* ------------------------------------------------------------ engines */

static uint32_t req_pages(const model_t *m)
{
    return TOKENS / m->page;
}

static uint32_t pool_pages(const model_t *m)
{
    return 2 * req_pages(m);
}

/* An engine on nics softnic devices from softnic<first_dev - 1> (0: one NIC,
 * the first device). */
static int open_side(side_t *s, const model_t *m, const char *qps, uint32_t nics,
                     uint32_t first_dev)
{
    char nics_s[16], devs[64] = "";
    uint32_t nbuf = m->layers * m->parts, npages = pool_pages(m);
    uint64_t bpp = (uint64_t)m->bytes_per_token * m->page;
    pdx_buffer_desc_t *bufs = calloc(nbuf, sizeof(*bufs));
    pdx_group_desc_t group = {.buffers_per_layer = m->parts, .nbuffers = nbuf, .npages = npages,
                              .buffers = bufs};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                              .ngroups = 1, .layer_begin = 0, .layer_end = m->layers,
                              .groups = &group};
    pdx_config_t cfg;
    int rc = -1;

    memset(s, 0, sizeof(*s));
    s->len = (size_t)nbuf * npages * bpp;
    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "rdma");
    pdx_config_set(&cfg, "PDX_SHARDS", "1");
    pdx_config_set(&cfg, "PDX_LOG", "error"); /* null mode: decode rooms end with the engines */
    pdx_config_set(&cfg, "PDX_QPS_PER_PEER", qps);
    snprintf(nics_s, sizeof(nics_s), "%u", PDX_MAX(nics, 1u));
    pdx_config_set(&cfg, "PDX_NICS", nics_s);
    for (uint32_t k = 0; first_dev && k < nics; k++)
        snprintf(devs + strlen(devs), sizeof(devs) - strlen(devs), "%ssoftnic%u", k ? "," : "",
                 first_dev - 1 + k);
    pdx_config_set(&cfg, "PDX_IB_DEVICES", devs);
    s->pool = calloc(1, s->len);
    if (!bufs || !s->pool || pdx_engine_create(&cfg, &s->e) != PDX_OK ||
        pdx_mem_register(s->e, s->pool, s->len, &s->mem) != PDX_OK)
        goto out;
    for (uint32_t b = 0; b < nbuf; b++)
        bufs[b] = (pdx_buffer_desc_t){.mem = s->mem, .offset = (uint64_t)b * npages * bpp,
                                      .bytes_per_page = bpp};
    rc = pdx_layout_create(s->e, &desc, &s->layout) == PDX_OK ? 0 : -1;
out:
    free(bufs);
    return rc;
}

static void close_side(side_t *s)
{
    if (s->e)
        pdx_engine_destroy(s->e);
    free(s->pool);
    memset(s, 0, sizeof(*s));
}

static void page_map(uint32_t *v, uint32_t n, uint32_t pool, bool random, unsigned *seed)
{
    uint32_t *all = malloc(pool * sizeof(*all));

    for (uint32_t i = 0; i < pool; i++)
        all[i] = i;
    if (random)
        for (uint32_t i = pool - 1; i > 0; i--) {
            uint32_t j = (uint32_t)rand_r(seed) % (i + 1), t = all[i];

            all[i] = all[j];
            all[j] = t;
        }
    memcpy(v, all, n * sizeof(*v));
    free(all);
}

static pdx_room_state_t wait_state(pdx_engine_t *e, uint64_t room, int timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);
    pdx_room_state_t st;

    /* Sleeping polls leave the cores to the shard (a 2-vCPU machine has no
     * spare one); they add at most tens of microseconds. */
    while ((st = pdx_poll(e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED &&
           pdx_now_ns() < deadline)
        usleep(20);
    return st;
}

typedef struct result {
    uint64_t writes;        /* per request */
    uint64_t ibv_wrs;       /* send WRs softnic took, per request */
    uint64_t bytes;
    double   ns_per_wr;     /* median over REPS */
    double   decode_ms;     /* thread mode: send to decode SUCCESS, median */
} result_t;

/*
 * REPS requests of `m` from prefill to decode. Null mode: timed from
 * pdx_send to prefill SUCCESS (every WR completed); decode's rooms never
 * finish (nothing is delivered) and are dropped with the engines. Thread
 * mode: timed to decode SUCCESS.
 */
static int run_engines(const model_t *m, bool src_random, bool dst_random, const char *qps,
                       uint32_t nics, bool null_mode, result_t *r)
{
    uint32_t n = req_pages(m), *src = malloc(n * sizeof(*src)), *dst = malloc(n * sizeof(*dst));
    uint64_t ns[REPS];
    unsigned seed = 7;
    side_t pf, dc;
    uint32_t peer;
    int rc = -1;

    /* nics: prefill on softnic0.., decode on the devices after; 0: both on
     * the first device */
    if (open_side(&pf, m, qps, nics, nics ? 1 : 0) != 0 ||
        open_side(&dc, m, qps, nics, nics ? 1 + nics : 0) != 0 ||
        pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer) != PDX_OK)
        goto out;
    for (int rep = 0; rep < REPS; rep++) {
        uint64_t room = 100 + (uint64_t)rep, t0;
        pdx_pages_t s = {src, n}, d = {dst, n};
        pdx_stats_t before, after;
        softnic_stats_t sn0, sn1;

        page_map(src, n, pool_pages(m), src_random, &seed);
        page_map(dst, n, pool_pages(m), dst_random, &seed);
        if (pdx_expect(dc.e, peer, room, dc.layout, &d, NULL, 1, 60000) != PDX_OK)
            goto out;
        for (uint64_t dl = pdx_deadline_ns(5000); pdx_poll(pf.e, room) != PDX_ROOM_WAITING;)
            if (pdx_now_ns() > dl)
                goto out;
        pdx_engine_stats(pf.e, &before);
        softnic_stats(&sn0);
        t0 = pdx_now_ns();
        if (pdx_send(pf.e, room, pf.layout, &s, NULL, NULL, PDX_SEND_LAST) != PDX_OK ||
            wait_state(null_mode ? pf.e : dc.e, room, 60000) != PDX_ROOM_SUCCESS)
            goto out;
        ns[rep] = pdx_now_ns() - t0;
        softnic_stats(&sn1);
        pdx_engine_stats(pf.e, &after);
        r->ibv_wrs = sn1.wrs_posted - sn0.wrs_posted;
        r->writes = after.writes_posted - before.writes_posted;
        r->bytes = after.bytes_sent - before.bytes_sent;
        if (!null_mode)
            for (uint64_t dl = pdx_deadline_ns(5000);
                 pdx_release(dc.e, room) == PDX_INPROGRESS && pdx_now_ns() < dl;)
                usleep(100);
        for (uint64_t dl = pdx_deadline_ns(5000);
             pdx_release(pf.e, room) == PDX_INPROGRESS && pdx_now_ns() < dl;)
            usleep(100);
    }
    r->ns_per_wr = bench_percentile(ns, REPS, 50) / (double)r->writes;
    r->decode_ms = bench_percentile(ns, REPS, 50) / 1e6;
    rc = 0;
out:
    close_side(&pf);
    close_side(&dc);
    free(src);
    free(dst);
    return rc;
}

/* ------------------------------------------------ the hand-written poster */

typedef struct raw {
    struct ibv_device     **list;
    struct ibv_context     *ctx;
    struct ibv_pd          *pd;
    struct ibv_cq          *cq;
    struct ibv_qp          *qp[2];
    struct ibv_mr          *mr;
    uint8_t                *buf;
} raw_t;

static int raw_connect(raw_t *w, int i)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
    union ibv_gid gid;

    if (ibv_query_gid(w->ctx, 1, 1, &gid) ||
        ibv_modify_qp(w->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                        IBV_QP_ACCESS_FLAGS))
        return -1;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
                             .dest_qp_num = w->qp[!i]->qp_num, .max_dest_rd_atomic = 1,
                             .min_rnr_timer = 12,
                             .ah_attr = {.is_global = 1, .port_num = 1,
                                         .grh = {.dgid = gid, .sgid_index = 1, .hop_limit = 64}}};
    if (ibv_modify_qp(w->qp[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                                        IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = 18, .retry_cnt = 7,
                             .rnr_retry = 6, .max_rd_atomic = 1};
    return ibv_modify_qp(w->qp[i], &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                           IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                           IBV_QP_MAX_QP_RD_ATOMIC) ? -1 : 0;
}

static int raw_open(raw_t *w, size_t len)
{
    struct ibv_qp_init_attr qa = {.qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = SQ_DEPTH, .max_recv_wr = 16,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    int n = 0;

    memset(w, 0, sizeof(*w));
    w->list = ibv_get_device_list(&n);
    if (!w->list || n < 1 || !(w->ctx = ibv_open_device(w->list[0])) ||
        !(w->pd = ibv_alloc_pd(w->ctx)) || !(w->buf = calloc(1, len)) ||
        !(w->mr = ibv_reg_mr(w->pd, w->buf, len, IBV_ACCESS_LOCAL_WRITE |
                                                      IBV_ACCESS_REMOTE_WRITE)) ||
        !(w->cq = ibv_create_cq(w->ctx, 2 * SQ_DEPTH, NULL, NULL, 0)))
        return -1;
    qa.send_cq = qa.recv_cq = w->cq;
    for (int i = 0; i < 2; i++)
        if (!(w->qp[i] = ibv_create_qp(w->pd, &qa)))
            return -1;
    return raw_connect(w, 0) || raw_connect(w, 1) ? -1 : 0;
}

static void raw_close(raw_t *w)
{
    for (int i = 0; i < 2; i++)
        if (w->qp[i])
            ibv_destroy_qp(w->qp[i]);
    if (w->cq)
        ibv_destroy_cq(w->cq);
    if (w->mr)
        ibv_dereg_mr(w->mr);
    if (w->pd)
        ibv_dealloc_pd(w->pd);
    if (w->ctx)
        ibv_close_device(w->ctx);
    if (w->list)
        ibv_free_device_list(w->list);
    free(w->buf);
}

/* nwr WRITEs of `size` bytes at random offsets: ns per WR. */
static double raw_post(raw_t *w, size_t len, uint64_t nwr, uint32_t size)
{
    struct ibv_send_wr wr[CHAIN], *bad;
    struct ibv_sge sge[CHAIN];
    struct ibv_wc wc[16];
    static uint64_t offs[1u << 16]; /* random page offsets, drawn before timing */
    uint64_t posted = 0, freed = 0, t0;
    unsigned seed = 3;

    for (uint32_t i = 0; i < PDX_ARRAY_SIZE(offs); i++)
        offs[i] = (uint64_t)(rand_r(&seed) % (int)(len / size)) * size;
    for (uint32_t i = 0; i < CHAIN; i++) {
        sge[i] = (struct ibv_sge){.length = size, .lkey = w->mr->lkey};
        wr[i] = (struct ibv_send_wr){.sg_list = &sge[i], .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE,
                                     .next = i + 1 < CHAIN ? &wr[i + 1] : NULL,
                                     .wr.rdma = {.rkey = w->mr->rkey}};
    }
    t0 = pdx_now_ns();
    /* Post while the queue has room; at the end wait for the last WR, which
     * is signaled (nwr is a multiple of SIGNAL). */
    while (posted < nwr || freed < posted) {
        while (posted + CHAIN - freed > SQ_DEPTH || (posted == nwr && freed < posted)) {
            int got = ibv_poll_cq(w->cq, 16, wc);

            if (got < 0) {
                fprintf(stderr, "bench_post: ibv_poll_cq: %d\n", got);
                return -1;
            }
            for (int i = 0; i < got; i++) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    fprintf(stderr, "bench_post: WR %llu: %s\n",
                            (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
                    return -1;
                }
                freed = wc[i].wr_id + 1;
            }
        }
        if (posted == nwr)
            break;
        for (uint32_t i = 0; i < CHAIN; i++) {
            uint64_t off = offs[(posted + i) % PDX_ARRAY_SIZE(offs)];

            sge[i].addr = (uintptr_t)w->buf + off;
            wr[i].wr.rdma.remote_addr = (uintptr_t)w->buf + (len - size - off);
            wr[i].wr_id = posted + i;
            wr[i].send_flags = (posted + i + 1) % SIGNAL == 0 ? IBV_SEND_SIGNALED : 0;
        }
        int err = ibv_post_send(w->qp[0], wr, &bad);

        if (err) {
            fprintf(stderr, "bench_post: ibv_post_send: %s\n", strerror(err));
            return -1;
        }
        posted += CHAIN;
    }
    return (double)(pdx_now_ns() - t0) / (double)posted;
}

/* ------------------------------------------------------------------ main */

static int configure(softnic_mode_t mode, uint64_t qp_bw, uint64_t nic_bw, uint32_t devices)
{
    softnic_config_t c;

    softnic_config_default(&c);
    c.mode = mode;
    c.qp_bw = qp_bw;
    c.nic_bw = nic_bw;
    c.devices = devices;
    c.move_data = mode != SOFTNIC_NULL;
    return softnic_configure(&c);
}

int main(int argc, char **argv)
{
    const bool null_only = argc > 1 && strcmp(argv[1], "--null") == 0;
    static const char *maps[] = {"contiguous", "random", "rand>contig"};
    const size_t raw_len = 64u << 20;
    double raw_ns[REPS], best_ratio = 0, worst_ns = 0;
    result_t r;
    raw_t w;

    if (configure(SOFTNIC_NULL, 0, 0, 1) != 0 || raw_open(&w, raw_len) != 0) {
        fprintf(stderr, "bench_post: softnic setup failed\n");
        return 1;
    }
    for (int i = 0; i < REPS; i++)
        raw_ns[i] = raw_post(&w, raw_len, 1u << 20, 576);
    raw_close(&w);
    qsort(raw_ns, REPS, sizeof(raw_ns[0]), bench_cmp_double);
    if (raw_ns[0] < 0) {
        fprintf(stderr, "bench_post: the hand-written poster failed\n");
        return 1;
    }
    printf("rdma post path on softnic null mode (WRs complete at post, no bytes move)\n");
    printf("hand-written poster: chains of %u WRITEs, SQ %u, signal every %u: %.1f ns/WR, "
           "%.1f M WR/s\n\n", CHAIN, SQ_DEPTH, SIGNAL, raw_ns[REPS / 2], 1e3 / raw_ns[REPS / 2]);
    printf("%-30s %-11s %8s %8s %9s %9s %9s %8s\n", "request of 4096 tokens", "page map",
           "WRs", "ibv WRs", "B/WR", "ns/WR", "M WR/s", "ratio");
    printf("-----------------------------------------------------------------------------------"
           "--------------\n");
    for (size_t i = 0; i < PDX_ARRAY_SIZE(models); i++)
        for (int map = 0; map < 3; map++) {
            double ratio;

            if (run_engines(&models[i], map != 0, map == 1, "2", 0, true, &r) != 0) {
                fprintf(stderr, "bench_post: %s, %s map failed\n", models[i].name, maps[map]);
                return 1;
            }
            ratio = raw_ns[REPS / 2] / r.ns_per_wr;
            printf("%-30s %-11s %8llu %8llu %9.0f %9.1f %9.2f %7.2fx\n", models[i].name,
                   maps[map], (unsigned long long)r.writes, (unsigned long long)r.ibv_wrs,
                   (double)r.bytes / (double)r.writes, r.ns_per_wr, 1e3 / r.ns_per_wr, ratio);
            /* Only requests of many WRs say anything about the rate. */
            if (r.writes >= 10000) {
                worst_ns = PDX_MAX(worst_ns, r.ns_per_wr);
                best_ratio = best_ratio == 0 ? ratio : PDX_MIN(best_ratio, ratio);
            }
        }
    printf("\nrequests of >= 10,000 WRs: worst %.1f ns/WR (target <= 20), lowest ratio %.2f "
           "of the hand-written poster (target >= 0.5)\n\n", worst_ns, best_ratio);
    if (null_only)
        return 0;

    printf("thread mode, 1 GB/s per QP, bytes moved: %s, contiguous map\n", models[1].name);
    printf("%-14s %12s %10s\n", "QPs per peer", "ms/request", "GB/s");
    printf("--------------------------------------\n");
    if (configure(SOFTNIC_THREAD, 1000000000ull, 0, 1) != 0)
        return 1;
    double ms[2];
    for (int q = 0; q < 2; q++) {
        if (run_engines(&models[1], false, false, q ? "2" : "1", 0, false, &r) != 0) {
            fprintf(stderr, "bench_post: bandwidth run with %d QPs failed\n", q + 1);
            return 1;
        }
        ms[q] = r.decode_ms;
        printf("%-14d %12.1f %10.2f\n", q + 1, ms[q], (double)r.bytes / (ms[q] * 1e6));
    }
    printf("2 QPs vs 1: %.2fx\n\n", ms[0] / ms[1]);

    printf("thread mode, 1 GB/s per NIC, bytes moved: %s, contiguous map\n", models[1].name);
    printf("%-14s %12s %10s\n", "NICs per side", "ms/request", "GB/s");
    printf("--------------------------------------\n");
    if (configure(SOFTNIC_THREAD, 0, 1000000000ull, 4) != 0)
        return 1;
    for (uint32_t k = 0; k < 2; k++) {
        if (run_engines(&models[1], false, false, "2", k + 1, false, &r) != 0) {
            fprintf(stderr, "bench_post: bandwidth run with %u NICs failed\n", k + 1);
            return 1;
        }
        ms[k] = r.decode_ms;
        printf("%-14u %12.1f %10.2f\n", k + 1, ms[k], (double)r.bytes / (ms[k] * 1e6));
    }
    printf("2 NICs vs 1: %.2fx\n", ms[0] / ms[1]);
    return 0;
}
