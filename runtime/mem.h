/* Registered memory (mem.c): regions and the registrations they share. */
#ifndef PDX_MEM_H
#define PDX_MEM_H

#include <stdatomic.h>
#include <stdbool.h>

#include "bounds.h"
#include "transport.h"


/* A transport registration, shared by the regions of one allocation (mem.c). */
typedef struct pdx_reg {
    uint32_t         refs;        /* regions in it; 0: a free slot */
    bool             gpu;         /* GPU memory (gpu.c) */
    uintptr_t        base;        /* the registered range */
    size_t           len;
    uint64_t         id;          /* the allocation's identity; 0: host memory by range */
    pdx_tp_mr_t     *mr[PDX_MAX_NICS]; /* one per NIC (engine->ntps) */
} pdx_reg_t;

typedef struct pdx_mem {
    bool             used;
    void            *base;
    size_t           len;
    pdx_reg_t       *reg;
    pdx_tp_mr_t     *mr[PDX_MAX_NICS];   /* reg's */
    uint64_t         mr_off;      /* base - reg->base: WRs address the registration */
    pdx_tp_rkey_t    rkey[PDX_MAX_NICS]; /* what peers write with, per NIC */
    _Atomic uint32_t users;       /* layouts and rooms referring to it */
} pdx_mem_t;

/* mem.c */
pdx_status_t pdx_engine_mem_lookup(pdx_engine_t *e, uint32_t mem, pdx_mem_t **mem_p);
/* mem.c: at destroy, every registration still held. */
void pdx_mem_fini(pdx_engine_t *e);

#endif
