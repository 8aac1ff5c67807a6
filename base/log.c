/*
 * Logging: one line per event, made only at or above PDX_LOG's level. A
 * line carries the time (UTC, microseconds), the pid, the engine it is
 * about (the thread's: engine threads are tagged when they start, API calls
 * as they enter) and the level, then file:line and the message. It goes to
 * stderr, or to the handler pdx_log_set_handler() installed.
 */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static _Atomic int log_level = PDX_LOG_WARN;
static _Atomic uint64_t log_errors, log_warnings;
static pdx_log_handler_t *_Atomic log_handler;
static void *_Atomic log_handler_arg;

/* The engine this thread works for: a copy, so it never dangles. */
static _Thread_local char tag[PDX_NAME_MAX];
static _Thread_local uint64_t tag_id;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void pdx_log_set_level(pdx_log_level_t level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

pdx_log_level_t pdx_log_get_level(void)
{
    return (pdx_log_level_t)atomic_load_explicit(&log_level, memory_order_relaxed);
}

void pdx_log_set_handler(pdx_log_handler_t *fn, void *arg)
{
    atomic_store_explicit(&log_handler_arg, arg, memory_order_relaxed);
    atomic_store_explicit(&log_handler, fn, memory_order_release);
}

void pdx_log_tag(uint64_t id, const char *engine)
{
    if (id == tag_id && id)
        return;
    tag_id = id;
    snprintf(tag, sizeof(tag), "%s", engine ? engine : "");
}

uint64_t pdx_log_error_count(void)
{
    return atomic_load(&log_errors);
}

uint64_t pdx_log_warn_count(void)
{
    return atomic_load(&log_warnings);
}

void pdx_log_write(pdx_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    pdx_log_handler_t *fn = atomic_load_explicit(&log_handler, memory_order_acquire);
    const char *base = strrchr(file, '/');
    char msg[512], when[40];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n;

    if (level == PDX_LOG_ERROR)
        atomic_fetch_add(&log_errors, 1);
    else if (level == PDX_LOG_WARN)
        atomic_fetch_add(&log_warnings, 1);
    n = snprintf(msg, sizeof(msg), "%s:%d: ", base ? base + 1 : file, line);
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    va_end(ap);
    if (fn) {
        fn(atomic_load_explicit(&log_handler_arg, memory_order_relaxed), level, tag, msg);
        return;
    }
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    /* One fprintf per line keeps lines whole across threads. */
    fprintf(stderr, "%s.%06ldZ %d %s pdx %s %s\n", when, (long)tv.tv_usec, (int)getpid(),
            tag[0] ? tag : "-", level_names[level], msg);
}
