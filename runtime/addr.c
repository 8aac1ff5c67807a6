/* Addresses: host:port text, PDX_ADVERTISE_ADDR, the advertised host (addr.h). */
#include "addr.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/route.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "util.h"
#include "wire.h"

#define ADDR_ROUTE4 "/proc/net/route"
#define ADDR_ROUTE6 "/proc/net/ipv6_route"

/* An IPv6 literal, with a zone ("%eth0") or without. */
static bool is_ipv6(const char *s, size_t len)
{
    char buf[INET6_ADDRSTRLEN + 1];
    struct in6_addr a;
    const char *zone = memchr(s, '%', len);

    if (zone)
        len = (size_t)(zone - s);
    if (len == 0 || len >= sizeof(buf))
        return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return inet_pton(AF_INET6, buf, &a) == 1;
}

/* Letters, digits, '.', '-' and '_': an IPv4 literal or a host name. */
static bool is_name(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '-' && s[i] != '_')
            return false;
    return true;
}

pdx_status_t pdx_addr_split(const char *text, uint32_t min_port, char *host, size_t hostlen,
                            uint32_t *port_p, char *why, size_t whylen)
{
    const char *h = text, *p;
    unsigned long port = 0;
    size_t hlen, plen;

    if (text[0] == '[') {
        const char *close = strchr(text, ']');

        if (!close) {
            snprintf(why, whylen, "a \"[\" without its \"]\"");
            return PDX_ERR_INVALID;
        }
        h = text + 1;
        hlen = (size_t)(close - h);
        if (!is_ipv6(h, hlen)) {
            snprintf(why, whylen, "brackets hold an IPv6 address, not \"%.*s\"", (int)hlen, h);
            return PDX_ERR_INVALID;
        }
        if (close[1] != ':') {
            snprintf(why, whylen, "no \":port\" after \"]\"");
            return PDX_ERR_INVALID;
        }
        p = close + 2;
    } else {
        const char *colon = strrchr(text, ':');

        if (!colon) {
            snprintf(why, whylen, "not host:port (no port)");
            return PDX_ERR_INVALID;
        }
        hlen = (size_t)(colon - text);
        p = colon + 1;
        if (memchr(text, ':', hlen)) {
            if (is_ipv6(text, hlen))
                snprintf(why, whylen, "an IPv6 address must be in brackets, as [%.*s]:%s",
                         (int)hlen, text, p);
            else
                snprintf(why, whylen, "an IPv6 address must be in brackets, as [ADDRESS]:PORT");
            return PDX_ERR_INVALID;
        }
        if (!is_name(text, hlen)) {
            snprintf(why, whylen, "\"%.*s\" is not a host name or IP address", (int)hlen, text);
            return PDX_ERR_INVALID;
        }
    }
    plen = strlen(p);
    if (plen == 0) {
        snprintf(why, whylen, "no port after the colon");
        return PDX_ERR_INVALID;
    }
    if (strspn(p, "0123456789") != plen) {
        snprintf(why, whylen, "port \"%s\" is not a decimal number", p);
        return PDX_ERR_INVALID;
    }
    for (size_t i = 0; i < plen && port <= 65535; i++)
        port = port * 10 + (unsigned long)(p[i] - '0');
    if (port < min_port || port > 65535) {
        snprintf(why, whylen, "port %s is outside %u-65535", p, min_port);
        return PDX_ERR_INVALID;
    }
    if (hlen > PDX_WIRE_HOST_MAX || hlen >= hostlen) {
        snprintf(why, whylen, "a host of %zu bytes (at most %u)", hlen,
                 (unsigned)PDX_MIN((size_t)PDX_WIRE_HOST_MAX, hostlen - 1));
        return PDX_ERR_INVALID;
    }
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port_p = (uint32_t)port;
    return PDX_OK;
}

pdx_status_t pdx_addr_check_host(const char *host, char *why, size_t whylen)
{
    const char *h = host;
    size_t len = strlen(host);

    if (len == 0)
        return PDX_OK;
    if (h[0] == '[') {
        if (len < 2 || h[len - 1] != ']' || !is_ipv6(h + 1, len - 2)) {
            snprintf(why, whylen, "brackets hold an IPv6 address and nothing after them");
            return PDX_ERR_INVALID;
        }
        h++;
        len -= 2;
    } else if (strchr(h, ':')) {
        if (!is_ipv6(h, len)) {
            snprintf(why, whylen, "a host without a port (PDX_LISTEN's port is advertised)");
            return PDX_ERR_INVALID;
        }
    } else if (!is_name(h, len)) {
        snprintf(why, whylen, "not a host name or IP address");
        return PDX_ERR_INVALID;
    }
    if (len > PDX_WIRE_HOST_MAX) {
        snprintf(why, whylen, "a host of %zu bytes (at most %u)", len, PDX_WIRE_HOST_MAX);
        return PDX_ERR_INVALID;
    }
    if (pdx_addr_is_wildcard(host)) {
        snprintf(why, whylen, "a wildcard is no address peers can dial");
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

/* An IP literal (brackets allowed) as 4 or 16 bytes in out; 0: not one. */
static size_t literal_bytes(const char *host, uint8_t out[16])
{
    char buf[INET6_ADDRSTRLEN + 1];
    size_t len = strlen(host);

    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') {
        host++;
        len -= 2;
    }
    if (len >= sizeof(buf))
        return 0;
    memcpy(buf, host, len);
    buf[len] = '\0';
    if (inet_pton(AF_INET, buf, out) == 1)
        return 4;
    if (inet_pton(AF_INET6, buf, out) == 1)
        return 16;
    return 0;
}

bool pdx_addr_is_wildcard(const char *host)
{
    static const uint8_t zero[16];
    uint8_t a[16];
    size_t n;

    if (!host[0])
        return true;
    n = literal_bytes(host, a);
    return n && memcmp(a, zero, n) == 0;
}

/* 4 bytes of 127/8; 16 of ::1 or ::ffff:127/104. */
static bool bytes_loopback(const uint8_t *a, size_t n)
{
    static const uint8_t one[16] = {[15] = 1};
    static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};

    if (n == 4)
        return a[0] == 127;
    return n == 16 && (memcmp(a, one, 16) == 0 || (memcmp(a, mapped, 12) == 0 && a[12] == 127));
}

bool pdx_addr_is_loopback(const char *host)
{
    uint8_t a[16];
    size_t n = literal_bytes(host, a), len = strlen(host);

    if (n)
        return bytes_loopback(a, n);
    if (len && host[len - 1] == '.')
        len--; /* a fully qualified name */
    return (len == 9 && strncasecmp(host, "localhost", 9) == 0) ||
           (len > 10 && strncasecmp(host + len - 10, ".localhost", 10) == 0);
}

/* ---------------------------------------------------------- default route */

/* The interface of the IPv4 default route that is up with the lowest
 * metric, from /proc/net/route's text. */
static bool default_route4(const char *path, char *ifname, size_t len)
{
    unsigned best = UINT_MAX;
    bool found = false;
    char line[512];
    FILE *f = fopen(path, "re");

    if (!f)
        return false;
    if (!fgets(line, sizeof(line), f)) /* the header */
        line[0] = '\0';
    while (fgets(line, sizeof(line), f)) {
        unsigned long dest, gw, mask;
        unsigned flags, metric;
        int refcnt, use;
        char name[64];

        if (sscanf(line, "%63s %lx %lx %x %d %d %u %lx", name, &dest, &gw, &flags, &refcnt, &use,
                   &metric, &mask) != 8 ||
            dest != 0 || mask != 0 || !(flags & RTF_UP) || (flags & RTF_REJECT) ||
            (found && metric >= best))
            continue;
        snprintf(ifname, len, "%s", name);
        best = metric;
        found = true;
    }
    fclose(f);
    return found;
}

/* The same for IPv6, from /proc/net/ipv6_route's text (loopback's reject
 * routes are not default routes). */
static bool default_route6(const char *path, char *ifname, size_t len)
{
    unsigned best = UINT_MAX;
    bool found = false;
    char line[512];
    FILE *f = fopen(path, "re");

    if (!f)
        return false;
    while (fgets(line, sizeof(line), f)) {
        char dest[33], src[33], hop[33], name[64];
        unsigned plen, splen, metric, refcnt, use, flags;

        if (sscanf(line, "%32s %x %32s %x %32s %x %x %x %x %63s", dest, &plen, src, &splen, hop,
                   &metric, &refcnt, &use, &flags, name) != 10 ||
            strspn(dest, "0") != 32 || plen != 0 || !(flags & RTF_UP) ||
            (flags & RTF_REJECT) || strcmp(name, "lo") == 0 || (found && metric >= best))
            continue;
        snprintf(ifname, len, "%s", name);
        best = metric;
        found = true;
    }
    fclose(f);
    return found;
}

/* The first address of the family on the interface (IPv6: not link-local,
 * which needs a zone peers do not know). */
static bool iface_address(const struct ifaddrs *list, const char *ifname, int family,
                          char *host, size_t len)
{
    for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        const void *ip;

        if (!ifa->ifa_addr || ifa->ifa_addr->sa_family != family || !ifa->ifa_name ||
            strcmp(ifa->ifa_name, ifname) != 0)
            continue;
        if (family == AF_INET6) {
            const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;

            if (IN6_IS_ADDR_LINKLOCAL(a6))
                continue;
            ip = a6;
        } else {
            ip = &((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr;
        }
        return inet_ntop(family, ip, host, (socklen_t)len) != NULL;
    }
    return false;
}

/* The address of the default route's interface of the family; else why not. */
static bool route_address(const char *path, int family, const struct ifaddrs *list, char *host,
                          size_t hostlen, char *why, size_t whylen)
{
    const char *v = family == AF_INET6 ? "IPv6 " : "";
    char ifname[64];

    if (!(family == AF_INET6 ? default_route6(path, ifname, sizeof(ifname))
                             : default_route4(path, ifname, sizeof(ifname)))) {
        snprintf(why, whylen, "no %sdefault route in %s", v, path);
        return false;
    }
    if (!iface_address(list, ifname, family, host, hostlen)) {
        snprintf(why, whylen, "%s, the %sdefault route's interface, has no %saddress", ifname, v,
                 v);
        return false;
    }
    snprintf(why, whylen, "the address of %s, the %sdefault route's interface", ifname, v);
    return true;
}

void pdx_addr_advertise(const char *listen_host, const char *advertise,
                        const pdx_addr_sources_t *src, char *host, size_t hostlen, char *why,
                        size_t whylen)
{
    static const pdx_addr_sources_t sys = {.route4 = ADDR_ROUTE4, .route6 = ADDR_ROUTE6};
    bool v6 = strchr(listen_host, ':') != NULL;
    const struct ifaddrs *list;
    struct ifaddrs *own = NULL;
    char why6[160] = "", why4[160];
    size_t len = strlen(advertise);
    bool found6;

    if (len) {
        bool brackets = advertise[0] == '[' && len >= 2;

        snprintf(host, hostlen, "%.*s", (int)(brackets ? len - 2 : len), advertise + brackets);
        snprintf(why, whylen, "PDX_ADVERTISE_ADDR");
        return;
    }
    if (!pdx_addr_is_wildcard(listen_host)) {
        snprintf(host, hostlen, "%s", listen_host);
        snprintf(why, whylen, "the host of PDX_LISTEN");
        return;
    }
    if (!src)
        src = &sys;
    list = src->ifaddrs;
    if (!list && getifaddrs(&own) == 0)
        list = own;
    /* A [::] listener is dual-stack (ctrl.c): an IPv4 address reaches it too. */
    found6 = v6 && route_address(src->route6, AF_INET6, list, host, hostlen, why6,
                                 sizeof(why6));
    if (found6) {
        snprintf(why, whylen, "%s", why6);
    } else if (route_address(src->route4, AF_INET, list, host, hostlen, why4, sizeof(why4))) {
        snprintf(why, whylen, "%s", why4);
    } else {
        snprintf(host, hostlen, v6 ? "::1" : "127.0.0.1");
        snprintf(why, whylen, "%s%s%s: only peers on this host can reach it; set "
                 "PDX_ADVERTISE_ADDR or PDX_LISTEN for others", why6, v6 ? ", " : "", why4);
    }
    if (own)
        freeifaddrs(own);
}

/* ------------------------------------------------------------- same host */

/* The address of a socket address as 4 bytes (IPv4, or IPv4-mapped IPv6)
 * or 16; 0 for another family. */
static size_t sockaddr_bytes(const struct sockaddr_storage *ss, uint8_t out[16])
{
    static const uint8_t mapped[12] = {[10] = 0xff, [11] = 0xff};

    if (ss->ss_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)ss)->sin_addr, 4);
        return 4;
    }
    if (ss->ss_family != AF_INET6)
        return 0;
    memcpy(out, &((const struct sockaddr_in6 *)ss)->sin6_addr, 16);
    if (memcmp(out, mapped, 12) == 0) {
        memmove(out, out + 12, 4);
        return 4;
    }
    return 16;
}

bool pdx_addr_same_host(int fd)
{
    struct sockaddr_storage ours, theirs;
    socklen_t lo = sizeof(ours), lt = sizeof(theirs);
    uint8_t a[16], b[16];
    size_t na, nb;

    /* What cannot be told is not refused. */
    if (getsockname(fd, (struct sockaddr *)&ours, &lo) < 0 ||
        getpeername(fd, (struct sockaddr *)&theirs, &lt) < 0)
        return true;
    na = sockaddr_bytes(&ours, a);
    nb = sockaddr_bytes(&theirs, b);
    if (!na || !nb || bytes_loopback(b, nb))
        return true;
    return na == nb && memcmp(a, b, na) == 0;
}
