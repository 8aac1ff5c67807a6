/*
 * Log lines: each carries the time, the pid and the engine it is about,
 * on stderr by default; pdx_log_set_handler() routes them elsewhere with
 * the level and the engine's address, from every thread of the engine.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <pdx/pdx.h>

typedef struct seen {
    pthread_mutex_t lock;
    int             lines, tagged, info;
    char            engine[PDX_NAME_MAX];
    char            first[512];
} seen_t;

static void handler(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    seen_t *s = arg;

    pthread_mutex_lock(&s->lock);
    if (s->lines++ == 0)
        snprintf(s->first, sizeof(s->first), "%s", msg);
    s->tagged += strcmp(engine, s->engine) == 0;
    s->info += level == PDX_LOG_INFO;
    pthread_mutex_unlock(&s->lock);
}

static pdx_engine_t *open_engine(void)
{
    pdx_config_t cfg;
    pdx_engine_t *e;

    cr_assert_eq(pdx_config_init(&cfg), PDX_OK);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_LOG", "info");
    cr_assert_eq(pdx_engine_create(&cfg, &e), PDX_OK);
    return e;
}

Test(log, a_handler_gets_every_line_with_its_engine)
{
    seen_t s = {.lock = PTHREAD_MUTEX_INITIALIZER};
    pdx_engine_t *e, *other;
    uint32_t peer;

    /* The engine's address is known only once it listens: a first engine
     * tells us the form; its lines, after that, carry it. */
    pdx_log_set_handler(handler, &s);
    e = open_engine();
    snprintf(s.engine, sizeof(s.engine), "%s", pdx_engine_address(e));
    s.lines = s.tagged = s.info = 0;
    other = open_engine();
    /* lines from the control thread (peer connected) and an API call */
    cr_assert_eq(pdx_peer_connect(other, pdx_engine_address(e), 5000, &peer), PDX_OK);
    cr_expect_eq(pdx_mem_deregister(e, 77), PDX_ERR_NOT_FOUND);
    pdx_engine_destroy(other);
    pdx_engine_destroy(e);
    pdx_log_set_handler(NULL, NULL);
    cr_expect_gt(s.lines, 0);
    cr_expect_gt(s.tagged, 0, "no line was about %s", s.engine);
    cr_expect_gt(s.info, 0);
    cr_expect(strchr(s.first, ':') && !strchr(s.first, '\n'), "\"%s\"", s.first);
}

Test(log, stderr_lines_carry_time_pid_and_engine)
{
    int fd = memfd_create("pdx-log", 0), saved = dup(2);
    char buf[8192] = "", want[64], *line;
    pdx_engine_t *e;
    ssize_t n;

    cr_assert_geq(fd, 0);
    fflush(stderr);
    dup2(fd, 2);
    e = open_engine();
    snprintf(want, sizeof(want), " %d %s pdx info ", (int)getpid(), pdx_engine_address(e));
    pdx_engine_destroy(e);
    fflush(stderr);
    dup2(saved, 2);
    n = pread(fd, buf, sizeof(buf) - 1, 0);
    cr_assert_gt(n, 0);
    line = strstr(buf, want);
    cr_assert_not_null(line, "no line with \"%s\" in:\n%s", want, buf);
    /* the time before it: 2026-12-01T22:53:46.123456Z */
    cr_expect(line - buf >= 27 && line[-1] == 'Z' && line[-8] == '.' && line[-17] == 'T',
              "%.*s", (int)(strchr(line, '\n') - line), line);
    close(fd);
}
