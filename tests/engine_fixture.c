/* The two-engine fixture of the engine tests (engine_fixture.h). */
#include "engine_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

static uint64_t pattern(uint64_t room, uint32_t layer, uint32_t pos, uint64_t word)
{
    return pdx_hash64(room * 0x100000001b3ull ^ (uint64_t)layer << 48 ^ (uint64_t)pos << 24 ^ word);
}

void side_open(side_t *s, const geom_t *g, const char *const *cfg_pairs)
{
    pdx_config_t cfg;
    pdx_buffer_desc_t *bufs = calloc(g->layers, sizeof(*bufs));
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = g->layers, .npages = g->npages,
                              .buffers = bufs};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                              .ngroups = 1, .layer_begin = 0, .layer_end = g->layers,
                              .groups = &group};
    size_t len = (size_t)g->layers * g->npages * g->bytes_per_page;

    memset(s, 0, sizeof(*s));
    s->g = *g;
    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_SHARDS", "2");
    pdx_config_set(&cfg, "PDX_TRANSPORT", PDX_TEST_TRANSPORT);
    for (int i = 0; cfg_pairs && cfg_pairs[i]; i++) {
        char name[64];
        const char *eq = strchr(cfg_pairs[i], '=');

        cr_assert_not_null(eq);
        snprintf(name, sizeof(name), "%.*s", (int)(eq - cfg_pairs[i]), cfg_pairs[i]);
        cr_assert_eq(pdx_config_set(&cfg, name, eq + 1), PDX_OK, "%s", cfg_pairs[i]);
    }
    cr_assert_eq(pdx_engine_create(&cfg, &s->e), PDX_OK);
    s->pool = calloc(1, len);
    s->aux = calloc(1, 4096);
    cr_assert_not_null(s->pool);
    cr_assert_eq(pdx_mem_register(s->e, s->pool, len, &s->mem), PDX_OK);
    cr_assert_eq(pdx_mem_register(s->e, s->aux, 4096, &s->aux_mem), PDX_OK);
    for (uint32_t l = 0; l < g->layers; l++)
        bufs[l] = (pdx_buffer_desc_t){.mem = s->mem,
                                      .offset = (uint64_t)l * g->npages * g->bytes_per_page,
                                      .bytes_per_page = g->bytes_per_page};
    cr_assert_eq(pdx_layout_create(s->e, &desc, &s->layout), PDX_OK);
    free(bufs);
}

void side_close(side_t *s)
{
    pdx_engine_destroy(s->e);
    free(s->pool);
    free(s->aux);
    memset(s, 0, sizeof(*s));
}

uint32_t side_connect(side_t *decode, const side_t *prefill)
{
    uint32_t peer = UINT32_MAX;

    cr_assert_eq(pdx_peer_connect(decode->e, pdx_engine_address(prefill->e), 5000, &peer), PDX_OK,
                 "connect to %s", pdx_engine_address(prefill->e));
    return peer;
}

static uint64_t *page_words(const side_t *s, uint32_t layer, uint32_t page)
{
    return (uint64_t *)(s->pool + ((uint64_t)layer * s->g.npages + page) * s->g.bytes_per_page);
}

void side_fill(side_t *s, uint64_t room, const uint32_t *src, uint32_t n, uint32_t pos0)
{
    for (uint32_t l = 0; l < s->g.layers; l++)
        for (uint32_t i = 0; i < n; i++) {
            uint64_t *w = page_words(s, l, src[i]);

            for (uint64_t k = 0; k < s->g.bytes_per_page / 8; k++)
                w[k] = pattern(room, l, pos0 + i, k);
        }
}

uint64_t side_check(const side_t *s, uint64_t room, const uint32_t *dst, uint32_t n, uint32_t pos0)
{
    return side_check_layers(s, room, dst, n, pos0, 0, s->g.layers);
}

uint64_t side_check_layers(const side_t *s, uint64_t room, const uint32_t *dst, uint32_t n,
                           uint32_t pos0, uint32_t layer_begin, uint32_t layer_end)
{
    uint64_t bad = 0;

    for (uint32_t l = layer_begin; l < layer_end; l++)
        for (uint32_t i = 0; i < n; i++) {
            const uint64_t *w = page_words(s, l, dst[i]);

            for (uint64_t k = 0; k < s->g.bytes_per_page / 8; k++)
                bad += w[k] != pattern(room, l, pos0 + i, k);
        }
    return bad * 8;
}

void pick_pages(uint32_t *out, uint32_t n, uint32_t npages, unsigned *seed)
{
    uint8_t *used = calloc(npages, 1);

    cr_assert_leq(n, npages);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t p;

        do
            p = (uint32_t)rand_r(seed) % npages;
        while (used[p]);
        used[p] = 1;
        out[i] = p;
    }
    free(used);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

pdx_room_state_t wait_done(pdx_engine_t *e, uint64_t room, int timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);
    pdx_room_state_t st;

    for (;;) {
        st = pdx_poll(e, room);
        if (st == PDX_ROOM_SUCCESS || st == PDX_ROOM_FAILED || pdx_now_ns() > deadline)
            return st;
        sleep_ms(1);
    }
}

pdx_status_t release_wait(pdx_engine_t *e, uint64_t room, int timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);
    pdx_status_t st;

    while ((st = pdx_release(e, room)) == PDX_INPROGRESS && pdx_now_ns() < deadline)
        sleep_ms(1);
    return st;
}

void side_move(side_t *prefill, side_t *decode, uint32_t peer, uint64_t room,
               const uint32_t *pages, uint32_t n)
{
    pdx_pages_t p = {(uint32_t *)pages, n};

    cr_assert_eq(pdx_expect(decode->e, peer, room, decode->layout, &p, NULL, 1, 10000), PDX_OK);
    side_fill(prefill, room, pages, n, 0);
    cr_assert_eq(pdx_send(prefill->e, room, prefill->layout, &p, NULL, NULL, PDX_SEND_LAST),
                 PDX_OK);
    cr_assert_eq(wait_done(decode->e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(side_check(decode, room, pages, n, 0), 0);
    cr_assert_eq(wait_done(prefill->e, room, 10000), PDX_ROOM_SUCCESS);
    cr_assert_eq(release_wait(decode->e, room, 5000), PDX_OK);
    cr_assert_eq(release_wait(prefill->e, room, 5000), PDX_OK);
}
