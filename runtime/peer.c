/*
 * peer: one control connection per engine pair: the peer object, its
 * lifetime, its bounded output and its failure. What this engine tells
 * its peers about itself is in peer_desc.c, pdx_peer_connect() in
 * peer_connect.c; the control thread that reads and dispatches is in
 * ctrl.c and ctrl_msg.c.
 *
 * Threads: any thread may send (whole frames appended under out_lock; the
 * first frame into an empty buffer is written at once without waiting, the
 * rest when the control thread sees the socket drain) and fail a peer. Only
 * the control thread reads the socket or closes it, until it has stopped;
 * then whoever fails a peer closes it (pdx_peer_reap: once, claimed by
 * taking the fd under out_lock).
 *
 * State: HELLO -> READY -> FAILED, or HELLO -> FAILED. status and err are
 * written under wait_lock before the FAILED store, so a reader that sees
 * FAILED (acquire) sees why.
 *
 * Lifetime (engine.h): opened into the connection table, admitted into a
 * peer slot, reaped (socket closed, endpoints failed, input and output
 * buffers freed), retired by the control thread once its shards dropped its
 * endpoints, freed by the last pdx_peer_put().
 */
#include "ctrl.h"
#include "dep.h"
#include "peer.h"
#include "rooms.h"
#include "shard.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"

uint32_t pdx_protocol_version = PDX_PROTOCOL_VERSION;

/* Bytes read and dropped before close, so the close sends FIN, not RST
 * (an RST may discard our last frames at the peer). */
#define PEER_DRAIN_MAX (1u << 20)

/* ---------------------------------------------------------------- objects */

static void peer_free(pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < PDX_MAX_LAYOUTS; i++)
        pdx_layout_free(atomic_load_explicit(&peer->layouts[i], memory_order_relaxed));
    for (uint32_t i = 0; peer->mems && i < PDX_MAX_MEMS; i++) {
        pdx_tp_rmr_t *rmr = atomic_load_explicit(&peer->mems[i].rmr, memory_order_relaxed);

        if (rmr) /* its endpoints are gone: no copy uses it */
            peer->engine->ops->rmr_close(rmr);
        for (uint32_t k = 0; k < PDX_MAX_NICS; k++)
            free((void *)(uintptr_t)peer->mems[i].rkey[k].rkeys);
    }
    for (uint32_t i = 0; peer->deps && i < peer->npairs * peer->qps; i++)
        if (peer->deps[i].shard)
            pthread_mutex_destroy(&peer->deps[i].lock);
    free(peer->mems);
    free(peer->deps);
    free(peer->eps_in);
    pthread_cond_destroy(&peer->wait_cond);
    pthread_mutex_destroy(&peer->wait_lock);
    pthread_mutex_destroy(&peer->out_lock);
    free(peer->out);
    free(peer->in);
    free(peer);
}

static pdx_peer_t *peer_alloc(void)
{
    pthread_condattr_t cattr;
    pdx_peer_t *peer;
    int rc;

    peer = calloc(1, sizeof(*peer));
    if (!peer)
        return NULL;
    /* A connection costs little until it needs more: a handshake that never
     * comes holds 8 KiB. */
    peer->in = malloc(PDX_PEER_BUF_START);
    peer->out = malloc(PDX_PEER_BUF_START);
    peer->in_cap = peer->out_cap = PDX_PEER_BUF_START;
    if (!peer->in || !peer->out)
        goto err_free;
    if (pthread_mutex_init(&peer->out_lock, NULL))
        goto err_free;
    if (pthread_mutex_init(&peer->wait_lock, NULL))
        goto err_out_lock;
    if (pthread_condattr_init(&cattr))
        goto err_wait_lock;
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    rc = pthread_cond_init(&peer->wait_cond, &cattr);
    pthread_condattr_destroy(&cattr);
    if (rc)
        goto err_wait_lock;
    return peer;

err_wait_lock:
    pthread_mutex_destroy(&peer->wait_lock);
err_out_lock:
    pthread_mutex_destroy(&peer->out_lock);
err_free:
    free(peer->out);
    free(peer->in);
    free(peer);
    return NULL;
}

void pdx_peer_ref(pdx_peer_t *peer)
{
    atomic_fetch_add_explicit(&peer->refs, 1, memory_order_relaxed);
}

void pdx_peer_put(pdx_peer_t *peer)
{
    if (peer && atomic_fetch_sub_explicit(&peer->refs, 1, memory_order_acq_rel) == 1)
        peer_free(peer);
}

/* The numeric address of the socket's other end. */
static void remote_ip(int fd, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, buf, (socklen_t)len, NULL, 0, NI_NUMERICHOST))
        snprintf(buf, len, "?");
}

/* Under peers_lock: a free peer slot and the handle its next peer gets. */
static bool take_slot(pdx_engine_t *e, pdx_peer_t *peer)
{
    for (uint32_t id = 0; id < PDX_MAX_PEERS; id++) {
        if (atomic_load_explicit(&e->peers[id], memory_order_relaxed))
            continue;
        /* 24 bits of generation; 0 never names a live peer */
        if (++e->peer_gen[id] >= 1u << (32 - PDX_PEER_SLOT_BITS))
            e->peer_gen[id] = 1;
        /* read by any thread that fails or logs a peer: atomic */
        __atomic_store_n(&peer->id, id, __ATOMIC_RELAXED);
        peer->handle = e->peer_gen[id] << PDX_PEER_SLOT_BITS | id;
        atomic_store_explicit(&e->peers[id], peer, memory_order_release);
        atomic_fetch_add_explicit(&e->stats.peers_admitted, 1, memory_order_relaxed);
        return true;
    }
    return false;
}

pdx_status_t pdx_peer_open(pdx_engine_t *e, int fd, bool outgoing, const char *addr,
                           pdx_peer_t **peer_p)
{
    pdx_peer_t *peer = peer_alloc();
    uint32_t conn;
    int one = 1;

    if (!peer) {
        pdx_error("out of memory for the control connection with %s", addr);
        return PDX_ERR_NOMEM;
    }
    peer->engine = e;
    peer->id = UINT32_MAX;
    peer->fd = fd;
    peer->outgoing = outgoing;
    atomic_init(&peer->refs, 2); /* the table's and the caller's */
    atomic_init(&peer->state, PDX_PEER_HELLO);
    snprintf(peer->addr, sizeof(peer->addr), "%s", addr);
    remote_ip(fd, peer->ip, sizeof(peer->ip));
    peer->opened_ns = peer->last_heard_ns = pdx_now_ns();

    pthread_mutex_lock(&e->peers_lock);
    for (conn = 0; conn < PDX_MAX_CONNS; conn++)
        if (!atomic_load_explicit(&e->conns[conn], memory_order_relaxed))
            break;
    if (conn == PDX_MAX_CONNS || (outgoing && !take_slot(e, peer))) {
        pthread_mutex_unlock(&e->peers_lock);
        pdx_error("control connection with %s refused: all %d peer slots are in use", addr,
                  PDX_MAX_PEERS);
        peer->fd = -1; /* the caller's */
        peer_free(peer);
        return PDX_ERR_FULL;
    }
    peer->conn = conn;
    atomic_store_explicit(&e->conns[conn], peer, memory_order_release);
    pthread_mutex_unlock(&e->peers_lock);
    /* Control messages are small and latency-bound. Failing costs only latency. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        pdx_debug("control connection with %s: TCP_NODELAY: %s", addr, strerror(errno));
    *peer_p = peer;
    return PDX_OK;
}

pdx_status_t pdx_peer_admit(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;
    bool ok;

    pthread_mutex_lock(&e->peers_lock);
    ok = peer->id != UINT32_MAX || take_slot(e, peer);
    pthread_mutex_unlock(&e->peers_lock);
    return ok ? PDX_OK : PDX_ERR_FULL;
}

uint32_t pdx_peer_handshakes(pdx_engine_t *e, const char *ip, uint32_t *from_ip_p)
{
    uint32_t n = 0, from_ip = 0;

    pthread_mutex_lock(&e->peers_lock);
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_relaxed);

        if (!peer || peer->outgoing || peer->id != UINT32_MAX)
            continue;
        n++;
        from_ip += ip && strcmp(peer->ip, ip) == 0;
    }
    pthread_mutex_unlock(&e->peers_lock);
    if (from_ip_p)
        *from_ip_p = from_ip;
    return n;
}

pdx_peer_t *pdx_peer_get(pdx_engine_t *e, uint32_t handle)
{
    uint32_t id = handle & ((1u << PDX_PEER_SLOT_BITS) - 1);
    pdx_peer_t *peer;

    if (!e || id >= PDX_MAX_PEERS)
        return NULL;
    peer = atomic_load_explicit(&e->peers[id], memory_order_acquire);
    return peer && peer->handle == handle ? peer : NULL;
}

pdx_peer_t *pdx_peer_hold(pdx_engine_t *e, uint32_t handle, bool *gone_p)
{
    uint32_t id = handle & ((1u << PDX_PEER_SLOT_BITS) - 1), gen = handle >> PDX_PEER_SLOT_BITS;
    pdx_peer_t *peer = NULL;
    bool gone = false;

    if (e && id < PDX_MAX_PEERS) {
        pthread_mutex_lock(&e->peers_lock);
        peer = atomic_load_explicit(&e->peers[id], memory_order_relaxed);
        if (peer && peer->handle == handle)
            pdx_peer_ref(peer);
        else
            peer = NULL;
        gone = !peer && gen != 0 && gen <= e->peer_gen[id];
        pthread_mutex_unlock(&e->peers_lock);
    }
    if (gone_p)
        *gone_p = gone;
    return peer;
}

/* ----------------------------------------------------------------- output */


/* Under out_lock: write what the socket takes now. 0, or errno of a dead socket. */
static int flush_locked(pdx_peer_t *peer)
{
    while (peer->out_len > 0) {
        size_t first = PDX_MIN(peer->out_len, peer->out_cap - peer->out_head);
        struct iovec iov[2] = {
            {.iov_base = peer->out + peer->out_head, .iov_len = first},
            {.iov_base = peer->out, .iov_len = peer->out_len - first},
        };
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = iov[1].iov_len ? 2 : 1};
        ssize_t n = sendmsg(peer->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : errno;
        }
        peer->out_head = (peer->out_head + (size_t)n) % peer->out_cap;
        peer->out_len -= (size_t)n;
    }
    peer->out_head = 0;
    return 0;
}

/* Under out_lock: room for len more bytes in the ring, grown (up to
 * PDX_PEER_OUT_MAX) and straightened when needed. False: out of memory. */
static bool out_room_locked(pdx_peer_t *peer, size_t len)
{
    size_t cap = peer->out_cap, first;
    uint8_t *out;

    if (cap - peer->out_len >= len)
        return true;
    while (cap - peer->out_len < len)
        cap *= 2;
    cap = PDX_MIN(cap, (size_t)PDX_PEER_OUT_MAX);
    out = malloc(cap);
    if (!out)
        return false;
    first = PDX_MIN(peer->out_len, peer->out_cap - peer->out_head);
    memcpy(out, peer->out + peer->out_head, first);
    memcpy(out + first, peer->out, peer->out_len - first);
    free(peer->out);
    peer->out = out;
    peer->out_cap = cap;
    peer->out_head = 0;
    return true;
}

/* Under out_lock, with room checked (PDX_PEER_OUT_MAX): copy a frame behind
 * the queued ones. False: out of memory to grow the ring. */
static bool append_locked(pdx_peer_t *peer, const void *frame, size_t len)
{
    size_t tail, first;

    if (!out_room_locked(peer, len))
        return false;
    tail = (peer->out_head + peer->out_len) % peer->out_cap;
    first = PDX_MIN(len, peer->out_cap - tail);
    memcpy(peer->out + tail, frame, first);
    memcpy(peer->out, (const uint8_t *)frame + first, len - first);
    peer->out_len += len;
    return true;
}

/* Under out_lock, with room checked: append a frame as it goes out, sealed
 * once the key exchange says so. False: out of memory. */
static bool put_locked(pdx_peer_t *peer, const void *frame, size_t len)
{
    uint8_t small[512 + PDX_WIRE_SEAL_EXTRA], *out = small;
    size_t n;
    bool ok;

    if (!peer->sealing)
        return append_locked(peer, frame, len);
    /* Room first: a frame numbered and then dropped would desynchronise. */
    if (!out_room_locked(peer, len + PDX_WIRE_SEAL_EXTRA))
        return false;
    if (len + PDX_WIRE_SEAL_EXTRA > sizeof(small) &&
        !(out = malloc(len + PDX_WIRE_SEAL_EXTRA)))
        return false;
    n = pdx_seal(&peer->seal, frame, len, out);
    ok = append_locked(peer, out, n);
    if (out != small)
        free(out);
    return ok;
}

/* What len bytes of frame take in the output. */
static size_t out_size(const pdx_peer_t *peer, size_t len)
{
    return peer->sealing ? len + PDX_WIRE_SEAL_EXTRA : len;
}

pdx_status_t pdx_peer_send(pdx_peer_t *peer, const void *frame, size_t len)
{
    bool was_empty;
    int err = 0;

    if (!peer || !frame || len == 0 || len > PDX_WIRE_MAX_FRAME)
        return PDX_ERR_INVALID;
    pthread_mutex_lock(&peer->out_lock);
    if (pdx_peer_failed(peer) || peer->fd < 0) {
        pthread_mutex_unlock(&peer->out_lock);
        return PDX_ERR_PEER;
    }
    if (PDX_PEER_OUT_MAX - peer->out_len < out_size(peer, len)) {
        pthread_mutex_unlock(&peer->out_lock);
        return PDX_ERR_AGAIN;
    }
    was_empty = peer->out_len == 0;
    if (!put_locked(peer, frame, len)) {
        pthread_mutex_unlock(&peer->out_lock);
        pdx_peer_fail(peer, PDX_ERR_NOMEM, "out of memory for the control output to %s",
                      peer->addr);
        return PDX_ERR_PEER;
    }
    if (was_empty)
        err = flush_locked(peer);
    pthread_mutex_unlock(&peer->out_lock);
    if (err) {
        pdx_peer_fail(peer, PDX_ERR_PEER, "control connection to %s: send: %s", peer->addr,
                      strerror(err));
        return PDX_ERR_PEER;
    }
    return PDX_OK;
}

void pdx_peer_queue_last(pdx_peer_t *peer, const void *frame, size_t len)
{
    pthread_mutex_lock(&peer->out_lock);
    if (peer->fd >= 0 && PDX_PEER_OUT_MAX - peer->out_len >= out_size(peer, len))
        (void)put_locked(peer, frame, len); /* best effort */
    pthread_mutex_unlock(&peer->out_lock);
}

pdx_status_t pdx_peer_start_sealing(pdx_peer_t *peer, const void *last, size_t len,
                                    const pdx_seal_t *seal)
{
    pdx_status_t st = PDX_OK;

    pthread_mutex_lock(&peer->out_lock);
    if (last && (pdx_peer_failed(peer) || peer->fd < 0))
        st = PDX_ERR_PEER;
    else if (last && (PDX_PEER_OUT_MAX - peer->out_len < len || !append_locked(peer, last, len)))
        st = PDX_ERR_NOMEM;
    if (st == PDX_OK) {
        peer->seal = *seal;
        peer->sealing = true;
    }
    pthread_mutex_unlock(&peer->out_lock);
    if (st == PDX_OK && last)
        pdx_peer_flush(peer);
    return st;
}

void pdx_peer_flush(pdx_peer_t *peer)
{
    int err = 0;

    pthread_mutex_lock(&peer->out_lock);
    if (peer->fd >= 0 && !pdx_peer_failed(peer))
        err = flush_locked(peer);
    pthread_mutex_unlock(&peer->out_lock);
    if (err)
        pdx_peer_fail(peer, PDX_ERR_PEER, "control connection to %s: send: %s", peer->addr,
                      strerror(err));
}

bool pdx_peer_output_pending(pdx_peer_t *peer)
{
    bool pending;

    pthread_mutex_lock(&peer->out_lock);
    pending = peer->out_len > 0;
    pthread_mutex_unlock(&peer->out_lock);
    return pending;
}

/* Close a control socket so the peer reads everything sent, then EOF. */
static void close_socket(int fd)
{
    uint8_t sink[4096];
    size_t drained = 0;
    ssize_t n;

    shutdown(fd, SHUT_WR);
    while (drained < PEER_DRAIN_MAX &&
           (n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
        drained += (size_t)n;
    close(fd);
}

void pdx_peer_destroy(pdx_peer_t *peer)
{
    pdx_engine_t *e;

    if (!peer)
        return;
    e = peer->engine;
    if (peer->fd >= 0) {
        /* What teardown queued (a BYE, rooms failed with the engine): best effort. */
        pthread_mutex_lock(&peer->out_lock);
        flush_locked(peer);
        pthread_mutex_unlock(&peer->out_lock);
        close_socket(peer->fd);
        peer->fd = -1;
    }
    if (atomic_load(&e->conns[peer->conn]) == peer)
        atomic_store(&e->conns[peer->conn], NULL);
    if (peer->id < PDX_MAX_PEERS && atomic_load(&e->peers[peer->id]) == peer)
        atomic_store(&e->peers[peer->id], NULL);
    peer_free(peer);
}

void pdx_peer_goodbye_all(pdx_engine_t *e, uint32_t timeout_ms)
{
    struct pollfd fds[PDX_MAX_CONNS];
    uint64_t deadline = pdx_deadline_ns(timeout_ms);
    uint32_t n = 0, open;

    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load(&e->conns[i]);
        int fd = -1;

        if (!peer || pdx_peer_failed(peer))
            continue;
        pdx_peer_say_bye(peer, "its engine is being destroyed");
        pthread_mutex_lock(&peer->out_lock);
        if (peer->fd >= 0) {
            flush_locked(peer);
            fd = peer->fd;
            peer->fd = -1; /* ours now: a reap finds nothing to close */
            peer->out_head = peer->out_len = 0;
        }
        pthread_mutex_unlock(&peer->out_lock);
        if (fd < 0)
            continue;
        shutdown(fd, SHUT_WR);
        fds[n++] = (struct pollfd){.fd = fd, .events = POLLIN};
    }
    /* The peer closes its side once it read the BYE: by then it has failed
     * our peer there, so our endpoints going next look routine to it. */
    for (open = n; open > 0;) {
        uint64_t now = pdx_now_ns();
        uint8_t sink[4096];
        int rc;

        if (now >= deadline)
            break;
        rc = poll(fds, n, (int)((deadline - now + 999999u) / 1000000u));
        if (rc < 0 && errno != EINTR)
            break;
        for (uint32_t i = 0; i < n && rc > 0; i++) {
            ssize_t got;

            if (fds[i].fd < 0 || !fds[i].revents)
                continue;
            while ((got = recv(fds[i].fd, sink, sizeof(sink), MSG_DONTWAIT)) > 0)
                ;
            if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
                close(fds[i].fd);
                fds[i].fd = -1; /* poll skips it */
                open--;
            }
        }
    }
    for (uint32_t i = 0; i < n; i++)
        if (fds[i].fd >= 0)
            close(fds[i].fd);
}

pdx_status_t pdx_peer_close(pdx_engine_t *e, uint32_t handle)
{
    pdx_peer_t *peer;
    bool gone = false;

    if (!e)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    peer = pdx_peer_hold(e, handle, &gone);
    if (!peer)
        return gone ? PDX_OK : PDX_ERR_NOT_FOUND;
    /* The peer closes its side once it has failed ours there; only then do
     * we (or after PDX_BYE_WAIT_MS: the sweep), so none of our endpoints
     * fails under it first. */
    if (!pdx_peer_failed(peer) && !atomic_load_explicit(&peer->closed, memory_order_acquire)) {
        pdx_peer_say_bye(peer, "closed by pdx_peer_close");
        pdx_peer_flush(peer);
        pdx_ctrl_wake(e);
    }
    pdx_peer_put(peer);
    return PDX_OK;
}

bool pdx_peer_retirable(pdx_peer_t *peer)
{
    return atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_FAILED &&
           atomic_load_explicit(&peer->reaped, memory_order_acquire) &&
           atomic_load_explicit(&peer->deps_live, memory_order_acquire) == 0 &&
           (peer->was_ready ? atomic_load_explicit(&peer->fenced, memory_order_acquire) != 0
                            : atomic_load_explicit(&peer->fence_steps, memory_order_acquire) != 0);
}

void pdx_peer_retire(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;

    pthread_mutex_lock(&e->peers_lock);
    atomic_store_explicit(&e->conns[peer->conn], NULL, memory_order_release);
    if (peer->id < PDX_MAX_PEERS) {
        atomic_store_explicit(&e->peers[peer->id], NULL, memory_order_release);
        atomic_fetch_add_explicit(&e->stats.peers_retired, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&e->peers_lock);
    pdx_debug("peer %s (%u) retired", peer->addr, peer->id);
    pdx_peer_put(peer); /* the table's */
}

void pdx_peer_say_bye(pdx_peer_t *peer, const char *reason)
{
    pdx_wire_bye_t m;
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 2 + PDX_WIRE_REASON_MAX];
    size_t len;

    snprintf(m.reason, sizeof(m.reason), "%s", reason);
    /* the time first: the sweep reads it once it sees the reason */
    atomic_store_explicit(&peer->bye_ns, pdx_now_ns(), memory_order_relaxed);
    pthread_mutex_lock(&peer->wait_lock);
    if (!peer->bye)
        peer->bye = reason;
    pthread_mutex_unlock(&peer->wait_lock);
    atomic_store_explicit(&peer->closed, 1, memory_order_release);
    if (pdx_wire_encode_bye(&m, frame, sizeof(frame), &len) == PDX_OK)
        pdx_peer_queue_last(peer, frame, len);
}

const char *pdx_peer_bye_reason(pdx_peer_t *peer)
{
    const char *why;

    pthread_mutex_lock(&peer->wait_lock);
    why = peer->bye;
    pthread_mutex_unlock(&peer->wait_lock);
    return why;
}

pdx_status_t pdx_peer_send_credit(pdx_peer_t *peer, uint32_t pair, uint32_t index, uint32_t epoch,
                                  uint32_t count)
{
    pdx_wire_credit_t m = {.pair = pair, .index = index, .epoch = epoch, .count = count};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 16];
    size_t len;
    pdx_status_t st;

    if (!peer)
        return PDX_ERR_INVALID;
    st = pdx_wire_encode_credit(&m, frame, sizeof(frame), &len);
    return st == PDX_OK ? pdx_peer_send(peer, frame, len) : st;
}

/* ---------------------------------------------------------------- failure */

bool pdx_peer_set_ready(pdx_peer_t *peer)
{
    bool ok;

    pthread_mutex_lock(&peer->wait_lock);
    ok = atomic_load(&peer->state) == PDX_PEER_HELLO;
    if (ok) {
        atomic_store_explicit(&peer->state, PDX_PEER_READY, memory_order_release);
        pthread_cond_broadcast(&peer->wait_cond);
    }
    pthread_mutex_unlock(&peer->wait_lock);
    if (ok && !peer->outgoing) {
        pthread_mutex_lock(&peer->engine->accept_lock);
        pthread_cond_broadcast(&peer->engine->accept_cond);
        pthread_mutex_unlock(&peer->engine->accept_lock);
    }
    return ok;
}

/* Every created endpoint of the peer to error: outstanding WRs complete with it. */
static void fail_deps(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;
    uint32_t n = peer->npairs * peer->qps;

    if (!peer->deps)
        return;
    for (uint32_t i = 0; i < n; i++) {
        pdx_dep_t *dep = &peer->deps[i];

        /* The lock: a shard may be replacing the ep of a dep being reset. */
        pthread_mutex_lock(&dep->lock);
        atomic_store_explicit(&dep->failed, 1, memory_order_release);
        if (dep->ep)
            e->ops->ep_fail(dep->ep, peer->status, peer->err);
        pthread_mutex_unlock(&dep->lock);
    }
}

/*
 * Two steps precede pdx_rooms_peer_fenced(), in either order and maybe on
 * two threads: the reap (every dep in error, `reaped` set) and, for a peer
 * that was READY, pdx_rooms_peer_gone() by the thread that failed it. The
 * second step to finish tells the rooms, once.
 */
static void fence_step(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;

    if (atomic_fetch_add_explicit(&peer->fence_steps, 1, memory_order_acq_rel) == 1) {
        pdx_rooms_peer_fenced(e, peer);
        /* This thread's last touch of the peer: the control thread may
         * retire and free it from here on. */
        atomic_store_explicit(&peer->fenced, 1, memory_order_release);
        pdx_ctrl_wake(e);
    }
}

bool pdx_peer_reap(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;
    uint32_t on_shard[PDX_MAX_SHARDS] = {0};
    uint8_t *out;
    int fd;

    pthread_mutex_lock(&peer->out_lock);
    fd = peer->fd;
    out = peer->out;
    if (fd >= 0) {
        flush_locked(peer); /* a last ERROR or BYE, best effort */
        peer->fd = -1;
        peer->out_head = peer->out_len = 0;
        peer->out = NULL; /* no sender touches it once fd < 0 */
    }
    pthread_mutex_unlock(&peer->out_lock);
    if (fd < 0)
        return false;
    free(out);
    free(peer->in); /* the control thread reads a peer only while its fd is open */
    peer->in = NULL;
    peer->in_len = 0;
    close_socket(fd);
    fail_deps(peer);
    /* Nothing of the peer lands here any more: its decode rooms are fenced,
     * and its shards drop its endpoints once they drained. */
    atomic_store_explicit(&peer->reaped, 1, memory_order_release);
    for (uint32_t i = 0; peer->deps && i < peer->npairs * peer->qps; i++)
        if (peer->deps[i].in_table)
            on_shard[peer->deps[i].shard->index]++;
    for (uint32_t i = 0; i < e->nshards; i++)
        if (on_shard[i]) {
            atomic_fetch_add_explicit(&e->shards[i].doomed, on_shard[i], memory_order_release);
            pdx_shard_wake(&e->shards[i]);
        }
    fence_step(peer);
    return true;
}

void pdx_peer_fail(pdx_peer_t *peer, pdx_status_t status, const char *fmt, ...)
{
    pdx_log_level_t level = PDX_LOG_ERROR;
    uint32_t id;
    char msg[PDX_ERRMSG_MAX];
    pdx_engine_t *e;
    va_list ap;
    int old;

    if (!peer || pdx_peer_failed(peer))
        return;
    e = peer->engine;
    if (status >= 0)
        status = PDX_ERR_PEER;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    pthread_mutex_lock(&peer->wait_lock);
    old = atomic_load(&peer->state);
    if (old == PDX_PEER_FAILED) {
        pthread_mutex_unlock(&peer->wait_lock);
        return;
    }
    peer->status = status;
    memcpy(peer->err, msg, sizeof(peer->err));
    peer->was_ready = old == PDX_PEER_READY;
    atomic_store(&peer->state, PDX_PEER_FAILED); /* seq_cst: pairs with pdx_ctrl_stop */
    pthread_cond_broadcast(&peer->wait_cond);
    pthread_mutex_unlock(&peer->wait_lock);

    /* A peer leaving on purpose (a BYE either way) is routine, and so is a
     * connection in that never finished its handshake (a probe, a port
     * scan, garbage, a peer we had no room for or of another version: an
     * engine that dialled says so on its side). A peer lost otherwise is a
     * warning; protocol errors of a peer are errors. */
    id = __atomic_load_n(&peer->id, __ATOMIC_RELAXED); /* admission may be under way */
    if (id == UINT32_MAX && !peer->outgoing) {
        atomic_fetch_add_explicit(&e->stats.handshakes_refused, 1, memory_order_relaxed);
        atomic_store_explicit(&e->last_refusal, status, memory_order_relaxed);
    }
    if (peer->refused_loudly)
        level = PDX_LOG_ERROR;
    else if (atomic_load_explicit(&peer->closed, memory_order_acquire) ||
             (id == UINT32_MAX && !peer->outgoing))
        level = PDX_LOG_INFO;
    else if (status == PDX_ERR_PEER || status == PDX_ERR_TIMEOUT)
        level = PDX_LOG_WARN;
    if (id == UINT32_MAX)
        pdx_log(level, "connection %s %s failed: %s (%s)", peer->outgoing ? "to" : "from",
                peer->addr, msg, pdx_status_str(status));
    else
        pdx_log(level, "peer %s (%u) failed: %s (%s)", peer->addr, id, msg,
                pdx_status_str(status));

    /* The control thread closes the socket and fails the endpoints; once it
     * has stopped, this thread does. */
    if (!pdx_ctrl_kick(e))
        pdx_peer_reap(peer);
    /* Rooms name only peers that were READY: fail theirs, then (once the
     * reap too is done) count their decode rooms as fenced. */
    if (old == PDX_PEER_READY) {
        pdx_rooms_peer_gone(e, peer);
        fence_step(peer);
    }
}
