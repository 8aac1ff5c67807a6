/*
 * The rig of the tcp staging suites (test_tcp_stage.c,
 * test_tcp_stage_faults.c): two tcp tps joined by one ep each, tp 0 writing
 * from fake GPU memory (fake_gpu.h) into fake GPU memory on tp 1.
 */
#ifndef PDX_TEST_STAGE_RIG_H
#define PDX_TEST_STAGE_RIG_H

#include "fake_gpu.h"
#include "tcp/tcp.h"
#include "tp_fixture.h"
#include "transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAXMSG  (1u << 20)
#define LONG_MS 10000u
#define WAIT_MS 10000
#define RW      (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE)
#define DEV     PDX_TP_ACCESS_DEVICE

static const pdx_transport_ops_t *const ops = &pdx_tcp_ops;

/* tp 0 writes from src (GPU memory) into dst (GPU memory) on tp 1. */
typedef struct rig {
    fx_env_t      env;
    pdx_tp_t     *tp[2];
    pdx_tp_cq_t  *cq[2];
    pdx_tp_ep_t  *ep[2];
    size_t        len;
    uint8_t      *src, *dst;        /* device addresses */
    uint8_t      *src_sh, *dst_sh;  /* their bytes */
    pdx_tp_mr_t  *smr, *dmr;
    pdx_tp_rkey_t rk;
} rig_t;

typedef struct rig_opts {
    uint64_t staging;
    uint32_t timeout_ms;
    uint32_t rx_timeout_ms; /* tp 1's, when it differs */
    uint32_t sq, rq;
    bool     regions_first; /* eps get staging at ep_create, not on the progress thread */
} rig_opts_t;

pdx_tp_t *tp_open(uint32_t timeout_ms, uint64_t staging);
int wait_wc(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int want, int timeout_ms);
/* At least one completion (waiting up to timeout_ms), then what else is there. */
int wait_some(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max, int timeout_ms);
/* Tps, CQs, connected eps and the regions (len bytes of fake GPU memory a side). */
void rig_open(rig_t *r, size_t len, const rig_opts_t *o);
/* The eps go first: ep_destroy waits for their copies, which hold the regions. */
void rig_close(rig_t *r, bool errors_expected);
pdx_tp_write_t wr_make(const rig_t *r, uint64_t id, uint64_t src_off, uint64_t len,
                       uint64_t dst_off, bool signaled);

/* Post, waiting out a full send queue; completions seen meanwhile go to cb. */
typedef void (*wc_cb_t)(const rig_t *r, const pdx_tp_wc_t *wc, void *arg);

int post_wait(const rig_t *r, const pdx_tp_write_t *w, wc_cb_t cb, void *arg);
/* A wc_cb_t: success, in posting order (*(uint64_t *)arg: the next wr_id at least). */
void expect_ok(const rig_t *r, const pdx_tp_wc_t *wc, void *arg);

#endif
