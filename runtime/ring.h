/*
 * The per-shard submission ring: bounded, preallocated, multi-producer,
 * single-consumer.
 *
 * pdx_send() copies a chunk and its page lists into the ring on the caller's
 * thread; the shard pops chunks in order and marks each done when it is
 * finished with it, possibly out of order (a gated chunk stays while later
 * ones pass). Space is reclaimed in order, up to the first chunk not done,
 * so the ring bounds the work a shard holds. A full ring is PDX_ERR_AGAIN.
 *
 * A producer reserves a chunk cell and a contiguous run of the page arena
 * with one compare-and-swap of a packed (chunk, page) head, so cells and
 * page runs are claimed in the same order and freed in that order. It fills
 * the cell and publishes it with a release store of the cell's sequence. No
 * locks, no allocation, no syscalls.
 */
#ifndef PDX_RING_H
#define PDX_RING_H

#include <stdatomic.h>
#include <stdbool.h>

#include "layout.h"
#include "util.h"

/* pdx_chunk_t.flags beside PDX_SEND_*: a range of the layout's layers
 * (pdx_send_layers), not all of them. */
#define PDX_CHUNK_RANGE (1u << 31)

typedef struct pdx_chunk {
    uint64_t     room;
    uint32_t     layout;
    uint32_t     flags;       /* PDX_SEND_* */
    uint32_t     ngroups;
    uint32_t     has_aux;
    uint32_t     layer_begin;  /* pdx_send_layers; pdx_send: the layout's whole range */
    uint32_t     layer_end;
    pdx_region_t aux;
    pdx_gate_t   gate;
    uint64_t     submit_ns;
    uint32_t     npages[PDX_LAYOUT_MAX_GROUPS];
} pdx_chunk_t;

typedef struct pdx_ring_cell {
    _Atomic uint64_t seq;      /* n + 1 once chunk n is published in this cell */
    uint32_t         page_pos; /* first page slot in the arena */
    uint32_t         page_span;/* slots reserved, including a skipped tail */
    pdx_chunk_t      chunk;
} pdx_ring_cell_t;

typedef struct pdx_ring {
    /* producers */
    _Atomic uint64_t head __attribute__((aligned(PDX_CACHELINE))); /* chunk << 32 | page */
    _Atomic uint32_t high_water;
    /* consumer */
    _Atomic uint64_t tail __attribute__((aligned(PDX_CACHELINE))); /* published to producers */
    uint32_t         next;     /* next chunk to pop */
    uint32_t         done_tail;/* first chunk not yet reclaimed */
    uint32_t         done_page;
    bool            *done;     /* per cell, consumer only */
    /* fixed */
    uint32_t         nchunks;  /* power of two */
    uint32_t         npages;   /* power of two */
    pdx_ring_cell_t *cells;
    uint32_t        *pages;
} pdx_ring_t;

pdx_status_t pdx_ring_init(pdx_ring_t *ring, uint32_t nchunks, uint32_t npages);
/* Its memory goes on NUMA node `node` when first touched (-1: anywhere). */
void pdx_ring_prefer_node(pdx_ring_t *ring, int node);
/* Touch its memory (up to 16 MiB of each array) before
 * anyone uses it, so that pushes do not take page faults on their first
 * trip round the ring. */
void pdx_ring_populate(pdx_ring_t *ring);
void pdx_ring_fini(pdx_ring_t *ring);

/*
 * Copy chunk (ngroups, room, ...) and pages[0 .. chunk->ngroups) in. Any
 * thread. PDX_ERR_AGAIN when the ring lacks a cell or page room now;
 * PDX_ERR_INVALID when the chunk could never fit.
 */
pdx_status_t pdx_ring_push(pdx_ring_t *ring, const pdx_chunk_t *chunk, const pdx_pages_t *pages);

/* Next published chunk, or NULL. Consumer only. */
pdx_ring_cell_t *pdx_ring_pop(pdx_ring_t *ring);

/* The cell's page lists, one per group, pointing into the ring. */
void pdx_ring_cell_pages(const pdx_ring_t *ring, const pdx_ring_cell_t *cell, pdx_pages_t *out);

/* The consumer is finished with a popped cell (any order). */
void pdx_ring_done(pdx_ring_t *ring, pdx_ring_cell_t *cell);

/* Chunks queued or held, as last seen (approximate under concurrency). */
uint32_t pdx_ring_count(const pdx_ring_t *ring);

#endif
