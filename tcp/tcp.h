/*
 * tcp transport: hooks for tests. The transport itself is reached through
 * pdx_tcp_ops (runtime/transport.h).
 */
#ifndef PDX_TCP_H
#define PDX_TCP_H

#include "transport.h"

#include <stdbool.h>

/*
 * Hold (paused = true) or release the receive side of every endpoint of tp:
 * its progress thread stops reading from sockets, so incoming frames wait in
 * the kernel before placement and nothing is acknowledged. Everything else
 * (sending, commands, deadlines, close) keeps working.
 */
void pdx_tcp_pause(pdx_tp_t *tp, bool paused);

#endif
