/*
 * Data endpoints: one RC connection of a peer, owned by one shard (shard.c
 * makes and drops them, shard_send.c and shard_cq.c use them, dep_reset.c
 * resets them).
 */
#ifndef PDX_DEP_H
#define PDX_DEP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "bounds.h"
#include "transport.h"
#include "wire.h"


/* One entry per WR posted on a data endpoint, indexed by seq % sq_depth. */
typedef struct pdx_ledger_entry {
    pdx_room_obj_t *room;         /* NULL: no room (a padding entry) */
    uint64_t        room_id;
} pdx_ledger_entry_t;

/*
 * A reset (dep_reset.c) as this side sees it: each step follows the one
 * before, and the endpoint carries rooms only in PDX_DEP_RESET_NONE.
 */
typedef enum pdx_dep_reset {
    PDX_DEP_RESET_NONE = 0,  /* not resetting (or abandoned with its peer) */
    PDX_DEP_RESET_DRAINING,  /* failed: the old ep's WRs and receives complete */
    PDX_DEP_RESET_REBUILT,   /* the ep of epoch + 1 exists; its EP goes out */
    PDX_DEP_RESET_OFFERED,   /* its EP went out: connect once the peer's came */
    PDX_DEP_RESET_CONNECTED, /* connected, receives posted, our CREDIT sent:
                              * up at the peer's CREDIT */
} pdx_dep_reset_t;

/* The same reset as the peer's messages tell it: its EP comes before its
 * CREDIT on the ordered control connection. */
typedef enum pdx_dep_peer_reset {
    PDX_PEER_RESET_SILENT = 0, /* nothing of this reset yet */
    PDX_PEER_RESET_EP,         /* its EP of the new epoch: dep->remote */
    PDX_PEER_RESET_UP,         /* ... and its CREDIT: its receives are posted */
} pdx_dep_peer_reset_t;

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
    /* reset and reconnect (dep_reset.c): lock guards ep replacement, both
     * reset states and what the peer sent; epoch and reset are also read
     * without it */
    pthread_mutex_t     lock;
    _Atomic uint32_t    epoch;         /* incarnation: 0, + 1 per reset */
    _Atomic uint32_t    reset;         /* pdx_dep_reset_t: ours */
    uint32_t            peer_reset;    /* pdx_dep_peer_reset_t: the peer's */
    _Atomic uint32_t    streak;        /* resets since a WR last succeeded on it */
    uint32_t            peer_credits;  /* its CREDIT's count (PDX_PEER_RESET_UP) */
    pdx_tp_addr_t       remote;        /* its EP's address (PDX_PEER_RESET_EP on) */
};

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

/* Control thread: RESET, EP of a later epoch, CREDIT of a reset endpoint. */
void pdx_dep_on_reset(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_reset_t *m);
void pdx_dep_on_ep(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_ep_t *m);
/* Returns true when the CREDIT was about a reset endpoint (and handled). */
bool pdx_dep_on_credit(pdx_engine_t *e, pdx_peer_t *peer, pdx_dep_t *dep,
                       const pdx_wire_credit_t *m);

/*
 * wr_id of a WR on a data endpoint: the dep's slot in shard->deps << 48,
 * then for WRITE/SEND the low 47 bits of the endpoint's WR sequence, for a
 * RECV PDX_WR_RECV | its receive buffer. The RECV bit keeps the two apart
 * without trusting wc.opcode (verbs leave it undefined on error).
 */
#define PDX_WR_SLOT_SHIFT 48
#define PDX_WR_RECV       (1ull << 47)
#define PDX_WR_SEQ_MASK   (PDX_WR_RECV - 1)

static inline uint64_t pdx_wr_id_send(const pdx_dep_t *dep, uint64_t seq)
{
    return (uint64_t)dep->slot << PDX_WR_SLOT_SHIFT | (seq & PDX_WR_SEQ_MASK);
}

static inline uint64_t pdx_wr_id_recv(const pdx_dep_t *dep, uint32_t i)
{
    return (uint64_t)dep->slot << PDX_WR_SLOT_SHIFT | PDX_WR_RECV | i;
}

/* Free the dep's ep, receive buffers and ledger (its shard, or teardown). */
void pdx_dep_free(pdx_engine_t *e, pdx_dep_t *dep);

/*
 * The endpoint broke (error completion, post refused, malformed notify):
 * reset it (dep_reset.c), or fail its peer while the handshake runs. Once
 * per failure. Any shard function.
 */
void pdx_shard_dep_broken(pdx_dep_t *dep, pdx_status_t status, const char *why);

#endif
