/*
 * tcp transport: one "software NIC" per tp.
 *
 * DESIGN
 * - What the thread does: one progress thread per tp runs an epoll loop over
 *   the listener, every ep socket, pending incoming connections and an
 *   eventfd. It dials and accepts connections, writes frames from the eps'
 *   send queues, reads and places incoming frames, sends and handles acks,
 *   produces completions and fails eps whose deadline passed. With GPU
 *   regions it also starts staging copies and polls them (stage.c).
 * - What feeds it: the eps' SQ/RQ rings (the poster publishes entries and
 *   rings tp->doorbell; it writes the eventfd only while the thread sleeps),
 *   a command list (ep add/connect/fail/destroy; the caller waits with a
 *   deadline), and the pause/stop flags.
 * - Locks: cmd_lock (command list), obj_lock (CQ list), the MR table lock,
 *   each CQ's ring lock, stage_lock (staging setup and orphans; never taken
 *   by this thread). The thread never holds two at once and never blocks
 *   while holding one; the post path takes none.
 * - Invariant: only this thread touches sockets and ep protocol state; a
 *   socket never blocks it (nonblocking, edge-triggered, partial I/O
 *   resumed, per-ep byte budgets), so one stalled peer never stalls others.
 * - Sleeping: in epoll_wait until the next deadline tick; after activity it
 *   polls for TCP_SPIN_NS first. While GPU copies run (they signal no fd)
 *   it polls them, sleeping at most TCP_COPY_SLEEP_MS at a time.
 */
#include "tcp.h"
#include "tcp_internal.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "epoll.h"

#define TCP_EVENTS      64
#define TCP_JOIN_MS     10000u
/* After an event the thread polls (epoll_wait with timeout 0) this long
 * before it sleeps: on a busy ep the next event is usually microseconds away,
 * and waking a sleeping thread (on a VM, a halted vCPU) costs more than the
 * polling. Idle tps sleep. */
#define TCP_SPIN_NS     50000u
#define TCP_COPY_SLEEP_MS 1

static void tp_wake(tcp_tp_t *tp)
{
    uint64_t one = 1;

    if (write(tp->wake_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        pdx_error("tcp: %s: eventfd write: %s", tp->name, strerror(errno));
}

void tcp_tp_kick(tcp_tp_t *tp)
{
    /* seq_cst store then load; the thread stores sleeping then loads doorbell */
    atomic_store(&tp->doorbell, 1);
    if (PDX_UNLIKELY(atomic_load(&tp->sleeping)))
        tp_wake(tp);
}

pdx_status_t tcp_poll_add(tcp_tp_t *tp, int fd, tcp_pollable_t *p, uint32_t events)
{
    return pdx_epoll_ctl(tp->epfd, EPOLL_CTL_ADD, fd, events, (epoll_data_t){.ptr = p},
                         "tcp: %s", tp->name);
}

pdx_status_t tcp_poll_mod(tcp_tp_t *tp, int fd, tcp_pollable_t *p, uint32_t events)
{
    return pdx_epoll_ctl(tp->epfd, EPOLL_CTL_MOD, fd, events, (epoll_data_t){.ptr = p},
                         "tcp: %s", tp->name);
}

void tcp_poll_del(tcp_tp_t *tp, int fd)
{
    pdx_epoll_ctl(tp->epfd, EPOLL_CTL_DEL, fd, 0, (epoll_data_t){0}, "tcp: %s", tp->name);
}

void tcp_work_add(tcp_ep_t *ep)
{
    if (ep->in_work)
        return;
    ep->in_work = true;
    ep->work_next = ep->tp->work;
    ep->tp->work = ep;
}

void tcp_work_remove(tcp_ep_t *ep)
{
    tcp_ep_t **pp;

    if (!ep->in_work)
        return;
    for (pp = &ep->tp->work; *pp; pp = &(*pp)->work_next) {
        if (*pp == ep) {
            *pp = ep->work_next;
            break;
        }
    }
    ep->in_work = false;
}

/* ------------------------------------------------------------ commands */

pdx_status_t tcp_tp_command(tcp_tp_t *tp, tcp_cmd_t *cmd)
{
    uint64_t deadline = pdx_deadline_ns(TCP_CMD_TIMEOUT_MS);
    pdx_status_t result;

    cmd->state = 0;
    cmd->result = PDX_OK;
    cmd->next = NULL;
    pthread_mutex_lock(&tp->cmd_lock);
    if (tp->cmd_tail)
        tp->cmd_tail->next = cmd;
    else
        tp->cmd_head = cmd;
    tp->cmd_tail = cmd;
    atomic_store(&tp->cmd_pending, true);
    pthread_mutex_unlock(&tp->cmd_lock);
    tp_wake(tp);

    pthread_mutex_lock(&tp->cmd_lock);
    while (cmd->state != 2) {
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000u),
                              .tv_nsec = (long)(deadline % 1000000000u)};

        if (pthread_cond_timedwait(&tp->cmd_cond, &tp->cmd_lock, &ts) != ETIMEDOUT)
            continue;
        if (cmd->state == 0) {
            tcp_cmd_t **pp = &tp->cmd_head;

            tp->cmd_tail = NULL;
            while (*pp) {
                if (*pp == cmd) {
                    *pp = cmd->next;
                    continue;
                }
                tp->cmd_tail = *pp;
                pp = &(*pp)->next;
            }
            pthread_mutex_unlock(&tp->cmd_lock);
            pdx_error("tcp: %s: progress thread did not take a command within %u ms",
                      tp->name, TCP_CMD_TIMEOUT_MS);
            return PDX_ERR_TIMEOUT;
        }
        /* Taken: it finishes within this loop iteration of the thread. */
        deadline = pdx_deadline_ns(100);
    }
    result = cmd->result;
    pthread_mutex_unlock(&tp->cmd_lock);
    return result;
}

static void ep_scan(tcp_ep_t *ep, uint64_t now);

static pdx_status_t cmd_exec(tcp_tp_t *tp, tcp_cmd_t *cmd)
{
    tcp_ep_t *ep = cmd->ep;

    switch (cmd->kind) {
    case TCP_CMD_ADD:
        PDX_LIST_PUSH(tp->eps, ep);
        ep_scan(ep, pdx_now_ns());
        return PDX_OK;
    case TCP_CMD_CONNECT:
        if (ep->state != TCP_EP_NEW) {
            pdx_error("tcp: %s: ep_connect on an endpoint in error", tp->name);
            return PDX_ERR_STATE;
        }
        tcp_ep_start(ep);
        return PDX_OK;
    case TCP_CMD_FAIL:
        /* What already arrived counts first: a peer that acknowledged our
         * WRITEs and then left (its goodbye on the control connection may
         * overtake those acks) has them completed, not flushed. */
        if (ep->state == TCP_EP_UP)
            tcp_rx_progress(ep);
        tcp_ep_set_error(ep, cmd->why, true, "%s", cmd->msg ? cmd->msg :
                         pdx_status_str(cmd->why));
        ep_scan(ep, pdx_now_ns()); /* WRs posted as it failed */
        return PDX_OK;
    case TCP_CMD_DESTROY:
        tcp_ep_detach(ep);
        return PDX_OK;
    }
    return PDX_ERR_INVALID;
}

static void run_commands(tcp_tp_t *tp)
{
    tcp_cmd_t *cmd, *next;

    pthread_mutex_lock(&tp->cmd_lock);
    cmd = tp->cmd_head;
    tp->cmd_head = tp->cmd_tail = NULL;
    atomic_store(&tp->cmd_pending, false);
    for (next = cmd; next; next = next->next)
        next->state = 1;
    pthread_mutex_unlock(&tp->cmd_lock);

    for (; cmd; cmd = next) {
        pdx_status_t result;

        next = cmd->next; /* the caller owns cmd again once it is done */
        result = cmd_exec(tp, cmd);
        pthread_mutex_lock(&tp->cmd_lock);
        cmd->result = result;
        cmd->state = 2;
        pthread_cond_broadcast(&tp->cmd_cond);
        pthread_mutex_unlock(&tp->cmd_lock);
    }
}

/* ------------------------------------------------------- progress loop */

/* New posts on ep: track them; an ep in error flushes them. */
static void ep_scan(tcp_ep_t *ep, uint64_t now)
{
    uint64_t pub = atomic_load_explicit(&ep->sq_pub, memory_order_acquire);

    if (ep->state == TCP_EP_DEAD) {
        pdx_status_t why = (pdx_status_t)atomic_load_explicit(&ep->err, memory_order_relaxed);

        tcp_tx_flush(ep, why, true);
        tcp_rx_flush(ep, why, true);
        return;
    }
    if (pub == ep->sq_seen)
        return;
    if (ep->sq_seen == ep->sq_acked)
        ep->progress_ns = now; /* the deadline runs from the first outstanding WR */
    ep->sq_seen = pub;
    if (ep->state == TCP_EP_UP)
        tcp_work_add(ep);
}

static void ep_progress(tcp_tp_t *tp, tcp_ep_t *ep)
{
    if (ep->state != TCP_EP_UP)
        return;
    if (PDX_UNLIKELY(atomic_load_explicit(&tp->staging, memory_order_relaxed)))
        tcp_stage_tx(ep); /* WRITEs from GPU memory start their copies */
    if (ep->state == TCP_EP_UP && ep->rx_ready && !tp->rx_paused && !ep->rx_stalled)
        tcp_rx_progress(ep);
    if (PDX_UNLIKELY(ep->rx_placed != ep->rx_seq) && ep->state == TCP_EP_UP)
        tcp_rx_retire(ep);
    if (ep->state == TCP_EP_UP && ep->writable && tcp_tx_pending(ep))
        tcp_tx_progress(ep);
    if (ep->state != TCP_EP_UP)
        return;
    /* rx stopped on its byte budget or a full control queue that tx drained */
    if (ep->rx_ready && !tp->rx_paused && !ep->rx_stalled && tcp_ctrl_room(ep))
        tcp_work_add(ep);
    else if (PDX_UNLIKELY(ep->rx_placed != ep->rx_seq) && tcp_rx_retire_ready(ep))
        tcp_work_add(ep);
}

static void handle_event(tcp_tp_t *tp, const struct epoll_event *ev)
{
    tcp_pollable_t *p = ev->data.ptr;
    tcp_ep_t *ep;

    switch (p->kind) {
    case TCP_POLL_LISTEN:
        tcp_conn_accept(tp);
        return;
    case TCP_POLL_WAKE: {
        uint64_t v;

        if (read(tp->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            pdx_error("tcp: %s: eventfd read: %s", tp->name, strerror(errno));
        return;
    }
    case TCP_POLL_CONN:
        tcp_conn_event((tcp_conn_t *)(void *)p);
        return;
    case TCP_POLL_EP:
        ep = pdx_container_of(p, tcp_ep_t, poll);
        if (ep->state == TCP_EP_DIALING) {
            if (ev->events & (EPOLLOUT | EPOLLERR | EPOLLHUP))
                tcp_ep_dialed(ep);
            return;
        }
        if (ep->state != TCP_EP_UP)
            return;
        if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
            ep->rx_ready = true;
        if (ev->events & (EPOLLOUT | EPOLLHUP | EPOLLERR))
            ep->writable = true;
        tcp_work_add(ep);
        return;
    }
}

static void *progress_main(void *arg)
{
    tcp_tp_t *tp = arg;
    struct epoll_event evs[TCP_EVENTS];
    uint64_t tick = PDX_MAX(1000000ull, PDX_MIN(100000000ull,
                                                (uint64_t)tp->timeout_ms * 1000000ull / 8));
    uint64_t next_tick = pdx_now_ns() + tick, spin_until = 0;

    pthread_setname_np(pthread_self(), "pdx-tcp");
    pdx_log_tag(tp->base.log_id, tp->base.log_engine);
    for (;;) {
        tcp_ep_t *ep, *next;
        uint64_t now;
        int timeout = 0, n;
        bool paused, active = tp->work != NULL;

        if (atomic_load(&tp->cmd_pending))
            run_commands(tp);
        if (atomic_load(&tp->stop))
            break;
        paused = atomic_load(&tp->paused);
        if (paused != tp->rx_paused) {
            tp->rx_paused = paused;
            for (ep = tp->eps; ep && !paused; ep = ep->next)
                if (ep->state == TCP_EP_UP && ep->rx_ready)
                    tcp_work_add(ep);
        }
        atomic_store(&tp->paused_seen, paused);
        now = pdx_now_ns();
        if (atomic_exchange(&tp->doorbell, 0)) {
            active = true;
            for (ep = tp->eps; ep; ep = ep->next)
                ep_scan(ep, now);
        }

        if (PDX_UNLIKELY(tp->copying != NULL) && tcp_stage_poll(tp))
            active = true;
        ep = tp->work;
        tp->work = NULL;
        for (; ep; ep = next) {
            next = ep->work_next;
            ep->in_work = false;
            ep_progress(tp, ep);
        }

        now = pdx_now_ns();
        if (now >= next_tick) {
            tcp_conn_sweep(tp, now);
            next_tick = now + tick;
        }
        if (active)
            spin_until = now + TCP_SPIN_NS;
        if (!tp->work && now >= spin_until && (!tp->copying || now >= tp->copy_spin_until)) {
            timeout = (int)((next_tick - now + 999999u) / 1000000u);
            if (tp->copying)
                timeout = PDX_MIN(timeout, TCP_COPY_SLEEP_MS);
            atomic_store(&tp->sleeping, 1);
            if (atomic_load(&tp->doorbell))
                timeout = 0;
        }
        n = epoll_wait(tp->epfd, evs, TCP_EVENTS, timeout);
        atomic_store_explicit(&tp->sleeping, 0, memory_order_relaxed);
        if (n < 0 && errno != EINTR) {
            pdx_error("tcp: %s: epoll_wait: %s", tp->name, strerror(errno));
            n = 0;
        }
        for (int i = 0; i < n; i++)
            handle_event(tp, &evs[i]);
        if (n > 0)
            spin_until = pdx_now_ns() + TCP_SPIN_NS;
    }
    return NULL;
}

void pdx_tcp_pause(pdx_tp_t *ptp, bool paused)
{
    tcp_tp_t *tp = tcp_tp(ptp);

    uint64_t deadline = pdx_deadline_ns(TCP_CMD_TIMEOUT_MS);

    atomic_store(&tp->paused, paused);
    tp_wake(tp);
    /* back once the progress thread reads no more (or lets reading go on) */
    while (atomic_load(&tp->paused_seen) != paused && pdx_now_ns() < deadline)
        usleep(100);
}

/* ---------------------------------------------------------- open/close */

static bool addr_is_wildcard(const tcp_addr_t *a)
{
    return !memcmp(a->ip, (const uint8_t[16]){0}, a->family == 4 ? 4 : 16);
}

/*
 * What endpoint addresses carry (tp->addr, the listener's port kept): the
 * advertised host, resolved once here, else the bound address. A listener
 * bound to IPv4 takes an IPv4 address; one bound to IPv6 an IPv6 address,
 * and its wildcard, which is dual-stack, either.
 */
static pdx_status_t tp_advertise(tcp_tp_t *tp, const char *host, const char *advertise)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    bool wildcard = addr_is_wildcard(&tp->addr);
    struct addrinfo *ai;
    tcp_addr_t a;
    pdx_status_t st;
    int rc;

    if (!advertise || !advertise[0]) {
        if (!wildcard)
            return PDX_OK;
        pdx_error("tcp: %s is a wildcard and no address to advertise was given; endpoints "
                  "need an address peers can reach", host);
        return PDX_ERR_INVALID;
    }
    if (tp->addr.family == 4)
        hints.ai_family = AF_INET;
    else if (!wildcard)
        hints.ai_family = AF_INET6;
    rc = getaddrinfo(advertise, NULL, &hints, &ai);
    if (rc) {
        pdx_error("tcp: the advertised host %s, for a listener on %s: %s", advertise, host,
                  gai_strerror(rc));
        return PDX_ERR_INVALID;
    }
    st = tcp_addr_from_sockaddr(ai->ai_addr, &a);
    freeaddrinfo(ai);
    if (st != PDX_OK)
        return st;
    a.port = tp->addr.port;
    tp->addr = a;
    return PDX_OK;
}

/* Bind host (a wildcard binds every interface) and listen. */
static pdx_status_t tp_listen(tcp_tp_t *tp, const char *host, const char *advertise)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct addrinfo *ai;
    pdx_status_t st;
    int rc, fd, off = 0;

    rc = getaddrinfo(host, "0", &hints, &ai);
    if (rc) {
        pdx_error("tcp: cannot resolve %s: %s", host, gai_strerror(rc));
        return PDX_ERR_INVALID;
    }
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        pdx_error("tcp: socket for %s: %s", host, strerror(errno));
        st = PDX_ERR_IO;
        goto err_free_ai;
    }
    /* [::] takes IPv4 peers too, whatever net.ipv6.bindv6only says. */
    if (ai->ai_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) < 0)
        pdx_debug("tcp: listener on %s: IPV6_V6ONLY: %s", host, strerror(errno));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) {
        pdx_error("tcp: listen on %s: %s", host, strerror(errno));
        st = PDX_ERR_IO;
        goto err_close;
    }
    st = tcp_addr_from_sockaddr((struct sockaddr *)&ss, &tp->addr);
    if (st == PDX_OK)
        st = tp_advertise(tp, host, advertise);
    if (st != PDX_OK)
        goto err_close;
    freeaddrinfo(ai);
    tp->listen_fd = fd;
    tcp_addr_format(&tp->addr, tp->name, sizeof(tp->name));
    return PDX_OK;

err_close:
    close(fd);
err_free_ai:
    freeaddrinfo(ai);
    return st;
}

static pdx_status_t tp_start(tcp_tp_t *tp)
{
    int rc = pdx_thread_start_on(&tp->thread, progress_main, tp, tp->bind ? &tp->cpus : NULL);

    if (rc) {
        pdx_error("tcp: %s: cannot start the progress thread: %s", tp->name, strerror(rc));
        return PDX_ERR_IO;
    }
    tp->thread_started = true;
    return PDX_OK;
}

static void tp_free(tcp_tp_t *tp)
{
    while (tp->eps) {
        tcp_ep_t *ep = tp->eps;

        tp->eps = ep->next;
        if (ep->fd >= 0)
            close(ep->fd);
        tcp_ep_free(ep);
    }
    tcp_conn_close_all(tp);
    tcp_stage_reap(tp, true);
    tcp_staging_fini(tp);
    while (tp->cqs) {
        tcp_cq_t *cq = tp->cqs;

        tp->cqs = cq->next;
        tcp_cq_free(cq);
    }
    tcp_mr_table_fini(&tp->mrs);
    close(tp->wake_fd);
    close(tp->epfd);
    close(tp->listen_fd);
    pthread_cond_destroy(&tp->cmd_cond);
    pthread_mutex_destroy(&tp->stage_lock);
    pthread_mutex_destroy(&tp->obj_lock);
    pthread_mutex_destroy(&tp->cmd_lock);
    free(tp);
}

static pdx_status_t tcp_open(const pdx_tp_params_t *params, pdx_tp_t **tp_p)
{
    const char *host = params && params->host && params->host[0] ? params->host : "127.0.0.1";
    const pdx_config_t *cfg = params ? params->config : NULL;
    pthread_condattr_t cattr;
    pdx_status_t status;
    tcp_tp_t *tp;
    void *mem;

    if (posix_memalign(&mem, PDX_CACHELINE, sizeof(*tp))) {
        pdx_error("tcp: out of memory for a transport");
        return PDX_ERR_NOMEM;
    }
    tp = memset(mem, 0, sizeof(*tp));
    tp->base.ops = &pdx_tcp_ops;
    pdx_tp_log_init(&tp->base, params);
    tp->listen_poll.kind = TCP_POLL_LISTEN;
    tp->wake_poll.kind = TCP_POLL_WAKE;
    tp->timeout_ms = params && params->progress_timeout_ms ? params->progress_timeout_ms
                                                           : TCP_DEFAULT_TIMEOUT_MS;
    tp->max_msg_size = params && params->max_msg_size ? params->max_msg_size
                                                      : TCP_DEFAULT_MAX_MSG;
    tp->stage_bytes = cfg && (cfg->field_mask & PDX_CONFIG_FIELD_TCP_STAGING) &&
                              cfg->tcp_staging_bytes ? cfg->tcp_staging_bytes
                                                     : TCP_DEFAULT_STAGING;
    tp->stage_bytes = PDX_MAX(tp->stage_bytes, TCP_STAGING_MIN);
    tp->copier = tcp_copier_current();
    tp->device = -1;
    if (params && params->cpus) {
        tp->bind = true;
        tp->cpus = *params->cpus;
    }
    atomic_init(&tp->staging, false);
    status = PDX_ERR_IO;
    if (pthread_mutex_init(&tp->cmd_lock, NULL) || pthread_mutex_init(&tp->obj_lock, NULL) ||
        pthread_mutex_init(&tp->stage_lock, NULL) || pthread_condattr_init(&cattr)) {
        pdx_error("tcp: cannot create locks");
        goto err_free;
    }
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    if (pthread_cond_init(&tp->cmd_cond, &cattr)) {
        pthread_condattr_destroy(&cattr);
        pdx_error("tcp: cannot create a condition variable");
        goto err_locks;
    }
    pthread_condattr_destroy(&cattr);
    status = tcp_mr_table_init(&tp->mrs);
    if (status != PDX_OK)
        goto err_cond;
    status = tp_listen(tp, host, params ? params->advertise : NULL);
    if (status != PDX_OK)
        goto err_mrs;
    status = PDX_ERR_IO;
    tp->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (tp->epfd < 0) {
        pdx_error("tcp: epoll_create1: %s", strerror(errno));
        goto err_listen;
    }
    tp->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (tp->wake_fd < 0) {
        pdx_error("tcp: eventfd: %s", strerror(errno));
        goto err_epoll;
    }
    if (tcp_poll_add(tp, tp->listen_fd, &tp->listen_poll, EPOLLIN) != PDX_OK ||
        tcp_poll_add(tp, tp->wake_fd, &tp->wake_poll, EPOLLIN) != PDX_OK)
        goto err_wake;
    status = tp_start(tp);
    if (status != PDX_OK)
        goto err_wake;
    pdx_debug("tcp: transport listening on %s", tp->name);
    *tp_p = &tp->base;
    return PDX_OK;

err_wake:
    close(tp->wake_fd);
err_epoll:
    close(tp->epfd);
err_listen:
    close(tp->listen_fd);
err_mrs:
    tcp_mr_table_fini(&tp->mrs);
err_cond:
    pthread_cond_destroy(&tp->cmd_cond);
err_locks:
    pthread_mutex_destroy(&tp->stage_lock);
    pthread_mutex_destroy(&tp->obj_lock);
    pthread_mutex_destroy(&tp->cmd_lock);
err_free:
    free(tp);
    return status;
}

static void tcp_close(pdx_tp_t *ptp)
{
    char what[64 + 40];
    tcp_tp_t *tp;

    if (!ptp)
        return;
    tp = tcp_tp(ptp);
    atomic_store(&tp->stop, true);
    tp_wake(tp);
    snprintf(what, sizeof(what), "tcp: %s: the progress thread", tp->name);
    /* Freeing under a running thread would be worse than the leak. */
    if (pdx_thread_join(tp->thread, TCP_JOIN_MS, what))
        tp_free(tp);
}

const pdx_transport_ops_t pdx_tcp_ops = {
    .name          = "tcp",
    .open          = tcp_open,
    .close         = tcp_close,
    .mr_reg        = tcp_mr_reg,
    .mr_reg_dmabuf = pdx_tp_unsupported_mr_reg_dmabuf,
    .mr_dereg      = tcp_mr_dereg,
    .mr_remote     = tcp_mr_remote,
    .cq_create     = tcp_cq_create,
    .cq_destroy    = tcp_cq_destroy,
    .cq_poll       = tcp_cq_poll,
    .cq_arm        = tcp_cq_arm,
    .cq_fd         = tcp_cq_fd,
    .cq_ack        = tcp_cq_ack,
    .ep_create     = tcp_ep_create,
    .ep_address    = tcp_ep_address,
    .ep_connect    = tcp_ep_connect,
    .ep_fail       = tcp_ep_fail,
    .ep_destroy    = tcp_ep_destroy,
    .ep_error      = tcp_ep_error,
    .post_write    = tcp_post_write,
    .post_runs     = tcp_post_runs,
    .post_send     = tcp_post_send,
    .post_recv     = tcp_post_recv,
    .post_read     = tcp_post_read,
    .mr_export     = pdx_tp_unsupported_mr_export,
    .rmr_open      = pdx_tp_unsupported_rmr_open,
    .rmr_close     = pdx_tp_unsupported_rmr_close,
    .post_pages    = pdx_tp_unsupported_post_pages,
};
