/*
 * What the libFuzzer targets share: the entry points, a log handler that
 * drops pdx's lines (a fuzzer makes millions of bad inputs), and a check
 * that aborts with a message, which libFuzzer reports as a crash.
 */
#ifndef PDX_FUZZ_H
#define PDX_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <pdx/pdx.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void fuzz_quiet(void *arg, pdx_log_level_t level, const char *engine, const char *msg)
{
    (void)arg, (void)level, (void)engine, (void)msg;
}

#define FUZZ_INIT_QUIET()                                   \
    int LLVMFuzzerInitialize(int *argc, char ***argv)       \
    {                                                       \
        (void)argc, (void)argv;                             \
        pdx_log_set_handler(fuzz_quiet, NULL);              \
        return 0;                                           \
    }

#define FUZZ_CHECK(cond, ...)                               \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "fuzz check failed: " __VA_ARGS__); \
            fputc('\n', stderr);                            \
            abort();                                        \
        }                                                   \
    } while (0)

#endif
