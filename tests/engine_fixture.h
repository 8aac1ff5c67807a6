/*
 * Two engines in one process over PDX_TEST_TRANSPORT (tcp on 127.0.0.1, or
 * rdma on softnic; the suites are built once per transport): a prefill
 * side and a decode side, each with a KV pool of `layers` buffers (one per
 * layer) of `npages` pages, an aux region, and the decode side connected to
 * the prefill side. Every byte of a page is a pattern of (room, layer,
 * position in the room), so decode can check it.
 */
#ifndef PDX_TEST_ENGINE_FIXTURE_H
#define PDX_TEST_ENGINE_FIXTURE_H

#include <pdx/pdx.h>

typedef struct geom {
    uint32_t layers;
    uint64_t bytes_per_page;   /* a multiple of 8 */
    uint32_t npages;
} geom_t;

typedef struct side {
    pdx_engine_t *e;
    geom_t        g;
    uint8_t      *pool;
    uint32_t      mem;
    uint32_t      layout;
    uint8_t      *aux;         /* 4 KiB */
    uint32_t      aux_mem;
} side_t;

/* Open an engine; cfg_pairs is "NAME=VALUE" strings ended by NULL. */
void side_open(side_t *s, const geom_t *g, const char *const *cfg_pairs);
/* Destroy the engine and free the side; a side never opened, or closed
 * already, is left as it is. */
void side_close(side_t *s);

/* decode connects to prefill; returns decode's peer id for prefill. */
uint32_t side_connect(side_t *decode, const side_t *prefill);

/* Write the pattern of (room, position pos0 + i) into prefill pages src[i]. */
void side_fill(side_t *s, uint64_t room, const uint32_t *src, uint32_t n, uint32_t pos0);
/* Count the bytes of decode pages dst[i] that differ from the pattern. */
uint64_t side_check(const side_t *s, uint64_t room, const uint32_t *dst, uint32_t n,
                    uint32_t pos0);
/* The same for layers [layer_begin, layer_end) only. */
uint64_t side_check_layers(const side_t *s, uint64_t room, const uint32_t *dst, uint32_t n,
                           uint32_t pos0, uint32_t layer_begin, uint32_t layer_end);

/* n distinct random pages of the pool. */
void pick_pages(uint32_t *out, uint32_t n, uint32_t npages, unsigned *seed);

/* One room from prefill to decode's peer over pages (the same on both
 * sides): expected, filled, sent, SUCCESS on both, every byte checked,
 * released on both. */
void side_move(side_t *prefill, side_t *decode, uint32_t peer, uint64_t room,
               const uint32_t *pages, uint32_t n);

/* Poll until the room is SUCCESS or FAILED, or timeout_ms; the last state. */
pdx_room_state_t wait_done(pdx_engine_t *e, uint64_t room, int timeout_ms);

/* Release, retrying while PDX_INPROGRESS (with a deadline). */
pdx_status_t release_wait(pdx_engine_t *e, uint64_t room, int timeout_ms);

#endif
