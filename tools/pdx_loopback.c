/*
 * pdx-loopback: one prefill -> decode KV transfer over a transport on this
 * host, verified byte for byte. Two transport instances (the prefill and the
 * decode "NIC") in one process; decode picks each request's destination
 * pages at random from its pool; the plan coalesces them into writes, which
 * are posted with send-queue credits and followed by a notify record; decode
 * checks every byte of every page of every layer when the notify arrives.
 *
 * This drives the transport and the planner directly; the engine's
 * two-process pdx-bench supersedes it.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

typedef struct side {
    pdx_tp_t    *tp;
    pdx_tp_cq_t *cq;
    pdx_tp_ep_t *ep;
    pdx_tp_mr_t *mr;      /* the KV pool */
    pdx_tp_mr_t *msg_mr;  /* notify buffers */
    uint8_t     *pool;
    uint8_t      msg[PDX_TP_SEND_MAX];
} side_t;

typedef struct opts {
    uint32_t layers, bytes_per_token, page_size, pages, requests, sq_depth, signal_every;
    uint64_t pool_bytes, max_msg;
    uint32_t timeout_ms;
} opts_t;

static const pdx_transport_ops_t *ops = &pdx_tcp_ops;

/* The byte pattern: a function of (request, layer, position in the request, word). */
static inline uint64_t pattern(uint64_t room, uint32_t layer, uint32_t pos, uint64_t word)
{
    return pdx_hash64(room * 0x100000001b3ull ^ (uint64_t)layer << 48 ^ (uint64_t)pos << 24 ^ word);
}

static uint8_t *page_at(uint8_t *pool, uint64_t npages, uint64_t bpp, uint32_t layer, uint32_t page)
{
    return pool + ((uint64_t)layer * npages + page) * bpp;
}

static void pick_pages(uint32_t *out, uint32_t n, uint32_t npages, unsigned *seed)
{
    uint8_t *used = calloc(npages, 1);

    for (uint32_t i = 0; i < n; i++) {
        uint32_t p;

        do
            p = (uint32_t)rand_r(seed) % npages;
        while (used[p]);
        used[p] = 1;
        out[i] = p;
    }
    free(used);
}

/* Wait for one completion on side's CQ; every wait has a deadline. */
static int wait_wc(side_t *s, pdx_tp_wc_t *wc, uint32_t timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns(timeout_ms);

    while (pdx_now_ns() < deadline) {
        if (ops->cq_poll(s->cq, wc, 1) == 1) {
            if (wc->status != PDX_OK) {
                fprintf(stderr, "pdx-loopback: completion %" PRIu64 " failed: %s (%s)\n",
                        wc->wr_id, pdx_status_str(wc->status), ops->ep_error(wc->ep));
                return -1;
            }
            return 0;
        }
        pdx_cpu_relax();
    }
    fprintf(stderr, "pdx-loopback: no completion within %u ms\n", timeout_ms);
    return -1;
}

static int open_side(side_t *s, const opts_t *o, const pdx_tp_ep_attr_t *attr)
{
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = o->timeout_ms,
                              .max_msg_size = o->max_msg};

    s->pool = aligned_alloc(4096, (o->pool_bytes + 4095) & ~4095ull);
    if (!s->pool)
        return -1;
    memset(s->pool, 0, o->pool_bytes);
    if (ops->open(&params, &s->tp) != PDX_OK ||
        ops->cq_create(s->tp, attr->sq_depth + attr->rq_depth, &s->cq) != PDX_OK ||
        ops->ep_create(s->tp, s->cq, attr, &s->ep) != PDX_OK ||
        ops->mr_reg(s->tp, s->pool, o->pool_bytes,
                    PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE, &s->mr) != PDX_OK ||
        ops->mr_reg(s->tp, s->msg, sizeof(s->msg), PDX_TP_ACCESS_LOCAL_WRITE, &s->msg_mr) != PDX_OK)
        return -1;
    return 0;
}

static void close_side(side_t *s)
{
    if (s->ep)
        ops->ep_destroy(s->ep);
    if (s->msg_mr)
        ops->mr_dereg(s->msg_mr);
    if (s->mr)
        ops->mr_dereg(s->mr);
    if (s->cq)
        ops->cq_destroy(s->cq);
    if (s->tp)
        ops->close(s->tp);
    free(s->pool);
}

/* One-group layout: one MLA buffer per layer, layer-major in mem 0. */
static pdx_layout_t *make_layout(const opts_t *o, uint64_t npages, uint64_t bpp)
{
    pdx_buffer_desc_t *bufs = calloc(o->layers, sizeof(*bufs));
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = o->layers, .npages = npages,
                              .buffers = bufs};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                              .ngroups = 1, .layer_begin = 0, .layer_end = o->layers,
                              .groups = &group};
    pdx_layout_t *layout = NULL;
    char err[256];

    for (uint32_t l = 0; l < o->layers; l++) {
        bufs[l].offset = (uint64_t)l * npages * bpp;
        bufs[l].bytes_per_page = bpp;
    }
    if (pdx_layout_from_desc(&desc, &layout, err, sizeof(err)) != PDX_OK)
        fprintf(stderr, "pdx-loopback: %s\n", err);
    free(bufs);
    return layout;
}

/* Post every run of the plan with send-queue credits, then the notify. */
static int send_request(side_t *pf, const opts_t *o, pdx_plan_t *plan, const pdx_tp_rkey_t *rkey,
                        uint64_t room, uint64_t *writes_p)
{
    pdx_tp_write_t wr[32];
    pdx_run_t runs[32];
    uint64_t posted = 0, completed = 0;
    uint32_t n;
    pdx_tp_wc_t wc;
    pdx_wire_notify_t notify = {.room = room, .sender = 1, .seq = 0,
                                .flags = PDX_WIRE_NOTIFY_LAST};
    uint8_t rec[PDX_WIRE_NOTIFY_SIZE];
    size_t len;

    while ((n = pdx_plan_next(plan, runs, (uint32_t)PDX_ARRAY_SIZE(runs))) > 0) {
        while (posted + n - completed > o->sq_depth) {   /* credits */
            if (wait_wc(pf, &wc, o->timeout_ms) != 0)
                return -1;
            completed = wc.wr_id + 1;
        }
        for (uint32_t i = 0; i < n; i++) {
            uint64_t id = posted + i;

            wr[i] = (pdx_tp_write_t){
                .wr_id = id, .mr = pf->mr, .offset = runs[i].src_offset, .length = runs[i].len,
                .remote_addr = rkey->addr + runs[i].dst_offset, .rkey = rkey->rkey,
                .flags = (id + 1) % o->signal_every == 0 ? PDX_TP_SIGNALED : 0};
        }
        if (ops->post_write(pf->ep, wr, n) != PDX_OK)
            return -1;
        posted += n;
    }
    notify.count = (uint32_t)posted;
    pdx_wire_notify_encode(&notify, rec, sizeof(rec), &len);
    if (ops->post_send(pf->ep, posted, rec, (uint32_t)len, PDX_TP_SIGNALED) != PDX_OK)
        return -1;
    while (completed <= posted) {
        if (wait_wc(pf, &wc, o->timeout_ms) != 0)
            return -1;
        completed = wc.wr_id + 1;
    }
    *writes_p += posted;
    return 0;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: pdx-loopback [-L layers] [-b bytes-per-token-per-layer] [-P page-size]\n"
            "                    [-p pages-per-request] [-n requests] [-m pool-MiB] [-s max-msg]\n");
}

int main(int argc, char **argv)
{
    opts_t o = {.layers = 61, .bytes_per_token = 576, .page_size = 64, .pages = 64,
                .requests = 16, .pool_bytes = 1ull << 30, .max_msg = 1 << 20, .sq_depth = 256,
                .signal_every = 16, .timeout_ms = 10000};
    pdx_tp_ep_attr_t attr;
    side_t pf = {0}, dc = {0};
    pdx_layout_t *src_layout = NULL, *dst_layout = NULL;
    pdx_tp_addr_t a, b;
    pdx_tp_rkey_t rkey;
    uint32_t *src = NULL, *dst = NULL;
    uint64_t npages, bpp, bytes = 0, writes = 0, xfer_ns = 0, bad = 0;
    unsigned seed = 2024;
    int opt, rc = 1;

    while ((opt = getopt(argc, argv, "L:b:P:p:n:m:s:h")) != -1) {
        switch (opt) {
        case 'L': o.layers = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'b': o.bytes_per_token = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'P': o.page_size = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'p': o.pages = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'n': o.requests = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'm': o.pool_bytes = strtoull(optarg, NULL, 0) << 20; break;
        case 's': o.max_msg = strtoull(optarg, NULL, 0); break;
        default: usage(); return opt == 'h' ? 0 : 2;
        }
    }
    bpp = (uint64_t)o.bytes_per_token * o.page_size;
    if (!o.layers || !bpp || !o.pages || bpp % 8) {
        usage();
        return 2;
    }
    npages = o.pool_bytes / ((uint64_t)o.layers * bpp);
    if (npages < o.pages || npages > UINT32_MAX) {
        fprintf(stderr, "pdx-loopback: a pool of %" PRIu64 " MiB holds %" PRIu64
                " pages, fewer than one request's %u\n", o.pool_bytes >> 20, npages, o.pages);
        return 2;
    }
    o.pool_bytes = npages * o.layers * bpp;
    attr = (pdx_tp_ep_attr_t){.sq_depth = o.sq_depth + 1, .rq_depth = 4};

    src = malloc(o.pages * sizeof(*src));
    dst = malloc(o.pages * sizeof(*dst));
    src_layout = make_layout(&o, npages, bpp);
    dst_layout = make_layout(&o, npages, bpp);
    if (!src || !dst || !src_layout || !dst_layout || open_side(&pf, &o, &attr) != 0 ||
        open_side(&dc, &o, &attr) != 0) {
        fprintf(stderr, "pdx-loopback: setup failed\n");
        goto out;
    }
    ops->ep_address(pf.ep, &a);
    ops->ep_address(dc.ep, &b);
    if (ops->ep_connect(pf.ep, &b) != PDX_OK || ops->ep_connect(dc.ep, &a) != PDX_OK)
        goto out;
    ops->mr_remote(dc.mr, &rkey);

    printf("pdx-loopback: %u layers x %u B/token, page size %u (%" PRIu64 " B per page per layer), "
           "%u pages per request, pool %" PRIu64 " pages (%" PRIu64 " MiB) per side, transport %s\n",
           o.layers, o.bytes_per_token, o.page_size, bpp, o.pages, npages, o.pool_bytes >> 20,
           ops->name);

    for (uint64_t room = 1; room <= o.requests; room++) {
        pdx_pages_t sp = {src, o.pages}, dp = {dst, o.pages};
        pdx_wire_notify_t notify;
        pdx_plan_t plan;
        pdx_tp_wc_t wc;
        char err[256];
        uint64_t t0;

        pick_pages(src, o.pages, (uint32_t)npages, &seed);
        pick_pages(dst, o.pages, (uint32_t)npages, &seed);
        for (uint32_t l = 0; l < o.layers; l++)
            for (uint32_t i = 0; i < o.pages; i++) {
                uint64_t *w = (uint64_t *)page_at(pf.pool, npages, bpp, l, src[i]);
                for (uint64_t k = 0; k < bpp / 8; k++)
                    w[k] = pattern(room, l, i, k);
            }
        if (ops->post_recv(dc.ep, room, dc.msg_mr, 0, sizeof(dc.msg)) != PDX_OK)
            goto out;
        if (pdx_plan_init(&plan, src_layout, dst_layout, &sp, &dp, o.max_msg, PDX_PLAN_STATE, err,
                          sizeof(err)) != PDX_OK) {
            fprintf(stderr, "pdx-loopback: plan: %s\n", err);
            goto out;
        }
        t0 = pdx_now_ns();
        if (send_request(&pf, &o, &plan, &rkey, room, &writes) != 0 ||
            wait_wc(&dc, &wc, o.timeout_ms) != 0)
            goto out;
        xfer_ns += pdx_now_ns() - t0;
        if (wc.opcode != PDX_TP_OP_RECV ||
            pdx_wire_notify_decode(dc.msg, wc.byte_len, &notify, NULL) != PDX_OK ||
            notify.room != room) {
            fprintf(stderr, "pdx-loopback: room %" PRIu64 ": bad notify\n", room);
            goto out;
        }
        for (uint32_t l = 0; l < o.layers; l++)
            for (uint32_t i = 0; i < o.pages; i++) {
                const uint64_t *w = (const uint64_t *)page_at(dc.pool, npages, bpp, l, dst[i]);
                for (uint64_t k = 0; k < bpp / 8; k++) {
                    if (w[k] != pattern(room, l, i, k) && bad++ < 5)
                        fprintf(stderr, "pdx-loopback: room %" PRIu64 " layer %u page %u (position "
                                "%u) byte %" PRIu64 " differs\n", room, l, dst[i], i, k * 8);
                }
            }
        bytes += (uint64_t)o.layers * o.pages * bpp;
    }

    printf("%-12s %-10s %-12s %-12s %-10s %-10s\n", "#bytes", "#requests", "#writes", "pages/req",
           "BW[GB/s]", "verified");
    printf("------------------------------------------------------------------------\n");
    printf("%-12" PRIu64 " %-10u %-12" PRIu64 " %-12u %-10.2f %-10s\n", bytes, o.requests, writes,
           o.pages, xfer_ns ? (double)bytes / (double)xfer_ns : 0.0, bad ? "NO" : "yes");
    if (bad)
        fprintf(stderr, "pdx-loopback: %" PRIu64 " words differ\n", bad);
    rc = bad ? 1 : 0;
out:
    close_side(&pf);
    close_side(&dc);
    pdx_layout_free(src_layout);
    pdx_layout_free(dst_layout);
    free(src);
    free(dst);
    return rc;
}
