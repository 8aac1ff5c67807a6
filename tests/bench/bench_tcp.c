/*
 * bench_tcp: the tcp transport against one plain TCP socket pair on
 * 127.0.0.1, moving the same bytes in the same message sizes, in one run.
 *
 *   pdx:    two tps (sender, receiver), one ep each; the main thread posts
 *           WRITEs of `size` bytes, up to -t in flight, and sleeps on the
 *           CQ's fd when the send queue is full. A write counts once the
 *           receiver placed it (its completion).
 *   socket: a sender thread write()s `size`-byte messages, a receiver
 *           thread read()s them into a buffer of `size` bytes.
 *
 * -s size (default: 4 KiB, 64 KiB, 256 KiB, 1 MiB), -n iterations or -D
 * seconds (default 2 s per run), -t tx depth, --only pdx|socket (one side,
 * for profiling), --pool bytes (pdx: each write from and to a random slot of
 * a region this large on each side, as the pages of a KV pool are; default:
 * one slot, always in cache), --json.
 */
#include "log.h"
#include "transport.h"
#include "util.h"

#include <errno.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH_MAX 64

typedef struct opts {
    size_t   sizes[8];
    int      nsizes;
    uint64_t iters;       /* 0: run for `seconds` */
    double   seconds;
    uint32_t depth;
    uint32_t signal_every;
    size_t   pool;        /* 0: one buffer of `size` */
    bool     json;
    int      only;        /* 0 both, 1 pdx, 2 socket */
} opts_t;

typedef struct result {
    uint64_t iters;
    double   seconds;
} result_t;

static const pdx_transport_ops_t *const ops = &pdx_tcp_ops;

static void die(const char *what)
{
    fprintf(stderr, "bench_tcp: %s\n", what);
    exit(1);
}

static void check(pdx_status_t st, const char *what)
{
    if (st != PDX_OK) {
        fprintf(stderr, "bench_tcp: %s: %s\n", what, pdx_status_str(st));
        exit(1);
    }
}

static double gbps(size_t size, const result_t *r)
{
    return r->seconds > 0 ? (double)size * (double)r->iters / r->seconds / 1e9 : 0;
}

static bool time_up(const opts_t *o, uint64_t done, uint64_t t0)
{
    if (o->iters)
        return done >= o->iters;
    return (double)(pdx_now_ns() - t0) / 1e9 >= o->seconds;
}

/* ----------------------------------------------------------------- pdx */

/* Sleep on the CQ until a completion arrives; returns completions taken. */
static int cq_wait(pdx_tp_cq_t *cq, pdx_tp_wc_t *wc, int max)
{
    struct pollfd pfd = {.fd = ops->cq_fd(cq), .events = POLLIN};
    int n = ops->cq_poll(cq, wc, max);

    if (n)
        return n;
    ops->cq_arm(cq);
    n = ops->cq_poll(cq, wc, max);
    if (n)
        return n;
    if (poll(&pfd, 1, 1000) > 0)
        ops->cq_ack(cq);
    return ops->cq_poll(cq, wc, max);
}

static result_t run_pdx(const opts_t *o, size_t size)
{
    pdx_tp_params_t params = {.host = "127.0.0.1", .progress_timeout_ms = 10000,
                              .max_msg_size = size};
    pdx_tp_ep_attr_t attr = {.sq_depth = o->depth};
    pdx_tp_t *tp[2];
    pdx_tp_cq_t *cq[2];
    pdx_tp_ep_t *ep[2];
    pdx_tp_addr_t addr[2];
    pdx_tp_mr_t *smr, *dmr;
    pdx_tp_rkey_t rk;
    pdx_tp_write_t wr[BATCH_MAX];
    pdx_tp_wc_t wc[64];
    size_t len = PDX_MAX(o->pool, size), slots = len / size;
    uint8_t *src = malloc(len), *dst = malloc(len);
    uint64_t posted = 0, done = 0, t0, deadline, rng = 0x9e3779b97f4a7c15ull;
    result_t r;

    if (!src || !dst)
        die("out of memory");
    memset(src, 0xa5, len);
    memset(dst, 0, len);
    for (int i = 0; i < 2; i++) {
        check(ops->open(&params, &tp[i]), "open");
        check(ops->cq_create(tp[i], o->depth, &cq[i]), "cq_create");
        check(ops->ep_create(tp[i], cq[i], &attr, &ep[i]), "ep_create");
        ops->ep_address(ep[i], &addr[i]);
    }
    check(ops->ep_connect(ep[0], &addr[1]), "ep_connect");
    check(ops->ep_connect(ep[1], &addr[0]), "ep_connect");
    check(ops->mr_reg(tp[0], src, len, 0, &smr), "mr_reg");
    check(ops->mr_reg(tp[1], dst, len, PDX_TP_ACCESS_REMOTE_WRITE, &dmr), "mr_reg");
    ops->mr_remote(dmr, &rk);
    for (int i = 0; i < BATCH_MAX; i++)
        wr[i] = (pdx_tp_write_t){.mr = smr, .length = size, .remote_addr = rk.addr,
                                 .rkey = rk.rkey};

    /* one write first: the connection is up before the clock starts */
    wr[0].flags = PDX_TP_SIGNALED;
    check(ops->post_write(ep[0], wr, 1), "post_write");
    for (int i = 0; cq_wait(cq[0], wc, 1) == 0; i++)
        if (i == 10)
            die("pdx: the first write did not complete within 10 s");
    check(wc[0].status, "first write");

    t0 = pdx_now_ns();
    while (!time_up(o, posted, t0) || done < posted) {
        uint32_t room = o->depth - (uint32_t)(posted - done);
        uint32_t n = PDX_MIN(room, (uint32_t)BATCH_MAX);
        int got;

        if (o->iters)
            n = (uint32_t)PDX_MIN((uint64_t)n, o->iters - posted);
        if (time_up(o, posted, t0))
            n = 0;
        if (n) {
            /* every K-th WR and the last of each batch is signaled */
            for (uint32_t i = 0; i < n; i++) {
                if (slots > 1) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    wr[i].offset = (rng >> 33) % slots * size;
                    wr[i].remote_addr = rk.addr + (rng >> 13) % slots * size;
                }
                wr[i].wr_id = posted + i;
                wr[i].flags = (posted + i + 1) % o->signal_every == 0 || i == n - 1
                                  ? PDX_TP_SIGNALED : 0;
            }
            check(ops->post_write(ep[0], wr, n), "post_write");
            posted += n;
            continue;
        }
        got = cq_wait(cq[0], wc, 64);
        for (int i = 0; i < got; i++) {
            check(wc[i].status, "write completion");
            done = wc[i].wr_id + 1; /* completions come in order */
        }
    }
    r.iters = posted;
    r.seconds = (double)(pdx_now_ns() - t0) / 1e9;
    if (slots == 1 && memcmp(src, dst, size))
        die("pdx: destination differs from source");
    for (size_t i = 0; slots > 1 && i < len; i++)
        if (dst[i] != 0 && dst[i] != 0xa5)
            die("pdx: a destination byte is not the source's");

    deadline = pdx_deadline_ns(1000);
    while (ops->mr_dereg(smr) != PDX_OK && pdx_now_ns() < deadline)
        ;
    for (int i = 0; i < 2; i++) {
        ops->ep_destroy(ep[i]);
        ops->cq_destroy(cq[i]);
    }
    ops->mr_dereg(dmr);
    for (int i = 0; i < 2; i++)
        ops->close(tp[i]);
    free(src);
    free(dst);
    return r;
}

/* -------------------------------------------------------------- socket */

typedef struct sock_rx {
    int      fd;
    size_t   size;
    uint64_t bytes;
    uint64_t t_end;
} sock_rx_t;

static void *sock_receiver(void *arg)
{
    sock_rx_t *rx = arg;
    uint8_t *buf = malloc(rx->size);

    if (!buf)
        die("out of memory");
    for (;;) {
        ssize_t n = read(rx->fd, buf, rx->size);

        if (n > 0) {
            rx->bytes += (uint64_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        break;
    }
    rx->t_end = pdx_now_ns();
    free(buf);
    return NULL;
}

static void sock_pair(int *a, int *b)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sin);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof(sin)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sin, &sl) < 0)
        die("socket listen");
    *a = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*a < 0 || connect(*a, (struct sockaddr *)&sin, sizeof(sin)) < 0)
        die("socket connect");
    *b = accept(lfd, NULL, NULL);
    if (*b < 0)
        die("socket accept");
    close(lfd);
    setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static result_t run_socket(const opts_t *o, size_t size)
{
    uint8_t *src = malloc(size);
    sock_rx_t rx = {.size = size};
    pthread_t thread;
    uint64_t sent = 0, t0;
    int fd;
    result_t r;

    if (!src)
        die("out of memory");
    memset(src, 0xa5, size);
    sock_pair(&fd, &rx.fd);
    if (pthread_create(&thread, NULL, sock_receiver, &rx))
        die("pthread_create");
    t0 = pdx_now_ns();
    while (!time_up(o, sent, t0)) {
        size_t off = 0;

        while (off < size) {
            ssize_t n = write(fd, src + off, size - off);

            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                die("socket write");
            off += (size_t)n;
        }
        sent++;
    }
    shutdown(fd, SHUT_WR);
    pthread_join(thread, NULL);
    if (rx.bytes != sent * size)
        die("socket: byte count differs");
    r.iters = sent;
    r.seconds = (double)(rx.t_end - t0) / 1e9;
    close(fd);
    close(rx.fd);
    free(src);
    return r;
}

/* ---------------------------------------------------------------- main */

static size_t parse_size(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 0);

    if (*end == 'k' || *end == 'K') {
        v <<= 10;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        v <<= 20;
        end++;
    } else if (*end == 'g' || *end == 'G') {
        v <<= 30;
        end++;
    }
    if (*end || v == 0)
        die("bad size");
    return (size_t)v;
}

static void usage(void)
{
    fprintf(stderr, "usage: bench_tcp [-s size] [-n iterations | -D seconds] [-t tx_depth] "
                    "[--only pdx|socket] [--pool bytes] [--json]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"json", no_argument, NULL, 'j'},
                                             {"only", required_argument, NULL, 'o'},
                                             {"pool", required_argument, NULL, 'p'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    opts_t o = {.sizes = {4096, 65536, 262144, 1048576}, .nsizes = 4, .seconds = 2.0,
                .depth = 64};
    int c;

    while ((c = getopt_long(argc, argv, "s:n:D:t:h", longopts, NULL)) != -1) {
        switch (c) {
        case 's': o.sizes[0] = parse_size(optarg); o.nsizes = 1; break;
        case 'n': o.iters = strtoull(optarg, NULL, 0); break;
        case 'D': o.seconds = strtod(optarg, NULL); o.iters = 0; break;
        case 't': o.depth = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'j': o.json = true; break;
        case 'p': o.pool = parse_size(optarg); break;
        case 'o': o.only = !strcmp(optarg, "pdx") ? 1 : !strcmp(optarg, "socket") ? 2 : -1; break;
        default: usage();
        }
    }
    if (optind != argc || o.only < 0 || o.depth == 0 || o.depth > 65536 ||
        (!o.iters && o.seconds <= 0))
        usage();
    o.signal_every = PDX_MAX(1u, o.depth / 4);
    pdx_log_set_level(PDX_LOG_WARN);

    if (!o.json) {
        printf("---------------------------------------------------------------------------"
               "-----------\n");
        printf("             pdx tcp transport vs one plain TCP socket pair, 127.0.0.1\n");
        printf(" TX depth      : %u\n Signal every  : %u\n", o.depth, o.signal_every);
        if (o.pool)
            printf(" Pool          : %zu bytes a side, random slots (pdx)\n", o.pool);
        if (o.iters)
            printf(" Iterations    : %llu per run\n", (unsigned long long)o.iters);
        else
            printf(" Duration      : %.1f s per run\n", o.seconds);
        printf("---------------------------------------------------------------------------"
               "-----------\n");
        printf(" %-10s %-12s %-13s %-13s %-12s %-15s %s\n", "#bytes", "#iterations",
               "BW pdx[GB/s]", "MsgRate[Mpps]", "#iterations", "BW socket[GB/s]", "ratio");
    } else {
        printf("{\"tx_depth\": %u, \"signal_every\": %u, \"results\": [", o.depth,
               o.signal_every);
    }
    for (int i = 0; i < o.nsizes; i++) {
        size_t size = o.sizes[i];
        result_t p = {0}, s = {0};
        if (o.only != 2)
            p = run_pdx(&o, size);
        if (o.only != 1)
            s = run_socket(&o, size);
        double bp = gbps(size, &p), bs = gbps(size, &s);
        double ratio = bs > 0 ? bp / bs : 0;

        if (o.json)
            printf("%s\n  {\"bytes\": %zu, \"pdx\": {\"iterations\": %llu, \"seconds\": %.4f, "
                   "\"bw_gbps\": %.3f}, \"socket\": {\"iterations\": %llu, \"seconds\": %.4f, "
                   "\"bw_gbps\": %.3f}, \"ratio\": %.3f}", i ? "," : "", size,
                   (unsigned long long)p.iters, p.seconds, bp, (unsigned long long)s.iters,
                   s.seconds, bs, ratio);
        else
            printf(" %-10zu %-12llu %-13.3f %-13.4f %-12llu %-15.3f %.2f\n", size,
                   (unsigned long long)p.iters, bp, (double)p.iters / p.seconds / 1e6,
                   (unsigned long long)s.iters, bs, ratio);
        fflush(stdout);
    }
    if (o.json)
        printf("\n]}\n");
    else
        printf("---------------------------------------------------------------------------"
               "-----------\n");
    return 0;
}
