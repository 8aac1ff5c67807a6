/*
 * Rooms' engine data and what changes it: room_state.c (every state change:
 * fail, succeed, the fence, remove), room_send.c (the prefill side),
 * room_recv.c (the decode side), rooms.c (calls of both sides, deadlines,
 * gone peers). The table itself is room.h.
 */
#ifndef PDX_ROOMS_H
#define PDX_ROOMS_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine.h"
#include "plan.h"


/* Room ids with this bit name one-sided transfers (xfer.c); the app's
 * rooms stay below it. */
#define PDX_XFER_ROOM_BIT (1ull << 63)

static inline bool pdx_room_is_xfer(uint64_t id)
{
    return (id & PDX_XFER_ROOM_BIT) != 0;
}

/* A one-sided transfer's work: the room's one chunk plans these runs (src:
 * the local region, dst: the peer's, for READs too) and the local regions
 * in pinned[] stay pinned until the room is removed. */
typedef struct pdx_xfer_job {
    pdx_xfer_op_t op;
    uint32_t      nruns;
    uint32_t      npinned;
    uint32_t     *pinned;
    pdx_run_t     runs[];
} pdx_xfer_job_t;

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
    /* PDX_VERIFY asked by decode (shard): the checksum of the chunks so far
     * and the layers of decode's layout they covered */
    bool                verify;
    bool                sum_layers;    /* layer_begin, layer_end are set */
    uint64_t            sum;
    uint32_t            layer_begin, layer_end;
} pdx_dest_t;

/* Decode with PDX_VERIFY: what one peer's pdx_expect covers, and the
 * checksum its sender's LAST notifies carried (verify.h). */
typedef struct pdx_verify_rec {
    uint32_t            layout;        /* decode's layout id */
    pdx_pages_t         lists[PDX_LAYOUT_MAX_GROUPS]; /* into pages[] */
    bool                has_aux;
    pdx_region_t        aux;
    bool                has_sum;       /* a LAST notify came (under ext->lock) */
    bool                sum_aux;       /* ... its sum includes the aux bytes */
    uint64_t            sum;
    uint32_t            layer_begin, layer_end;
    uint32_t            pages[];
} pdx_verify_rec_t;

/* Decode: the layers of a room that landed, from the notifies that follow
 * a chunk's writes on their endpoint (PDX_WIRE_NOTIFY_LAYERS; room_layers.c). */
typedef struct pdx_layers pdx_layers_t;

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
    volatile uint64_t *end_word;       /* decode: pdx_room_stream_wait's word: end_base + 1
                                        * once the room ended, + 2 once the stream passed
                                        * (ext->lock) */
    uint64_t         end_base;
    pdx_peer_t *_Atomic gone_peer;     /* decode: a sender gone, the room fails once
                                        * what it sent before is polled */
    _Atomic uint32_t last_queued;      /* prefill: pdx_send had PDX_SEND_LAST */
    pdx_xfer_job_t  *xfer;             /* a one-sided transfer: set before its chunk is
                                        * queued, freed at remove */
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
    bool             paged;            /* its groups go as page copies (ipc), those
                                        * before plan.group posted */
    bool             gpu_gate;         /* the head chunk's gate is still closed: its
                                        * page copies wait for it on the GPU */
    bool             gate_due;         /* the head chunk's gate was last polled due */
    uint64_t         gate_seen_ns;     /* ... found closed first (0: not yet; cleared
                                        * whenever a head chunk retires) */
    uint64_t         gate_closed_ns;   /* ... and last */
    bool             layers_open;      /* a chunk's first layer ranges went, not its last */
    uint32_t         layer_next;       /* ... the layer its next range starts at */
    uint32_t         layer_npages[PDX_LAYOUT_MAX_GROUPS]; /* ... and its page counts */
    pdx_plan_t       plan;
    pdx_pages_t      plan_src[PDX_LAYOUT_MAX_GROUPS];
    pdx_pages_t      plan_dst[PDX_LAYOUT_MAX_GROUPS];
    uint32_t         rr;               /* endpoint striping cursor */
    uint32_t         wrs;              /* WRs posted for this chunk and destination */
    pdx_dep_t       *wr_dep;           /* ... the endpoint of the first, */
    bool             wr_deps;          /* ... and whether others took some */
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
    pdx_verify_rec_t *vrecs[PDX_MAX_DESTS]; /* PDX_VERIFY: holds[i]'s; NULL without */
    uint64_t         hold_pages[PDX_MAX_DESTS]; /* holds[i]'s pages in layered groups */
    uint32_t         layer0, nlayers;  /* of the layout of the first pdx_expect; 0 layers:
                                        * expects of different layers, none counted */
    pdx_layers_t    *layers;           /* from the first layer notify or wait */
    _Atomic uint32_t verifying;        /* checks of the room's bytes running: not fenced */
} pdx_room_ext_t;

#define PDX_DESTS_CLOSED  (1u << 31)
#define PDX_DESTS_COUNT(v) ((v) & ~PDX_DESTS_CLOSED)

/* A notify that arrived before its room's pdx_expect (bounded). */
typedef struct pdx_held_notify {
    pdx_peer_t       *peer;            /* who sent it */
    pdx_wire_notify_t notify;
    uint64_t          at_ns;
} pdx_held_notify_t;

static inline pdx_room_ext_t *pdx_room_ext(pdx_engine_t *e, const pdx_room_obj_t *obj)
{
    return &e->ext[obj - e->rooms.objs];
}

/* rooms.c: room-side control messages and deadlines */
void pdx_rooms_on_room_msg(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_room_t *m);
void pdx_rooms_on_abort(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_abort_t *m);
void pdx_rooms_on_abort_ack(pdx_engine_t *e, pdx_peer_t *peer, uint64_t room);
void pdx_rooms_on_error(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_error_t *m);
/* Every sender of the decode room is done and its bytes are visible: SUCCESS,
 * or with PDX_VERIFY FAILED when they do not match their checksums. Without
 * ext->lock; nothing for a room that moved on meanwhile. */
void pdx_rooms_arrive(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room);
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


/*
 * A room object found by id may be released and reused by another id at any
 * moment. Under ext->lock, pdx_room_read(obj, id) == true pins it to `id`:
 * release unlinks the id first (then no read succeeds) and takes ext->lock
 * to clear the object before it can be reused.
 */
static inline bool pdx_rooms_live(pdx_room_obj_t *obj, uint64_t id)
{
    int32_t state;

    return pdx_room_read(obj, id, &state);
}

/* pdx_rooms_fail() for a room that still holds `id` (checked under ext->lock). */
bool pdx_rooms_fail_id(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_status_t status,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Under ext->lock, of a decode room: `peer` confirmed, or can no longer
 * write; once every peer has, nothing more can land and the room is fenced. */
void pdx_rooms_ack_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer);

/* pdx_rooms_ack_locked() for a room that still holds `id`. */
void pdx_rooms_ack(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, const pdx_peer_t *peer);

/* Nothing of the room can still be written, here or into here. */
bool pdx_rooms_fenced(pdx_room_obj_t *obj, pdx_room_ext_t *ext);

/*
 * Take a fenced room out of the table: unlink (PDX_ERR_NOT_FOUND when another
 * thread removed it first), send the ABORT_ACKs it owes, unpin its aux
 * region, clear its engine data, free the object.
 */
pdx_status_t pdx_rooms_remove(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id);

/* Send an ABORT_ACK for `room`. */
pdx_status_t pdx_rooms_send_abort_ack(pdx_peer_t *peer, uint64_t room);

/* room_state.c, shared by the room files */
static inline bool pdx_rooms_terminal(int32_t state)
{
    return state == PDX_ROOM_SUCCESS || state == PDX_ROOM_FAILED;
}
/* Pin a registered region for a room (pdx_mem_deregister refuses it), and unpin it. */
pdx_status_t pdx_rooms_aux_pin(pdx_engine_t *e, uint32_t mem);
void pdx_rooms_aux_unpin(pdx_engine_t *e, int32_t mem);
/* Under ext->lock: the first use of the room by the local app. */
void pdx_rooms_app_claim_locked(pdx_room_ext_t *ext);
/* A region of this engine's memory: registered, and the range inside it. */
pdx_status_t pdx_rooms_check_region(pdx_engine_t *e, const pdx_region_t *r, const char *what);
/* Under ext->lock: a prefill room's destinations of `peer`, as bits. */
uint32_t pdx_rooms_dests_of_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer);
/* Under ext->lock: `peer` is one of the room's senders (decode) or destinations. */
bool pdx_rooms_has_peer_locked(pdx_room_ext_t *ext, const pdx_peer_t *peer);

/* room_layers.c (decode). pdx_expect of holds[hold] (under ext->lock). */
void pdx_layers_expect_locked(pdx_room_ext_t *ext, const pdx_layout_t *layout,
                              const pdx_pages_t *dst, uint32_t hold);
/* A notify of PDX_WIRE_NOTIFY_LAYERS from peer: why it is malformed, else
 * NULL; *flush_p: the flush (PDX_FLUSH_*) its layers need before they are
 * visible, to run after the lock with pdx_layers_flush. */
const char *pdx_layers_on_notify_locked(pdx_engine_t *e, pdx_room_ext_t *ext,
                                        const pdx_peer_t *peer, const pdx_wire_notify_t *n,
                                        uint32_t *flush_p);
void pdx_layers_flush(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room, uint32_t mode);
/* A flush read queued for the room's layers completed (flush.c). */
void pdx_layers_flushed(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room);
/* The room ended (under ext->lock): every wait goes on. */
void pdx_layers_end_locked(pdx_room_ext_t *ext, bool failed);
/* At the room's removal, its lock released: the word back to the pool. */
void pdx_layers_free(pdx_engine_t *e, pdx_layers_t *layers);
/* Under ext->lock: whether sender's last chunk was counted. */
bool pdx_rooms_sender_done_locked(const pdx_room_ext_t *ext, uint64_t sender);
/* room_send.c: a prefill room's owed ABORT_ACKs, once nothing of it is in flight. */
void pdx_rooms_flush_acks(pdx_room_obj_t *obj, pdx_room_ext_t *ext, uint64_t id);

/* pdx_rooms_fail_id() logged at `level` (a routine loss: info). */
bool pdx_rooms_fail_at(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id, pdx_log_level_t level,
                       pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/*
 * ABORT_ACKs a prefill room owes: bit d of `mask` names dests[d].peer.
 * hold (under ext->lock) puts a reference to each in to[d] and returns
 * mask; send returns the bits that found the control buffer full
 * (PDX_ERR_AGAIN); put drops the references of `mask`, failing those peers
 * first with `why` unless it is NULL.
 */
uint32_t pdx_rooms_hold_acks_locked(pdx_room_ext_t *ext, uint32_t mask,
                                    pdx_peer_t *to[PDX_MAX_DESTS]);
uint32_t pdx_rooms_send_acks(uint64_t room, uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS]);
void pdx_rooms_put_acks(uint32_t mask, pdx_peer_t *to[PDX_MAX_DESTS], const char *why);

/* xfer.c: unpin a removed transfer's regions and free its job. */
void pdx_xfer_job_free(pdx_engine_t *e, pdx_xfer_job_t *job);

/* Apply the notifies held for the room before its pdx_expect. */
void pdx_rooms_apply_held(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t id);

#endif
