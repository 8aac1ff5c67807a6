#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

static _Atomic int log_level = PDX_LOG_WARN;
static _Atomic uint64_t log_errors, log_warnings;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void pdx_log_set_level(pdx_log_level_t level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

pdx_log_level_t pdx_log_get_level(void)
{
    return (pdx_log_level_t)atomic_load_explicit(&log_level, memory_order_relaxed);
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
    char msg[512];
    va_list ap;
    const char *base = strrchr(file, '/');

    if (level == PDX_LOG_ERROR)
        atomic_fetch_add(&log_errors, 1);
    else if (level == PDX_LOG_WARN)
        atomic_fetch_add(&log_warnings, 1);
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* One fprintf per message keeps lines whole across threads. */
    fprintf(stderr, "pdx %s %s:%d: %s\n", level_names[level], base ? base + 1 : file, line, msg);
}
