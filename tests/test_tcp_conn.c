/*
 * tcp transport connection setup against stray clients: a HELLO that names
 * an endpoint with the wrong sender, and connections that never say HELLO.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp/tcp_internal.h"

static const pdx_transport_ops_t *ops = &pdx_tcp_ops;

static pdx_tp_t *tp_open(uint32_t timeout_ms)
{
    pdx_tp_params_t p = {.host = "127.0.0.1", .progress_timeout_ms = timeout_ms,
                         .max_msg_size = 1 << 20};
    pdx_tp_t *tp = NULL;

    cr_assert_eq(ops->open(&p, &tp), PDX_OK);
    return tp;
}

static int raw_connect(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/*
 * Connect a fresh ep pair between tps a and b, with `before` run after the
 * dialer's HELLO went out and before the acceptor connects; then one signaled
 * 4 KiB write must complete and land.
 */
static void connect_and_write(pdx_tp_t *ta, pdx_tp_t *tb, void (*before)(const tcp_addr_t *acc))
{
    pdx_tp_t *t[2] = {ta, tb};
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *ep[2];
    pdx_tp_addr_t a[2];
    tcp_addr_t d[2];
    pdx_tp_ep_attr_t attr = {.sq_depth = 4, .rq_depth = 4};
    static uint8_t src[4096], dst[4096];
    pdx_tp_mr_t *smr, *dmr;
    pdx_tp_rkey_t rk;
    pdx_tp_write_t w;
    pdx_tp_wc_t wc;
    int dial, acc, got = 0;

    for (int i = 0; i < 2; i++) {
        cr_assert_eq(ops->cq_create(t[i], 16, &cq[i]), PDX_OK);
        cr_assert_eq(ops->ep_create(t[i], cq[i], &attr, &ep[i]), PDX_OK);
        ops->ep_address(ep[i], &a[i]);
        cr_assert_eq(tcp_addr_decode(&a[i], &d[i]), PDX_OK);
    }
    dial = tcp_addr_cmp(&d[0], &d[1]) < 0 ? 0 : 1;
    acc = 1 - dial;
    cr_assert_eq(ops->ep_connect(ep[dial], &a[acc]), PDX_OK); /* its HELLO waits at acc */
    usleep(100000);
    if (before)
        before(&d[acc]);
    cr_assert_eq(ops->ep_connect(ep[acc], &a[dial]), PDX_OK);
    /* Nothing else arrives on the real connection: it must be matched now,
     * not time out (1.5 s) waiting for an event that never comes. */
    usleep(2000000);
    cr_assert_str_eq(ops->ep_error(ep[acc]), "", "the acceptor never got its connection");

    cr_assert_eq(ops->mr_reg(t[dial], src, sizeof(src), PDX_TP_ACCESS_LOCAL_WRITE, &smr), PDX_OK);
    cr_assert_eq(ops->mr_reg(t[acc], dst, sizeof(dst),
                             PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE, &dmr), PDX_OK);
    ops->mr_remote(dmr, &rk);
    memset(src, 0x5a, sizeof(src));
    memset(dst, 0, sizeof(dst));
    w = (pdx_tp_write_t){.wr_id = 1, .mr = smr, .length = sizeof(src), .remote_addr = rk.addr,
                         .rkey = rk.rkey, .flags = PDX_TP_SIGNALED};
    cr_assert_eq(ops->post_write(ep[dial], &w, 1), PDX_OK);
    for (int i = 0; i < 400 && !got; i++) {
        got = ops->cq_poll(cq[dial], &wc, 1);
        usleep(5000);
    }
    cr_assert_eq(got, 1, "no completion: the real connection was never matched");
    cr_expect_eq(wc.status, PDX_OK, "%s (%s)", pdx_status_str(wc.status), ops->ep_error(ep[dial]));
    cr_expect_eq(dst[4095], 0x5a);
    for (int i = 0; i < 2; i++)
        ops->ep_destroy(ep[i]);
    ops->mr_dereg(smr);
    ops->mr_dereg(dmr);
    for (int i = 0; i < 2; i++)
        ops->cq_destroy(cq[i]);
}

static int stray_fd = -1;

static void send_stray_hello(const tcp_addr_t *acc)
{
    tcp_hdr_t h;

    stray_fd = raw_connect(acc->port);
    tcp_hdr_encode(&h, TCP_FR_HELLO, TCP_PROTO_VERSION, TCP_HELLO_MAGIC, 12345, acc->token);
    cr_assert_eq(write(stray_fd, &h, sizeof(h)), (ssize_t)sizeof(h));
    usleep(100000);
}

/* A HELLO with the acceptor's token but a wrong sender, arriving after the
 * real dialer's, must not keep the real connection from being matched. */
Test(tcp_conn, stray_hello_does_not_hide_the_real_one, .timeout = 30)
{
    pdx_tp_t *a = tp_open(1500), *b = tp_open(1500);

    connect_and_write(a, b, send_stray_hello);
    close(stray_fd);
    ops->close(a);
    ops->close(b);
}

/* Clients that connect and never speak cannot stop a tp from serving. */
Test(tcp_conn, silent_clients_do_not_stop_the_tp, .timeout = 30)
{
    pdx_tp_t *a = tp_open(1500), *b = tp_open(1500);
    int fds[2][TCP_MAX_PENDING / 2 + 20];

    for (int i = 0; i < (int)PDX_ARRAY_SIZE(fds[0]); i++) {
        fds[0][i] = raw_connect(tcp_tp(a)->addr.port);
        fds[1][i] = raw_connect(tcp_tp(b)->addr.port);
    }
    connect_and_write(a, b, NULL);
    for (int i = 0; i < (int)PDX_ARRAY_SIZE(fds[0]); i++) {
        close(fds[0][i]);
        close(fds[1][i]);
    }
    ops->close(a);
    ops->close(b);
}

/* An endpoint address decodes only as tcp_addr_encode() writes one. */
Test(tcp_conn, addresses_decode_strictly)
{
    tcp_addr_t a = {.family = 4, .port = 4242, .ip = {127, 0, 0, 1}, .token = 0x1122334455667788ull};
    static const struct { size_t at; uint8_t byte; } bad[] = {
        {0, 'X'}, {1, 99}, {2, 5}, {3, 1}, {4, 0}, {29, 0},
    };
    pdx_tp_addr_t enc, p;
    tcp_addr_t d;

    tcp_addr_encode(&a, &enc);
    cr_assert_eq(tcp_addr_decode(&enc, &d), PDX_OK);
    cr_expect_eq(tcp_addr_cmp(&a, &d), 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = enc;
        if (bad[i].at == 4)
            p.bytes[5] = 0; /* port 0 */
        if (bad[i].at == 29)
            memset(&p.bytes[22], 0, 8); /* token 0 */
        p.bytes[bad[i].at] = bad[i].byte;
        cr_expect_neq(tcp_addr_decode(&p, &d), PDX_OK, "edit %zu", i);
    }
    p = enc;
    p.len--;
    cr_expect_neq(tcp_addr_decode(&p, &d), PDX_OK, "short");
}

/* A peer's WRITE the receiver skips (no such region) with a length near
 * 2^64: the receiver discards its bytes as they come and reads nothing
 * outside its buffer while it looks ahead for the next frames (ASan). */
Test(tcp_conn, skipped_write_of_any_length_is_read_in_bounds, .timeout = 30)
{
    pdx_tp_t *t = tp_open(5000);
    pdx_tp_ep_attr_t attr = {.sq_depth = 4, .rq_depth = 4};
    pdx_tp_addr_t a, dialer;
    pdx_tp_cq_t *cq;
    pdx_tp_ep_t *ep;
    tcp_addr_t d, f;
    uint8_t junk[256] = {0};
    tcp_hdr_t h;
    int fd;

    cr_assert_eq(ops->cq_create(t, 16, &cq), PDX_OK);
    cr_assert_eq(ops->ep_create(t, cq, &attr, &ep), PDX_OK);
    ops->ep_address(ep, &a);
    cr_assert_eq(tcp_addr_decode(&a, &d), PDX_OK);
    f = d;
    f.port = 1; /* the lower address dials: this test's socket */
    f.token = 777;
    tcp_addr_encode(&f, &dialer);
    cr_assert_eq(ops->ep_connect(ep, &dialer), PDX_OK);
    fd = raw_connect(d.port);
    tcp_hdr_encode(&h, TCP_FR_HELLO, TCP_PROTO_VERSION, TCP_HELLO_MAGIC, 777, d.token);
    cr_assert_eq(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
    usleep(200000);
    tcp_hdr_encode(&h, TCP_FR_WRITE, 0xdead, 0, 0x1000, UINT64_MAX - 7);
    cr_assert_eq(write(fd, &h, sizeof(h)), (ssize_t)sizeof(h));
    usleep(200000);
    cr_assert_eq(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    usleep(300000);
    cr_expect_str_eq(ops->ep_error(ep), "", "the ep failed on a WRITE it skips");
    close(fd);
    ops->ep_destroy(ep);
    ops->cq_destroy(cq);
    ops->close(t);
}
