/* child.h */
#include "child.h"

#include <criterion/criterion.h>
#include <spawn.h>
#include <unistd.h>

extern char **environ;

pid_t child_spawn(const char *program, char *const argv[], int *out_p)
{
    posix_spawn_file_actions_t fa;
    int fds[2];
    pid_t pid;

    cr_assert_eq(pipe(fds), 0);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_addclose(&fa, fds[0]);
    posix_spawn_file_actions_addclose(&fa, fds[1]);
    cr_assert_eq(posix_spawn(&pid, program, &fa, NULL, argv, environ), 0, "%s", program);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    *out_p = fds[0];
    return pid;
}
