/*
 * One short-lived peer process of test_engine_churn, through the public API
 * only:
 *
 *     churn_child prefill|decode ADDR ROOM clean|exit|hang
 *
 * It opens an engine, connects to the long-lived engine at ADDR and moves
 * room ROOM: as prefill it sends the room's pages (churn.h), as decode it
 * expects them and checks every byte. Then it writes "ok\n" to stdout and
 * leaves: `clean` destroys its engine (a goodbye) and exits 0, `exit`
 * exits 0 without a word to anybody (the kernel closes its sockets), `hang`
 * waits to be killed. Any failure is a message on stderr and exit status 1.
 */
#include <pdx/pdx.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "churn.h"

static void die(const char *what, pdx_status_t st)
{
    fprintf(stderr, "churn_child %d: %s: %s\n", (int)getpid(), what, pdx_status_str(st));
    exit(1);
}

static pdx_room_state_t wait_done(pdx_engine_t *e, uint64_t room)
{
    struct timespec ms = {0, 1000000};

    for (int i = 0; i < 20000; i++) {
        pdx_room_state_t s = pdx_poll(e, room);

        if (s == PDX_ROOM_SUCCESS || s == PDX_ROOM_FAILED)
            return s;
        nanosleep(&ms, NULL);
    }
    return pdx_poll(e, room);
}

int main(int argc, char **argv)
{
    static uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES];
    pdx_buffer_desc_t buf = {.bytes_per_page = CHURN_PAGE_BYTES};
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = 1, .npages = CHURN_PAGES,
                              .buffers = &buf};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS, .ngroups = 1,
                              .groups = &group};
    uint32_t pages[CHURN_ROOM_PAGES], layout, peer;
    pdx_pages_t p = {pages, CHURN_ROOM_PAGES};
    pdx_config_t cfg;
    pdx_engine_t *e;
    pdx_status_t st;
    uint64_t room;
    bool prefill;

    if (argc != 5) {
        fprintf(stderr, "usage: churn_child prefill|decode ADDR ROOM clean|exit|hang\n");
        return 2;
    }
    prefill = strcmp(argv[1], "prefill") == 0;
    room = strtoull(argv[3], NULL, 10);
    churn_pages(room, pages);
    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", "1");
    if ((st = pdx_engine_create(&cfg, &e)) != PDX_OK)
        die("pdx_engine_create", st);
    if ((st = pdx_mem_register(e, pool, sizeof(pool), &buf.mem)) != PDX_OK)
        die("pdx_mem_register", st);
    if ((st = pdx_layout_create(e, &desc, &layout)) != PDX_OK)
        die("pdx_layout_create", st);
    if ((st = pdx_peer_connect(e, argv[2], 10000, &peer)) != PDX_OK)
        die("pdx_peer_connect", st);
    if (prefill) {
        churn_fill(pool, room);
        if ((st = pdx_send(e, room, layout, &p, NULL, NULL, PDX_SEND_LAST)) != PDX_OK)
            die("pdx_send", st);
    } else if ((st = pdx_expect(e, peer, room, layout, &p, NULL, 1, 20000)) != PDX_OK) {
        die("pdx_expect", st);
    }
    if (wait_done(e, room) != PDX_ROOM_SUCCESS)
        die("the room", PDX_ERR_TIMEOUT);
    if (!prefill && churn_check(pool, room) != 0)
        die("the room's bytes", PDX_ERR_PROTO);
    while (pdx_release(e, room) == PDX_INPROGRESS)
        usleep(1000);
    if (write(1, "ok\n", 3) != 3)
        return 1;
    if (strcmp(argv[4], "exit") == 0)
        _exit(0);
    if (strcmp(argv[4], "hang") == 0)
        for (;;)
            pause();
    pdx_engine_destroy(e);
    return 0;
}
