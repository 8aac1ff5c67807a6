/*
 * Logging. The first function that sees an error logs it once, with its
 * cause; callers pass the status up without logging again. PDX_LOG sets the
 * level; pdx_trace() compiles out of release builds.
 */
#ifndef PDX_LOG_H
#define PDX_LOG_H

#include "pdx/pdx.h"

void pdx_log_set_level(pdx_log_level_t level);
pdx_log_level_t pdx_log_get_level(void);
/* The engine this thread's lines are about: its identity and address
 * (copied; a repeated identity costs a compare). 0 and NULL: none. */
void pdx_log_tag(uint64_t id, const char *engine);
void pdx_log_write(pdx_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Test hooks: count of messages at PDX_LOG_ERROR, and at PDX_LOG_WARN,
 * written so far. */
uint64_t pdx_log_error_count(void);
uint64_t pdx_log_warn_count(void);

#define pdx_log(level, ...)                                              \
    do {                                                                 \
        if ((level) <= pdx_log_get_level())                              \
            pdx_log_write((level), __FILE__, __LINE__, __VA_ARGS__);     \
    } while (0)

#define pdx_error(...) pdx_log(PDX_LOG_ERROR, __VA_ARGS__)
#define pdx_warn(...)  pdx_log(PDX_LOG_WARN, __VA_ARGS__)
#define pdx_info(...)  pdx_log(PDX_LOG_INFO, __VA_ARGS__)
#define pdx_debug(...) pdx_log(PDX_LOG_DEBUG, __VA_ARGS__)
#ifdef NDEBUG
#define pdx_trace(...) do { } while (0)
#else
#define pdx_trace(...) pdx_log(PDX_LOG_TRACE, __VA_ARGS__)
#endif

#endif
