/*
 * PDX_AUTH_KEY: engines with the same key serve each other (rooms and
 * one-sided transfers); a peer without the key, with another key, or with
 * a key where the engine has none is PDX_ERR_AUTH on both sides. A stranger
 * speaking to the listener, a replay of a recorded authenticated handshake
 * and a man in the middle who relays, changes, injects or repeats frames
 * learn nothing but nonces and proofs, and nothing they send is acted on.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine_fixture.h"
#include "relay.h"
#include "util.h"
#include "wire.h"

#define KEY   "correct horse battery staple"
#define OTHER "correct horse battery stapler"

static side_t pf, dc;
static const geom_t g = {.layers = 2, .bytes_per_page = 512, .npages = 32};
static relay_t relay;
static char key_path[64];

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
    relay_free(&relay);
    if (key_path[0])
        unlink(key_path);
    key_path[0] = '\0';
}

static pdx_stats_t stats(pdx_engine_t *e)
{
    pdx_stats_t s;

    cr_assert_eq(pdx_engine_stats(e, &s), PDX_OK);
    return s;
}

/* Wait until the engine counted n refusals for the key (the other side's
 * count follows the ERROR it was sent). */
static void wait_refused(pdx_engine_t *e, uint64_t n, const char *who)
{
    uint64_t until = pdx_now_ns() + 5000000000ull;

    while (stats(e).auth_refused < n && pdx_now_ns() < until)
        usleep(1000);
    cr_assert_eq(stats(e).auth_refused, n, "%s counted refusals", who);
}

/* A refused connection's slot is freed soon after. */
static void wait_no_peers(pdx_engine_t *e)
{
    uint64_t until = pdx_now_ns() + 5000000000ull;

    while ((stats(e).peers || stats(e).handshakes) && pdx_now_ns() < until)
        usleep(1000);
    cr_assert_eq(stats(e).peers, 0);
    cr_assert_eq(stats(e).handshakes, 0);
}

/* One room verified, over the given peer of dc. */
static void room_moves(uint32_t peer, uint64_t room)
{
    static const uint32_t pages[4] = {0, 5, 6, 31};

    side_move(&pf, &dc, peer, room, pages, 4);
}

static void open_pair(const char *pf_key, const char *dc_key)
{
    char a[160], b[160];
    const char *ca[] = {a, "PDX_HEARTBEAT_MS=100", NULL}, *cb[] = {b, "PDX_HEARTBEAT_MS=100", NULL};

    snprintf(a, sizeof(a), "PDX_AUTH_KEY=%s", pf_key ? pf_key : "");
    snprintf(b, sizeof(b), "PDX_AUTH_KEY=%s", dc_key ? dc_key : "");
    side_open(&pf, &g, ca);
    side_open(&dc, &g, cb);
}

/* ------------------------------------------------------------ with the key */

Test(engine_auth, the_same_key_serves, .fini = fini, .timeout = 60)
{
    uint8_t buf[PDX_MEM_DESC_MAX], eng[PDX_ENGINE_DESC_MAX];
    size_t len = 0, elen = 0;
    pdx_desc_t d;
    pdx_xfer_entry_t x;
    pdx_xfer_t h;
    uint32_t peer, back;

    open_pair(KEY, KEY);
    peer = side_connect(&dc, &pf);
    room_moves(peer, 7);
    /* pf's one-sided write into dc's pool by dc's descriptor */
    cr_assert_eq(pdx_engine_desc(dc.e, eng, sizeof(eng), &elen), PDX_OK);
    cr_assert_eq(pdx_peer_connect_desc(pf.e, eng, elen, 5000, &back), PDX_OK);
    cr_assert_eq(pdx_mem_desc(dc.e, dc.mem, buf, sizeof(buf), &len), PDX_OK);
    d = (pdx_desc_t){buf, len};
    memset(pf.pool, 0x3c, 4096);
    x = (pdx_xfer_entry_t){.mem = pf.mem, .remote = 0, .offset = 0, .remote_offset = 8192,
                           .len = 4096};
    cr_assert_eq(pdx_xfer_post(pf.e, PDX_XFER_WRITE, &d, 1, &x, 1, NULL, 10000, &h), PDX_OK);
    cr_assert_eq(pdx_xfer_wait(pf.e, &h, 1, 10000, NULL), PDX_OK);
    for (size_t i = 0; i < 4096; i++)
        cr_assert_eq(dc.pool[8192 + i], 0x3c, "byte %zu", i);
    cr_assert_eq(release_wait(pf.e, h, 5000), PDX_OK);
    cr_expect_eq(stats(pf.e).auth_refused, 0);
    cr_expect_eq(stats(dc.e).auth_refused, 0);
}

/* The key from a file (its trailing newline is not part of it). */
Test(engine_auth, a_key_file_holds_the_same_key, .fini = fini, .timeout = 60)
{
    char a[160], b[160];
    const char *ca[] = {a, NULL}, *cb[] = {b, NULL};
    int fd;

    snprintf(key_path, sizeof(key_path), "/tmp/pdx-key-XXXXXX");
    fd = mkstemp(key_path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, KEY "\n", sizeof(KEY)), (ssize_t)sizeof(KEY));
    close(fd);
    snprintf(a, sizeof(a), "PDX_AUTH_KEY=%s", KEY);
    snprintf(b, sizeof(b), "PDX_AUTH_KEY_FILE=%s", key_path);
    side_open(&pf, &g, ca);
    side_open(&dc, &g, cb);
    room_moves(side_connect(&dc, &pf), 8);
}

Test(engine_auth, bad_key_settings_are_refused, .fini = fini)
{
    pdx_config_t cfg;
    pdx_engine_t *e = NULL;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", PDX_TEST_TRANSPORT);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_AUTH_KEY", "too short"), PDX_OK);
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID, "a key under 16 bytes");
    cr_assert_eq(pdx_config_set(&cfg, "PDX_AUTH_KEY", KEY), PDX_OK);
    cr_assert_eq(pdx_config_set(&cfg, "PDX_AUTH_KEY_FILE", "/nonexistent"), PDX_OK);
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_INVALID, "both set");
    cr_assert_eq(pdx_config_set(&cfg, "PDX_AUTH_KEY", ""), PDX_OK);
    cr_expect_eq(pdx_engine_create(&cfg, &e), PDX_ERR_IO, "no such file");
    cr_expect_null(e);
}

/* ---------------------------------------------------------- without it */

static void refused_both_sides(const char *pf_key, const char *dc_key)
{
    uint32_t peer = UINT32_MAX;

    open_pair(pf_key, dc_key);
    cr_assert_eq(pdx_peer_connect(dc.e, pdx_engine_address(pf.e), 5000, &peer), PDX_ERR_AUTH);
    wait_refused(pf.e, 1, "the acceptor");
    wait_refused(dc.e, 1, "the connector");
    wait_no_peers(pf.e);
    wait_no_peers(dc.e);
}

Test(engine_auth, a_peer_without_the_key_is_refused, .fini = fini, .timeout = 30)
{
    refused_both_sides(KEY, NULL);
}

Test(engine_auth, a_key_where_the_peer_has_none_is_refused, .fini = fini, .timeout = 30)
{
    refused_both_sides(NULL, KEY);
}

Test(engine_auth, another_key_is_refused, .fini = fini, .timeout = 30)
{
    refused_both_sides(KEY, OTHER);
}

/* ------------------------------------------------------------- strangers */

static int raw_connect(const char *addr)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1));
    cr_assert_geq(fd, 0);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "%s", strerror(errno));
    return fd;
}

/* Everything the engine sends on fd until it closes (5 s at most). */
static size_t read_all(int fd, uint8_t *buf, size_t cap)
{
    uint64_t until = pdx_now_ns() + 5000000000ull;
    size_t len = 0;

    while (pdx_now_ns() < until) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 100) <= 0)
            continue;
        n = recv(fd, buf + len, cap - len, 0);
        if (n <= 0)
            return len;
        len += (size_t)n;
    }
    cr_assert_fail("the engine did not close the connection");
    return len;
}

/* The frame types in a stream, in order; their number. */
static int frame_types(const uint8_t *p, size_t len, uint16_t *types, int max)
{
    int n = 0;

    for (size_t off = 0; off < len && n < max;) {
        pdx_wire_header_t h;
        size_t need;

        cr_assert_eq(pdx_wire_peek(p + off, len - off, &h, &need, NULL), PDX_OK);
        types[n++] = h.type;
        off += need;
    }
    return n;
}

static void send_frame(int fd, const void *f, size_t len)
{
    cr_assert_eq(send(fd, f, len, MSG_NOSIGNAL), (ssize_t)len);
}

/* A HELLO without the key, and a made-up proof: an ERROR (after the
 * engine's nonce and proof) and the close, nothing else. */
Test(engine_auth, a_stranger_learns_nothing, .fini = fini, .timeout = 30)
{
    pdx_wire_hello_t h = {.version = PDX_PROTOCOL_VERSION, .nshards = 1, .nics = 1, .port = 9};
    pdx_wire_auth_t a1 = {.version = PDX_PROTOCOL_VERSION, .step = 1};
    pdx_wire_auth_t a3 = {.version = PDX_PROTOCOL_VERSION, .step = 3};
    uint8_t f[512], in[8192];
    uint16_t types[8];
    size_t len, n;
    int fd;

    open_pair(KEY, KEY);
    strcpy(h.host, "stranger");
    strcpy(h.transport, PDX_TEST_TRANSPORT);
    cr_assert_eq(pdx_wire_encode_hello(&h, f, sizeof(f), &len), PDX_OK);
    fd = raw_connect(pdx_engine_address(pf.e));
    send_frame(fd, f, len);
    n = read_all(fd, in, sizeof(in));
    close(fd);
    cr_assert_eq(frame_types(in, n, types, 8), 1);
    cr_expect_eq(types[0], PDX_WIRE_ERROR);

    memset(a1.nonce, 0x11, sizeof(a1.nonce));
    fd = raw_connect(pdx_engine_address(pf.e));
    cr_assert_eq(pdx_wire_encode_auth(&a1, f, sizeof(f), &len), PDX_OK);
    send_frame(fd, f, len);
    cr_assert_eq(pdx_wire_encode_auth(&a3, f, sizeof(f), &len), PDX_OK);
    send_frame(fd, f, len);
    n = read_all(fd, in, sizeof(in));
    close(fd);
    cr_assert_eq(frame_types(in, n, types, 8), 2);
    cr_expect_eq(types[0], PDX_WIRE_AUTH);
    cr_expect_eq(types[1], PDX_WIRE_ERROR);
    wait_refused(pf.e, 2, "the engine");
    wait_no_peers(pf.e);
    /* and it still serves */
    room_moves(side_connect(&dc, &pf), 9);
}

/* ----------------------------------------------------- in the middle */

static uint32_t connect_through(relay_mode_t mode, pdx_status_t want)
{
    char addr[64];
    uint32_t peer = UINT32_MAX;

    relay_start(&relay, mode, pdx_engine_address(pf.e));
    cr_assert_eq(pdx_peer_connect(dc.e, relay_addr(&relay, addr, sizeof(addr)), 5000, &peer),
                 want);
    return peer;
}

/* What a relay sees: the key nowhere, and no region's address (MEM is
 * sealed), where the same run without a key shows it. */
static void relayed(const char *key, bool sealed)
{
    uint64_t pf_addr = (uint64_t)(uintptr_t)pf.pool, dc_addr = (uint64_t)(uintptr_t)dc.pool;

    (void)key;
    room_moves(connect_through(RELAY_PLAIN, PDX_OK), 10);
    relay_stop(&relay);
    cr_expect_eq(relay_saw(&relay, 1, &pf_addr, 8), !sealed, "the acceptor's region address");
    cr_expect_eq(relay_saw(&relay, 0, &dc_addr, 8), !sealed, "the connector's region address");
    if (key) {
        cr_expect(!relay_saw(&relay, 0, key, strlen(key)));
        cr_expect(!relay_saw(&relay, 1, key, strlen(key)));
    }
}

Test(engine_auth, a_relay_learns_no_address, .fini = fini, .timeout = 60)
{
    open_pair(KEY, KEY);
    relayed(KEY, true);
}

/* The check above can fail: without a key the relay sees the addresses. */
Test(engine_auth, without_a_key_a_relay_sees_addresses, .fini = fini, .timeout = 60)
{
    open_pair(NULL, NULL);
    relayed(NULL, false);
}

/* The connector's bytes of a real handshake, sent again on a new
 * connection: the engine's fresh nonce makes the old proof worthless. */
Test(engine_auth, a_replayed_handshake_is_refused, .fini = fini, .timeout = 60)
{
    uint8_t in[65536];
    uint16_t types[16];
    int fd, n;
    size_t got;

    open_pair(KEY, KEY);
    room_moves(connect_through(RELAY_PLAIN, PDX_OK), 11);
    relay_stop(&relay);
    cr_assert_gt(relay.rec_len[0], 0);
    fd = raw_connect(pdx_engine_address(pf.e));
    send_frame(fd, relay.rec[0], relay.rec_len[0]);
    got = read_all(fd, in, sizeof(in));
    close(fd);
    n = frame_types(in, got, types, 16);
    cr_assert_eq(n, 2, "the engine's nonce and proof, then an ERROR");
    cr_expect_eq(types[0], PDX_WIRE_AUTH);
    cr_expect_eq(types[1], PDX_WIRE_ERROR);
    wait_refused(pf.e, 1, "the engine");
}

/* A bit changed in the sealed HELLO: refused on both sides. */
Test(engine_auth, a_changed_frame_is_refused, .fini = fini, .timeout = 30)
{
    open_pair(KEY, KEY);
    connect_through(RELAY_FLIP_SEALED, PDX_ERR_AUTH);
    cr_expect(atomic_load(&relay.tampered));
    wait_refused(pf.e, 1, "the acceptor");
    wait_refused(dc.e, 1, "the connector");
}

/* After the handshake, a plaintext frame put in, or a sealed one sent
 * twice: the peer is failed for it, on both sides, and nothing else. */
static void tampered_after_ready(relay_mode_t mode)
{
    uint32_t peer;

    open_pair(KEY, KEY);
    peer = connect_through(mode, PDX_OK);
    room_moves(peer, 12);
    atomic_store(&relay.armed, 1); /* heartbeats come every 100 ms */
    wait_refused(pf.e, 1, "the acceptor");
    wait_no_peers(pf.e);
    wait_no_peers(dc.e); /* told so, or its endpoints closed first */
    cr_expect(atomic_load(&relay.tampered));
    cr_expect_eq(pdx_expect(dc.e, peer, 13, dc.layout, &(pdx_pages_t){(uint32_t[]){1}, 1}, NULL,
                            1, 1000), PDX_ERR_PEER);
    /* a direct connection is served */
    room_moves(side_connect(&dc, &pf), 14);
}

Test(engine_auth, an_injected_frame_is_refused, .fini = fini, .timeout = 60)
{
    tampered_after_ready(RELAY_INJECT_PLAIN);
}

Test(engine_auth, a_repeated_frame_is_refused, .fini = fini, .timeout = 60)
{
    tampered_after_ready(RELAY_REPEAT_SEALED);
}
