/*
 * The plain-C check harness of the GPU test programs (GPU machines have no
 * Criterion) and the event wait they share. CHECK counts a pass or prints
 * the failure; a program ends with "N passed, N failed" (gpu_check_summary)
 * and a non-zero exit status when anything failed. Included by one file of
 * each program.
 */
#ifndef PDX_GPU_CHECK_H
#define PDX_GPU_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "hip/pdx_hip.h"

static int passed, failed;

static void check(int ok, const char *expr, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void check(int ok, const char *expr, int line, const char *fmt, ...)
{
    va_list ap;

    if (ok) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL line %d: %s: ", line, expr);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

/* CHECK(condition, "format", ...): the message says what was seen. */
#define CHECK(cond, ...) check(!!(cond), #cond, __LINE__, __VA_ARGS__)

/* Poll event until it completed or timeout_ms passed; the polls taken. */
static pdx_status_t wait_event(void *event, uint64_t timeout_ms, uint64_t *polls_p)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms), polls = 0;
    pdx_status_t st;

    while ((st = pdx_hip_event_query(event)) == PDX_INPROGRESS && pdx_now_ns() < deadline)
        polls++;
    *polls_p = polls;
    return st;
}

/* The closing line and the exit status. */
static int gpu_check_summary(void)
{
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

#endif
