/* Shards: a worker thread each and what it owns (shard.c; its loop in
 * shard_loop.h). */
#ifndef PDX_SHARD_H
#define PDX_SHARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "engine.h"
#include "ring.h"


typedef struct pdx_flush_entry {
    pdx_room_obj_t *obj;
    uint64_t        room;
} pdx_flush_entry_t;

typedef struct pdx_shard_stats {
    _Atomic uint64_t bytes_sent, writes_posted, chunks_sent, notifies_sent, notifies_received;
    _Atomic uint64_t bytes_direct;
    _Atomic uint64_t gates_on_gpu;    /* page-copies WRs posted with a closed gate */
    _Atomic uint64_t ranges_merged;   /* layer ranges that went with the one before */
    _Atomic uint64_t gates_waited;    /* gates polled closed until they opened */
    _Atomic uint64_t gates_foreseen;  /* ... found open while due (gate_hist.h) */
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
    pdx_tp_page_buf_t *page_bufs;      /* ipc: a group's buffers for one page-copies WR
                                        * (PDX_LAYOUT_MAX_BUFFERS); NULL otherwise */
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

static inline pdx_shard_t *pdx_room_shard(pdx_engine_t *e, uint64_t room)
{
    return &e->shards[pdx_hash64(room ^ 0x5bd1e995ull) % e->nshards];
}

/* shard.c: workers */
pdx_status_t pdx_shard_init(pdx_engine_t *e, pdx_shard_t *s, uint32_t index);
pdx_status_t pdx_shard_start(pdx_shard_t *s);
void pdx_shard_stop(pdx_shard_t *s);
void pdx_shard_fini(pdx_shard_t *s);
/* Wake the worker if it sleeps (then true: an eventfd write). */
bool pdx_shard_wake(pdx_shard_t *s);
/* flush.c: decode visibility. pdx_flush_defer queues a room whose data all
 * arrived (true) when flushes are on, instead of its SUCCESS. */
pdx_status_t pdx_flush_init(pdx_shard_t *s);
void     pdx_flush_fini(pdx_shard_t *s);
uint32_t pdx_flush_cq_depth(const pdx_engine_t *e);
bool     pdx_flush_defer(pdx_engine_t *e, pdx_room_obj_t *obj, uint64_t room);

#endif
