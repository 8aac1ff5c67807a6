/*
 * Internal to wire.c, wire_desc.c and desc.c: little-endian byte readers and
 * writers, body sizes, and the body codecs the two files share.
 *
 * The reader is sticky: a read past the end returns 0, moves to the end and
 * marks the reader short, so a decoder reads a run of fixed fields and checks
 * `r->short_read` once. A count is checked against its limit and against
 * rd_left() before any loop over it.
 *
 * A writer without a buffer only counts: encoders run their body writer
 * once to measure and once to write, so nothing is written on failure.
 */
#ifndef PDX_WIRE_BUF_H
#define PDX_WIRE_BUF_H

#include "wire.h"

#include <stdbool.h>
#include <string.h>

/* Fixed parts of the bodies. */
#define PDX_WIRE_HELLO_FIXED   (4u + 8u + PDX_WIRE_ID_SIZE + 4u + 2u + 2u + 4u)
#define PDX_WIRE_MEM_HEAD      4u
#define PDX_WIRE_MEM_ENTRY     (4u + 4u + 8u + 8u + 4u + 4u) /* + piece u64 and rkeys when
                                                            * pieces */
#define PDX_WIRE_MEM_PIECES    8u                       /* the piece size of an entry in pieces */
#define PDX_WIRE_LAYOUT_HEAD   (4u + 4u + 4u + 4u)
#define PDX_WIRE_LAYOUT_GROUP  (4u + 4u + 4u + 8u)
#define PDX_WIRE_LAYOUT_BUFFER (4u + 8u + 8u)
#define PDX_WIRE_ROOM_HEAD     (8u + 4u + 4u + 4u + 4u + 4u + 8u + 8u + 4u)
#define PDX_WIRE_ROOM_GROUP    4u

#define PDX_WIRE_MAX_BODY   (PDX_WIRE_MAX_FRAME - PDX_WIRE_HEADER_SIZE)
#define PDX_WIRE_MEM_MAX    (PDX_WIRE_MEM_HEAD +                                          \
                             (uint64_t)PDX_WIRE_MAX_MEMS * (PDX_WIRE_MEM_ENTRY + PDX_WIRE_MEM_PIECES) + \
                             (uint64_t)PDX_WIRE_MAX_MEM_KEYS * 4u)
#define PDX_WIRE_LAYOUT_MAX (PDX_WIRE_LAYOUT_HEAD + (uint64_t)PDX_LAYOUT_MAX_GROUPS *    \
                             (PDX_WIRE_LAYOUT_GROUP +                                    \
                              (uint64_t)PDX_LAYOUT_MAX_BUFFERS * PDX_WIRE_LAYOUT_BUFFER))
#define PDX_WIRE_ROOM_MAX   (PDX_WIRE_ROOM_HEAD +                                        \
                             (uint64_t)PDX_LAYOUT_MAX_GROUPS * PDX_WIRE_ROOM_GROUP +     \
                             (uint64_t)PDX_WIRE_MAX_ROOM_PAGES * 4u)

_Static_assert(PDX_WIRE_MEM_MAX <= PDX_WIRE_MAX_BODY, "the largest MEM must fit a frame");
_Static_assert(PDX_WIRE_MEM_ONE_MAX == PDX_WIRE_HEADER_SIZE + PDX_WIRE_MEM_HEAD + PDX_WIRE_MEM_ENTRY +
               PDX_WIRE_MEM_PIECES + 4u * PDX_TP_PIECES_MAX, "one region's MEM frame");
_Static_assert(PDX_WIRE_LAYOUT_MAX <= PDX_WIRE_MAX_BODY, "the largest LAYOUT must fit a frame");
_Static_assert(PDX_WIRE_ROOM_MAX <= PDX_WIRE_MAX_BODY, "the largest ROOM must fit a frame");

/* ------------------------------------------------------------------ reader */

typedef struct pdx_wire_rd {
    const uint8_t *p;
    size_t         len;
    size_t         off;
    bool           short_read;   /* a read went past the end */
} pdx_wire_rd_t;

static inline size_t pdx_wire_rd_left(const pdx_wire_rd_t *r)
{
    return r->len - r->off;
}

static inline uint64_t pdx_wire_le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline bool pdx_wire_rd_need(pdx_wire_rd_t *r, size_t n)
{
    if (pdx_wire_rd_left(r) >= n)
        return true;
    r->off = r->len;
    r->short_read = true;
    return false;
}

static inline uint64_t pdx_wire_rd_uint(pdx_wire_rd_t *r, unsigned n)
{
    uint64_t v;

    if (!pdx_wire_rd_need(r, n))
        return 0;
    v = pdx_wire_le(r->p + r->off, n);
    r->off += n;
    return v;
}

static inline uint16_t pdx_wire_rd_u16(pdx_wire_rd_t *r)
{
    return (uint16_t)pdx_wire_rd_uint(r, 2);
}

static inline uint32_t pdx_wire_rd_u32(pdx_wire_rd_t *r)
{
    return (uint32_t)pdx_wire_rd_uint(r, 4);
}

static inline uint64_t pdx_wire_rd_u64(pdx_wire_rd_t *r)
{
    return pdx_wire_rd_uint(r, 8);
}

/* Two's complement, as gcc and clang define the conversion. */
static inline int32_t pdx_wire_rd_i32(pdx_wire_rd_t *r)
{
    return (int32_t)pdx_wire_rd_u32(r);
}

static inline void pdx_wire_rd_bytes(pdx_wire_rd_t *r, void *out, size_t n)
{
    if (!pdx_wire_rd_need(r, n)) {
        memset(out, 0, n);
        return;
    }
    memcpy(out, r->p + r->off, n);
    r->off += n;
}

/* ------------------------------------------------------------------ writer */

typedef struct pdx_wire_wr {
    uint8_t *p;     /* NULL: count only */
    size_t   off;
} pdx_wire_wr_t;

static inline void pdx_wire_wr_uint(pdx_wire_wr_t *w, unsigned n, uint64_t v)
{
    if (w->p)
        for (unsigned i = 0; i < n; i++)
            w->p[w->off + i] = (uint8_t)(v >> (8 * i));
    w->off += n;
}

static inline void pdx_wire_wr_u16(pdx_wire_wr_t *w, uint16_t v) { pdx_wire_wr_uint(w, 2, v); }
static inline void pdx_wire_wr_u32(pdx_wire_wr_t *w, uint32_t v) { pdx_wire_wr_uint(w, 4, v); }
static inline void pdx_wire_wr_u64(pdx_wire_wr_t *w, uint64_t v) { pdx_wire_wr_uint(w, 8, v); }

static inline void pdx_wire_wr_i32(pdx_wire_wr_t *w, int32_t v)
{
    pdx_wire_wr_uint(w, 4, (uint32_t)v);
}

static inline void pdx_wire_wr_bytes(pdx_wire_wr_t *w, const void *src, size_t n)
{
    if (w->p && n)
        memcpy(w->p + w->off, src, n);
    w->off += n;
}

/* --------------------------------------------------------- shared codecs */

/* Writes one body (m: the message; extra: ROOM's page lists). */
typedef void pdx_wire_body_fn(pdx_wire_wr_t *w, const void *m, const void *extra);

/* Measure the body, check it against its type's bounds and cap, write the frame. */
pdx_status_t pdx_wire_encode_frame(pdx_wire_type_t type, pdx_wire_body_fn *body, const void *m,
                                   const void *extra, void *buf, size_t cap, size_t *size_p);

/* Body decoders of wire_desc.c: r spans exactly the body. */
pdx_status_t pdx_wire_get_mem(pdx_wire_rd_t *r, pdx_wire_mem_t *m, const char **why);
pdx_status_t pdx_wire_get_layout(pdx_wire_rd_t *r, pdx_wire_layout_t *m, const char **why);
pdx_status_t pdx_wire_get_room(pdx_wire_rd_t *r, pdx_wire_room_t *m, const char **why);
pdx_status_t pdx_wire_get_export(pdx_wire_rd_t *r, pdx_wire_export_t *m, const char **why);

#endif
