/*
 * Addresses: the "host:port" text of PDX_LISTEN and pdx_peer_connect(),
 * PDX_ADVERTISE_ADDR, and the host an engine advertises to its peers (in
 * its HELLO, its descriptor and, over tcp, its data endpoints' addresses).
 *
 * The advertised host: PDX_ADVERTISE_ADDR when set; else the host of
 * PDX_LISTEN unless it is a wildcard (0.0.0.0, :: or empty); else the
 * address of the interface that carries the default route (for a [::]
 * listener the IPv6 default route's first, then the IPv4 one's, which its
 * dual-stack socket takes too); else loopback, which only peers on the same
 * host can reach. Every function here may run on any thread; none keeps
 * state.
 */
#ifndef PDX_ADDR_H
#define PDX_ADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pdx/pdx.h"

struct ifaddrs;

/* Where the default route and the interfaces' addresses are read (tests
 * give files and a list of their own). */
typedef struct pdx_addr_sources {
    const char           *route4;   /* /proc/net/route */
    const char           *route6;   /* /proc/net/ipv6_route */
    const struct ifaddrs *ifaddrs;  /* NULL: getifaddrs() */
} pdx_addr_sources_t;

/*
 * Split "host:port", "[ipv6]:port" or ":port" (an empty host) into host
 * (without brackets) and port. The port is decimal digits in
 * min_port..65535 (0 for a listener: any free port). A bare IPv6 address,
 * brackets around anything but an IPv6 address, or a host longer than
 * PDX_WIRE_HOST_MAX or with a character no host name has is refused:
 * PDX_ERR_INVALID with why (a reason that does not repeat the text).
 */
pdx_status_t pdx_addr_split(const char *text, uint32_t min_port, char *host, size_t hostlen,
                            uint32_t *port_p, char *why, size_t whylen);

/* PDX_ADVERTISE_ADDR's value: empty, an IP literal (IPv6 with or without
 * brackets) or a host name; not a wildcard, not a port. */
pdx_status_t pdx_addr_check_host(const char *host, char *why, size_t whylen);

/* "", 0.0.0.0, :: (any spelling of the all-zero address). */
bool pdx_addr_is_wildcard(const char *host);

/* 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, localhost and names under it. */
bool pdx_addr_is_loopback(const char *host);

/*
 * The host peers dial to reach an engine whose listener's host is
 * listen_host (from pdx_addr_split) and whose PDX_ADVERTISE_ADDR is
 * advertise ("": none), into host (no brackets), and why it was chosen, as
 * the end of "advertised as HOST: WHY". src NULL: the system's.
 */
void pdx_addr_advertise(const char *listen_host, const char *advertise,
                        const pdx_addr_sources_t *src, char *host, size_t hostlen, char *why,
                        size_t whylen);

/* True when both ends of the connected socket fd are on this host: the
 * peer's address is a loopback one, or the same as ours (a host that
 * dials an address of its own talks to itself from that address). */
bool pdx_addr_same_host(int fd);

#endif
