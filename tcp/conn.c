/*
 * tcp connection setup and endpoint errors; everything here runs on the
 * progress thread (tp.c).
 *
 * Each ep address carries the tp's listener and a random token. Of two eps
 * that connect, the one whose (address, token) is lower dials the other's
 * listener and sends HELLO {its token, the target's token}; the acceptor's
 * tp reads that HELLO from the new socket (a pending conn), finds the ep the
 * token names and, once that ep's ep_connect has named the same peer token,
 * hands it the socket and answers with its own HELLO. WRs posted meanwhile
 * wait in the SQ. No connection by progress_timeout_ms -> the ep fails.
 */
#include "tcp_internal.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#define TCP_EP_EVENTS (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET)

struct tcp_conn {
    tcp_pollable_t poll;
    tcp_tp_t      *tp;
    int            fd;
    uint32_t       have;
    uint8_t        hello[TCP_HDR_LEN];
    uint64_t       deadline_ns;
    char           peer[64];
    tcp_conn_t    *next, *prev;
};

static void sock_nodelay(int fd)
{
    int one = 1;

    /* Failing only costs latency: not an error. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        pdx_debug("tcp: TCP_NODELAY: %s", strerror(errno));
}

/* One nonblocking attempt: a FAIL frame is a courtesy, never waited for. */
static void send_fail(int fd, pdx_status_t why, const char *msg)
{
    uint8_t buf[TCP_HDR_LEN + TCP_FAIL_MSG_MAX];
    size_t len = PDX_MIN(strlen(msg), (size_t)TCP_FAIL_MSG_MAX);
    tcp_hdr_t h;

    tcp_hdr_encode(&h, TCP_FR_FAIL, (uint32_t)why, 0, 0, len);
    memcpy(buf, &h, TCP_HDR_LEN);
    memcpy(buf + TCP_HDR_LEN, msg, len);
    if (send(fd, buf, TCP_HDR_LEN + len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        pdx_debug("tcp: FAIL frame not sent: %s", strerror(errno));
}

static void queue_hello(tcp_ep_t *ep)
{
    tcp_hdr_t h;

    tcp_hdr_encode(&h, TCP_FR_HELLO, TCP_PROTO_VERSION, TCP_HELLO_MAGIC, ep->token,
                   ep->remote.token);
    tcp_ctrl_push(ep, &h);
}

void tcp_ep_set_error(tcp_ep_t *ep, pdx_status_t why, bool tell_peer, const char *fmt, ...)
{
    va_list ap;

    if (ep->state == TCP_EP_DEAD)
        return;
    va_start(ap, fmt);
    vsnprintf(ep->errmsg, sizeof(ep->errmsg), fmt, ap);
    va_end(ap);
    atomic_store_explicit(&ep->err, why, memory_order_release);
    /* A peer that leaves an idle ep is an orderly end, not a failure of ours. */
    pdx_log(why == PDX_ERR_PEER && !tcp_ep_outstanding(ep) ? PDX_LOG_INFO : PDX_LOG_WARN,
            "tcp: %s: endpoint to %s failed (%s): %s", ep->tp->name, tcp_ep_peer(ep),
            pdx_status_str(why), ep->errmsg);
    if (ep->fd >= 0) {
        /* Only at a frame boundary, so the peer can parse it. */
        if (tell_peer && ep->state == TCP_EP_UP && ep->tx_off == 0 &&
            ep->tx_ctrl_off == ep->tx_ctrl_len)
            send_fail(ep->fd, why, ep->errmsg);
        tcp_poll_del(ep->tp, ep->fd);
        close(ep->fd);
        ep->fd = -1;
    }
    ep->state = TCP_EP_DEAD;
    tcp_work_remove(ep);
    tcp_rx_flush(ep, why, true);
    tcp_tx_flush(ep, why, true);
}

void tcp_ep_detach(tcp_ep_t *ep)
{
    tcp_tp_t *tp = ep->tp;

    if (ep->fd >= 0) {
        tcp_poll_del(tp, ep->fd);
        close(ep->fd);
        ep->fd = -1;
    }
    tcp_work_remove(ep);
    tcp_stage_untrack(ep); /* ep_destroy waits for its copies */
    PDX_LIST_UNLINK(tp->eps, ep);
    ep->state = TCP_EP_DEAD;
    /* Outstanding WRs are dropped without completions; their regions are freed. */
    tcp_rx_flush(ep, PDX_ERR_ABORTED, false);
    tcp_tx_flush(ep, PDX_ERR_ABORTED, false);
}

static void ep_up(tcp_ep_t *ep, int fd)
{
    ep->fd = fd;
    ep->state = TCP_EP_UP;
    ep->writable = true;
    ep->rx_ready = true; /* bytes may have arrived before the ep owned the socket */
    if (tcp_ep_outstanding(ep))
        ep->progress_ns = pdx_now_ns(); /* WRs posted while connecting start now */
    queue_hello(ep);
    tcp_work_add(ep);
}

void tcp_ep_dialed(tcp_ep_t *ep)
{
    socklen_t len = sizeof(int);
    int err = 0;

    if (getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    if (err) {
        tcp_ep_set_error(ep, PDX_ERR_PEER, false, "connect to peer %s: %s", ep->peer,
                         strerror(err));
        return;
    }
    ep->hello_due = true;
    ep_up(ep, ep->fd);
}

static void conn_free(tcp_conn_t *conn, bool close_fd)
{
    tcp_tp_t *tp = conn->tp;

    tp->nconns--;
    PDX_LIST_UNLINK(tp->conns, conn);
    if (close_fd) {
        tcp_poll_del(tp, conn->fd);
        close(conn->fd);
    }
    free(conn);
}

static void conn_reject(tcp_conn_t *conn, pdx_status_t why, const char *msg)
{
    pdx_warn("tcp: %s: connection from %s refused: %s", conn->tp->name, conn->peer, msg);
    send_fail(conn->fd, why, msg);
    conn_free(conn, true);
}

static void conn_attach(tcp_conn_t *conn, tcp_ep_t *ep)
{
    tcp_tp_t *tp = conn->tp;
    int fd = conn->fd;

    if (tcp_poll_mod(tp, fd, &ep->poll, TCP_EP_EVENTS) != PDX_OK) {
        conn_free(conn, true);
        tcp_ep_set_error(ep, PDX_ERR_IO, false, "cannot watch the connection from %s",
                         ep->peer);
        return;
    }
    conn_free(conn, false);
    ep_up(ep, fd);
}

/* A complete HELLO: give the socket to its ep, keep it pending, or refuse it. */
static void conn_match(tcp_conn_t *conn)
{
    tcp_tp_t *tp = conn->tp;
    char msg[128];
    tcp_ep_t *ep;
    tcp_hdr_t h;

    tcp_hdr_decode(conn->hello, &h);
    if (h.type != TCP_FR_HELLO || h.seq != TCP_HELLO_MAGIC) {
        pdx_warn("tcp: %s: connection from %s is not a pdx tcp endpoint", tp->name, conn->peer);
        conn_free(conn, true);
        return;
    }
    for (ep = tp->eps; ep; ep = ep->next)
        if (ep->token == h.len)
            break;
    if (h.arg != TCP_PROTO_VERSION) {
        snprintf(msg, sizeof(msg), "peer %s speaks tcp protocol %u, this side %u", conn->peer,
                 h.arg, TCP_PROTO_VERSION);
        if (ep && ep->state == TCP_EP_ACCEPTING && ep->remote.token == h.addr)
            tcp_ep_set_error(ep, PDX_ERR_VERSION, false, "%s", msg);
        conn_reject(conn, PDX_ERR_VERSION, msg);
        return;
    }
    if (ep && ep->state == TCP_EP_NEW)
        return; /* its ep_connect has not run yet: wait for it */
    if (!ep || ep->state != TCP_EP_ACCEPTING || ep->remote.token != h.addr) {
        conn_reject(conn, PDX_ERR_PEER, "no endpoint waits for this connection");
        return;
    }
    conn_attach(conn, ep);
}

void tcp_ep_start(tcp_ep_t *ep)
{
    tcp_tp_t *tp = ep->tp;
    struct sockaddr_storage ss;
    socklen_t sl;
    int fd;

    ep->deadline_ns = pdx_deadline_ns(tp->timeout_ms);
    if (!ep->dialer) {
        tcp_conn_t *conn, *next;

        ep->state = TCP_EP_ACCEPTING;
        for (conn = tp->conns; conn; conn = next) {
            tcp_hdr_t h;

            next = conn->next;
            if (conn->have < TCP_HDR_LEN)
                continue;
            tcp_hdr_decode(conn->hello, &h);
            /* A stray HELLO naming this ep is refused by conn_match; the
             * real one may be further down the list. */
            if (h.len == ep->token) {
                conn_match(conn);
                if (ep->state != TCP_EP_ACCEPTING)
                    break;
            }
        }
        return;
    }
    sl = tcp_addr_to_sockaddr(&ep->remote, &ss);
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        tcp_ep_set_error(ep, PDX_ERR_IO, false, "socket: %s", strerror(errno));
        return;
    }
    sock_nodelay(fd);
    ep->fd = fd;
    ep->state = TCP_EP_DIALING;
    if (tcp_poll_add(tp, fd, &ep->poll, TCP_EP_EVENTS) != PDX_OK) {
        tcp_ep_set_error(ep, PDX_ERR_IO, false, "cannot watch the connection to %s", ep->peer);
        return;
    }
    if (connect(fd, (struct sockaddr *)&ss, sl) == 0)
        tcp_ep_dialed(ep);
    else if (errno != EINPROGRESS)
        tcp_ep_set_error(ep, PDX_ERR_PEER, false, "connect to peer %s: %s", ep->peer,
                         strerror(errno));
}

void tcp_conn_accept(tcp_tp_t *tp)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        tcp_addr_t from;
        tcp_conn_t *conn;
        int fd;

        fd = accept4(tp->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                /* The listener stays readable: stop watching it until the
                 * next sweep instead of spinning on it. */
                pdx_error("tcp: %s: accept: %s; not accepting until the next sweep", tp->name,
                          strerror(errno));
                tcp_poll_del(tp, tp->listen_fd);
                tp->listen_paused = true;
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                pdx_error("tcp: %s: accept: %s", tp->name, strerror(errno));
            }
            return;
        }
        if (tp->nconns >= TCP_MAX_PENDING) {
            pdx_warn("tcp: %s: %u connections await their HELLO; refusing another", tp->name,
                     tp->nconns);
            close(fd);
            continue;
        }
        conn = calloc(1, sizeof(*conn));
        if (!conn) {
            pdx_error("tcp: %s: out of memory for an incoming connection", tp->name);
            close(fd);
            return;
        }
        sock_nodelay(fd);
        conn->poll.kind = TCP_POLL_CONN;
        conn->tp = tp;
        conn->fd = fd;
        conn->deadline_ns = pdx_deadline_ns(tp->timeout_ms);
        if (tcp_addr_from_sockaddr((struct sockaddr *)&ss, &from) == PDX_OK)
            tcp_addr_format(&from, conn->peer, sizeof(conn->peer));
        else
            snprintf(conn->peer, sizeof(conn->peer), "?");
        PDX_LIST_PUSH(tp->conns, conn);
        tp->nconns++;
        if (tcp_poll_add(tp, fd, &conn->poll, EPOLLIN | EPOLLRDHUP | EPOLLET) != PDX_OK) {
            conn_free(conn, false);
            close(fd);
        }
    }
}

void tcp_conn_event(tcp_conn_t *conn)
{
    while (conn->have < TCP_HDR_LEN) {
        ssize_t n = read(conn->fd, conn->hello + conn->have, TCP_HDR_LEN - conn->have);

        if (n > 0) {
            conn->have += (uint32_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        pdx_debug("tcp: %s: connection from %s closed before its HELLO", conn->tp->name,
                  conn->peer);
        conn_free(conn, true);
        return;
    }
    conn_match(conn);
}

void tcp_conn_sweep(tcp_tp_t *tp, uint64_t now)
{
    tcp_conn_t *conn, *next;
    tcp_ep_t *ep, *ep_next;

    if (tp->listen_paused &&
        tcp_poll_add(tp, tp->listen_fd, &tp->listen_poll, EPOLLIN) == PDX_OK)
        tp->listen_paused = false;
    for (conn = tp->conns; conn; conn = next) {
        next = conn->next;
        if (now >= conn->deadline_ns) {
            pdx_warn("tcp: %s: connection from %s matched no endpoint within %u ms", tp->name,
                     conn->peer, tp->timeout_ms);
            conn_free(conn, true);
        }
    }
    for (ep = tp->eps; ep; ep = ep_next) {
        ep_next = ep->next;
        if ((ep->state == TCP_EP_DIALING || ep->state == TCP_EP_ACCEPTING) &&
            now >= ep->deadline_ns)
            tcp_ep_set_error(ep, PDX_ERR_TIMEOUT, false,
                             "no connection with peer %s within %u ms", ep->peer,
                             tp->timeout_ms);
        else if (ep->state == TCP_EP_UP && ep->in_copy &&
                 now - ep->copy_ns >= (uint64_t)tp->timeout_ms * 1000000u)
            tcp_ep_set_error(ep, PDX_ERR_TIMEOUT, true,
                             "%u GPU copies for peer %s made no progress for %u ms",
                             ep->stage->ncopying, ep->peer, tp->timeout_ms);
        else if (ep->state != TCP_EP_DEAD && tcp_ep_outstanding(ep) &&
                 now - ep->progress_ns >= (uint64_t)tp->timeout_ms * 1000000u)
            tcp_ep_set_error(ep, PDX_ERR_TIMEOUT, true,
                             "no progress from peer %s for %u ms with %llu WRs outstanding",
                             tcp_ep_peer(ep), tp->timeout_ms,
                             (unsigned long long)tcp_ep_outstanding(ep));
    }
}

void tcp_conn_close_all(tcp_tp_t *tp)
{
    while (tp->conns)
        conn_free(tp->conns, true);
}
