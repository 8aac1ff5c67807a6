/*
 * pdx_peer_connect(): dial a peer's control listener within a deadline,
 * hand the socket to the control thread, send HELLO and wait for the
 * handshake (ctrl_msg.c) to make the peer READY or FAILED. The caller's
 * thread only dials, sends HELLO and waits; the control thread does the
 * rest. A peer that fails after the dial is retired like any other.
 */
#include "ctrl.h"
#include "addr.h"
#include "peer.h"

#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Connect one resolved address before the deadline; *err_p: errno on failure. */
static pdx_status_t dial_one(const struct addrinfo *ai, uint64_t deadline, int *fd_p, int *err_p)
{
    int fd, soerr = 0;
    socklen_t sl = sizeof(soerr);

    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err_p = errno;
        return PDX_ERR_IO;
    }
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        if (errno != EINPROGRESS) {
            *err_p = errno;
            close(fd);
            return PDX_ERR_PEER;
        }
        for (;;) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            uint64_t now = pdx_now_ns();
            int rc;

            if (now >= deadline) {
                close(fd);
                return PDX_ERR_TIMEOUT;
            }
            rc = poll(&p, 1, (int)PDX_MIN((deadline - now + 999999u) / 1000000u,
                                          (uint64_t)INT_MAX));
            if (rc > 0)
                break;
            if (rc < 0 && errno != EINTR) {
                *err_p = errno;
                close(fd);
                return PDX_ERR_IO;
            }
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            soerr = errno;
        if (soerr) {
            *err_p = soerr;
            close(fd);
            return PDX_ERR_PEER;
        }
    }
    *fd_p = fd;
    return PDX_OK;
}

static pdx_status_t dial(const char *addr, uint64_t deadline, int timeout_ms, int *fd_p)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV};
    char host[PDX_NAME_MAX], port[16], why[160];
    struct addrinfo *res, *ai;
    pdx_status_t st = PDX_ERR_PEER;
    uint32_t port_num;
    int rc, err = 0;

    if (pdx_addr_split(addr, 1, host, sizeof(host), &port_num, why, sizeof(why)) != PDX_OK) {
        pdx_error("pdx_peer_connect: \"%s\": %s", addr, why);
        return PDX_ERR_INVALID;
    }
    if (!host[0]) {
        pdx_error("pdx_peer_connect: \"%s\": no host before the port", addr);
        return PDX_ERR_INVALID;
    }
    snprintf(port, sizeof(port), "%u", port_num);
    /* Name resolution is the one step the deadline cannot bound. */
    rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        pdx_error("pdx_peer_connect: cannot resolve %s: %s", addr, gai_strerror(rc));
        return PDX_ERR_INVALID;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        st = dial_one(ai, deadline, fd_p, &err);
        if (st == PDX_OK || st == PDX_ERR_TIMEOUT)
            break;
    }
    freeaddrinfo(res);
    if (st == PDX_ERR_TIMEOUT)
        pdx_error("pdx_peer_connect: %s did not accept within %d ms", addr, timeout_ms);
    else if (st != PDX_OK)
        pdx_error("pdx_peer_connect: cannot connect to %s: %s", addr, strerror(err));
    return st;
}

/* Wait until the peer leaves HELLO or the deadline passes; its state then. */
static int wait_handshake(pdx_peer_t *peer, uint64_t deadline)
{
    struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u),
                          .tv_nsec = (long)(deadline % 1000000000u)};
    int state;

    pthread_mutex_lock(&peer->wait_lock);
    while ((state = atomic_load(&peer->state)) == PDX_PEER_HELLO)
        if (pthread_cond_timedwait(&peer->wait_cond, &peer->wait_lock, &ts) == ETIMEDOUT) {
            state = atomic_load(&peer->state);
            break;
        }
    pthread_mutex_unlock(&peer->wait_lock);
    return state;
}

static pdx_status_t failed_status(pdx_peer_t *peer)
{
    pdx_status_t st;

    pthread_mutex_lock(&peer->wait_lock);
    st = peer->status;
    pthread_mutex_unlock(&peer->wait_lock);
    return st;
}

pdx_status_t pdx_peer_connect(pdx_engine_t *e, const char *addr, int timeout_ms, uint32_t *peer_p)
{
    pdx_peer_t *peer;
    uint64_t deadline;
    pdx_status_t st;
    int fd, state;

    if (!e || !addr || !peer_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    if (atomic_load(&e->ctrl_stop) & PDX_CTRL_STOP) {
        pdx_error("pdx_peer_connect: the engine is being destroyed");
        return PDX_ERR_STATE;
    }
    if (timeout_ms <= 0)
        timeout_ms = (int)PDX_MIN(e->cfg.bootstrap_timeout_ms, (uint32_t)INT_MAX);
    deadline = pdx_deadline_ns((uint32_t)timeout_ms);

    st = dial(addr, deadline, timeout_ms, &fd);
    if (st != PDX_OK)
        return st;
    st = pdx_peer_open(e, fd, true, addr, &peer);
    if (st != PDX_OK) {
        close(fd);
        return st;
    }
    /* The nonce is drawn before the control thread can read the socket. */
    st = e->key.set ? pdx_ctrl_auth_prepare(peer) : PDX_OK;
    if (st == PDX_OK)
        st = pdx_ctrl_watch(e, peer);
    if (st == PDX_OK)
        st = e->key.set ? pdx_ctrl_auth_start(peer) : pdx_peer_send_hello(peer, false);
    if (st != PDX_OK) {
        pdx_peer_fail(peer, st, "cannot start the handshake with %s", addr);
        st = failed_status(peer);
        pdx_peer_put(peer);
        return st;
    }

    state = wait_handshake(peer, deadline);
    if (state == PDX_PEER_HELLO)
        pdx_peer_fail(peer, PDX_ERR_TIMEOUT, "handshake with %s not done within %d ms", addr,
                      timeout_ms);
    if (state == PDX_PEER_READY) {
        pdx_info("connected to %s as peer %u (%u pairs x %u endpoints)", addr, peer->id,
                 peer->npairs, peer->qps);
        *peer_p = peer->handle;
        st = PDX_OK;
    } else {
        st = failed_status(peer);
    }
    pdx_peer_put(peer);
    return st;
}

/* The handle of the first incoming READY peer not yet returned, or 0
 * (accept_lock held; peers_lock keeps the peer from being retired). */
static uint32_t next_incoming(pdx_engine_t *e)
{
    uint32_t handle = 0;

    pthread_mutex_lock(&e->peers_lock);
    for (uint32_t i = 0; i < PDX_MAX_PEERS && !handle; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->peers[i], memory_order_acquire);

        if (peer && !peer->outgoing && !peer->accepted &&
            atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_READY) {
            peer->accepted = true;
            handle = peer->handle;
        }
    }
    pthread_mutex_unlock(&e->peers_lock);
    return handle;
}

pdx_status_t pdx_peer_accept(pdx_engine_t *e, int timeout_ms, uint32_t *peer_p)
{
    struct timespec until;
    uint32_t handle;
    int rc = 0;

    if (!e || !peer_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    until = pdx_timespec_in(CLOCK_MONOTONIC, timeout_ms > 0 ? (uint32_t)timeout_ms : 0);
    pthread_mutex_lock(&e->accept_lock);
    while (!(handle = next_incoming(e)) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&e->accept_cond, &e->accept_lock, &until);
    pthread_mutex_unlock(&e->accept_lock);
    if (!handle)
        return PDX_ERR_TIMEOUT;
    *peer_p = handle;
    return PDX_OK;
}
