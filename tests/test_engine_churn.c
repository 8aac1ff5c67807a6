/*
 * A long-lived decode engine against PDX_TEST_PROCS (default 200; 50 under
 * a sanitizer) sequential prefill processes (churn_child) that each send it
 * a room, and a long-lived prefill engine against as many decode processes
 * it sends a room to, every byte checked on the receiving side. Each child
 * leaves in turn by destroying its engine (a goodbye), by exiting without a
 * word (the kernel closes its sockets), or by being killed with SIGKILL.
 * The engine's peers are all retired in the end, and its open fds and RSS
 * after warm-up come back (both printed).
 */
#include <criterion/criterion.h>
#include <pdx/pdx.h>
#include <stdbool.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "churn.h"
#include "proc_usage.h"
#include "sanitized.h"
#include "util.h"


static pdx_engine_t *eng;

static void fini(void)
{
    pdx_engine_destroy(eng);
    eng = NULL;
}



static void wait_no_peers(void)
{
    pdx_stats_t st;

    for (int i = 0; i < 10000; i++) {
        cr_assert_eq(pdx_engine_stats(eng, &st), PDX_OK);
        if (st.peers == 0 && st.handshakes == 0)
            return;
        usleep(1000);
    }
    cr_assert_fail("%llu peers left", (unsigned long long)st.peers);
}


/* Start a child; its stdout is *out_p. */
static pid_t spawn_child(const char *role, uint64_t room, const char *mode, int *out_p)
{
    char roomtxt[32];
    char *argv[] = {PDX_CHURN_CHILD, (char *)role, (char *)pdx_engine_address(eng), roomtxt,
                    (char *)mode, NULL};

    snprintf(roomtxt, sizeof(roomtxt), "%llu", (unsigned long long)room);
    return child_spawn(PDX_CHURN_CHILD, argv, out_p);
}

/* The long-lived engine receives each child's room (decode), or sends one. */
static void serve_processes(bool decode)
{
    static const char *const modes[] = {"clean", "exit", "hang"};
    static uint8_t pool[CHURN_PAGES * CHURN_PAGE_BYTES];
    const char *v = getenv("PDX_TEST_PROCS");
    /* Under a sanitizer every child starts instrumented (a fraction of a
     * second each): fewer of them there; the default preset runs 200. */
    uint32_t n = v && atoi(v) > 0 ? (uint32_t)atoi(v) : SANITIZED ? 50 : 200;
    uint32_t warm = PDX_MIN(20u, n / 4);
    uint32_t layout, pages[CHURN_ROOM_PAGES];
    pdx_pages_t p = {pages, CHURN_ROOM_PAGES};
    pdx_stats_t st;
    uint32_t unacked = 0;
    long rss0 = 0, rss1;
    int fds0 = 0, fds1;

    cr_assert_eq(churn_open(pool, "2", "127.0.0.1:0", &eng, &layout), PDX_OK);
    for (uint32_t i = 0; i < n; i++) {
        bool child_sends = decode;
        const char *mode = modes[i % 3];
        uint64_t room = 1000 + i;
        char line[8] = "";
        pdx_room_state_t state;
        uint32_t peer;
        int out, status;
        pid_t pid;

        if (i == warm) {
            wait_no_peers();
            rss0 = proc_rss_kib();
            fds0 = proc_open_fds();
        }
        churn_pages(room, pages);
        pid = spawn_child(child_sends ? "prefill" : "decode", room, mode, &out);
        cr_assert_eq(pdx_peer_accept(eng, 20000, &peer), PDX_OK, "child %u connected", i);
        if (child_sends) {
            memset(pool, 0, sizeof(pool));
            cr_assert_eq(pdx_expect(eng, peer, room, layout, &p, NULL, 1, 20000), PDX_OK);
        } else {
            churn_fill(pool, room);
            cr_assert_eq(pdx_send(eng, room, layout, &p, NULL, NULL, PDX_SEND_LAST), PDX_OK);
        }
        state = churn_wait(eng, room);
        if (!child_sends && state == PDX_ROOM_FAILED && strcmp(mode, "hang") != 0) {
            /* A decode process that leaves at once after its SUCCESS may take
             * the acknowledgements of our last writes with it (over tcp):
             * then this side cannot know they landed, and fails the room for
             * the peer's loss. The child's "ok" below says they did. */
            char err[256] = "";

            pdx_room_error(eng, room, err, sizeof(err));
            cr_assert(strstr(err, "peer") != NULL, "child %u's room: %s", i, err);
            unacked++;
        } else {
            cr_assert_eq(state, PDX_ROOM_SUCCESS, "child %u's room", i);
        }
        if (child_sends)
            cr_assert_eq(churn_check(pool, room), 0, "child %u's bytes", i);
        while (pdx_release(eng, room) == PDX_INPROGRESS)
            usleep(1000);
        cr_assert_eq(read(out, line, 3), 3, "child %u said nothing", i);
        cr_assert_str_eq(line, "ok\n", "child %u", i);
        if (strcmp(mode, "hang") == 0)
            kill(pid, SIGKILL);
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_assert(strcmp(mode, "hang") == 0 ? WIFSIGNALED(status)
                                            : WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "child %u (%s) ended with status 0x%x", i, mode, status);
        close(out);
    }
    wait_no_peers();
    rss1 = proc_rss_kib();
    fds1 = proc_open_fds();
    cr_assert_eq(pdx_engine_stats(eng, &st), PDX_OK);
    printf("%s engine against %u peer processes: RSS %ld KiB after warm-up, %ld KiB at the end "
           "(%+ld KiB); open fds %d and %d; %llu peers retired; %u rooms whose last acks "
           "left with their process\n", decode ? "decode" : "prefill", n, rss0, rss1,
           rss1 - rss0, fds0, fds1, (unsigned long long)st.peers_retired, unacked);
    cr_expect_eq(fds1, fds0);
#if !SANITIZED
    cr_expect_lt(rss1 - rss0, 32 * 1024, "RSS grew by %ld KiB", rss1 - rss0);
#endif
    cr_expect_eq(st.peers_retired, n);
}

Test(churn, a_decode_engine_serves_prefill_processes, .fini = fini, .timeout = 900)
{
    serve_processes(true);
}

Test(churn, a_prefill_engine_serves_decode_processes, .fini = fini, .timeout = 900)
{
    serve_processes(false);
}
