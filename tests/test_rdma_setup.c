/*
 * The rdma transport when a verbs call fails during setup, over softnic's
 * call faults (softnic_fault_call): listing, opening and probing devices,
 * the PD, regions registered whole and in pieces (host memory and dmabuf),
 * the completion channel and one ibv CQ of a split CQ, the QP (refused caps
 * are asked again), the QP's moves to INIT, RTR and RTS, arming a CQ and
 * posting a receive. Each failure answers its status and logs its cause
 * once; nothing it opened stays open (verbs objects, fds) and what it
 * reserved is given back; a fresh pair of tps afterwards still moves a
 * WRITE. The knob itself is checked on raw verbs in
 * softnic/test_softnic_calls.c.
 */
#include <criterion/criterion.h>

#include "log.h"
#include "rdma_fixture.h"
#include "rdma/rdma.h"
#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KIB 1024u

static const pdx_transport_ops_t *const ops = &pdx_rdma_ops;

static void log_has(const char *log, const char *what)
{
    cr_assert(strstr(log, what), "\"%s\" was not logged", what);
}

/* A fresh pair of tps over the NIC (two devices of it) moves a WRITE and
 * logs no error: the failure before left softnic and pdx sane. */
static void transfer_works(const softnic_config_t *nic)
{
    softnic_config_t c = *nic;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    fx_rig_t r;

    c.devices = 2;
    fx_rig_open(&r, &c, 4 * KIB, 4, 0);
    w = fx_wr(&r, 1, 0, r.len, 0, true);
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], &wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc, 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(memcmp(r.dst, r.src, r.len), 0, "the WRITE did not land");
    fx_rig_close(&r, false);
}

/* A test over one NIC configuration: what was open when it began, and what
 * pdx logs (at info) meanwhile. */
typedef struct frame {
    fx_nic_env_t     env;
    softnic_config_t nic;
    fx_log_capture_t cap;
} frame_t;

static void frame_begin(frame_t *f, const softnic_config_t *nic)
{
    f->nic = *nic;
    fx_nic_env_begin(&f->env, nic);
    fx_log_capture_begin(&f->cap);
    pdx_log_set_level(PDX_LOG_INFO);
}

/* Everything closed: no verbs object or fd left, `errors` error messages
 * logged in all; returns the log (free it). */
static char *frame_end(frame_t *f, uint64_t errors)
{
    char *log = fx_log_capture_end(&f->cap);

    fx_nic_env_end(&f->env, true);
    cr_assert_eq(pdx_log_error_count() - f->env.fx.errors, errors, "%llu error messages",
                 (unsigned long long)(pdx_log_error_count() - f->env.fx.errors));
    return log;
}

static pdx_tp_t *tp_open(void)
{
    pdx_tp_t *tp = NULL;

    cr_assert_eq(fx_tp_try(&tp, NULL), PDX_OK);
    return tp;
}

/* -------------------------------------------------------------- devices */

/* With the first call of `call` failing (err), opening a tp on one device
 * fails with `want` and logs `what` as its one error; nothing stays open. */
static void open_fails(softnic_call_t call, int err, pdx_status_t want, const char *what)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);
    pdx_tp_t *tp = NULL;
    frame_t f;
    char *log;

    frame_begin(&f, &nic);
    softnic_fault_call(call, 1, err);
    cr_assert_eq(fx_tp_try_loud(&tp, NULL), want);
    log = frame_end(&f, 1);
    log_has(log, what);
    free(log);
    transfer_works(&nic);
}

Test(rdma_setup, no_device_list)
{
    open_fails(SOFTNIC_CALL_GET_DEVICE_LIST, ENOMEM, PDX_ERR_NO_DEVICE,
               "no RDMA device: ibv_get_device_list: Cannot allocate memory");
}

/* The device is closed again. */
Test(rdma_setup, alloc_pd_fails)
{
    open_fails(SOFTNIC_CALL_ALLOC_PD, ENOMEM, PDX_ERR_IO,
               "rdma: softnic0: ibv_alloc_pd: Cannot allocate memory");
}

/* On two devices, with the first call of `call` failing (err): a tp on
 * softnic0 alone is no device and logs `what` as its one error, and the
 * probed context is closed; a tp on "softnic0,softnic1" skips softnic0 and
 * opens softnic1, with only its context and PD, and says why it skipped. */
static void device_skipped(softnic_call_t call, int err, const char *what)
{
    softnic_config_t nic = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_t *tp = NULL;
    frame_t f;
    char *log;

    frame_begin(&f, &nic);
    softnic_fault_call(call, 1, err);
    cr_assert_eq(fx_tp_try_loud(&tp, "PDX_IB_DEVICES", "softnic0", NULL), PDX_ERR_NO_DEVICE);
    cr_assert_eq(softnic_open_objects(), f.env.objects, "the probed context stayed open");
    softnic_fault_call(call, 1, err);
    cr_assert_eq(fx_tp_try_loud(&tp, "PDX_IB_DEVICES", "softnic0,softnic1", NULL), PDX_OK);
    cr_assert_str_eq(rdma_tp(tp)->dev.name, "softnic1");
    cr_assert_eq(softnic_open_objects(), f.env.objects + 2, "a context and a PD, no more");
    ops->close(tp);
    log = frame_end(&f, 1);
    log_has(log, what);
    log_has(log, "rdma: softnic1 serves; passed over: softnic0"); /* a warning */
    log_has(log, what + strlen("no RDMA device: "));
    log_has(log, "rdma: using softnic1 port 1");
    free(log);
    transfer_works(&nic);
}

/* Without PDX_IB_DEVICES the engine's ranking of the devices by its GPU
 * (params.nic_order) decides; names it lacks follow in the list's order,
 * names the list lacks are skipped, and PDX_IB_DEVICES overrides it. */
static const char *nearest_open(const char *order, uint32_t nic, const char *ib_devices)
{
    static char name[64];
    pdx_tp_params_t params = {.progress_timeout_ms = 10000, .max_msg_size = FX_MAXMSG,
                              .nic_order = order, .nic = nic};
    pdx_config_t cfg;
    pdx_tp_t *tp = NULL;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    if (ib_devices)
        cr_assert_eq(pdx_config_set(&cfg, "PDX_IB_DEVICES", ib_devices), PDX_OK);
    params.config = &cfg;
    cr_assert_eq(ops->open(&params, &tp), PDX_OK, "order \"%s\", NIC %u", order, nic);
    snprintf(name, sizeof(name), "%s", rdma_tp(tp)->dev.name);
    ops->close(tp);
    return name;
}

Test(rdma_setup, devices_nearest_the_gpu_first)
{
    softnic_config_t nic = fx_nic(4, SOFTNIC_THREAD);
    frame_t f;

    frame_begin(&f, &nic);
    cr_expect_str_eq(nearest_open(NULL, 0, NULL), "softnic0");
    cr_expect_str_eq(nearest_open("", 0, NULL), "softnic0");
    cr_expect_str_eq(nearest_open("softnic2,softnic3", 0, NULL), "softnic2");
    cr_expect_str_eq(nearest_open("softnic2,softnic3", 1, NULL), "softnic3");
    cr_expect_str_eq(nearest_open("softnic2,softnic3", 2, NULL), "softnic0", "then the list's");
    cr_expect_str_eq(nearest_open("softnic2,softnic3", 3, NULL), "softnic1");
    cr_expect_str_eq(nearest_open("mlx5_0,softnic3,softnic3", 0, NULL), "softnic3");
    cr_expect_str_eq(nearest_open("mlx5_0,softnic3,softnic3", 1, NULL), "softnic0",
                     "a name given twice is one device");
    cr_expect_str_eq(nearest_open("softnic2", 0, "softnic1"), "softnic1");
    free(frame_end(&f, 0));
}

Test(rdma_setup, open_device_fails)
{
    device_skipped(SOFTNIC_CALL_OPEN_DEVICE, EPERM,
                   "no RDMA device: softnic0: ibv_open_device: Operation not permitted");
}

Test(rdma_setup, query_device_fails)
{
    device_skipped(SOFTNIC_CALL_QUERY_DEVICE, EIO,
                   "no RDMA device: softnic0: ibv_query_device: Input/output error");
}

/* The port does not count as ACTIVE; the errno is said. */
Test(rdma_setup, query_port_fails)
{
    device_skipped(SOFTNIC_CALL_QUERY_PORT, EIO, "no RDMA device: softnic0 port 1: "
                   "ibv_query_port: Input/output error; softnic0 has no ACTIVE port");
}

/* RoCE GID selection (default table: 0 RoCEv1, 1 RoCEv2 IPv4-mapped): a
 * query that fails (not ENODATA, an empty entry) on any entry, or on the
 * entry PDX_IB_GID_INDEX names, leaves the device unusable, with the errno:
 * a table that cannot be read could hide the GID to use. */
Test(rdma_setup, gid_query_fails)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);
    pdx_tp_t *tp = NULL;
    frame_t f;
    char *log;

    frame_begin(&f, &nic);
    for (uint64_t nth = 1; nth <= 2; nth++) {
        softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, nth, EIO);
        cr_assert_eq(fx_tp_try_loud(&tp, NULL), PDX_ERR_NO_DEVICE, "entry %llu",
                     (unsigned long long)nth - 1);
        cr_assert_eq(softnic_open_objects(), f.env.objects);
    }
    softnic_fault_call(SOFTNIC_CALL_QUERY_GID_EX, 1, EIO);
    cr_assert_eq(fx_tp_try_loud(&tp, "PDX_IB_GID_INDEX", "1", NULL), PDX_ERR_NO_DEVICE);
    log = frame_end(&f, 3);
    log_has(log, "no RDMA device: softnic0 port 1: GID index 0: ibv_query_gid_ex: "
                 "Input/output error");
    log_has(log, "no RDMA device: softnic0 port 1: GID index 1: ibv_query_gid_ex: "
                 "Input/output error");
    log_has(log, "no RDMA device: softnic0 port 1: PDX_IB_GID_INDEX=1: Input/output error");
    free(log);
    transfer_works(&nic);
}

/* -------------------------------------------------------------- regions */

/* A region of 17 pieces of max_mr_size (64 KiB; the last one 4 KiB) whose
 * first, 9th or last piece fails: PDX_ERR_IO, the pieces before it are
 * deregistered. A region of one piece the same. Then it registers. */
Test(rdma_setup, reg_mr_fails_on_a_piece)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);
    const size_t piece = 64 * KIB, len = 16 * piece + 4 * KIB;
    const uint32_t fail[] = {1, 9, 17};
    uint8_t *buf = aligned_alloc(4096, len);
    char what[128];
    pdx_tp_mr_t *mr = NULL;
    pdx_tp_t *tp;
    frame_t f;
    uint32_t objects;
    char *log;

    cr_assert_not_null(buf);
    nic.max_mr_size = piece;
    frame_begin(&f, &nic);
    tp = tp_open();
    cr_assert_eq(tp->mr_piece, piece);
    objects = softnic_open_objects();
    for (size_t i = 0; i < PDX_ARRAY_SIZE(fail); i++) {
        softnic_fault_call(SOFTNIC_CALL_REG_MR, fail[i], ENOMEM);
        cr_assert_eq(ops->mr_reg(tp, buf, len, FX_RW, &mr), PDX_ERR_IO, "piece %u", fail[i]);
        cr_assert_eq(softnic_open_objects(), objects, "piece %u: pieces left registered",
                     fail[i]);
    }
    softnic_fault_call(SOFTNIC_CALL_REG_MR, 1, ENOMEM);
    cr_assert_eq(ops->mr_reg(tp, buf, 4 * KIB, FX_RW, &mr), PDX_ERR_IO);
    cr_assert_eq(ops->mr_reg(tp, buf, len, FX_RW, &mr), PDX_OK);
    cr_assert_eq(rdma_mr(mr)->npieces, 17u);
    cr_assert_eq(softnic_open_objects(), objects + 17);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    ops->close(tp);
    log = frame_end(&f, 4);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(fail); i++) {
        snprintf(what, sizeof(what), "ibv_reg_mr of %zu bytes at %p (a piece): Cannot allocate",
                 fail[i] == 17 ? (size_t)4 * KIB : piece, (void *)(buf + (fail[i] - 1) * piece));
        log_has(log, what);
    }
    snprintf(what, sizeof(what), "ibv_reg_mr of 4096 bytes at %p: Cannot allocate", (void *)buf);
    log_has(log, what);
    free(log);
    free(buf);
    transfer_works(&nic);
}

/* The same for dmabuf: 4 pieces, the 3rd fails (PDX_ERR_IO), or the 2nd
 * says the provider has no dmabuf (PDX_ERR_UNSUPPORTED). */
Test(rdma_setup, reg_dmabuf_mr_fails_on_a_piece)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);
    const size_t piece = 64 * KIB, len = 4 * piece;
    pdx_tp_mr_t *mr = NULL;
    pdx_tp_t *tp;
    frame_t f;
    uint32_t objects;
    uint8_t *map;
    char *log, what[128];
    int fd;

    nic.max_mr_size = piece;
    frame_begin(&f, &nic);
    fd = memfd_create("pdx-test-dmabuf", MFD_CLOEXEC);
    cr_assert(fd >= 0 && ftruncate(fd, (off_t)len) == 0);
    map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    cr_assert_neq(map, MAP_FAILED);
    tp = tp_open();
    objects = softnic_open_objects();
    softnic_fault_call(SOFTNIC_CALL_REG_DMABUF_MR, 3, EIO);
    cr_assert_eq(ops->mr_reg_dmabuf(tp, map, len, fd, 0, FX_RW, &mr), PDX_ERR_IO);
    cr_assert_eq(softnic_open_objects(), objects, "pieces left registered");
    softnic_fault_call(SOFTNIC_CALL_REG_DMABUF_MR, 2, EOPNOTSUPP);
    cr_assert_eq(ops->mr_reg_dmabuf(tp, map, len, fd, 0, FX_RW, &mr), PDX_ERR_UNSUPPORTED);
    cr_assert_eq(softnic_open_objects(), objects, "pieces left registered");
    cr_assert_eq(ops->mr_reg_dmabuf(tp, map, len, fd, 0, FX_RW, &mr), PDX_OK);
    cr_assert_eq(rdma_mr(mr)->npieces, 4u);
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    ops->close(tp);
    munmap(map, len);
    close(fd);
    log = frame_end(&f, 2);
    snprintf(what, sizeof(what), "ibv_reg_dmabuf_mr of 65536 bytes at offset 131072 of dmabuf "
             "fd %d: Input/output error", fd);
    log_has(log, what);
    log_has(log, "dmabuf registration not supported by softnic0: Operation not supported");
    free(log);
    transfer_works(&nic);
}

/* ------------------------------------------------------------------ CQs */

/* A CQ of depth 200 on a NIC of max_cqe 64 is a channel and 4 ibv CQs (64,
 * 64, 64, 8): the channel, the 2nd or the last ibv CQ fails, and what was
 * made before it is destroyed. */
Test(rdma_setup, cq_create_fails)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);
    const uint64_t fail[] = {2, 4};
    pdx_tp_cq_t *cq = NULL;
    pdx_tp_t *tp;
    frame_t f;
    uint32_t objects;
    char *log;

    nic.max_cqe = 64;
    frame_begin(&f, &nic);
    tp = tp_open();
    objects = softnic_open_objects();
    softnic_fault_call(SOFTNIC_CALL_CREATE_COMP_CHANNEL, 1, EMFILE);
    cr_assert_eq(ops->cq_create(tp, 200, &cq), PDX_ERR_IO);
    cr_assert_eq(softnic_open_objects(), objects);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(fail); i++) {
        softnic_fault_call(SOFTNIC_CALL_CREATE_CQ, fail[i], ENOMEM);
        cr_assert_eq(ops->cq_create(tp, 200, &cq), PDX_ERR_IO);
        cr_assert_eq(softnic_open_objects(), objects, "ibv CQs or the channel left open");
    }
    cr_assert_eq(ops->cq_create(tp, 200, &cq), PDX_OK);
    cr_assert_eq(rdma_cq(cq)->nicq, 4u);
    cr_assert_eq(softnic_open_objects(), objects + 5, "a channel and 4 ibv CQs");
    ops->cq_destroy(cq);
    ops->close(tp);
    log = frame_end(&f, 3);
    log_has(log, "rdma: softnic0: ibv_create_comp_channel: Too many open files");
    log_has(log, "ibv_create_cq of depth 64 (2 of 4 for a CQ of depth 200): Cannot allocate");
    log_has(log, "ibv_create_cq of depth 8 (4 of 4 for a CQ of depth 200): Cannot allocate");
    free(log);
    transfer_works(&nic);
}

/* A failing ibv_req_notify_cq: cq_arm answers PDX_ERR_IO for good, the
 * CQ's ep fails and its receives complete once, in software; the CQ takes
 * no new ep; the peer is left alone. */
Test(rdma_setup, req_notify_cq_fails_its_cq)
{
    pdx_tp_ep_attr_t attr = {.sq_depth = 1};
    uint8_t rbuf[2 * 64];
    pdx_tp_mr_t *rmr;
    pdx_tp_ep_t *ep;
    pdx_tp_wc_t wc[4];
    uint64_t errors;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4 * KIB, 8, 4);
    rmr = fx_mr_new(ops, r.tp[0], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    for (uint32_t i = 0; i < 2; i++)
        cr_assert_eq(ops->post_recv(r.ep[0], 100u + i, rmr, i * 64u, 64), PDX_OK);
    errors = pdx_log_error_count();
    softnic_fault_call(SOFTNIC_CALL_REQ_NOTIFY_CQ, 1, EIO);
    cr_assert_eq(ops->cq_arm(r.cq[0]), PDX_ERR_IO);
    cr_assert_eq(pdx_log_error_count(), errors + 1);
    cr_assert_eq(ops->cq_arm(r.cq[0]), PDX_ERR_IO, "for good");
    cr_assert(strstr(ops->ep_error(r.ep[0]), "ibv_req_notify_cq failed, QP 0x"), "%s",
              ops->ep_error(r.ep[0]));
    cr_assert_eq(fx_wait(r.cq[0], wc, 4, 300), 2, "each receive completes once");
    fx_expect_wc(&wc[0], 100, PDX_ERR_PEER, PDX_TP_OP_RECV);
    fx_expect_wc(&wc[1], 101, PDX_ERR_PEER, PDX_TP_OP_RECV);
    cr_assert_eq(ops->ep_create(r.tp[0], r.cq[0], &attr, &ep), PDX_ERR_IO, "a CQ in error");
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK, "flushed receives hold their region");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "", "the peer failed");
    fx_rig_close(&r, true);
    transfer_works(&r.nic);
}

/* ------------------------------------------------------------------ eps */

/* A tp on softnic0 (max_cqe as given) and a CQ that holds exactly one ep
 * of sq 8, rq 4. */
typedef struct ep_rig {
    frame_t      f;
    pdx_tp_t    *tp;
    pdx_tp_cq_t *cq;
    uint32_t     objects; /* with the tp and the CQ open */
} ep_rig_t;

static const pdx_tp_ep_attr_t ep_attr = {.sq_depth = 8, .rq_depth = 4};

static void ep_rig_open(ep_rig_t *r, uint32_t cq_depth)
{
    softnic_config_t nic = fx_nic(1, SOFTNIC_THREAD);

    frame_begin(&r->f, &nic);
    r->tp = tp_open();
    r->cq = fx_cq_new(ops, r->tp, cq_depth);
    r->objects = softnic_open_objects();
}

/* ep_create fails with `want`: no object of it is left, its CQ entries
 * are given back. */
static void ep_create_fails(ep_rig_t *r, pdx_status_t want)
{
    const uint32_t reserved = rdma_cq(r->cq)->reserved;
    pdx_tp_ep_t *ep = NULL;

    cr_assert_eq(ops->ep_create(r->tp, r->cq, &ep_attr, &ep), want);
    cr_assert_eq(softnic_open_objects(), r->objects, "verbs objects of the ep left open");
    cr_assert_eq(rdma_cq(r->cq)->reserved, reserved, "the CQ reservation was kept");
}

/* After the faults armed, ep_create fails with PDX_ERR_IO and logs `what`:
 * the CQ's entries came back, so the one ep the CQ holds is created next
 * (and a second one does not fit). */
static void ep_create_fails_once(ep_rig_t *r, const char *what)
{
    pdx_tp_ep_t *ep = NULL, *more = NULL;
    char *log;

    ep_create_fails(r, PDX_ERR_IO);
    cr_assert_eq(ops->ep_create(r->tp, r->cq, &ep_attr, &ep), PDX_OK);
    cr_assert_eq(ops->ep_create(r->tp, r->cq, &ep_attr, &more), PDX_ERR_FULL);
    ops->ep_destroy(ep);
    ops->cq_destroy(r->cq);
    ops->close(r->tp);
    log = frame_end(&r->f, 2);
    log_has(log, what);
    free(log);
    transfer_works(&r->f.nic);
}

Test(rdma_setup, create_qp_fails)
{
    ep_rig_t r;

    ep_rig_open(&r, 12);
    softnic_fault_call(SOFTNIC_CALL_CREATE_QP, 1, ENOMEM);
    ep_create_fails_once(&r, "rdma: softnic0: ibv_create_qp (RC, 8 send, 4 receive WRs): "
                             "Cannot allocate memory");
}

/* A QP without inline data whose SEND slots fail to register. */
Test(rdma_setup, send_slots_registration_fails)
{
    ep_rig_t r;

    ep_rig_open(&r, 12);
    softnic_fault_call(SOFTNIC_CALL_CREATE_QP, 1, EINVAL);
    softnic_fault_call(SOFTNIC_CALL_REG_MR, 1, ENOMEM);
    ep_create_fails_once(&r, "rdma: softnic0: ibv_reg_mr of 512 bytes of SEND slots: Cannot "
                             "allocate memory");
}

/* RESET -> INIT fails: the QP is destroyed. */
Test(rdma_setup, modify_to_init_fails)
{
    ep_rig_t r;

    ep_rig_open(&r, 12);
    softnic_fault_modify_qp(IBV_QPS_INIT, 1, EINVAL);
    ep_create_fails_once(&r, "RESET -> INIT: Invalid argument");
}

/* Caps the device refuses (EINVAL) are asked again: without inline data
 * (SENDs from registered slots), then with one SGE, then with neither; all
 * four refused is PDX_ERR_IO. A SEND from slots arrives. */
Test(rdma_setup, create_qp_refused_caps_are_asked_again)
{
    static uint8_t rbuf[64];
    const char msg[] = "from a registered slot";
    pdx_tp_ep_t *slots = NULL, *one_sge = NULL, *peer;
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc[2];
    ep_rig_t r;
    char *log;

    ep_rig_open(&r, 48);
    softnic_fault_call(SOFTNIC_CALL_CREATE_QP, 1, EINVAL);
    cr_assert_eq(ops->ep_create(r.tp, r.cq, &ep_attr, &slots), PDX_OK);
    cr_assert_eq(rdma_ep(slots)->max_inline, 0u);
    cr_assert_not_null(rdma_ep(slots)->send_slots_mr);
    cr_assert_eq(rdma_ep(slots)->max_sge, 16u);
    cr_assert_eq(softnic_open_objects(), r.objects + 2, "a QP and its slots' MR");
    for (int i = 1; i <= 2; i++)
        softnic_fault_call(SOFTNIC_CALL_CREATE_QP, (uint64_t)i, EINVAL);
    cr_assert_eq(ops->ep_create(r.tp, r.cq, &ep_attr, &one_sge), PDX_OK);
    cr_assert_eq(rdma_ep(one_sge)->max_sge, 1u);
    cr_assert_geq(rdma_ep(one_sge)->max_inline, (uint32_t)PDX_TP_SEND_MAX);
    ops->ep_destroy(one_sge);
    r.objects += 2;
    for (int i = 1; i <= 4; i++)
        softnic_fault_call(SOFTNIC_CALL_CREATE_QP, (uint64_t)i, EINVAL);
    ep_create_fails(&r, PDX_ERR_IO);

    peer = fx_ep_new(ops, r.tp, r.cq, 8, 4);
    fx_connect_eps(ops, slots, peer);
    rmr = fx_mr_new(ops, r.tp, rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    cr_assert_eq(ops->post_recv(peer, 7, rmr, 0, sizeof(rbuf)), PDX_OK);
    cr_assert_eq(ops->post_send(slots, 8, msg, sizeof(msg), PDX_TP_SIGNALED), PDX_OK);
    cr_assert_eq(fx_wait(r.cq, wc, 2, FX_WAIT_MS), 2);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(wc[i].status, PDX_OK);
        if (wc[i].opcode == PDX_TP_OP_RECV)
            cr_assert_eq(wc[i].byte_len, sizeof(msg));
    }
    cr_assert_eq(memcmp(rbuf, msg, sizeof(msg)), 0);
    ops->ep_destroy(slots);
    ops->ep_destroy(peer);
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK);
    ops->cq_destroy(r.cq);
    ops->close(r.tp);
    log = frame_end(&r.f, 1);
    log_has(log, "rdma: softnic0 refuses 64 bytes of inline data; SENDs go from registered "
                 "slots");
    log_has(log, "rdma: softnic0 refuses QPs of 16 SGEs: one SGE per WRITE");
    log_has(log, "ibv_create_qp (RC, 8 send, 4 receive WRs): Invalid argument");
    free(log);
    transfer_works(&r.f.nic);
}

/*
 * A move to `to` fails in ep_connect (the peer's connect succeeded; the QP
 * was in `stays`): ep_connect answers PDX_ERR_IO and the ep is failed for
 * good, its QP in error and ep_error saying why; it cannot be connected
 * again (PDX_ERR_STATE) or posted on (PDX_ERR_PEER); destroying it closes
 * everything.
 */
static void connect_fails(enum ibv_qp_state to, enum ibv_qp_state stays, const char *what)
{
    softnic_config_t nic = fx_nic(2, SOFTNIC_THREAD);
    pdx_tp_addr_t addr[2];
    pdx_tp_t *tp[2];
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *ep[2];
    uint8_t src[64];
    pdx_tp_mr_t *mr;
    pdx_tp_write_t w;
    frame_t f;
    char *log;

    frame_begin(&f, &nic);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(fx_tp_try(&tp[i], "PDX_IB_DEVICES", i ? "softnic1" : "softnic0", NULL),
                     PDX_OK);
        cq[i] = fx_cq_new(ops, tp[i], 12);
        ep[i] = fx_ep_new(ops, tp[i], cq[i], 8, 4);
        ops->ep_address(ep[i], &addr[i]);
    }
    cr_assert_eq(ops->ep_connect(ep[1], &addr[0]), PDX_OK);
    softnic_fault_modify_qp(to, 1, EINVAL);
    cr_assert_eq(ops->ep_connect(ep[0], &addr[1]), PDX_ERR_IO);
    /* the ep is failed for good: its QP in error, the reason kept */
    cr_assert_eq(fx_qp_query(ep[0]).qp_state, IBV_QPS_ERR, "QP left in %d", stays);
    cr_assert(strstr(ops->ep_error(ep[0]), "failed (i/o error)"), "%s", ops->ep_error(ep[0]));
    cr_assert_eq(ops->ep_connect(ep[0], &addr[1]), PDX_ERR_STATE, "connected again");
    mr = fx_mr_new(ops, tp[0], src, sizeof(src), 0);
    w = (pdx_tp_write_t){.wr_id = 1, .mr = mr, .length = sizeof(src), .remote_addr = 4096,
                         .rkey = 1, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(ep[0], &w, 1), PDX_ERR_PEER, "posted on a failed ep");
    cr_assert_eq(ops->mr_dereg(mr), PDX_OK);
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(ep[i]);
        ops->cq_destroy(cq[i]);
        ops->close(tp[i]);
    }
    log = frame_end(&f, 2); /* the failed move, the second connect */
    log_has(log, what);
    log_has(log, ": Invalid argument");
    log_has(log, "which is in error");
    free(log);
    transfer_works(&nic);
}

Test(rdma_setup, modify_to_rtr_fails)
{
    connect_fails(IBV_QPS_RTR, IBV_QPS_INIT, "INIT -> RTR (remote QP 0x");
}

Test(rdma_setup, modify_to_rts_fails)
{
    connect_fails(IBV_QPS_RTS, IBV_QPS_RTR, "RTR -> RTS: Invalid argument");
}

/* ibv_post_recv refuses a receive (the 2nd call: a WRITE between them does
 * not count): post_recv answers PDX_ERR_PEER and the ep is failed with the
 * cause; the receive before it completes with the error, the refused one
 * never; the region is released; the peer is left alone. */
Test(rdma_setup, post_recv_refused_fails_the_ep)
{
    uint8_t rbuf[2 * 64];
    pdx_tp_write_t w;
    pdx_tp_mr_t *rmr;
    pdx_tp_wc_t wc[2];
    uint64_t errors;
    fx_rig_t r;

    fx_rig_open(&r, NULL, 4 * KIB, 8, 4);
    rmr = fx_mr_new(ops, r.tp[0], rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE);
    errors = pdx_log_error_count();
    softnic_fault_call(SOFTNIC_CALL_POST_RECV, 2, ENOMEM);
    cr_assert_eq(ops->post_recv(r.ep[0], 100, rmr, 0, 64), PDX_OK);
    w = fx_wr(&r, 1, 0, r.len, 0, true); /* WRs do not count */
    cr_assert_eq(ops->post_write(r.ep[0], &w, 1), PDX_OK);
    cr_assert_eq(fx_wait(r.cq[0], wc, 1, FX_WAIT_MS), 1);
    fx_expect_wc(&wc[0], 1, PDX_OK, PDX_TP_OP_WRITE);
    cr_assert_eq(ops->post_recv(r.ep[0], 101, rmr, 64, 64), PDX_ERR_PEER);
    cr_assert(strstr(ops->ep_error(r.ep[0]), "ibv_post_recv refused after 0 of 1 work requests: "
                                              "Cannot allocate memory"), "%s",
              ops->ep_error(r.ep[0]));
    cr_assert_eq(ops->post_recv(r.ep[0], 102, rmr, 64, 64), PDX_ERR_PEER, "a failed ep");
    cr_assert_eq(fx_wait(r.cq[0], wc, 2, 300), 1, "the refused receive completed");
    fx_expect_wc(&wc[0], 100, PDX_ERR_PEER, PDX_TP_OP_RECV);
    cr_assert_eq(pdx_log_error_count(), errors, "the refusal was logged as an error");
    cr_assert_eq(ops->mr_dereg(rmr), PDX_OK, "the refused receive holds its region");
    cr_assert_str_eq(ops->ep_error(r.ep[1]), "", "the peer failed");
    fx_rig_close(&r, true);
    transfer_works(&r.nic);
}
