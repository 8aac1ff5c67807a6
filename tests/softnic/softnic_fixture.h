/*
 * The fixture of the softnic tests: two RC QPs connected to each other with
 * raw verbs (on softnic0 and softnic1, or both on softnic0), a CQ, a PD and
 * a registered buffer on each side. fx_open records the open fds and
 * softnic objects; fx_close destroys everything and fails the test if
 * either count changed.
 */
#ifndef PDX_SOFTNIC_FIXTURE_H
#define PDX_SOFTNIC_FIXTURE_H

#include <criterion/criterion.h>

#include "softnic.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FX_WAIT_MS 10000 /* how long a test waits for what it expects */
#define FX_RW      (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

typedef struct fx_opts {
    softnic_config_t cfg;         /* given to softnic_configure */
    bool             one_device;  /* both sides on softnic0 (one context) */
    struct ibv_qp_cap cap;
    int              cqe;
    bool             channel;     /* a completion channel per side */
    bool             sig_all;
    uint8_t          timeout, retry_cnt, rnr_retry, min_rnr_timer;
    uint8_t          path_mtu;    /* IBV_MTU_* (default 1024) */
    uint8_t          max_dest_rd_atomic, max_rd_atomic; /* default 16 */
    unsigned int     access;      /* of the buffers' MRs and the QPs */
    size_t           buf_len;
} fx_opts_t;

typedef struct fx_side {
    struct ibv_context      *ctx;
    struct ibv_pd           *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq           *cq;
    struct ibv_qp           *qp;
    uint8_t                 *buf;
    struct ibv_mr           *mr;
    union ibv_gid            gid;
} fx_side_t;

typedef struct fx {
    fx_opts_t           o;
    struct ibv_device **list;
    int                 ndev;
    fx_side_t           a, b;
    int                 fds;
    uint32_t            objs;
} fx_t;

void     fx_opts_default(fx_opts_t *o);
void     fx_open(fx_t *f, const fx_opts_t *o);
void     fx_close(fx_t *f);
int      fx_count_fds(void);
uint64_t fx_now_us(void);
void     fx_sleep_ms(unsigned ms);
void     fx_fill(void *p, size_t n, uint64_t seed);

/* Bring a QP from RESET to RTS towards (dest_qpn, dgid); 0 or an errno. */
int fx_connect(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *dgid, const fx_opts_t *o);
int fx_qp_state(struct ibv_qp *qp);

/* One WR with one sge (len 0: no sge). */
int fx_post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, void *addr, uint32_t len,
            uint32_t lkey, uint64_t raddr, uint32_t rkey, unsigned int flags);
int fx_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey);
/* Poll until n CQEs or timeout_ms; the number polled. */
int fx_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, unsigned timeout_ms);
/* Wait until softnic executed `n` send WRs in all. */
bool fx_wait_executed(uint64_t n, unsigned timeout_ms);
/* Next async event of ctx within timeout_ms; false if none. */
bool fx_async(struct ibv_context *ctx, struct ibv_async_event *ev, unsigned timeout_ms);

#endif
