/*
 * A complete prefill -> decode transfer with the public API only.
 *
 *     pd_transfer prefill [HOST:PORT]   listens (default 127.0.0.1:0), prints
 *                                       its address, sends ROOMS rooms
 *     pd_transfer decode HOST:PORT      connects, receives them, checks them
 *
 * Both sides hold a KV pool of LAYERS buffers of PAGES pages; each room is
 * a few pages of every layer. Exit status 0 once every room arrived intact.
 */
#define _DEFAULT_SOURCE /* usleep */
#include <pdx/pdx.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { LAYERS = 4, PAGES = 256, PAGE_BYTES = 4096, ROOM_PAGES = 8, ROOMS = 16 };

static uint8_t pool[LAYERS][PAGES][PAGE_BYTES];

static void check(pdx_status_t st, const char *what)
{
    if (st != PDX_OK) {
        fprintf(stderr, "%s: %s\n", what, pdx_status_str(st));
        exit(1);
    }
}

/* The room's pages, and the byte every one of them holds in layer l. */
static void room_pages(uint64_t room, uint32_t *pages)
{
    for (uint32_t i = 0; i < ROOM_PAGES; i++)
        pages[i] = (uint32_t)(room * ROOM_PAGES + i * 3) % PAGES;
}

static uint8_t room_byte(uint64_t room, uint32_t l, uint32_t i)
{
    return (uint8_t)(room * 31 + l * 7 + i);
}

/* Poll the room to its end (a server does this once per scheduler step). */
static pdx_room_state_t wait_room(pdx_engine_t *e, uint64_t room)
{
    pdx_room_state_t st;
    char why[256];

    while ((st = pdx_poll(e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED)
        usleep(100);
    if (st == PDX_ROOM_FAILED && pdx_room_error(e, room, why, sizeof(why)) == PDX_OK)
        fprintf(stderr, "room %llu failed: %s\n", (unsigned long long)room, why);
    return st;
}

/* Done with the room's pages: after PDX_OK they may be reused. */
static void release(pdx_engine_t *e, uint64_t room)
{
    while (pdx_release(e, room) == PDX_INPROGRESS) /* writes may still land: the fence */
        usleep(100);
}

int main(int argc, char **argv)
{
    pdx_buffer_desc_t bufs[LAYERS];
    pdx_group_desc_t group = {.buffers_per_layer = 1, .nbuffers = LAYERS, .npages = PAGES,
                              .buffers = bufs};
    pdx_layout_desc_t desc = {.field_mask = PDX_LAYOUT_FIELD_GROUPS | PDX_LAYOUT_FIELD_LAYERS,
                              .ngroups = 1, .layer_begin = 0, .layer_end = LAYERS,
                              .groups = &group};
    uint32_t mem, layout, peer, pages[ROOM_PAGES], bad = 0;
    pdx_pages_t list = {pages, ROOM_PAGES};
    pdx_config_t cfg;
    pdx_engine_t *e;
    int prefill = argc >= 2 && strcmp(argv[1], "prefill") == 0;

    if (argc < 2 || (!prefill && argc != 3)) {
        fprintf(stderr, "usage: pd_transfer prefill [HOST:PORT] | decode HOST:PORT\n");
        return 2;
    }
    check(pdx_config_init(&cfg), "configuration");
    snprintf(cfg.listen, sizeof(cfg.listen), "%s",
             prefill && argc == 3 ? argv[2] : "127.0.0.1:0");
    check(pdx_engine_create(&cfg, &e), "pdx_engine_create");
    check(pdx_mem_register(e, pool, sizeof(pool), &mem), "pdx_mem_register");
    for (uint32_t l = 0; l < LAYERS; l++)
        bufs[l] = (pdx_buffer_desc_t){.mem = mem, .offset = (uint64_t)l * PAGES * PAGE_BYTES,
                                      .bytes_per_page = PAGE_BYTES};
    check(pdx_layout_create(e, &desc, &layout), "pdx_layout_create");

    if (prefill) {
        printf("%s\n", pdx_engine_address(e));
        fflush(stdout);
        check(pdx_peer_accept(e, 60000, &peer), "waiting for decode");
        for (uint64_t room = 1; room <= ROOMS; room++) {
            room_pages(room, pages);
            for (uint32_t l = 0; l < LAYERS; l++)
                for (uint32_t i = 0; i < ROOM_PAGES; i++)
                    memset(pool[l][pages[i]], room_byte(room, l, i), PAGE_BYTES);
            /* The pages are final here: no gate. A GPU producer passes one. */
            check(pdx_send(e, room, layout, &list, NULL, NULL, PDX_SEND_LAST), "pdx_send");
            bad += wait_room(e, room) != PDX_ROOM_SUCCESS;
            release(e, room);
        }
    } else {
        check(pdx_peer_connect(e, argv[2], 10000, &peer), "pdx_peer_connect");
        for (uint64_t room = 1; room <= ROOMS; room++) {
            room_pages(room, pages);
            check(pdx_expect(e, peer, room, layout, &list, NULL, 1, 10000), "pdx_expect");
            if (wait_room(e, room) != PDX_ROOM_SUCCESS)
                bad++;
            else /* SUCCESS: every byte is placed and visible */
                for (uint32_t l = 0; l < LAYERS; l++)
                    for (uint32_t i = 0; i < ROOM_PAGES; i++)
                        for (uint32_t b = 0; b < PAGE_BYTES; b++)
                            bad += pool[l][pages[i]][b] != room_byte(room, l, i);
            release(e, room);
        }
        printf("decode: %u rooms, %s\n", ROOMS, bad ? "CORRUPT" : "every byte verified");
    }
    pdx_engine_destroy(e); /* says goodbye to the peer */
    return bad ? 1 : 0;
}
