/*
 * verify: PDX_VERIFY=crc32c, end-to-end checksums of a room's bytes
 * (docs/architecture.md §5).
 *
 * The checksum of a room is a sum (mod 2^64) over units: each 4 KiB block
 * of each destination page written (the last block of a page shorter), and
 * the aux bytes as one more page. A unit counts mix(where, crc32c of its
 * bytes), where names the destination: group, buffer index in decode's
 * layout, page index and block. So the sum does not depend on the order the
 * bytes were written in, how runs were cut or which endpoint carried them,
 * and a block that lands in another place changes it as surely as one with
 * other bytes. The sender adds the units of each chunk as its gate opens,
 * from the bytes the NIC will read; decode adds the same units from the
 * bytes it holds once they are all placed and visible.
 *
 * GPU memory is copied to pinned host memory first (a stage of 4 MiB per
 * engine, one caller at a time) and summed there by the CPU: no checksum
 * kernel is built.
 */
#ifndef PDX_VERIFY_H
#define PDX_VERIFY_H

#include "plan.h"

#define PDX_VERIFY_BLOCK 4096u

typedef struct pdx_verify pdx_verify_t;

/* Add to *sum the units of every page of plan: the bytes are read from its
 * src side (this engine's memory), the units named by its dst side. */
pdx_status_t pdx_verify_plan(pdx_engine_t *e, const pdx_plan_t *plan, uint64_t *sum,
                             char *err, size_t errlen);
/* Add to *sum the aux unit of len bytes of this engine's region mem at offset. */
pdx_status_t pdx_verify_aux(pdx_engine_t *e, uint32_t mem, uint64_t offset, uint64_t len,
                            uint64_t *sum, char *err, size_t errlen);
/* At engine create; at destroy, after every thread stopped. */
pdx_status_t pdx_verify_init(pdx_engine_t *e);
void pdx_verify_fini(pdx_engine_t *e);

#endif
