#include "epoll.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

pdx_status_t pdx_epoll_ctl(int epfd, int op, int fd, uint32_t events, epoll_data_t data,
                           const char *owner_fmt, ...)
{
    struct epoll_event ev = {.events = events, .data = data};
    pdx_log_level_t level = op == EPOLL_CTL_DEL ? PDX_LOG_DEBUG : PDX_LOG_ERROR;
    const char *what = op == EPOLL_CTL_ADD ? "add" : op == EPOLL_CTL_MOD ? "mod" : "del";
    char owner[160];
    va_list ap;
    int err;

    if (epoll_ctl(epfd, op, fd, &ev) == 0)
        return PDX_OK;
    err = errno;
    if (level <= pdx_log_get_level()) {
        va_start(ap, owner_fmt);
        vsnprintf(owner, sizeof(owner), owner_fmt, ap);
        va_end(ap);
        pdx_log(level, "%s: epoll %s of fd %d: %s", owner, what, fd, strerror(err));
    }
    return PDX_ERR_IO;
}
