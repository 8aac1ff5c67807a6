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


int main(int argc, char **argv)
{
    static uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES];
    uint32_t pages[CHURN_ROOM_PAGES], layout, peer;
    pdx_pages_t p = {pages, CHURN_ROOM_PAGES};
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
    if ((st = churn_open(pool, "1", "127.0.0.1:0", &e, &layout)) != PDX_OK)
        die("the engine", st);
    if ((st = pdx_peer_connect(e, argv[2], 10000, &peer)) != PDX_OK)
        die("pdx_peer_connect", st);
    if (prefill) {
        churn_fill(pool, room);
        if ((st = pdx_send(e, room, layout, &p, NULL, NULL, PDX_SEND_LAST)) != PDX_OK)
            die("pdx_send", st);
    } else if ((st = pdx_expect(e, peer, room, layout, &p, NULL, 1, 20000)) != PDX_OK) {
        die("pdx_expect", st);
    }
    if (churn_wait(e, room) != PDX_ROOM_SUCCESS)
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
