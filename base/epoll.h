/* epoll registration for pdx's event loops: tcp's progress thread, the
 * shards' workers and the control thread. */
#ifndef PDX_EPOLL_H
#define PDX_EPOLL_H

#include <stdint.h>
#include <sys/epoll.h>

#include "pdx/pdx.h"

/* Add (EPOLL_CTL_ADD), change (EPOLL_CTL_MOD) or remove (EPOLL_CTL_DEL) fd in
 * the epoll set epfd, with `events` and the cookie `data` (both unused by a
 * remove). PDX_OK; else PDX_ERR_IO, logged once as "<owner>: epoll add of
 * fd N: <cause>" with the printf-style owner naming the loop or connection. A
 * failed remove is logged at debug: its fd may be closed already. */
pdx_status_t pdx_epoll_ctl(int epfd, int op, int fd, uint32_t events, epoll_data_t data,
                           const char *owner_fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
