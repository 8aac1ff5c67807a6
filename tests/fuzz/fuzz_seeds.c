/*
 * fuzz_seeds DIR: the fuzz targets' seed corpus, from real engines. Two
 * pairs of engines on 127.0.0.1 (tcp), one without a key and one with, talk
 * through a relay that records their control streams: handshake, a room, an
 * abort, heartbeats. Writes DIR/ctrl (both streams of both pairs, and each
 * frame of the plain ones), DIR/tcp_addr (the endpoint addresses in their
 * EP messages), DIR/desc (engine and memory descriptors), DIR/notify and
 * DIR/tcp_frames (what a tcp endpoint's peer sends after its HELLO, in
 * fuzz_tcp_frames' terms: addresses from the region's byte 0, rkey 0).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pdx/pdx.h>

#include "proto.h"
#include "relay.h"
#include "util.h"
#include "wire.h"

#define CHECK(c)                                                        \
    do {                                                                \
        if (!(c)) {                                                     \
            fprintf(stderr, "fuzz_seeds: %s:%d: %s\n", __FILE__, __LINE__, #c); \
            exit(1);                                                    \
        }                                                               \
    } while (0)

static const char *dir;
static unsigned nfiles;

static void put(const char *sub, const char *name, const void *p, size_t n)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    CHECK(mkdir(path, 0755) == 0 || errno == EEXIST);
    snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
    f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
    nfiles++;
}

typedef struct side {
    pdx_engine_t *e;
    uint8_t      *pool;
    uint32_t      mem, layout;
} side_t;

static void side_open(side_t *s, const char *key)
{
    pdx_buffer_desc_t buf = {.bytes_per_page = 256};
    pdx_group_desc_t g = {.buffers_per_layer = 1, .nbuffers = 1, .npages = 16, .buffers = &buf};
    pdx_layout_desc_t l = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                           .ngroups = 1, .layer_begin = 0, .layer_end = 1, .groups = &g};
    pdx_config_t cfg;

    CHECK(pdx_config_init(&cfg) == PDX_OK);
    CHECK(pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0") == PDX_OK);
    CHECK(pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp") == PDX_OK);
    CHECK(pdx_config_set(&cfg, "PDX_SHARDS", "2") == PDX_OK);
    CHECK(pdx_config_set(&cfg, "PDX_HEARTBEAT_MS", "20") == PDX_OK);
    if (key)
        CHECK(pdx_config_set(&cfg, "PDX_AUTH_KEY", key) == PDX_OK);
    CHECK(pdx_engine_create(&cfg, &s->e) == PDX_OK);
    s->pool = calloc(1, 16 * 256);
    CHECK(s->pool && pdx_mem_register(s->e, s->pool, 16 * 256, &s->mem) == PDX_OK);
    buf.mem = s->mem;
    CHECK(pdx_layout_create(s->e, &l, &s->layout) == PDX_OK);
}

static void side_close(side_t *s)
{
    pdx_engine_destroy(s->e);
    free(s->pool);
}

static pdx_room_state_t wait_state(pdx_engine_t *e, uint64_t room)
{
    pdx_room_state_t st = PDX_ROOM_NONE;

    for (int i = 0; i < 5000; i++) {
        st = pdx_poll(e, room);
        if (st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED)
            break;
        usleep(1000);
    }
    return st;
}

static void release(pdx_engine_t *e, uint64_t room)
{
    for (int i = 0; i < 5000 && pdx_release(e, room) == PDX_INPROGRESS; i++)
        usleep(1000);
}

/* A pair through a relay: a room, an aborted room, some heartbeats. */
static void record(relay_t *r, const char *key)
{
    uint32_t pages[3] = {1, 4, 9}, peer;
    pdx_pages_t p = {pages, 3};
    side_t pf, dc;
    char addr[64];

    side_open(&pf, key);
    side_open(&dc, key);
    relay_start(r, RELAY_PLAIN, pdx_engine_address(pf.e));
    CHECK(pdx_peer_connect(dc.e, relay_addr(r, addr, sizeof(addr)), 5000, &peer) == PDX_OK);
    CHECK(pdx_expect(dc.e, peer, 1, dc.layout, &p, NULL, 1, 5000) == PDX_OK);
    CHECK(pdx_send(pf.e, 1, pf.layout, &p, NULL, NULL, PDX_SEND_LAST) == PDX_OK);
    CHECK(wait_state(dc.e, 1) == PDX_ROOM_SUCCESS && wait_state(pf.e, 1) == PDX_ROOM_SUCCESS);
    CHECK(pdx_expect(dc.e, peer, 2, dc.layout, &p, NULL, 1, 5000) == PDX_OK);
    CHECK(pdx_abort(dc.e, 2) == PDX_OK);
    wait_state(dc.e, 2);
    wait_state(pf.e, 2);
    usleep(100000); /* heartbeats */
    release(dc.e, 1);
    release(pf.e, 1);
    release(dc.e, 2);
    release(pf.e, 2);
    side_close(&dc);
    side_close(&pf);
    relay_stop(r);
}

/* Each frame of a stream, and each EP's address, as a seed of its own. */
static void split(const uint8_t *s, size_t len, const char *tag)
{
    char name[64];
    unsigned i = 0;

    for (size_t off = 0; off < len; i++) {
        pdx_wire_header_t h;
        pdx_wire_msg_t m;
        size_t need;

        if (pdx_wire_peek(s + off, len - off, &h, &need, NULL) != PDX_OK)
            break;
        snprintf(name, sizeof(name), "%s-%03u-%s", tag, i, pdx_wire_type_str(h.type));
        put("ctrl", name, s + off, need);
        if (h.type == PDX_WIRE_EP && pdx_wire_decode(s + off, need, &m, NULL) == PDX_OK) {
            put("tcp_addr", name, m.u.ep.addr.bytes, m.u.ep.addr.len);
            pdx_wire_msg_free(&m);
        }
        off += need;
    }
}

static void descriptors(void)
{
    uint8_t buf[PDX_MEM_DESC_MAX > PDX_ENGINE_DESC_MAX ? PDX_MEM_DESC_MAX : PDX_ENGINE_DESC_MAX];
    size_t len;
    side_t s;

    side_open(&s, NULL);
    CHECK(pdx_engine_desc(s.e, buf, sizeof(buf), &len) == PDX_OK);
    put("desc", "engine", buf, len);
    CHECK(pdx_mem_desc(s.e, s.mem, buf, sizeof(buf), &len) == PDX_OK);
    put("desc", "mem", buf, len);
    side_close(&s);
}

static void notifies(void)
{
    static const pdx_wire_notify_t n[] = {
        {.room = 7, .sender = 0x1122334455667788ull, .seq = 0, .flags = 0, .count = 12},
        {.room = 7, .sender = 1, .seq = 3, .flags = PDX_WIRE_NOTIFY_LAST, .count = 2},
        {.room = 9, .sender = 1, .seq = 0,
         .flags = PDX_WIRE_NOTIFY_STATUS_ONLY | PDX_WIRE_NOTIFY_LAST, .status = PDX_ERR_ABORTED},
        {.flags = PDX_WIRE_NOTIFY_CREDIT, .count = 64},
        {.room = 7, .sender = 1, .seq = 4, .count = 2, .sum = 0x9e3779b97f4a7c15ull,
         .flags = PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_SUM | PDX_WIRE_NOTIFY_AUX,
         .layer_begin = 0, .layer_end = 61},
        {.room = 7, .sender = 1, .seq = 1, .count = 9, .flags = PDX_WIRE_NOTIFY_LAYERS,
         .layer_begin = 5, .layer_end = 6, .cover_begin = 0, .cover_end = 61, .pages = 64},
    };
    uint8_t buf[PDX_WIRE_NOTIFY_LAYERS_SIZE];
    char name[32];
    size_t len;

    for (size_t i = 0; i < PDX_ARRAY_SIZE(n); i++) {
        CHECK(pdx_wire_notify_encode(&n[i], buf, sizeof(buf), &len) == PDX_OK);
        snprintf(name, sizeof(name), "notify-%zu", i);
        put("notify", name, buf, len);
    }
}

/* Frames into a buffer: a header, then len payload bytes when it has them. */
static size_t frame(uint8_t *buf, size_t at, tcp_frame_type_t type, uint32_t arg, uint64_t seq,
                    uint64_t addr, uint64_t len, bool payload)
{
    tcp_hdr_t h;

    tcp_hdr_encode(&h, type, arg, seq, addr, len);
    memcpy(buf + at, &h, sizeof(h));
    at += sizeof(h);
    if (payload) {
        for (uint64_t i = 0; i < len; i++)
            buf[at + i] = (uint8_t)(i * 7 + seq);
        at += len;
    }
    return at;
}

static void tcp_frames(void)
{
    static uint8_t b[64 << 10];
    size_t n;

    /* a WRITE, a SEND, a READ, an ACK: all in order */
    n = frame(b, 0, TCP_FR_WRITE, 0, 0, 0, 576, true);
    n = frame(b, n, TCP_FR_SEND, 0, 1, 0, 24, true);
    n = frame(b, n, TCP_FR_READ, 0, 2, 4096, 512, false);
    n = frame(b, n, TCP_FR_ACK, 0, 0, 0, 0, false);
    put("tcp_frames", "write-send-read-ack", b, n);
    /* many small WRITEs, as a page-1 request sends them */
    n = 0;
    for (uint64_t i = 0; i < 64; i++)
        n = frame(b, n, TCP_FR_WRITE, 0, i, (i * 977 % 113) * 576, 576, true);
    put("tcp_frames", "small-writes", b, n);
    /* a WRITE past the region's end, another key, then one that fits */
    n = frame(b, 0, TCP_FR_WRITE, 0, 0, (64u << 10) - 16, 64, true);
    n = frame(b, n, TCP_FR_WRITE, 0x1000, 1, 0, 64, true);
    n = frame(b, n, TCP_FR_WRITE, 0, 2, 128, 64, true);
    put("tcp_frames", "write-outside", b, n);
    /* out of sequence, an ERR and RDATA nothing asked for, then FAIL */
    n = frame(b, 0, TCP_FR_WRITE, 0, 5, 0, 8, true);
    put("tcp_frames", "out-of-sequence", b, n);
    n = frame(b, 0, TCP_FR_ERR, (uint32_t)PDX_ERR_RANGE, 0, 0, 0, false);
    n = frame(b, n, TCP_FR_RDATA, 0, 0, 0, 16, true);
    put("tcp_frames", "err-rdata", b, n);
    n = frame(b, 0, TCP_FR_FAIL, (uint32_t)PDX_ERR_PEER, 0, 0, 14, false);
    memcpy(b + n, "peer went away", 14);
    put("tcp_frames", "fail", b, n + 14);
    /* a READ of the whole region, and a second HELLO */
    n = frame(b, 0, TCP_FR_READ, 0, 0, 0, 64u << 10, false);
    n = frame(b, n, TCP_FR_HELLO, TCP_PROTO_VERSION, TCP_HELLO_MAGIC, 1, 2, false);
    put("tcp_frames", "read-all-hello", b, n);
}

int main(int argc, char **argv)
{
    relay_t r;

    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds DIR\n");
        return 2;
    }
    dir = argv[1];
    CHECK(mkdir(dir, 0755) == 0 || errno == EEXIST);
    record(&r, NULL);
    put("ctrl", "stream-c2a-plain", r.rec[0], r.rec_len[0]);
    put("ctrl", "stream-a2c-plain", r.rec[1], r.rec_len[1]);
    split(r.rec[0], r.rec_len[0], "c2a");
    split(r.rec[1], r.rec_len[1], "a2c");
    relay_free(&r);
    record(&r, "a key of the seed corpus, 32 bytes");
    put("ctrl", "stream-c2a-keyed", r.rec[0], r.rec_len[0]);
    put("ctrl", "stream-a2c-keyed", r.rec[1], r.rec_len[1]);
    relay_free(&r);
    descriptors();
    notifies();
    tcp_frames();
    printf("fuzz_seeds: %u seeds in %s\n", nfiles, dir);
    return 0;
}
