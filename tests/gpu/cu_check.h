/*
 * What the CUDA C++ test programs of the engine (test_gpu_gates,
 * test_gpu_ipc_engine) share: CHECK (a pass counted, or the failure
 * printed), CUDA_OK (a runtime call that must work), a watchdog that ends a
 * hung program saying where, and waits on rooms. A program ends with
 * "N passed, N failed". Included by one file of each program.
 */
#ifndef PDX_CU_CHECK_H
#define PDX_CU_CHECK_H

#include "gpu_rt.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "pdx/pdx.h"

#define CU_CHECK_ALARM_S 120 /* no progress this long: the program fails */

static int passed, failed;
static volatile const char *phase = "start";
static volatile uint64_t phase_room;

/* A test that hangs says where, then fails (SIGALRM: cu_check_init). */
static void on_alarm(int sig)
{
    (void)sig;
    printf("FAIL: no progress for %d s in %s (room %llu)\n", CU_CHECK_ALARM_S, phase,
           (unsigned long long)phase_room);
    printf("%d passed, %d failed\n", passed, failed + 1);
    _exit(1);
}

static void cu_check_init(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGALRM, on_alarm);
}

/* The program reached `what` (room: 0 when none): the watchdog restarts. */
static void progress(const char *what, uint64_t room)
{
    phase = what;
    phase_room = room;
    alarm(CU_CHECK_ALARM_S);
}

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (cond) {                                                                       \
            passed++;                                                                     \
        } else {                                                                          \
            failed++;                                                                     \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                   \
            printf(__VA_ARGS__);                                                          \
            printf("\n");                                                                 \
        }                                                                                 \
    } while (0)

#define CUDA_OK(call)                                                                     \
    do {                                                                                  \
        cudaError_t err_ = (call);                                                        \
        if (err_ != cudaSuccess) {                                                        \
            printf("FATAL %s:%d: %s: %s\n", __FILE__, __LINE__, #call,                     \
                   cudaGetErrorName(err_));                                               \
            exit(2);                                                                      \
        }                                                                                 \
    } while (0)

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The room's state once SUCCESS or FAILED, or when ms ran out. */
static pdx_room_state_t wait_done(pdx_engine_t *e, uint64_t room, int ms)
{
    uint64_t end = now_ns() + (uint64_t)ms * 1000000ull;
    pdx_room_state_t st;

    while ((st = pdx_poll(e, room)) != PDX_ROOM_SUCCESS && st != PDX_ROOM_FAILED &&
           now_ns() < end)
        usleep(50);
    return st;
}

/* pdx_release until it says OK (10 s at most). */
static void release_room(pdx_engine_t *e, uint64_t room)
{
    for (int i = 0; i < 10000 && pdx_release(e, room) == PDX_INPROGRESS; i++)
        usleep(1000);
}

#endif
