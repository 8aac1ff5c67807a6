/*
 * The fixture the transport suites share (test_tcp.c, test_rdma.c,
 * test_rdma_faults.c): the file descriptors of the process, the fd and
 * error-log check around a test, random bytes, and the tp helpers that are
 * the same over every transport (each takes the transport's ops table).
 * Any helper that fails a check fails the test.
 */
#ifndef PDX_TEST_TP_FIXTURE_H
#define PDX_TEST_TP_FIXTURE_H

#include "transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The open file descriptors of this process (/proc/self/fd). */
int fx_count_fds(void);

/* What a test found open when it began: fx_env_end checks it left no more. */
typedef struct fx_env {
    int      fds;
    uint64_t errors;
} fx_env_t;

void fx_env_begin(fx_env_t *env);
/* No fd leaked and, unless errors_expected, no error logged since begin. */
void fx_env_end(const fx_env_t *env, bool errors_expected);

/* xorshift64, one sequence for the whole process. */
uint64_t fx_rng(void);
void     fx_fill_random(uint8_t *p, size_t len);

pdx_tp_cq_t *fx_cq_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, uint32_t depth);
pdx_tp_ep_t *fx_ep_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, pdx_tp_cq_t *cq,
                       uint32_t sq, uint32_t rq);
/* Each ep connects to the other's address. */
void         fx_connect_eps(const pdx_transport_ops_t *ops, pdx_tp_ep_t *a, pdx_tp_ep_t *b);
pdx_tp_mr_t *fx_mr_new(const pdx_transport_ops_t *ops, pdx_tp_t *tp, void *base, size_t len,
                       unsigned access);

/*
 * Collect `want` completions within timeout_ms; returns how many came.
 * Between polls it waits on the CQ's fd, at most slice_ms at a time.
 */
int fx_wait_wc(const pdx_transport_ops_t *ops, pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want,
               int timeout_ms, unsigned slice_ms);

/* The completion of wr_id, with that status and opcode. */
void fx_expect_wc(const pdx_tp_wc_t *wc, uint64_t wr_id, pdx_status_t status,
                  pdx_tp_opcode_t opcode);

/*
 * post_runs (base/transport.h) on a connected ep whose CQ is cq: smr holds
 * src (len bytes, len >= 64 KiB), rk is the peer's region of len bytes over
 * dst (zeroed). Bad runs are refused with their index and nothing posted
 * (no completion comes); then ten runs through a window of the source land
 * byte-exact, every fourth and the last signaled, under wr_ids whose mask
 * bits wrap. The ep's send queue holds at least 10.
 */
/* Each of runs[0, n) landed: dst at its dst_offset holds src_base's bytes
 * at its src_offset. */
void fx_expect_runs(const pdx_tp_run_t *runs, uint32_t n, const uint8_t *src_base,
                    const uint8_t *dst);
void fx_check_post_runs(const pdx_transport_ops_t *ops, pdx_tp_ep_t *ep, pdx_tp_cq_t *cq,
                        pdx_tp_mr_t *smr, const uint8_t *src, size_t len,
                        const pdx_tp_rkey_t *rk, const uint8_t *dst, uint64_t max_msg);

/* ------------------------------------------------------- fake GPU for tcp */

/*
 * GPU memory without a GPU, for the tcp transport's staging (tcp/tcp.h):
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
