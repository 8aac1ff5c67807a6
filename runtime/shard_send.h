/*
 * The shard's send path, between its files: shard_send.c (rooms, plan,
 * runs, aux, notifies) and shard_pages.c (page copies to a direct peer).
 * Both run on the shard's worker only.
 */
#ifndef PDX_SHARD_SEND_H
#define PDX_SHARD_SEND_H

#include "shard_loop.h"
#include "rooms.h"

typedef enum step {
    STEP_DONE,    /* this step is finished: go on */
    STEP_WAIT,    /* blocked (gate, metadata, credits, budget): come back */
    STEP_FAILED,  /* the room failed: drop its chunks */
} step_t;

/* The room's chunk being worked on and what it needs, for one visit. */
typedef struct send_ctx {
    pdx_shard_loop_t *L;
    pdx_room_obj_t   *obj;
    pdx_room_ext_t   *ext;
    pdx_ring_cell_t  *cell;
    const pdx_chunk_t *chunk;
    uint32_t          budget;   /* WRs it may still post this pass */
} send_ctx_t;

/* The room of the context, as its WRs' wr_ids name it (dep.h). */
static inline uint32_t wr_room(const send_ctx_t *c)
{
    return (uint32_t)(c->obj - c->L->e->rooms.objs) + 1;
}

/* Fail the room with a message: STEP_FAILED. */
step_t pdx_send_fail(send_ctx_t *c, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* A post was refused: the room fails; a dead endpoint also fails its peer. */
step_t pdx_send_refused(send_ctx_t *c, pdx_dep_t *dep, pdx_status_t status, const char *what);
/* n WRs went out on dep: the room's and the shard's counters; direct of
 * their bytes were GPU copies. */
void pdx_send_count(send_ctx_t *c, pdx_dep_t *dep, uint32_t n, uint64_t bytes, uint64_t direct);

/* shard_head.c: a fresh head chunk. Whether it reaches its layout's last
 * layer (a whole chunk, or the last of its ranges). */
bool pdx_send_layers_end(const send_ctx_t *c);
/* Whether its writes all go on one endpoint: a layer range before the last,
 * whose notify after them then tells decode its layers landed. */
bool pdx_send_layers_pinned(const send_ctx_t *c);
/* Its gate open: the ranges queued after it of the same chunk of tokens
 * whose gates are open too join it (one plan, one set of writes, one
 * notify), so layers ready together cost what one range costs. */
void pdx_send_layers_merge(send_ctx_t *c);
/* Its layers for a notify of PDX_WIRE_NOTIFY_LAYERS to the destination
 * planned (n->layer_*, cover_*, pages). */
void pdx_send_layers_notify(const send_ctx_t *c, pdx_wire_notify_t *n);
/* Its layer range in order (else the room fails); once it went, where the
 * next range starts. */
step_t pdx_send_layers_check(send_ctx_t *c, uint32_t ndests);
void pdx_send_layers_sent(send_ctx_t *c);
/* Its gate: DONE when open or left to the GPU (ext->gpu_gate). */
step_t pdx_send_gate_check(send_ctx_t *c, uint32_t ndests);
/* A chunk whose gate was left to the GPU goes another way: DONE once the
 * gate opened (it then goes without it), WAIT while it is closed. */
step_t pdx_send_gate_host(send_ctx_t *c);

/* shard_pages.c: the planned chunk to dest as page copies when it can go
 * so (STEP_DONE also when it cannot: its runs follow). */
step_t pdx_send_pages(send_ctx_t *c, const pdx_dest_t *dest, pdx_dep_t **deps, uint32_t n);

#endif
