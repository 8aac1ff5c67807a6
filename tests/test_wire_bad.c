/*
 * wire, hostile input, message by message: strings, counts and lengths
 * above their limits and counts that disagree with the body. Each
 * hand-built frame is first checked to decode before one field of it is
 * broken, so every rejection below is the one the test names. Encoders
 * given bad fields are in test_wire_encode.c, mutated frames in
 * test_wire_fuzz.c.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "wire_samples.h"


static void expect_ok(uint16_t type, bld_t *body)
{
    size_t len;
    uint8_t *f = frame_of(type, body, &len);
    const char *why;
    pdx_status_t st = decode_copy(f, len, &why);

    cr_assert_eq(st, PDX_OK, "hand-built %s does not decode: %s", pdx_wire_type_str(type),
                 why ? why : "");
    free(f);
}

/* ------------------------------------------------------------------- HELLO */

static void hello_head(bld_t *b, uint32_t version, uint32_t nshards, const char *host,
                       size_t host_len, size_t tp_len)
{
    put(b, version, 4);
    put(b, 0x5, 8);
    for (int i = 0; i < PDX_WIRE_ID_SIZE; i++)
        put(b, (uint64_t)i, 1);
    put(b, nshards, 4);
    put_str(b, host, host_len);
    put_str(b, "tcptcptcptcptcptcptcptcptcptcptcptcp", tp_len);
}

/* A HELLO of this version: the head, then 2 NICs, port 5555, a host id and
 * a GPU. */
static void hello_body(bld_t *b, uint32_t version, uint32_t nshards, const char *host,
                       size_t host_len, size_t tp_len)
{
    hello_head(b, version, nshards, host, host_len, tp_len);
    put(b, 2, 4);
    put(b, 5555, 4);
    for (int i = 0; i < PDX_WIRE_HOST_ID_SIZE; i++)
        put(b, (uint64_t)(0x40 + i), 1);
    put_str(b, "0000:c1:00.0", 12);
}

Test(wire_bad, hello_limits)
{
    char h65[PDX_WIRE_HOST_MAX + 1];
    bld_t b = {0};
    pdx_wire_msg_t msg;
    uint8_t *f;
    size_t len;

    memset(h65, 'h', sizeof(h65));

    hello_body(&b, PDX_PROTOCOL_VERSION, 4, h65, 64, 32);
    expect_ok(PDX_WIRE_HELLO, &b);
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, h65, 65, 3);
    expect_proto(PDX_WIRE_HELLO, &b, "string above its limit");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, h65, 4, 33);
    expect_proto(PDX_WIRE_HELLO, &b, "string above its limit");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "ho\0st", 5, 3);
    expect_proto(PDX_WIRE_HELLO, &b, "NUL byte");
    hello_body(&b, PDX_PROTOCOL_VERSION, 0, "host", 4, 3);
    expect_proto(PDX_WIRE_HELLO, &b, "shard count");
    hello_body(&b, PDX_PROTOCOL_VERSION, PDX_WIRE_MAX_SHARDS + 1, "host", 4, 3);
    expect_proto(PDX_WIRE_HELLO, &b, "shard count");
    /* the NIC count */
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 0, 4);
    put(&b, 5555, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "NIC count");
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, PDX_WIRE_MAX_NICS + 1, 4);
    put(&b, 5555, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "NIC count");
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 2);
    expect_proto(PDX_WIRE_HELLO, &b, "truncated HELLO");
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "truncated HELLO");
    /* the port */
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 4);
    put(&b, 0, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "HELLO port");
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 4);
    put(&b, 65536, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "HELLO port");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 0, 1);
    expect_proto(PDX_WIRE_HELLO, &b, "bytes after the HELLO");
    /* the host id, whole or not at all */
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 4);
    put(&b, 5555, 4);
    expect_proto(PDX_WIRE_HELLO, &b, "truncated HELLO");
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 1, 4);
    put(&b, 5555, 4);
    for (int i = 0; i < PDX_WIRE_HOST_ID_SIZE - 1; i++)
        put(&b, 0, 1);
    expect_proto(PDX_WIRE_HELLO, &b, "truncated HELLO");
    /* the GPU: present (version 10), a bus id at most PDX_WIRE_GPU_MAX bytes */
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    b.len -= 14;
    expect_proto(PDX_WIRE_HELLO, &b, "truncated string");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    b.len -= 14;
    put_str(&b, "0000:c1:00.0-0000:c1:00.0-0000:c", PDX_WIRE_GPU_MAX + 1);
    expect_proto(PDX_WIRE_HELLO, &b, "string above its limit");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    b.len -= 14;
    put_str(&b, "", 0);
    f = frame_of(PDX_WIRE_HELLO, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    cr_assert_str_eq(msg.u.hello.gpu, "");
    free(f);
    /* another version, without a NIC count (or with one out of range) */
    hello_head(&b, PDX_PROTOCOL_VERSION + 1, 4, "host", 4, 3);
    put(&b, 0, 4);
    f = frame_of(PDX_WIRE_HELLO, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    free(f);
    hello_head(&b, 3, 4, "host", 4, 3);
    f = frame_of(PDX_WIRE_HELLO, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    cr_assert_eq(msg.u.hello.version, 3);
    cr_assert_eq(msg.u.hello.nics, 1);
    free(f);
    /* a host length far beyond the bytes present */
    hello_head(&b, PDX_PROTOCOL_VERSION, 4, "", 0, 0);
    b.len -= 4;
    put(&b, 0xffff, 2);
    put(&b, 'h', 1);
    expect_proto(PDX_WIRE_HELLO, &b, "truncated string");
    hello_body(&b, PDX_PROTOCOL_VERSION, 4, "host", 4, 3);
    put(&b, 0, 1);
    expect_proto(PDX_WIRE_HELLO, &b, "bytes after the HELLO");

    /* Another version may append fields: it decodes, and the handshake compares. */
    hello_body(&b, PDX_PROTOCOL_VERSION + 1, 4, "host", 4, 3);
    put(&b, 0xabcdef, 8);
    f = frame_of(PDX_WIRE_HELLO, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    cr_assert_eq(msg.u.hello.version, PDX_PROTOCOL_VERSION + 1);
    cr_assert_str_eq(msg.u.hello.host, "host");
    cr_assert_str_eq(msg.u.hello.transport, "tcp");
    free(f);
}

/* --------------------------------------------------------------------- MEM */

static void mem_body(bld_t *b, uint32_t count, uint32_t present, uint64_t addr, uint64_t len)
{
    put(b, count, 4);
    for (uint32_t i = 0; i < present; i++) {
        put(b, i, 4);
        put(b, i % 2, 4); /* NIC */
        put(b, addr, 8);
        put(b, len, 8);
        put(b, 0x1234, 4);
        put(b, 1, 4); /* one piece */
    }
}

/* One region of len bytes in npieces of piece bytes; keys rkeys after the first. */
static void mem_pieces_body(bld_t *b, uint64_t len, uint32_t npieces, uint64_t piece,
                            uint32_t keys)
{
    put(b, 1, 4);
    put(b, 3, 4);
    put(b, 0, 4);
    put(b, 0x10000, 8);
    put(b, len, 8);
    put(b, 0x1234, 4);
    put(b, npieces, 4);
    if (npieces > 1)
        put(b, piece, 8);
    for (uint32_t i = 0; i < keys; i++)
        put(b, 0x2000 + i, 4);
}

Test(wire_bad, mem_counts_and_regions)
{
    bld_t b = {0};

    mem_body(&b, 3, 3, 0x1000, 0x1000);
    expect_ok(PDX_WIRE_MEM, &b);
    mem_body(&b, 0, 0, 0, 0);
    expect_ok(PDX_WIRE_MEM, &b);
    mem_body(&b, 2, 3, 0x1000, 0x1000);
    expect_proto(PDX_WIRE_MEM, &b, "disagrees");
    mem_body(&b, 3, 2, 0x1000, 0x1000);
    expect_proto(PDX_WIRE_MEM, &b, "disagrees");
    mem_body(&b, PDX_WIRE_MAX_MEMS + 1, 1, 0x1000, 0x1000);
    expect_proto(PDX_WIRE_MEM, &b, "above PDX_WIRE_MAX_MEMS");
    mem_body(&b, UINT32_MAX, 0, 0, 0);
    expect_proto(PDX_WIRE_MEM, &b, "above PDX_WIRE_MAX_MEMS");
    /* the body itself is too long: more than the largest MEM, every key allowed */
    mem_body(&b, PDX_WIRE_MAX_MEMS, (PDX_WIRE_MAX_MEMS * 40 + PDX_WIRE_MAX_MEM_KEYS * 4) / 32 + 1,
             0x1000, 0x1000);
    expect_proto(PDX_WIRE_MEM, &b, "bounds");
    mem_body(&b, 1, 1, 0x1000, 0);
    expect_proto(PDX_WIRE_MEM, &b, "empty, wrapping");
    mem_body(&b, 1, 1, UINT64_MAX - 10, 11);
    expect_proto(PDX_WIRE_MEM, &b, "empty, wrapping");
    put(&b, 1, 4);
    put(&b, 0, 4);
    put(&b, PDX_WIRE_MAX_NICS, 4); /* the entry's NIC */
    put(&b, 0x1000, 8);
    put(&b, 0x1000, 8);
    put(&b, 0x1234, 4);
    put(&b, 1, 4);
    expect_proto(PDX_WIRE_MEM, &b, "MEM NIC");

    /* regions in pieces */
    mem_pieces_body(&b, 3u << 20, 3, 1u << 20, 2);
    expect_ok(PDX_WIRE_MEM, &b);
    mem_pieces_body(&b, (2u << 20) + 1, 3, 1u << 20, 2);
    expect_ok(PDX_WIRE_MEM, &b);
    mem_pieces_body(&b, 3u << 20, 0, 0, 0);
    expect_proto(PDX_WIRE_MEM, &b, "pieces inconsistent");
    mem_pieces_body(&b, 3u << 20, 2, 1u << 20, 1);          /* 3 needed */
    expect_proto(PDX_WIRE_MEM, &b, "pieces inconsistent");
    mem_pieces_body(&b, 3u << 20, 4, 1u << 20, 3);          /* one too many */
    expect_proto(PDX_WIRE_MEM, &b, "pieces inconsistent");
    mem_pieces_body(&b, 3u << 20, 2, 3u << 19, 1);          /* not a power of two */
    expect_proto(PDX_WIRE_MEM, &b, "pieces inconsistent");
    mem_pieces_body(&b, 3u << 20, 3, 1u << 20, 1);          /* a key missing */
    expect_proto(PDX_WIRE_MEM, &b, "beyond the limit or the body");
    mem_pieces_body(&b, 3u << 20, 3, 1u << 20, 3);          /* a key too many */
    expect_proto(PDX_WIRE_MEM, &b, "disagrees");
    mem_pieces_body(&b, 1ull << 40, PDX_TP_PIECES_MAX + 1, 1ull << 30, 0);
    expect_proto(PDX_WIRE_MEM, &b, "beyond the limit or the body");
    mem_pieces_body(&b, 3u << 20, 3, 1u << 20, 0);          /* truncated at the piece size */
    b.len -= 8;
    expect_proto(PDX_WIRE_MEM, &b, "truncated");
}

/* ---------------------------------------------------------------------- EP */

static void ep_body(bld_t *b, uint32_t shard, uint32_t addr_len, uint32_t present)
{
    put(b, shard, 4);
    put(b, 1, 4);
    put(b, 7, 4); /* epoch */
    put(b, addr_len, 4);
    for (uint32_t i = 0; i < present; i++)
        put(b, i, 1);
}

Test(wire_bad, ep_limits)
{
    bld_t b = {0};

    ep_body(&b, 0, PDX_TP_ADDR_MAX, PDX_TP_ADDR_MAX);
    expect_ok(PDX_WIRE_EP, &b);
    ep_body(&b, 0, PDX_TP_ADDR_MAX + 1, PDX_TP_ADDR_MAX + 1);
    expect_proto(PDX_WIRE_EP, &b, "bounds");
    ep_body(&b, 0, PDX_TP_ADDR_MAX + 1, PDX_TP_ADDR_MAX);
    expect_proto(PDX_WIRE_EP, &b, "above PDX_TP_ADDR_MAX");
    ep_body(&b, 0, UINT32_MAX, 8);
    expect_proto(PDX_WIRE_EP, &b, "above PDX_TP_ADDR_MAX");
    ep_body(&b, 0, 10, 12);
    expect_proto(PDX_WIRE_EP, &b, "disagrees");
    ep_body(&b, 0, 10, 8);
    expect_proto(PDX_WIRE_EP, &b, "disagrees");
    ep_body(&b, PDX_WIRE_MAX_SHARDS, 4, 4);
    expect_proto(PDX_WIRE_EP, &b, "shard");
}

/* ------------------------------------------------------------------- RESET */

static void reset_body(bld_t *b, int32_t status, const char *reason, size_t n, bool trailing)
{
    put(b, 3, 4);
    put(b, 1, 4);
    put(b, 2, 4);
    put(b, (uint32_t)status, 4);
    put_str(b, reason, n);
    if (trailing)
        put(b, 0, 1);
}

Test(wire_bad, reset_fields)
{
    bld_t b = {0};

    reset_body(&b, PDX_ERR_PEER, "why", 3, false);
    expect_ok(PDX_WIRE_RESET, &b);
    reset_body(&b, PDX_OK, "why", 3, false);
    expect_proto(PDX_WIRE_RESET, &b, "not an error");
    reset_body(&b, PDX_ERR_PEER, "why", 3, true);
    expect_proto(PDX_WIRE_RESET, &b, "after the RESET reason");
    put(&b, 3, 4);
    put(&b, 1, 4);
    put(&b, 2, 4);
    put(&b, (uint32_t)PDX_ERR_PEER, 4);
    put(&b, 10, 2); /* a 10-byte reason of which 3 bytes are there */
    put(&b, 'w', 1);
    put(&b, 'h', 1);
    put(&b, 'y', 1);
    expect_proto(PDX_WIRE_RESET, &b, "truncated string");
}

/* --------------------------------------------------------------------- BYE */

Test(wire_bad, bye_fields)
{
    char long_reason[PDX_WIRE_REASON_MAX + 2];
    pdx_wire_bye_t too_long;
    uint8_t buf[1024];
    bld_t b = {0};
    size_t len;

    put_str(&b, "engine destroyed", 16);
    expect_ok(PDX_WIRE_BYE, &b);
    put_str(&b, "", 0);
    expect_ok(PDX_WIRE_BYE, &b);
    put_str(&b, "why", 3);
    put(&b, 0, 1);
    expect_proto(PDX_WIRE_BYE, &b, "after the BYE reason");
    put(&b, 10, 2); /* a 10-byte reason of which 2 bytes are there */
    put(&b, 'n', 1);
    put(&b, 'o', 1);
    expect_proto(PDX_WIRE_BYE, &b, "truncated string");
    put_str(&b, "b\0ye", 4);
    expect_proto(PDX_WIRE_BYE, &b, "NUL byte");
    put_str(&b, "one\nline", 8);
    expect_proto(PDX_WIRE_BYE, &b, "control character");
    put_str(&b, "esc\033[2J", 7);
    expect_proto(PDX_WIRE_BYE, &b, "control character");
    memset(long_reason, 'r', sizeof(long_reason));
    put_str(&b, long_reason, PDX_WIRE_REASON_MAX + 1);
    expect_proto(PDX_WIRE_BYE, &b, "outside the bounds of its type");
    memset(too_long.reason, 'r', sizeof(too_long.reason));
    cr_assert_eq(pdx_wire_encode_bye(&too_long, buf, sizeof(buf), &len), PDX_ERR_INVALID);
}

/* -------------------------------------------------------------------- ROOM */

typedef struct room_spec {
    uint32_t nsenders, flags, aux_mem;
    uint64_t aux_offset, aux_len;
    uint32_t ngroups;             /* the field */
    uint32_t nlists;              /* page lists present */
    uint32_t count[3];            /* per list: the count field */
    uint32_t present[3];          /* per list: pages present */
} room_spec_t;

static const room_spec_t room_ok = {2, PDX_WIRE_ROOM_AUX, 1, 64, 128, 3, 3, {4, 0, 2}, {4, 0, 2}};

static void room_body(bld_t *b, const room_spec_t *s)
{
    put(b, 0x99, 8);
    put(b, 1, 4);
    put(b, s->nsenders, 4);
    put(b, 1000, 4);
    put(b, s->flags, 4);
    put(b, s->aux_mem, 4);
    put(b, s->aux_offset, 8);
    put(b, s->aux_len, 8);
    put(b, s->ngroups, 4);
    for (uint32_t g = 0; g < s->nlists; g++) {
        put(b, s->count[g], 4);
        for (uint32_t i = 0; i < s->present[g]; i++)
            put(b, i, 4);
    }
}

static void room_case(bld_t *b, room_spec_t s, const char *reason)
{
    room_body(b, &s);
    if (reason)
        expect_proto(PDX_WIRE_ROOM, b, reason);
    else
        expect_ok(PDX_WIRE_ROOM, b);
}

Test(wire_bad, room_limits_and_counts)
{
    uint32_t half = PDX_WIRE_MAX_ROOM_PAGES / 2;
    bld_t b = {0};
    room_spec_t s;

    room_case(&b, room_ok, NULL);
    s = room_ok, s.flags = 0, s.aux_mem = 0, s.aux_offset = 0, s.aux_len = 0;
    room_case(&b, s, NULL);
    s = room_ok, s.ngroups = 0, s.nlists = 0;
    room_case(&b, s, "bounds");   /* shorter than any ROOM */
    s = room_ok, s.ngroups = 0;
    room_case(&b, s, "group count outside");
    s = room_ok, s.ngroups = PDX_LAYOUT_MAX_GROUPS + 1;
    room_case(&b, s, "group count outside");
    s = room_ok, s.nsenders = 0;
    room_case(&b, s, "sender count");
    s = room_ok, s.nsenders = PDX_WIRE_MAX_SENDERS + 1;
    room_case(&b, s, "sender count");
    s = room_ok, s.flags |= PDX_WIRE_ROOM_VERIFY;
    room_case(&b, s, NULL);
    s = room_ok, s.flags = 4;
    room_case(&b, s, "unknown flags");
    s = room_ok, s.flags = 0;
    room_case(&b, s, "without its flag");
    s = room_ok, s.aux_len = 0;
    room_case(&b, s, "empty or wrapping");
    s = room_ok, s.aux_offset = UINT64_MAX;
    room_case(&b, s, "empty or wrapping");
    s = room_ok, s.nlists = 2;
    room_case(&b, s, "group count disagrees");
    s = room_ok, s.count[2] = 3;
    room_case(&b, s, "page count disagrees");
    s = room_ok, s.count[0] = 3;   /* group 1's count is read from a page */
    room_case(&b, s, "page count disagrees");
    s = room_ok, s.count[2] = 1;
    room_case(&b, s, "bytes after the last ROOM");
    s = room_ok, s.count[1] = UINT32_MAX;
    room_case(&b, s, "above PDX_WIRE_MAX_ROOM_PAGES");
    /* Pages above the limit with every byte present (the frame itself fits). */
    s = (room_spec_t){1, 0, 0, 0, 0, 2, 2, {half, half + 1}, {half, half + 1}};
    room_case(&b, s, "above PDX_WIRE_MAX_ROOM_PAGES");
    s.count[1] = s.present[1] = half;
    room_case(&b, s, NULL);
}

/* ------------------------------------------------------------ ABORT, ERROR */

/* room, status, a string length field and `present` bytes cycling through str[0..3). */
static void rss_body(bld_t *b, int32_t status, const char str[3], size_t len_field,
                     size_t present)
{
    put(b, 5, 8);
    put(b, (uint32_t)status, 4);
    put(b, len_field, 2);
    for (size_t i = 0; i < present; i++)
        put(b, (uint8_t)str[i % 3], 1);
}

Test(wire_bad, abort_and_error_limits)
{
    static const uint16_t types[] = {PDX_WIRE_ABORT, PDX_WIRE_ERROR};

    for (size_t t = 0; t < PDX_ARRAY_SIZE(types); t++) {
        bld_t b = {0};

        rss_body(&b, PDX_ERR_ABORTED, "why", 256, 256);
        expect_ok(types[t], &b);
        rss_body(&b, PDX_OK, "why", 3, 3);
        expect_proto(types[t], &b, "not an error");
        rss_body(&b, 7, "why", 3, 3);
        expect_proto(types[t], &b, "not an error");
        rss_body(&b, PDX_ERR_IO, "why", 257, 257);
        expect_proto(types[t], &b, "bounds");
        rss_body(&b, PDX_ERR_IO, "why", 257, 256);
        expect_proto(types[t], &b, "truncated string");
        rss_body(&b, PDX_ERR_IO, "why", 4, 3);
        expect_proto(types[t], &b, "truncated string");
        rss_body(&b, PDX_ERR_IO, "why", 2, 3);
        expect_proto(types[t], &b, "bytes after");
        rss_body(&b, PDX_ERR_IO, "a\0b", 3, 3);
        expect_proto(types[t], &b, "NUL byte");
    }
}

/* ------------------------------------------------------------------ LAYOUT */

typedef struct group_spec {
    uint32_t flags, bpl, nb;
    uint64_t npages;
    uint32_t present;             /* buffers present */
    uint64_t offset, bpp;
} group_spec_t;

typedef struct layout_spec {
    uint32_t     ngroups, begin, end;
    uint32_t     nlists;          /* groups present */
    group_spec_t g[2];
} layout_spec_t;

/* Two layers, a K/V group and a group without layers. */
static const layout_spec_t layout_ok = {
    2, 10, 12, 2, {{0, 2, 4, 10, 4, 0, 4096}, {PDX_GROUP_NO_LAYERS, 3, 3, 5, 3, 64, 512}},
};

static void layout_case(layout_spec_t s, const char *reason)
{
    bld_t b = {0};

    put(&b, 3, 4);
    put(&b, s.ngroups, 4);
    put(&b, s.begin, 4);
    put(&b, s.end, 4);
    for (uint32_t g = 0; g < s.nlists; g++) {
        put(&b, s.g[g].flags, 4);
        put(&b, s.g[g].bpl, 4);
        put(&b, s.g[g].nb, 4);
        put(&b, s.g[g].npages, 8);
        for (uint32_t i = 0; i < s.g[g].present; i++) {
            put(&b, i, 4);
            put(&b, s.g[g].offset, 8);
            put(&b, s.g[g].bpp, 8);
        }
    }
    if (reason)
        expect_proto(PDX_WIRE_LAYOUT, &b, reason);
    else
        expect_ok(PDX_WIRE_LAYOUT, &b);
}

Test(wire_bad, layout_counts_disagree_with_the_body)
{
    layout_spec_t s;

    layout_case(layout_ok, NULL);
    s = layout_ok, s.ngroups = 3;
    layout_case(s, "group count disagrees");
    s = layout_ok, s.ngroups = 1;
    layout_case(s, "bytes after the last LAYOUT group");
    s = layout_ok, s.g[1].present = 2;
    layout_case(s, "buffer count disagrees");
    s = layout_ok, s.g[1].nb = s.g[1].bpl = PDX_LAYOUT_MAX_BUFFERS;
    layout_case(s, "buffer count disagrees");
    s = layout_ok, s.g[0].present = 3;   /* group 1 starts inside group 0's buffers */
    layout_case(s, "LAYOUT");
    s = layout_ok, s.g[1].present = 4;
    layout_case(s, "bytes after the last LAYOUT group");
    s = layout_ok, s.g[0].nb = s.g[0].present = 5;
    layout_case(s, "layers x buffers_per_layer");
    s = layout_ok, s.g[0].bpl = 3;
    layout_case(s, "layers x buffers_per_layer");
    s = layout_ok, s.g[1].bpl = 2;
    layout_case(s, "buffers_per_layer != nbuffers");
}

Test(wire_bad, layout_limits)
{
    layout_spec_t s;

    s = layout_ok, s.ngroups = 0, s.nlists = 0;
    layout_case(s, "bounds");   /* shorter than any LAYOUT */
    s = layout_ok, s.ngroups = 0;
    layout_case(s, "group count outside");
    s = layout_ok, s.ngroups = PDX_LAYOUT_MAX_GROUPS + 1;
    layout_case(s, "group count outside");
    s = layout_ok, s.end = s.begin;
    layout_case(s, "layer range");
    s = layout_ok, s.end = s.begin - 1;
    layout_case(s, "layer range");
    s = layout_ok, s.begin = 0, s.end = PDX_LAYOUT_MAX_LAYERS + 1;
    layout_case(s, "layer range");
    s = layout_ok, s.g[1].nb = s.g[1].bpl = s.g[1].present = 0;
    layout_case(s, "buffer count outside");
    s = layout_ok, s.g[1].nb = s.g[1].bpl = s.g[1].present = PDX_LAYOUT_MAX_BUFFERS + 1;
    layout_case(s, "buffer count outside");
    s = layout_ok, s.g[0].npages = 0;
    layout_case(s, "page count outside");
    s = layout_ok, s.g[0].npages = 1ull << 32;
    layout_case(s, "page count outside");
    s = layout_ok, s.g[1].bpp = 0;
    layout_case(s, "page size 0");
    s = layout_ok, s.g[1].offset = UINT64_MAX - 100, s.g[1].bpp = 64;
    layout_case(s, "overflows");
    s = layout_ok, s.g[0].flags = 1u << 2;
    layout_case(s, "unknown flags");
}

/* ------------------------------------------------------------------ EXPORT */

Test(wire_bad, export_limits)
{
    bld_t b = {0};
    pdx_wire_msg_t msg;
    uint8_t *f;
    size_t len;

    b.len = 0;
    put(&b, 7, 4);
    put(&b, 3, 4);
    put(&b, 0xabcdef, 3);
    f = frame_of(PDX_WIRE_EXPORT, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    cr_assert_eq(msg.u.export.mem, 7);
    cr_assert_eq(msg.u.export.len, 3);
    cr_assert_eq(msg.u.export.bytes[0], 0xef);
    free(f);
    /* a length unlike the body, 0, or above PDX_TP_EXPORT_MAX */
    b.len = 0;
    put(&b, 7, 4);
    put(&b, 4, 4);
    put(&b, 0xabcdef, 3);
    expect_proto(PDX_WIRE_EXPORT, &b, "EXPORT length");
    b.len = 0;
    put(&b, 7, 4);
    put(&b, 0, 4);
    put(&b, 0, 1);
    expect_proto(PDX_WIRE_EXPORT, &b, "EXPORT length");
    b.len = 0;
    put(&b, 7, 4);
    put(&b, PDX_TP_EXPORT_MAX + 1, 4);
    for (int i = 0; i < PDX_TP_EXPORT_MAX; i++)
        put(&b, 1, 1);
    expect_proto(PDX_WIRE_EXPORT, &b, "EXPORT length");
    /* a body past the type's bound: the header is refused */
    b.len = 0;
    put(&b, 7, 4);
    put(&b, PDX_TP_EXPORT_MAX, 4);
    for (int i = 0; i < PDX_TP_EXPORT_MAX + 1; i++)
        put(&b, 1, 1);
    f = frame_of(PDX_WIRE_EXPORT, &b, &len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_ERR_PROTO);
    free(f);
}
