/*
 * tcp wire format.
 *
 * A connection starts with the dialer's HELLO; the acceptor answers with its
 * own HELLO (or FAIL) and both sides then send frames in either direction.
 * Every frame is a 32-byte little-endian header, then `len` payload bytes
 * for WRITE, SEND and FAIL:
 *
 *   HELLO  arg = protocol version, seq = magic, addr = sender's ep token,
 *          len = the token of the ep it is meant for (no payload)
 *   WRITE  arg = rkey, seq, addr = remote address, len, payload
 *   SEND   seq, len <= PDX_TP_SEND_MAX, payload
 *   READ   arg = rkey, seq, addr = remote address, len = bytes asked (no payload)
 *   RDATA  seq = the READ's seq (of the other direction), len, payload: the
 *          bytes a READ asked for; not numbered itself
 *   ACK    seq = n: every data frame before n is placed
 *   ERR    seq = s, arg = status: frames before s are placed, s failed
 *   FAIL   arg = status, len <= TCP_FAIL_MSG_MAX, payload = reason; the
 *          sender closes the connection after it
 *
 * Data frames (WRITE, SEND, READ) are numbered from 0 per direction; a
 * frame's seq is its position, which the receiver checks. A READ is
 * answered with its RDATA, or an ERR when its range does not check out;
 * the ACK that covers it may come before its RDATA.
 */
#ifndef PDX_TCP_PROTO_H
#define PDX_TCP_PROTO_H

#include "transport.h"

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#define TCP_PROTO_VERSION 2u
#define TCP_HELLO_MAGIC   0x3130504354584450ull /* "PDXTCP01" */
#define TCP_FAIL_MSG_MAX  160u

typedef enum tcp_frame_type {
    TCP_FR_HELLO = 1,
    TCP_FR_WRITE = 2,
    TCP_FR_SEND  = 3,
    TCP_FR_ACK   = 4,
    TCP_FR_ERR   = 5,
    TCP_FR_FAIL  = 6,
    TCP_FR_READ  = 7,
    TCP_FR_RDATA = 8,
} tcp_frame_type_t;

typedef struct tcp_hdr {
    uint8_t  type;
    uint8_t  flags;
    uint16_t reserved;
    uint32_t arg;
    uint64_t seq;
    uint64_t addr;
    uint64_t len;
} tcp_hdr_t;

_Static_assert(sizeof(tcp_hdr_t) == 32, "the frame header is 32 bytes on the wire");

#define TCP_HDR_LEN ((uint32_t)sizeof(tcp_hdr_t))

/* Fill a header in wire byte order. */
static inline void tcp_hdr_encode(tcp_hdr_t *h, tcp_frame_type_t type, uint32_t arg,
                                  uint64_t seq, uint64_t addr, uint64_t len)
{
    h->type = (uint8_t)type;
    h->flags = 0;
    h->reserved = 0;
    h->arg = htole32(arg);
    h->seq = htole64(seq);
    h->addr = htole64(addr);
    h->len = htole64(len);
}

/* Read a header in host byte order from (possibly unaligned) wire bytes. */
static inline void tcp_hdr_decode(const void *wire, tcp_hdr_t *h)
{
    memcpy(h, wire, sizeof(*h));
    h->arg = le32toh(h->arg);
    h->seq = le64toh(h->seq);
    h->addr = le64toh(h->addr);
    h->len = le64toh(h->len);
}

/* The payload bytes that follow header h (in host order) on the wire. */
static inline uint64_t tcp_hdr_payload(const tcp_hdr_t *h)
{
    return h->type == TCP_FR_WRITE || h->type == TCP_FR_SEND || h->type == TCP_FR_RDATA ||
                   h->type == TCP_FR_FAIL
               ? h->len
               : 0;
}

/* A listener's address plus an ep token: what an ep address carries. */
typedef struct tcp_addr {
    uint8_t  family;     /* 4 or 6 */
    uint16_t port;       /* host order */
    uint8_t  ip[16];     /* network order; IPv4 uses the first 4 bytes */
    uint64_t token;
} tcp_addr_t;

void tcp_addr_encode(const tcp_addr_t *a, pdx_tp_addr_t *out);
/* PDX_ERR_INVALID (logged) when the bytes are not a tcp ep address. */
pdx_status_t tcp_addr_decode(const pdx_tp_addr_t *in, tcp_addr_t *out);
/* Total order over (family, ip, port, token): the lower side dials. */
int tcp_addr_cmp(const tcp_addr_t *a, const tcp_addr_t *b);
socklen_t tcp_addr_to_sockaddr(const tcp_addr_t *a, struct sockaddr_storage *ss);
pdx_status_t tcp_addr_from_sockaddr(const struct sockaddr *sa, tcp_addr_t *a);
/* "ip:port" or "[ip]:port". */
void tcp_addr_format(const tcp_addr_t *a, char *buf, size_t len);
/* A FAIL or ERR frame's status: a known error, else PDX_ERR_PEER. */
pdx_status_t tcp_status_from_wire(uint32_t arg);

#endif
