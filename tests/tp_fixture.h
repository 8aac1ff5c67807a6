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

#endif
