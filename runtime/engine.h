/*
 * The engine's internal structures, shared by engine.c (lifecycle, memory,
 * layouts, stats), peer.c and ctrl.c (control channel), shard.c (workers)
 * and rooms.c (room-side API and control messages about rooms).
 *
 * Threads:
 * - API threads: any thread calling pdx_*.
 * - The control thread (ctrl.c): listener, control connections, handshakes,
 *   control messages, heartbeats, the deadline sweep. It owns every peer's
 *   socket and input buffer.
 * - N shard workers (shard.c): each owns a submission ring's consumer side,
 *   a CQ, the data endpoints assigned to it and the sending state of the
 *   rooms that hash to it.
 *
 * Locks (none on a shard's post path; never two at once, but for
 * accept_lock, which pdx_peer_accept holds while it takes peers_lock):
 * - engine->lock: the memory and layout tables (setup calls).
 * - engine->peers_lock: the connection and peer tables, their generations,
 *   and taking a reference to a peer by its handle.
 * - peer->out_lock: a peer's output buffer (any thread appends a frame).
 * - peer->wait_lock: a peer's state changes (pdx_peer_connect waits on it).
 * - engine->accept_lock: pdx_peer_accept's wait for incoming peers, and
 *   which of them it returned (taken before peers_lock).
 * - ext->lock: a room's receive-side bookkeeping and its metadata list.
 * - shard->deps_lock: a shard's free data endpoint slots.
 * - the room table's own mutex (insert/remove).
 *
 * Peer lifetime: a peer object is reference counted (pdx_peer_ref/put).
 * The connection table holds one reference from accept (or dial) until the
 * control thread retires the peer: FAILED, its socket closed, every data
 * endpoint dropped by its shard, rooms told. Rooms, held notifies and API
 * calls in progress hold their own; the last put frees it. A peer has a
 * slot in the peer table (its id, and the handle the API returns) from its
 * admission: at once for a peer we dial, at its READY for one that
 * connected in, so connections still in their handshake hold no slot.
 */
#ifndef PDX_ENGINE_H
#define PDX_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "layout.h"
#include "gpu.h"
#include "plan.h"
#include "ring.h"
#include "room.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

#define PDX_MAX_PEERS       64     /* admitted peers at once (slots) */
#define PDX_MAX_HANDSHAKES  64     /* connections in from peers not admitted yet */
#define PDX_HANDSHAKES_PER_HOST 16 /* ... of them from one address */
#define PDX_MAX_CONNS       (PDX_MAX_PEERS + PDX_MAX_HANDSHAKES)
#define PDX_PEER_SLOT_BITS  8      /* a handle: generation << 8 | slot */
#define PDX_MAX_MEMS        1024
#define PDX_MAX_SHARDS      64     /* PDX_SHARDS at most (config.c) */
#define PDX_MAX_LAYOUTS     64
#define PDX_MAX_DESTS       8      /* decode ranks one prefill room sends to */
#define PDX_MAX_NICS        4      /* PDX_NICS at most (config.c) */
#define PDX_SHARD_MAX_CQS   (4 * PDX_MAX_NICS) /* CQs of one shard, all NICs */
#define PDX_NOTIFY_RQ       64     /* receive buffers per data endpoint */
#define PDX_CREDIT_BATCH    16     /* reposts returned per CREDIT message */
#define PDX_SWEEP_MS        10     /* control thread tick: deadlines, heartbeats */
#define PDX_BYE_WAIT_MS     1000   /* after our BYE, the peer closes first this long */
#define PDX_PEER_OUT_MAX    (8u << 20) /* bytes queued per control connection */
#define PDX_PEER_BUF_MIN    (64u << 10) /* a connection's input and output to begin with */
#define PDX_ERRMSG_MAX      PDX_ROOM_ERR_MAX
#define PDX_DEP_RESET_STREAK 4     /* resets of an endpoint with no WR done between:
                                    * then its peer fails */

typedef struct pdx_peer  pdx_peer_t;
typedef struct pdx_shard pdx_shard_t;
typedef struct pdx_dep   pdx_dep_t;

/* How a decode room makes its bytes visible before SUCCESS (docs/architecture.md §5). */
enum {
    PDX_FLUSH_NONE = 0,
    PDX_FLUSH_READ = 1,   /* a loopback RDMA READ (flush.c) */
    PDX_FLUSH_HOST = 2,   /* the GPU runtime's flush call (gpu.c) */
};

/* ----------------------------------------------------------------- memory */

/* A transport registration, shared by the regions of one allocation (mem.c). */
typedef struct pdx_reg {
    uint32_t         refs;        /* regions in it; 0: a free slot */
    bool             gpu;         /* GPU memory (gpu.c) */
    uintptr_t        base;        /* the registered range */
    size_t           len;
    uint64_t         id;          /* the allocation's identity; 0: host memory by range */
    pdx_tp_mr_t     *mr[PDX_MAX_NICS]; /* one per NIC (engine->ntps) */
} pdx_reg_t;

typedef struct pdx_mem {
    bool             used;
    void            *base;
    size_t           len;
    pdx_reg_t       *reg;
    pdx_tp_mr_t     *mr[PDX_MAX_NICS];   /* reg's */
    uint64_t         mr_off;      /* base - reg->base: WRs address the registration */
    pdx_tp_rkey_t    rkey[PDX_MAX_NICS]; /* what peers write with, per NIC */
    _Atomic uint32_t users;       /* layouts and rooms referring to it */
} pdx_mem_t;

/* A peer's memory and layouts, written by the control thread, read by shards:
 * the rkey of the peer's NIC k is filled, then published with a release store
 * of bit k of `valid`. Every NIC's rkey describes the same addr and len. */
typedef struct pdx_remote_mem {
    _Atomic uint32_t valid;
    pdx_tp_rkey_t    rkey[PDX_MAX_NICS]; /* rkeys (in pieces): owned by the entry */
} pdx_remote_mem_t;

/* ------------------------------------------------------------ data endpoints */

/* One entry per WR posted on a data endpoint, indexed by seq % sq_depth. */
typedef struct pdx_ledger_entry {
    pdx_room_obj_t *room;         /* NULL: no room (a padding entry) */
    uint64_t        room_id;
} pdx_ledger_entry_t;

/*
 * A data endpoint: one RC connection of pair `pair`, queue `index`, owned by
 * one shard. Queue index runs over lane index % lanes: lane k joins our NIC
 * k % ntps to the peer's NIC k % its NICs. wr_id = (uint64_t)local index in
 * the shard's dep table << 48 | seq (WRITE/SEND, low 47 bits) or 1 << 47 |
 * receive slot (RECV).
 */
struct pdx_dep {
    pdx_tp_ep_t        *ep;
    pdx_peer_t         *peer;
    pdx_shard_t        *shard;
    pdx_tp_cq_t        *cq;            /* the shard's CQ its ep is on (of NIC nic) */
    uint32_t            pair, index;
    uint32_t            nic, rnic;     /* ours (engine->tps, shard->cq), the peer's */
    uint32_t            slot;          /* index in shard->deps */
    uint32_t            cq_i;          /* index of cq in shard->cq */
    bool                in_table;      /* added to its shard's table (control thread) */
    _Atomic uint32_t    connected;     /* both addresses known, ep_connect done */
    _Atomic uint32_t    failed;
    /* shard only */
    uint32_t            sq_depth;
    uint64_t            posted;        /* WRs posted so far (next seq) */
    uint64_t            completed;     /* WRs known complete */
    uint32_t            unsignaled;    /* WRs since the last signaled one */
    pdx_ledger_entry_t *ledger;
    uint32_t            reposted;      /* receives reposted, not yet credited */
    /* notify credits: receives the peer has posted for us */
    _Atomic int32_t     credits;
    /* receive buffers for notify records */
    pdx_tp_mr_t        *rx_mr;
    uint8_t            *rx_buf;        /* PDX_NOTIFY_RQ * PDX_TP_SEND_MAX */
    _Atomic uint32_t    rx_out;        /* receives posted, not completed */
    /* reset and reconnect (dep_reset.c): lock guards ep replacement and
     * what follows; epoch is also read without it */
    pthread_mutex_t     lock;
    _Atomic uint32_t    epoch;         /* incarnation: 0, + 1 per reset */
    _Atomic uint32_t    resetting;     /* failed; not usable until reconnected */
    _Atomic uint32_t    streak;        /* resets since a WR last succeeded on it */
    bool                rebuilt;       /* the ep of `epoch` exists */
    bool                ep_sent;       /* ... and its EP went out */
    bool                up_local;      /* ... and is connected, receives posted */
    bool                have_remote;   /* the peer's EP of the next incarnation */
    bool                peer_up;       /* its CREDIT of the epoch came first */
    uint32_t            peer_credits;
    pdx_tp_addr_t       remote;
};

/* ------------------------------------------------------------------ peers */

typedef enum pdx_peer_state {
    PDX_PEER_HELLO = 0,   /* connected, handshake under way */
    PDX_PEER_READY,       /* handshake done both ways */
    PDX_PEER_FAILED,      /* closed, version mismatch, silent: see err */
} pdx_peer_state_t;

#define PDX_ADDR_MAX 64     /* a numeric IP address as text */

struct pdx_peer {
    pdx_engine_t       *engine;
    _Atomic uint32_t    refs;          /* see "Peer lifetime" above */
    uint32_t            conn;          /* index in engine->conns */
    uint32_t            id;            /* slot in engine->peers; UINT32_MAX until admitted */
    uint32_t            handle;        /* the API's name for it: generation << 8 | id */
    int                 fd;
    bool                outgoing;      /* we called pdx_peer_connect */
    bool                accepted;      /* returned by pdx_peer_accept (accept_lock) */
    _Atomic int         state;         /* pdx_peer_state_t */
    _Atomic uint32_t    reaped;        /* FAILED and every dep in error: nothing more
                                        * of it can land here */
    _Atomic uint32_t    closed;        /* the loss is on purpose: a BYE either way */
    const char         *bye;           /* why we said BYE (a static string), NULL: we did not */
    _Atomic uint64_t    bye_ns;        /* when: the peer closes its side within
                                        * PDX_BYE_WAIT_MS, or we close ours */
    bool                was_ready;     /* READY when it failed (written before FAILED) */
    _Atomic uint32_t    deps_live;     /* its deps in shard tables (shards drop them) */
    /* pdx_rooms_peer_gone: when it went and each shard's passes then; its
     * decode rooms fail once every shard has polled what already arrived */
    _Atomic uint64_t    gone_ns;
    uint64_t            gone_passes[PDX_MAX_SHARDS];
    _Atomic uint32_t    fence_steps;   /* peer.c: reaped, rooms told it is gone;
                                        * the second calls pdx_rooms_peer_fenced */
    _Atomic uint32_t    fenced;        /* ... which returned: the peer may be retired */
    pdx_status_t        status;        /* why FAILED (written before state) */
    char                err[PDX_ERRMSG_MAX];
    char                addr[PDX_NAME_MAX];
    char                ip[PDX_ADDR_MAX]; /* the socket's remote address */
    uint64_t            opened_ns;     /* accepted or dialled: the handshake deadline */
    /* the peer's HELLO */
    uint64_t            remote_id;     /* its sender identity */
    uint32_t            remote_shards;
    uint32_t            remote_nics;
    uint32_t            remote_port;   /* its listener: (ip, port) names the engine */
    /* its memory and layouts (control thread writes, shards read) */
    pdx_remote_mem_t    mems[PDX_MAX_MEMS];
    _Atomic uint64_t    mem_piece;     /* smallest piece of its regions in pieces; 0: none */
    pdx_layout_t *_Atomic layouts[PDX_MAX_LAYOUTS];
    /* data endpoints: npairs x qps; pair k is our shard k % nshards; the qps
     * of a pair run over `lanes` = max(both NIC counts) (pdx_dep) */
    uint32_t            npairs, qps, lanes;
    pdx_dep_t          *deps;          /* npairs * qps, NULL until HELLO */
    /* control thread only */
    uint8_t            *in;            /* in_cap bytes, grown up to PDX_WIRE_MAX_FRAME
                                        * for a frame that needs it; freed at the reap */
    size_t              in_len, in_cap;
    uint64_t            last_heard_ns;
    bool                ready_sent, ready_received;
    pdx_wire_ep_t      *eps_in;        /* acceptor: the connector's EPs until READY */
    uint32_t            neps_in;       /* EPs received */
    /* under engine->lock: our MEM/LAYOUT snapshot went out; broadcasts follow it */
    bool                desc_sent;
    /* output: any thread appends whole frames under out_lock */
    pthread_mutex_t     out_lock;
    uint8_t            *out;           /* a ring of out_cap bytes, grown up to
                                        * PDX_PEER_OUT_MAX; freed at the reap */
    size_t              out_head, out_len, out_cap;
    /* pdx_peer_connect waits here for READY or FAILED */
    pthread_mutex_t     wait_lock;
    pthread_cond_t      wait_cond;
};

/* ------------------------------------------------------------------ rooms */

/* Where one prefill room's chunks go: one decode rank's pdx_expect(). */
typedef struct pdx_dest {
    pdx_peer_t         *peer;
    uint32_t            layout;        /* the peer's layout id */
    uint32_t            nsenders;
    uint32_t            ngroups;
    uint32_t            npages[PDX_LAYOUT_MAX_GROUPS];
    uint32_t            cursor[PDX_LAYOUT_MAX_GROUPS]; /* next unused page (shard) */
    uint32_t           *pages;         /* all groups back to back */
    bool                has_aux;
    pdx_region_t        aux;           /* the peer's mem id, offset, len */
} pdx_dest_t;

/*
 * Engine data of a room, parallel to the room table's objects
 * (engine->ext[obj - rooms.objs]). Fields marked (shard) belong to the
 * room's shard; the rest are written under ext->lock or are atomics.
 */
typedef struct pdx_room_ext {
    pthread_mutex_t  lock;             /* first: pdx_release clears what follows */
    _Atomic uint64_t deadline_ns;      /* 0: none; bootstrap (prefill) or expect (decode) */
    _Atomic uint64_t xfer_deadline_ns; /* prefill: first chunk + transfer timeout */
    _Atomic uint32_t ack_mask;         /* prefill: owes ABORT_ACKs to these dests (bit i:
                                        * dests[i].peer) */
    _Atomic bool     app;              /* the local app used the id (send/expect) */
    int32_t          aux_mem;          /* aux region pinned by the room (users), -1: none;
                                        * set by the API thread, read at release */
    _Atomic uint32_t inflight;         /* WRs posted, not completed */
    _Atomic uint32_t queued;           /* chunks in the shard's ring for it */
    _Atomic uint32_t fenced;           /* decode: nothing more can land */
    _Atomic bool     decode;           /* expected here (receiver); set once */
    _Atomic uint32_t flush;            /* decode: PDX_FLUSH_* before SUCCESS */
    volatile uint64_t *end_word;       /* decode: pdx_room_stream_wait's word: 1 once the
                                        * room ended, 2 once the stream passed (ext->lock) */
    pdx_peer_t *_Atomic gone_peer;     /* decode: a sender gone, the room fails once
                                        * what it sent before is polled */
    _Atomic uint32_t last_queued;      /* prefill: pdx_send had PDX_SEND_LAST */
    /* prefill: destinations, published by ndests (release). The shard sets
     * PDX_DESTS_CLOSED in ndests (fetch_or) before a room's first chunk and
     * uses the count it got back; a ROOM message adds a destination only by
     * a CAS that fails once CLOSED is set, so no destination misses a chunk. */
    pdx_dest_t       dests[PDX_MAX_DESTS];
    _Atomic uint32_t ndests;
    /* prefill (shard) */
    uint32_t         head_cell, tail_cell; /* FIFO of ring cells, UINT32_MAX: none */
    _Atomic bool     active;           /* on the shard's active list (shard writes) */
    uint32_t         next_active;
    uint32_t         seq;              /* chunks sent */
    uint32_t         dest_at;          /* destination being planned */
    bool             planning;         /* plan below is live */
    pdx_plan_t       plan;
    pdx_pages_t      plan_src[PDX_LAYOUT_MAX_GROUPS];
    pdx_pages_t      plan_dst[PDX_LAYOUT_MAX_GROUPS];
    uint32_t         rr;               /* endpoint striping cursor */
    uint32_t         wrs;              /* WRs posted for this chunk and destination */
    bool             last_sent;        /* the last chunk's notifies are posted: SUCCESS
                                        * once inflight reaches 0 */
    /* decode (under lock) */
    pdx_peer_t      *peers[PDX_MAX_DESTS]; /* peers it expects data from, not yet fenced */
    uint32_t         npeers;
    pdx_peer_t      *holds[PDX_MAX_DESTS]; /* every peer expected: a reference each */
    uint32_t         nholds;
    uint32_t         nsenders;         /* expected, over all peers */
    uint32_t         nseen;            /* senders with a LAST notify so far */
    uint32_t         ndone;            /* senders whose last chunk arrived */
    uint64_t        *senders;          /* [nsenders]: ids of done senders */
    uint32_t        *last_left;        /* [nsenders]: LAST notifies still due */
    uint32_t         acks;             /* ABORT_ACKs or gone peers, after a failure */
} pdx_room_ext_t;

#define PDX_DESTS_CLOSED  (1u << 31)
#define PDX_DESTS_COUNT(v) ((v) & ~PDX_DESTS_CLOSED)

/* A notify that arrived before its room's pdx_expect (bounded). */
typedef struct pdx_held_notify {
    pdx_peer_t       *peer;            /* who sent it */
    pdx_wire_notify_t notify;
    uint64_t          at_ns;
} pdx_held_notify_t;

/* ----------------------------------------------------------------- shards */

typedef struct pdx_flush_entry {
    pdx_room_obj_t *obj;
    uint64_t        room;
} pdx_flush_entry_t;

typedef struct pdx_shard_stats {
    _Atomic uint64_t bytes_sent, writes_posted, chunks_sent, notifies_sent, notifies_received;
    _Atomic uint64_t flushes;         /* flush reads completed (flush.c) */
    _Atomic uint64_t wakeups;
} pdx_shard_stats_t;

struct pdx_shard {
    pdx_engine_t      *engine;
    uint32_t           index;
    pthread_t          thread;
    bool               running;        /* thread started and not yet joined */
    _Atomic uint32_t   stop;
    pdx_ring_t         ring;
    uint32_t          *cell_next;      /* per ring cell: next cell of its room */
    int                wake_fd;        /* eventfd: new chunks, metadata, credits */
    _Atomic uint32_t   sleeping;
    _Atomic uint64_t   passes;         /* worker passes done (pdx_rooms_peer_gone) */
    int                epfd;
    /* CQs: [k] of NIC k for k < ntps (made at init, with the flush pair's
     * room), then more, of any NIC, made when endpoints fill those
     * (pdx_shard_add_dep: the control thread writes, publishes ncq) */
    pdx_tp_cq_t       *cq[PDX_SHARD_MAX_CQS];
    uint32_t           cq_nic[PDX_SHARD_MAX_CQS];
    _Atomic uint32_t   cq_room[PDX_SHARD_MAX_CQS]; /* entries no ep reserved (the control
                                                    * thread takes, a dropped ep gives) */
    _Atomic uint32_t   ncq;
    /* data endpoints this shard owns: the control thread adds them, the
     * shard reads them and drops those of retired peers (NULL: a free slot) */
    pdx_dep_t *_Atomic deps[PDX_MAX_PEERS * 8];
    _Atomic uint32_t   ndeps;          /* slots ever used (the table's high water) */
    pthread_mutex_t    deps_lock;      /* free_slots */
    uint16_t           free_slots[PDX_MAX_PEERS * 8];
    uint32_t           nfree;
    _Atomic uint32_t   doomed;         /* deps of reaped peers still in the table */
    _Atomic uint32_t   deps_gen;       /* + 1 when a dep stops or starts being usable */
    _Atomic uint32_t   resets;         /* deps being reset (dep_reset.c) */
    /* decode visibility (flush.c): rooms waiting for the next flush read */
    pthread_mutex_t    flush_lock;
    pdx_flush_entry_t *flush_q;        /* under flush_lock */
    uint32_t           flush_n, flush_cap;
    _Atomic uint32_t   flush_pending;
    pdx_tp_ep_t       *flush_ep[PDX_MAX_NICS][2]; /* a loopback pair per NIC: [0]
                                                    * reads through [1] */
    pdx_tp_mr_t       *flush_mr[PDX_MAX_NICS];
    uint64_t          *flush_buf;      /* 8 bytes per NIC */
    pdx_flush_entry_t *flush_batch;    /* shard only: what the READs in flight cover */
    uint32_t           flush_nbatch;
    uint32_t           flush_reads;    /* READs in flight: one per NIC */
    pdx_status_t       flush_status;   /* the first that failed, PDX_OK: none */
    char               flush_err[PDX_ERRMSG_MAX];
    int32_t            flush_target;   /* mem pinned by the READs in flight, -1: none */
    char               flush_broken[PDX_ERRMSG_MAX]; /* why no pair could be made */
    /* shard only: rooms with queued chunks */
    uint32_t           active_head;    /* room obj index, UINT32_MAX: none; */
    uint32_t           active_tail;    /* oldest first, so no room starves */
    pdx_shard_stats_t  stats;
};

/* ----------------------------------------------------------------- engine */

typedef struct pdx_engine_stats_acc {
    _Atomic uint64_t rooms_success, rooms_failed, send_again;
    _Atomic uint64_t peers_admitted, peers_retired, handshakes_refused;
} pdx_engine_stats_acc_t;

struct pdx_engine {
    pdx_config_t               cfg;
    const pdx_transport_ops_t *ops;
    pdx_tp_t                  *tps[PDX_MAX_NICS]; /* one per NIC */
    uint32_t                   ntps;
    uint64_t                   mr_piece;    /* the smallest of the tps' (0: none) */
    bool                       flush;       /* shards keep a loopback pair for flush reads */
    pdx_gpu_t                  gpu;
    uint8_t                    id[PDX_WIRE_ID_SIZE];
    uint64_t                   sender_id;   /* notify identity: from id */
    char                       host[PDX_WIRE_HOST_MAX + 1];
    char                       address[PDX_NAME_MAX]; /* host:port */
    uint32_t                   port;        /* the listener's */

    pthread_mutex_t            lock;
    pdx_mem_t                  mems[PDX_MAX_MEMS];
    pdx_reg_t                  regs[PDX_MAX_MEMS];
    _Atomic uint32_t           nregs;       /* registrations held */
    pdx_layout_t              *layouts[PDX_MAX_LAYOUTS];
    uint32_t                   nlayouts;
    pthread_mutex_t            peers_lock;
    pdx_peer_t *_Atomic        conns[PDX_MAX_CONNS];  /* every peer not yet retired */
    pdx_peer_t *_Atomic        peers[PDX_MAX_PEERS];  /* admitted peers, by id */
    uint32_t                   peer_gen[PDX_MAX_PEERS]; /* of each slot's latest peer */
    _Atomic int32_t            last_refusal; /* status of the last handshake refused */
    pthread_mutex_t            accept_lock;  /* pdx_peer_accept waits for incoming peers */
    pthread_cond_t             accept_cond;

    pdx_room_table_t           rooms;
    pdx_room_ext_t            *ext;         /* [rooms.capacity] */
    pthread_mutex_t            held_lock;
    pdx_held_notify_t         *held;        /* [cfg.held_notifies] */
    uint32_t                   nheld;

    uint32_t                   nshards;
    pdx_shard_t               *shards;

    /* control thread */
    pthread_t                  ctrl_thread;
    _Atomic uint32_t           ctrl_stop;
    int                        listen_fd;
    int                        ctrl_epfd;
    int                        ctrl_wake_fd;
    uint32_t                   protocol_version; /* pdx_protocol_version at start */

    pdx_engine_stats_acc_t     stats;
};

/* ------------------------------------------------------------- interfaces */

/* An API call's log lines are about its engine. */
void pdx_log_tag(uint64_t id, const char *engine);
static inline void pdx_engine_log_tag(const pdx_engine_t *e)
{
    pdx_log_tag(e->sender_id, e->address);
}

static inline pdx_room_ext_t *pdx_room_ext(pdx_engine_t *e, const pdx_room_obj_t *obj)
{
    return &e->ext[obj - e->rooms.objs];
}

static inline pdx_shard_t *pdx_room_shard(pdx_engine_t *e, uint64_t room)
{
    return &e->shards[pdx_hash64(room ^ 0x5bd1e995ull) % e->nshards];
}

/* engine.c */
pdx_status_t pdx_engine_mem_lookup(pdx_engine_t *e, uint32_t mem, pdx_mem_t **mem_p);
/* mem.c: at destroy, every registration still held. */
void pdx_mem_fini(pdx_engine_t *e);
const pdx_layout_t *pdx_engine_layout(pdx_engine_t *e, uint32_t id);

/* ctrl.c: the control thread. pdx_ctrl_listen() binds the listener (the
 * engine's address is known from then on), pdx_ctrl_start() the thread. */
pdx_status_t pdx_ctrl_listen(pdx_engine_t *e);
pdx_status_t pdx_ctrl_start(pdx_engine_t *e);
void pdx_ctrl_stop(pdx_engine_t *e);
void pdx_ctrl_wake(pdx_engine_t *e);

/* PDX_PROTOCOL_VERSION; an engine speaks the value this has when it is
 * created (tests change it to make an engine speak another version). */
extern uint32_t pdx_protocol_version;

/* peer.c: control connections */
/* Append a whole frame to the peer's output (any thread). PDX_ERR_AGAIN when
 * the bounded buffer lacks room, PDX_ERR_PEER once the peer failed. */
pdx_status_t pdx_peer_send(pdx_peer_t *peer, const void *frame, size_t len);
pdx_status_t pdx_peer_send_credit(pdx_peer_t *peer, uint32_t pair, uint32_t index, uint32_t epoch,
                                  uint32_t count);
/* Tell every peer that has our descriptors about a new region / layout (call
 * without engine->lock: it takes it). */
void pdx_peer_broadcast_mem(pdx_engine_t *e, uint32_t mem);
void pdx_peer_broadcast_layout(pdx_engine_t *e, uint32_t layout);
/* A reference: the caller already holds one (a room's, a dep's, ...). */
void pdx_peer_ref(pdx_peer_t *peer);
/* Drop a reference; the last frees the peer. NULL is fine. */
void pdx_peer_put(pdx_peer_t *peer);
/* The admitted peer of an API handle with a reference, or NULL (unknown,
 * or retired: *gone_p, if not NULL, says whether it existed once). */
pdx_peer_t *pdx_peer_hold(pdx_engine_t *e, uint32_t handle, bool *gone_p);
/* The admitted peer of a handle without a reference: for the control
 * thread, and tests, that know it is not retired meanwhile. */
pdx_peer_t *pdx_peer_get(pdx_engine_t *e, uint32_t handle);
/* Fail a peer: close it, fail its endpoints and the rooms that need it.
 * The caller holds a reference (a dep of its shard's table counts), or is
 * the control thread. */
void pdx_peer_fail(pdx_peer_t *peer, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Engine teardown, after every thread stopped and pdx_shard_fini(): frees the
 * peer and its deps array (the eps in it belong to their shards), whatever
 * references are left. */
void pdx_peer_destroy(pdx_peer_t *peer);

/* shard.c: workers */
pdx_status_t pdx_shard_init(pdx_engine_t *e, pdx_shard_t *s, uint32_t index);
pdx_status_t pdx_shard_start(pdx_shard_t *s);
void pdx_shard_stop(pdx_shard_t *s);
void pdx_shard_fini(pdx_shard_t *s);
void pdx_shard_wake(pdx_shard_t *s);
/*
 * Handshake steps for a data endpoint, called by the control thread:
 * pdx_shard_add_dep() creates dep->ep on this shard's CQ and its receive
 * buffers (dep->peer, pair, index already set); pdx_dep_connect() connects it
 * to the peer's address, posts its receives, sets its notify credits to
 * PDX_NOTIFY_RQ and publishes it to the shard (connected = 1, release).
 */
pdx_status_t pdx_shard_add_dep(pdx_shard_t *s, pdx_dep_t *dep);
pdx_status_t pdx_dep_connect(pdx_dep_t *dep, const pdx_tp_addr_t *remote);
/* Its part shared with a reconnect: ep_connect, then the notify receives. */
pdx_status_t pdx_dep_ep_connect(pdx_dep_t *dep, const pdx_tp_addr_t *remote);

/*
 * dep_reset.c: a data endpoint that failed while its peer is READY is reset
 * instead of failing the peer: its outstanding WRs fail their rooms, the
 * peer is told (RESET), both sides rebuild the endpoint once it drained and
 * exchange addresses (EP of the next epoch), and the endpoint carries rooms
 * again once both sides' receives are posted (the peer's first CREDIT of the
 * epoch). Rooms to that peer on that shard wait meanwhile (their deadlines
 * apply). Any thread may begin a reset; tell_peer is false when the peer
 * asked for it.
 */
void pdx_dep_reset_begin(pdx_dep_t *dep, pdx_status_t status, const char *why, bool tell_peer);

/* flush.c: decode visibility. pdx_flush_defer queues a room whose data all
 * arrived (true) when flushes are on, instead of its SUCCESS. */
pdx_status_t pdx_flush_init(pdx_shard_t *s);
void     pdx_flush_fini(pdx_shard_t *s);
uint32_t pdx_flush_cq_depth(const pdx_engine_t *e);
bool     pdx_flush_defer(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room);
/* Control thread: RESET, EP of a later epoch, CREDIT of a reset endpoint. */
void pdx_dep_on_reset(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_reset_t *m);
void pdx_dep_on_ep(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_ep_t *m);
/* Returns true when the CREDIT was about a reset endpoint (and handled). */
bool pdx_dep_on_credit(pdx_engine_t *e, pdx_peer_t *peer, pdx_dep_t *dep,
                       const pdx_wire_credit_t *m);

/* rooms.c: room-side control messages and deadlines */
void pdx_rooms_on_room_msg(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_room_t *m);
void pdx_rooms_on_abort(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_abort_t *m);
void pdx_rooms_on_abort_ack(pdx_engine_t *e, pdx_peer_t *peer, uint64_t room);
void pdx_rooms_on_error(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_error_t *m);
/* A notify record arrived (shard thread). */
void pdx_rooms_on_notify(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_notify_t *n);
/* Fail rooms whose deadline passed (control thread, every PDX_SWEEP_MS). */
void pdx_rooms_sweep(pdx_engine_t *e, uint64_t now_ns);
/* The peer is gone: fail every room that needs it. */
void pdx_rooms_peer_gone(pdx_engine_t *e, pdx_peer_t *peer);
/* Under ext->lock, as the room becomes SUCCESS or FAILED: release a stream
 * waiting for it (pdx_room_stream_wait). */
void pdx_rooms_end_signal_locked(pdx_room_ext_t *ext);
/* The gone peer's endpoints are in error (peer->reaped set first): decode
 * rooms stop waiting for its ABORT_ACK. Called once, after pdx_rooms_peer_gone. */
void pdx_rooms_peer_fenced(pdx_engine_t *e, pdx_peer_t *peer);
/* Fail a room (any thread), count it, tell its peers; false if terminal. */
bool pdx_rooms_fail(pdx_engine_t *e, pdx_room_obj_t *obj, pdx_status_t status, const char *fmt,
                    ...) __attribute__((format(printf, 4, 5)));
/* Engine teardown, threads stopped: every reference rooms and held notifies
 * hold on peers is dropped. */
void pdx_rooms_drop_peers(pdx_engine_t *e);
/* Room reached SUCCESS (count it). */
void pdx_rooms_succeed(pdx_engine_t *e, pdx_room_obj_t *obj);

#endif
