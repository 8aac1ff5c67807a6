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
    PDX_DEP_RESET_BROKEN,    /* a step failed and so did its peer: nothing
                              * more until the reset is abandoned */
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
 * k % ntps to the peer's NIC k % its NICs. Its WRs' wr_ids (below) say
 * which room each belongs to: the transport's record of a WR is the only one.
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
    uint64_t            gated_to;      /* posted after its last WR that waits for a gate
                                        * on the GPU: such a WR is in flight while
                                        * completed < gated_to */
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
 * wr_id of a WR on a data endpoint:
 *
 *   | dep slot 16 | RECV 1 | room 25 | seq 22 |   WRITE, SEND
 *   | dep slot 16 | RECV 1 | receive buffer 47 |  RECV
 *
 * dep slot: its index in shard->deps. The RECV bit keeps the two apart
 * without trusting wc.opcode (verbs leave it undefined on error). room: the
 * room's index in the room table + 1 (0: no room, a credit record). seq:
 * the low bits of the endpoint's WR sequence (dep->posted when posted),
 * enough for sq_depth WRs outstanding.
 *
 * The engine keeps no record of its own per WR: every run of one room's WRs
 * on an endpoint ends with a signaled one (a post is one room's and ends
 * signaled), so a completion covers WRs of its own wr_id's room only, from
 * dep->completed on, whether it succeeded or failed.
 */
#define PDX_WR_SLOT_SHIFT 48
#define PDX_WR_RECV       (1ull << 47)
#define PDX_WR_ROOM_SHIFT 22
#define PDX_WR_ROOM_MASK  ((1ull << 25) - 1)
#define PDX_WR_SEQ_MASK   ((1ull << PDX_WR_ROOM_SHIFT) - 1)
#define PDX_WR_BUF_MASK   (PDX_WR_RECV - 1)

_Static_assert(PDX_ROOMS_MAX < PDX_WR_ROOM_MASK, "a room index fits a wr_id");
_Static_assert(PDX_SQ_DEPTH_MAX <= PDX_WR_SEQ_MASK / 2, "outstanding WRs fit a wr_id's seq");

/* room: the room's index in the table + 1, or 0 */
static inline uint64_t pdx_wr_id_send(const pdx_dep_t *dep, uint32_t room, uint64_t seq)
{
    return (uint64_t)dep->slot << PDX_WR_SLOT_SHIFT | (uint64_t)room << PDX_WR_ROOM_SHIFT |
           (seq & PDX_WR_SEQ_MASK);
}

static inline uint32_t pdx_wr_room(uint64_t wr_id)
{
    return (uint32_t)(wr_id >> PDX_WR_ROOM_SHIFT & PDX_WR_ROOM_MASK);
}

static inline uint64_t pdx_wr_id_recv(const pdx_dep_t *dep, uint32_t i)
{
    return (uint64_t)dep->slot << PDX_WR_SLOT_SHIFT | PDX_WR_RECV | i;
}

/* Free the dep's ep and receive buffers (its shard, or teardown). */
void pdx_dep_free(pdx_engine_t *e, pdx_dep_t *dep);

/*
 * The endpoint broke (error completion, post refused, malformed notify):
 * reset it (dep_reset.c), or fail its peer while the handshake runs. Once
 * per failure. Any shard function.
 */
void pdx_shard_dep_broken(pdx_dep_t *dep, pdx_status_t status, const char *why);

#endif
