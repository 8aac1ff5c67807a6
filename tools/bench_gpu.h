/*
 * pdx-bench --gpu N (bench_gpu.c): the KV pool and the aux slots in memory
 * of GPU N. Prefill writes each chunk's pages on the GPU (host-to-device
 * copies on a stream of its own) and sends the chunk behind a stream gate
 * (pdx_gate_arm); decode copies a finished room's pages back to the host
 * and checks them there. Only bench_gpu.c calls hip/.
 *
 * Every call runs on the side's own thread. Functions returning int give
 * 0, or -1 after a message (bench_err) or with the reason in `why`.
 */
#ifndef PDX_TOOLS_BENCH_GPU_H
#define PDX_TOOLS_BENCH_GPU_H

#include "bench.h"

/*
 * Whether GPU `device` can hold a pool, asked before anything else starts:
 * BENCH_EXIT_OK, or after a message on stderr BENCH_EXIT_FAIL (no GPU
 * runtime in this build, no GPU) or BENCH_EXIT_USAGE (no GPU of that
 * ordinal). Starts the GPU runtime: a process that forks afterwards must
 * ask in a child.
 */
int bench_gpu_probe(int device);

/* "amd", "nvidia" or "none": the GPU runtime this build uses. */
const char *bench_gpu_platform(void);

/*
 * Make s->o->gpu the thread's device; allocate the pool (s->pool: device
 * memory), the aux slots on the device with their pinned host mirror
 * (s->aux), the staging buffers, a stream and its events; s->gpu is set
 * first, so bench_gpu_close() undoes a partial open.
 */
int bench_gpu_open(bench_side_t *s);

/* The device memory of the aux slots, to register. */
void *bench_gpu_aux_device(const bench_side_t *s);

/*
 * Prefill: enqueue the writes of positions [pos, pos + n) of room (pages
 * pages[0..n)) in every layer, then, when aux_off != BENCH_GPU_NO_AUX, the
 * aux slot at aux_off from its host mirror, then arm *gate_p on the same
 * stream. Waits only for staging to come free, until deadline_ns.
 */
#define BENCH_GPU_NO_AUX UINT64_MAX
int bench_gpu_write_chunk(bench_side_t *s, pdx_room_t room, const uint32_t *pages, uint32_t pos,
                          uint32_t n, uint64_t aux_off, uint64_t deadline_ns, pdx_gate_t *gate_p,
                          char *why, size_t len);

/*
 * Decode: copy every page of the room in sl back and check it into *d, and
 * the aux slot at aux_off into its host mirror (s->aux + aux_off). -1 with
 * `why` on a runtime error or when the copies outlast the room's timeout.
 */
int bench_gpu_verify(bench_side_t *s, const bench_slot_t *sl, uint64_t aux_off, bench_diff_t *d,
                     char *why, size_t len);

/* Wait (bounded) until everything enqueued on the side's stream finished. */
void bench_gpu_drain(bench_side_t *s);

/* After the engine is gone: free what bench_gpu_open() made (memory the
 * stream may still touch is left allocated, with a message). */
void bench_gpu_close(bench_side_t *s);

#endif
