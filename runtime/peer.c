/*
 * peer: one control connection per engine pair: the peer object, its
 * bounded output, failure, and the handshake messages this engine sends.
 * pdx_peer_connect() is in peer_connect.c; the control thread that reads
 * and dispatches is in ctrl.c and ctrl_msg.c.
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
 */
#include "ctrl.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
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
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++)
        for (uint32_t k = 0; k < PDX_MAX_NICS; k++)
            free((void *)(uintptr_t)peer->mems[i].rkey[k].rkeys);
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
    peer->in = malloc(PDX_WIRE_MAX_FRAME);
    peer->out = malloc(PDX_PEER_OUT_MAX);
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

/* A fresh peer in HELLO; the object is not in the table (or a spare). */
static void peer_reset(pdx_peer_t *peer, pdx_engine_t *e, int fd, bool outgoing,
                       const char *addr)
{
    for (uint32_t i = 0; i < PDX_MAX_LAYOUTS; i++)
        pdx_layout_free(atomic_exchange_explicit(&peer->layouts[i], NULL, memory_order_relaxed));
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++) {
        atomic_store_explicit(&peer->mems[i].valid, 0, memory_order_relaxed);
        for (uint32_t k = 0; k < PDX_MAX_NICS; k++)
            free((void *)(uintptr_t)peer->mems[i].rkey[k].rkeys);
        memset(&peer->mems[i].rkey, 0, sizeof(peer->mems[i].rkey));
    }
    atomic_store_explicit(&peer->mem_piece, 0, memory_order_relaxed);
    free(peer->deps);
    free(peer->eps_in);
    peer->engine = e;
    peer->id = UINT32_MAX;
    peer->fd = fd;
    peer->outgoing = outgoing;
    pthread_mutex_lock(&e->accept_lock);
    peer->accepted = false;
    pthread_mutex_unlock(&e->accept_lock);
    atomic_store_explicit(&peer->state, PDX_PEER_HELLO, memory_order_relaxed);
    peer->status = PDX_OK;
    peer->err[0] = '\0';
    snprintf(peer->addr, sizeof(peer->addr), "%s", addr);
    peer->remote_id = 0;
    peer->remote_shards = 0;
    peer->npairs = peer->qps = 0;
    peer->deps = NULL;
    peer->in_len = 0;
    peer->last_heard_ns = pdx_now_ns();
    peer->ready_sent = peer->ready_received = false;
    peer->eps_in = NULL;
    peer->neps_in = 0;
    peer->desc_sent = false;
    peer->out_head = peer->out_len = 0;
    atomic_store_explicit(&peer->reaped, 0, memory_order_relaxed);
    atomic_store_explicit(&peer->fence_steps, 0, memory_order_relaxed);
}

pdx_status_t pdx_peer_open(pdx_engine_t *e, int fd, bool outgoing, const char *addr,
                           pdx_peer_t *reuse, pdx_peer_t **peer_p)
{
    pdx_peer_t *peer = reuse ? reuse : peer_alloc();
    uint32_t id;
    int one = 1;

    if (!peer) {
        pdx_error("out of memory for the control connection with %s", addr);
        return PDX_ERR_NOMEM;
    }
    peer_reset(peer, e, fd, outgoing, addr);
    pthread_mutex_lock(&e->lock);
    for (id = 0; id < PDX_MAX_PEERS; id++)
        if (!atomic_load_explicit(&e->peers[id], memory_order_relaxed))
            break;
    if (id == PDX_MAX_PEERS) {
        pthread_mutex_unlock(&e->lock);
        pdx_error("control connection with %s refused: all %d peer slots are in use", addr,
                  PDX_MAX_PEERS);
        peer->fd = -1; /* the caller's */
        if (!reuse)
            peer_free(peer);
        return PDX_ERR_FULL;
    }
    peer->id = id;
    atomic_store_explicit(&e->peers[id], peer, memory_order_release);
    pthread_mutex_unlock(&e->lock);
    /* Control messages are small and latency-bound. Failing costs only latency. */
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) < 0)
        pdx_debug("control connection with %s: TCP_NODELAY: %s", addr, strerror(errno));
    *peer_p = peer;
    return PDX_OK;
}

pdx_peer_t *pdx_peer_get(pdx_engine_t *e, uint32_t id)
{
    if (!e || id >= PDX_MAX_PEERS)
        return NULL;
    return atomic_load_explicit(&e->peers[id], memory_order_acquire);
}

/* ----------------------------------------------------------------- output */

static bool peer_failed(const pdx_peer_t *peer)
{
    return atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_FAILED;
}

/* Under out_lock: write what the socket takes now. 0, or errno of a dead socket. */
static int flush_locked(pdx_peer_t *peer)
{
    while (peer->out_len > 0) {
        size_t first = PDX_MIN(peer->out_len, (size_t)PDX_PEER_OUT_MAX - peer->out_head);
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
        peer->out_head = (peer->out_head + (size_t)n) % PDX_PEER_OUT_MAX;
        peer->out_len -= (size_t)n;
    }
    peer->out_head = 0;
    return 0;
}

/* Under out_lock, with room checked: copy a frame behind the queued ones. */
static void append_locked(pdx_peer_t *peer, const void *frame, size_t len)
{
    size_t tail = (peer->out_head + peer->out_len) % PDX_PEER_OUT_MAX;
    size_t first = PDX_MIN(len, (size_t)PDX_PEER_OUT_MAX - tail);

    memcpy(peer->out + tail, frame, first);
    memcpy(peer->out, (const uint8_t *)frame + first, len - first);
    peer->out_len += len;
}

pdx_status_t pdx_peer_send(pdx_peer_t *peer, const void *frame, size_t len)
{
    bool was_empty;
    int err = 0;

    if (!peer || !frame || len == 0 || len > PDX_WIRE_MAX_FRAME)
        return PDX_ERR_INVALID;
    pthread_mutex_lock(&peer->out_lock);
    if (peer_failed(peer) || peer->fd < 0) {
        pthread_mutex_unlock(&peer->out_lock);
        return PDX_ERR_PEER;
    }
    if (PDX_PEER_OUT_MAX - peer->out_len < len) {
        pthread_mutex_unlock(&peer->out_lock);
        return PDX_ERR_AGAIN;
    }
    was_empty = peer->out_len == 0;
    append_locked(peer, frame, len);
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
    if (peer->fd >= 0 && PDX_PEER_OUT_MAX - peer->out_len >= len)
        append_locked(peer, frame, len);
    pthread_mutex_unlock(&peer->out_lock);
}

void pdx_peer_flush(pdx_peer_t *peer)
{
    int err = 0;

    pthread_mutex_lock(&peer->out_lock);
    if (peer->fd >= 0 && !peer_failed(peer))
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
        /* What teardown queued (rooms failed with the engine): best effort. */
        pthread_mutex_lock(&peer->out_lock);
        flush_locked(peer);
        pthread_mutex_unlock(&peer->out_lock);
        close_socket(peer->fd);
    }
    if (e && peer->id < PDX_MAX_PEERS && atomic_load(&e->peers[peer->id]) == peer)
        atomic_store(&e->peers[peer->id], NULL);
    peer_free(peer);
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

/* -------------------------------------------------------- our descriptors */

pdx_status_t pdx_peer_send_hello(pdx_peer_t *peer, bool last)
{
    pdx_engine_t *e = peer->engine;
    pdx_wire_hello_t m = {.version = e->protocol_version, .caps = 0, .nshards = e->nshards,
                          .nics = e->ntps};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 64 + PDX_WIRE_HOST_MAX + PDX_WIRE_TRANSPORT_MAX];
    pdx_status_t st;
    size_t len;

    memcpy(m.id, e->id, sizeof(m.id));
    snprintf(m.host, sizeof(m.host), "%s", e->host);
    snprintf(m.transport, sizeof(m.transport), "%s", e->ops->name);
    st = pdx_wire_encode_hello(&m, frame, sizeof(frame), &len);
    if (st != PDX_OK) {
        pdx_error("cannot encode HELLO for %s: %s", peer->addr, pdx_status_str(st));
        return st;
    }
    if (last) {
        pdx_peer_queue_last(peer, frame, len);
        return PDX_OK;
    }
    return pdx_peer_send(peer, frame, len);
}

/* A descriptor the peer must have: a full output is the peer's failure. */
static pdx_status_t send_desc(pdx_peer_t *peer, const void *frame, size_t len, const char *what,
                              uint32_t id)
{
    pdx_status_t st = pdx_peer_send(peer, frame, len);

    if (st == PDX_ERR_AGAIN) {
        pdx_peer_fail(peer, PDX_ERR_PEER, "control output to %s is full (%u bytes queued): "
                      "%s %u not sent", peer->addr, PDX_PEER_OUT_MAX, what, id);
        st = PDX_ERR_PEER;
    }
    return st;
}

static pdx_status_t send_layout(pdx_peer_t *peer, uint8_t *buf, uint32_t id,
                                const pdx_layout_t *layout)
{
    pdx_wire_layout_t m = {.id = id, .layout = (pdx_layout_t *)layout};
    pdx_status_t st;
    size_t len;

    st = pdx_wire_encode_layout(&m, buf, PDX_WIRE_MAX_FRAME, &len);
    if (st != PDX_OK) {
        pdx_error("cannot encode layout %u for %s: %s", id, peer->addr, pdx_status_str(st));
        return st;
    }
    return send_desc(peer, buf, len, "layout", id);
}

pdx_status_t pdx_peer_send_descs(pdx_peer_t *peer)
{
    pdx_engine_t *e = peer->engine;
    const pdx_layout_t *layouts[PDX_MAX_LAYOUTS];
    uint32_t ids[PDX_MAX_LAYOUTS], nlayouts = 0;
    pdx_wire_mem_entry_t *entries;
    uint32_t *keys = NULL, count = 0, nkeys = 0;
    pdx_status_t st = PDX_OK;
    uint8_t *buf;

    buf = malloc(PDX_WIRE_MAX_FRAME);
    entries = calloc((size_t)PDX_MAX_MEMS * PDX_MAX_NICS, sizeof(*entries));
    if (!buf || !entries)
        goto err_nomem;
    /* Regions and layouts added after this snapshot are broadcast to the
     * peer (desc_sent); one added meanwhile may travel twice, which the
     * receiver accepts. Layouts are never freed before the engine. The rkeys
     * of regions in pieces are copied: a region may go once the lock drops. */
    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++)
        for (uint32_t nic = 0; nic < e->ntps; nic++)
            if (e->mems[i].used && e->mems[i].rkey[nic].npieces > 1)
                nkeys += e->mems[i].rkey[nic].npieces;
    if (nkeys && !(keys = malloc(nkeys * sizeof(*keys)))) {
        pthread_mutex_unlock(&e->lock);
        goto err_nomem;
    }
    peer->desc_sent = true;
    nkeys = 0;
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++) {
        for (uint32_t nic = 0; nic < e->ntps && e->mems[i].used; nic++) {
            pdx_tp_rkey_t k = e->mems[i].rkey[nic];

            if (k.npieces > 1) {
                memcpy(keys + nkeys, k.rkeys, k.npieces * sizeof(*keys));
                k.rkeys = keys + nkeys;
                nkeys += k.npieces;
            }
            entries[count++] = (pdx_wire_mem_entry_t){.mem = i, .nic = nic, .rkey = k};
        }
    }
    for (uint32_t i = 0; i < PDX_MAX_LAYOUTS; i++) {
        if (e->layouts[i]) {
            layouts[nlayouts] = e->layouts[i];
            ids[nlayouts++] = i;
        }
    }
    pthread_mutex_unlock(&e->lock);

    /* as many frames as the per-message limits take */
    for (uint32_t at = 0; at < count && st == PDX_OK;) {
        pdx_wire_mem_t mem = {.entries = entries + at};
        uint32_t extra = 0;
        size_t len;

        while (at + mem.count < count && mem.count < PDX_WIRE_MAX_MEMS &&
               extra + entries[at + mem.count].rkey.npieces - 1 <= PDX_WIRE_MAX_MEM_KEYS)
            extra += entries[at + mem.count++].rkey.npieces - 1;
        st = pdx_wire_encode_mem(&mem, buf, PDX_WIRE_MAX_FRAME, &len);
        if (st != PDX_OK)
            pdx_error("cannot encode %u regions for %s: %s", mem.count, peer->addr,
                      pdx_status_str(st));
        else
            st = send_desc(peer, buf, len, "regions", mem.count);
        at += mem.count;
    }
    for (uint32_t i = 0; i < nlayouts && st == PDX_OK; i++)
        st = send_layout(peer, buf, ids[i], layouts[i]);
    free(keys);
    free(entries);
    free(buf);
    return st;

err_nomem:
    pdx_error("out of memory for the descriptors of %s", peer->addr);
    free(entries);
    free(buf);
    return PDX_ERR_NOMEM;
}

/* Under engine->lock: the peers that have our descriptors. */
static uint32_t desc_peers(pdx_engine_t *e, pdx_peer_t **to)
{
    uint32_t n = 0;

    for (uint32_t i = 0; i < PDX_MAX_PEERS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->peers[i], memory_order_relaxed);

        if (peer && peer->desc_sent && !peer_failed(peer))
            to[n++] = peer;
    }
    return n;
}

void pdx_peer_broadcast_mem(pdx_engine_t *e, uint32_t mem)
{
    uint32_t keys[PDX_MAX_NICS][PDX_TP_PIECES_MAX];
    pdx_wire_mem_entry_t entries[PDX_MAX_NICS];
    uint8_t frame[PDX_WIRE_MEM_ONE_MAX];
    pdx_peer_t *to[PDX_MAX_PEERS];
    uint32_t n, nics;
    pdx_status_t st;
    size_t len;

    if (!e || mem >= PDX_MAX_MEMS)
        return;
    pthread_mutex_lock(&e->lock);
    if (!e->mems[mem].used) {
        pthread_mutex_unlock(&e->lock);
        return;
    }
    nics = e->ntps;
    for (uint32_t nic = 0; nic < nics; nic++) {
        pdx_wire_mem_entry_t *ent = &entries[nic];

        *ent = (pdx_wire_mem_entry_t){.mem = mem, .nic = nic, .rkey = e->mems[mem].rkey[nic]};
        if (ent->rkey.npieces > 1) { /* copied: the region may go once the lock drops */
            memcpy(keys[nic], ent->rkey.rkeys, ent->rkey.npieces * sizeof(keys[0][0]));
            ent->rkey.rkeys = keys[nic];
        }
    }
    n = desc_peers(e, to);
    pthread_mutex_unlock(&e->lock);
    /* A frame per NIC: each fits PDX_WIRE_MEM_ONE_MAX. */
    for (uint32_t nic = 0; nic < nics && n; nic++) {
        st = pdx_wire_encode_mem(&(pdx_wire_mem_t){.count = 1, .entries = &entries[nic]}, frame,
                                 sizeof(frame), &len);
        if (st != PDX_OK) {
            pdx_error("cannot encode region %u for the peers: %s", mem, pdx_status_str(st));
            return;
        }
        for (uint32_t i = 0; i < n; i++)
            send_desc(to[i], frame, len, "region", mem);
    }
}

void pdx_peer_broadcast_layout(pdx_engine_t *e, uint32_t layout)
{
    pdx_peer_t *to[PDX_MAX_PEERS];
    const pdx_layout_t *l;
    uint8_t *buf;
    uint32_t n;

    if (!e || layout >= PDX_MAX_LAYOUTS)
        return;
    pthread_mutex_lock(&e->lock);
    l = e->layouts[layout];
    n = l ? desc_peers(e, to) : 0;
    pthread_mutex_unlock(&e->lock);
    if (n == 0)
        return;
    buf = malloc(PDX_WIRE_MAX_FRAME);
    for (uint32_t i = 0; i < n; i++) {
        if (!buf) {
            pdx_peer_fail(to[i], PDX_ERR_NOMEM, "out of memory: layout %u not sent to %s",
                          layout, to[i]->addr);
            continue;
        }
        send_layout(to[i], buf, layout, l);
    }
    free(buf);
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
    if (atomic_fetch_add_explicit(&peer->fence_steps, 1, memory_order_acq_rel) == 1)
        pdx_rooms_peer_fenced(peer->engine, peer);
}

bool pdx_peer_reap(pdx_peer_t *peer)
{
    int fd;

    pthread_mutex_lock(&peer->out_lock);
    fd = peer->fd;
    if (fd >= 0) {
        flush_locked(peer); /* a last ERROR, best effort */
        peer->fd = -1;
        peer->out_head = peer->out_len = 0;
    }
    pthread_mutex_unlock(&peer->out_lock);
    if (fd < 0)
        return false;
    close_socket(fd);
    fail_deps(peer);
    /* Nothing of the peer lands here any more: its decode rooms are fenced. */
    atomic_store_explicit(&peer->reaped, 1, memory_order_release);
    fence_step(peer);
    return true;
}

void pdx_peer_fail(pdx_peer_t *peer, pdx_status_t status, const char *fmt, ...)
{
    pdx_log_level_t level = PDX_LOG_ERROR;
    char msg[PDX_ERRMSG_MAX];
    pdx_engine_t *e;
    va_list ap;
    int old;

    if (!peer || peer_failed(peer))
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
    atomic_store(&peer->state, PDX_PEER_FAILED); /* seq_cst: pairs with pdx_ctrl_stop */
    pthread_cond_broadcast(&peer->wait_cond);
    pthread_mutex_unlock(&peer->wait_lock);

    /* A peer leaving is expected now and then; a probe that never said HELLO
     * is routine. Protocol and version errors are errors. */
    if (status == PDX_ERR_PEER || status == PDX_ERR_TIMEOUT)
        level = old == PDX_PEER_HELLO && !peer->outgoing ? PDX_LOG_INFO : PDX_LOG_WARN;
    pdx_log(level, "peer %s (%u) failed: %s (%s)", peer->addr, peer->id, msg,
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
