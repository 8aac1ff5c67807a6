/*
 * ipc: a transport over another (tcp or rdma) whose endpoints to direct
 * peers, engines of this host whose GPU memory this process's GPU reaches,
 * move pages with the GPU: a WRITE that carries an opened destination
 * (pdx_tp_write_t.rmr) from a GPU source is a copy on the CQ's stream, by
 * one gather kernel per batch of WRITEs (one async copy per run for a few
 * large runs). Everything else (SENDs, RECVs, READs, WRITEs from or into
 * host memory, every endpoint to other peers) goes over the inner
 * transport.
 *
 * A direct endpoint keeps the RC contract with a queue of records, one per
 * WR in posting order: a batch of copies is done when its event has
 * completed; the inner WRs when the inner transport completes them (the
 * last of each inner batch is signaled by ipc, its completion kept back
 * when the caller did not ask for one); a SEND is handed to the inner
 * endpoint only when every record before it is done, so decode reads a
 * notify only after the copies it announces have finished. Completions
 * leave the queue in order. An endpoint in error still waits for its copies
 * on the GPU before their records complete (with the error): a failed or
 * aborted room is never released while a copy of it may still write.
 *
 * Regions: every GPU region a peer may write or read is exported with
 * pdx_hip_ipc_export() at registration (mr_export gives its bytes); a peer
 * opens it once (rmr_open, pdx_hip_ipc_open counts opens per allocation)
 * and closes it when it forgets the peer.
 *
 * Gates (gate.c): a page-copies WR may carry its chunk's gate; its copy
 * then waits for the gate on the GPU, on one of the CQ's gate streams, and
 * is given up (completes with PDX_ERR_TIMEOUT, never writes) when the gate
 * is still closed at its deadline or when the endpoint fails.
 *
 * The CQ's file descriptor is an epoll set of the inner CQ's, an eventfd
 * that a host callback on the CQ's stream writes when the shard arms the CQ
 * while ungated copies are in flight, and a timer: the next gated copy's
 * deadline, and while gated copies are in flight, PDX_GATE_BACKOFF_US
 * (the shard polls them as it polls a gate on the host).
 */
#ifndef PDX_IPC_H
#define PDX_IPC_H

#include "transport.h"
#include "pdx_hip.h"

#include <pthread.h>
#include <stdatomic.h>

#define IPC_ERR_MAX 192

typedef struct ipc_tp {
    pdx_tp_t                   hdr;
    const pdx_transport_ops_t *in_ops;
    pdx_tp_t                  *in;
    int                        gpu;
    uint32_t                   timeout_ms;  /* copies in flight this long: ep in error */
    uint64_t                   gate_poll_ns; /* gated copies in flight: the CQ's timer */
    uint64_t                   group_mask;  /* pdx_tp_params_t.wr_group_mask */
} ipc_tp_t;

typedef struct ipc_mr {
    ipc_tp_t            *tp;
    pdx_tp_mr_t         *in;
    uint8_t             *base;
    uint64_t             len;
    bool                 device;    /* GPU memory: a copy may read it */
    bool                 exported;  /* handle is set */
    pdx_hip_ipc_handle_t handle;
} ipc_mr_t;

/* A peer's registration, opened here: its address addr is local ptr, for
 * len bytes. */
typedef struct ipc_rmr {
    uint8_t *ptr;
    uint64_t addr;
    uint64_t len;
} ipc_rmr_t;

enum { REC_COPY = 1, REC_INNER, REC_SEND };

typedef struct ipc_rec {
    uint64_t     wr_id;
    uint8_t      kind;
    uint8_t      opcode;     /* pdx_tp_opcode_t of its completion */
    bool         signaled;   /* the caller asked for a completion */
    bool         done;
    bool         posted;     /* SEND: handed to the inner endpoint */
    pdx_status_t status;
    uint32_t     len;        /* SEND bytes */
    uint8_t      data[PDX_TP_SEND_MAX];
} ipc_rec_t;

/* Gates waited for on the GPU at once, per CQ; more go to the shard. Few:
 * streams share the GPU's hardware queues (8 on nvidia, 4 on amd by
 * default), and a stream waiting for a later layer's gate holds up the
 * queue it shares, with the producer's kernels or an earlier layer's copy.
 * On the H200, 61 layer ranges behind 8 gate streams exposed 1.5 ms after
 * the last layer; behind 2, 52 us (docs/benchmarks.md). */
#define IPC_GATES      2
#define IPC_DEAD_GROUPS 64  /* groups with a given-up copy, per ep, at once */
#define IPC_GATE_SLOTS 255  /* copies behind one gate's wait */

/* A gate stream (gate.c): one gate waited for at a time. */
typedef struct ipc_gate {
    void                    *stream;    /* NULL: made on first use */
    volatile uint64_t       *words;     /* pinned: [0] = seq once the wait passed,
                                         * [1 + k] copy k's skip word */
    uint64_t                *skips;     /* device memory: [1 + k] copied from words[1 + k]
                                         * after the wait, read by copy k's kernel */
    uint64_t                 seq;
    uint32_t                 kind;      /* the gate of the last wait */
    void                    *event;
    const volatile uint64_t *word;
    uint64_t                 value;
    uint32_t                 slab;      /* of cq->slab_words / slab_skips */
    uint64_t                 epoch;     /* stream and slab made anew: + 1 */
    uint32_t                 used;      /* skip words handed out behind it */
    uint32_t                 live;      /* ... of copies neither done nor given up */
} ipc_gate_t;

#define IPC_SLABS      16   /* slabs of gate words: IPC_GATES in use, the rest set aside */
#define IPC_SPARE_RINGS 8   /* run rings of destroyed endpoints kept for new ones, per CQ */

/* An endpoint's run ring: pinned host runs, and their device copy. */
typedef struct ipc_ring {
    pdx_hip_run_t *host, *dev;
    size_t         bytes;
} ipc_ring_t;

/* A gate stream set aside: its slab, and an event after its work. */
typedef struct ipc_aside {
    uint32_t slab;
    void    *done;
} ipc_aside_t;

typedef struct ipc_batch {
    uint64_t rec_first;      /* its records */
    uint32_t nrec;
    uint32_t nruns;
    uint64_t run_first;      /* its runs in the ep's run ring */
    uint64_t bytes;
    uint64_t posted_ns;      /* gated: from when its gate opened */
    void    *event;          /* recorded after the copies */
    void    *up_event;       /* gated: recorded after its tables went up */
    bool     failed;         /* never enqueued: done, with the ep's error */
    bool     waiting;        /* behind a gate not yet seen open */
    pdx_status_t status;     /* its own failure (a gate given up) */
    ipc_gate_t *gate;        /* NULL: not gated */
    uint32_t slot;
    uint64_t seq;            /* the gate stream's wait it is behind */
    uint64_t epoch;          /* the gate stream's, when posted */
    uint64_t deadline_ns;
    const _Atomic int32_t *abandon;
    int32_t  abandon_if;
} ipc_batch_t;

typedef struct ipc_cq ipc_cq_t;

/* A group whose copy was given up: its SEND records before until fail. */
typedef struct ipc_dead {
    uint64_t group, until;
} ipc_dead_t;

typedef struct ipc_ep {
    ipc_cq_t      *cq;
    pdx_tp_ep_t   *in;
    bool           direct;
    uint32_t       depth;     /* sq_depth: records, batches, runs / 2 */
    /* PDX_OK while healthy; set once (any thread may fail the ep), error
     * written before error_set */
    _Atomic int    failed;
    _Atomic bool   error_set;
    char           error[IPC_ERR_MAX];
    bool           late;      /* the copy deadline passed (said once) */
    /* records: [rec_head, rec_tail), absolute counters modulo depth */
    ipc_rec_t     *recs;
    uint64_t       rec_head, rec_tail;
    /* records handed to the inner endpoint, in that order (its completions
     * come in it): [inq_head, inq_tail) modulo depth */
    uint64_t      *inq;
    uint64_t       inq_head, inq_tail;
    /* batches of copies: [b_head, b_tail) modulo depth */
    ipc_batch_t   *batches;
    uint64_t       b_head, b_tail;
    /* runs: pinned host ring and its device copy, RUNS_PER_DEPTH * depth */
    pdx_hip_run_t *runs_host, *runs_dev;
    uint64_t       run_head, run_tail;
    uint32_t       nruns_cap;
    /* the open batch: copies posted and not yet launched, the last records
     * and runs (launched when the GPU is done with the ep's previous
     * batches, when it is large, before a SEND and before a sleep) */
    uint64_t       open_rec, open_run, open_bytes;
    uint32_t       open_n, open_big;
    uint32_t       index;     /* in cq->direct */
    /* groups of given-up copies: their SENDs among the records before
     * `until` fail, not delivered */
    ipc_dead_t     dead[IPC_DEAD_GROUPS];
    uint32_t       ndead;
    uint32_t       gated;     /* batches in flight on gate streams */
    uint32_t       waiting;   /* ... of them behind a gate not yet seen open */
    uint64_t       expiry;    /* the earliest of their deadlines */
    pdx_tp_write_t *scratch;  /* an inner batch: its regions, the last WR signaled */
} ipc_ep_t;

typedef struct ipc_map_slot {
    const pdx_tp_ep_t *key;   /* the inner ep; NULL: free; TOMB: removed */
    ipc_ep_t          *ep;
} ipc_map_slot_t;

struct ipc_cq {
    ipc_tp_t          *tp;
    pdx_tp_cq_t       *in;
    uint32_t           depth;
    int                epfd, wake_fd, timer_fd;
    void              *stream;     /* created with the first direct ep */
    void              *up_stream;  /* gated copies' tables */
    ipc_gate_t         gates[IPC_GATES];
    void              *slab_words; /* IPC_SLABS slabs: pinned host words, */
    void              *slab_skips; /* ... and their device copies */
    uint32_t           slab_free;  /* bit k: slab k is free */
    ipc_aside_t        aside[IPC_SLABS];
    uint32_t           naside;
    ipc_ring_t         spare[IPC_SPARE_RINGS]; /* under lock */
    uint32_t           nspare;
    _Atomic uint32_t   callbacks;  /* host callbacks enqueued and not yet run */
    uint64_t           launches;   /* batches launched on the stream */
    uint64_t           cb_launches; /* ... when the last callback was enqueued */
    uint32_t           next_ep;    /* direct ep that completes first next poll */
    /* the map and the direct list: the control thread adds endpoints while
     * the shard polls */
    pthread_mutex_t    lock;
    ipc_map_slot_t    *map;        /* inner ep -> ep, open addressing */
    uint32_t           map_cap, map_used;
    ipc_ep_t         **direct;     /* direct eps, for completions */
    uint32_t           ndirect, direct_cap;
    pdx_tp_wc_t       *scratch;    /* inner completions of one poll */
    uint32_t           scratch_cap;
};

static inline ipc_rec_t *ipc_rec_at(const ipc_ep_t *ep, uint64_t i)
{
    return &ep->recs[i % ep->depth];
}

static inline pdx_status_t ipc_ep_failed(const ipc_ep_t *ep)
{
    return (pdx_status_t)atomic_load_explicit(&ep->failed, memory_order_acquire);
}

/* Hand rec to the inner endpoint's order. */
static inline void ipc_inq_push(ipc_ep_t *ep, uint64_t rec)
{
    ep->inq[ep->inq_tail++ % ep->depth] = rec;
}

/* ep.c */
/* Put ep in error (the first failure wins) and fail its inner endpoint. */
void         ipc_ep_failure(ipc_ep_t *ep, pdx_status_t why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
pdx_status_t ipc_ep_create(pdx_tp_t *tp, pdx_tp_cq_t *cq, const pdx_tp_ep_attr_t *attr,
                           pdx_tp_ep_t **ep_p);
void         ipc_ep_address(const pdx_tp_ep_t *ep, pdx_tp_addr_t *addr_p);
pdx_status_t ipc_ep_connect(pdx_tp_ep_t *ep, const pdx_tp_addr_t *remote);
void         ipc_ep_fail(pdx_tp_ep_t *ep, pdx_status_t why, const char *msg);
void         ipc_ep_destroy(pdx_tp_ep_t *ep);
const char  *ipc_ep_error(const pdx_tp_ep_t *ep);
pdx_status_t ipc_post_write(pdx_tp_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n);
pdx_status_t ipc_post_runs(pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs, uint32_t *bad_p);
pdx_status_t ipc_post_send(pdx_tp_ep_t *ep, uint64_t wr_id, const void *data, uint32_t len,
                           unsigned flags);
pdx_status_t ipc_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len);
pdx_status_t ipc_post_pages(pdx_tp_ep_t *ep, const pdx_tp_pages_t *pages);
pdx_status_t ipc_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey);
/* ep_done.c: the direct eps' records, inner completions in, completions out. */
void         ipc_ep_inner_done(ipc_ep_t *ep, const pdx_tp_wc_t *wc);
void         ipc_ep_progress(ipc_ep_t *ep);
int          ipc_ep_emit(ipc_ep_t *ep, pdx_tp_wc_t *wc, int max);
bool         ipc_ep_copies_pending(const ipc_ep_t *ep);
/* Copies in flight, or to launch, on the CQ's own stream. */
bool         ipc_ep_stream_pending(const ipc_ep_t *ep);
/* When the ep's oldest batch in flight was launched (UINT64_MAX: none). */
uint64_t     ipc_ep_oldest_ns(const ipc_ep_t *ep);
void         ipc_ep_flush(ipc_ep_t *ep);
/* Gated batches: those open seen, those past their deadline or abandoned
 * (or all, with give_up, or when the ep failed) given up. */
void         ipc_ep_gates(ipc_ep_t *ep, bool give_up);
/* The earliest deadline of its gated batches (UINT64_MAX: none). */
uint64_t     ipc_ep_expiry(const ipc_ep_t *ep);

/* gate.c */
pdx_status_t ipc_gates_alloc(ipc_cq_t *cq);
void         ipc_gates_destroy(ipc_cq_t *cq);
/* A gate stream waiting for t, and a skip word in it (*g_p NULL: t is
 * open); PDX_ERR_FULL when none is free or t cannot be waited for. */
pdx_status_t ipc_gate_take(ipc_cq_t *cq, const pdx_tp_gate_t *t, ipc_gate_t **g_p,
                           uint32_t *slot_p);
bool         ipc_gate_passed(const ipc_gate_t *g, uint64_t seq);
/* Enqueue on g's stream the copy of the slot's skip word to the device,
 * and give the device word the kernel reads. */
pdx_status_t ipc_gate_skip(ipc_gate_t *g, uint32_t slot, const uint64_t **dev_p);
/* Give the copy up: true when it never runs, false when it runs (or ran). */
bool         ipc_gate_give_up(ipc_cq_t *cq, ipc_gate_t *g, uint32_t slot, uint64_t seq,
                              pdx_status_t why);
/* A copy behind g (posted in its epoch) finished. */
void         ipc_gate_done(ipc_gate_t *g, uint64_t epoch);
/* Take back the slabs set aside whose work has run since (the wait passed,
 * the copies behind it skipped). */
void         ipc_gates_reclaim(ipc_cq_t *cq);

/* cq.c */
pdx_status_t ipc_cq_create(pdx_tp_t *tp, uint32_t depth, pdx_tp_cq_t **cq_p);
void         ipc_cq_destroy(pdx_tp_cq_t *cq);
int          ipc_cq_poll(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max);
pdx_status_t ipc_cq_arm(pdx_tp_cq_t *cq);
int          ipc_cq_fd(pdx_tp_cq_t *cq);
void         ipc_cq_ack(pdx_tp_cq_t *cq);
pdx_status_t ipc_cq_add(ipc_cq_t *cq, ipc_ep_t *ep);
void         ipc_cq_remove(ipc_cq_t *cq, ipc_ep_t *ep);
pdx_status_t ipc_cq_stream(ipc_cq_t *cq);
/* A run ring of `bytes` for a new endpoint: a spare one, else allocated.
 * The runtime's allocations and frees of pinned and device memory wait for
 * the whole device, and a shard rebuilding or dropping an endpoint must not
 * (put keeps the ring for the next endpoint, frees it only beyond
 * IPC_SPARE_RINGS). */
pdx_status_t ipc_cq_ring_take(ipc_cq_t *cq, size_t bytes, ipc_ring_t *ring);
void         ipc_cq_ring_put(ipc_cq_t *cq, const ipc_ring_t *ring);

#endif
