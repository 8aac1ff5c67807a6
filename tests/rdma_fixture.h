/*
 * What the rdma suites (test_rdma*.c) share beyond tp_fixture.h: the
 * softnic configurations their NICs start from, the check around a test
 * (no fd, no verbs object left behind), tps opened with settings, the usual
 * two-tp rig, and a capture of what pdx logs. Any helper that fails a check
 * fails the test.
 */
#ifndef PDX_TEST_RDMA_FIXTURE_H
#define PDX_TEST_RDMA_FIXTURE_H

#include "softnic.h"
#include "tp_fixture.h"
#include "transport.h"

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FX_MAXMSG  (1u << 20)   /* max_msg_size of the tps fx_tp_try opens */
#define FX_WAIT_MS 5000
#define FX_RW      (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE)

/* The default NIC with `devices` devices (softnic0..) in `mode`. */
softnic_config_t fx_nic(uint32_t devices, softnic_mode_t mode);

/* Every WR waits delay_us before it executes (applies at once). */
void fx_nic_delay(softnic_config_t *c, uint32_t delay_us);

/* fx_env_t, and the verbs objects open when the test began. */
typedef struct fx_nic_env {
    fx_env_t fx;
    uint32_t objects;
} fx_nic_env_t;

/* Configure the NIC (devices, mode, tweaks), clear its faults, then note
 * what is open. */
void fx_nic_env_begin(fx_nic_env_t *env, const softnic_config_t *nic);
/* No verbs object and no fd left open; unless errors_expected, no error
 * logged since begin. */
void fx_nic_env_end(const fx_nic_env_t *env, bool errors_expected);

/* Open an rdma tp, quiet about no device; PDX_* name, value pairs,
 * NULL-terminated. */
pdx_status_t fx_tp_try(pdx_tp_t **tp_p, const char *var, ...);
/* The same, not quiet: no device is logged as an error. */
pdx_status_t fx_tp_try_loud(pdx_tp_t **tp_p, const char *var, ...);

/* The QP's state, path MTU, AV, RNR retry and timeout, as ibv_query_qp says. */
struct ibv_qp_attr fx_qp_query(pdx_tp_ep_t *ep);

/* Collect `want` completions within timeout_ms; returns how many came. */
int fx_wait(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms);

/* Wait for some completions (at most max): all succeed, in posting order
 * (wr_id above *last_p, which follows them). */
int fx_take(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms, uint64_t *last_p);

/* softnic's count of ibv send WRs posted so far */
uint64_t fx_wrs_posted(void);

/* The usual setup: tp 0 (softnic0) writes from src into dst on tp 1
 * (softnic1); dst is twice as long as its region, to see that nothing lands
 * past it. */
typedef struct fx_rig {
    fx_nic_env_t     env;
    softnic_config_t nic;
    pdx_tp_t        *tp[2];
    pdx_tp_cq_t     *cq[2];
    pdx_tp_ep_t     *ep[2];
    size_t           len;
    uint8_t         *src, *dst;
    pdx_tp_mr_t     *smr, *dmr;
    pdx_tp_rkey_t    rk;
} fx_rig_t;

/* c: the NIC's configuration, NULL for two devices in THREAD mode. Each tp
 * gets a CQ of sq + rq and one ep of those depths; the eps are connected. */
void fx_rig_open(fx_rig_t *r, const softnic_config_t *c, size_t len, uint32_t sq, uint32_t rq);
/* Eps first (an ep destroyed drops its WRs and their hold on the regions),
 * then regions, CQs and tps; then fx_nic_env_end. */
void fx_rig_close(fx_rig_t *r, bool errors_expected);

/* A WRITE of the rig: src[src_off, +len) to dst[dst_off, +len). */
pdx_tp_write_t fx_wr(const fx_rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                     uint64_t dst_off, bool signaled);

/* What pdx logs (stderr) between begin and end: end returns it, NUL-ended
 * (free it), and writes it to stderr as well. Warnings are let through
 * while it runs. */
typedef struct fx_log_capture {
    int             saved_fd, file_fd;
    pdx_log_level_t level;
} fx_log_capture_t;

void  fx_log_capture_begin(fx_log_capture_t *c);
char *fx_log_capture_end(fx_log_capture_t *c);

#endif
