/*
 * Internal, validated copy of a KV layout (pdx_layout_desc_t): the local one
 * from pdx_layout_create() and the peer's one from its layout descriptor on
 * the control channel have the same shape, so plan.c sees only this.
 */
#ifndef PDX_LAYOUT_H
#define PDX_LAYOUT_H

#include "pdx/pdx.h"

#include <stdbool.h>

typedef struct pdx_buffer {
    uint32_t mem;            /* local mem id, or the peer's mem index */
    uint64_t offset;
    uint64_t bytes_per_page;
} pdx_buffer_t;

typedef struct pdx_group {
    uint32_t      flags;     /* PDX_GROUP_* */
    uint32_t      buffers_per_layer;
    uint32_t      nbuffers;
    uint64_t      npages;
    pdx_buffer_t *buffers;
} pdx_group_t;

typedef struct pdx_layout {
    uint32_t     ngroups;
    uint32_t     layer_begin;
    uint32_t     layer_end;
    pdx_group_t *groups;     /* same allocation as the layout */
} pdx_layout_t;

/* Limits that keep a descriptor's size bounded on the wire. */
#define PDX_LAYOUT_MAX_GROUPS  16
#define PDX_LAYOUT_MAX_BUFFERS 4096  /* per group */
#define PDX_LAYOUT_MAX_LAYERS  4096

/*
 * Check desc's structure (counts, layers x buffers_per_layer = nbuffers,
 * non-zero page sizes, offsets that do not overflow) and deep-copy it into
 * one allocation. err receives the reason on failure.
 */
pdx_status_t pdx_layout_from_desc(const pdx_layout_desc_t *desc, pdx_layout_t **layout_p,
                                  char *err, size_t errlen);

/*
 * Allocate a layout with room for ngroups groups of nbuffers[g] buffers. A
 * layout filled from a peer's descriptor must pass the checks of
 * pdx_layout_from_desc (counts, offsets and sizes that do not overflow):
 * plan.c relies on them.
 */
pdx_layout_t *pdx_layout_alloc(uint32_t ngroups, const uint32_t *nbuffers);
void pdx_layout_free(pdx_layout_t *layout);

/* Bytes of one page across every buffer of every group. */
uint64_t pdx_layout_page_bytes(const pdx_layout_t *layout);

/* Whether a group's pages are counted per layer on decode (room_layers.c):
 * its buffers are per layer and it is not state sent with the last chunk. */
static inline bool pdx_group_layered(const pdx_group_t *g)
{
    return !(g->flags & (PDX_GROUP_NO_LAYERS | PDX_GROUP_STATE));
}

#endif
