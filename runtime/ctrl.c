/*
 * The control thread: one per engine.
 *
 * DESIGN
 * - What the thread does: an epoll loop over the control listener, every
 *   peer's control socket (edge-triggered) and an eventfd. It accepts
 *   connections (a new peer in HELLO per connection), reads each peer's
 *   bytes into its input buffer, frames them (pdx_wire_peek), decodes them
 *   and dispatches every message (ctrl_msg.c: the handshake and everything
 *   after it), writes queued output when a socket drains (EPOLLOUT), and
 *   every PDX_SWEEP_MS runs the room deadline sweep, sends heartbeats to
 *   READY peers, fails peers silent for CTRL_SILENT_BEATS periods and
 *   connections in whose handshake outlived PDX_HANDSHAKE_TIMEOUT_MS
 *   (counted from the accept: bytes do not extend it). It closes the socket
 *   of every FAILED peer and fails its data endpoints (pdx_peer_reap), and
 *   retires it once its shards dropped those (pdx_peer_retire).
 * - Idle: when a sweep finds nothing to watch (no room, held notify or GPU
 *   word to free; every connection READY with nothing to send and no BYE
 *   pending) the thread naps until the next heartbeat instead of ticking.
 *   Any event ends the nap, and so does pdx_ctrl_nudge() from the threads
 *   that add rooms, held notifies or words: they set what they add, then
 *   clear ctrl_napping; the thread sets it, then looks. Every change of
 *   ctrl_napping is an exchange, so of two that race the later reads the
 *   earlier: either the nudge finds it set and wakes the thread, or the
 *   thread's exchange acquires what the nudge added before it.
 * - Admission: a connection in holds a slot of the connection table, not a
 *   peer slot, until its READY. At most PDX_MAX_HANDSHAKES of them are in
 *   their handshake, PDX_HANDSHAKES_PER_HOST from one address: one more from
 *   that address is refused with an ERROR that says why; one more when all
 *   are taken displaces the oldest without a valid HELLO, else the oldest
 *   (a real handshake takes milliseconds). Before its HELLO a connection's
 *   input may not pass PDX_PEER_HELLO_MAX.
 * - What feeds it: the sockets; pdx_ctrl_wake() (a peer failed on another
 *   thread and its socket must be closed); its own tick.
 * - Locks: engine->lock (peer table), a peer's out_lock (its output) and
 *   wait_lock (its state changes), one at a time, never across a wait.
 * - Invariant: while it runs, only this thread reads control sockets and
 *   input buffers, creates data endpoints, and closes control sockets. A
 *   socket never blocks it (nonblocking; at most CTRL_READ_BUDGET bytes per
 *   peer per round, then the other peers' turn), so one slow or dead peer
 *   never stalls the others.
 * - Stopping: engine->ctrl_stop packs CTRL_STOP (asked to stop), CTRL_GONE
 *   (joined) and a count of pdx_ctrl_wake() calls in flight, so the eventfd
 *   is closed only when no thread can still write it, and a peer failed
 *   after the thread is gone is reaped by the thread that failed it.
 */
#include "ctrl.h"
#include "addr.h"
#include "peer.h"
#include "rooms.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "epoll.h"
#include "log.h"
#include "thread.h"

#define CTRL_STOP         PDX_CTRL_STOP
#define CTRL_GONE         2u
#define CTRL_WAKER        4u              /* one pdx_ctrl_wake() in flight */
#define CTRL_EVENTS       64
#define CTRL_BACKLOG      4096            /* the kernel caps it at net.core.somaxconn */
#define CTRL_JOIN_MS      10000u
#define CTRL_READ_BUDGET  (1u << 20)      /* bytes per peer per round */
#define CTRL_SILENT_BEATS 5u              /* heartbeat periods without a byte */
#define CTRL_TAG_LISTEN   UINT32_MAX      /* epoll data: else fd << 32 | connection index */
#define CTRL_TAG_WAKE     (UINT32_MAX - 1)

typedef struct ctrl_ctx {
    pdx_engine_t *e;
    bool          more[PDX_MAX_CONNS];   /* input left unread: budget spent */
    bool          accept_retry;          /* accept stopped on an error */
    bool          napping;               /* next_sweep is the next heartbeat */
    uint64_t      next_sweep, next_beat, beat_seq;
} ctrl_ctx_t;

/* ------------------------------------------------------------- addresses */

void pdx_ctrl_format_addr(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[NI_MAXHOST], port[NI_MAXSERV];
    socklen_t sl = sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                             : sizeof(struct sockaddr_in);

    if (getnameinfo(sa, sl, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV)) {
        snprintf(buf, len, "?");
        return;
    }
    snprintf(buf, len, sa->sa_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/* ------------------------------------------------------------------ wake */

static void wake_write(pdx_engine_t *e)
{
    uint64_t one = 1;

    if (e->ctrl_wake_fd >= 0 && write(e->ctrl_wake_fd, &one, sizeof(one)) < 0 &&
        errno != EAGAIN)
        pdx_error("control thread: eventfd write: %s", strerror(errno));
}

bool pdx_ctrl_kick(pdx_engine_t *e)
{
    uint32_t v = atomic_fetch_add(&e->ctrl_stop, CTRL_WAKER);

    if (!(v & CTRL_GONE))
        wake_write(e);
    atomic_fetch_sub(&e->ctrl_stop, CTRL_WAKER);
    return !(v & CTRL_GONE);
}

void pdx_ctrl_wake(pdx_engine_t *e)
{
    pdx_ctrl_kick(e);
}

void pdx_ctrl_nudge(pdx_engine_t *e)
{
    if (atomic_exchange(&e->ctrl_napping, false))
        pdx_ctrl_kick(e);
}

pdx_status_t pdx_ctrl_watch(pdx_engine_t *e, pdx_peer_t *peer)
{
    epoll_data_t data = {.u64 = (uint64_t)(uint32_t)peer->fd << 32 | peer->conn};

    return pdx_epoll_ctl(e->ctrl_epfd, EPOLL_CTL_ADD, peer->fd,
                         EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, data,
                         "control connection with %s", peer->addr);
}

/* ----------------------------------------------------------------- input */

/*
 * The frame to decode of one that came in: itself, or once the peer proved
 * the key, what the SEALED frame holds (opened in place; hdr is then the
 * inner header). False: the peer was failed.
 */
static bool open_frame(pdx_peer_t *peer, pdx_wire_header_t *hdr, uint8_t *in, size_t need,
                       uint8_t **frame_p, size_t *len_p)
{
    const char *why = "?";
    size_t inner_need = 0;
    pdx_status_t st;

    if (!peer->authed) {
        if (hdr->type == PDX_WIRE_SEALED) {
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "SEALED from %s before a key exchange",
                          peer->addr);
            return false;
        }
        *frame_p = in;
        *len_p = need;
        return true;
    }
    if (hdr->type != PDX_WIRE_SEALED) {
        pdx_ctrl_auth_fail(peer, "%s from %s is not sealed, after the key exchange",
                           pdx_wire_type_str(hdr->type), peer->addr);
        return false;
    }
    if (!pdx_unseal(&peer->seal, in, need, frame_p, len_p)) {
        pdx_ctrl_auth_fail(peer, "a control frame from %s does not open with the session's "
                           "key: changed, replayed or not sealed by the peer", peer->addr);
        return false;
    }
    st = pdx_wire_peek(*frame_p, *len_p, hdr, &inner_need, &why);
    if (st != PDX_OK) {
        why = st == PDX_INPROGRESS ? "not one whole frame" : why;
    } else if (inner_need != *len_p || hdr->type == PDX_WIRE_SEALED) {
        why = hdr->type == PDX_WIRE_SEALED ? "sealed twice" : "not one whole frame";
    } else {
        return true;
    }
    pdx_ctrl_fail(peer, PDX_ERR_PROTO, "malformed sealed frame from %s: %s", peer->addr, why);
    return false;
}

/* Frame, decode and dispatch every whole frame in the input buffer. */
static void parse_input(pdx_engine_t *e, pdx_peer_t *peer)
{
    size_t off = 0;

    while (atomic_load_explicit(&peer->state, memory_order_acquire) != PDX_PEER_FAILED) {
        const char *why = "?";
        pdx_wire_header_t hdr;
        pdx_wire_msg_t msg;
        pdx_status_t st;
        size_t need, len;
        uint8_t *frame;

        st = pdx_wire_peek(peer->in + off, peer->in_len - off, &hdr, &need, &why);
        if (st == PDX_INPROGRESS)
            break;
        if (st != PDX_OK) {
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "malformed frame from %s: %s", peer->addr, why);
            return;
        }
        if (!open_frame(peer, &hdr, peer->in + off, need, &frame, &len))
            return;
        st = pdx_wire_decode(frame, len, &msg, &why);
        if (st != PDX_OK) {
            pdx_ctrl_fail(peer, st, "bad %s from %s: %s", pdx_wire_type_str(hdr.type),
                          peer->addr, why);
            return;
        }
        pdx_ctrl_on_msg(e, peer, &msg); /* a ROOM points into peer->in until here */
        pdx_wire_msg_free(&msg);
        off += need;
    }
    if (off) {
        memmove(peer->in, peer->in + off, peer->in_len - off);
        peer->in_len -= off;
    }
}

/* Read until the socket is empty or the budget is spent: true if input is left. */
static bool read_peer(pdx_engine_t *e, pdx_peer_t *peer)
{
    size_t budget = CTRL_READ_BUDGET;

    while (atomic_load_explicit(&peer->state, memory_order_acquire) != PDX_PEER_FAILED) {
        ssize_t n;

        /* A partial frame is shorter than PDX_WIRE_MAX_SEALED: the buffer
         * grows to take it. */
        if (peer->in_len == peer->in_cap) {
            size_t cap = PDX_MIN(peer->in_cap * 2, (size_t)PDX_WIRE_MAX_SEALED);
            uint8_t *in;

            /* A HELLO is small: before one, a connection gets little room. */
            if (peer->remote_shards == 0 && peer->in_cap >= PDX_PEER_HELLO_MAX) {
                pdx_ctrl_fail(peer, PDX_ERR_PROTO, "%s sent %zu bytes without a whole HELLO",
                              peer->addr, peer->in_len);
                return false;
            }
            in = realloc(peer->in, cap);
            if (!in) {
                pdx_peer_fail(peer, PDX_ERR_NOMEM, "out of memory for the input of %s",
                              peer->addr);
                return false;
            }
            peer->in = in;
            peer->in_cap = cap;
        }
        n = recv(peer->fd, peer->in + peer->in_len, peer->in_cap - peer->in_len, MSG_DONTWAIT);

        if (n > 0) {
            peer->in_len += (size_t)n;
            peer->last_heard_ns = pdx_now_ns();
            parse_input(e, peer);
            if ((size_t)n >= budget)
                return true;
            budget -= (size_t)n;
        } else if (n == 0) {
            const char *bye = pdx_peer_bye_reason(peer);

            if (bye)
                pdx_peer_fail(peer, PDX_ERR_PEER, "%s (%s read our goodbye)", bye, peer->addr);
            else
                pdx_peer_fail(peer, PDX_ERR_PEER, "peer %s closed the control connection",
                              peer->addr);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return false;
        } else if (errno != EINTR) {
            pdx_peer_fail(peer, PDX_ERR_PEER, "control connection to %s: %s", peer->addr,
                          strerror(errno));
        }
    }
    return false;
}

/* ------------------------------------------------------------------ reap */

/* Close FAILED peers' sockets and fail their endpoints; retire those that
 * nothing but rooms refers to any more. */
static void reap_failed(ctrl_ctx_t *ctx)
{
    pdx_engine_t *e = ctx->e;

    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_acquire);

        if (!peer || atomic_load_explicit(&peer->state, memory_order_acquire) != PDX_PEER_FAILED)
            continue;
        if (peer->fd >= 0) {
            pdx_epoll_ctl(e->ctrl_epfd, EPOLL_CTL_DEL, peer->fd, 0, (epoll_data_t){0},
                          "control connection with %s", peer->addr);
            pdx_peer_reap(peer);
            ctx->more[i] = false;
        }
        if (pdx_peer_retirable(peer))
            pdx_peer_retire(peer);
    }
}

/* ---------------------------------------------------------------- accept */

/* Tell a connection we do not take why (best effort: it may not read), and close it. */
static void refuse(int fd, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void refuse(int fd, pdx_status_t status, const char *fmt, ...)
{
    pdx_wire_error_t m = {.room = 0, .status = status};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 16 + PDX_WIRE_REASON_MAX];
    size_t len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(m.message, sizeof(m.message), fmt, ap);
    va_end(ap);
    if (pdx_wire_encode_error(&m, frame, sizeof(frame), &len) == PDX_OK &&
        send(fd, frame, len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        pdx_debug("refused connection: send: %s", strerror(errno));
    shutdown(fd, SHUT_WR);
    close(fd);
}

/* The connection in to give up for a new one: of those that have not sent
 * a valid HELLO yet the oldest, else the oldest of all in their handshake
 * (a real peer's handshake takes milliseconds). */
static pdx_peer_t *oldest_handshake(pdx_engine_t *e)
{
    pdx_peer_t *oldest = NULL;

    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_acquire);

        if (!peer || peer->outgoing || peer->id != UINT32_MAX || peer->fd < 0 ||
            atomic_load_explicit(&peer->state, memory_order_acquire) != PDX_PEER_HELLO)
            continue;
        if (!oldest || (peer->remote_shards == 0) > (oldest->remote_shards == 0) ||
            ((peer->remote_shards == 0) == (oldest->remote_shards == 0) &&
             peer->opened_ns < oldest->opened_ns))
            oldest = peer;
    }
    return oldest;
}

/* Room for one more handshake from ip: false (the caller refuses) when that
 * address has its share; when every handshake slot is taken, the oldest
 * gives its slot up. */
static bool handshake_room(ctrl_ctx_t *ctx, const char *ip)
{
    pdx_engine_t *e = ctx->e;
    uint32_t from_ip, n = pdx_peer_handshakes(e, ip, &from_ip);

    if (from_ip >= PDX_HANDSHAKES_PER_HOST)
        return false;
    if (n >= PDX_MAX_HANDSHAKES) {
        pdx_peer_t *oldest = oldest_handshake(e);

        if (oldest) {
            pdx_ctrl_fail(oldest, PDX_ERR_TIMEOUT, "handshake from %s displaced: %u "
                          "connections are in their handshake", oldest->addr, n);
            reap_failed(ctx); /* its slot is free again */
        }
    }
    return true;
}

static void accept_all(ctrl_ctx_t *ctx)
{
    pdx_engine_t *e = ctx->e;

    ctx->accept_retry = false;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char addr[PDX_NAME_MAX], ip[PDX_ADDR_MAX];
        pdx_peer_t *peer;
        pdx_status_t st;
        int fd;

        fd = accept4(e->listen_fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of fds, say: try again at the next sweep. */
                pdx_error("control listener %s: accept: %s", e->address, strerror(errno));
                ctx->accept_retry = true;
            }
            return;
        }
        pdx_ctrl_format_addr((struct sockaddr *)&ss, addr, sizeof(addr));
        if (getnameinfo((struct sockaddr *)&ss, sl, ip, sizeof(ip), NULL, 0, NI_NUMERICHOST))
            snprintf(ip, sizeof(ip), "?");
        if (!handshake_room(ctx, ip)) {
            atomic_fetch_add_explicit(&e->stats.handshakes_refused, 1, memory_order_relaxed);
            atomic_store_explicit(&e->last_refusal, PDX_ERR_AGAIN, memory_order_relaxed);
            pdx_info("connection from %s refused: %u handshakes from %s are in progress", addr,
                     PDX_HANDSHAKES_PER_HOST, ip);
            refuse(fd, PDX_ERR_AGAIN, "%u handshakes from %s are in progress at %s; try "
                   "again", PDX_HANDSHAKES_PER_HOST, ip, e->address);
            continue;
        }
        st = pdx_peer_open(e, fd, false, addr, &peer);
        if (st != PDX_OK) {
            refuse(fd, st, "%s cannot take another connection (%s)", e->address,
                   pdx_status_str(st));
            continue;
        }
        pdx_peer_put(peer); /* the table's reference stays */
        ctx->more[peer->conn] = false;
        if (pdx_ctrl_watch(e, peer) != PDX_OK) {
            pdx_peer_fail(peer, PDX_ERR_IO, "cannot watch the connection from %s", addr);
            continue;
        }
        pdx_debug("control connection from %s (connection %u)", addr, peer->conn);
    }
}

/* ----------------------------------------------------------------- sweep */

/* Whether the sweep has nothing to do before the next heartbeat (idle). */
static bool nothing_to_watch(ctrl_ctx_t *ctx)
{
    pdx_engine_t *e = ctx->e;
    bool held, orphans;

    if (ctx->accept_retry || pdx_room_span(&e->rooms))
        return false;
    pthread_mutex_lock(&e->held_lock);
    held = e->nheld > 0;
    pthread_mutex_unlock(&e->held_lock);
    orphans = false;
    if (e->gpu.words) {
        pthread_mutex_lock(&e->gpu.lock);
        orphans = e->gpu.norphans > 0;
        pthread_mutex_unlock(&e->gpu.lock);
    }
    if (held || orphans)
        return false;
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_acquire);

        if (peer && (atomic_load_explicit(&peer->state, memory_order_acquire) != PDX_PEER_READY ||
                     pdx_peer_bye_reason(peer) || pdx_peer_output_pending(peer)))
            return false;
    }
    return true;
}

static void sweep(ctrl_ctx_t *ctx, uint64_t now)
{
    pdx_engine_t *e = ctx->e;
    uint64_t period = (uint64_t)e->cfg.heartbeat_ms * 1000000u;
    uint64_t handshake = (uint64_t)e->cfg.handshake_timeout_ms * 1000000u;
    uint8_t beat[PDX_WIRE_HEADER_SIZE + 32];
    size_t beat_len = 0;

    pdx_rooms_sweep(e, now);
    pdx_gpu_sweep(e);
    if (now >= ctx->next_beat) {
        pdx_wire_heartbeat_t m = {.seq = ++ctx->beat_seq, .time_ns = now};

        ctx->next_beat = now + period;
        if (pdx_wire_encode_heartbeat(&m, beat, sizeof(beat), &beat_len) != PDX_OK)
            beat_len = 0;
    }
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_acquire);
        uint64_t heard;
        int state;

        if (!peer)
            continue;
        state = atomic_load_explicit(&peer->state, memory_order_acquire);
        if (state == PDX_PEER_FAILED)
            continue;
        /* A connection in has its handshake deadline from the accept on;
         * a trickle of bytes does not extend it. */
        if (state == PDX_PEER_HELLO && !peer->outgoing && now - peer->opened_ns > handshake) {
            pdx_ctrl_fail(peer, PDX_ERR_TIMEOUT, "handshake from %s not done within "
                          "PDX_HANDSHAKE_TIMEOUT_MS=%u ms", peer->addr,
                          e->cfg.handshake_timeout_ms);
            continue;
        }
        if (pdx_peer_bye_reason(peer) &&
            now - atomic_load_explicit(&peer->bye_ns, memory_order_relaxed) >
                PDX_BYE_WAIT_MS * 1000000ull) {
            pdx_peer_fail(peer, PDX_ERR_PEER, "%s (%s did not close its side within %u ms)",
                          pdx_peer_bye_reason(peer), peer->addr, PDX_BYE_WAIT_MS);
            continue;
        }
        heard = peer->last_heard_ns;
        if (now > heard && now - heard > CTRL_SILENT_BEATS * period) {
            pdx_peer_fail(peer, PDX_ERR_PEER, "peer %s silent for %llu ms", peer->addr,
                          (unsigned long long)((now - heard) / 1000000u));
            continue;
        }
        /* A full output skips a beat: the peer is not reading us. */
        if (beat_len && state == PDX_PEER_READY)
            pdx_peer_send(peer, beat, beat_len);
        /* Normally EPOLLOUT flushes; this catches anything it left. */
        if (pdx_peer_output_pending(peer))
            pdx_peer_flush(peer);
    }
    if (ctx->accept_retry)
        accept_all(ctx);
    ctx->next_sweep = now + PDX_SWEEP_MS * 1000000ull;
    /* set, then look: a nudge before the exchange is acquired by it, one
     * after it finds the flag set */
    (void)atomic_exchange(&e->ctrl_napping, true);
    ctx->napping = nothing_to_watch(ctx);
    if (ctx->napping && ctx->next_beat > ctx->next_sweep)
        ctx->next_sweep = ctx->next_beat;
    else
        (void)atomic_exchange(&e->ctrl_napping, false);
}

/* ------------------------------------------------------------------ loop */

static void handle_event(ctrl_ctx_t *ctx, const struct epoll_event *ev)
{
    pdx_engine_t *e = ctx->e;
    uint32_t id = (uint32_t)ev->data.u64;
    pdx_peer_t *peer;

    if (id == CTRL_TAG_LISTEN) {
        accept_all(ctx);
        return;
    }
    if (id == CTRL_TAG_WAKE) {
        uint64_t v;

        if (read(e->ctrl_wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            pdx_error("control thread: eventfd read: %s", strerror(errno));
        return;
    }
    peer = id < PDX_MAX_CONNS ? atomic_load_explicit(&e->conns[id], memory_order_acquire) : NULL;
    if (!peer || peer->fd != (int)(ev->data.u64 >> 32) ||
        atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_FAILED)
        return; /* a closed socket's last event */
    if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        ctx->more[id] = true;
    if (ev->events & EPOLLOUT)
        pdx_peer_flush(peer);
}

static void *ctrl_main(void *arg)
{
    struct epoll_event evs[CTRL_EVENTS];
    ctrl_ctx_t *ctx = arg;
    pdx_engine_t *e = ctx->e;

    pthread_setname_np(pthread_self(), "pdx-ctrl");
    pdx_log_tag(e->sender_id, e->address);
    while (!(atomic_load(&e->ctrl_stop) & CTRL_STOP)) {
        uint64_t now = pdx_now_ns();
        bool more = false;
        int timeout = 0, n;

        for (uint32_t i = 0; i < PDX_MAX_CONNS && !more; i++)
            more = ctx->more[i];
        if (!more && now < ctx->next_sweep)
            timeout = (int)((ctx->next_sweep - now + 999999u) / 1000000u);
        n = epoll_wait(e->ctrl_epfd, evs, CTRL_EVENTS, timeout);
        if (n < 0) {
            if (errno != EINTR) {
                pdx_error("control thread: epoll_wait: %s", strerror(errno));
                usleep(PDX_SWEEP_MS * 1000u); /* do not spin on a broken epoll */
            }
            n = 0;
        }
        for (int i = 0; i < n; i++)
            handle_event(ctx, &evs[i]);
        if (n > 0 && ctx->napping) { /* woken: watch again from the next tick */
            ctx->napping = false;
            (void)atomic_exchange(&e->ctrl_napping, false);
            now = pdx_now_ns();
            if (ctx->next_sweep > now + PDX_SWEEP_MS * 1000000ull)
                ctx->next_sweep = now + PDX_SWEEP_MS * 1000000ull;
        }
        for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
            pdx_peer_t *peer;

            if (!ctx->more[i])
                continue;
            peer = atomic_load_explicit(&e->conns[i], memory_order_acquire);
            ctx->more[i] = peer && peer->fd >= 0 && read_peer(e, peer);
        }
        reap_failed(ctx);
        now = pdx_now_ns();
        if (now >= ctx->next_sweep)
            sweep(ctx, now);
    }
    free(ctx);
    return NULL;
}

/* ------------------------------------------------------------ start/stop */

/*
 * Bind PDX_LISTEN's host (an empty one is 0.0.0.0; [::] is dual-stack) and
 * listen. e->bind_host is the bound address, numeric, for tcp's data
 * listener; e->address is e->host (engine.c: what peers dial) and the port.
 */
pdx_status_t pdx_ctrl_listen(pdx_engine_t *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    char host[PDX_NAME_MAX], port[16], why[160];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct addrinfo *res;
    uint32_t port_num;
    int rc, one = 1, off = 0;

    if (pdx_addr_split(e->cfg.listen, 0, host, sizeof(host), &port_num, why, sizeof(why)) !=
        PDX_OK) {
        pdx_error("PDX_LISTEN=\"%s\": %s", e->cfg.listen, why);
        return PDX_ERR_INVALID;
    }
    snprintf(port, sizeof(port), "%u", port_num);
    rc = getaddrinfo(host[0] ? host : "0.0.0.0", port, &hints, &res);
    if (rc) {
        pdx_error("PDX_LISTEN=%s: %s", e->cfg.listen, gai_strerror(rc));
        return PDX_ERR_INVALID;
    }
    e->listen_fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (e->listen_fd < 0) {
        pdx_error("PDX_LISTEN=%s: socket: %s", e->cfg.listen, strerror(errno));
        goto err_res;
    }
    if (setsockopt(e->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
        pdx_debug("PDX_LISTEN=%s: SO_REUSEADDR: %s", e->cfg.listen, strerror(errno));
    /* [::] takes IPv4 peers too (an advertised IPv4 address reaches it),
     * whatever net.ipv6.bindv6only says. */
    if (res->ai_family == AF_INET6 &&
        setsockopt(e->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) < 0)
        pdx_debug("PDX_LISTEN=%s: IPV6_V6ONLY: %s", e->cfg.listen, strerror(errno));
    if (bind(e->listen_fd, res->ai_addr, res->ai_addrlen) < 0 ||
        listen(e->listen_fd, CTRL_BACKLOG) < 0 ||
        getsockname(e->listen_fd, (struct sockaddr *)&ss, &sl) < 0) {
        pdx_error("PDX_LISTEN=%s: cannot listen: %s", e->cfg.listen, strerror(errno));
        goto err_close;
    }
    freeaddrinfo(res);
    if (getnameinfo((struct sockaddr *)&ss, sl, e->bind_host, sizeof(e->bind_host), NULL, 0,
                    NI_NUMERICHOST))
        snprintf(e->bind_host, sizeof(e->bind_host), "%.*s", PDX_WIRE_HOST_MAX, host);
    port_num = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                        : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    e->port = port_num;
    snprintf(e->address, sizeof(e->address), strchr(e->host, ':') ? "[%s]:%u" : "%s:%u",
             e->host, port_num);
    return PDX_OK;

err_close:
    close(e->listen_fd);
    e->listen_fd = -1;
err_res:
    freeaddrinfo(res);
    return PDX_ERR_IO;
}

static pdx_status_t ctrl_add(pdx_engine_t *e, int fd, uint32_t tag, uint32_t events)
{
    return pdx_epoll_ctl(e->ctrl_epfd, EPOLL_CTL_ADD, fd, events, (epoll_data_t){.u64 = tag},
                         "control thread");
}

pdx_status_t pdx_ctrl_start(pdx_engine_t *e)
{
    ctrl_ctx_t *ctx;
    pdx_status_t st;
    int rc;

    atomic_store(&e->ctrl_stop, 0);
    e->protocol_version = pdx_protocol_version;
    ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        pdx_error("out of memory for the control thread");
        return PDX_ERR_NOMEM;
    }
    ctx->e = e;
    ctx->next_sweep = pdx_now_ns();
    ctx->next_beat = ctx->next_sweep + (uint64_t)e->cfg.heartbeat_ms * 1000000u;
    st = PDX_ERR_IO;
    e->ctrl_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (e->ctrl_epfd < 0) {
        pdx_error("control thread: epoll_create1: %s", strerror(errno));
        goto err_ctx;
    }
    e->ctrl_wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->ctrl_wake_fd < 0) {
        pdx_error("control thread: eventfd: %s", strerror(errno));
        goto err_epoll;
    }
    if (ctrl_add(e, e->listen_fd, CTRL_TAG_LISTEN, EPOLLIN | EPOLLET) != PDX_OK ||
        ctrl_add(e, e->ctrl_wake_fd, CTRL_TAG_WAKE, EPOLLIN) != PDX_OK)
        goto err_wake;
    rc = pdx_thread_start(&e->ctrl_thread, ctrl_main, ctx);
    if (rc) {
        pdx_error("cannot start the control thread: %s", strerror(rc));
        goto err_wake;
    }
    pdx_debug("control listener on %s (advertised as %s)", e->cfg.listen, e->address);
    return PDX_OK;

err_wake:
    close(e->ctrl_wake_fd);
    e->ctrl_wake_fd = -1;
err_epoll:
    close(e->ctrl_epfd);
    e->ctrl_epfd = -1;
err_ctx:
    free(ctx);
    return st;
}

bool pdx_ctrl_running(pdx_engine_t *e)
{
    /* CTRL_GONE is set once the join succeeded; a thread never started
     * leaves the eventfd closed. */
    return e && e->ctrl_wake_fd >= 0 && !(atomic_load(&e->ctrl_stop) & CTRL_GONE);
}

void pdx_ctrl_stop(pdx_engine_t *e)
{
    bool close_wake = true;
    uint64_t deadline;

    if (!e || e->ctrl_wake_fd < 0 || (atomic_fetch_or(&e->ctrl_stop, CTRL_STOP) & CTRL_STOP))
        return;
    wake_write(e);
    /* Closing its fds under a running thread would be worse than the leak. */
    if (!pdx_thread_join(e->ctrl_thread, CTRL_JOIN_MS, "the control thread"))
        return;
    free(e->desc_frame);
    free(e->desc_entries);
    e->desc_frame = NULL;
    e->desc_entries = NULL;
    /* seq_cst: a peer failed from here on is reaped by its failer; one
     * failed before is FAILED in the loop below. */
    atomic_fetch_or(&e->ctrl_stop, CTRL_GONE);
    deadline = pdx_deadline_ns(1000);
    while (atomic_load(&e->ctrl_stop) >= CTRL_WAKER) {
        if (pdx_now_ns() > deadline) {
            pdx_error("control thread stopped but a wakeup is still in flight; "
                      "its eventfd is left open");
            close_wake = false;
            break;
        }
        sched_yield();
    }
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load(&e->conns[i]);

        if (peer && atomic_load(&peer->state) == PDX_PEER_FAILED)
            pdx_peer_reap(peer);
    }
    if (close_wake) {
        close(e->ctrl_wake_fd);
        e->ctrl_wake_fd = -1;
    }
    close(e->ctrl_epfd);
    close(e->listen_fd);
    e->ctrl_epfd = e->listen_fd = -1;
}
