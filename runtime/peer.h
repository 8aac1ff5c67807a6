/* Peers: one control connection each, and its data endpoints (peer.c,
 * peer_connect.c; the control thread in ctrl.c and ctrl_msg.c). */
#ifndef PDX_PEER_H
#define PDX_PEER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "auth.h"
#include "bounds.h"
#include "layout.h"
#include "transport.h"
#include "wire.h"

/* A peer's memory and layouts, written by the control thread, read by shards:
 * the rkey of the peer's NIC k is filled, then published with a release store
 * of bit k of `valid`. Every NIC's rkey describes the same addr and len. */
typedef struct pdx_remote_mem {
    _Atomic uint32_t valid;
    pdx_tp_rkey_t    rkey[PDX_MAX_NICS]; /* rkeys (in pieces): owned by the entry */
    /* a direct peer's region opened for GPU copies (ipc), set once */
    pdx_tp_rmr_t *_Atomic rmr;
} pdx_remote_mem_t;


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
    bool                refused_loudly; /* its handshake was refused for a reason this
                                        * engine's user must act on: its failure is
                                        * an error, not a routine refusal */
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
    bool                same_host;     /* its HELLO's host id is ours: one kernel, so
                                        * its GPUs and memory are this host's */
    bool                direct;        /* WRITEs to it are GPU copies (ipc): on this
                                        * host, and this GPU reaches its GPU */
    /* its memory and layouts (control thread writes, shards read); mems:
     * PDX_MAX_MEMS entries, NULL until HELLO */
    pdx_remote_mem_t   *mems;
    _Atomic uint64_t    mem_piece;     /* smallest piece of its regions in pieces; 0: none */
    pdx_layout_t *_Atomic layouts[PDX_MAX_LAYOUTS];
    /* data endpoints: npairs x qps; pair k is our shard k % nshards; the qps
     * of a pair run over `lanes` = max(both NIC counts) (pdx_dep) */
    uint32_t            npairs, qps, lanes;
    pdx_dep_t          *deps;          /* npairs * qps, NULL until HELLO */
    /* control thread only */
    uint8_t            *in;            /* in_cap bytes, grown up to PDX_WIRE_MAX_SEALED
                                        * for a frame that needs it; freed at the reap */
    size_t              in_len, in_cap;
    uint64_t            last_heard_ns;
    bool                ready_sent, ready_received;
    pdx_wire_ep_t      *eps_in;        /* acceptor: the connector's EPs until READY */
    uint32_t            neps_in;       /* EPs received */
    /* under engine->lock: our MEM/LAYOUT snapshot went out; broadcasts follow it */
    bool                desc_sent;
    /* the key exchange (auth.h, ctrl_auth.c; the control thread) */
    uint32_t            auth_step;     /* the last AUTH step sent or taken, 0: none */
    bool                authed;        /* it proved the key: its frames come sealed */
    uint8_t             nc[PDX_AUTH_NONCE_BYTES], na[PDX_AUTH_NONCE_BYTES];
    pdx_seal_t          seal;          /* rx_*: control thread; tx_*: under out_lock */
    /* output: any thread appends whole frames under out_lock */
    pthread_mutex_t     out_lock;
    bool                sealing;       /* frames go out sealed (set under out_lock) */
    uint8_t            *out;           /* a ring of out_cap bytes, grown up to
                                        * PDX_PEER_OUT_MAX; freed at the reap */
    size_t              out_head, out_len, out_cap;
    /* pdx_peer_connect waits here for READY or FAILED */
    pthread_mutex_t     wait_lock;
    pthread_cond_t      wait_cond;
};

/* desc.c: the READY peer whose engine is `id`, with a reference, or NULL. */
pdx_peer_t *pdx_desc_peer(pdx_engine_t *e, uint64_t id);
/*
 * A memory descriptor of one of peer's regions, checked against what the
 * peer described to us: what it says. PDX_ERR_STATE for a
 * region the peer no longer has (a different registration under the id),
 * PDX_ERR_AGAIN while its description has not reached us yet.
 */
pdx_status_t pdx_desc_mem_of_peer(const pdx_peer_t *peer, const void *desc, size_t len,
                                  pdx_mem_desc_info_t *info_p);

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
static inline bool pdx_peer_failed(const pdx_peer_t *peer)
{
    return atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_FAILED;
}

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

#endif
