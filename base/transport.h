/*
 * The transport ops table. Every transport gives RC-QP semantics:
 *
 * - An endpoint (ep) is one reliable, ordered connection to one remote ep.
 *   Work requests (WRs) posted on an ep execute in posting order; a SEND
 *   posted after WRITEs is delivered after their data is placed.
 * - A WRITE completes (signaled) only after the receiver placed its bytes.
 *   Unsignaled WRs produce no completion on success; their send-queue slots
 *   are freed when the completion of a later signaled WR on the same ep is
 *   polled. Failed WRs always produce a completion. A CQ sized to the sum of
 *   its eps' send and receive depths therefore never overflows.
 * - An ep in error (ep_fail, peer gone, deadline without progress) completes
 *   every outstanding WR and RECV with an error status: nothing is ever lost
 *   silently.
 * - One thread at a time posts on an ep (its shard); completions of all eps
 *   on a CQ are polled by one thread (the shard).
 * - After ep_destroy, cq_poll returns no completion of that ep.
 * - Where transports differ: a WRITE outside the remote region puts an RC QP
 *   in error (everything after it is flushed); tcp fails only that WRITE and
 *   keeps the stream, so a SEND posted after it still arrives. The engine
 *   checks every run against the peer's region before posting, and the
 *   sender fails the room on the error completion.
 *
 * A transport sees nothing of runtime/ but this header (docs/architecture.md §2).
 * Unsupported ops point at pdx_tp_unsupported_*(), never at NULL.
 */
#ifndef PDX_TRANSPORT_H
#define PDX_TRANSPORT_H

#include "pdx/pdx.h"

#include <sched.h>

#include <stdatomic.h>
#include <stdbool.h>

typedef struct pdx_tp    pdx_tp_t;    /* one per NIC of an engine: device context */
typedef struct pdx_tp_cq pdx_tp_cq_t; /* completion queue: one per (shard, NIC) */
typedef struct pdx_tp_ep pdx_tp_ep_t; /* endpoint: one RC connection */
typedef struct pdx_tp_mr pdx_tp_mr_t; /* registered memory region */
typedef struct pdx_tp_rmr pdx_tp_rmr_t; /* a peer's region opened for direct copies */

typedef struct pdx_transport_ops pdx_transport_ops_t;

/* Every transport object starts with this header so ops can be found. */
struct pdx_tp {
    const pdx_transport_ops_t *ops;
    /* The engine's identity and address, for its threads' log lines
     * (pdx_log_tag): copied from the params at open. */
    uint64_t                   log_id;
    char                       log_engine[PDX_NAME_MAX];
    /* Regions longer than this are registered in pieces of this many bytes
     * (a power of two; 0: never): piece k covers offsets [k * mr_piece,
     * (k + 1) * mr_piece), and no WR may cross from one piece into the next. */
    uint64_t                   mr_piece;
};

typedef struct pdx_tp_params {
    const char *host;            /* local address data listeners bind; a
                                  * wildcard (0.0.0.0, ::) binds every interface */
    const char *advertise;       /* the host peers reach this one by (an IP
                                  * address or a name), which endpoint
                                  * addresses carry; NULL or "": host, which
                                  * then must not be a wildcard */
    uint32_t    progress_timeout_ms; /* an ep not connected, or with WRs
                                      * outstanding and no progress, for this
                                      * long goes to error */
    uint64_t    max_msg_size;    /* largest single WRITE */
    const pdx_config_t *config;  /* transport-specific knobs (PDX_IB_*, ...) */
    bool        quiet_no_device; /* finding no device is not an error (the
                                  * engine falls back): log why at info */
    uint32_t    nic;             /* an engine of several NICs opens one tp per
                                  * NIC: the nic-th usable device (0: the first)
                                  * in the transport's order of preference;
                                  * PDX_ERR_NO_DEVICE when there are fewer.
                                  * tcp: every tp is the host's stack */
    const char *nic_order;       /* RDMA devices nearest the engine's GPU first,
                                  * comma-separated (NULL or "": the list's
                                  * order); PDX_IB_DEVICES overrides it */
    const cpu_set_t *cpus;       /* CPUs the transport's threads run on (NULL:
                                  * wherever the OS puts them) */
    uint64_t    log_id;          /* the engine's identity and address: a thread */
    const char *log_engine;      /* the tp starts tags its log lines with them */
    /* ipc only (pdx_ipc_ops): the transport it carries SENDs, RECVs and the
     * WRITEs that are not direct copies over, and the GPU (a HIP device
     * index) it copies with. */
    const pdx_transport_ops_t *inner;
    int         gpu;
    /* ipc: the bits of a wr_id that name its group (the caller's room): a
     * gated copy given up fails the SENDs of its group posted after it on
     * its endpoint, which are not delivered (the caller gets its notify
     * credit back), and no other WR. 0: a give-up fails the endpoint. */
    uint64_t    wr_group_mask;
} pdx_tp_params_t;

/* A transport's open: copy the params' log tag into its tp header. */
static inline void pdx_tp_log_init(pdx_tp_t *tp, const pdx_tp_params_t *params)
{
    tp->log_id = params ? params->log_id : 0;
    tp->log_engine[0] = '\0';
    if (params && params->log_engine)
        for (size_t i = 0; i + 1 < sizeof(tp->log_engine) && params->log_engine[i]; i++) {
            tp->log_engine[i] = params->log_engine[i];
            tp->log_engine[i + 1] = '\0';
        }
}

/* An ep's address, exchanged over the control channel before ep_connect. */
#define PDX_TP_ADDR_MAX 64
typedef struct pdx_tp_addr {
    uint32_t len;
    uint8_t  bytes[PDX_TP_ADDR_MAX];
} pdx_tp_addr_t;

/* What a peer needs to write into a region: travels in memory descriptors.
 * A region registered in pieces (pdx_tp.mr_piece) has one rkey per piece. */
#define PDX_TP_PIECES_MAX 1024
typedef struct pdx_tp_rkey {
    uint64_t        addr;        /* remote address of byte 0 of the region */
    uint64_t        len;
    uint32_t        rkey;        /* piece 0's (the region's when npieces == 1) */
    uint32_t        npieces;     /* 1, or ceil(len / piece) <= PDX_TP_PIECES_MAX */
    uint64_t        piece;       /* npieces > 1: bytes per piece, a power of two */
    const uint32_t *rkeys;       /* npieces > 1: every piece's rkey, rkeys[0] == rkey */
} pdx_tp_rkey_t;

/* The rkey of the piece holding offset off of the region (a WR stays inside
 * one piece). */
static inline uint32_t pdx_tp_rkey_at(const pdx_tp_rkey_t *k, uint64_t off)
{
    return k->npieces > 1 ? k->rkeys[off / k->piece] : k->rkey;
}

enum {
    PDX_TP_ACCESS_LOCAL_WRITE  = 1u << 0,
    PDX_TP_ACCESS_REMOTE_WRITE = 1u << 1,
    PDX_TP_ACCESS_REMOTE_READ  = 1u << 2, /* only where a flush read needs it */
    /* The region is GPU memory: the CPU must not touch its bytes. A transport
     * that cannot reach GPU memory refuses it with PDX_ERR_UNSUPPORTED. */
    PDX_TP_ACCESS_DEVICE       = 1u << 3,
};

enum {
    PDX_TP_SIGNALED = 1u << 0,
};

typedef struct pdx_tp_write {
    uint64_t            wr_id;
    const pdx_tp_mr_t  *mr;       /* local source */
    uint64_t            offset;   /* inside mr */
    uint64_t            length;   /* <= max_msg_size */
    uint64_t            remote_addr;
    uint32_t            rkey;
    uint32_t            flags;    /* PDX_TP_SIGNALED */
    /* The destination region opened by rmr_open (PDX_TP_CAP_DIRECT), or
     * NULL: the WRITE goes by remote_addr and rkey. */
    const pdx_tp_rmr_t *rmr;
} pdx_tp_write_t;

/*
 * WRITEs of one region pair, as runs (post_runs): each WR is built once,
 * from its run, and checked once, by the transport. Run i writes len bytes
 * from byte src_base + src_offset of mr to byte dst_offset of the peer's
 * region dst (its addr on, by rkey, the piece's rkey where it is registered
 * in pieces), or of the region rmr opened from it (PDX_TP_CAP_DIRECT).
 * WR i's wr_id is wr_id with its wr_id_mask bits advanced by i (they
 * wrap); WR i is signaled when i + 1 is a multiple of signal_every (0:
 * none but the last), and the last always is.
 */
#define PDX_TP_RUNS_MAX 64u

typedef struct pdx_tp_run {
    uint32_t src_mem;            /* the caller's names of the two regions: */
    uint32_t dst_mem;            /* the transport does not read them */
    uint64_t src_offset;         /* from src_base */
    uint64_t dst_offset;         /* from the peer region's byte 0 */
    uint64_t len;
} pdx_tp_run_t;

typedef struct pdx_tp_runs {
    uint64_t             wr_id;
    uint64_t             wr_id_mask;
    uint32_t             signal_every;
    uint32_t             n;           /* 1 .. PDX_TP_RUNS_MAX */
    const pdx_tp_run_t  *runs;
    const pdx_tp_mr_t   *mr;          /* local source */
    uint64_t             src_base;    /* the runs' byte 0 inside mr */
    uint64_t             src_len;     /* bytes from src_base the runs may read */
    const pdx_tp_rkey_t *dst;
    const pdx_tp_rmr_t  *rmr;         /* as pdx_tp_write_t.rmr */
} pdx_tp_runs_t;

/*
 * Page copies (PDX_TP_CAP_DIRECT, a direct ep): one WR that copies, for
 * every buffer b and list position i, bytes_per_page bytes from page src[i]
 * of bufs[b] (local, page 0 at offset in mr) to page dst[i] of its peer
 * buffer (page 0 at remote_addr in the opened region rmr). The transport
 * checks every page against both regions and copies the lists before it
 * returns; the GPU makes the addresses (no run list). At most
 * PDX_TP_PAGES_BYTES of tables: nbufs * 16 + npages * 8.
 */
#define PDX_TP_PAGES_BYTES (256u << 10)

typedef struct pdx_tp_page_buf {
    const pdx_tp_mr_t  *mr;
    uint64_t            offset;
    const pdx_tp_rmr_t *rmr;
    uint64_t            remote_addr;
} pdx_tp_page_buf_t;

/*
 * A gate the copies of a page-copies WR wait for on the GPU: the event's
 * last record (taken when the WR is posted), or a pinned host word reaching
 * value. Past deadline_ns (pdx_now_ns) with the gate still closed, or once
 * *abandon holds abandon_if (the caller gave up its room; checked whenever
 * the CQ is polled), the copies are given up: the WR completes with
 * PDX_ERR_TIMEOUT or PDX_ERR_ABORTED and nothing of it is ever written,
 * whenever the gate opens; SENDs of its group after it fail the same way
 * (pdx_tp_params_t.wr_group_mask). A transport that cannot take one more gate now
 * answers PDX_ERR_FULL: the caller waits for the gate and posts the WR
 * without it.
 */
enum { PDX_TP_GATE_EVENT = 1, PDX_TP_GATE_WORD = 2 };

typedef struct pdx_tp_gate {
    uint32_t               kind;     /* PDX_TP_GATE_EVENT or PDX_TP_GATE_WORD */
    void                  *event;    /* a recorded hipEvent_t */
    volatile uint64_t     *word;     /* pinned host memory, never lowered */
    uint64_t               value;
    uint64_t               deadline_ns;
    const _Atomic int32_t *abandon;  /* NULL: none */
    int32_t                abandon_if;
} pdx_tp_gate_t;

typedef struct pdx_tp_pages {
    uint64_t                 wr_id;
    uint32_t                 flags;          /* PDX_TP_SIGNALED */
    uint32_t                 nbufs;
    const pdx_tp_page_buf_t *bufs;
    uint64_t                 bytes_per_page;
    uint32_t                 npages;
    const uint32_t          *src;
    const uint32_t          *dst;
    const pdx_tp_gate_t     *gate;           /* NULL: the pages are final */
} pdx_tp_pages_t;

typedef enum pdx_tp_opcode {
    PDX_TP_OP_WRITE = 0,
    PDX_TP_OP_SEND  = 1,
    PDX_TP_OP_RECV  = 2,
    PDX_TP_OP_READ  = 3,
} pdx_tp_opcode_t;

typedef struct pdx_tp_wc {
    uint64_t        wr_id;
    pdx_tp_ep_t    *ep;
    pdx_status_t    status;     /* PDX_OK, or why the WR failed (a SEND that
                                 * found no posted RECV: PDX_ERR_PEER) */
    pdx_tp_opcode_t opcode;
    uint32_t        byte_len;   /* RECV: bytes received; otherwise 0 */
} pdx_tp_wc_t;

/* The largest SEND payload: a notify record (wire.h) fits. */
#define PDX_TP_SEND_MAX 64

typedef struct pdx_tp_ep_attr {
    uint32_t sq_depth;          /* WRs outstanding at most (WRITE + SEND) */
    uint32_t rq_depth;          /* RECVs posted at most */
    /* PDX_TP_CAP_DIRECT: the peer is a process of this host whose GPU
     * memory this process's GPU reaches; its WRITEs that carry an rmr are
     * copies by the GPU. Ignored by other transports. */
    bool     direct;
} pdx_tp_ep_attr_t;

/* What a transport's bytes mean for visibility (pdx_transport_ops_t.caps). */
enum {
    /* A NIC places the bytes: a READ on a loopback ep is the flush that
     * makes them visible to the GPU (docs/architecture.md §5). Without it
     * the host places every byte before the completion or notify after it. */
    PDX_TP_CAP_FLUSH_READ = 1u << 0,
    /* READs into and out of GPU memory (without it: host memory only). */
    PDX_TP_CAP_READ_DEVICE = 1u << 1,
    /* Direct copies (ipc): a peer of this host writes into GPU regions
     * opened from their export bytes (mr_export, rmr_open); a WRITE's
     * completion means the bytes are in place, a SEND after it follows
     * them, and no flush is needed for them. */
    PDX_TP_CAP_DIRECT = 1u << 2,
};

/* The most bytes mr_export gives: what a peer needs to open the region. */
#define PDX_TP_EXPORT_MAX 192

struct pdx_transport_ops {
    const char *name;
    unsigned    caps;           /* PDX_TP_CAP_* */

    /* PDX_ERR_NO_DEVICE when the transport has no usable device; why is
     * logged (at info with params->quiet_no_device). */
    pdx_status_t (*open)(const pdx_tp_params_t *params, pdx_tp_t **tp_p);
    /* Frees every ep, CQ and region still open on it; peers see PDX_ERR_PEER. */
    void         (*close)(pdx_tp_t *tp);

    pdx_status_t (*mr_reg)(pdx_tp_t *tp, void *base, size_t len, unsigned access,
                           pdx_tp_mr_t **mr_p);
    /* A region the engine sees at base whose bytes are [offset, offset + len)
     * of a dmabuf (GPU memory exported by hip/). The caller may close fd
     * after return. PDX_ERR_UNSUPPORTED where the transport or the device
     * cannot (the message says which). */
    pdx_status_t (*mr_reg_dmabuf)(pdx_tp_t *tp, void *base, size_t len, int fd,
                                  uint64_t offset, unsigned access, pdx_tp_mr_t **mr_p);
    /* PDX_ERR_STATE while a WR still reads or places bytes in the region. */
    pdx_status_t (*mr_dereg)(pdx_tp_mr_t *mr);
    /* rkey_p->rkeys (pieces) stays valid until mr_dereg. */
    void         (*mr_remote)(const pdx_tp_mr_t *mr, pdx_tp_rkey_t *rkey_p);

    pdx_status_t (*cq_create)(pdx_tp_t *tp, uint32_t depth, pdx_tp_cq_t **cq_p);
    void         (*cq_destroy)(pdx_tp_cq_t *cq);
    /* Up to max completions; 0 when none. Only the CQ's owner thread calls it. */
    int          (*cq_poll)(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max);
    /* Ask for the fd to become readable at the next completion; then poll
     * once more before sleeping (a completion may have raced the arm). */
    pdx_status_t (*cq_arm)(pdx_tp_cq_t *cq);
    int          (*cq_fd)(pdx_tp_cq_t *cq);
    /* Consume the event after the fd became readable. */
    void         (*cq_ack)(pdx_tp_cq_t *cq);

    pdx_status_t (*ep_create)(pdx_tp_t *tp, pdx_tp_cq_t *cq, const pdx_tp_ep_attr_t *attr,
                              pdx_tp_ep_t **ep_p);
    void         (*ep_address)(const pdx_tp_ep_t *ep, pdx_tp_addr_t *addr_p);
    /* Both sides call it with the other's address; WRs may be posted right
     * after it returns and run once the connection is up. On failure the ep
     * is in error (ep_error says why): destroy it. */
    pdx_status_t (*ep_connect)(pdx_tp_ep_t *ep, const pdx_tp_addr_t *remote);
    /* Move to error: every outstanding WR completes with `why`. A transport
     * may queue those completions before returning (tcp does) or later. */
    void         (*ep_fail)(pdx_tp_ep_t *ep, pdx_status_t why, const char *msg);
    /* Frees the ep; outstanding WRs are dropped without completions:
     * ep_fail and drain the CQ first to see them. */
    void         (*ep_destroy)(pdx_tp_ep_t *ep);
    /* Why the ep is in error; "" while healthy. Valid until ep_destroy. */
    const char  *(*ep_error)(const pdx_tp_ep_t *ep);

    /* Post n chained WRITEs at once. PDX_ERR_AGAIN (nothing posted) when the
     * send queue lacks room for all n now, PDX_ERR_INVALID when n exceeds its
     * depth; PDX_ERR_PEER once the ep is in error. */
    pdx_status_t (*post_write)(pdx_tp_ep_t *ep, const pdx_tp_write_t *wr, uint32_t n);
    /* Post the WRITEs of runs (pdx_tp_runs_t) at once, as post_write would.
     * A run outside [0, src_len) or the peer's region, across one of the
     * peer's pieces (or the source's), or above max_msg_size: PDX_ERR_RANGE,
     * nothing posted, *bad_p the first such run (a RANGE of a transport's
     * own later check, ipc's copies, leaves *bad_p as it was). PDX_ERR_INVALID
     * when the source region or the window [src_base, src_base + src_len) is
     * bad. */
    pdx_status_t (*post_runs)(pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs, uint32_t *bad_p);
    /* SEND of len <= PDX_TP_SEND_MAX bytes, copied before return (inline). */
    pdx_status_t (*post_send)(pdx_tp_ep_t *ep, uint64_t wr_id, const void *data, uint32_t len,
                              unsigned flags);
    /* A receive buffer of registered host memory for one SEND. */
    pdx_status_t (*post_recv)(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                              uint64_t offset, uint32_t len);
    /* READ of len bytes at remote_addr (rkey) into mr at offset; always
     * signaled; the remote region needs REMOTE_READ access. With
     * PDX_TP_CAP_FLUSH_READ, on a loopback ep, it is the flush read of
     * docs/architecture.md §5: its completion means every write the NIC
     * placed before it is visible. */
    pdx_status_t (*post_read)(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                              uint64_t offset, uint32_t len, uint64_t remote_addr, uint32_t rkey);

    /* PDX_TP_CAP_DIRECT. The bytes a peer of this host opens the region
     * with (at most cap, PDX_TP_EXPORT_MAX is enough); *len_p = 0 when it
     * cannot be opened by a peer (host memory, no REMOTE_WRITE access). */
    pdx_status_t (*mr_export)(const pdx_tp_mr_t *mr, void *buf, size_t cap, size_t *len_p);
    /* Open a peer's region from its export bytes, where remote describes it
     * (addr, len); until rmr_close, which comes only after every ep that
     * copied into it was destroyed. Refused with the reason logged. */
    pdx_status_t (*rmr_open)(pdx_tp_t *tp, const void *bytes, size_t len,
                             const pdx_tp_rkey_t *remote, pdx_tp_rmr_t **rmr_p);
    void         (*rmr_close)(pdx_tp_rmr_t *rmr);
    /* One page-copies WR (pdx_tp_pages_t) on a direct ep: PDX_ERR_AGAIN,
     * PDX_ERR_PEER as post_write; PDX_ERR_RANGE (nothing posted) for a page
     * outside its region; PDX_ERR_UNSUPPORTED on an ep that is not direct;
     * PDX_ERR_FULL (nothing posted) when it cannot take pages->gate now. */
    pdx_status_t (*post_pages)(pdx_tp_ep_t *ep, const pdx_tp_pages_t *pages);
};

/* Stubs for ops a transport does not implement. */
pdx_status_t pdx_tp_unsupported_post_recv(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                                          uint64_t offset, uint32_t len);
pdx_status_t pdx_tp_unsupported_mr_reg_dmabuf(pdx_tp_t *tp, void *base, size_t len, int fd,
                                              uint64_t offset, unsigned access,
                                              pdx_tp_mr_t **mr_p);
pdx_status_t pdx_tp_unsupported_post_read(pdx_tp_ep_t *ep, uint64_t wr_id, const pdx_tp_mr_t *mr,
                                          uint64_t offset, uint32_t len, uint64_t remote_addr,
                                          uint32_t rkey);
pdx_status_t pdx_tp_unsupported_mr_export(const pdx_tp_mr_t *mr, void *buf, size_t cap,
                                          size_t *len_p);
pdx_status_t pdx_tp_unsupported_rmr_open(pdx_tp_t *tp, const void *bytes, size_t len,
                                         const pdx_tp_rkey_t *remote, pdx_tp_rmr_t **rmr_p);
void pdx_tp_unsupported_rmr_close(pdx_tp_rmr_t *rmr);
pdx_status_t pdx_tp_unsupported_post_pages(pdx_tp_ep_t *ep, const pdx_tp_pages_t *pages);

/* post_runs for a transport that builds its WRs in post_write: the runs as
 * pdx_tp_write_t, checked, then posted with post_write on ep. */
pdx_status_t pdx_tp_post_runs_as_writes(pdx_status_t (*post_write)(pdx_tp_ep_t *,
                                                                   const pdx_tp_write_t *,
                                                                   uint32_t),
                                        pdx_tp_ep_t *ep, const pdx_tp_runs_t *runs,
                                        uint64_t max_msg, uint64_t src_mr_len, uint32_t *bad_p);
/* Whether len bytes at off of the peer's region k stay in one of its pieces. */
static inline bool pdx_tp_rkey_one_piece(const pdx_tp_rkey_t *k, uint64_t off, uint64_t len)
{
    return k->npieces <= 1 || len == 0 || off / k->piece == (off + len - 1) / k->piece;
}

/* Whether run r of runs fits the window, the peer's region and its pieces,
 * and max_msg: what every post_runs checks. */
static inline bool pdx_tp_run_fits(const pdx_tp_runs_t *runs, const pdx_tp_run_t *r,
                                   uint64_t max_msg)
{
    const pdx_tp_rkey_t *d = runs->dst;

    return r->len <= max_msg && r->src_offset <= runs->src_len &&
           r->len <= runs->src_len - r->src_offset && r->dst_offset <= d->len &&
           r->len <= d->len - r->dst_offset && pdx_tp_rkey_one_piece(d, r->dst_offset, r->len);
}

/* WR i's wr_id of runs. */
static inline uint64_t pdx_tp_runs_wr_id(const pdx_tp_runs_t *runs, uint32_t i)
{
    return (runs->wr_id & ~runs->wr_id_mask) | ((runs->wr_id + i) & runs->wr_id_mask);
}

/* Transports compiled into this library. pdx_rdma_ops exists when the build
 * found libibverbs (PDX_HAVE_RDMA). */
extern const pdx_transport_ops_t pdx_tcp_ops;
extern const pdx_transport_ops_t pdx_rdma_ops;

/* ipc (PDX_HAVE_IPC: a GPU platform with the gather kernel): a transport
 * over another (params->inner) whose endpoints to direct peers
 * (pdx_tp_ep_attr_t.direct) turn WRITEs into GPU copies. The table for an
 * inner transport: its name and caps, plus PDX_TP_CAP_DIRECT. */
const pdx_transport_ops_t *pdx_ipc_ops(const pdx_transport_ops_t *inner);
/* An open inner tp, wrapped (closed with the wrapper): how an engine turns
 * the transport it opened into ipc. PDX_ERR_UNSUPPORTED without the gather
 * kernel (said why). */
pdx_status_t pdx_ipc_wrap(const pdx_transport_ops_t *inner, pdx_tp_t *inner_tp,
                          const pdx_tp_params_t *params, pdx_tp_t **tp_p);

#endif
