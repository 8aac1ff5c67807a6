/* Threads pdx starts: each takes no signals and is joined with a deadline. */
#ifndef PDX_THREAD_H
#define PDX_THREAD_H

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

/* Start fn(arg) with every signal blocked (the caller's handlers stay the
 * caller's). 0, or pthread_create's error. */
int pdx_thread_start(pthread_t *thread, void *(*fn)(void *), void *arg);

/* The same, the thread bound to cpus from its first instruction (NULL:
 * not bound). A set the kernel refuses (the CPUs were taken away from the
 * process since they were chosen) starts it unbound and says so. */
int pdx_thread_start_on(pthread_t *thread, void *(*fn)(void *), void *arg,
                        const cpu_set_t *cpus);

/* Join within ms milliseconds: true once joined; false, logged with `what`
 * ("shard 3's worker"), when it did not stop in time (the caller then keeps
 * everything the thread may touch). */
bool pdx_thread_join(pthread_t thread, uint32_t ms, const char *what);

#endif
