/*
 * plan: one chunk's page lists -> validated, coalesced write runs.
 *
 * pdx_plan_init() validates every page index of the chunk against both
 * layouts before anything is produced (out of range: PDX_ERR_RANGE with a
 * message; nothing planned). pdx_plan_next() then yields runs incrementally,
 * so a shard plans only as far as its send-queue credits reach and never
 * allocates: runs contiguous on both sides are merged per buffer, up to
 * max_msg_size bytes.
 *
 * Buffers are matched by (group, layer, part) for the layers both layouts
 * hold, or index by index for PDX_GROUP_NO_LAYERS groups. Groups flagged
 * PDX_GROUP_STATE are planned only when PDX_PLAN_STATE is passed (the
 * last chunk); the page lists of a skipped group are not read.
 *
 * Runs are cut at byte boundaries: a run cut by max_msg_size (or at a piece
 * boundary, plan->piece) may end inside a page and the next one resumes there. The page lists are read lazily, so
 * they must stay unchanged until the plan is exhausted.
 */
#ifndef PDX_PLAN_H
#define PDX_PLAN_H

#include "layout.h"
#include "transport.h"
#include "util.h"

#include <stdbool.h>

/* A run is what the transport posts (base/transport.h): src_mem is the src
 * layout's buffer.mem, dst_mem the dst layout's, src_offset and dst_offset
 * are inside them. */
typedef pdx_tp_run_t pdx_run_t;

enum {
    PDX_PLAN_STATE = 1u << 0,
};

typedef struct pdx_plan {
    const pdx_layout_t *src;
    const pdx_layout_t *dst;
    const pdx_pages_t  *src_pages;  /* one per group, not copied */
    const pdx_pages_t  *dst_pages;
    uint64_t            max_msg_size;
    uint64_t            piece;      /* 0 (pdx_plan_init), or a power of two set after
                                     * it: no run crosses a multiple of it on either
                                     * side (regions registered in pieces) */
    unsigned            flags;
    /* cursor */
    uint32_t            group;
    uint32_t            layer;      /* index into the common layer range */
    uint32_t            part;
    uint32_t            page;       /* next page index in the group's lists */
    uint64_t            page_done;  /* bytes of `page` already emitted */
    /* a plan of explicit runs (pdx_plan_init_runs): then the cursor is
     * `page` (the run) and `page_done` (its bytes emitted) */
    const pdx_run_t    *runs;
    uint32_t            nruns;
    /* private, set by pdx_plan_init(); a failed init leaves ngroups 0 */
    uint32_t            ngroups;
    uint32_t            nlayers;    /* layers both layouts hold */
    uint32_t            src_layer0; /* first common layer - src->layer_begin */
    uint32_t            dst_layer0; /* first common layer - dst->layer_begin */
    uint32_t            planned;    /* bit g: group g yields runs */
    uint32_t            contiguous; /* bit g: group g's lists are one segment */
} pdx_plan_t;

/* The longest run from src offset so and dst offset d: cap bytes, and no
 * multiple of piece (a power of two; 0: none) crossed on either side. */
static inline uint64_t pdx_plan_run_cap(uint64_t cap, uint64_t piece, uint64_t so, uint64_t d)
{
    if (PDX_LIKELY(piece == 0))
        return cap;
    cap = PDX_MIN(cap, piece - (so & (piece - 1)));
    return PDX_MIN(cap, piece - (d & (piece - 1)));
}

pdx_status_t pdx_plan_init(pdx_plan_t *plan, const pdx_layout_t *src, const pdx_layout_t *dst,
                           const pdx_pages_t *src_pages, const pdx_pages_t *dst_pages,
                           uint64_t max_msg_size, unsigned flags, char *err, size_t errlen);

/*
 * Narrow a plan just made (pdx_plan_init, its cursor unmoved) to the layers
 * [begin, end) of the src layout's numbering: its layered groups yield the
 * runs of those layers only (none when no common layer is left), its groups
 * without layers only with unlayered.
 */
void pdx_plan_layers(pdx_plan_t *plan, uint32_t begin, uint32_t end, bool unlayered);

/* Up to max runs into out; 0 once the plan is exhausted. */
uint32_t pdx_plan_next(pdx_plan_t *plan, pdx_run_t *out, uint32_t max);

/*
 * One-sided transfers: a plan over runs the caller gives (validated by it),
 * not copied: pdx_plan_next() yields them in order, each cut at
 * max_msg_size and at plan->piece (set after init, as for pages). Runs of
 * length 0 yield nothing.
 */
void pdx_plan_init_runs(pdx_plan_t *plan, const pdx_run_t *runs, uint32_t n,
                        uint64_t max_msg_size);
/*
 * Every page the plan covers, whole, in plan order: fn(ctx, g, src buffer,
 * src page, dst buffer, dst page) with the buffers' indices in their
 * groups; a non-zero return stops the walk and is returned. The plan's
 * cursor is not used or moved (a plan of explicit runs has no pages: 0).
 */
typedef int (*pdx_plan_page_fn)(void *ctx, uint32_t group, uint32_t src_buffer,
                                uint32_t src_page, uint32_t dst_buffer, uint32_t dst_page);
int pdx_plan_pages(const pdx_plan_t *plan, pdx_plan_page_fn fn, void *ctx);

/*
 * Group g's matched buffer pairs in plan order (layer of the common range,
 * then part): their indices in the src and dst groups into sb and db (room
 * for PDX_LAYOUT_MAX_BUFFERS); their count. 0 for a group not planned.
 */
uint32_t pdx_plan_pairs(const pdx_plan_t *plan, uint32_t g, uint32_t *sb, uint32_t *db);

/* Merge, in place, each run that continues the one before it on both sides
 * (same regions, the next bytes of each); returns how many runs are left. */
uint32_t pdx_plan_coalesce(pdx_run_t *runs, uint32_t n);

#endif
