/*
 * Connections in that are not peers (yet): a listener under hostile or
 * broken clients keeps serving real peers.
 *
 * Against one prefill engine (PDX_HANDSHAKE_TIMEOUT_MS=1000), from several
 * loopback source addresses: 64 connections that trickle a byte a second,
 * 500 that never speak, 2000 that send a cut or mutated HELLO, and 64 that
 * send a valid HELLO and close at once. Between them a real decode engine
 * connects (within the handshake deadline, every time, plus what TCP itself
 * may take) and moves a verified room. The tricklers are closed by the engine at the deadline whatever
 * they send; in the end the engine holds no handshake and no peer, and the
 * process's open fds are back where they were.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine.h"
#include "engine_fixture.h"
#include "proc_usage.h"

#define DEADLINE_MS 1000
/* A real peer's connect: the handshake deadline, and TCP's 1 s SYN
 * retransmit (a port of this host that the engine's side of an old
 * connection still holds in TIME_WAIT costs one). */
#define CONNECT_MS  (DEADLINE_MS + 1500)

static side_t pf, dc;
static const geom_t g = {.layers = 1, .bytes_per_page = 256, .npages = 64};

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}


static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A TCP connection to the engine from source address 127.0.0.<host>. */
static int raw_connect(uint32_t host, uint32_t port)
{
    struct sockaddr_in src = {.sin_family = AF_INET}, dst = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;

    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    /* The port is picked at connect(), knowing the destination, so it never
     * lands on a 4-tuple the engine's side still holds in TIME_WAIT. */
    cr_assert_eq(setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one)), 0);
    src.sin_addr.s_addr = htonl(0x7f000000u | host);
    dst.sin_addr.s_addr = htonl(0x7f000001u);
    dst.sin_port = htons((uint16_t)port);
    cr_assert_eq(bind(fd, (struct sockaddr *)&src, sizeof(src)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(connect(fd, (struct sockaddr *)&dst, sizeof(dst)), 0, "connect: %s",
                 strerror(errno));
    return fd;
}

/* The HELLO a real engine of this version would send. */
static size_t hello_frame(uint8_t *buf, size_t cap)
{
    pdx_wire_hello_t m = {.version = PDX_PROTOCOL_VERSION, .nshards = 2, .nics = 1,
                          .port = 4242};
    size_t len;

    memset(m.id, 0x5a, sizeof(m.id));
    strcpy(m.host, "127.0.0.1");
    strcpy(m.transport, "tcp");
    cr_assert_eq(pdx_wire_encode_hello(&m, buf, cap, &len), PDX_OK);
    return len;
}

static uint64_t slowest_ns; /* a real peer's connect */

/* A real peer: connected within the handshake deadline, a room verified, closed. */
static void real_peer(uint64_t room)
{
    static const uint32_t pages[3] = {1, 17, 40};
    uint64_t t0 = pdx_now_ns();
    uint32_t peer;
    pdx_status_t st = pdx_peer_connect(dc.e, pdx_engine_address(pf.e), CONNECT_MS, &peer);
    uint64_t took = pdx_now_ns() - t0;

    cr_assert_eq(st, PDX_OK, "a real peer was not served within %d ms (%s, %.1f ms)",
                 CONNECT_MS, pdx_status_str(st), took / 1e6);
    slowest_ns = PDX_MAX(slowest_ns, took);
    side_move(&pf, &dc, peer, room, pages, 3);
    cr_assert_eq(pdx_peer_close(dc.e, peer), PDX_OK);
}

typedef struct trickler {
    int      fd;
    uint32_t sent;      /* bytes of the HELLO sent so far */
    uint64_t opened_ns;
    uint64_t closed_ns; /* when the engine's close was seen; 0: not yet */
} trickler_t;

static trickler_t trick[64];
static uint8_t hello[512];
static size_t hello_len;

/* A byte a second to each trickler still open; note the ones the engine closed. */
static void trickle(uint64_t now)
{
    for (int i = 0; i < 64; i++) {
        trickler_t *t = &trick[i];
        uint8_t sink[256];
        ssize_t n;

        if (t->closed_ns)
            continue;
        while ((n = recv(t->fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
            ; /* an ERROR frame */
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
            t->closed_ns = now;
            continue;
        }
        if (now - t->opened_ns >= (uint64_t)(t->sent + 1) * 1000000000ull &&
            t->sent < hello_len &&
            send(t->fd, hello + t->sent, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1)
            t->sent++;
    }
}

static void wait_trickle_ms(int ms)
{
    uint64_t until = pdx_deadline_ns((uint32_t)ms);

    while (pdx_now_ns() < until) {
        trickle(pdx_now_ns());
        usleep(5000);
    }
}

Test(handshake, hostile_connections_never_keep_real_peers_out, .fini = fini, .timeout = 180)
{
    static const char *const cfg[] = {"PDX_HANDSHAKE_TIMEOUT_MS=1000", NULL};
    static int silent[500];
    struct rlimit rl;
    uint64_t seed = 0x9e3779b97f4a7c15ull, room = 100;
    pdx_stats_t st;
    uint64_t t0;
    uint32_t port;
    int base_fds;

    cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    side_open(&pf, &g, cfg);
    side_open(&dc, &g, NULL);
    port = pf.e->port;
    hello_len = hello_frame(hello, sizeof(hello));
    real_peer(room++);
    for (int i = 0; i < 5000; i++) {
        cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
        if (st.peers == 0)
            break;
        usleep(1000);
    }
    usleep(20000); /* the decode side's retire too */
    base_fds = proc_open_fds();
    t0 = pdx_now_ns();

    /* 64 tricklers from four addresses: as many as all handshake slots. */
    for (int i = 0; i < 64; i++) {
        trick[i] = (trickler_t){.fd = raw_connect(2 + (uint32_t)i / 16, port),
                                .opened_ns = pdx_now_ns()};
        cr_assert_eq(send(trick[i].fd, hello, 1, MSG_NOSIGNAL), 1);
        trick[i].sent = 1;
    }
    wait_trickle_ms(100);
    real_peer(room++);
    printf("tricklers: %.0f ms\n", (pdx_now_ns() - t0) / 1e6);

    /* 500 that never speak, 16 per address; a real peer every 100. */
    for (int i = 0; i < 500; i++) {
        silent[i] = raw_connect(10 + (uint32_t)i / 16, port);
        if (i % 100 == 99) {
            trickle(pdx_now_ns());
            real_peer(room++);
        }
    }

    printf("silent: %.0f ms\n", (pdx_now_ns() - t0) / 1e6);
    /* 2000 cut or mutated HELLOs, then closed; a real peer every 250. */
    for (int i = 0; i < 2000; i++) {
        uint8_t buf[sizeof(hello) + 64];
        size_t len = hello_len;
        int fd = raw_connect(100 + (uint32_t)i % 128, port);

        memcpy(buf, hello, hello_len);
        if (i % 2 == 0) {
            len = 1 + rng(&seed) % (hello_len - 1); /* cut */
        } else {
            for (int k = 1 + (int)(rng(&seed) % 4); k > 0; k--)
                buf[rng(&seed) % hello_len] ^= (uint8_t)(1 + rng(&seed) % 255);
            if (rng(&seed) % 4 == 0)
                for (size_t k = 0; k < 64; k++)
                    buf[len++] = (uint8_t)rng(&seed); /* and garbage after it */
        }
        if (send(fd, buf, len, MSG_NOSIGNAL) < 0)
            cr_assert(errno == ECONNRESET || errno == EPIPE, "send: %s", strerror(errno));
        close(fd);
        if (i % 250 == 249) {
            trickle(pdx_now_ns());
            real_peer(room++);
        }
    }

    printf("mutated: %.0f ms\n", (pdx_now_ns() - t0) / 1e6);
    /* A HELLO that claims megabytes: no more than 64 KiB of it is taken in
     * before the engine closes the connection (well before the deadline). */
    {
        static uint8_t big[80 << 10];
        uint64_t t1 = pdx_now_ns();
        int fd = raw_connect(250, port);
        char c;

        memcpy(big, hello, 12);
        big[8] = 0x00, big[9] = 0x00, big[10] = 0x30, big[11] = 0x00; /* a 3 MiB body */
        (void)!send(fd, big, sizeof(big), MSG_NOSIGNAL);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        while (poll(&p, 1, 2000) > 0 && recv(fd, &c, 1, 0) > 0)
            ; /* an ERROR frame, then the close */
        cr_expect_lt(pdx_now_ns() - t1, (uint64_t)DEADLINE_MS * 1000000ull,
                     "a HELLO of megabytes was taken in for %.0f ms", (pdx_now_ns() - t1) / 1e6);
        close(fd);
    }

    /* 64 valid HELLOs that close at once. */
    for (int i = 0; i < 64; i++) {
        int fd = raw_connect(240 + (uint32_t)i % 4, port);

        cr_assert_eq(send(fd, hello, hello_len, MSG_NOSIGNAL), (ssize_t)hello_len);
        close(fd);
    }
    real_peer(room++);

    /* Every trickler was closed by the engine by its deadline, however it
     * trickled (two sweeps of slack). */
    wait_trickle_ms(DEADLINE_MS + 500);
    for (int i = 0; i < 64; i++) {
        cr_expect_neq(trick[i].closed_ns, 0, "trickler %d still open after %u bytes", i,
                      trick[i].sent);
        if (trick[i].closed_ns)
            cr_expect_leq(trick[i].closed_ns - trick[i].opened_ns,
                          (uint64_t)(DEADLINE_MS + 400) * 1000000ull, "trickler %d lived %.0f ms",
                          i, (trick[i].closed_ns - trick[i].opened_ns) / 1e6);
        close(trick[i].fd);
    }
    for (int i = 0; i < 500; i++)
        close(silent[i]);

    /* Nothing of them is left. */
    for (int i = 0; i < 5000; i++) {
        cr_assert_eq(pdx_engine_stats(pf.e, &st), PDX_OK);
        if (st.handshakes == 0 && st.peers == 0 && proc_open_fds() == base_fds)
            break;
        usleep(1000);
    }
    printf("handshakes: %llu refused or failed, %llu real peers served and retired (the "
           "slowest in %.1f ms); open fds %d at the start, %d at the end\n",
           (unsigned long long)st.handshakes_refused, (unsigned long long)st.peers_retired,
           slowest_ns / 1e6, base_fds, proc_open_fds());
    cr_expect_eq(st.handshakes, 0);
    cr_expect_eq(st.peers, 0);
    cr_expect_eq(proc_open_fds(), base_fds);
    cr_expect_geq(st.handshakes_refused, 64 + 500 + 2000 + 64 - 16 /* some may still pend */);
    cr_expect_eq(st.peers_retired, room - 100);
}
