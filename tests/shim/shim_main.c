/* Runner of the Criterion-compatible harness (tsan preset); see criterion.h. */
#include "criterion/criterion.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define SKIP_EXIT 77

static pdx_shim_test_t *tests;
static pdx_shim_suite_t *suites;
static int expect_failed;

void pdx_shim_register(pdx_shim_test_t *test)
{
    test->next = tests;
    tests = test;
}

void pdx_shim_register_suite(pdx_shim_suite_t *suite)
{
    suite->next = suites;
    suites = suite;
}

void pdx_shim_check(int ok, int fatal, const char *file, int line, const char *expr,
                    const char *fmt, ...)
{
    va_list ap;

    if (ok)
        return;
    fprintf(stderr, "[----] %s:%d: %s failed: %s", file, line, fatal ? "assertion" : "expectation",
            expr);
    if (fmt[0]) {
        fprintf(stderr, ": ");
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fprintf(stderr, "\n");
    if (fatal)
        _exit(1);
    expect_failed = 1;
}

void pdx_shim_skip(const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "[SKIP] ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
    _exit(SKIP_EXIT);
}

void pdx_shim_log(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

static const pdx_shim_suite_t *suite_of(const pdx_shim_test_t *t)
{
    for (const pdx_shim_suite_t *s = suites; s; s = s->next)
        if (strcmp(s->name, t->suite) == 0)
            return s;
    return NULL;
}

/* Run one test in a child; 0 passed, 1 failed, 2 skipped. */
static int run_one(const pdx_shim_test_t *t)
{
    const pdx_shim_suite_t *s = suite_of(t);
    void (*init)(void) = t->init ? t->init : s ? s->init : NULL;
    void (*fini)(void) = t->fini ? t->fini : s ? s->fini : NULL;
    double timeout = t->timeout > 0 ? t->timeout : s && s->timeout > 0 ? s->timeout : 300;
    int status;
    pid_t pid;

    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        perror("fork");
        return 1;
    }
    if (pid == 0) {
        alarm((unsigned)(timeout + 1));
        if (init)
            init();
        t->fn();
        if (fini)
            fini();
        fflush(NULL);
        _exit(expect_failed ? 1 : 0);
    }
    if (waitpid(pid, &status, 0) < 0)
        return 1;
    if (WIFEXITED(status) && WEXITSTATUS(status) == SKIP_EXIT)
        return 2;
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);

        if (sig == t->signal)
            return 0;
        fprintf(stderr, "[----] %s::%s: %s\n", t->suite, t->name,
                sig == SIGALRM ? "timed out" : strsignal(sig));
        return 1;
    }
    return WIFEXITED(status) && WEXITSTATUS(status) == t->exit_code ? 0 : 1;
}

int main(int argc, char **argv)
{
    const char *filter = NULL;
    int passed = 0, failed = 0, skipped = 0;

    for (int i = 1; i < argc; i++)
        if (strncmp(argv[i], "--filter=", 9) == 0)
            filter = argv[i] + 9;
    for (const pdx_shim_test_t *t = tests; t; t = t->next) {
        char full[256];
        int r;

        snprintf(full, sizeof(full), "%s::%s", t->suite, t->name);
        if ((filter && !strstr(full, filter)) || t->disabled)
            continue;
        r = run_one(t);
        fprintf(stderr, "[%s] %s\n", r == 0 ? "PASS" : r == 1 ? "FAIL" : "SKIP", full);
        passed += r == 0;
        failed += r == 1;
        skipped += r == 2;
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}
