/* A child process of a test, its stdout a pipe the test reads. */
#ifndef PDX_TEST_CHILD_H
#define PDX_TEST_CHILD_H

#include <sys/types.h>

/* Start program with argv (and this environment): its pid, and the read end
 * of its stdout in *out_p. Asserts on failure. */
pid_t child_spawn(const char *program, char *const argv[], int *out_p);

#endif
