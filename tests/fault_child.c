/*
 * The peer process test_engine_kill kills or stops, through the public API
 * only (the geometry and bytes of churn.h):
 *
 *     fault_child decode LISTEN ROOM   listen at LISTEN (host:port), print
 *                                      "addr ADDRESS", take one peer, expect
 *                                      ROOM from it, print "ready"
 *     fault_child prefill ADDR ROOM    connect to ADDR, send the first of
 *                                      ROOM's two chunks, print "ready"
 *
 * Then it waits for the room to end (60 s at most), prints "room SUCCESS"
 * (as decode: every byte checked) or "room FAILED: why", destroys its engine and exits 0; that is what a
 * process that was stopped and continued does once its peer has given up
 * on it. Any other failure is a message on stderr and exit status 1.
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
    fprintf(stderr, "fault_child %d: %s: %s\n", (int)getpid(), what, pdx_status_str(st));
    exit(1);
}

int main(int argc, char **argv)
{
    static uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES];
    uint32_t pages[CHURN_ROOM_PAGES], layout, peer;
    pdx_pages_t first = {pages, CHURN_ROOM_PAGES / 2}, all = {pages, CHURN_ROOM_PAGES};
    const struct timespec ms = {0, 1000000};
    pdx_room_state_t state = PDX_ROOM_NONE;
    char why[256] = "";
    pdx_engine_t *e;
    pdx_status_t st;
    uint64_t room;
    bool decode;

    if (argc != 4) {
        fprintf(stderr, "usage: fault_child decode LISTEN ROOM | prefill ADDR ROOM\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    decode = strcmp(argv[1], "decode") == 0;
    room = strtoull(argv[3], NULL, 10);
    churn_pages(room, pages);
    if ((st = churn_open(pool, "2", decode ? argv[2] : "127.0.0.1:0", &e, &layout)) != PDX_OK)
        die("the engine", st);
    if (decode) {
        printf("addr %s\n", pdx_engine_address(e));
        if ((st = pdx_peer_accept(e, 20000, &peer)) != PDX_OK)
            die("pdx_peer_accept", st);
        if ((st = pdx_expect(e, peer, room, layout, &all, NULL, 1, 60000)) != PDX_OK)
            die("pdx_expect", st);
    } else {
        if ((st = pdx_peer_connect(e, argv[2], 10000, &peer)) != PDX_OK)
            die("pdx_peer_connect", st);
        churn_fill(pool, room);
        if ((st = pdx_send(e, room, layout, &first, NULL, NULL, 0)) != PDX_OK)
            die("pdx_send", st);
    }
    printf("ready\n");
    for (int i = 0; i < 60000; i++) {
        state = pdx_poll(e, room);
        if (state == PDX_ROOM_SUCCESS || state == PDX_ROOM_FAILED)
            break;
        nanosleep(&ms, NULL);
    }
    if (state == PDX_ROOM_FAILED)
        pdx_room_error(e, room, why, sizeof(why));
    if (state == PDX_ROOM_SUCCESS && decode && churn_check(pool, room) != 0)
        die("the room's bytes", PDX_ERR_PROTO);
    printf("room %s%s%s\n", state == PDX_ROOM_SUCCESS ? "SUCCESS" : "FAILED",
           why[0] ? ": " : "", why);
    while (pdx_release(e, room) == PDX_INPROGRESS)
        nanosleep(&ms, NULL);
    pdx_engine_destroy(e);
    return 0;
}
