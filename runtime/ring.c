/* The submission ring; see ring.h for the protocol. */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

static inline uint32_t head_chunk(uint64_t v) { return (uint32_t)(v >> 32); }
static inline uint32_t head_page(uint64_t v)  { return (uint32_t)v; }
static inline uint64_t head_make(uint32_t chunk, uint32_t page)
{
    return (uint64_t)chunk << 32 | page;
}

static size_t cells_bytes(const pdx_ring_t *r) { return r->nchunks * sizeof(*r->cells); }
static size_t done_bytes(const pdx_ring_t *r)  { return r->nchunks * sizeof(*r->done); }
static size_t pages_bytes(const pdx_ring_t *r) { return (size_t)r->npages * sizeof(*r->pages); }

pdx_status_t pdx_ring_init(pdx_ring_t *ring, uint32_t nchunks, uint32_t npages)
{
    if (nchunks < 2 || nchunks > (1u << 30) || npages == 0 || npages > (1u << 30))
        return PDX_ERR_INVALID;
    memset(ring, 0, sizeof(*ring));
    ring->nchunks = pdx_pow2_ceil(nchunks);
    ring->npages = pdx_pow2_ceil(npages);
    /* Mapped: pdx_ring_prefer_node() can place them before they are touched. */
    ring->cells = pdx_map_zeroed(cells_bytes(ring));
    ring->done = pdx_map_zeroed(done_bytes(ring));
    ring->pages = pdx_map_zeroed(pages_bytes(ring));
    if (!ring->cells || !ring->done || !ring->pages) {
        pdx_ring_fini(ring);
        return PDX_ERR_NOMEM;
    }
    return PDX_OK;
}

void pdx_ring_prefer_node(pdx_ring_t *ring, int node)
{
    pdx_map_prefer_node(ring->cells, cells_bytes(ring), node);
    pdx_map_prefer_node(ring->done, done_bytes(ring), node);
    pdx_map_prefer_node(ring->pages, pages_bytes(ring), node);
}

#define PDX_RING_POPULATE_MAX (16u << 20)

static void populate(void *p, size_t len)
{
    volatile uint8_t *b = p;

    for (size_t off = 0; off < PDX_MIN(len, (size_t)PDX_RING_POPULATE_MAX); off += 4096)
        b[off] = 0;
}

void pdx_ring_populate(pdx_ring_t *ring)
{
    populate(ring->cells, cells_bytes(ring));
    populate(ring->done, done_bytes(ring));
    populate(ring->pages, pages_bytes(ring));
}

void pdx_ring_fini(pdx_ring_t *ring)
{
    pdx_unmap(ring->pages, pages_bytes(ring));
    pdx_unmap(ring->done, done_bytes(ring));
    pdx_unmap(ring->cells, cells_bytes(ring));
    ring->cells = NULL;
    ring->done = NULL;
    ring->pages = NULL;
}

static void note_high_water(pdx_ring_t *ring, uint32_t count)
{
    uint32_t hw = atomic_load_explicit(&ring->high_water, memory_order_relaxed);

    while (count > hw &&
           !atomic_compare_exchange_weak_explicit(&ring->high_water, &hw, count,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

pdx_status_t pdx_ring_push(pdx_ring_t *ring, const pdx_chunk_t *chunk, const pdx_pages_t *pages)
{
    uint64_t head, tail;
    uint32_t total = 0, pos, skip, span, c;
    pdx_ring_cell_t *cell;
    uint32_t *dst;

    if (chunk->ngroups == 0 || chunk->ngroups > PDX_LAYOUT_MAX_GROUPS)
        return PDX_ERR_INVALID;
    for (uint32_t g = 0; g < chunk->ngroups; g++) {
        if (pages[g].npages > ring->npages - total)
            return PDX_ERR_INVALID;
        total += pages[g].npages;
    }

    head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    for (;;) {
        tail = atomic_load_explicit(&ring->tail, memory_order_acquire);
        pos = head_page(head) & (ring->npages - 1);
        skip = pos + total > ring->npages ? ring->npages - pos : 0;
        span = skip + total;
        /* The run must not reach the oldest page still held; the skipped
         * tail holds nothing, so an empty arena takes any run that fits. */
        if (head_chunk(head) - head_chunk(tail) >= ring->nchunks ||
            (head_page(head) != head_page(tail) &&
             head_page(head) - head_page(tail) + span > ring->npages))
            return PDX_ERR_AGAIN;
        if (atomic_compare_exchange_weak_explicit(&ring->head, &head,
                                                  head_make(head_chunk(head) + 1,
                                                            head_page(head) + span),
                                                  memory_order_acquire, memory_order_relaxed))
            break;
    }

    c = head_chunk(head);
    cell = &ring->cells[c & (ring->nchunks - 1)];
    cell->page_pos = skip ? 0 : pos;
    cell->page_span = span;
    cell->chunk = *chunk;
    dst = ring->pages + cell->page_pos;
    for (uint32_t g = 0; g < chunk->ngroups; g++) {
        cell->chunk.npages[g] = pages[g].npages;
        if (pages[g].npages) /* an empty list may have no array */
            memcpy(dst, pages[g].pages, (size_t)pages[g].npages * sizeof(*dst));
        dst += pages[g].npages;
    }
    atomic_store_explicit(&cell->seq, (uint64_t)c + 1, memory_order_release);
    note_high_water(ring, c + 1 - head_chunk(tail));
    return PDX_OK;
}

pdx_ring_cell_t *pdx_ring_pop(pdx_ring_t *ring)
{
    pdx_ring_cell_t *cell = &ring->cells[ring->next & (ring->nchunks - 1)];

    /* seq is a full 64-bit count: compare its low 32 bits with ours. */
    if ((uint32_t)atomic_load_explicit(&cell->seq, memory_order_acquire) != ring->next + 1)
        return NULL;
    ring->next++;
    return cell;
}

void pdx_ring_cell_pages(const pdx_ring_t *ring, const pdx_ring_cell_t *cell, pdx_pages_t *out)
{
    const uint32_t *p = ring->pages + cell->page_pos;

    for (uint32_t g = 0; g < cell->chunk.ngroups; g++) {
        out[g].pages = p;
        out[g].npages = cell->chunk.npages[g];
        p += cell->chunk.npages[g];
    }
}

void pdx_ring_done(pdx_ring_t *ring, pdx_ring_cell_t *cell)
{
    uint32_t mask = ring->nchunks - 1;
    uint32_t i = (uint32_t)(cell - ring->cells);
    bool moved = false;

    ring->done[i] = true;
    while (ring->done_tail != ring->next && ring->done[ring->done_tail & mask]) {
        pdx_ring_cell_t *c = &ring->cells[ring->done_tail & mask];

        ring->done[ring->done_tail & mask] = false;
        ring->done_page += c->page_span;
        ring->done_tail++;
        moved = true;
    }
    if (moved)
        atomic_store_explicit(&ring->tail, head_make(ring->done_tail, ring->done_page),
                              memory_order_release);
}

uint32_t pdx_ring_count(const pdx_ring_t *ring)
{
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);

    return head_chunk(head) - head_chunk(tail);
}
