/* Sample messages, a frame builder and decode wrappers of the wire tests (wire_samples.h). */
#include "wire_samples.h"

#include <criterion/criterion.h>

#include <stdlib.h>
#include <string.h>

uint8_t *exact_copy(const void *src, size_t len)
{
    uint8_t *p = malloc(len);

    cr_assert(p || len == 0);
    if (len)
        memcpy(p, src, len);
    return p;
}

void put(bld_t *b, uint64_t v, unsigned n)
{
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2;
        b->p = realloc(b->p, b->cap);
        cr_assert_not_null(b->p);
    }
    for (unsigned i = 0; i < n; i++)
        b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

void put_str(bld_t *b, const char *s, size_t n)
{
    put(b, n, 2);
    for (size_t i = 0; i < n; i++)
        put(b, (uint8_t)s[i], 1);
}

/* Wrap body in a header (frees body); the frame is exactly *len_p bytes. */
uint8_t *frame_of(uint16_t type, bld_t *body, size_t *len_p)
{
    bld_t f = {0};

    put(&f, PDX_WIRE_MAGIC, 4);
    put(&f, type, 2);
    put(&f, 0, 2);
    put(&f, body->len, 4);
    for (size_t i = 0; i < body->len; i++)
        put(&f, body->p[i], 1);
    free(body->p);
    *body = (bld_t){0};
    *len_p = f.len;
    return f.p;
}

/* Decode from an exact heap copy; the message is freed. */
pdx_status_t decode_copy(const void *frame, size_t len, const char **why)
{
    uint8_t *p = exact_copy(frame, len);
    pdx_wire_msg_t msg;
    pdx_status_t st;

    *why = NULL;
    st = pdx_wire_decode(p, len, &msg, why);
    if (st == PDX_OK)
        pdx_wire_msg_free(&msg);
    free(p);
    return st;
}

void expect_proto(uint16_t type, bld_t *body, const char *reason)
{
    size_t len;
    uint8_t *f = frame_of(type, body, &len);
    const char *why;
    pdx_status_t st = decode_copy(f, len, &why);

    cr_assert_eq(st, PDX_ERR_PROTO, "%s: expected PDX_ERR_PROTO (%s), got %d", reason,
                 pdx_wire_type_str(type), st);
    cr_assert(why && strstr(why, reason), "expected a reason with \"%s\", got \"%s\"", reason,
              why ? why : "(none)");
    free(f);
}

/* ----------------------------------------------------------- sample messages */

static const uint32_t room_g0[] = {5, 6, 7, 100000, 0xffffffffu};
static const uint32_t room_g2[] = {1};

pdx_layout_t *sample_layout(void)
{
    uint32_t nb[2] = {8, 3};
    pdx_layout_t *l = pdx_layout_alloc(2, nb);

    cr_assert_not_null(l);
    l->layer_begin = 4;
    l->layer_end = 8;
    l->groups[0] = (pdx_group_t){0, 2, 8, 1000, l->groups[0].buffers};
    l->groups[1] = (pdx_group_t){PDX_GROUP_NO_LAYERS | PDX_GROUP_STATE, 3, 3, 16,
                                 l->groups[1].buffers};
    for (uint32_t b = 0; b < 8; b++)
        l->groups[0].buffers[b] = (pdx_buffer_t){b + 1, (uint64_t)b << 33, 4096u * (b + 1)};
    for (uint32_t b = 0; b < 3; b++)
        l->groups[1].buffers[b] = (pdx_buffer_t){0xfffffff0u + b, 12345, 1u << 20};
    return l;
}

void sample_hello(pdx_wire_hello_t *m)
{
    memset(m, 0, sizeof(*m));
    m->version = PDX_PROTOCOL_VERSION;
    m->caps = 0x8000000000000005ull;
    for (int i = 0; i < PDX_WIRE_ID_SIZE; i++)
        m->id[i] = (uint8_t)(0xa0 + i);
    m->nshards = 8;
    m->nics = 3;
    m->port = 65535;
    for (int i = 0; i < PDX_WIRE_HOST_ID_SIZE; i++)
        m->host_id[i] = (uint8_t)(0x31 * i + 7);
    strcpy(m->host, "prefill-node-17.cluster.example");
    strcpy(m->transport, "rdma");
    strcpy(m->gpu, "0000:c1:00.0");
}

void sample_room(pdx_wire_room_t *m, pdx_pages_t pages[3], int aux)
{
    memset(m, 0, sizeof(*m));
    m->room = 0x123456789abcdef0ull;
    m->layout = 2;
    m->nsenders = 3;
    m->timeout_ms = 30000;
    if (aux) {
        m->flags = PDX_WIRE_ROOM_AUX;
        m->aux = (pdx_region_t){.mem = 9, .offset = 4096, .len = 640};
    }
    m->ngroups = 3;
    pages[0] = (pdx_pages_t){room_g0, 5};
    pages[1] = (pdx_pages_t){NULL, 0};
    pages[2] = (pdx_pages_t){room_g2, 1};
}

static const uint32_t sample_piece_rkeys[3] = {0x100u, 0x200u, 0x300u};

const pdx_wire_mem_entry_t sample_mem_entries[SAMPLE_MEMS] = {
    {0, 0, {0x7f0000001000ull, 1ull << 30, 0xdeadbeefu, 1, 0, NULL}},
    {7, 3, {0x1000, 4096, 1, 1, 0, NULL}},
    {0xfffffff0u, PDX_WIRE_MAX_NICS - 1, {0, UINT64_MAX, 0xffffffffu, 1, 0, NULL}},
    /* in pieces of 1 MiB, the last one shorter */
    {9, 1, {0x200000, (2u << 20) + 1, 0x100u, 3, 1u << 20, sample_piece_rkeys}},
};

pdx_status_t encode_sample_into(int which, void *buf, size_t cap, size_t *len_p)
{
    pdx_wire_hello_t hello;
    pdx_wire_room_t room;
    pdx_pages_t pages[3];
    pdx_wire_layout_t lay = {42, NULL};
    pdx_wire_ep_t ep = {3, 5, 0xfffffffeu, {37, {0}}};
    pdx_wire_abort_t ab = {0x1122334455667788ull, PDX_ERR_TIMEOUT,
                           "transfer deadline passed after 3 of 4 chunks"};
    pdx_wire_abort_ack_t ack = {UINT64_MAX};
    pdx_wire_heartbeat_t beat = {77, 0x0123456789abcdefull};
    pdx_wire_error_t err = {0, PDX_ERR_RANGE, ""};
    pdx_wire_credit_t credit = {7, 1, 9, 0x80000001u};
    pdx_wire_reset_t reset = {1023, 2, 41, PDX_ERR_PEER, "remote access error on QP 0x1234"};
    pdx_wire_bye_t bye = {"engine destroyed"};
    pdx_wire_auth_t auth = {.version = PDX_PROTOCOL_VERSION, .step = 2};
    pdx_wire_export_t export = {.mem = 1023, .len = PDX_TP_EXPORT_MAX};
    pdx_wire_mem_t mem = {SAMPLE_MEMS, (pdx_wire_mem_entry_t *)sample_mem_entries};
    pdx_status_t st = PDX_ERR_INVALID;

    switch (which) {
    case F_HELLO:
        sample_hello(&hello);
        st = pdx_wire_encode_hello(&hello, buf, cap, len_p);
        break;
    case F_MEM:
        st = pdx_wire_encode_mem(&mem, buf, cap, len_p);
        break;
    case F_LAYOUT:
        lay.layout = sample_layout();
        st = pdx_wire_encode_layout(&lay, buf, cap, len_p);
        pdx_layout_free(lay.layout);
        break;
    case F_EP:
        for (uint32_t i = 0; i < ep.addr.len; i++)
            ep.addr.bytes[i] = (uint8_t)(i * 7 + 1);
        st = pdx_wire_encode_ep(&ep, buf, cap, len_p);
        break;
    case F_ROOM:
    case F_ROOM_NOAUX:
        sample_room(&room, pages, which == F_ROOM);
        st = pdx_wire_encode_room(&room, pages, buf, cap, len_p);
        break;
    case F_ABORT:
        st = pdx_wire_encode_abort(&ab, buf, cap, len_p);
        break;
    case F_ACK:
        st = pdx_wire_encode_abort_ack(&ack, buf, cap, len_p);
        break;
    case F_BEAT:
        st = pdx_wire_encode_heartbeat(&beat, buf, cap, len_p);
        break;
    case F_ERROR:
        memset(err.message, 'm', PDX_WIRE_REASON_MAX); /* the longest message */
        st = pdx_wire_encode_error(&err, buf, cap, len_p);
        break;
    case F_CREDIT:
        st = pdx_wire_encode_credit(&credit, buf, cap, len_p);
        break;
    case F_READY:
        st = pdx_wire_encode_ready(buf, cap, len_p);
        break;
    case F_RESET:
        st = pdx_wire_encode_reset(&reset, buf, cap, len_p);
        break;
    case F_BYE:
        st = pdx_wire_encode_bye(&bye, buf, cap, len_p);
        break;
    case F_AUTH:
        for (uint32_t i = 0; i < PDX_WIRE_NONCE_SIZE; i++)
            auth.nonce[i] = (uint8_t)(0xa0 + i);
        for (uint32_t i = 0; i < PDX_WIRE_MAC_SIZE; i++)
            auth.mac[i] = (uint8_t)(0x5a ^ i);
        st = pdx_wire_encode_auth(&auth, buf, cap, len_p);
        break;
    case F_EXPORT:
        for (uint32_t i = 0; i < export.len; i++)
            export.bytes[i] = (uint8_t)(i * 13 + 5);
        st = pdx_wire_encode_export(&export, buf, cap, len_p);
        break;
    }
    return st;
}

uint8_t *encode_sample(int which, size_t *len_p)
{
    static uint8_t buf[4096];
    size_t len = 0;
    pdx_status_t st = encode_sample_into(which, buf, sizeof(buf), &len);

    cr_assert_eq(st, PDX_OK, "encoding sample %d: %d", which, st);
    *len_p = len;
    return exact_copy(buf, len);
}

pdx_wire_notify_t sample_notify(void)
{
    return (pdx_wire_notify_t){.room = 0xfedcba9876543210ull, .sender = 0x0102030405060708ull,
                               .seq = 9, .flags = PDX_WIRE_NOTIFY_LAST, .count = 123,
                               .status = PDX_OK};
}

/* Decode sample `which` from an exact heap copy kept in *frame_p (ROOM points into it). */
void decode_sample(int which, pdx_wire_msg_t *msg, uint8_t **frame_p)
{
    size_t len;
    uint8_t *f = encode_sample(which, &len);
    const char *why = NULL;
    pdx_status_t st = pdx_wire_decode(f, len, msg, &why);

    cr_assert_eq(st, PDX_OK, "decoding sample %d: %s", which, why ? why : "");
    *frame_p = f;
}
