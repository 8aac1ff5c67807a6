#include "proc_usage.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <unistd.h>

long proc_rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    cr_assert_not_null(f);
    cr_assert_eq(fscanf(f, "%ld %ld", &pages, &resident), 2);
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

int proc_open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;

    cr_assert_not_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n - 3; /* ".", "..", and the directory's own fd */
}
