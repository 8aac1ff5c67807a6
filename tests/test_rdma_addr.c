/*
 * The rdma transport over softnic: which device a tp picks, and how its
 * eps address each other: the GID on RoCE (IPv4-mapped, IPv6, only a
 * link-local one), the LID on InfiniBand (with a GRH when PDX_IB_GID_INDEX
 * is set), the MTU, and the QP knobs, seen through the QP attributes.
 * Each test checks that it leaves no file descriptor and no verbs object
 * behind (rdma_fixture.h).
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

/* A tp with a CQ and an ep (sq 4). */
typedef struct side {
    pdx_tp_t    *tp;
    pdx_tp_cq_t *cq;
    pdx_tp_ep_t *ep;
} side_t;

static void side_open(side_t *s, pdx_tp_t *tp)
{
    s->tp = tp;
    s->cq = fx_cq_new(ops, tp, 4);
    s->ep = fx_ep_new(ops, tp, s->cq, 4, 0);
}

static void side_close(side_t *s)
{
    ops->ep_destroy(s->ep);
    ops->cq_destroy(s->cq);
    ops->close(s->tp);
}

/* a's ep writes 4 KiB into a region of b: it completes and lands. */
static void write_lands(const side_t *a, const side_t *b)
{
    uint8_t src[4096], dst[4096] = {0};
    pdx_tp_mr_t *smr = fx_mr_new(ops, a->tp, src, sizeof(src), 0);
    pdx_tp_mr_t *dmr = fx_mr_new(ops, b->tp, dst, sizeof(dst), FX_RW);
    pdx_tp_rkey_t rk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;

    fx_fill_random(src, sizeof(src));
    ops->mr_remote(dmr, &rk);
    w = (pdx_tp_write_t){.wr_id = 1, .mr = smr, .length = sizeof(src), .remote_addr = rk.addr,
                         .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(a->ep, &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(a->cq, &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(dst, src, sizeof(src)), 0, "%s", ops->ep_error(a->ep));
    cr_assert_eq(ops->mr_dereg(smr), PDX_OK);
    cr_assert_eq(ops->mr_dereg(dmr), PDX_OK);
}

/* Whether the log holds a line "... pdx <level> ..." that contains text. */
static bool log_has(const char *log, const char *level, const char *text)
{
    char head[16];

    snprintf(head, sizeof(head), "pdx %s ", level);
    for (const char *l = log; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        const char *end = strchr(l, '\n'), *hit = strstr(l, text), *h = strstr(l, head);

        if (h && hit && (!end || (h < end && hit < end)))
            return true;
    }
    return false;
}

Test(rdma_addr, open_close_and_device_choice)
{
    softnic_config_t c = fx_nic(1, SOFTNIC_THREAD);
    pdx_tp_t *tp = NULL, *tp2 = (pdx_tp_t *)0x1;
    uint8_t buf[256];
    pdx_tp_mr_t *mr;
    pdx_tp_ep_t *ep;
    pdx_tp_cq_t *cq;
    fx_nic_env_t env;

    fx_nic_env_begin(&env, &c);
    cr_assert_eq(ops->open(NULL, &tp), PDX_OK, "no params, no config: defaults");
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic0");
    cr_assert_eq(rdma_tp(tp)->max_msg_size, 1u << 20);
    cq = fx_cq_new(ops, tp, 16);
    ep = fx_ep_new(ops, tp, cq, 4, 4);
    mr = fx_mr_new(ops, tp, buf, sizeof(buf), FX_RW);
    (void)fx_mr_new(ops, tp, buf, 64, FX_RW);
    /* an ep not connected yet takes receives, not sends */
    cr_assert_eq(ops->post_recv(ep, 1, mr, 0, 64), PDX_OK);
    cr_assert_eq(ops->post_send(ep, 2, "x", 1, 0), PDX_ERR_STATE);
    ops->cq_destroy(cq); /* refused while an ep uses it */
    ops->close(tp);      /* warns, frees the ep, the CQ and both regions */
    fx_nic_env_end(&env, true);

    c.no_devices = true;
    fx_nic_env_begin(&env, &c);
    cr_assert_eq(fx_tp_try(&tp2, NULL), PDX_ERR_NO_DEVICE, "quiet: info, the engine falls back");
    cr_assert_eq(pdx_log_error_count(), env.fx.errors);
    cr_assert_eq(ops->open(&(pdx_tp_params_t){0}, &tp2), PDX_ERR_NO_DEVICE);
    cr_assert_eq(pdx_log_error_count(), env.fx.errors + 1, "not quiet: one error says why");
    cr_assert_eq(tp2, (pdx_tp_t *)0x1, "output written on failure");
    fx_nic_env_end(&env, true);

    c = fx_nic(2, SOFTNIC_THREAD);
    fx_nic_env_begin(&env, &c);
    cr_assert_eq(fx_tp_try(&tp, NULL), PDX_OK);
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic0", "no filter: the first device");
    cr_assert_eq(fx_tp_try(&tp2, "PDX_IB_DEVICES", "nosuch, softnic1,softnic0", NULL), PDX_OK);
    cr_assert_str_eq(rdma_tp(tp2)->dev.name, "softnic1", "the filter's order");
    ops->close(tp2);
    cr_assert_eq(fx_tp_try(&tp2, "PDX_IB_DEVICES", "nosuch", NULL), PDX_ERR_NO_DEVICE);
    cr_assert_eq(fx_tp_try(&tp2, "PDX_IB_GID_INDEX", "5", NULL), PDX_ERR_NO_DEVICE);
    ops->close(tp);
    fx_nic_env_end(&env, false);
}

/* GID choice, MTU negotiation and the QP knobs, seen through the QP attributes */
Test(rdma_addr, addressing_and_knobs)
{
    static const uint8_t v4[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1};
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    struct ibv_qp_attr q[2];
    pdx_tp_addr_t a[2], ll;
    pdx_tp_t *tp2;
    pdx_tp_cq_t *cq2;
    pdx_tp_ep_t *ep2;
    fx_rig_t r;

    c.active_mtu = IBV_MTU_2048;
    fx_rig_open(&r, &c, 64, 4, 0);
    for (int i = 0; i < 2; i++)
        ops->ep_destroy(r.ep[i]);
    ops->close(r.tp[1]); /* again, with settings */
    cr_assert_eq(fx_tp_try(&r.tp[1], "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "1",
                           "PDX_IB_HOP_LIMIT", "7", "PDX_IB_RNR_RETRY", "3", NULL), PDX_OK);
    r.cq[1] = fx_cq_new(ops, r.tp[1], 4);
    r.dmr = fx_mr_new(ops, r.tp[1], r.dst, r.len, FX_RW);
    for (int i = 0; i < 2; i++) {
        r.ep[i] = fx_ep_new(ops, r.tp[i], r.cq[i], 4, 0);
        ops->ep_address(r.ep[i], &a[i]);
        cr_assert_eq(a[i].len, 32u);
        cr_assert_eq(a[i].bytes[2], IBV_MTU_2048, "the address carries the active MTU");
    }
    cr_assert_arr_eq(a[0].bytes + 16, v4, 16, "the RoCEv2 IPv4-mapped GID (index 1)");
    /* a GID of the other family (link-local RoCEv1, index 0) is refused both ways */
    cr_assert_eq(fx_tp_try(&tp2, "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "0", NULL),
                 PDX_OK);
    cq2 = fx_cq_new(ops, tp2, 4);
    ep2 = fx_ep_new(ops, tp2, cq2, 4, 0);
    ops->ep_address(ep2, &ll);
    cr_assert_eq(ll.bytes[16], 0xfe, "PDX_IB_GID_INDEX=0: the link-local RoCEv1 GID");
    cr_assert_eq(ops->ep_connect(r.ep[0], &ll), PDX_ERR_INVALID, "IPv4-mapped meets link-local");
    cr_assert_eq(ops->ep_connect(ep2, &a[0]), PDX_ERR_INVALID);
    ops->ep_destroy(ep2);
    ops->cq_destroy(cq2);
    ops->close(tp2);
    a[1].bytes[2] = IBV_MTU_1024; /* as a peer with a smaller MTU would say */
    cr_assert_eq(ops->ep_connect(r.ep[0], &a[1]), PDX_OK);
    cr_assert_eq(ops->ep_connect(r.ep[1], &a[0]), PDX_OK);
    for (int i = 0; i < 2; i++) {
        q[i] = fx_qp_query(r.ep[i]);
        cr_assert(q[i].qp_state == IBV_QPS_RTS && q[i].timeout == 18);
    }
    cr_assert_eq(q[0].path_mtu, IBV_MTU_1024, "the smaller of both active MTUs");
    cr_assert_eq(q[1].path_mtu, IBV_MTU_2048);
    cr_assert(q[0].ah_attr.grh.sgid_index == 1 && q[1].ah_attr.grh.sgid_index == 1);
    cr_assert(q[0].ah_attr.grh.hop_limit == 64 && q[1].ah_attr.grh.hop_limit == 7);
    cr_assert(q[0].rnr_retry == 6 && q[1].rnr_retry == 3);
    fx_rig_close(&r, true); /* the refused connects said why */
}

/* ------------------------------------------------------------ RoCE GIDs */

/*
 * A RoCE port whose only RoCEv2 GID is link-local (an interface without an
 * address: RoCEv1 and RoCEv2 fe80::): the device is used, with a warning
 * that names the GID (not routable), and two such eps connect and transfer.
 */
Test(rdma_addr, link_local_gid_is_used_with_a_warning)
{
    static const uint8_t ll[2][16] = {
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 1},
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2},
    };
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    fx_log_capture_t cap;
    struct ibv_qp_attr q;
    fx_nic_env_t env;
    pdx_tp_addr_t a;
    side_t s[2];
    pdx_tp_t *tp;
    char *log;

    c.gids = SOFTNIC_GIDS_LINK_LOCAL;
    fx_nic_env_begin(&env, &c);
    fx_log_capture_begin(&cap);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL), PDX_OK);
        side_open(&s[i], tp);
    }
    log = fx_log_capture_end(&cap);
    cr_assert(log_has(log, "warn", "softnic0 port 1 has no IPv4-mapped RoCEv2 GID; using GID "
                                   "index 1 (fe80::ff:fe00:1), which is link-local"), "%s", log);
    cr_assert(log_has(log, "warn", "softnic1 port 1 has no IPv4-mapped RoCEv2 GID; using GID "
                                   "index 1 (fe80::ff:fe00:2), which is link-local"), "%s", log);
    free(log);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rdma_tp(s[i].tp)->dev.gid_index, 1, "the RoCEv2 GID, not RoCEv1's 0");
        ops->ep_address(s[i].ep, &a);
        cr_assert_eq(a.bytes[3], 1, "the address carries the GID");
        cr_assert_arr_eq(a.bytes + 16, ll[i], 16);
    }
    fx_connect_eps(ops, s[0].ep, s[1].ep);
    for (int i = 0; i < 2; i++) {
        q = fx_qp_query(s[i].ep);
        cr_assert(q.ah_attr.is_global && q.ah_attr.grh.sgid_index == 1);
        cr_assert_arr_eq(q.ah_attr.grh.dgid.raw, ll[1 - i], 16);
    }
    write_lands(&s[0], &s[1]);
    write_lands(&s[1], &s[0]);
    for (int i = 0; i < 2; i++)
        side_close(&s[i]);
    fx_nic_env_end(&env, false);
}

/*
 * An interface with a global IPv6 address and no IPv4 one: its RoCEv2 GID
 * (index 3) is used, not the link-local RoCEv2 GID before it, and nothing
 * warns; the eps transfer over it.
 */
Test(rdma_addr, ipv6_gid_is_preferred_to_link_local)
{
    static const uint8_t v6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    fx_log_capture_t cap;
    struct ibv_qp_attr q;
    fx_nic_env_t env;
    pdx_tp_addr_t a;
    side_t s[2];
    pdx_tp_t *tp;
    char *log;

    c.gids = SOFTNIC_GIDS_IPV6;
    fx_nic_env_begin(&env, &c);
    fx_log_capture_begin(&cap);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL), PDX_OK);
        side_open(&s[i], tp);
    }
    log = fx_log_capture_end(&cap);
    cr_assert(!strstr(log, "link-local"), "%s", log);
    free(log);
    cr_assert_eq(rdma_tp(s[1].tp)->dev.gid_index, 3);
    ops->ep_address(s[1].ep, &a);
    cr_assert_arr_eq(a.bytes + 16, v6, 16);
    fx_connect_eps(ops, s[0].ep, s[1].ep);
    q = fx_qp_query(s[0].ep);
    cr_assert(q.ah_attr.is_global && q.ah_attr.grh.sgid_index == 3);
    cr_assert_arr_eq(q.ah_attr.grh.dgid.raw, v6, 16);
    write_lands(&s[0], &s[1]);
    write_lands(&s[1], &s[0]);
    for (int i = 0; i < 2; i++)
        side_close(&s[i]);
    fx_nic_env_end(&env, false);
}

/* ---------------------------------------------------------- InfiniBand */

/*
 * InfiniBand: the LID addresses the port. Without PDX_IB_GID_INDEX there is
 * no GRH (is_global 0, dlid the peer's LID) and the address carries the LID
 * and no GID; with it, a GRH with that GID as well. Either way the eps
 * transfer. An ep that routes by GID refuses a peer whose address has none,
 * any ep an address of another link layer, and a GID index the port lacks
 * finds no device.
 */
Test(rdma_addr, infiniband_addresses_by_lid)
{
    static const uint8_t gid[2][16] = {
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 1},
        {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 2},
    };
    static const uint16_t lid[2] = {0x11, 0x222};
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    struct ibv_qp_attr q;
    pdx_tp_addr_t a[2], bad;
    fx_nic_env_t env;
    side_t s[2], g;
    pdx_tp_t *tp;

    c.link_layer = IBV_LINK_LAYER_INFINIBAND;
    c.lid_dev[0] = lid[0];
    c.lid_dev[1] = lid[1];
    fx_nic_env_begin(&env, &c);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL), PDX_OK);
        side_open(&s[i], tp);
        cr_assert_eq(rdma_tp(tp)->dev.link_layer, IBV_LINK_LAYER_INFINIBAND);
        cr_assert_eq(rdma_tp(tp)->dev.lid, lid[i]);
        cr_assert_eq(rdma_tp(tp)->dev.gid_index, -1, "no GRH unless PDX_IB_GID_INDEX says");
        ops->ep_address(s[i].ep, &a[i]);
        cr_assert_eq(a[i].bytes[1], IBV_LINK_LAYER_INFINIBAND);
        cr_assert_eq(a[i].bytes[3], 0, "no GID in the address");
        cr_assert(a[i].bytes[12] == (lid[i] & 0xff) && a[i].bytes[13] == lid[i] >> 8, "the LID");
    }
    bad = a[1];
    bad.bytes[1] = IBV_LINK_LAYER_ETHERNET;
    cr_assert_eq(ops->ep_connect(s[0].ep, &bad), PDX_ERR_INVALID, "a RoCE peer");
    fx_connect_eps(ops, s[0].ep, s[1].ep);
    for (int i = 0; i < 2; i++) {
        q = fx_qp_query(s[i].ep);
        cr_assert_eq(q.qp_state, IBV_QPS_RTS);
        cr_assert_eq(q.ah_attr.is_global, 0);
        cr_assert_eq(q.ah_attr.dlid, lid[1 - i], "the peer's LID");
    }
    write_lands(&s[0], &s[1]);
    write_lands(&s[1], &s[0]);

    /* softnic1 with a GRH: it refuses a peer without a GID; that peer,
     * which routes by LID, may still connect to it */
    side_close(&s[1]);
    cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "0", NULL),
                 PDX_OK);
    side_open(&s[1], tp);
    cr_assert_eq(rdma_tp(tp)->dev.gid_index, 0);
    ops->ep_address(s[1].ep, &a[1]);
    cr_assert_eq(a[1].bytes[3], 1, "the GID in the address");
    cr_assert_arr_eq(a[1].bytes + 16, gid[1], 16);
    cr_assert(a[1].bytes[12] == (lid[1] & 0xff) && a[1].bytes[13] == lid[1] >> 8);
    side_open(&g, s[0].tp); /* a second ep of softnic0, without a GRH */
    ops->ep_address(g.ep, &a[0]);
    cr_assert_eq(ops->ep_connect(s[1].ep, &a[0]), PDX_ERR_INVALID, "a peer without a GID");
    cr_assert_eq(ops->ep_connect(g.ep, &a[1]), PDX_OK, "by LID: a GID is not needed");
    ops->ep_destroy(g.ep);
    ops->cq_destroy(g.cq);

    /* both with a GRH: GID and LID */
    side_close(&s[0]);
    side_close(&s[1]);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", i ? "softnic1" : "softnic0",
                               "PDX_IB_GID_INDEX", "0", NULL), PDX_OK);
        side_open(&s[i], tp);
    }
    fx_connect_eps(ops, s[0].ep, s[1].ep);
    for (int i = 0; i < 2; i++) {
        q = fx_qp_query(s[i].ep);
        cr_assert(q.ah_attr.is_global && q.ah_attr.grh.sgid_index == 0);
        cr_assert_arr_eq(q.ah_attr.grh.dgid.raw, gid[1 - i], 16);
        cr_assert_eq(q.ah_attr.dlid, lid[1 - i]);
    }
    write_lands(&s[0], &s[1]);
    write_lands(&s[1], &s[0]);
    cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "5", NULL),
                 PDX_ERR_NO_DEVICE, "no GID 5");
    cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", "softnic1", "PDX_IB_GID_INDEX", "1", NULL),
                 PDX_ERR_NO_DEVICE, "GID 1 is an empty entry");
    for (int i = 0; i < 2; i++)
        side_close(&s[i]);
    fx_nic_env_end(&env, true); /* the refused connects said why */
}

/* An InfiniBand port without a LID (no subnet manager yet) is refused, and
 * the reason says so; the next device is used. */
Test(rdma_addr, infiniband_port_without_lid_is_refused)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    fx_log_capture_t cap;
    fx_nic_env_t env;
    pdx_tp_t *tp = NULL;
    char *log;

    c.link_layer = IBV_LINK_LAYER_INFINIBAND;
    c.lid_dev[0] = 0;
    fx_nic_env_begin(&env, &c);
    fx_log_capture_begin(&cap);
    cr_assert_eq(fx_tp_try_loud(&tp, "PDX_IB_DEVICES", "softnic0", NULL), PDX_ERR_NO_DEVICE);
    cr_assert_eq(pdx_log_error_count(), env.fx.errors + 1);
    cr_assert_eq(fx_tp_try(&tp, NULL), PDX_OK);
    log = fx_log_capture_end(&cap);
    cr_assert(log_has(log, "error", "no RDMA device: softnic0 port 1 has no LID yet (no subnet "
                                    "manager?)"), "%s", log);
    free(log);
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic1", "the device with a LID");
    cr_assert_eq(rdma_tp(tp)->dev.lid, 2);
    ops->close(tp);
    fx_nic_env_end(&env, true);
}

/* ---------------------------------------------------- ports, refusals */

/* A device whose port is down is passed over, and the reason says so. */
Test(rdma_addr, device_without_active_port_is_skipped)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    fx_log_capture_t cap;
    pdx_tp_t *tp[2], *none;
    fx_nic_env_t env;
    char *log;

    fx_nic_env_begin(&env, &c);
    cr_assert_eq(fx_tp_try(&tp[0], "PDX_IB_DEVICES", "softnic1", NULL), PDX_OK);
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ERR), 0);
    fx_log_capture_begin(&cap);
    cr_assert_eq(fx_tp_try_loud(&none, "PDX_IB_DEVICES", "softnic1", NULL), PDX_ERR_NO_DEVICE);
    cr_assert_eq(fx_tp_try(&tp[1], "PDX_IB_DEVICES", "softnic1,softnic0", NULL), PDX_OK);
    log = fx_log_capture_end(&cap);
    cr_assert(log_has(log, "error", "no RDMA device: softnic1 has no ACTIVE port"), "%s", log);
    free(log);
    cr_assert_str_eq(rdma_tp(tp[1])->dev.name, "softnic0");
    cr_assert_eq(softnic_async(1, IBV_EVENT_PORT_ACTIVE), 0);
    for (int i = 0; i < 2; i++)
        ops->close(tp[i]);
    fx_nic_env_end(&env, true);
}

/*
 * What ep_connect refuses before it touches the QP: no address, a malformed
 * one (MTU, QPN, PSN out of range), an ep already in error. An ep refused
 * for its argument connects afterwards and transfers.
 */
Test(rdma_addr, connect_refusals)
{
    softnic_config_t c = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_addr_t a, bad;
    uint64_t errors;
    fx_nic_env_t env;
    side_t s[2], f;
    pdx_tp_t *tp;

    fx_nic_env_begin(&env, &c);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp, "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL), PDX_OK);
        side_open(&s[i], tp);
    }
    ops->ep_address(s[1].ep, &a);
    errors = pdx_log_error_count();
    cr_assert_eq(ops->ep_connect(s[0].ep, NULL), PDX_ERR_INVALID);
    bad = a;
    bad.bytes[2] = 0;
    cr_assert_eq(ops->ep_connect(s[0].ep, &bad), PDX_ERR_PROTO, "MTU 0");
    bad = a;
    memset(bad.bytes + 4, 0, 4);
    cr_assert_eq(ops->ep_connect(s[0].ep, &bad), PDX_ERR_PROTO, "QPN 0");
    bad = a;
    bad.bytes[11] = 1;
    cr_assert_eq(ops->ep_connect(s[0].ep, &bad), PDX_ERR_PROTO, "a PSN of 25 bits");
    cr_assert_eq(pdx_log_error_count(), errors + 4, "one error each");
    side_open(&f, s[0].tp);
    ops->ep_fail(f.ep, PDX_ERR_ABORTED, "failed by the test");
    cr_assert_eq(ops->ep_connect(f.ep, &a), PDX_ERR_STATE, "an ep in error");
    ops->ep_destroy(f.ep);
    ops->cq_destroy(f.cq);
    fx_connect_eps(ops, s[0].ep, s[1].ep);
    write_lands(&s[0], &s[1]);
    for (int i = 0; i < 2; i++)
        side_close(&s[i]);
    fx_nic_env_end(&env, true);
}
