/*
 * wire: round trips of every message with non-trivial contents, the exact
 * bytes of a frame and of a notify record, framing of a stream, and
 * truncation at every length. Malformed input is in test_wire_bad.c.
 */
#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "wire_samples.h"


/* -------------------------------------------------------------- round trips */

Test(wire, hello_round_trip)
{
    pdx_wire_hello_t want;
    pdx_wire_msg_t msg;
    uint8_t *f;

    sample_hello(&want);
    decode_sample(F_HELLO, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_HELLO);
    cr_assert_eq(msg.u.hello.version, want.version);
    cr_assert_eq(msg.u.hello.caps, want.caps);
    cr_assert_arr_eq(msg.u.hello.id, want.id, PDX_WIRE_ID_SIZE);
    cr_assert_eq(msg.u.hello.nshards, 8);
    cr_assert_eq(msg.u.hello.nics, 3);
    cr_assert_eq(msg.u.hello.port, 65535);
    cr_assert_arr_eq(msg.u.hello.host_id, want.host_id, PDX_WIRE_HOST_ID_SIZE);
    cr_assert_str_eq(msg.u.hello.host, want.host);
    cr_assert_str_eq(msg.u.hello.transport, "rdma");
    pdx_wire_msg_free(&msg);
    free(f);
}

Test(wire, mem_round_trip)
{
    pdx_wire_msg_t msg;
    uint8_t *f;

    decode_sample(F_MEM, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_MEM);
    cr_assert_eq(msg.u.mem.count, SAMPLE_MEMS);
    for (int i = 0; i < SAMPLE_MEMS; i++) {
        const pdx_tp_rkey_t *got = &msg.u.mem.entries[i].rkey, *want = &sample_mem_entries[i].rkey;

        cr_assert_eq(msg.u.mem.entries[i].mem, sample_mem_entries[i].mem);
        cr_assert_eq(msg.u.mem.entries[i].nic, sample_mem_entries[i].nic);
        cr_assert_eq(got->addr, want->addr);
        cr_assert_eq(got->len, want->len);
        cr_assert_eq(got->rkey, want->rkey);
        cr_assert_eq(got->npieces, want->npieces);
        cr_assert_eq(got->piece, want->piece);
        for (uint32_t p = 0; want->npieces > 1 && p < want->npieces; p++)
            cr_assert_eq(got->rkeys[p], want->rkeys[p], "entry %d piece %u", i, p);
        cr_assert_eq(pdx_tp_rkey_at(got, 0), want->rkey);
        cr_assert_eq(pdx_tp_rkey_at(got, got->len - 1), want->npieces > 1 ? 0x300u : want->rkey);
    }
    pdx_wire_msg_free(&msg);
    free(f);
}

static void assert_layout_eq(const pdx_layout_t *a, const pdx_layout_t *b)
{
    cr_assert_eq(a->ngroups, b->ngroups);
    cr_assert_eq(a->layer_begin, b->layer_begin);
    cr_assert_eq(a->layer_end, b->layer_end);
    for (uint32_t g = 0; g < a->ngroups; g++) {
        const pdx_group_t *x = &a->groups[g], *y = &b->groups[g];

        cr_assert_eq(x->flags, y->flags, "group %u", g);
        cr_assert_eq(x->buffers_per_layer, y->buffers_per_layer, "group %u", g);
        cr_assert_eq(x->nbuffers, y->nbuffers, "group %u", g);
        cr_assert_eq(x->npages, y->npages, "group %u", g);
        for (uint32_t i = 0; i < x->nbuffers; i++) {
            cr_assert_eq(x->buffers[i].mem, y->buffers[i].mem, "group %u buffer %u", g, i);
            cr_assert_eq(x->buffers[i].offset, y->buffers[i].offset, "group %u buffer %u", g, i);
            cr_assert_eq(x->buffers[i].bytes_per_page, y->buffers[i].bytes_per_page,
                         "group %u buffer %u", g, i);
        }
    }
}

Test(wire, layout_round_trip)
{
    pdx_layout_t *want = sample_layout();
    pdx_wire_msg_t msg;
    uint8_t *f;

    decode_sample(F_LAYOUT, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_LAYOUT);
    cr_assert_eq(msg.u.layout.id, 42);
    assert_layout_eq(msg.u.layout.layout, want);
    cr_assert_eq(pdx_layout_page_bytes(msg.u.layout.layout), pdx_layout_page_bytes(want));
    pdx_wire_msg_free(&msg);
    cr_assert_null(msg.u.layout.layout);
    pdx_layout_free(want);
    free(f);
}

Test(wire, layout_at_every_limit_round_trips)
{
    uint32_t nb[PDX_LAYOUT_MAX_GROUPS];
    pdx_layout_t *l;
    pdx_wire_layout_t m = {7, NULL};
    pdx_wire_msg_t msg;
    size_t cap = PDX_WIRE_MAX_FRAME, len = 0;
    uint8_t *buf = malloc(cap), *f;
    const char *why = NULL;

    for (int g = 0; g < PDX_LAYOUT_MAX_GROUPS; g++)
        nb[g] = PDX_LAYOUT_MAX_BUFFERS;
    l = pdx_layout_alloc(PDX_LAYOUT_MAX_GROUPS, nb);
    cr_assert(l && buf);
    l->layer_begin = 0;
    l->layer_end = PDX_LAYOUT_MAX_LAYERS;
    for (uint32_t g = 0; g < l->ngroups; g++) {
        l->groups[g].buffers_per_layer = 1;
        l->groups[g].npages = UINT32_MAX;
        for (uint32_t b = 0; b < nb[g]; b++)
            l->groups[g].buffers[b] = (pdx_buffer_t){g * 10000 + b, b, 1 + g};
    }
    m.layout = l;
    cr_assert_eq(pdx_wire_encode_layout(&m, buf, cap, &len), PDX_OK);
    f = exact_copy(buf, len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, &why), PDX_OK, "%s", why ? why : "");
    assert_layout_eq(msg.u.layout.layout, l);
    pdx_wire_msg_free(&msg);
    pdx_layout_free(l);
    free(f);
    free(buf);
}

Test(wire, ep_round_trip)
{
    pdx_wire_msg_t msg;
    uint8_t *f;

    decode_sample(F_EP, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_EP);
    cr_assert_eq(msg.u.ep.shard, 3);
    cr_assert_eq(msg.u.ep.index, 5);
    cr_assert_eq(msg.u.ep.epoch, 0xfffffffeu);
    cr_assert_eq(msg.u.ep.addr.len, 37);
    for (uint32_t i = 0; i < 37; i++)
        cr_assert_eq(msg.u.ep.addr.bytes[i], (uint8_t)(i * 7 + 1), "byte %u", i);
    free(f);
}

Test(wire, room_round_trip)
{
    for (int aux = 0; aux <= 1; aux++) {
        pdx_wire_room_t want;
        pdx_pages_t pages[3];
        pdx_wire_msg_t msg;
        uint32_t out[8];
        uint8_t *f;

        sample_room(&want, pages, aux);
        decode_sample(aux ? F_ROOM : F_ROOM_NOAUX, &msg, &f);
        cr_assert_eq(msg.type, PDX_WIRE_ROOM);
        cr_assert_eq(msg.u.room.room, want.room);
        cr_assert_eq(msg.u.room.layout, 2);
        cr_assert_eq(msg.u.room.nsenders, 3);
        cr_assert_eq(msg.u.room.timeout_ms, 30000);
        cr_assert_eq(msg.u.room.flags, want.flags);
        cr_assert_eq(msg.u.room.aux.mem, want.aux.mem);
        cr_assert_eq(msg.u.room.aux.offset, want.aux.offset);
        cr_assert_eq(msg.u.room.aux.len, want.aux.len);
        cr_assert_eq(msg.u.room.ngroups, 3);
        for (uint32_t g = 0; g < 3; g++) {
            cr_assert_eq(msg.u.room.npages[g], pages[g].npages, "group %u", g);
            for (uint32_t i = 0; i < pages[g].npages; i++)
                cr_assert_eq(pdx_wire_room_page(&msg.u.room, g, i), pages[g].pages[i]);
            cr_assert_eq(pdx_wire_room_copy(&msg.u.room, g, out, 8), PDX_OK);
            for (uint32_t i = 0; i < pages[g].npages; i++)
                cr_assert_eq(out[i], pages[g].pages[i]);
        }
        cr_assert_eq(pdx_wire_room_copy(&msg.u.room, 0, out, 4), PDX_ERR_RANGE);
        cr_assert_eq(pdx_wire_room_copy(&msg.u.room, 3, out, 8), PDX_ERR_INVALID);
        free(f);
    }
}

Test(wire, room_at_page_limit_round_trips)
{
    uint32_t n = PDX_WIRE_MAX_ROOM_PAGES / 2;
    uint32_t *idx = malloc(n * sizeof(*idx));
    pdx_pages_t pages[2];
    pdx_wire_room_t m = {.room = 1, .nsenders = 1, .ngroups = 2};
    size_t cap = PDX_WIRE_MAX_FRAME, len = 0;
    uint8_t *buf = malloc(cap), *f;
    pdx_wire_msg_t msg;

    cr_assert(idx && buf);
    for (uint32_t i = 0; i < n; i++)
        idx[i] = i * 3 + 1;
    pages[0] = (pdx_pages_t){idx, n};
    pages[1] = (pdx_pages_t){idx, n};
    cr_assert_eq(pdx_wire_encode_room(&m, pages, buf, cap, &len), PDX_OK);
    f = exact_copy(buf, len);
    cr_assert_eq(pdx_wire_decode(f, len, &msg, NULL), PDX_OK);
    cr_assert_eq(msg.u.room.npages[1], n);
    cr_assert_eq(pdx_wire_room_page(&msg.u.room, 1, n - 1), (n - 1) * 3 + 1);
    /* One page more is refused by the encoder. */
    pages[1].npages = n + 1;
    idx = realloc(idx, (n + 1) * sizeof(*idx));
    pages[0].pages = pages[1].pages = idx;
    cr_assert_eq(pdx_wire_encode_room(&m, pages, buf, cap, &len), PDX_ERR_INVALID);
    free(idx);
    free(f);
    free(buf);
}

Test(wire, abort_ack_heartbeat_error_round_trip)
{
    pdx_wire_msg_t msg;
    uint8_t *f;

    decode_sample(F_ABORT, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_ABORT);
    cr_assert_eq(msg.u.abort.room, 0x1122334455667788ull);
    cr_assert_eq(msg.u.abort.status, PDX_ERR_TIMEOUT);
    cr_assert_str_eq(msg.u.abort.reason, "transfer deadline passed after 3 of 4 chunks");
    free(f);

    decode_sample(F_ACK, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_ABORT_ACK);
    cr_assert_eq(msg.u.abort_ack.room, UINT64_MAX);
    free(f);

    decode_sample(F_BEAT, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_HEARTBEAT);
    cr_assert_eq(msg.u.heartbeat.seq, 77);
    cr_assert_eq(msg.u.heartbeat.time_ns, 0x0123456789abcdefull);
    free(f);

    decode_sample(F_ERROR, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_ERROR);
    cr_assert_eq(msg.u.error.room, 0);
    cr_assert_eq(msg.u.error.status, PDX_ERR_RANGE);
    cr_assert_eq(strlen(msg.u.error.message), PDX_WIRE_REASON_MAX);
    cr_assert_eq(msg.u.error.message[0], 'm');
    free(f);
}

Test(wire, credit_ready_round_trip)
{
    pdx_wire_msg_t msg;
    uint8_t *f;
    size_t len;

    decode_sample(F_CREDIT, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_CREDIT);
    cr_assert_eq(msg.u.credit.pair, 7);
    cr_assert_eq(msg.u.credit.index, 1);
    cr_assert_eq(msg.u.credit.epoch, 9);
    cr_assert_eq(msg.u.credit.count, 0x80000001u);
    free(f);

    f = encode_sample(F_READY, &len);
    cr_assert_eq(len, PDX_WIRE_HEADER_SIZE, "READY has no body");
    free(f);
    decode_sample(F_READY, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_READY);
    free(f);
}

Test(wire, reset_round_trip_and_bad_status)
{
    pdx_wire_reset_t bad = {1, 2, 3, PDX_OK, ""};
    pdx_wire_msg_t msg;
    uint8_t buf[512], *f;
    size_t len;

    decode_sample(F_RESET, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_RESET);
    cr_assert_eq(msg.u.reset.pair, 1023);
    cr_assert_eq(msg.u.reset.index, 2);
    cr_assert_eq(msg.u.reset.epoch, 41);
    cr_assert_eq(msg.u.reset.status, PDX_ERR_PEER);
    cr_assert_str_eq(msg.u.reset.reason, "remote access error on QP 0x1234");
    free(f);
    cr_assert_eq(pdx_wire_encode_reset(&bad, buf, sizeof(buf), &len), PDX_ERR_INVALID,
                 "a RESET must carry an error");
}

Test(wire, bye_round_trip)
{
    pdx_wire_msg_t msg;
    uint8_t *f;

    decode_sample(F_BYE, &msg, &f);
    cr_assert_eq(msg.type, PDX_WIRE_BYE);
    cr_assert_str_eq(msg.u.bye.reason, "engine destroyed");
    free(f);
}

Test(wire, notify_round_trip_and_bytes)
{
    static const uint8_t want[PDX_WIRE_NOTIFY_SIZE] = {
        'p', 'd', 'x', 'n', 0x01, 0x00, 0x00, 0x00,
        0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0x09, 0x00, 0x00, 0x00, 0x7b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    };
    pdx_wire_notify_t n = sample_notify(), got;
    uint8_t buf[PDX_TP_SEND_MAX], *f;
    size_t len = 0;

    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(len, PDX_WIRE_NOTIFY_SIZE);
    cr_assert_arr_eq(buf, want, sizeof(want));
    n = (pdx_wire_notify_t){.room = 1, .sender = 2, .seq = 3, .count = 0,
                            .flags = PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_STATUS_ONLY,
                            .status = PDX_ERR_ABORTED};
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    f = exact_copy(buf, len);
    cr_assert_eq(pdx_wire_notify_decode(f, len, &got, NULL), PDX_OK);
    cr_assert_eq(got.room, 1);
    cr_assert_eq(got.sender, 2);
    cr_assert_eq(got.seq, 3);
    cr_assert_eq(got.count, 0);
    cr_assert_eq(got.flags, n.flags);
    cr_assert_eq(got.status, PDX_ERR_ABORTED);
    free(f);
}

Test(wire, credit_record_round_trip_and_limits)
{
    pdx_wire_notify_t n = {.sender = 0x55, .flags = PDX_WIRE_NOTIFY_CREDIT, .count = 16}, got;
    uint8_t buf[PDX_TP_SEND_MAX];
    const char *why = NULL;
    size_t len;

    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(pdx_wire_notify_decode(buf, len, &got, NULL), PDX_OK);
    cr_expect_eq(got.flags, PDX_WIRE_NOTIFY_CREDIT);
    cr_expect_eq(got.count, 16);
    cr_expect_eq(got.sender, 0x55);
    buf[4] |= PDX_WIRE_NOTIFY_LAST; /* flags: a credit that also claims a last chunk */
    cr_expect_eq(pdx_wire_notify_decode(buf, len, &got, &why), PDX_ERR_PROTO);
    cr_expect(why && strstr(why, "credit record"), "%s", why ? why : "");
    buf[4] &= (uint8_t)~PDX_WIRE_NOTIFY_LAST;
    buf[8] = 1; /* a room */
    cr_expect_eq(pdx_wire_notify_decode(buf, len, &got, NULL), PDX_ERR_PROTO);
    buf[8] = 0;
    memset(buf + 28, 0, 4); /* count 0 */
    cr_expect_eq(pdx_wire_notify_decode(buf, len, &got, NULL), PDX_ERR_PROTO);
}

Test(wire, frame_bytes_are_little_endian)
{
    static const uint8_t want[] = {
        'p', 'd', 'x', 'w', PDX_WIRE_HEARTBEAT, 0, 0, 0, 16, 0, 0, 0,
        0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,
        0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11,
    };
    pdx_wire_heartbeat_t m = {0x0102030405060708ull, 0x1112131415161718ull};
    uint8_t buf[64];
    size_t len = 0;

    cr_assert_eq(pdx_wire_encode_heartbeat(&m, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(len, sizeof(want));
    cr_assert_arr_eq(buf, want, sizeof(want));
}

/* ------------------------------------------------------------------ framing */

Test(wire, peek_frames_a_stream)
{
    size_t a_len, b_len, need = 0;
    uint8_t *a = encode_sample(F_ROOM, &a_len), *b = encode_sample(F_BEAT, &b_len);
    uint8_t *stream = malloc(a_len + b_len);
    pdx_wire_header_t hdr;

    memcpy(stream, a, a_len);
    memcpy(stream + a_len, b, b_len);
    for (size_t len = 0; len < a_len; len++) {
        uint8_t *p = exact_copy(stream, len);

        cr_assert_eq(pdx_wire_peek(p, len, &hdr, &need, NULL), PDX_INPROGRESS, "len %zu", len);
        cr_assert_eq(need, len < PDX_WIRE_HEADER_SIZE ? PDX_WIRE_HEADER_SIZE : a_len);
        free(p);
    }
    cr_assert_eq(pdx_wire_peek(stream, a_len + b_len, &hdr, &need, NULL), PDX_OK);
    cr_assert_eq(need, a_len);
    cr_assert_eq(hdr.type, PDX_WIRE_ROOM);
    cr_assert_eq(hdr.body_len, a_len - PDX_WIRE_HEADER_SIZE);
    cr_assert_eq(pdx_wire_peek(stream + a_len, b_len, &hdr, &need, NULL), PDX_OK);
    cr_assert_eq(need, b_len);
    cr_assert_eq(hdr.type, PDX_WIRE_HEARTBEAT);
    /* decode takes exactly one frame */
    cr_assert_eq(pdx_wire_decode(stream, a_len + b_len, &(pdx_wire_msg_t){0}, NULL),
                 PDX_ERR_PROTO);
    free(stream);
    free(a);
    free(b);
}

Test(wire, bad_header)
{
    size_t len, need;
    uint8_t *f = encode_sample(F_BEAT, &len);
    pdx_wire_header_t hdr;
    const char *why = NULL;
    static const struct { size_t at; uint8_t byte; const char *why; } edits[] = {
        {0, 'P', "magic"}, {3, 'W', "magic"},
        {4, 0, "unknown message type"}, {4, 17, "unknown message type"},
        {5, 0xff, "unknown message type"}, {6, 1, "flags"}, {7, 0x80, "flags"},
        {8, 15, "bounds"}, {8, 17, "bounds"}, {11, 0xff, "bounds"},
    };

    /* A wrong magic is refused from its first byte on. */
    cr_assert_eq(pdx_wire_peek("P", 1, &hdr, &need, &why), PDX_ERR_PROTO);
    cr_assert_eq(pdx_wire_peek("pdx", 3, &hdr, &need, NULL), PDX_INPROGRESS);
    cr_assert_eq(pdx_wire_peek("pdX", 3, &hdr, &need, NULL), PDX_ERR_PROTO);
    for (size_t i = 0; i < PDX_ARRAY_SIZE(edits); i++) {
        uint8_t *p = exact_copy(f, len);

        p[edits[i].at] = edits[i].byte;
        why = NULL;
        cr_assert_eq(pdx_wire_peek(p, len, &hdr, &need, &why), PDX_ERR_PROTO, "edit %zu", i);
        cr_assert(why && strstr(why, edits[i].why), "edit %zu: %s", i, why ? why : "");
        cr_assert_eq(pdx_wire_decode(p, len, &(pdx_wire_msg_t){0}, NULL), PDX_ERR_PROTO);
        free(p);
    }
    free(f);
}

Test(wire, oversized_body_length)
{
    static const uint32_t lens[] = {PDX_WIRE_MAX_FRAME - PDX_WIRE_HEADER_SIZE + 1, UINT32_MAX,
                                    0x80000000u};
    uint8_t hdr_bytes[PDX_WIRE_HEADER_SIZE] = {'p', 'd', 'x', 'w', 0, 0, 0, 0};
    pdx_wire_header_t hdr;
    size_t need;

    for (uint16_t type = PDX_WIRE_HELLO; type <= PDX_WIRE_ERROR; type++) {
        for (size_t i = 0; i < PDX_ARRAY_SIZE(lens); i++) {
            uint8_t *p;

            hdr_bytes[4] = (uint8_t)type;
            for (int k = 0; k < 4; k++)
                hdr_bytes[8 + k] = (uint8_t)(lens[i] >> (8 * k));
            p = exact_copy(hdr_bytes, sizeof(hdr_bytes));
            cr_assert_eq(pdx_wire_peek(p, sizeof(hdr_bytes), &hdr, &need, NULL), PDX_ERR_PROTO,
                         "type %u len %u", type, lens[i]);
            free(p);
        }
    }
}

/* ---------------------------------------------------------------- truncation */

Test(wire, truncation_at_every_length)
{
    for (int which = 0; which < NFRAMES; which++) {
        size_t size;
        uint8_t *f = encode_sample(which, &size);

        for (size_t len = 0; len < size; len++) {
            const char *why;
            pdx_wire_header_t hdr;
            size_t need;
            uint8_t *p = exact_copy(f, len);

            cr_assert_eq(pdx_wire_peek(p, len, &hdr, &need, NULL), PDX_INPROGRESS,
                         "sample %d len %zu", which, len);
            free(p);
            cr_assert_eq(decode_copy(f, len, &why), PDX_ERR_PROTO, "sample %d len %zu", which,
                         len);
        }
        free(f);
    }
}

Test(wire, notify_with_a_sum)
{
    pdx_wire_notify_t n = {.room = 4, .sender = 5, .seq = 6, .count = 2,
                           .flags = PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_SUM |
                                    PDX_WIRE_NOTIFY_AUX,
                           .sum = 0x0123456789abcdefull, .layer_begin = 3, .layer_end = 61};
    static const uint8_t tail[16] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01,
                                     3, 0, 0, 0, 61, 0, 0, 0};
    uint8_t buf[PDX_TP_SEND_MAX], *p;
    pdx_wire_notify_t got;
    const char *why;
    size_t len;

    cr_assert_eq(pdx_wire_notify_encode(&n, buf, PDX_WIRE_NOTIFY_SUM_SIZE - 1, &len),
                 PDX_ERR_RANGE);
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(len, PDX_WIRE_NOTIFY_SUM_SIZE);
    cr_assert_arr_eq(buf + PDX_WIRE_NOTIFY_SIZE, tail, sizeof(tail));
    p = exact_copy(buf, len);
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, NULL), PDX_OK);
    cr_assert_eq(got.sum, n.sum);
    cr_assert_eq(got.layer_begin, 3);
    cr_assert_eq(got.layer_end, 61);
    cr_assert_eq(got.flags, n.flags);
    /* the short record with the flag, the long one without it */
    why = NULL;
    cr_assert_eq(pdx_wire_notify_decode(p, PDX_WIRE_NOTIFY_SIZE, &got, &why), PDX_ERR_PROTO);
    cr_assert(why && strstr(why, "size"), "%s", why ? why : "");
    p[4] = PDX_WIRE_NOTIFY_LAST;
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    p[4] = PDX_WIRE_NOTIFY_SUM | PDX_WIRE_NOTIFY_AUX; /* not a last chunk */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    cr_assert(strstr(why, "not a successful last chunk"), "%s", why);
    p[4] = (uint8_t)n.flags;
    p[PDX_WIRE_NOTIFY_SIZE + 8] = 62; /* layers [62, 61) */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    cr_assert(strstr(why, "layers"), "%s", why);
    free(p);
    /* encoder: the same rules */
    n.layer_begin = 62;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.layer_begin = 0, n.flags = PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_AUX;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.flags = PDX_WIRE_NOTIFY_LAST;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID,
                 "a sum without its flag");
    n = (pdx_wire_notify_t){.room = 4, .sender = 5, .status = PDX_ERR_IO,
                            .flags = PDX_WIRE_NOTIFY_LAST | PDX_WIRE_NOTIFY_STATUS_ONLY |
                                     PDX_WIRE_NOTIFY_SUM};
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
}

Test(wire, notify_with_layers)
{
    pdx_wire_notify_t n = {.room = 4, .sender = 5, .seq = 6, .count = 9,
                           .flags = PDX_WIRE_NOTIFY_LAYERS, .layer_begin = 7, .layer_end = 8,
                           .cover_begin = 2, .cover_end = 61, .pages = 300};
    static const uint8_t tail[20] = {7, 0, 0, 0, 8, 0, 0, 0, 2, 0, 0, 0, 61, 0, 0, 0,
                                     0x2c, 1, 0, 0};
    uint8_t buf[PDX_TP_SEND_MAX], *p;
    pdx_wire_notify_t got;
    const char *why;
    size_t len;

    cr_assert_eq(pdx_wire_notify_encode(&n, buf, PDX_WIRE_NOTIFY_LAYERS_SIZE - 1, &len),
                 PDX_ERR_RANGE);
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(len, PDX_WIRE_NOTIFY_LAYERS_SIZE);
    cr_assert_arr_eq(buf + PDX_WIRE_NOTIFY_SIZE, tail, sizeof(tail));
    p = exact_copy(buf, len);
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, NULL), PDX_OK);
    cr_assert(got.layer_begin == 7 && got.layer_end == 8 && got.cover_begin == 2 &&
              got.cover_end == 61 && got.pages == 300 && got.flags == n.flags && got.count == 9);
    /* the record's size must be that of its flags */
    why = NULL;
    cr_assert_eq(pdx_wire_notify_decode(p, PDX_WIRE_NOTIFY_SIZE, &got, &why), PDX_ERR_PROTO);
    cr_assert(why && strstr(why, "size"), "%s", why ? why : "");
    p[4] = 0; /* layers fields without the flag */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    p[4] = PDX_WIRE_NOTIFY_LAYERS | PDX_WIRE_NOTIFY_LAST; /* only before the last chunk */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    cr_assert(strstr(why, "before the last"), "%s", why);
    p[4] = PDX_WIRE_NOTIFY_LAYERS;
    p[PDX_WIRE_NOTIFY_SIZE] = 9; /* layers [9, 8) */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    cr_assert(strstr(why, "end before"), "%s", why);
    p[PDX_WIRE_NOTIFY_SIZE] = 1; /* layers [1, 8) outside [2, 61) */
    cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO);
    cr_assert(strstr(why, "outside"), "%s", why);
    free(p);
    /* encoder: the same rules */
    n.flags = PDX_WIRE_NOTIFY_LAYERS | PDX_WIRE_NOTIFY_SUM;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.flags = 0;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID,
                 "layers without their flag");
    n.flags = PDX_WIRE_NOTIFY_LAYERS, n.cover_end = 7;
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_ERR_INVALID);
    n.layer_begin = n.layer_end = 70; /* an empty range: none of decode's layers */
    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
}

Test(wire, notify_truncated_or_bad)
{
    pdx_wire_notify_t n = sample_notify(), got;
    uint8_t buf[PDX_TP_SEND_MAX];
    size_t len;
    const char *why;

    cr_assert_eq(pdx_wire_notify_encode(&n, buf, sizeof(buf), &len), PDX_OK);
    for (size_t l = 0; l < len; l++) {
        uint8_t *p = exact_copy(buf, l);

        cr_assert_eq(pdx_wire_notify_decode(p, l, &got, NULL), PDX_ERR_PROTO, "len %zu", l);
        free(p);
    }
    cr_assert_eq(pdx_wire_notify_decode(buf, len + 1, &got, NULL), PDX_ERR_PROTO);
    static const struct { size_t at; uint8_t byte; const char *why; } edits[] = {
        {0, 'P', "magic"}, {4, 0x04, "flags"}, {5, 0x01, "flags"}, {6, 1, "flags"},
        {32, 1, "status"},                         /* status +1 */
        {4, 0x03, "status-only notify with writes"}, /* count is 123 */
    };
    for (size_t i = 0; i < PDX_ARRAY_SIZE(edits); i++) {
        uint8_t *p = exact_copy(buf, len);

        p[edits[i].at] = edits[i].byte;
        why = NULL;
        cr_assert_eq(pdx_wire_notify_decode(p, len, &got, &why), PDX_ERR_PROTO, "edit %zu", i);
        cr_assert(why && strstr(why, edits[i].why), "edit %zu: %s", i, why ? why : "");
        free(p);
    }
}
