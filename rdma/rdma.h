/*
 * rdma transport internals: ibverbs RC QPs behind the ops table of
 * base/transport.h (docs/architecture.md §8).
 *
 * Files, one object each:
 *   device.c    device, port and GID selection, device limits
 *   mr.c        registered regions (host memory and dmabuf)
 *   cq.c        completion queues (split in several ibv CQs past max_cqe):
 *               wr_id decoding, status mapping, slot freeing
 *   sw_flush.c  the software flush: error completions made from the rings
 *   qp.c        endpoints: QP creation, address blob, connect, fail, destroy
 *   post.c      the post path: WRITE (gathered: several per ibv WR), SEND,
 *               RECV, READ
 *   async.c     the async-event thread
 *   tp.c        open/close and the ops table
 *
 * Threads and ownership:
 * - One poster per ep at a time (its shard): post_* touch only the ep's
 *   poster fields (sq_head, rq_head, the WR array) and never lock, allocate
 *   or make a syscall beyond ibv_post_send / ibv_post_recv. sq_head and
 *   rq_head are published with a release store once per call: the CQ
 *   owner reads them for the software flush below and when a CQE
 *   overtakes the call that posted its WR (post.c: refused posts).
 * - One poller per CQ (its shard): cq_poll takes no lock. It reads CQEs,
 *   looks eps up in the CQ's slot table (atomics written under the CQ's
 *   lock), and owns the stash and the software-flush list. A thread that
 *   changes those, or frees an ep the poller may be reading, does it under
 *   the CQ's lock with the poller excluded (cq.c: rdma_cq_exclude): it
 *   waits for the cq_poll in progress, if any, to end, and the next one
 *   waits for it. ep_destroy, excluded, retires the ep's slot (no poller
 *   reaches the ep after that), then destroys the QP, then, excluded
 *   again, drains the CQ and gives the slot and the reservation back, and
 *   only then frees the ep. ep_create takes the lock and excludes the
 *   poller only where it fails (it gives its reservation back as
 *   ep_destroy does). Consuming a
 *   completion frees the ep's SQ/RQ slots it covers (sq_done, rq_done,
 *   release stores the poster reads with acquire).
 * - Setup calls (mr_*, cq_create/destroy, ep_create/connect/fail/destroy)
 *   may come from any thread; each object is set up and torn down by one
 *   thread at a time. ep_destroy is the last call on its ep.
 * - The async-event thread (async.c) fails eps on fatal events. It finds
 *   eps through the tp's list under tp->lock (QP events) or through the
 *   CQs' slot tables under each CQ's lock (CQ and device events);
 *   ep_destroy unlinks the ep under tp->lock and retires its slot under
 *   the CQ's lock before it destroys the QP.
 * - Ep error state (err, errp, err_claim) is C11 atomics: the first writer
 *   claims it, writes its message, then publishes err and errp with
 *   release stores. A record made from a flush CQE is provisional: a later
 *   cause from the NIC (an async event, a non-flush error CQE) replaces it,
 *   once, in the second message buffer (rdma_ep_set_error).
 * - Software flush: where the NIC will report nothing more (DEVICE_FATAL,
 *   CQ_ERR, a failing ibv_poll_cq, a dead completion channel or async fd,
 *   or an ep in error whose WRs are still outstanding progress_timeout_ms
 *   after it failed), the ep is marked sw_flush on its CQ; cq_poll then
 *   completes its ring entries itself, in order, with the ep's error
 *   status, and ignores the ep's real CQEs from then on.
 * - Locks: tp->lock (ep, CQ and region lists), tp->async_lock (held by the
 *   async thread from reading an event until it is acked, and around
 *   ibv_destroy_qp/cq, which must not run between the two), each CQ's lock
 *   (its ep table and reservations; with the poller excluded, also the
 *   stash, the flush list and ibv_poll_cq of its ibv CQs). Order:
 *   async_lock, then tp->lock, then a CQ's lock, then the exclusion of its
 *   poller (cq_poll holds none of them); ep_destroy and ep_create take
 *   them one at a time.
 *
 * Work-request ids: the ibv wr_id of every WR encodes (slot of the ep in its
 * CQ's ep table, that slot's generation, send or receive queue, ring index);
 * the engine's wr_id lives in the ep's ring. A completion finds its ep by the
 * slot, not by scanning QP numbers, and a completion of a destroyed ep (the
 * slot's generation moved on) is dropped.
 *
 * Ring entries are the caller's WRs: one per pdx_tp_write_t, SEND, READ or
 * RECV. A gathered ibv WRITE (post.c) carries several consecutive entries,
 * one SGE each; its ibv wr_id names the last of them, so its completion
 * covers them all, as a completion covers the unsignaled WRs before it, and
 * says how many it carries (for its error completion: cq.c).
 */
#ifndef PDX_RDMA_INTERNAL_H
#define PDX_RDMA_INTERNAL_H

#include "log.h"
#include "thread.h"
#include "transport.h"
#include "util.h"

#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define RDMA_DEFAULT_MAX_MSG  (1ull << 20)
#define RDMA_ERRMSG_MAX       256u
#define RDMA_DEVNAME_MAX      64u
#define RDMA_RD_ATOMIC_MAX    16u   /* outstanding READs per QP, both directions */
#define RDMA_MIN_RNR_TIMER    12u   /* 0.64 ms */
#define RDMA_CQ_MAX_EPS       (1u << 16)
#define RDMA_MAX_SGE          16u   /* SGEs of one gathered WRITE at most (post.c);
                                     * at most RDMA_WR_GATHER_MASK + 1 */
#define RDMA_CQ_MAX_ICQS      256u  /* ibv CQs behind one CQ at most (cq.c) */
#define RDMA_ADDR_VERSION     1u
#define RDMA_ADDR_LEN         32u

/* ibv wr_id layout:
 * | generation 19 | gathered 4 | ep slot 16 | queue 1 | ring index 24 |
 * gathered: how many ring entries before the indexed one the WR carries
 * too (post.c: gathered WRITEs; 0 for any other WR) */
#define RDMA_WR_IDX_BITS      24u
#define RDMA_WR_IDX_MASK      ((1ull << RDMA_WR_IDX_BITS) - 1)
#define RDMA_WR_RQ_BIT        (1ull << RDMA_WR_IDX_BITS)
#define RDMA_WR_SLOT_SHIFT    (RDMA_WR_IDX_BITS + 1u)
#define RDMA_WR_SLOT_MASK     (RDMA_CQ_MAX_EPS - 1u)
#define RDMA_WR_GATHER_SHIFT  (RDMA_WR_SLOT_SHIFT + 16u)
#define RDMA_WR_GATHER_MASK   15u
#define RDMA_WR_GEN_SHIFT     (RDMA_WR_GATHER_SHIFT + 4u)
#define RDMA_WR_GEN_MASK      ((1u << (64u - RDMA_WR_GEN_SHIFT)) - 1u)
#define RDMA_MAX_DEPTH        (1u << RDMA_WR_IDX_BITS)

typedef struct rdma_tp rdma_tp_t;
typedef struct rdma_ep rdma_ep_t;
typedef struct rdma_cq rdma_cq_t;
typedef struct rdma_mr rdma_mr_t;

/* ------------------------------------------------------------- device */

/* What device.c found: the device, port and GID this tp uses. */
typedef struct rdma_dev_info {
    char           name[RDMA_DEVNAME_MAX];
    uint8_t        port;
    uint8_t        link_layer;      /* IBV_LINK_LAYER_* */
    uint8_t        active_mtu;      /* enum ibv_mtu */
    uint16_t       lid;
    int            gid_index;       /* -1: no GRH (IB without PDX_IB_GID_INDEX) */
    union ibv_gid  gid;
    uint32_t       port_max_msg;
    /* device limits */
    uint64_t       max_mr_size;
    uint32_t       max_qp_wr;
    uint32_t       max_sge;         /* SGEs of one send WR */
    uint32_t       max_cqe;
    uint32_t       max_rd_atomic;       /* as initiator */
    uint32_t       max_dest_rd_atomic;  /* as responder */
} rdma_dev_info_t;

/* Knobs from the configuration (params->config may be NULL: defaults). */
typedef struct rdma_knobs {
    char     devices[PDX_NAME_MAX];
    int32_t  gid_index;
    uint8_t  traffic_class;
    uint8_t  hop_limit;
    uint8_t  timeout;
    uint8_t  retry_count;
    uint8_t  rnr_retry;
    char     nearest[512];    /* devices nearest the GPU, comma-separated: tried
                               * first when PDX_IB_DEVICES is empty */
} rdma_knobs_t;

void rdma_knobs_read(const pdx_config_t *cfg, rdma_knobs_t *knobs_p);
/*
 * Open the usable device (ACTIVE port, usable GID) number nic (0: the
 * first) in the order of knobs->devices, else knobs->nearest first, then
 * the list's. PDX_ERR_NO_DEVICE when there is none, logged with the reason
 * (at info when quiet, else as an error). On success *list_p (to free at
 * close) and *ctx_p are set.
 */
pdx_status_t rdma_device_open(const rdma_knobs_t *knobs, uint32_t nic, bool quiet,
                              struct ibv_device ***list_p, struct ibv_context **ctx_p,
                              rdma_dev_info_t *info_p);
const char *rdma_mtu_str(uint8_t mtu);

/* ::ffff:a.b.c.d, the GID of RoCEv2 over IPv4 */
static inline bool rdma_gid_ipv4_mapped(const union ibv_gid *gid)
{
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

    return memcmp(gid->raw, prefix, sizeof(prefix)) == 0;
}

/* fe80::/10: valid on its link only */
static inline bool rdma_gid_link_local(const union ibv_gid *gid)
{
    return gid->raw[0] == 0xfe && (gid->raw[1] & 0xc0) == 0x80;
}

/* ------------------------------------------------------------------ mr */

struct rdma_mr {
    rdma_tp_t        *tp;
    uint8_t          *base;     /* the address WRs use (the iova for dmabuf) */
    size_t            len;
    unsigned          access;   /* PDX_TP_ACCESS_* */
    _Atomic uint32_t  refs;     /* posted WRs reading or writing it */
    rdma_mr_t        *next, *prev;   /* tp->mrs, under tp->lock */
    uint32_t          npieces;  /* registrations: piece k covers [k, k + 1) * mr_piece */
    uint32_t         *rkeys;    /* npieces > 1: each piece's rkey (mr_remote) */
    struct ibv_mr    *mr[];     /* npieces */
};


static inline rdma_mr_t *rdma_mr(const pdx_tp_mr_t *mr)
{
    return (rdma_mr_t *)(void *)(uintptr_t)mr;
}

static inline void rdma_mr_unref(rdma_mr_t *mr)
{
    if (mr)
        atomic_fetch_sub_explicit(&mr->refs, 1, memory_order_release);
}

pdx_status_t rdma_mr_reg(pdx_tp_t *tp, void *base, size_t len, unsigned access,
                         pdx_tp_mr_t **mr_p);
pdx_status_t rdma_mr_reg_dmabuf(pdx_tp_t *tp, void *base, size_t len, int fd, uint64_t offset,
                                unsigned access, pdx_tp_mr_t **mr_p);
pdx_status_t rdma_mr_dereg(pdx_tp_mr_t *mr);
void rdma_mr_remote(const pdx_tp_mr_t *mr, pdx_tp_rkey_t *rkey_p);
/* tp close: deregister whatever is left. */
void rdma_mr_free(rdma_mr_t *mr);

/* ------------------------------------------------------------------ cq */

/* Written under the CQ's lock; ep and gen are read by cq_poll without it. */
typedef struct rdma_cq_slot {
    _Atomic(rdma_ep_t *) ep;    /* NULL until attached */
    _Atomic uint32_t     gen;   /* of the ep using it, or of the next one */
    bool                 busy;  /* reserved by an ep */
} rdma_cq_slot_t;

/* One ibv CQ of a pdx CQ: a pdx CQ deeper than the device's max_cqe holds
 * several, all on its one completion channel (cq.c). */
typedef struct rdma_icq {
    struct ibv_cq           *cq;
    uint32_t                 depth;     /* entries asked for (<= max_cqe): what
                                         * its eps may reserve */
    uint32_t                 reserved;  /* sum of sq + rq depths of its eps (lock) */
    uint32_t                 events;    /* read from the channel, not yet acked
                                         * (cq_ack, cq_free) */
} rdma_icq_t;

struct rdma_cq {
    rdma_tp_t               *tp;
    struct ibv_comp_channel *channel;
    rdma_icq_t              *icqs;      /* ceil(depth / max_cqe) */
    uint32_t                 nicq;
    uint32_t                 depth;     /* the sum of their depths */
    uint32_t                 poll_next; /* the ibv CQ cq_poll reads first (owner) */

    /* cq_poll takes no lock (cq.c: the poller and the excluders): polling
     * is 1 while it runs; excl is 1 while a holder of the lock works on
     * what cq_poll reads (marked "poller's" below). */
    alignas(PDX_CACHELINE) _Atomic uint32_t polling;
    _Atomic uint32_t         excl;

    alignas(PDX_CACHELINE) pthread_mutex_t lock; /* the table: slots, reservations;
                                                  * excl is raised under it */
    uint32_t                 reserved;  /* sum of sq + rq depths of its eps */
    uint32_t                 nep;
    rdma_cq_slot_t          *slots;
    uint32_t                 nslots;
    uint32_t                 slot_hint;
    /* The poller's: CQEs of live eps that ep_destroy read while it drained an ibv CQ,
     * and those cq_poll made of an error CQE of a gathered WRITE (one per
     * ring entry it carries, cq.c); cq_poll hands them out first. Never
     * more than depth: each is one outstanding WR or receive. */
    struct ibv_wc           *stash;
    uint32_t                 stash_head, stash_n;
    /* The poller's: eps whose completions cq_poll makes from their rings
     * (rdma.h top), linked through rdma_ep.flush_next until they leave the CQ */
    rdma_ep_t               *flush_list;
    uint64_t                 backstop_at;   /* next look for stuck failed eps */

    /* The CQ in error (CQ_ERR, DEVICE_FATAL, a failing poll, arm or event
     * read): no CQE or event will come; its eps are flushed in software
     * and it takes no new ep. Set under lock; cq_arm, cq_ack read it. */
    _Atomic bool             dead;
    _Atomic uint32_t         failed_eps;    /* attached eps with an error */

    rdma_cq_t               *next, *prev;   /* tp->cqs, under tp->lock */
};

static inline rdma_cq_t *rdma_cq(pdx_tp_cq_t *cq)
{
    return (rdma_cq_t *)(void *)cq;
}

pdx_status_t rdma_cq_create(pdx_tp_t *tp, uint32_t depth, pdx_tp_cq_t **cq_p);
void rdma_cq_destroy(pdx_tp_cq_t *cq);
int rdma_cq_poll(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max);
pdx_status_t rdma_cq_arm(pdx_tp_cq_t *cq);
int rdma_cq_fd(pdx_tp_cq_t *cq);
void rdma_cq_ack(pdx_tp_cq_t *cq);
/* tp close: free a CQ without eps. */
void rdma_cq_free(rdma_cq_t *cq);
/* ep_create: reserve entries on one ibv CQ of the CQ (*icq_p, its index)
 * and a table slot (PDX_ERR_FULL when no ibv CQ has the room, or no slot is
 * free); the slot stays empty until rdma_cq_attach. */
pdx_status_t rdma_cq_reserve(rdma_cq_t *cq, uint32_t entries, uint32_t *slot_p, uint32_t *gen_p,
                             uint32_t *icq_p);
/* ep_create, last: put the ep in its slot. PDX_ERR_IO (logged) when the
 * CQ went into error since the reservation. */
pdx_status_t rdma_cq_attach(rdma_cq_t *cq, rdma_ep_t *ep);
/* ep_destroy, before its QP goes: empty the slot (new generation), so no
 * poller reaches the ep and its CQEs still in the CQ are dropped. */
void rdma_cq_retire(rdma_cq_t *cq, rdma_ep_t *ep);
/* After the QP is gone: keep the other completions of its ibv CQ, drop the
 * ep's, give back the slot and the reservation. */
void rdma_cq_release(rdma_cq_t *cq, uint32_t slot, uint32_t icq, uint32_t entries);
/* sw_flush.c, in cq_poll: the software flush's completions (at most max)
 * and the backstop (progress_timeout_ms after an ep failed). */
int rdma_flush_poll(rdma_cq_t *cq, pdx_tp_wc_t *wc, int max);
void rdma_flush_backstop(rdma_cq_t *cq);
/* With cq->lock held: wait until no cq_poll runs and keep new ones waiting
 * (what they read may change); rdma_cq_include lets them go on. */
void rdma_cq_exclude(rdma_cq_t *cq);
void rdma_cq_include(rdma_cq_t *cq);
/* The CQ is in error for good: fail every ep on it ("<what>, QP 0x.."),
 * move their QPs to ERR (unless the device is gone), flush them in
 * software, refuse new eps. Returns how many eps were on it. Any thread
 * but one holding the CQ's lock. */
uint32_t rdma_cq_fail(rdma_cq_t *cq, const char *what);
/* Its body, with cq->lock held and the poller excluded (ep_destroy's drain). */
uint32_t rdma_cq_fail_excluded(rdma_cq_t *cq, const char *what);

/* ------------------------------------------------------------------ ep */

/* One ring entry per WR of the caller (rdma.h top: gathered WRITEs). */
typedef struct rdma_wqe {
    uint64_t   wr_id;           /* the engine's */
    rdma_mr_t *mr;              /* region it reads or writes; NULL: inline SEND */
    uint32_t   opcode;          /* pdx_tp_opcode_t */
    bool       hidden;          /* posted by a call that was refused: the
                                 * caller knows nothing of it, so its
                                 * completion frees the entry and goes to
                                 * nobody (post.c; never cleared, as the ep
                                 * posts nothing more) */
} rdma_wqe_t;

/* Release the regions of ring entries [from, to): one atomic per run of one
 * region (NULL entries, inline SENDs, hold none). */
static inline void rdma_mr_unref_range(const rdma_wqe_t *ring, uint32_t mask, uint64_t from,
                                       uint64_t to)
{
    const rdma_wqe_t *q = ring + (from & mask), *const wrap = ring + (uint64_t)mask + 1;
    uint64_t left = to - from;

    while (left) {
        /* the entries up to the end of the ring, in runs of one region */
        const rdma_wqe_t *const stop = q + PDX_MIN(left, (uint64_t)(wrap - q));

        left -= (uint64_t)(stop - q);
        while (q != stop) {
            const rdma_wqe_t *const first = q;
            rdma_mr_t *const mr = q->mr;

            do
                q++;
            while (q != stop && q->mr == mr);
            if (mr)
                atomic_fetch_sub_explicit(&mr->refs, (uint32_t)(q - first), memory_order_release);
        }
        if (q == wrap)
            q = ring;
    }
}

struct rdma_ep {
    rdma_tp_t          *tp;
    rdma_cq_t          *cq;
    struct ibv_qp      *qp;
    uint32_t            qpn;                /* for messages: never ep->qp there */
    uint32_t            slot, gen;          /* in cq's ep table */
    uint32_t            icq;                /* its ibv CQ: cq->icqs[icq] */
    uint32_t            sq_depth, rq_depth;
    uint32_t            sq_mask, rq_mask;
    uint32_t            max_inline;         /* 0: SENDs go from the slot ring */
    uint32_t            max_sge;            /* SGEs of one gathered WRITE */
    uint32_t            psn;
    rdma_wqe_t         *sq, *rq;
    struct ibv_send_wr *wrs;                /* sq_depth WRITEs of one post_write: */
    struct ibv_sge     *sges;               /* templates (rdma_post_write_init):
                                             * wrs[i] starts at sges[i], the
                                             * call's WRITE i */
    uint8_t            *send_slots;         /* PDX_TP_SEND_MAX per SQ entry */
    struct ibv_mr      *send_slots_mr;

    /* poster -> CQ owner: WRs before these are posted (release stores, one
     * per call; the poster alone writes them and reads them relaxed) */
    alignas(PDX_CACHELINE) _Atomic uint64_t sq_head;
    _Atomic uint64_t    rq_head;

    /* CQ owner -> poster: WRs before these are completed */
    alignas(PDX_CACHELINE) _Atomic uint64_t sq_done;
    _Atomic uint64_t    rq_done;

    /* anyone -> anyone: err is 0 while healthy, else the status flushed
     * WRs get; errp points at the message (NULL while healthy). err_claim
     * says who wrote errmsg[0] (1: a flush CQE, 2: a cause) and becomes 3
     * when a cause replaced a flush record in errmsg[1]. Each buffer is
     * written once, before it is published. */
    alignas(PDX_CACHELINE) _Atomic int err;
    _Atomic uint32_t    err_claim;
    _Atomic(const char *) errp;
    _Atomic uint64_t    err_ns;             /* when it failed (the backstop); 0: not yet */
    char                errmsg[2][RDMA_ERRMSG_MAX];

    /* the CQ's poller's (rdma_cq_t) */
    bool                sw_flush;           /* its completions come from its rings */
    rdma_ep_t          *flush_next;         /* cq->flush_list */
    uint64_t            sq_seen;            /* sq_head as last read: WRs before it
                                             * belong to calls that returned */

    _Atomic bool        connect_called;
    _Atomic bool        connected;
    _Atomic uint32_t    remote_qpn;

    rdma_ep_t          *next, *prev;        /* tp->eps, under tp->lock */
};

static inline rdma_ep_t *rdma_ep(const pdx_tp_ep_t *ep)
{
    return (rdma_ep_t *)(void *)(uintptr_t)ep;
}

static inline pdx_tp_ep_t *rdma_ep_pub(rdma_ep_t *ep)
{
    return (pdx_tp_ep_t *)(void *)ep;
}

static inline uint64_t rdma_wr_id(const rdma_ep_t *ep, bool rq, uint64_t seq)
{
    return ((uint64_t)ep->gen << RDMA_WR_GEN_SHIFT) | ((uint64_t)ep->slot << RDMA_WR_SLOT_SHIFT) |
           (rq ? RDMA_WR_RQ_BIT : 0) | (seq & RDMA_WR_IDX_MASK);
}

pdx_status_t rdma_ep_create(pdx_tp_t *tp, pdx_tp_cq_t *cq, const pdx_tp_ep_attr_t *attr,
                            pdx_tp_ep_t **ep_p);
void rdma_ep_address(const pdx_tp_ep_t *ep, pdx_tp_addr_t *addr_p);
pdx_status_t rdma_ep_connect(pdx_tp_ep_t *ep, const pdx_tp_addr_t *remote);
void rdma_ep_fail(pdx_tp_ep_t *ep, pdx_status_t why, const char *msg);
void rdma_ep_destroy(pdx_tp_ep_t *ep);
const char *rdma_ep_error(const pdx_tp_ep_t *ep);

/* What an error record is (rdma_ep_set_error). */
typedef enum rdma_err_kind {
    RDMA_ERR_FIRST = 0,  /* recorded only if the ep has no error yet */
    RDMA_ERR_FLUSH = 1,  /* from a flush CQE: the QP is in error, the cause
                          * unknown here; a later RDMA_ERR_CAUSE replaces it */
    RDMA_ERR_CAUSE = 2,  /* the NIC's own report (an async event, a non-flush
                          * error CQE): replaces an RDMA_ERR_FLUSH record */
    RDMA_ERR_ASKED = 3,  /* the engine's ep_fail: as RDMA_ERR_FIRST, and not
                          * logged again (the engine said why) */
} rdma_err_kind_t;

/*
 * Record why the ep failed; the first caller wins (true), later ones change
 * nothing, but for a cause replacing a flush record (also true). `why` is
 * what its flushed WRs complete with. Logs at warn, after publishing.
 */
bool rdma_ep_set_error(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt,
                       ...) __attribute__((format(printf, 4, 5)));
/* Record the error and, if it is the ep's first, move the QP to ERR: the
 * NIC flushes every outstanding WR and receive as error CQEs (not on a
 * device that is gone). Any thread, while the ep is attached. */
void rdma_ep_kill(rdma_ep_t *ep, pdx_status_t why, rdma_err_kind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The message once the ep's error is published: waits out another thread
 * that claimed it and is writing it. Only for an ep with err_claim set. */
const char *rdma_ep_errmsg_wait(rdma_ep_t *ep);

/* post.c, the ep's poster */
/* ep_create: wrs[i] becomes an RDMA WRITE of sges[i], chained to wrs[i + 1];
 * post_write then writes only the fields that change per WR (a gathered WR
 * takes the SGEs after its own, and its next skips their templates). */
void rdma_post_write_init(rdma_ep_t *ep);
pdx_status_t rdma_post_write(pdx_tp_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n);
pdx_status_t rdma_post_runs(pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs, uint32_t *bad_p);
pdx_status_t rdma_post_send(pdx_tp_ep_t *ep, uint64_t wr_id, const void *data, uint32_t len,
                            unsigned flags);
pdx_status_t rdma_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                            uint64_t offset, uint32_t len);
pdx_status_t rdma_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                            uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey);

/* ------------------------------------------------------------------ tp */

struct rdma_tp {
    pdx_tp_t             base;
    struct ibv_device  **devices;
    struct ibv_context  *ctx;
    struct ibv_pd       *pd;
    rdma_dev_info_t      dev;
    rdma_knobs_t         knobs;
    uint64_t             max_msg_size;

    pthread_mutex_t      lock;          /* the lists below */
    rdma_ep_t           *eps;
    rdma_cq_t           *cqs;
    rdma_mr_t           *mrs;

    uint64_t             progress_timeout_ns; /* the software-flush backstop; 0: none */
    _Atomic bool         dead;          /* DEVICE_FATAL or a dead async fd */

    /* async.c */
    pthread_mutex_t      async_lock;    /* an event read and not yet acked */
    pthread_t            async_thread;
    int                  async_stop_fd;
    bool                 async_started;
};

/* The lkey of the piece holding offset off (a WR stays inside one piece). */
static inline uint32_t rdma_mr_lkey(const rdma_mr_t *mr, uint64_t off)
{
    return mr->npieces > 1 ? mr->mr[off / mr->tp->base.mr_piece]->lkey : mr->mr[0]->lkey;
}

/* Whether [off, off + len) of mr lies inside one of its pieces (len >= 1). */
static inline bool rdma_mr_one_piece(const rdma_mr_t *mr, uint64_t off, uint64_t len)
{
    const uint64_t piece = mr->tp->base.mr_piece;

    return mr->npieces == 1 || off / piece == (off + len - 1) / piece;
}

static inline rdma_tp_t *rdma_tp(pdx_tp_t *tp)
{
    return pdx_container_of(tp, rdma_tp_t, base);
}

/* async.c: start (fd made nonblocking) and stop (bounded join) the thread.
 * rdma_async_stop returns false when the thread did not stop in time. */
pdx_status_t rdma_async_start(rdma_tp_t *tp);
bool rdma_async_stop(rdma_tp_t *tp);
/* Act on one event (the thread calls it under async_lock; tests call it to
 * inject events softnic cannot raise). */
void rdma_async_handle(rdma_tp_t *tp, const struct ibv_async_event *ev);
/* sw_flush.c: the device is gone (DEVICE_FATAL, a dead async fd): mark the tp
 * dead and fail every ep of every CQ with a software flush. Idempotent;
 * takes tp->lock, then each CQ's lock. */
void rdma_device_dead(rdma_tp_t *tp, const char *why);

/* --------------------------------------------------------------- info */

/*
 * What pdx-info shows of the RDMA devices (info.c), read without an engine:
 * every device libibverbs lists, each of its ports and each GID of a port
 * that is not all zeros. Nothing stays open once rdma_info_read returns.
 * A device or port that cannot be read carries the reason in its error
 * text; the rest are still read.
 */
#define RDMA_INFO_FW_MAX   64u
#define RDMA_INFO_ADDR_MAX 46u   /* INET6_ADDRSTRLEN */

typedef struct rdma_info_gid {
    uint32_t      index;
    union ibv_gid gid;
    const char   *type;      /* "RoCE v2", "RoCE v1", "IB" or "?" (static text) */
    const char   *type_from; /* "verbs" (ibv_query_gid_ex) or "sysfs" (gid_attrs/types) */
    char          addr[RDMA_INFO_ADDR_MAX]; /* "10.0.0.1" for ::ffff:10.0.0.1, else IPv6 */
} rdma_info_gid_t;

typedef struct rdma_info_port {
    uint8_t          num;
    uint8_t          state;          /* enum ibv_port_state */
    uint8_t          link_layer;     /* IBV_LINK_LAYER_* */
    uint8_t          active_mtu;     /* enum ibv_mtu */
    uint8_t          active_width;   /* as verbs says: 1, 2, 4, 8, 16 */
    uint8_t          active_speed;   /* as verbs says: 1 (SDR) .. 128 (NDR) */
    uint16_t         lid;
    uint32_t         lanes;          /* active_width as lanes; 0: unknown */
    double           lane_gbps;      /* active_speed as Gb/s per lane; 0: unknown */
    uint32_t         ngids;
    rdma_info_gid_t *gids;           /* in index order */
    char             error[RDMA_ERRMSG_MAX]; /* "": read whole */
} rdma_info_port_t;

typedef struct rdma_info_dev {
    char              name[RDMA_DEVNAME_MAX];
    uint64_t          node_guid;     /* host byte order */
    char              fw_ver[RDMA_INFO_FW_MAX];
    uint32_t          nports;
    rdma_info_port_t *ports;
    char              error[RDMA_ERRMSG_MAX]; /* "": read whole */
} rdma_info_dev_t;

typedef struct rdma_info {
    uint32_t         ndevs;
    rdma_info_dev_t *devs;           /* in the order libibverbs lists them */
    char             why[RDMA_ERRMSG_MAX]; /* ndevs 0: why ("libibverbs lists none") */
} rdma_info_t;

/* Read every device. sysfs_root ("/sys") is where a GID's RoCE version is
 * read when ibv_query_gid_ex cannot say. PDX_ERR_NOMEM only; no device is
 * PDX_OK with ndevs 0 and the reason in why. */
pdx_status_t rdma_info_read(const char *sysfs_root, rdma_info_t **info_p);
void rdma_info_free(rdma_info_t *info);

/* "ACTIVE", "DOWN", ... and "Ethernet", "InfiniBand" (static text). */
const char *rdma_info_port_state(uint8_t state);
const char *rdma_info_link_layer(uint8_t link_layer);

/* The RoCE version of GID index of dev's port from
 * <sysfs_root>/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>
 * ("RoCE v2", "RoCE v1", "IB" on an InfiniBand port); NULL when unreadable. */
const char *rdma_info_gid_type_sysfs(const char *sysfs_root, const char *dev, uint8_t port,
                                     uint32_t index, uint8_t link_layer);

/* A GID as text: the IPv4 address of ::ffff:a.b.c.d, else the IPv6 text. */
void rdma_info_gid_text(const union ibv_gid *gid, char *buf, size_t len);

/* Which device, port and GID an engine of these knobs would open first
 * (rdma_device_open, quiet: the reason is logged at info), closed again. */
pdx_status_t rdma_info_probe(const rdma_knobs_t *knobs, rdma_dev_info_t *info_p);

#endif
