#include "thread.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "util.h"

int pdx_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    int rc;

    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
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
