/* tcp wire format: endpoint addresses and statuses (headers are inline in proto.h). */
#include "proto.h"

#include "log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>

/*
 * Ep address bytes: 'T', version, family (4/6), 0, port (2, big-endian),
 * ip (16), token (8, big-endian).
 */
#define TCP_ADDR_MAGIC 'T'
#define TCP_ADDR_LEN   30u

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t get_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v = (v << 8) | p[i];
    return v;
}

void tcp_addr_encode(const tcp_addr_t *a, pdx_tp_addr_t *out)
{
    memset(out, 0, sizeof(*out));
    out->bytes[0] = TCP_ADDR_MAGIC;
    out->bytes[1] = (uint8_t)TCP_PROTO_VERSION;
    out->bytes[2] = a->family;
    out->bytes[4] = (uint8_t)(a->port >> 8);
    out->bytes[5] = (uint8_t)a->port;
    memcpy(&out->bytes[6], a->ip, sizeof(a->ip));
    put_be64(&out->bytes[22], a->token);
    out->len = TCP_ADDR_LEN;
}

pdx_status_t tcp_addr_decode(const pdx_tp_addr_t *in, tcp_addr_t *out)
{
    tcp_addr_t a;

    if (!in || in->len != TCP_ADDR_LEN || in->bytes[0] != TCP_ADDR_MAGIC) {
        pdx_error("tcp: not a tcp endpoint address (%u bytes)", in ? in->len : 0);
        return PDX_ERR_INVALID;
    }
    if (in->bytes[1] != TCP_PROTO_VERSION) {
        pdx_error("tcp: endpoint address of protocol version %u, this side speaks %u",
                  in->bytes[1], TCP_PROTO_VERSION);
        return PDX_ERR_VERSION;
    }
    memset(&a, 0, sizeof(a));
    a.family = in->bytes[2];
    a.port = (uint16_t)((in->bytes[4] << 8) | in->bytes[5]);
    memcpy(a.ip, &in->bytes[6], sizeof(a.ip));
    a.token = get_be64(&in->bytes[22]);
    if ((a.family != 4 && a.family != 6) || in->bytes[3] != 0 || a.port == 0 || a.token == 0) {
        pdx_error("tcp: malformed endpoint address (family %u, port %u)", a.family, a.port);
        return PDX_ERR_INVALID;
    }
    *out = a;
    return PDX_OK;
}

int tcp_addr_cmp(const tcp_addr_t *a, const tcp_addr_t *b)
{
    int c;

    if (a->family != b->family)
        return a->family < b->family ? -1 : 1;
    c = memcmp(a->ip, b->ip, sizeof(a->ip));
    if (c)
        return c < 0 ? -1 : 1;
    if (a->port != b->port)
        return a->port < b->port ? -1 : 1;
    if (a->token != b->token)
        return a->token < b->token ? -1 : 1;
    return 0;
}

socklen_t tcp_addr_to_sockaddr(const tcp_addr_t *a, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof(*ss));
    if (a->family == 4) {
        struct sockaddr_in *sin = (struct sockaddr_in *)ss;

        sin->sin_family = AF_INET;
        sin->sin_port = htons(a->port);
        memcpy(&sin->sin_addr, a->ip, 4);
        return sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(a->port);
        memcpy(&sin6->sin6_addr, a->ip, 16);
        return sizeof(*sin6);
    }
}

pdx_status_t tcp_addr_from_sockaddr(const struct sockaddr *sa, tcp_addr_t *a)
{
    memset(a, 0, sizeof(*a));
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)sa;

        a->family = 4;
        a->port = ntohs(sin->sin_port);
        memcpy(a->ip, &sin->sin_addr, 4);
        return PDX_OK;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)sa;

        a->family = 6;
        a->port = ntohs(sin6->sin6_port);
        memcpy(a->ip, &sin6->sin6_addr, 16);
        return PDX_OK;
    }
    pdx_error("tcp: address family %d is neither IPv4 nor IPv6", sa->sa_family);
    return PDX_ERR_INVALID;
}

void tcp_addr_format(const tcp_addr_t *a, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN];

    if (!inet_ntop(a->family == 4 ? AF_INET : AF_INET6, a->ip, ip, sizeof(ip)))
        snprintf(ip, sizeof(ip), "?");
    if (a->family == 4)
        snprintf(buf, len, "%s:%u", ip, a->port);
    else
        snprintf(buf, len, "[%s]:%u", ip, a->port);
}

pdx_status_t tcp_status_from_wire(uint32_t arg)
{
    int32_t s = (int32_t)arg;

    if (s < 0 && s >= PDX_ERR_STATE)
        return (pdx_status_t)s;
    return PDX_ERR_PEER;
}
