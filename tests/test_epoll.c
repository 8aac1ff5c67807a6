/*
 * pdx_epoll_ctl: the one epoll registration of tcp's progress thread, the
 * shards and the control thread. A registration that works delivers its
 * cookie; one that fails returns PDX_ERR_IO with one line naming its owner,
 * the operation, the fd and the cause; a failed remove is not an error.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "epoll.h"
#include "log.h"

static char last[512];
static int lines;

static void handler(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    (void)arg;
    (void)level;
    (void)engine;
    lines++;
    snprintf(last, sizeof(last), "%s", msg);
}

static int ep = -1, fds[2] = {-1, -1};

static void init(void)
{
    ep = epoll_create1(EPOLL_CLOEXEC);
    cr_assert_geq(ep, 0);
    cr_assert_eq(pipe(fds), 0);
    pdx_log_set_handler(handler, NULL);
}

static void fini(void)
{
    pdx_log_set_handler(NULL, NULL);
    close(fds[0]);
    close(fds[1]);
    close(ep);
}

static uint64_t wait_cookie(void)
{
    struct epoll_event ev;

    cr_assert_eq(epoll_wait(ep, &ev, 1, 1000), 1, "no event within 1 s");
    return ev.data.u64;
}

TestSuite(epoll, .init = init, .fini = fini, .timeout = 30);

Test(epoll, a_registration_delivers_its_cookie_and_a_change_replaces_it)
{
    cr_assert_eq(pdx_epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], EPOLLIN, (epoll_data_t){.u64 = 7},
                               "pipe %d", 1), PDX_OK);
    cr_assert_eq(write(fds[1], "x", 1), 1);
    cr_expect_eq(wait_cookie(), 7);
    cr_assert_eq(pdx_epoll_ctl(ep, EPOLL_CTL_MOD, fds[0], EPOLLIN, (epoll_data_t){.u64 = 9},
                               "pipe %d", 1), PDX_OK);
    cr_expect_eq(wait_cookie(), 9);
    cr_assert_eq(pdx_epoll_ctl(ep, EPOLL_CTL_DEL, fds[0], 0, (epoll_data_t){0}, "pipe"), PDX_OK);
    cr_expect_eq(epoll_wait(ep, &(struct epoll_event){0}, 1, 0), 0, "removed fd still reported");
    cr_expect_eq(lines, 0, "a working registration logged: %s", last);
}

Test(epoll, a_failed_add_is_one_error_naming_its_owner_and_cause)
{
    uint64_t errors;

    cr_assert_eq(pdx_epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], EPOLLIN, (epoll_data_t){0}, "a"),
                 PDX_OK);
    errors = pdx_log_error_count();
    cr_expect_eq(pdx_epoll_ctl(ep, EPOLL_CTL_ADD, fds[0], EPOLLIN, (epoll_data_t){0},
                               "shard %u", 3u), PDX_ERR_IO);
    cr_expect_eq(pdx_log_error_count(), errors + 1);
    cr_expect_eq(lines, 1);
    cr_expect(strstr(last, "shard 3: epoll add of fd ") != NULL, "line: %s", last);
    cr_expect(strstr(last, strerror(EEXIST)) != NULL, "line: %s", last);
    cr_expect_eq(pdx_epoll_ctl(ep, EPOLL_CTL_MOD, -1, EPOLLIN, (epoll_data_t){0}, "b"),
                 PDX_ERR_IO);
    cr_expect_eq(pdx_log_error_count(), errors + 2);
    cr_expect(strstr(last, "b: epoll mod of fd -1: ") != NULL, "line: %s", last);
}

Test(epoll, a_failed_remove_is_not_an_error)
{
    uint64_t errors = pdx_log_error_count(), warnings = pdx_log_warn_count();

    cr_expect_eq(pdx_epoll_ctl(ep, EPOLL_CTL_DEL, fds[0], 0, (epoll_data_t){0}, "c"),
                 PDX_ERR_IO);
    cr_expect_eq(pdx_log_error_count(), errors);
    cr_expect_eq(pdx_log_warn_count(), warnings);
}
