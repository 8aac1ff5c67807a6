/* What this process holds: resident memory and open file descriptors. */
#ifndef PDX_TEST_PROC_USAGE_H
#define PDX_TEST_PROC_USAGE_H

long proc_rss_kib(void);
int  proc_open_fds(void);

#endif
