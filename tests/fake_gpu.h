#ifndef PDX_TEST_FAKE_GPU_H
#define PDX_TEST_FAKE_GPU_H

#include "tcp/tcp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * GPU memory without a GPU, for the tcp transport's staging (tcp/tcp.h) in
 * test_tcp_stage.c and test_tcp_read.c:
 * fx_gpu_start() installs a copier (pdx_tcp_set_copier) for the tps opened
 * after it. Fake device memory is an inaccessible mapping (PROT_NONE) whose
 * bytes live in a host shadow only the copier reaches, so a transport that
 * touched them itself would fault. Copies run in the order they were issued
 * on the copier's own thread (a stream), each a random [min, max]
 * microseconds after it was issued, never before the one before it;
 * finished host-to-device copies are logged. A batch (copy_runs_async) is
 * its runs in a row, each read from the list when it starts, the event
 * completed by the last (failed when any did). The copier counts as
 * violations (failing fx_gpu_stop) staging or run lists freed, events
 * destroyed or reused, or a run list changed while a copy uses them, run
 * lists outside its host_alloc'ed memory, runs of a batch that write the
 * same bytes, and copies that name no fake device memory.
 */
typedef struct fx_gpu_stats {
    uint64_t issued[2];       /* copies (runs), by pdx_tcp_copy_dir_t */
    uint64_t batches[2];      /* copy_runs_async calls */
    uint32_t prepared;        /* runs_prepare calls */
    uint64_t inflight[2];     /* bytes copying now */
    uint64_t max_inflight[2];
} fx_gpu_stats_t;

void     fx_gpu_start(uint32_t delay_min_us, uint32_t delay_max_us);
/* Tps opened from now on get a copier without batches (copy_async only). */
void     fx_gpu_one_by_one(void);
/* runs_prepare fails: tps copy piece by piece. */
void     fx_gpu_prepare_fails(void);
/* While blind, queries from threads other than a tp's progress thread
 * answer PDX_ERR_AGAIN (they cannot ask). */
void     fx_gpu_blind(bool blind);
void     fx_gpu_delay(uint32_t min_us, uint32_t max_us);
/* Host-to-device copies take extra_us more. */
void     fx_gpu_delay_h2d(uint32_t extra_us);
/* The nth copy (from 1) of direction dir ends with an error (nth 0: none). */
void     fx_gpu_fail(int dir, uint64_t nth);
/* copy_async refuses the nth copy of direction dir. */
void     fx_gpu_refuse(int dir, uint64_t nth);
void     fx_gpu_stats(fx_gpu_stats_t *stats_p);
/* Copies issued and not finished. */
uint64_t fx_gpu_running(void);
/* Wait (10 s at most) until copies run: of both directions at once, or any. */
void     fx_gpu_wait_running(bool both);
void     fx_nap_ms(long ms);
/* Bytes of finished host-to-device copies into [dev, dev + len). */
uint64_t fx_gpu_placed(const void *dev, size_t len);
/* len bytes of fake device memory (zeroed); *shadow_p: its bytes. */
uint8_t *fx_gpu_alloc(size_t len, uint8_t **shadow_p);
void     fx_gpu_free(uint8_t *dev);
/* No copy running, no violation, no stream or event left and no staging
 * but `kept` buffers; then stop the copier and uninstall it. */
void     fx_gpu_stop(uint32_t kept);

#endif
