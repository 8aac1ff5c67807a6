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
 * The CQ's file descriptor is an epoll set of the inner CQ's and an
 * eventfd that a host callback on the stream writes when the shard arms the
 * CQ while copies are in flight.
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

typedef struct ipc_batch {
    uint64_t rec_first;      /* its records */
    uint32_t nrec;
    uint32_t nruns;
    uint64_t run_first;      /* its runs in the ep's run ring */
    uint64_t bytes;
    uint64_t posted_ns;
    void    *event;          /* recorded after the copies */
    bool     failed;         /* never enqueued: done, with the ep's error */
} ipc_batch_t;

typedef struct ipc_cq ipc_cq_t;

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
    int                epfd, wake_fd;
    void              *stream;     /* created with the first direct ep */
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

/* ep.c */
pdx_status_t ipc_ep_create(pdx_tp_t *tp, pdx_tp_cq_t *cq, const pdx_tp_ep_attr_t *attr,
                           pdx_tp_ep_t **ep_p);
void         ipc_ep_address(const pdx_tp_ep_t *ep, pdx_tp_addr_t *addr_p);
pdx_status_t ipc_ep_connect(pdx_tp_ep_t *ep, const pdx_tp_addr_t *remote);
void         ipc_ep_fail(pdx_tp_ep_t *ep, pdx_status_t why, const char *msg);
void         ipc_ep_destroy(pdx_tp_ep_t *ep);
const char  *ipc_ep_error(const pdx_tp_ep_t *ep);
pdx_status_t ipc_post_write(pdx_tp_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n);
pdx_status_t ipc_post_send(pdx_tp_ep_t *ep, uint64_t wr_id, const void *data, uint32_t len,
                           unsigned flags);
pdx_status_t ipc_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len);
pdx_status_t ipc_post_pages(pdx_tp_ep_t *ep, const pdx_tp_pages_t *pages);
pdx_status_t ipc_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                           uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey);
/* The direct eps' records: inner completions in, completions out. */
void         ipc_ep_inner_done(ipc_ep_t *ep, const pdx_tp_wc_t *wc);
void         ipc_ep_progress(ipc_ep_t *ep);
int          ipc_ep_emit(ipc_ep_t *ep, pdx_tp_wc_t *wc, int max);
bool         ipc_ep_copies_pending(const ipc_ep_t *ep);
/* When the ep's oldest batch in flight was launched (UINT64_MAX: none). */
uint64_t     ipc_ep_oldest_ns(const ipc_ep_t *ep);
void         ipc_ep_flush(ipc_ep_t *ep);

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

#endif
