/*
 * The engine (engine.c: lifecycle, layouts, stats): its struct, and the
 * calls of its control thread. Each other part of it has a header of its
 * own: bounds.h (limits, shared names), mem.h (registered memory), peer.h
 * (control connections), dep.h (data endpoints), rooms.h (room data and
 * what changes it), shard.h (workers; shard_loop.h is a worker's own
 * state). Each file includes the parts it uses.
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

#include "auth.h"
#include "bounds.h"
#include "gpu.h"
#include "layout.h"
#include "mem.h"
#include "room.h"
#include "topo.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

/* ----------------------------------------------------------------- engine */

typedef struct pdx_engine_stats_acc {
    _Atomic uint64_t rooms_success, rooms_failed, send_again, send_kicks;
    _Atomic uint64_t peers_admitted, peers_retired, handshakes_refused, auth_refused;
    _Atomic uint64_t rooms_verified, checksum_mismatches;
} pdx_engine_stats_acc_t;

struct pdx_engine {
    pdx_config_t               cfg;
    const pdx_transport_ops_t *ops;
    const pdx_transport_ops_t *base_ops;    /* tcp or rdma: ops itself, or what ipc is over */
    pdx_tp_t                  *tps[PDX_MAX_NICS]; /* one per NIC */
    uint32_t                   ntps;
    uint64_t                   mr_piece;    /* the smallest of the tps' (0: none) */
    bool                       flush;       /* shards keep a loopback pair for flush reads */
    pdx_gpu_t                  gpu;
    bool                       ipc;         /* the transport is ipc over tcp or rdma */
    char                       gpu_bus_id[PDX_HIP_BUS_ID_MAX]; /* the GPU's, "" without */
    pdx_topo_gpu_t             place;       /* where the GPU sits (topo.c); place.found
                                             * false without a GPU or a topology */
    cpu_set_t                  cpus;        /* PDX_CPU_AFFINITY: shards and tcp progress */
    bool                       bind;        /* threads run on cpus */
    int                        mem_node;    /* rings and tables prefer it (-1: any) */
    struct pdx_verify         *verify;      /* verify.c: PDX_VERIFY's stage for GPU memory */
    uint8_t                    id[PDX_WIRE_ID_SIZE];
    uint8_t                    host_id[PDX_WIRE_HOST_ID_SIZE]; /* place.c: the boot id */
    pdx_auth_key_t             key;         /* PDX_AUTH_KEY derived; key.set: peers prove it */
    uint64_t                   sender_id;   /* notify identity: from id */
    char                       host[PDX_WIRE_HOST_MAX + 1]; /* what peers dial (addr.h) */
    char                       bind_host[PDX_WIRE_HOST_MAX + 1]; /* what the control listener
                                                 * bound, numeric; tcp's data listener too */
    char                       address[PDX_NAME_MAX]; /* host:port, [host]:port for IPv6 */
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
    _Atomic bool               ctrl_napping; /* it sleeps to the next heartbeat */
    int                        listen_fd;
    int                        ctrl_epfd;
    int                        ctrl_wake_fd;
    uint32_t                   protocol_version; /* pdx_protocol_version at start */
    /* descriptors encoded for a peer in its handshake (peer_desc.c): made on
     * the first, kept until the control thread stopped */
    uint8_t                   *desc_frame;   /* PDX_WIRE_MAX_FRAME bytes */
    struct pdx_wire_mem_entry *desc_entries; /* PDX_MAX_MEMS x PDX_MAX_NICS */

    _Atomic uint64_t           xfer_next;   /* the next one-sided transfer's number */
    pdx_engine_stats_acc_t     stats;
};

/* place.c: where the engine runs (e->place, cpus, bind, mem_node) and the
 * RDMA devices nearest its GPU, comma-separated, into nic_order. A bad
 * PDX_CPU_AFFINITY is PDX_ERR_INVALID, logged. */
pdx_status_t pdx_engine_place(pdx_engine_t *e, char *nic_order, size_t len);

/* place.c: this host's identity (the kernel's boot id, from path: NULL is
 * /proc/sys/kernel/random/boot_id) into id; all zero when unreadable. Two
 * ids name one host when they are equal and not zero. */
void pdx_host_id(const char *path, uint8_t id[PDX_WIRE_HOST_ID_SIZE]);
bool pdx_host_ids_match(const uint8_t a[PDX_WIRE_HOST_ID_SIZE], const uint8_t b[PDX_WIRE_HOST_ID_SIZE]);

/* An API call's log lines are about its engine. */
void pdx_log_tag(uint64_t id, const char *engine);
static inline void pdx_engine_log_tag(const pdx_engine_t *e)
{
    pdx_log_tag(e->sender_id, e->address);
}

const pdx_layout_t *pdx_engine_layout(pdx_engine_t *e, uint32_t id);

/* ctrl.c: the control thread. pdx_ctrl_listen() binds the listener (the
 * engine's address is known from then on), pdx_ctrl_start() the thread. */
pdx_status_t pdx_ctrl_listen(pdx_engine_t *e);
pdx_status_t pdx_ctrl_start(pdx_engine_t *e);
void pdx_ctrl_stop(pdx_engine_t *e);
void pdx_ctrl_wake(pdx_engine_t *e);
/* Something now needs the control thread's tick (a room, a held notify, a
 * GPU word to free): wake it if it naps until the next heartbeat. One
 * atomic load when it does not. */
void pdx_ctrl_nudge(pdx_engine_t *e);

/* PDX_PROTOCOL_VERSION; an engine speaks the value this has when it is
 * created (tests change it to make an engine speak another version). */
extern uint32_t pdx_protocol_version;


#endif
