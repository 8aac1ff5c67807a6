/*
 * tcp transport internals: one stream socket per endpoint with RC-QP
 * semantics (base/transport.h, docs/architecture.md §8).
 *
 * Files, one object each:
 *   tp.c     open/close, the progress thread (epoll loop), commands, pause
 *   conn.c   connection setup (dial, accept, HELLO matching) and ep errors
 *   ep.c     the endpoint API and the post path (owner thread)
 *   tx.c     frames out, acks in -> send completions
 *   rx.c     frames in, placement, acks out, receive completions
 *   cq.c     completion queues
 *   mr.c     registered regions, rkey table
 *   stage.c  GPU memory: pinned staging rings and asynchronous copies
 *   copier.c the default copier (hip/) behind pdx_tcp_copier_t (tcp.h)
 *   proto.c  wire format: frame headers, endpoint addresses
 *
 * Threads and ownership:
 * - The poster (the ep's owner thread, one at a time) writes SQ/RQ entries
 *   past sq_pub/rq_pub and publishes them with a release store.
 * - The progress thread of the tp owns every socket and all ep state below
 *   "progress thread only"; it reads published entries and produces
 *   completions.
 * - The CQ's owner thread (cq_poll) frees SQ/RQ slots (sq_freed/rq_freed)
 *   as it consumes completions, so an ep never has more completions
 *   outstanding than its sq_depth + rq_depth and a CQ sized to the sum of
 *   its eps' depths never overflows.
 * - Setup calls (ep_create/connect/fail/destroy) hand a command to the
 *   progress thread and wait for it with a deadline.
 * - GPU memory (stage.c): setup calls make and free staging; the progress
 *   thread alone issues copies and polls them, and never waits for one.
 */
#ifndef PDX_TCP_INTERNAL_H
#define PDX_TCP_INTERNAL_H

#include "log.h"
#include "thread.h"
#include "transport.h"
#include "util.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "proto.h"
#include "tcp.h"

#define TCP_DEFAULT_TIMEOUT_MS  10000u
#define TCP_DEFAULT_MAX_MSG     (4ull << 20)
#define TCP_MAX_DEPTH           65536u
#define TCP_CMD_TIMEOUT_MS      5000u
#define TCP_CTRL_MAX            64u        /* queued ACK/ERR/HELLO frames per ep */
#define TCP_RXBUF               (64u << 10) /* header/small-frame buffer per ep */
#define TCP_ERRMSG_MAX          256u
#define TCP_MAX_PENDING         256u       /* incoming connections awaiting a match */
#define TCP_DEFAULT_STAGING     (16ull << 20) /* pinned staging per ep moving GPU bytes */
#define TCP_STAGING_MIN         (64ull << 10)
#define TCP_STAGE_PIECES        64u        /* copies in flight per direction per ep */
#define TCP_PIECE_MIN           (4u << 10)
#define TCP_PIECE_MAX           (1u << 20)
#define TCP_RX_DEFER            256u       /* frames received behind an unplaced GPU write */

typedef struct tcp_tp tcp_tp_t;
typedef struct tcp_ep tcp_ep_t;
typedef struct tcp_cq tcp_cq_t;
typedef struct tcp_mr tcp_mr_t;
typedef struct tcp_conn tcp_conn_t;
typedef struct tcp_stage tcp_stage_t;

/* What an epoll event's data.ptr points at. */
typedef enum tcp_poll_kind {
    TCP_POLL_LISTEN = 1,
    TCP_POLL_WAKE   = 2,
    TCP_POLL_EP     = 3,
    TCP_POLL_CONN   = 4,
} tcp_poll_kind_t;

typedef struct tcp_pollable {
    tcp_poll_kind_t kind;
} tcp_pollable_t;

/* ------------------------------------------------------------------ mr */

typedef enum tcp_mem_kind {
    TCP_MEM_HOST = 0,
    /* GPU memory (PDX_TP_ACCESS_DEVICE): the CPU never touches its bytes; a
     * WRITE from it is copied to pinned staging first, a WRITE into it is
     * read into staging and copied over, and acknowledged after (stage.c). */
    TCP_MEM_DEVICE = 1,
} tcp_mem_kind_t;

struct tcp_mr {
    tcp_tp_t        *tp;
    uint8_t         *base;
    size_t           len;
    unsigned         access;
    uint32_t         rkey;
    tcp_mem_kind_t   kind;
    _Atomic uint32_t refs;   /* WRs and placements using the region */
};

#define TCP_MR_SLOT_BITS 12u
#define TCP_MR_MAX       (1u << TCP_MR_SLOT_BITS)

typedef struct tcp_mr_table {
    pthread_mutex_t lock;
    tcp_mr_t       *slot[TCP_MR_MAX];
    uint32_t        gen[TCP_MR_MAX];
    uint32_t        free_list[TCP_MR_MAX];
    uint32_t        nfree;
} tcp_mr_table_t;

pdx_status_t tcp_mr_table_init(tcp_mr_table_t *table);
void tcp_mr_table_fini(tcp_mr_table_t *table);
/* Progress thread: find rkey, check the access bits asked for and [addr,
 * addr + len) against the region and take a reference; PDX_ERR_RANGE when
 * any check fails. */
pdx_status_t tcp_mr_lookup(tcp_tp_t *tp, uint32_t rkey, uint64_t addr, uint64_t len,
                           unsigned access, tcp_mr_t **mr_p, uint8_t **ptr_p);
static inline void tcp_mr_unref(tcp_mr_t *mr, uint32_t n)
{
    atomic_fetch_sub_explicit(&mr->refs, n, memory_order_release);
}

pdx_status_t tcp_mr_reg(pdx_tp_t *tp, void *base, size_t len, unsigned access,
                        pdx_tp_mr_t **mr_p);
pdx_status_t tcp_mr_dereg(pdx_tp_mr_t *mr);
void tcp_mr_remote(const pdx_tp_mr_t *mr, pdx_tp_rkey_t *rkey_p);

/* ------------------------------------------------------------------ cq */

typedef struct tcp_cqe {
    pdx_tp_wc_t wc;
    uint32_t    sq_slots;   /* SQ slots this completion frees */
    uint32_t    rq_slots;
} tcp_cqe_t;

struct tcp_cq {
    tcp_tp_t        *tp;
    pthread_mutex_t  lock;      /* ring, reserved */
    tcp_cqe_t       *ring;
    uint32_t         depth;
    uint32_t         reserved;  /* sum of sq + rq depths of its eps */
    uint32_t         nep;
    uint64_t         head;      /* next to poll */
    uint64_t         tail;      /* next to fill */
    _Atomic uint32_t count;     /* tail - head, read without the lock */
    _Atomic int      armed;
    int              efd;
    tcp_cq_t        *next;      /* tp's list, under tp->obj_lock */
    tcp_cq_t        *prev;
};

/* Progress thread (or a command it runs): append completions. */
void tcp_cq_push(tcp_cq_t *cq, const tcp_cqe_t *cqe, uint32_t n);
/* Capacity for an ep: PDX_ERR_FULL when depths exceed what is left. */
pdx_status_t tcp_cq_reserve(tcp_cq_t *cq, uint32_t slots);
/* Drop the ep's completions still queued and give back its capacity. */
void tcp_cq_release(tcp_cq_t *cq, const tcp_ep_t *ep, uint32_t slots);
void tcp_cq_free(tcp_cq_t *cq);

pdx_status_t tcp_cq_create(pdx_tp_t *tp, uint32_t depth, pdx_tp_cq_t **cq_p);
void tcp_cq_destroy(pdx_tp_cq_t *cq);
int tcp_cq_poll(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max);
pdx_status_t tcp_cq_arm(pdx_tp_cq_t *cq);
int tcp_cq_fd(pdx_tp_cq_t *cq);
void tcp_cq_ack(pdx_tp_cq_t *cq);

/* ------------------------------------------------------------------ stage */

/* One copy between a staging ring and GPU memory. */
typedef struct tcp_piece {
    void     *done;      /* an event made with the stage, recorded after its copy */
    void     *ends;      /* the event that tells its copy ended: done, or the
                          * done of the last piece of its batch */
    tcp_mr_t *mr;        /* the GPU region it reads (tx) or writes (rx): one reference */
    uint8_t  *buf;       /* its bytes in the ring */
    uint8_t  *dev;       /* rx: where they go in GPU memory */
    uint64_t  seq;       /* tx: SQ index of its WRITE; rx: its frame's seq */
    uint64_t  off;       /* tx: offset in the WRITE's payload */
    uint32_t  len;
    uint32_t  fill;      /* rx: bytes read into it so far */
    bool      copying;   /* queued or issued, not yet seen finished */
    bool      last;      /* rx: its frame's last piece */
} tcp_piece_t;

/* A byte ring and its pieces, both freed in the order they were taken.
 * tx: pieces [p_tail, p_done) are copied and wait to be sent, [p_done,
 * p_head) are copying. rx: pieces [p_tail, p_head) are copying, but the
 * newest, while it is still being read into (open). Pieces are copied in
 * batches: slots [q_first, q_first + q_n) are queued, their runs in
 * runs[] at the same slots, issued together at the end of the pass that
 * queued them (stage.c). */
typedef struct tcp_ring {
    uint8_t       *buf;
    uint64_t       size;
    uint64_t       head, tail;     /* bytes [tail, head) are taken */
    uint64_t       p_head, p_done, p_tail;
    pdx_tcp_run_t *runs;           /* pinned, by slot; NULL: a copy per piece */
    uint32_t       q_first, q_n;
    tcp_piece_t    piece[TCP_STAGE_PIECES];
} tcp_ring_t;

typedef enum tcp_rec_kind {
    TCP_REC_WRITE = 0,
    TCP_REC_ERR,         /* a rejected WRITE: its ERR goes out when it retires */
    TCP_REC_RECV,        /* a SEND: its receive completes when it retires */
} tcp_rec_kind_t;

/* A frame received behind a WRITE into GPU memory whose copy still runs:
 * frames retire (are acknowledged, their ERR sent, their receive completed)
 * in order, once done. */
typedef struct tcp_rec {
    uint8_t  kind;       /* tcp_rec_kind_t */
    bool     done;
    int32_t  status;     /* ERR */
    uint32_t byte_len;   /* RECV */
} tcp_rec_t;

/* An ep's staging: half of tp->stage_bytes for each direction. */
struct tcp_stage {
    uint8_t     *mem;        /* pinned */
    uint32_t     piece_max;
    uint32_t     ncopying;   /* pieces issued and not seen finished */
    bool         lost;       /* a copy failed to start: it may run still, unseen */
    tcp_ring_t   tx, rx;
    tcp_rec_t    rec[TCP_RX_DEFER];
    tcp_stage_t *next;       /* tp->orphans */
};

/* ------------------------------------------------------------------ ep */

/* A send-queue entry: frame header and inline payload are contiguous so a
 * SEND goes out as one iovec. */
typedef struct tcp_wqe {
    tcp_hdr_t      hdr;                     /* little-endian, filled at post */
    uint8_t        data[PDX_TP_SEND_MAX];   /* SEND payload */
    uint64_t       wr_id;
    tcp_mr_t      *mr;                      /* WRITE source or READ target region */
    const uint8_t *src;                     /* WRITE payload */
    uint8_t       *dst;                     /* READ: where its RDATA goes */
    uint64_t       len;                     /* payload bytes (READ: asked for) */
    uint32_t       frame_len;               /* bytes of hdr (+ SEND payload) */
    uint8_t        opcode;                  /* pdx_tp_opcode_t */
    bool           signaled;
    bool           dev;                     /* src is GPU memory: sent from staging */
    bool           placed;                  /* READ: its RDATA is in */
    int32_t        status;                  /* an ERR from the peer for it, else 0 */
} tcp_wqe_t;

/* The bytes of a READ from the peer, to go out as its RDATA frame. */
typedef struct tcp_rsp {
    tcp_hdr_t      hdr;                     /* RDATA, little-endian */
    const uint8_t *src;
    uint64_t       len;
    tcp_mr_t      *mr;                      /* a reference until sent */
} tcp_rsp_t;

_Static_assert(offsetof(tcp_wqe_t, data) == sizeof(tcp_hdr_t),
               "a SEND's header and payload go out as one iovec");

typedef struct tcp_rqe {
    uint64_t  wr_id;
    tcp_mr_t *mr;
    uint8_t  *buf;
    uint32_t  len;
} tcp_rqe_t;

typedef enum tcp_ep_state {
    TCP_EP_NEW = 0,      /* created, ep_connect not called */
    TCP_EP_DIALING,      /* nonblocking connect in progress */
    TCP_EP_ACCEPTING,    /* waiting for the peer to dial us */
    TCP_EP_UP,
    TCP_EP_DEAD,         /* in error, socket closed */
} tcp_ep_state_t;

typedef enum tcp_rx_kind {
    TCP_RX_NONE = 0,     /* between frames */
    TCP_RX_WRITE,        /* placing a WRITE */
    TCP_RX_WRITE_DEV,    /* staging a WRITE into GPU memory */
    TCP_RX_DISCARD,      /* skipping a rejected WRITE's payload */
    TCP_RX_SEND,         /* placing a SEND into a receive buffer */
    TCP_RX_FAIL,         /* reading a FAIL frame's reason */
    TCP_RX_RDATA,        /* placing the bytes one of our READs asked for */
} tcp_rx_kind_t;

struct tcp_ep {
    tcp_pollable_t   poll;
    tcp_tp_t        *tp;
    tcp_cq_t        *cq;
    uint64_t         token;
    uint32_t         sq_depth, rq_depth;
    uint32_t         sq_mask, rq_mask;
    tcp_wqe_t       *sq;
    tcp_rqe_t       *rq;

    /* poster only */
    alignas(PDX_CACHELINE) uint64_t sq_head;
    uint64_t         rq_head;

    /* poster -> progress thread */
    alignas(PDX_CACHELINE) _Atomic uint64_t sq_pub;
    _Atomic uint64_t rq_pub;
    /* CQ owner -> poster */
    alignas(PDX_CACHELINE) _Atomic uint64_t sq_freed;
    _Atomic uint64_t rq_freed;
    /* progress thread -> anyone: 0 while healthy; errmsg is written once,
     * before err is published */
    _Atomic int      err;
    char             errmsg[TCP_ERRMSG_MAX];

    /* set by ep_connect before its command, then read-only */
    _Atomic bool     connect_called;
    tcp_addr_t       remote;
    char             peer[64];      /* "host:port" of the remote tp */
    bool             dialer;

    /* progress thread only */
    alignas(PDX_CACHELINE) tcp_ep_state_t state;
    int              fd;
    uint64_t         deadline_ns;   /* connection must be up by then */
    uint64_t         progress_ns;   /* last ack progress (or first post) */
    bool             writable;
    bool             rx_ready;
    bool             hello_due;     /* dialer: the peer's HELLO comes first */
    bool             in_work;
    tcp_ep_t        *work_next;
    tcp_ep_t        *next, *prev;   /* tp->eps */

    /* GPU memory (stage.c): made by ep_create on a tp with GPU regions, else
     * NULL until the ep first moves GPU bytes */
    tcp_stage_t     *stage;
    uint64_t         st_wr, st_off; /* tx: next WR (and payload byte) to stage */
    uint64_t         copy_ns;       /* last copy finished (or first issued) */
    bool             in_copy;       /* on tp->copying */
    bool             rx_stalled;    /* rx waits for staging or retirement */
    tcp_ep_t        *copy_next;

    /* tx: WRs [sq_acked, sq_seen) are outstanding; [sq_sent, sq_seen) not
     * fully written; tx_off bytes of frame sq_sent are */
    uint64_t         sq_seen;
    uint64_t         sq_sent;
    uint64_t         sq_acked;
    uint64_t         sq_cqe_upto;   /* slots before it are covered by CQEs */
    uint64_t         sq_ack_mark;   /* the peer acknowledged WRs before it; they
                                     * complete up to the first READ without its
                                     * RDATA (tcp_tx_retire) */
    /* tx: RDATA frames owed to the peer's READs, in order; they go out at
     * frame boundaries of the SQ's stream, rsp_off bytes of the first sent */
    tcp_rsp_t       *rsp;
    uint32_t         rsp_cap, rsp_head, rsp_n;
    uint64_t         rsp_off;
    uint64_t         tx_off;
    tcp_hdr_t        ctrl_q[TCP_CTRL_MAX];   /* queued control frames */
    uint32_t         ctrl_n;
    tcp_hdr_t        tx_ctrl[TCP_CTRL_MAX];  /* committed, being written */
    uint32_t         tx_ctrl_len, tx_ctrl_off;  /* bytes */

    /* rx */
    uint8_t         *rxbuf;
    uint32_t         rx_off, rx_have;
    tcp_rx_kind_t    rx_kind;
    uint8_t         *rx_dst;
    uint64_t         rx_left;
    uint64_t         rx_len;
    tcp_mr_t        *rx_mr;
    int32_t          rx_status;      /* DISCARD: the ERR to send; FAIL: its status */
    uint64_t         rx_rd;          /* RDATA: the SQ index of its READ */
    uint64_t         rx_seq;         /* next data frame expected */
    uint64_t         rx_placed;      /* frames before it are placed (<= rx_seq; equal
                                      * unless a GPU copy runs) */
    uint64_t         ack_queued;     /* frames before it are covered */
    uint64_t         rq_taken;       /* receives matched to SENDs */
    uint64_t         rq_done;        /* receives completed */
    char             fail_msg[TCP_FAIL_MSG_MAX + 1];
};

static inline tcp_ep_t *tcp_ep(pdx_tp_ep_t *ep)
{
    return (tcp_ep_t *)(void *)ep;
}

static inline pdx_tp_ep_t *tcp_ep_pub(tcp_ep_t *ep)
{
    return (pdx_tp_ep_t *)(void *)ep;
}

/* Room for the control frames one incoming frame can queue (an ERR and an ACK). */
static inline bool tcp_ctrl_room(const tcp_ep_t *ep)
{
    return ep->ctrl_n + 2 <= TCP_CTRL_MAX;
}

/* Progress thread: the peer's "host:port" for messages. Before its CONNECT
 * command ran, ep_connect may still be writing it. */
static inline const char *tcp_ep_peer(const tcp_ep_t *ep)
{
    return ep->state == TCP_EP_NEW ? "(unconnected)" : ep->peer;
}

static inline uint64_t tcp_ep_outstanding(const tcp_ep_t *ep)
{
    return ep->sq_seen - ep->sq_acked;
}

pdx_status_t tcp_ep_create(pdx_tp_t *tp, pdx_tp_cq_t *cq, const pdx_tp_ep_attr_t *attr,
                           pdx_tp_ep_t **ep_p);
void tcp_ep_address(const pdx_tp_ep_t *ep, pdx_tp_addr_t *addr_p);
pdx_status_t tcp_ep_connect(pdx_tp_ep_t *ep, const pdx_tp_addr_t *remote);
void tcp_ep_fail(pdx_tp_ep_t *ep, pdx_status_t why, const char *msg);
void tcp_ep_destroy(pdx_tp_ep_t *ep);
const char *tcp_ep_error(const pdx_tp_ep_t *ep);
pdx_status_t tcp_post_write(pdx_tp_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n);
pdx_status_t tcp_post_runs(pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs, uint32_t *bad_p);
pdx_status_t tcp_post_send(pdx_tp_ep_t *ep, uint64_t wr_id, const void *data, uint32_t len,
                           unsigned flags);
pdx_status_t tcp_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len);
pdx_status_t tcp_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey);
/* Free an ep the progress thread no longer knows (destroy, tp close). */
void tcp_ep_free(tcp_ep_t *ep);

/* conn.c, progress thread */
void tcp_ep_start(tcp_ep_t *ep);
void tcp_ep_dialed(tcp_ep_t *ep);
void tcp_ep_set_error(tcp_ep_t *ep, pdx_status_t why, bool tell_peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void tcp_ep_detach(tcp_ep_t *ep);
void tcp_conn_accept(tcp_tp_t *tp);
void tcp_conn_event(tcp_conn_t *conn);
void tcp_conn_sweep(tcp_tp_t *tp, uint64_t now);
void tcp_conn_close_all(tcp_tp_t *tp);

/* tx.c, progress thread */
void tcp_tx_progress(tcp_ep_t *ep);
bool tcp_tx_pending(const tcp_ep_t *ep);
void tcp_ctrl_push(tcp_ep_t *ep, const tcp_hdr_t *hdr);
pdx_status_t tcp_tx_complete(tcp_ep_t *ep, uint64_t end, pdx_status_t last);
/* Complete the acknowledged WRs up to the first READ still without its RDATA. */
void tcp_tx_retire(tcp_ep_t *ep);
/* Owe the peer the RDATA of its READ seq: len bytes at src of mr (a
 * reference, the queue's from here); PDX_ERR_NOMEM when the queue cannot grow. */
pdx_status_t tcp_tx_respond(tcp_ep_t *ep, uint64_t seq, tcp_mr_t *mr, const uint8_t *src,
                            uint64_t len);
void tcp_tx_flush(tcp_ep_t *ep, pdx_status_t why, bool complete);

/* rx.c, progress thread */
void tcp_rx_progress(tcp_ep_t *ep);
void tcp_rx_flush(tcp_ep_t *ep, pdx_status_t why, bool complete);
/* Retire frames whose placement finished: ERRs, receive completions, ACK. */
void tcp_rx_retire(tcp_ep_t *ep);
/* Whether tcp_rx_retire() has something to do now. */
bool tcp_rx_retire_ready(const tcp_ep_t *ep);

/* stage.c. Setup calls (any thread but the progress thread): */
/* The tp's first GPU region: its GPU, the copy streams. */
pdx_status_t tcp_staging_init(tcp_tp_t *tp, const void *base, size_t len);
void tcp_staging_fini(tcp_tp_t *tp);
pdx_status_t tcp_stage_create(tcp_tp_t *tp, tcp_stage_t **stage_p);
/* Wait (bounded) for its copies, then free it; past the deadline keep it
 * on tp->orphans. */
void tcp_stage_destroy(tcp_tp_t *tp, tcp_stage_t *stage);
/* Free orphans whose copies finished; wait: for the others (bounded), then
 * leak them with an error. */
void tcp_stage_reap(tcp_tp_t *tp, bool wait);
/* Progress thread: */
/* Issue device-to-host copies for WRITEs from GPU memory posted on ep. */
void tcp_stage_tx(tcp_ep_t *ep);
/* Issue the host-to-device copies of the pieces the receive pass filled. */
void tcp_stage_rx_flush(tcp_ep_t *ep);
/* Free tx pieces the socket took. */
void tcp_stage_tx_sent(tcp_ep_t *ep);
/* The piece the next payload bytes of a WRITE into GPU memory go to; NULL
 * (rx_stalled set) while staging is full, or when the ep failed. */
tcp_piece_t *tcp_stage_rx_open(tcp_ep_t *ep);
/* n bytes were read into p: once it is full, its host-to-device copy is
 * queued (tcp_stage_rx_flush issues it). */
void tcp_stage_rx_fill(tcp_ep_t *ep, tcp_piece_t *p, uint32_t n);
/* The ep failed: drop what no copy uses (copies keep their pieces). */
void tcp_stage_tx_reset(tcp_ep_t *ep);
void tcp_stage_rx_reset(tcp_ep_t *ep);
/* Poll the copies of every ep on tp->copying; true when any finished. */
bool tcp_stage_poll(tcp_tp_t *tp);
void tcp_stage_untrack(tcp_ep_t *ep);

/* copier.c */
extern const pdx_tcp_copier_t tcp_hip_copier;
const pdx_tcp_copier_t *tcp_copier_current(void);

/* ------------------------------------------------------------------ tp */

typedef enum tcp_cmd_kind {
    TCP_CMD_ADD = 1,
    TCP_CMD_CONNECT,
    TCP_CMD_FAIL,
    TCP_CMD_DESTROY,
} tcp_cmd_kind_t;

typedef struct tcp_cmd {
    tcp_cmd_kind_t  kind;
    tcp_ep_t       *ep;
    pdx_status_t    why;        /* FAIL */
    const char     *msg;        /* FAIL */
    pdx_status_t    result;
    int             state;      /* 0 queued, 1 taken, 2 done */
    struct tcp_cmd *next;
} tcp_cmd_t;

struct tcp_tp {
    pdx_tp_t          base;
    tcp_pollable_t    listen_poll;
    tcp_pollable_t    wake_poll;
    int               listen_fd;
    int               epfd;
    int               wake_fd;
    tcp_addr_t        addr;           /* listener: family, ip, port */
    char              name[64];       /* "host:port" */
    uint32_t          timeout_ms;
    uint64_t          max_msg_size;
    pthread_t         thread;
    bool              thread_started;
    bool              bind;        /* the progress thread runs on cpus */
    cpu_set_t         cpus;

    /* anyone -> progress thread */
    alignas(PDX_CACHELINE) _Atomic int doorbell;  /* new posts somewhere */
    _Atomic int       sleeping;       /* in epoll_wait: posts must write wake_fd */
    _Atomic bool      stop;
    _Atomic bool      paused;
    _Atomic bool      paused_seen;    /* progress thread -> pdx_tcp_pause: applied */
    _Atomic bool      cmd_pending;
    pthread_mutex_t   cmd_lock;
    pthread_cond_t    cmd_cond;
    tcp_cmd_t        *cmd_head, *cmd_tail;

    pthread_mutex_t   obj_lock;       /* cqs list */
    tcp_cq_t         *cqs;
    tcp_mr_table_t    mrs;

    /* GPU memory (stage.c); stage_lock covers the setup and the orphans */
    const pdx_tcp_copier_t *copier;
    uint64_t          stage_bytes;    /* per ep, both directions */
    pthread_mutex_t   stage_lock;
    _Atomic bool      staging;        /* a GPU region was registered: device, stream set */
    int               device;
    bool              batch;          /* the copier copies runs in batches (set with staging) */
    void             *stream[2];      /* by pdx_tcp_copy_dir_t */
    tcp_stage_t      *orphans;        /* of destroyed eps, copies still running */

    /* progress thread only */
    alignas(PDX_CACHELINE) tcp_ep_t *eps;
    tcp_ep_t         *work;
    tcp_conn_t       *conns;
    uint32_t          nconns;         /* incoming, not yet matched to an ep */
    bool              listen_paused;  /* out of fds: listener off until the sweep */
    bool              rx_paused;
    tcp_ep_t         *copying;        /* eps with copies in flight */
    uint64_t          copy_spin_until;
};

static inline tcp_tp_t *tcp_tp(pdx_tp_t *tp)
{
    return pdx_container_of(tp, tcp_tp_t, base);
}

/* Post path: tell the progress thread there is work; a syscall only when it
 * sleeps. */
void tcp_tp_kick(tcp_tp_t *tp);
/* Run a command on the progress thread and wait for it (deadline). */
pdx_status_t tcp_tp_command(tcp_tp_t *tp, tcp_cmd_t *cmd);
/* Progress thread: queue ep for tx/rx work in this loop iteration. */
void tcp_work_add(tcp_ep_t *ep);
void tcp_work_remove(tcp_ep_t *ep);
/* Progress thread: (un)register a socket with the tp's epoll. */
pdx_status_t tcp_poll_add(tcp_tp_t *tp, int fd, tcp_pollable_t *p, uint32_t events);
pdx_status_t tcp_poll_mod(tcp_tp_t *tp, int fd, tcp_pollable_t *p, uint32_t events);
void tcp_poll_del(tcp_tp_t *tp, int fd);

#endif
