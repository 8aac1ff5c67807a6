/*
 * softnic internals: the objects behind the verbs handles and the functions
 * the files of softnic share.
 *
 * Locks, always taken in this order (a thread never takes an earlier one
 * while holding a later one):
 *   1. softnic_g.lock   the fabric: configuration, devices, contexts and
 *                       every object list, the QPN registry, the key tables,
 *                       faults, QP attributes and states, the executing side
 *                       of every SQ and RQ (heads, current WR). The NIC
 *                       threads and the ON_POLL progress hold it while they
 *                       execute WRs, so an MR or QP destroyed under it is
 *                       never touched again.
 *   2. qp->lock         the posting side of a QP's SQ and RQ (slot writes,
 *                       tails). Posters take only this one (THREAD/ON_POLL).
 *   3. cq->lock         a CQ's ring, its arm bit, the slot release of the
 *                       CQEs polled, the SQ head advance of its QPs. NULL
 *                       mode posters take only their send CQ's lock.
 *   4. ch->lock         a completion channel's event FIFO.
 *   5. ctx->async_lock  a context's async event queue.
 *
 * Counters read without a lock (QP state, SQ/RQ tails and done marks, the
 * hot configuration) are C11 atomics.
 */
#ifndef PDX_SOFTNIC_INTERNAL_H
#define PDX_SOFTNIC_INTERNAL_H

#include "softnic.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#define SN_MAX_DEVICES   8
#define SN_PORT          1
#define SN_GIDS_MAX      4            /* entries of a port's GID table at most */
#define SN_QP_BUCKETS    1024
#define SN_KEY_BUCKETS   1024
#define SN_ASYNC_EVENTS  256
#define SN_MAX_RD_ATOMIC 16           /* default max_rd_atom and max_init_rd_atom */
#define SN_MAX_MSG       (1ull << 31)
#define SN_QPN_MASK      0xffffffu
#define SN_IDLE_NS       100000000ull /* longest sleep of a NIC thread or fd wait */
#define SN_POLL_BUDGET   1024         /* WR steps one ON_POLL progress call may run */

#define sn_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Intrusive circular list. */
typedef struct sn_list {
    struct sn_list *next, *prev;
} sn_list_t;

static inline void sn_list_init(sn_list_t *h)
{
    h->next = h->prev = h;
}

static inline int sn_list_empty(const sn_list_t *h)
{
    return h->next == h;
}

static inline void sn_list_add_tail(sn_list_t *h, sn_list_t *n)
{
    n->prev = h->prev;
    n->next = h;
    h->prev->next = n;
    h->prev = n;
}

static inline void sn_list_del(sn_list_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    sn_list_init(n);
}

#define sn_list_for(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define sn_list_for_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

/* One entry of a port's GID table; an empty one is !valid. */
typedef struct sn_gid {
    union ibv_gid gid;
    uint32_t      type;       /* enum ibv_gid_type */
    bool          valid;
} sn_gid_t;

/* The addressing (link layer, LID, GID table) changes only while no
 * context is open (device.c), so readers holding a context need no lock. */
typedef struct sn_device {
    struct ibv_device ibdev;
    uint32_t          index;
    uint8_t           link_layer; /* IBV_LINK_LAYER_ETHERNET or _INFINIBAND */
    uint16_t          lid;        /* InfiniBand; 0: none assigned */
    uint32_t          ngids;      /* gid_tbl_len */
    sn_gid_t          gid[SN_GIDS_MAX];
    _Atomic int       port_state; /* enum ibv_port_state */
    uint64_t          pace_ns;    /* nic_bw token bucket (virtual time), fabric lock */
} sn_device_t;

struct sn_qp;
struct sn_cq;

typedef struct sn_context {
    struct verbs_context vctx; /* first: its ibv_context is the handle */
    sn_device_t         *dev;
    sn_list_t            link; /* softnic_g.contexts */
    sn_list_t            pds, mrs, cqs, qps, channels;
    /* NIC thread (exec.c) */
    pthread_t            thread;
    pthread_cond_t       cv;       /* waits with the fabric lock */
    bool                 running;
    bool                 stop;
    _Atomic int          sleeping; /* the thread waits on cv: posters must kick */
    /* async events (async.c) */
    pthread_mutex_t      async_lock;
    struct ibv_async_event async_ring[SN_ASYNC_EVENTS];
    uint32_t             async_head, async_count;
    int                  async_peer; /* softnic's end of async_fd; -1 once killed */
    /* DEVICE_FATAL: set under the fabric lock, read anywhere. A dead
     * context's NIC executes, completes and flushes nothing more. */
    _Atomic bool         dead;
} sn_context_t;

typedef struct sn_pd {
    struct ibv_pd ibpd;
    sn_context_t *ctx;
    sn_list_t     link;
    uint32_t      users; /* MRs and QPs on it */
} sn_pd_t;

typedef struct sn_mr {
    struct ibv_mr ibmr;
    struct sn_pd *pd;
    sn_list_t     link;
    struct sn_mr *lkey_next, *rkey_next;
    uint64_t      iova;   /* remote and local addresses: [iova, iova + length) */
    uint64_t      length;
    uint8_t      *base;   /* host address of iova */
    unsigned int  access;
    void         *map;    /* dmabuf: our mapping of the fd */
    size_t        map_len;
} sn_mr_t;

typedef struct sn_channel {
    struct ibv_comp_channel ibch;
    sn_context_t           *ctx;
    sn_list_t               link;
    pthread_mutex_t         lock;
    sn_list_t               fifo; /* CQs with events not yet read */
    int                     peer; /* softnic's end of ibch.fd; -1 once killed */
} sn_channel_t;

enum { SN_CQE_NONE, SN_CQE_SQ, SN_CQE_RQ };

typedef struct sn_cqe {
    struct ibv_wc wc;
    struct sn_qp *qp;  /* NULL once the QP is destroyed */
    uint64_t      idx; /* SQ or RQ index the CQE releases */
    int           queue;
} sn_cqe_t;

typedef struct sn_cq {
    struct ibv_cq   ibcq;
    sn_context_t   *ctx;
    sn_channel_t   *ch;
    sn_list_t       link;
    uint32_t        qps;     /* QPs using it, fabric lock */
    pthread_mutex_t lock;
    sn_cqe_t       *ring;
    uint32_t        slots;   /* cap + 1 */
    uint32_t        cap;     /* ibcq.cqe */
    _Atomic uint64_t head, tail; /* written under lock; an empty CQ is seen without it */
    bool            armed;
    bool            overrun; /* in error: CQEs are dropped */
    _Atomic bool    broken;  /* a poll fault hit it: ibv_poll_cq fails for good */
    _Atomic bool    overrun_pending;
    uint32_t        ev_queued; /* events in the channel FIFO (ch->lock) */
    uint32_t        ev_got, ev_acked; /* ch->lock */
    sn_list_t       ch_link;
    uint32_t        async_got, async_acked; /* ctx->async_lock */
} sn_cq_t;

/* One send WR in the SQ ring; sge[max_send_sge] then the inline bytes follow. */
typedef struct sn_swqe {
    uint64_t       wr_id;
    uint64_t       remote_addr;
    uint64_t       not_before; /* post time + delay_us, 0 without delay */
    uint64_t       len;        /* bytes of the WR */
    uint32_t       rkey;
    uint32_t       imm;        /* network order, as posted */
    uint8_t        opcode;
    uint8_t        signaled;
    uint8_t        inl;
    uint8_t        corrupt;    /* a corruption fault hit it: one bit placed flipped */
    uint32_t       num_sge;
    struct ibv_sge sge[];
} sn_swqe_t;

typedef struct sn_rwqe {
    uint64_t       wr_id;
    uint32_t       num_sge;
    struct ibv_sge sge[];
} sn_rwqe_t;

/* The SQ's head WR while it executes (fabric lock). */
enum { SN_PH_TRY, SN_PH_NO_ACK, SN_PH_LOST_ACK };

typedef struct sn_cur {
    bool     started;
    int      phase;
    uint64_t not_before;
    uint32_t retries;  /* transport retries left */
    uint32_t rnr;      /* RNR retries left (rnr_retry 7: forever) */
    bool     matched;  /* faults were matched against this WR */
    bool     lost_ack; /* a lost-ACK fault hit it */
    bool     placed;   /* ... with the data placed */
    enum ibv_wc_status status; /* a status fault hit it */
} sn_cur_t;

typedef struct sn_qp {
    struct ibv_qp   ibqp;
    sn_context_t   *ctx;
    sn_pd_t        *pd;
    sn_cq_t        *scq, *rcq;
    sn_list_t       link;     /* ctx->qps, fabric lock */
    struct sn_qp   *hash_next;
    uint32_t        qpn;
    _Atomic int     state;    /* enum ibv_qp_state, written under the fabric lock */
    struct ibv_qp_cap cap;
    bool            sig_all;
    struct ibv_qp_attr attr;  /* recorded attributes, fabric lock */
    uint32_t        async_got, async_acked; /* ctx->async_lock */
    pthread_mutex_t lock;
    /* SQ */
    uint8_t        *sq;
    size_t          sq_slot;
    _Atomic uint64_t sq_tail; /* posted */
    _Atomic uint64_t sq_head; /* completed or flushed (cq lock + fabric lock) */
    _Atomic uint64_t sq_done; /* slots released by polling */
    sn_cur_t        cur;
    uint64_t        pace_ns;  /* qp_bw token bucket */
    uint64_t        seen_tail;
    /* RQ */
    uint8_t        *rq;
    size_t          rq_slot;
    _Atomic uint64_t rq_tail;
    _Atomic uint64_t rq_head; /* consumed or flushed (fabric lock) */
    _Atomic uint64_t rq_done;
} sn_qp_t;

typedef struct sn_global {
    pthread_mutex_t  lock;
    bool             cfg_ready;
    bool             debug;
    softnic_config_t cfg;
    _Atomic int      mode;
    _Atomic uint32_t delay_us;
    _Atomic uint64_t nic_bw, qp_bw;
    _Atomic bool     move_data;
    _Atomic uint32_t timeout_scale;
    sn_device_t      dev[SN_MAX_DEVICES];
    uint32_t         open_contexts;
    sn_list_t        contexts;
    sn_qp_t         *qp_hash[SN_QP_BUCKETS];
    uint32_t         next_qpn;
    uint32_t         next_handle;
    sn_mr_t         *lkey_hash[SN_KEY_BUCKETS];
    sn_mr_t         *rkey_hash[SN_KEY_BUCKETS];
    uint64_t         key_seq;
    sn_list_t        faults;
    _Atomic uint32_t poll_faults;   /* poll faults in `faults` not yet spent */
    _Atomic uint32_t call_faults;   /* call faults in `faults` not yet spent */
    _Atomic bool     overrun_pending;
    _Atomic uint32_t open_objects;
    struct {
        _Atomic uint64_t wrs_posted, wrs_executed, bytes_placed, access_errors, rnr_naks,
            retries, cqes, cq_overruns, post_errors;
    } st;
} sn_global_t;

extern sn_global_t softnic_g;

#define SN_STAT_ADD(field, n) atomic_fetch_add_explicit(&softnic_g.st.field, (n), memory_order_relaxed)
#define SN_TRACE(...)                   \
    do {                                \
        if (softnic_g.debug)            \
            sn_trace(__VA_ARGS__);      \
    } while (0)

static inline sn_context_t *sn_ctx(struct ibv_context *c)
{
    return sn_container_of(c, sn_context_t, vctx.context);
}

static inline sn_qp_t *sn_qp(struct ibv_qp *q)
{
    return sn_container_of(q, sn_qp_t, ibqp);
}

static inline sn_cq_t *sn_cq(struct ibv_cq *c)
{
    return sn_container_of(c, sn_cq_t, ibcq);
}

static inline bool sn_dead(const sn_context_t *ctx)
{
    return atomic_load_explicit(&ctx->dead, memory_order_relaxed);
}

static inline int sn_qp_state(sn_qp_t *qp)
{
    return atomic_load(&qp->state);
}

static inline sn_swqe_t *sn_swqe(sn_qp_t *qp, uint64_t idx)
{
    return (sn_swqe_t *)(void *)(qp->sq + (idx % qp->cap.max_send_wr) * qp->sq_slot);
}

static inline uint8_t *sn_swqe_inline(sn_qp_t *qp, sn_swqe_t *w)
{
    return (uint8_t *)&w->sge[qp->cap.max_send_sge];
}

/* Host address of [addr, addr + len) inside the MR, or NULL. */
static inline uint8_t *sn_mr_ptr(const sn_mr_t *mr, uint64_t addr, uint64_t len)
{
    if (addr < mr->iova || len > mr->length || addr - mr->iova > mr->length - len)
        return NULL;
    return mr->base + (addr - mr->iova);
}

static inline sn_rwqe_t *sn_rwqe(sn_qp_t *qp, uint64_t idx)
{
    return (sn_rwqe_t *)(void *)(qp->rq + (idx % qp->cap.max_recv_wr) * qp->rq_slot);
}

/* device.c */
void     sn_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void     sn_config_ready(void);   /* fabric lock held */
uint64_t sn_now_ns(void);
bool     sn_gid_ok(const sn_device_t *dev, uint32_t index); /* a valid entry */
uint32_t sn_dev_mtu(const sn_device_t *dev); /* IBV_MTU_* of its port; fabric lock */
void     sn_obj_opened(void);
void     sn_obj_closed(void);

/* async.c */
void sn_async_push(sn_context_t *ctx, enum ibv_event_type type, void *element, int port);
void sn_async_forget(sn_context_t *ctx, void *element);
int  sn_async_busy_qp(sn_qp_t *qp);
int  sn_async_busy_cq(sn_cq_t *cq);
void sn_async_init(sn_context_t *ctx);
void sn_async_fini(sn_context_t *ctx);
int  sn_fd_wait(int fd, uint64_t timeout_ns);
/* Event fds (see async.c): open gives the caller's end and softnic's; raise
 * and lower make it readable or not (level: once each); kill makes it poll
 * POLLERR for good. A killed peer is -1: raise and lower do nothing. */
int  sn_evfd_open(int *fd_p, int *peer_p); /* 0 or an errno value */
void sn_evfd_raise(int peer);
void sn_evfd_lower(int fd, int peer);
void sn_evfd_kill(int *peer_p);
void sn_evfd_close(int fd, int peer);
void sn_context_kill(sn_context_t *ctx); /* DEVICE_FATAL; fabric lock held */

/* mem.c */
sn_mr_t *sn_mr_lkey(uint32_t lkey);
sn_mr_t *sn_mr_rkey(uint32_t rkey);
void     sn_mr_free(sn_mr_t *mr);
void     sn_pd_free(sn_pd_t *pd);

/* cq.c: sn_cq_push with cq->lock held; returns false when the CQE was dropped */
bool sn_cq_push(sn_cq_t *cq, const struct ibv_wc *wc, sn_qp_t *qp, uint64_t idx, int queue);
void sn_cq_forget_qp(sn_cq_t *cq, sn_qp_t *qp);
void sn_cq_free(sn_cq_t *cq);
void sn_channel_free(sn_channel_t *ch);
void sn_channel_kill(sn_channel_t *ch); /* DEVICE_FATAL; fabric lock held */
int  sn_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc);
int  sn_req_notify_cq(struct ibv_cq *ibcq, int solicited_only);

/* qp.c (fabric lock held) */
sn_qp_t *sn_qp_find(uint32_t qpn);
void     sn_qp_to_error(sn_qp_t *qp);
void     sn_qp_flush(sn_qp_t *qp);
void     sn_qp_free(sn_qp_t *qp);
void     sn_settle(void);
void     sn_sq_complete(sn_qp_t *qp, enum ibv_wc_status status, uint32_t byte_len);

/* post.c */
int sn_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int sn_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);

/* exec.c */
int  sn_nic_start(sn_context_t *ctx); /* fabric lock held */
void sn_nic_stop(sn_context_t *ctx);  /* fabric lock not held */
void sn_nic_kick(sn_context_t *ctx);
void sn_progress(void);               /* ON_POLL: run pending WRs */
uint64_t sn_rnr_ns(uint32_t min_rnr_timer);

/*
 * xfer.c (fabric lock held): perform the head WR once. SN_X_DONE: it
 * completed (any status; sn_sq_complete ran). SN_X_PLACED: it succeeded and
 * hold_ack kept its completion back. SN_X_RNR: no receive at the responder,
 * retry after *rnr_ns_p. SN_X_UNREACHABLE: no ACK will come.
 */
enum { SN_X_DONE, SN_X_PLACED, SN_X_RNR, SN_X_UNREACHABLE };
int sn_xfer(sn_qp_t *qp, sn_swqe_t *w, bool hold_ack, uint64_t *rnr_ns_p);

/* fault.c (fabric lock held) */
void sn_fault_match(sn_qp_t *qp, sn_cur_t *cur, sn_swqe_t *w);
/* fault.c, fabric lock not held: whether a poll fault hits this
 * ibv_poll_cq (the CQ is then broken) */
bool sn_fault_poll(sn_cq_t *cq);
/* fault.c, fabric lock not held: 0, or the errno value a call fault fails
 * this call of `call` with; `to`: the target state of an ibv_modify_qp
 * with IBV_QP_STATE, else -1. */
int  sn_fault_call(softnic_call_t call, int to);
/* fault.c: the context's post_recv, a call fault first, then sn_post_recv */
int  sn_fault_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
                        struct ibv_recv_wr **bad_wr);

#endif
