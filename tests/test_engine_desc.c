/*
 * Engine and memory descriptors on PDX_TEST_TRANSPORT: what they say, a
 * connection made from one (and not made twice), one that names another
 * engine, and bytes that are not a descriptor.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bounds.h"
#include "engine_fixture.h"

static side_t pf, dc;

static void fini(void)
{
    side_close(&dc);
    side_close(&pf);
}

static void open_pair(void)
{
    const geom_t g = {.layers = 2, .bytes_per_page = 1024, .npages = 32};

    side_open(&pf, &g, NULL);
    side_open(&dc, &g, NULL);
}

static size_t engine_desc(const side_t *s, uint8_t *buf)
{
    size_t len = 0;

    cr_assert_eq(pdx_engine_desc(s->e, buf, PDX_ENGINE_DESC_MAX, &len), PDX_OK);
    cr_assert(len > 0 && len <= PDX_ENGINE_DESC_MAX);
    return len;
}

/* One room from prefill to decode's peer handle `peer`, every byte checked. */
static void one_room(uint32_t peer, uint64_t room)
{
    uint32_t src[4] = {3, 9, 17, 30}, dst[4] = {1, 2, 28, 12};
    pdx_pages_t d = {dst, 4}, s = {src, 4};

    cr_assert_eq(pdx_expect(dc.e, peer, room, dc.layout, &d, NULL, 1, 10000), PDX_OK);
    side_fill(&pf, room, src, 4, 0);
    cr_assert_eq(pdx_send(pf.e, room, pf.layout, &s, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_done(dc.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(wait_done(pf.e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(side_check(&dc, room, dst, 4, 0), 0, "bytes differ");
    cr_expect_eq(release_wait(dc.e, room, 2000), PDX_OK);
    cr_expect_eq(release_wait(pf.e, room, 2000), PDX_OK);
}

Test(engine_desc, says_who_and_where, .fini = fini, .timeout = 60)
{
    uint8_t buf[PDX_ENGINE_DESC_MAX], other[PDX_ENGINE_DESC_MAX];
    pdx_engine_desc_info_t info, info2;
    char addr[PDX_NAME_MAX + 16];
    size_t len, need = 0;

    open_pair();
    len = engine_desc(&pf, buf);
    cr_assert_eq(pdx_engine_desc_info(buf, len, &info), PDX_OK);
    snprintf(addr, sizeof(addr), "%s:%u", info.host, info.port);
    cr_assert_str_eq(addr, pdx_engine_address(pf.e));
    cr_assert_neq(info.id, 0u);
    /* measuring, and a buffer too small: the size it needs, nothing written */
    cr_assert_eq(pdx_engine_desc(pf.e, NULL, 0, &need), PDX_ERR_RANGE);
    cr_assert_eq(need, len);
    memset(other, 0xa5, sizeof(other));
    cr_assert_eq(pdx_engine_desc(pf.e, other, len - 1, &need), PDX_ERR_RANGE);
    cr_assert_eq(other[0], 0xa5);
    /* another engine, another identity and port */
    cr_assert_eq(pdx_engine_desc_info(other, engine_desc(&dc, other), &info2), PDX_OK);
    cr_assert_neq(info2.id, info.id);
    cr_assert_neq(info2.port, info.port);
}

Test(engine_desc, connects_once_and_carries_rooms, .fini = fini, .timeout = 60)
{
    uint8_t buf[PDX_ENGINE_DESC_MAX];
    uint32_t peer = 0, again = 0, in = 0;
    pdx_stats_t st;
    size_t len;

    open_pair();
    len = engine_desc(&pf, buf);
    cr_assert_eq(pdx_peer_connect_desc(dc.e, buf, len, 5000, &peer), PDX_OK);
    cr_assert_eq(pdx_peer_accept(pf.e, 5000, &in), PDX_OK);
    /* the same engine again: the same connection */
    cr_assert_eq(pdx_peer_connect_desc(dc.e, buf, len, 5000, &again), PDX_OK);
    cr_assert_eq(again, peer);
    cr_assert_eq(pdx_peer_accept(pf.e, 200, &in), PDX_ERR_TIMEOUT, "a second connection");
    cr_assert_eq(pdx_engine_stats(dc.e, &st), PDX_OK);
    cr_assert_eq(st.peers, 1u);
    one_room(peer, 7);
    /* its own descriptor is no peer */
    len = engine_desc(&dc, buf);
    cr_assert_eq(pdx_peer_connect_desc(dc.e, buf, len, 1000, &again), PDX_ERR_INVALID);
}

/* A descriptor whose identity is not the engine at its address (one that
 * restarted, say): refused, and that connection closed again. */
Test(engine_desc, another_identity_at_the_address_is_refused, .fini = fini, .timeout = 60)
{
    uint8_t buf[PDX_ENGINE_DESC_MAX];
    uint32_t peer = 0;
    pdx_stats_t st;
    size_t len;

    open_pair();
    len = engine_desc(&pf, buf);
    buf[8] ^= 0x5a; /* the identity's low byte */
    cr_assert_eq(pdx_peer_connect_desc(dc.e, buf, len, 5000, &peer), PDX_ERR_PEER);
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(pdx_engine_stats(dc.e, &st), PDX_OK);
        if (st.peers == 0)
            break;
        usleep(10000);
    }
    cr_assert_eq(st.peers, 0u, "the connection to the wrong engine stayed");
    buf[8] ^= 0x5a;
    cr_assert_eq(pdx_peer_connect_desc(dc.e, buf, len, 5000, &peer), PDX_OK);
    one_room(peer, 8);
}

Test(engine_desc, memory_descriptors, .fini = fini, .timeout = 60)
{
    uint8_t buf[PDX_MEM_DESC_MAX], eng[PDX_ENGINE_DESC_MAX];
    pdx_engine_desc_info_t einfo;
    pdx_mem_desc_info_t info;
    size_t len = 0, need = 0;

    open_pair();
    cr_assert_eq(pdx_engine_desc_info(eng, engine_desc(&pf, eng), &einfo), PDX_OK);
    cr_assert_eq(pdx_mem_desc(pf.e, pf.mem, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(pdx_mem_desc_info(buf, len, &info), PDX_OK);
    cr_assert_eq(info.engine, einfo.id);
    cr_assert_eq(info.mem, pf.mem);
    cr_assert_eq(info.len, (uint64_t)pf.g.layers * pf.g.npages * pf.g.bytes_per_page);
    cr_assert_eq(info.nics, 1u);
    cr_assert_eq(info.flags, 0u, "host memory");
    cr_assert_eq(pdx_mem_desc(pf.e, pf.aux_mem, buf, sizeof(buf), &len), PDX_OK);
    cr_assert_eq(pdx_mem_desc_info(buf, len, &info), PDX_OK);
    cr_assert_eq(info.mem, pf.aux_mem);
    cr_assert_eq(info.len, 4096u);
    cr_assert_eq(pdx_mem_desc(pf.e, pf.mem, NULL, 0, &need), PDX_ERR_RANGE);
    cr_assert_eq(need, len);
    cr_assert_eq(pdx_mem_desc(pf.e, 999, buf, sizeof(buf), &len), PDX_ERR_NOT_FOUND);
    cr_assert_eq(pdx_mem_desc(pf.e, PDX_MAX_MEMS + 5u, buf, sizeof(buf), &len),
                 PDX_ERR_NOT_FOUND);
    /* one kind is not the other */
    cr_assert_eq(pdx_engine_desc_info(buf, len, &einfo), PDX_ERR_PROTO);
    cr_assert_eq(pdx_mem_desc_info(eng, sizeof(eng), &info), PDX_ERR_PROTO);
}

/* The status of decoding `len` bytes as each kind; 0 when it decoded. */
static pdx_status_t decode(const uint8_t *p, size_t len, bool mem)
{
    pdx_engine_desc_info_t e;
    pdx_mem_desc_info_t m;

    if (!mem) {
        pdx_status_t st = pdx_engine_desc_info(p, len, &e);

        if (st == PDX_OK)
            for (const char *c = e.host; *c; c++)
                cr_assert(*c > ' ' && *c <= '~', "a host byte 0x%02x", (unsigned)(uint8_t)*c);
        if (st == PDX_OK)
            cr_assert(e.port > 0 && e.port <= 65535);
        return st;
    }
    {
        pdx_status_t st = pdx_mem_desc_info(p, len, &m);

        if (st == PDX_OK)
            cr_assert(m.nics >= 1 && m.nics <= 4 && m.len > 0 && m.mem < PDX_MAX_MEMS);
        return st;
    }
}

/* Cut, mutated and foreign bytes: a status and a message, never a crash. */
Test(engine_desc, malformed_bytes, .fini = fini, .timeout = 60)
{
    uint8_t d[2][PDX_MEM_DESC_MAX], m[PDX_MEM_DESC_MAX];
    size_t len[2];
    unsigned seed = 11;
    uint32_t ok = 0;

    open_pair();
    len[0] = engine_desc(&pf, d[0]);
    cr_assert_eq(pdx_mem_desc(pf.e, pf.mem, d[1], sizeof(d[1]), &len[1]), PDX_OK);
    for (int k = 0; k < 2; k++) {
        const bool mem = k == 1;

        cr_assert_eq(decode(d[k], len[k], mem), PDX_OK);
        for (size_t n = 0; n < len[k]; n++)
            cr_assert_eq(decode(d[k], n, mem), PDX_ERR_PROTO,
                         "cut at %zu", n);
        /* one byte more is no descriptor either */
        memcpy(m, d[k], len[k]);
        m[len[k]] = 'x';
        cr_assert_eq(decode(m, len[k] + 1, mem), PDX_ERR_PROTO);
        /* another version */
        memcpy(m, d[k], len[k]);
        m[4] = 2;
        cr_assert_eq(decode(m, len[k], mem), PDX_ERR_VERSION);
        /* random bytes flipped: a status, never a crash; a few still decode */
        for (int i = 0; i < 4000; i++) {
            pdx_status_t st;

            memcpy(m, d[k], len[k]);
            for (int f = 0; f < 1 + i % 3; f++)
                m[(size_t)rand_r(&seed) % len[k]] ^= (uint8_t)(1 + rand_r(&seed) % 255);
            st = decode(m, len[k], mem);
            cr_assert(st == PDX_OK || st == PDX_ERR_PROTO || st == PDX_ERR_VERSION, "%s",
                      pdx_status_str(st));
            ok += st == PDX_OK;
        }
    }
    cr_assert_gt(ok, 0u, "no mutation left a descriptor: the check is too strict to tell");
    /* specific refusals */
    memcpy(m, d[0], len[0]);
    memcpy(m + 16, "\0\0\0\0", 4); /* port 0 */
    cr_assert_eq(decode(m, len[0], false), PDX_ERR_PROTO);
    memcpy(m, d[0], len[0]);
    m[len[0] - 1] = ' '; /* a space in the host */
    cr_assert_eq(decode(m, len[0], false), PDX_ERR_PROTO);
    memcpy(m, d[1], len[1]);
    m[6] = 0x80; /* an unknown flag */
    cr_assert_eq(decode(m, len[1], true), PDX_ERR_PROTO);
    cr_assert_eq(pdx_engine_desc_info(NULL, 10, &(pdx_engine_desc_info_t){0}), PDX_ERR_INVALID);
    cr_assert_eq(pdx_mem_desc_info(d[1], len[1], NULL), PDX_ERR_INVALID);
    /* and connecting from bytes that are not a descriptor */
    {
        uint32_t peer;

        cr_assert_eq(pdx_peer_connect_desc(dc.e, d[1], len[1], 1000, &peer), PDX_ERR_PROTO);
    }
}
