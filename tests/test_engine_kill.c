/*
 * Peers that die or stall, as real processes (fault_child) over tcp, while
 * a bystander engine of this process moves a room through the same
 * long-lived engine:
 * - a decode killed (SIGKILL) mid-transfer: the prefill room to it FAILED
 *   within its deadline, the bystander's room SUCCESS, and a decode
 *   restarted on the same address is served;
 * - a prefill killed mid-transfer: the decode room FAILED within its
 *   deadline, with a message naming the peer;
 * - either side stopped (SIGSTOP): the other fails the room once the peer
 *   is silent for 5 heartbeats, serves the bystander, and the stopped side,
 *   continued (SIGCONT), ends its room FAILED and exits cleanly;
 * - a pdx_expect whose metadata cannot be sent (the stopped prefill's
 *   control connection full) makes no room: its id is expected again later.
 * Each time to the terminal state is printed.
 */
#include <criterion/criterion.h>
#include <pdx/pdx.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "churn.h"
#include "util.h"


#define HEARTBEAT_MS "100"  /* a peer silent for 5 beats is gone: 0.5 s */
#define TRANSFER_MS  3000   /* PDX_TRANSFER_TIMEOUT_MS */
#define SLACK_MS     2000   /* what a loaded machine may add */

static uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES], by_pool[CHURN_PAGES * CHURN_PAGE_BYTES];
static pdx_engine_t *eng, *by;   /* the long-lived engine, the bystander */
static uint32_t layout, by_layout;
static pid_t child = -1;
static int child_out = -1;

static void fini(void)
{
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    if (child_out >= 0)
        close(child_out);
    child = -1;
    child_out = -1;
    pdx_engine_destroy(by);
    pdx_engine_destroy(eng);
    by = eng = NULL;
}

static void open_engines(void)
{
    setenv("PDX_HEARTBEAT_MS", HEARTBEAT_MS, 1);
    setenv("PDX_TRANSFER_TIMEOUT_MS", "3000", 1);
    setenv("PDX_BOOTSTRAP_TIMEOUT_MS", "3000", 1);
    cr_assert_eq(churn_open(pool, "2", "127.0.0.1:0", &eng, &layout), PDX_OK);
    cr_assert_eq(churn_open(by_pool, "1", "127.0.0.1:0", &by, &by_layout), PDX_OK);
}

static void spawn(const char *role, const char *addr, uint64_t room)
{
    char roomtxt[32];
    char *argv[] = {PDX_FAULT_CHILD, (char *)role, (char *)addr, roomtxt, NULL};

    snprintf(roomtxt, sizeof(roomtxt), "%llu", (unsigned long long)room);
    child = child_spawn(PDX_FAULT_CHILD, argv, &child_out);
}

/* The child's next line (without its newline), within timeout_ms. */
static void read_line(char *buf, size_t len, int timeout_ms)
{
    uint64_t until = pdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
    size_t n = 0;

    while (n + 1 < len) {
        struct pollfd p = {.fd = child_out, .events = POLLIN};
        ssize_t r;

        cr_assert(pdx_now_ns() < until, "no line from the child within %d ms", timeout_ms);
        if (poll(&p, 1, 50) <= 0)
            continue;
        r = read(child_out, buf + n, 1);
        cr_assert_eq(r, 1, "the child closed its output: %s", r < 0 ? strerror(errno) : "EOF");
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
}

/* The child's exit status, within timeout_ms. */
static int reap(int timeout_ms)
{
    uint64_t until = pdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
    int status = 0;

    while (waitpid(child, &status, WNOHANG) == 0) {
        cr_assert(pdx_now_ns() < until, "the child did not exit within %d ms", timeout_ms);
        usleep(1000);
    }
    child = -1;
    close(child_out);
    child_out = -1;
    return status;
}

static pdx_room_state_t wait_end(pdx_engine_t *e, uint64_t room, int timeout_ms)
{
    uint64_t until = pdx_now_ns() + (uint64_t)timeout_ms * 1000000u;
    pdx_room_state_t s;

    while ((s = pdx_poll(e, room)) != PDX_ROOM_SUCCESS && s != PDX_ROOM_FAILED &&
           pdx_now_ns() < until)
        usleep(500);
    return s;
}

static void release(pdx_engine_t *e, uint64_t room)
{
    for (int i = 0; i < 5000 && pdx_release(e, room) == PDX_INPROGRESS; i++)
        usleep(1000);
}

/* A room between the bystander and the long-lived engine, either way. */
static void bystander_room(uint64_t room, bool eng_sends)
{
    uint32_t pages[CHURN_ROOM_PAGES], peer;
    pdx_pages_t p = {pages, CHURN_ROOM_PAGES};
    pdx_engine_t *tx = eng_sends ? eng : by, *rx = eng_sends ? by : eng;

    churn_pages(room, pages);
    cr_assert_eq(pdx_peer_connect(rx, pdx_engine_address(tx), 5000, &peer), PDX_OK);
    cr_assert_eq(pdx_expect(rx, peer, room, eng_sends ? by_layout : layout, &p, NULL, 1, 5000),
                 PDX_OK);
    churn_fill(eng_sends ? pool : by_pool, room);
    cr_assert_eq(pdx_send(tx, room, eng_sends ? layout : by_layout, &p, NULL, NULL,
                          PDX_SEND_LAST), PDX_OK);
    cr_assert_eq(wait_end(rx, room, 5000), PDX_ROOM_SUCCESS, "the bystander's room");
    cr_assert_eq(churn_check(eng_sends ? by_pool : pool, room), 0);
    release(rx, room);
    cr_assert_eq(wait_end(tx, room, 5000), PDX_ROOM_SUCCESS);
    release(tx, room);
}

/* A decode child on listen: its address once it runs, and eng connected
 * to it with the child's room expected and half sent. */
static void decode_child_half_sent(const char *listen, uint64_t room, char *addr, size_t len)
{
    uint32_t pages[CHURN_ROOM_PAGES], peer;
    pdx_pages_t first = {pages, CHURN_ROOM_PAGES / 2};
    char line[256];

    spawn("decode", listen, room);
    read_line(line, sizeof(line), 10000);
    cr_assert_eq(strncmp(line, "addr ", 5), 0, "%s", line);
    snprintf(addr, len, "%s", line + 5);
    cr_assert_eq(pdx_peer_connect(eng, addr, 5000, &peer), PDX_OK);
    read_line(line, sizeof(line), 10000);
    cr_assert_str_eq(line, "ready");
    churn_pages(room, pages);
    churn_fill(pool, room);
    cr_assert_eq(pdx_send(eng, room, layout, &first, NULL, NULL, 0), PDX_OK);
}

/* A prefill child connected to eng, which expects the child's room and
 * has its first chunk; the child's peer id. */
static uint32_t prefill_child_half_sent(uint64_t room)
{
    uint32_t pages[CHURN_ROOM_PAGES], peer;
    pdx_pages_t p = {pages, CHURN_ROOM_PAGES};
    uint64_t until = pdx_now_ns() + 5000000000ull;
    char line[256];

    churn_pages(room, pages);
    spawn("prefill", pdx_engine_address(eng), room);
    cr_assert_eq(pdx_peer_accept(eng, 10000, &peer), PDX_OK);
    cr_assert_eq(pdx_expect(eng, peer, room, layout, &p, NULL, 1, TRANSFER_MS), PDX_OK);
    read_line(line, sizeof(line), 10000);
    cr_assert_str_eq(line, "ready");
    while (pdx_poll(eng, room) != PDX_ROOM_TRANSFERRING)
        cr_assert(pdx_now_ns() < until, "the first chunk never came");
    return peer;
}

static double ms_since(uint64_t t0)
{
    return (double)(pdx_now_ns() - t0) / 1e6;
}

/* The room FAILED within the deadline given; its message, printed. */
static void expect_failed(uint64_t room, int deadline_ms, const char *what, uint64_t t0,
                          char *why, size_t len)
{
    cr_assert_eq(wait_end(eng, room, deadline_ms + SLACK_MS), PDX_ROOM_FAILED, "%s", what);
    pdx_room_error(eng, room, why, len);
    printf("%s: FAILED after %.0f ms: %s\n", what, ms_since(t0), why);
    fflush(stdout);
    release(eng, room);
}

Test(kill, a_killed_decode, .fini = fini, .timeout = 60)
{
    char addr[256], again[256], line[256], why[256];
    uint64_t t0;

    open_engines();
    decode_child_half_sent("127.0.0.1:0", 1, addr, sizeof(addr));
    kill(child, SIGKILL);
    t0 = pdx_now_ns();
    bystander_room(100, true);
    expect_failed(1, TRANSFER_MS, "prefill room to a killed decode", t0, why, sizeof(why));
    reap(5000);
    /* a decode restarted on the same address is served */
    decode_child_half_sent(addr, 2, again, sizeof(again));
    cr_assert_str_eq(again, addr);
    {
        uint32_t pages[CHURN_ROOM_PAGES];
        pdx_pages_t rest = {pages + CHURN_ROOM_PAGES / 2, CHURN_ROOM_PAGES / 2};

        churn_pages(2, pages);
        cr_assert_eq(pdx_send(eng, 2, layout, &rest, NULL, NULL, PDX_SEND_LAST), PDX_OK);
    }
    read_line(line, sizeof(line), 10000);
    cr_assert_str_eq(line, "room SUCCESS");
    cr_assert_eq(wait_end(eng, 2, 5000), PDX_ROOM_SUCCESS);
    release(eng, 2);
    cr_assert_eq(WEXITSTATUS(reap(10000)), 0);
}

Test(kill, a_killed_prefill, .fini = fini, .timeout = 60)
{
    char why[256];
    uint64_t t0;

    open_engines();
    prefill_child_half_sent(3);
    kill(child, SIGKILL);
    t0 = pdx_now_ns();
    bystander_room(101, false);
    expect_failed(3, TRANSFER_MS, "decode room from a killed prefill", t0, why, sizeof(why));
    cr_expect_not_null(strstr(why, "127.0.0.1:"), "the peer is named: %s", why);
    reap(5000);
}

/* Stopped: silent for 5 heartbeats, it is gone; continued, it ends its
 * room FAILED and exits 0. */
static void stopped(bool decode_child, uint64_t room)
{
    char addr[256], line[256], why[256];
    uint64_t t0;
    int status;

    open_engines();
    if (decode_child)
        decode_child_half_sent("127.0.0.1:0", room, addr, sizeof(addr));
    else
        (void)prefill_child_half_sent(room);
    kill(child, SIGSTOP);
    t0 = pdx_now_ns();
    bystander_room(room + 100, decode_child);
    expect_failed(room, TRANSFER_MS, decode_child ? "prefill room to a stopped decode"
                                                  : "decode room from a stopped prefill",
                  t0, why, sizeof(why));
    kill(child, SIGCONT);
    t0 = pdx_now_ns();
    read_line(line, sizeof(line), 20000);
    printf("the continued %s: \"%s\" after %.0f ms\n", decode_child ? "decode" : "prefill", line,
           ms_since(t0));
    cr_expect_eq(strncmp(line, "room FAILED", 11), 0, "%s", line);
    status = reap(10000);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the continued child's exit");
}

Test(kill, a_stopped_decode, .fini = fini, .timeout = 60)
{
    stopped(true, 5);
}

Test(kill, a_stopped_prefill, .fini = fini, .timeout = 60)
{
    stopped(false, 6);
}

/*
 * A stopped prefill reads nothing: rooms of many pages fill its control
 * connection until pdx_expect is PDX_ERR_AGAIN. That call makes no room
 * (nothing to release, the id free), and once the peer is gone a new
 * prefill is served under the same id.
 */
Test(kill, an_expect_that_cannot_be_sent_makes_no_room, .fini = fini, .timeout = 60)
{
    static uint32_t many[PDX_MAX_ROOM_PAGES];
    pdx_pages_t p = {many, PDX_MAX_ROOM_PAGES};
    pdx_status_t st = PDX_OK;
    uint32_t peer;
    uint64_t room = 1000;

    open_engines();
    setenv("PDX_HEARTBEAT_MS", "2000", 1); /* silent for 10 s before it is gone */
    pdx_engine_destroy(eng);
    cr_assert_eq(churn_open(pool, "2", "127.0.0.1:0", &eng, &layout), PDX_OK);
    for (uint32_t i = 0; i < PDX_MAX_ROOM_PAGES; i++)
        many[i] = i % CHURN_PAGES;
    peer = prefill_child_half_sent(7);
    kill(child, SIGSTOP);
    /* 2 MiB per ROOM: the socket's buffers and the 8 MiB queue fill */
    for (; room < 1064 && (st = pdx_expect(eng, peer, room, layout, &p, NULL, 1, 20000)) == PDX_OK;
         room++)
        ;
    cr_assert_eq(st, PDX_ERR_AGAIN, "room %llu: %s", (unsigned long long)room,
                 pdx_status_str(st));
    cr_expect_eq(pdx_poll(eng, room), PDX_ROOM_NONE, "the refused expect left a room");
    cr_expect_eq(pdx_release(eng, room), PDX_ERR_NOT_FOUND);
    kill(child, SIGKILL);
    reap(5000);
    for (uint64_t r = 1000; r < room; r++) {
        cr_expect_eq(wait_end(eng, r, 15000), PDX_ROOM_FAILED, "room %llu", (unsigned long long)r);
        release(eng, r);
    }
    wait_end(eng, 7, 15000);
    release(eng, 7);
    (void)prefill_child_half_sent(room); /* the id is free: expected and under way */
    kill(child, SIGKILL);
    reap(5000);
}
