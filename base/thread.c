#include "thread.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

int pdx_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    return pdx_thread_start_on(thread, fn, arg, NULL);
}

int pdx_thread_start_on(pthread_t *thread, void *(*fn)(void *), void *arg,
                        const cpu_set_t *cpus)
{
    pthread_attr_t attr;
    sigset_t all, old;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = cpus ? pthread_attr_init(&attr) : 0;
    if (cpus && rc == 0) {
        rc = pthread_attr_setaffinity_np(&attr, sizeof(*cpus), cpus);
        if (rc == 0)
            rc = pthread_create(thread, &attr, fn, arg);
        pthread_attr_destroy(&attr);
        if (rc == EINVAL) {
            pdx_info("a thread's CPU set was refused (%s): it runs unbound", strerror(rc));
            cpus = NULL;
        }
    }
    if (!cpus)
        rc = pthread_create(thread, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

bool pdx_thread_join(pthread_t thread, uint32_t ms, const char *what)
{
    struct timespec ts = pdx_timespec_in(CLOCK_REALTIME, ms);
    int rc = pthread_timedjoin_np(thread, NULL, &ts);

    if (rc)
        pdx_error("%s did not stop within %u ms: %s", what, ms, strerror(rc));
    return rc == 0;
}
