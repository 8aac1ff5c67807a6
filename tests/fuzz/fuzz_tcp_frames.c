/*
 * The tcp transport's receiver fed arbitrary frames: each input is what the
 * peer of one endpoint sends after a valid HELLO, before it closes its side.
 * The ep places what checks out, skips or refuses the rest, and fails once
 * the peer is gone; a crash, a leak, a read or write outside its buffers or
 * its region, or an ep still up after the close is a finding.
 *
 * So that inputs reach the region, the harness rebases them, walking the
 * input frame by frame as the receiver would: the region's address is added
 * to the addr of WRITE and READ headers and their rkey is XORed with the
 * region's (0 in an input names the region). Every other byte goes as it is.
 * Only 127.0.0.1 is dialled.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "proto.h"
#include "util.h"

#define REGION    (64u << 10)
#define DEADLINE_MS 3000u
#define DIALER_TOKEN 777u

static const pdx_transport_ops_t *const ops = &pdx_tcp_ops;
static pdx_tp_t *tp;
static pdx_tp_cq_t *cq;
static pdx_tp_mr_t *mr, *rmr;
static pdx_tp_rkey_t rk;
static uint8_t region[REGION], rbuf[2][PDX_TP_SEND_MAX];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    pdx_tp_params_t p = {.host = "127.0.0.1", .progress_timeout_ms = 1000,
                         .max_msg_size = 1u << 20};

    (void)argc, (void)argv;
    pdx_log_set_handler(fuzz_quiet, NULL);
    FUZZ_CHECK(ops->open(&p, &tp) == PDX_OK, "tcp open");
    FUZZ_CHECK(ops->cq_create(tp, 256, &cq) == PDX_OK, "cq");
    FUZZ_CHECK(ops->mr_reg(tp, region, sizeof(region),
                           PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE |
                               PDX_TP_ACCESS_REMOTE_READ, &mr) == PDX_OK, "region");
    FUZZ_CHECK(ops->mr_reg(tp, rbuf, sizeof(rbuf), PDX_TP_ACCESS_LOCAL_WRITE, &rmr) == PDX_OK,
               "receive buffers");
    ops->mr_remote(mr, &rk);
    return 0;
}

/* The input with WRITE and READ headers pointed at the region. */
static uint8_t *rebase(const uint8_t *data, size_t size)
{
    uint8_t *out = malloc(size ? size : 1);
    size_t off = 0;

    FUZZ_CHECK(out, "out of memory");
    memcpy(out, data, size);
    while (size - off >= TCP_HDR_LEN) {
        tcp_hdr_t h;

        tcp_hdr_decode(out + off, &h);
        if (h.type == TCP_FR_WRITE || h.type == TCP_FR_READ) {
            uint32_t arg = htole32(h.arg ^ rk.rkey);
            uint64_t addr = htole64(h.addr + rk.addr);

            memcpy(out + off + offsetof(tcp_hdr_t, arg), &arg, sizeof(arg));
            memcpy(out + off + offsetof(tcp_hdr_t, addr), &addr, sizeof(addr));
        }
        off += TCP_HDR_LEN;
        if (tcp_hdr_payload(&h) > size - off)
            break;
        off += tcp_hdr_payload(&h);
    }
    return out;
}

/* Whatever the ep sends back (ACKs, ERRs, RDATA), dropped. */
static void drain(int fd)
{
    uint8_t sink[4096];

    while (recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
        ;
}

static int dial(uint16_t port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    FUZZ_CHECK(fd >= 0, "socket: %s", strerror(errno));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    FUZZ_CHECK(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect: %s",
               strerror(errno));
    return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pdx_tp_ep_attr_t attr = {.sq_depth = 8, .rq_depth = 8};
    uint64_t deadline = pdx_deadline_ns(DEADLINE_MS);
    uint8_t *frames = rebase(data, size);
    pdx_tp_addr_t a, peer;
    pdx_tp_wc_t wc[16];
    pdx_tp_ep_t *ep;
    tcp_addr_t d;
    tcp_hdr_t hello;
    size_t sent = 0;
    int fd;

    FUZZ_CHECK(ops->ep_create(tp, cq, &attr, &ep) == PDX_OK, "ep");
    ops->ep_address(ep, &a);
    FUZZ_CHECK(tcp_addr_decode(&a, &d) == PDX_OK, "ep address");
    for (int i = 0; i < 2; i++)
        FUZZ_CHECK(ops->post_recv(ep, (uint64_t)i, rmr, (uint64_t)i * PDX_TP_SEND_MAX,
                                  PDX_TP_SEND_MAX) == PDX_OK, "receive");
    {
        tcp_addr_t f = d;

        f.port = 1; /* the lower address dials: this harness */
        f.token = DIALER_TOKEN;
        tcp_addr_encode(&f, &peer);
    }
    FUZZ_CHECK(ops->ep_connect(ep, &peer) == PDX_OK, "connect");
    fd = dial(d.port);
    tcp_hdr_encode(&hello, TCP_FR_HELLO, TCP_PROTO_VERSION, TCP_HELLO_MAGIC, DIALER_TOKEN,
                   d.token);
    FUZZ_CHECK(send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == (ssize_t)sizeof(hello),
               "HELLO");
    while (sent < size && pdx_now_ns() < deadline) {
        ssize_t n = send(fd, frames + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        struct pollfd p = {.fd = fd, .events = POLLOUT};

        if (n > 0) {
            sent += (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            break; /* the ep failed and closed: what it took is the test */
        drain(fd);
        poll(&p, 1, 10);
    }
    shutdown(fd, SHUT_WR);
    while (*ops->ep_error(ep) == '\0' && pdx_now_ns() < deadline) {
        struct pollfd p = {.fd = fd, .events = POLLIN};

        drain(fd);
        poll(&p, 1, 10);
    }
    FUZZ_CHECK(*ops->ep_error(ep) != '\0', "the ep is up %u ms after its peer closed",
               DEADLINE_MS);
    {
        struct linger l = {.l_onoff = 1, .l_linger = 0}; /* no TIME_WAIT: a port per input */

        setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    }
    close(fd);
    ops->ep_destroy(ep);
    while (ops->cq_poll(cq, wc, 16) > 0)
        ;
    free(frames);
    return 0;
}
