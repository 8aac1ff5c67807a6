/*
 * softnic: a software RDMA NIC for tests and benchmarks.
 *
 * It defines the libibverbs symbols rdma/ uses (ibv_get_device_list,
 * ibv_open_device, ibv_reg_mr, ibv_create_qp, ...), and its contexts are real
 * `struct verbs_context`s, so the inline dispatchers of <infiniband/verbs.h>
 * (ibv_post_send, ibv_post_recv, ibv_poll_cq, ibv_req_notify_cq,
 * ibv_query_port) reach it. A program links libsoftnic instead of
 * libibverbs; the rdma objects are the same.
 *
 * The fabric is this process: every softnic device of the process is on one
 * switch; a QP reaches a remote QP by (GID, QPN) on RoCE, by (LID, QPN) on
 * InfiniBand. Each device has one port. Link layer Ethernet (RoCE, the
 * default): the GID table holds a RoCEv1 and a RoCEv2 entry per address of
 * the port's netdev, as a NIC builds it; with the default `gids`, index 0 a
 * RoCEv1 link-local GID and index 1 a RoCEv2 IPv4-mapped GID
 * (::ffff:10.0.0.<device index + 1>); see softnic_gids_t for the others.
 * Link layer InfiniBand (config link_layer): the port's LID is lid_dev[i],
 * GID index 0 is fe80::<port GUID> of type IBV_GID_TYPE_IB, index 1 is
 * empty, and there are no RoCE GID types. An AV without a GRH (is_global 0)
 * reaches the port whose LID is its dlid; with a GRH the dgid must be that
 * port's GID at the sgid_index too; dlid 0 reaches no port.
 *
 * What it enforces, as hardware does: the QP state machine (post_send before
 * RTS, post_recv before INIT: the call fails), max_send_wr / max_recv_wr
 * (ENOMEM, *bad_wr set), max_send_sge / max_recv_sge and max_inline_data
 * (EINVAL), lkeys (IBV_WC_LOC_PROT_ERR), rkeys, access flags and bounds on
 * every remote access (IBV_WC_REM_ACCESS_ERR for the requester; both QPs go
 * to error, as the IB spec says and mlx5 does: the requester's later WRs
 * and everything posted on the responder are flushed with
 * IBV_WC_WR_FLUSH_ERR, and the responder's context gets
 * IBV_EVENT_QP_ACCESS_ERR for its QP), ordering (a QP's WRs execute in
 * order; a SEND's data lands after the WRITEs before it), RNR (a SEND with
 * no receive posted is retried rnr_retry times, then
 * IBV_WC_RNR_RETRY_EXC_ERR), a receive buffer shorter than the SEND
 * (IBV_WC_REM_INV_REQ_ERR for the requester, IBV_WC_LOC_LEN_ERR for the
 * responder, both QPs to error), a remote QP that does not exist, is not in
 * RTR/RTS, sits behind a port that is DOWN or on a dead device, or gets
 * packets larger than its port's MTU (retries, then IBV_WC_RETRY_EXC_ERR),
 * CQ overrun (the CQ and every QP on it go to error; IBV_EVENT_CQ_ERR and
 * IBV_EVENT_QP_FATAL). Every outstanding WR of a QP in error completes with
 * IBV_WC_WR_FLUSH_ERR, signaled or not, as do its posted receives.
 *
 * Refused as some providers refuse them (ionic): IBV_ACCESS_REMOTE_ATOMIC in
 * ibv_reg_mr / ibv_reg_mr_iova2 / ibv_reg_dmabuf_mr (NULL, errno EINVAL) and
 * in qp_access_flags of ibv_modify_qp (EINVAL). softnic has no atomics.
 *
 * Links and devices:
 *  - softnic_async(dev, IBV_EVENT_PORT_ERR): the port goes DOWN. As on
 *    hardware no QP changes state: packets to or from the port are dropped,
 *    so a requester retries every ACK timeout and completes with
 *    IBV_WC_RETRY_EXC_ERR (QP to error) once retry_cnt is spent; a
 *    PORT_ACTIVE before that lets the WR succeed.
 *  - softnic_async(dev, IBV_EVENT_DEVICE_FATAL): the contexts open on the
 *    device die, as an mlx5 context after the device is disassociated. The
 *    event is delivered once. From then on no CQ of the context gets a CQE
 *    (outstanding WRs and posted receives are never completed, not even
 *    flushed); ibv_poll_cq returns the CQEs queued before, then 0 (mlx5
 *    reads its CQ ring from user memory); ibv_post_send, ibv_post_recv and
 *    ibv_req_notify_cq return EIO (*bad_wr is the first WR); ibv_modify_qp,
 *    ibv_query_qp, ibv_query_port and ibv_query_device return EIO, and the
 *    create and register calls NULL with errno EIO. The async fd polls
 *    POLLIN while events are queued (the DEVICE_FATAL at least), then
 *    POLLERR for good, on the same file (epoll sets keep it), as the
 *    kernel's event files of a disassociated device (POLLHUP and POLLIN come
 *    with it here; the kernel reports POLLERR alone: look at POLLERR);
 *    ibv_get_async_event returns the queued events, then -1 with errno EIO.
 *    Every completion channel of the context drops its unread events and
 *    polls POLLERR at once; ibv_get_cq_event fails with EIO. Peers' WRs
 *    towards its QPs get no ACK (RETRY_EXC). Destroy, dealloc, dereg and
 *    close calls still succeed (with the usual order and acknowledgement
 *    rules), so cleanup works. A context opened on the device afterwards
 *    works: the device has recovered. (mlx5 itself accepts posts and arms
 *    after disassociation and never completes them; softnic says EIO.)
 *
 * Completion channels and the async fd of a context are event fds: sockets
 * that poll POLLIN while events are queued (ibv_get_cq_event and
 * ibv_get_async_event honour O_NONBLOCK on them), and POLLERR once the
 * context is dead.
 *
 * Where verbs leaves room, softnic does this:
 *  - A QP in ERR accepts ibv_post_send and ibv_post_recv (after the usual
 *    checks) and flushes the WRs at once with IBV_WC_WR_FLUSH_ERR, as mlx5.
 *  - A send WR holds its SQ slot (and a receive its RQ slot) until its CQE,
 *    or a later CQE of the same queue, has been polled: ENOMEM until then.
 *  - CQ overrun: ibv_create_cq rounds cqe up to 2^k - 1 (as mlx5; with
 *    exact_cq_depth the CQ gets exactly cqe, as providers without the
 *    rounding) and the CQ holds ibv_cq.cqe entries. The CQE that does not
 *    fit is dropped, the CQ stops taking CQEs for good (ibv_poll_cq returns
 *    those written before, then 0, as mlx5; flushes of its QPs and later
 *    WRs add nothing, and no completion event is raised), IBV_EVENT_CQ_ERR
 *    is raised, and every QP using the CQ goes to error with
 *    IBV_EVENT_QP_FATAL (stats.cq_overruns counts CQs).
 *  - ibv_req_notify_cq: the next CQE written raises one event; CQEs already
 *    in the CQ do not (arm, then poll). solicited_only is ignored.
 *  - ibv_destroy_cq with events read and not acknowledged, or with QPs on
 *    it, ibv_destroy_qp with async events read and not acknowledged, and
 *    ibv_destroy_comp_channel with CQs on it return EBUSY (rdma-core would
 *    wait forever in the first two). ibv_dealloc_pd with MRs or QPs: EBUSY.
 *  - ibv_close_device always returns 0, stops its NIC thread, and frees the
 *    objects still open on it; those stay counted in softnic_open_objects().
 *  - QPs: RC only, no SRQ; a WR reaches its remote only if the AV's dgid is
 *    the remote device's GID at the local sgid_index (RoCEv1 and v2 do not
 *    mix), the remote is in RTR or RTS with dest_qp_num naming this QP, and
 *    both ports are ACTIVE. The responder QP's qp_access_flags are checked
 *    as the MR's (REMOTE_WRITE, REMOTE_READ). ACK timeout 0 waits forever.
 *  - MTU: ibv_modify_qp to RTR refuses a path_mtu above the local port's
 *    active MTU (EINVAL). A packet carries min(length, path_mtu) bytes; one
 *    larger than the active MTU of the port that receives it is dropped
 *    (WRITE and SEND: the responder's port, with the requester's path_mtu;
 *    READ responses: the requester's port, with the responder's path_mtu),
 *    so the WR is retried, then IBV_WC_RETRY_EXC_ERR.
 *  - RD atomic depths: max_dest_rd_atomic above max_rd_atom or
 *    max_rd_atomic above max_init_rd_atom is EINVAL (ibv_query_device
 *    reports them as max_qp_rd_atom and max_qp_init_rd_atom).
 *  - ibv_qp.state changes only in ibv_modify_qp / ibv_query_qp (as
 *    rdma-core); ibv_query_qp reports a QP the NIC moved to error.
 *  - delay_us counts from ibv_post_send (a latency: WRs still pipeline).
 *    Bandwidth pacing is a token bucket with 1 ms of credit.
 *  - ibv_query_gid returns -1 with errno, _ibv_query_gid_ex an errno value
 *    (EINVAL), for a port other than 1 or an index past gid_tbl_len. An
 *    empty entry (InfiniBand's index 1): _ibv_query_gid_ex says ENODATA,
 *    ibv_query_gid returns 0 and a zero GID, as rdma-core.
 *  - ndev_ifindex of the RoCE GIDs is 1 (the loopback interface).
 *  - An InfiniBand port without a LID (lid_dev[i] 0) is still ACTIVE: on a
 *    fabric an SM moves a port to ACTIVE only once it has a LID, so this is
 *    how a transport's own check of the LID is reached. Nothing reaches it.
 *  - ibv_modify_qp on RoCE refuses an AV without is_global (EINVAL); on
 *    InfiniBand it is optional. A GRH must name a valid GID of the port.
 *  - Change the mode only while no WR is outstanding.
 *
 * Trace: SOFTNIC_DEBUG=1 in the environment makes softnic say on stderr why
 * it refused a call or failed a WR.
 *
 * Thread safety: as libibverbs. Posting and polling may run on different
 * threads; the NIC threads execute WRs in the background.
 */
#ifndef PDX_SOFTNIC_H
#define PDX_SOFTNIC_H

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum softnic_mode {
    SOFTNIC_THREAD  = 0, /* default: a NIC thread per device executes WRs */
    SOFTNIC_ON_POLL = 1, /* deterministic: WRs execute inside ibv_poll_cq
                          * and ibv_get_cq_event of any softnic CQ, on the
                          * caller's thread */
    SOFTNIC_NULL    = 2, /* benchmarks: ibv_post_send completes every WR at
                          * once (CQEs for signaled ones), moves no data */
} softnic_mode_t;

/* The GID table of every RoCE port (device i, a = i + 1), as a NIC builds
 * it from its netdev's addresses: a RoCEv1 then a RoCEv2 entry each. */
typedef enum softnic_gids {
    SOFTNIC_GIDS_IPV4       = 0, /* default: 0 RoCEv1 fe80::ff:fe00:<a> (the
                                  * EUI-64 of MAC 02:00:00:00:00:<a>), 1 RoCEv2
                                  * ::ffff:10.0.0.<a> */
    SOFTNIC_GIDS_LINK_LOCAL = 1, /* an interface without an address: 0 RoCEv1
                                  * and 1 RoCEv2, both fe80::ff:fe00:<a> */
    SOFTNIC_GIDS_IPV6       = 2, /* 0 and 1 link-local as above, 2 RoCEv1 and
                                  * 3 RoCEv2 2001:db8::<a> */
} softnic_gids_t;

typedef struct softnic_config {
    uint32_t       devices;        /* devices listed (default 1, at most 8) */
    softnic_mode_t mode;
    uint32_t       delay_us;       /* added to every WR's execution (default 0) */
    uint64_t       nic_bw;         /* bytes/s per device, 0 = unlimited */
    uint64_t       qp_bw;          /* bytes/s per QP, 0 = unlimited */
    bool           move_data;      /* copy bytes (default true) */
    uint32_t       timeout_scale;  /* divides the QP's ACK timeout (4.096 us *
                                    * 2^timeout) and the RNR timer, so retry
                                    * tests run in milliseconds (default 1000) */
    uint32_t       active_mtu;     /* IBV_MTU_* of every port (default 4096) */
    uint32_t       active_mtu_dev[8]; /* IBV_MTU_* of device i's port; 0 (the
                                    * default): active_mtu */
    uint64_t       max_mr_size;    /* device limit (default 1 << 40) */
    uint32_t       max_qp_wr;      /* default 32768 */
    uint32_t       max_sge;        /* default 30 */
    uint32_t       max_inline;     /* largest max_inline_data a QP gets (default 220) */
    uint32_t       max_cqe;        /* default 4194303 */
    bool           exact_cq_depth; /* ibv_create_cq gives exactly cqe entries
                                    * (default false: 2^k - 1, as mlx5) */
    uint32_t       max_rd_atom;    /* max_qp_rd_atom: largest max_dest_rd_atomic
                                    * (1..255, default 16) */
    uint32_t       max_init_rd_atom; /* max_qp_init_rd_atom: largest
                                    * max_rd_atomic (1..255, default 16) */
    bool           no_devices;     /* ibv_get_device_list returns an empty list */
    uint8_t        link_layer;     /* of every port: IBV_LINK_LAYER_ETHERNET (RoCE,
                                    * default) or IBV_LINK_LAYER_INFINIBAND */
    softnic_gids_t gids;           /* RoCE: the GID table (default SOFTNIC_GIDS_IPV4) */
    uint16_t       lid_dev[8];     /* InfiniBand: device i's LID (default i + 1,
                                    * below 0xc000); 0: the port has none */
    int            dmabuf_errno;   /* nonzero: ibv_reg_dmabuf_mr fails with this
                                    * errno, as over a provider or kernel without
                                    * dmabuf (EOPNOTSUPP, ENOSYS); default 0 */
} softnic_config_t;

/* The defaults above. */
void softnic_config_default(softnic_config_t *cfg);
/*
 * Set the configuration. Devices, MTUs, limits (with exact_cq_depth and
 * the rd atomic depths), the addressing (link_layer, gids, lid_dev) and
 * no_devices take effect at the next ibv_get_device_list / ibv_open_device;
 * mode, delay, bandwidth, move_data, timeout_scale and dmabuf_errno at
 * once. 0 on success, -1 on a bad value, or while any device is open and
 * the device count, limits or addressing would change.
 */
int softnic_configure(const softnic_config_t *cfg);
/* Without a call to softnic_configure, SOFTNIC_DEVICES, SOFTNIC_MODE
 * (thread|poll|null) and SOFTNIC_DELAY_US are read at the first verbs call. */

/*
 * Fault injection. A WR fault matches WRs executed from now on, on the QP
 * `qpn` (0: any QP), counting only WRs of that QP (of all QPs when 0); the
 * nth (1-based) matching WR is hit, then the fault is spent. A poll fault
 * counts ibv_poll_cq calls instead (softnic_fault_poll_cq), a call fault
 * the calls of one verbs entry point (softnic_fault_call). Faults are
 * process-wide; softnic_faults_clear() drops those not yet spent.
 */
/* The nth WR completes with `status` (not IBV_WC_SUCCESS); its QP goes to
 * error as hardware would, so its later WRs are flushed. Nothing of that WR
 * is placed. */
void softnic_fault_wr_status(uint32_t qpn, uint64_t nth, enum ibv_wc_status status);
/* The nth WR's ACK is lost: with `placed` its data (or SEND) reaches the
 * responder, which completes a receive as usual; the requester retries until
 * retry_cnt is spent and completes it with IBV_WC_RETRY_EXC_ERR (the QP goes
 * to error). */
void softnic_fault_lost_ack(uint32_t qpn, uint64_t nth, bool placed);
/* The nth RDMA WRITE that carries data (only those are counted) places its
 * bytes with one bit flipped, in the middle one, and completes as if all
 * were well: corruption that no transport check catches. */
void softnic_fault_corrupt(uint32_t qpn, uint64_t nth);
/* The nth ibv_poll_cq (1-based) from now on any CQ of a context open on
 * device `dev` (index in the device list) fails, as a provider's poll that
 * meets a CQE it cannot parse: it returns -1 with errno EIO, and that CQ is
 * broken: every later ibv_poll_cq on it fails the same way and returns no
 * CQE (the NIC still writes into it; events and ibv_destroy_cq work). */
void softnic_fault_poll_cq(uint32_t dev, uint64_t nth);
/* The verbs calls a call fault fails, and how each fails (as the call
 * fails on hardware): */
typedef enum softnic_call {
    SOFTNIC_CALL_GET_DEVICE_LIST     = 0,  /* NULL, errno */
    SOFTNIC_CALL_OPEN_DEVICE         = 1,  /* NULL, errno */
    SOFTNIC_CALL_QUERY_DEVICE        = 2,  /* the errno value (ibv_query_device_ex,
                                            * which falls back to it, too) */
    SOFTNIC_CALL_QUERY_PORT          = 3,  /* the errno value */
    SOFTNIC_CALL_QUERY_GID           = 4,  /* ibv_query_gid: -1, errno */
    SOFTNIC_CALL_QUERY_GID_EX        = 5,  /* ibv_query_gid_ex: the errno value */
    SOFTNIC_CALL_ALLOC_PD            = 6,  /* NULL, errno */
    SOFTNIC_CALL_REG_MR              = 7,  /* ibv_reg_mr, ibv_reg_mr_iova and
                                            * ibv_reg_mr_iova2: NULL, errno */
    SOFTNIC_CALL_REG_DMABUF_MR       = 8,  /* NULL, errno */
    SOFTNIC_CALL_CREATE_COMP_CHANNEL = 9,  /* NULL, errno */
    SOFTNIC_CALL_CREATE_CQ           = 10, /* NULL, errno */
    SOFTNIC_CALL_REQ_NOTIFY_CQ       = 11, /* the errno value; the CQ is not armed */
    SOFTNIC_CALL_CREATE_QP           = 12, /* NULL, errno */
    SOFTNIC_CALL_MODIFY_QP           = 13, /* the errno value; the QP is unchanged */
    SOFTNIC_CALL_POST_RECV           = 14, /* the errno value, *bad_wr the first WR;
                                            * nothing is posted */
    SOFTNIC_CALL_COUNT
} softnic_call_t;
/* The nth call (1-based) of `call` from now fails with `err` (a positive
 * errno value), before it checks or changes anything, as the provider or
 * kernel refusing it: calls on every device and context count. nth 0 or err
 * not positive is ignored. */
void softnic_fault_call(softnic_call_t call, uint64_t nth, int err);
/* The same for the nth ibv_modify_qp from now that moves a QP to `to`
 * (IBV_QP_STATE in the mask, qp_state `to`); other calls do not count. */
void softnic_fault_modify_qp(enum ibv_qp_state to, uint64_t nth, int err);
/* Move a QP to error now (as a NIC does on a fatal error), with an
 * IBV_EVENT_QP_FATAL async event on its context (nothing on a dead
 * device). -1 if no such QP. */
int  softnic_qp_fatal(uint32_t qpn);
/* Raise an async event on device `dev` (index in the device list), on every
 * context open on it: IBV_EVENT_PORT_ERR (the port goes DOWN; no QP changes
 * state, packets are dropped), IBV_EVENT_PORT_ACTIVE (the port comes back),
 * IBV_EVENT_DEVICE_FATAL (the contexts die: see "Links and devices" above).
 * Other port-scope events are only queued. -1 on a bad argument. */
int  softnic_async(uint32_t dev, enum ibv_event_type type);
void softnic_faults_clear(void);

/* Counters since the process started (or softnic_stats_reset). */
typedef struct softnic_stats {
    uint64_t wrs_posted;       /* send WRs accepted by ibv_post_send */
    uint64_t wrs_executed;     /* send WRs executed (any status) */
    uint64_t bytes_placed;     /* bytes written into remote or local memory */
    uint64_t access_errors;    /* remote accesses refused (rkey, bounds, access) */
    uint64_t rnr_naks;         /* SENDs that found no receive posted */
    uint64_t retries;          /* transport retries (lost ACK, no remote QP) */
    uint64_t cqes;             /* completions written */
    uint64_t cq_overruns;
    uint64_t post_errors;      /* post calls refused (state, depth, sge, inline) */
} softnic_stats_t;

void softnic_stats(softnic_stats_t *stats_p);
void softnic_stats_reset(void);

/* Open objects (contexts, PDs, MRs, CQs, QPs, channels) of the process:
 * tests check that a transport closes everything it opened. */
uint32_t softnic_open_objects(void);

#endif
