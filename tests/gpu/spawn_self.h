/*
 * The GPU test programs' second process: this program spawned again with
 * argv, len bytes of data on its standard input (IPC handles, say).
 */
#ifndef PDX_SPAWN_SELF_H
#define PDX_SPAWN_SELF_H

#include <errno.h>
#include <spawn.h>
#include <unistd.h>

extern char **environ;

/* 0 and *pid_p, or posix_spawn's error (or errno of pipe or write). */
static inline int spawn_self(char *const argv[], const void *data, size_t len, pid_t *pid_p)
{
    posix_spawn_file_actions_t fa;
    int fds[2], rc;

    if (pipe(fds) != 0)
        return errno;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    rc = posix_spawn(pid_p, "/proc/self/exe", &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    if (rc == 0 && write(fds[1], data, len) != (ssize_t)len)
        rc = errno ? errno : EIO;
    close(fds[1]);
    return rc;
}

#endif
