/*
 * Internal to the shard worker (shard.c: lifecycle, endpoints, the loop;
 * shard_send.c: the send path; shard_cq.c: completions and notify
 * receives). The worker's context lives on its own stack; nothing here is
 * touched by another thread.
 */
#ifndef PDX_SHARD_LOOP_H
#define PDX_SHARD_LOOP_H

#include "dep.h"
#include "engine.h"
#include "gate_hist.h"
#include "plan.h"
#include "shard.h"

#define PDX_SHARD_NONE      UINT32_MAX /* no cell, no room */
#define PDX_SHARD_MAX_DEPS  (PDX_MAX_PEERS * 8)
#define PDX_SHARD_BATCH     32u   /* runs pulled, WRITEs chained, per post */
#define PDX_SHARD_WC_BATCH  64    /* completions per cq_poll */
#define PDX_SHARD_ROOM_WRS  256   /* WRs one room may post per pass (fairness) */

_Static_assert(PDX_SHARD_MAX_DEPS == PDX_ARRAY_SIZE(((pdx_shard_t *)0)->deps),
               "the shard's dep table");
_Static_assert(PDX_SHARD_MAX_DEPS <= UINT16_MAX, "dep index entries are 16 bits");

/* The worker's context for one run of its thread. */
typedef struct pdx_shard_loop {
    pdx_shard_t    *s;
    pdx_engine_t   *e;
    /* per pass */
    bool            progress;      /* something changed: pass again before sleeping */
    bool            gated;         /* a room waits on a closed gate: bounded sleep */
    bool            gate_due;      /* ... one that is due (gate_hist.h): no sleep */
    uint64_t        gate_wake_ns;  /* ... the time the next one falls due */
    /* across passes */
    bool            credit_retry;  /* a dep holds reposts it could not credit yet */
    bool            no_pwait2;     /* epoll_pwait2 is missing: millisecond sleeps */
    bool            arm_failed;    /* cq_arm failed (logged): sleeps stay bounded */
    bool            wait_error;    /* epoll failed once (logged) */
    pdx_gate_hist_t gate_hist;     /* how long its last gates stayed closed */
    /* connected deps grouped by peer id, rebuilt while the table changes */
    uint32_t        idx_ndeps;     /* s->ndeps when built */
    uint32_t        idx_gen;       /* s->deps_gen when built */
    bool            idx_complete;  /* every dep was connected when built */
    uint16_t        idx_start[PDX_MAX_PEERS + 1];
    bool            idx_pending[PDX_MAX_PEERS]; /* the peer has a dep not connected */
    pdx_dep_t      *idx_deps[PDX_SHARD_MAX_DEPS];
    /* scratch */
    pdx_dep_t      *use[PDX_SHARD_MAX_DEPS];
    pdx_run_t       runs[PDX_SHARD_BATCH];
    pdx_tp_write_t  wrs[PDX_SHARD_BATCH];
    pdx_tp_wc_t     wc[PDX_SHARD_WC_BATCH];
    uint32_t        pair_src[PDX_LAYOUT_MAX_BUFFERS]; /* a group's buffer pairs (ipc) */
    uint32_t        pair_dst[PDX_LAYOUT_MAX_BUFFERS];
} pdx_shard_loop_t;

/* shard.c: pop the ring into the rooms' FIFOs; the endpoints by peer. */
void pdx_shard_intake(pdx_shard_loop_t *L);
void pdx_shard_index_deps(pdx_shard_loop_t *L);
/* The usable (connected, not failed) deps of this shard to peer, in L->use;
 * none while one of them is still connecting. */
uint32_t pdx_shard_peer_deps(pdx_shard_loop_t *L, const pdx_peer_t *peer);
/* A dep of this shard to peer is being reset (dep_reset.c). */
bool pdx_shard_peer_resetting(pdx_shard_loop_t *L, const pdx_peer_t *peer);

/* shard_send.c: work the active rooms. */
void pdx_shard_send(pdx_shard_loop_t *L);

/* shard_cq.c: drain the CQ; return notify credits that could not go out. */
void pdx_shard_poll(pdx_shard_loop_t *L);
void pdx_shard_credit_retry(pdx_shard_loop_t *L);

/* shard.c: drop the deps of reaped peers that drained. */
void pdx_shard_drop_deps(pdx_shard_loop_t *L);
/* dep_reset.c: rebuild the deps of this shard whose reset drained. */
void pdx_shard_resets(pdx_shard_loop_t *L);
/* flush.c: post the flush read for the rooms queued; its completion (true
 * when wc was of the flush pair). */
void pdx_flush_run(pdx_shard_loop_t *L);
bool pdx_flush_on_wc(pdx_shard_loop_t *L, const pdx_tp_wc_t *wc);

/* WRs a dep may still take: data leaves room for the notifies. */
static inline uint32_t pdx_dep_room(const pdx_dep_t *dep, uint32_t reserve)
{
    uint64_t used = dep->posted - dep->completed;

    return used + reserve >= dep->sq_depth ? 0 : (uint32_t)(dep->sq_depth - reserve - used);
}

/* Send-queue slots kept for aux writes and notifies. */
static inline uint32_t pdx_dep_reserve(const pdx_dep_t *dep)
{
    return PDX_MAX(1u, PDX_MIN(8u, dep->sq_depth / 8));
}

#endif
