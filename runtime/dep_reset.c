/*
 * Resetting a failed data endpoint and reconnecting it (dep.h).
 *
 * A dep that fails (an error completion, a refused post, an async event
 * surfacing as flushed WRs, or the peer's RESET) while its peer is READY:
 *
 *   1 begin (any thread): failed, DRAINING, not connected (the shard's
 *     index then holds the peer's rooms on this shard back); ep_fail, so
 *     every outstanding WR and receive completes with an error, each WR
 *     failing its own room; RESET(pair, index, epoch) to the peer unless it
 *     asked. The peer does the same on its side.
 *   2 rebuild (the shard, pdx_shard_resets): once every WR and receive of
 *     the old ep completed, destroy it, create a new one on the shard's CQ,
 *     epoch + 1, send EP(epoch) with its address.
 *   3 connect (whichever thread completes the pair: the shard once its EP
 *     went out, or the control thread on the peer's EP): ep_connect, post
 *     the notify receives, CREDIT(epoch, PDX_NOTIFY_RQ) to the peer.
 *   4 up (whichever thread completes the pair: the peer's CREDIT of the
 *     epoch says its receives are posted): notifies may flow: credits,
 *     connected, index rebuilt, the shard woken.
 *
 * Each side sends its RESET before its EP and its EP before its CREDIT on
 * one ordered control connection, so a message of an older epoch is
 * recognised and dropped, and no WRITE reaches a QP the peer has not
 * connected. If the peer fails meanwhile, the reset is abandoned with it.
 *
 * Our steps are dep->reset (pdx_dep_reset_t: DRAINING at 1, REBUILT and
 * OFFERED at 2, CONNECTED at 3, NONE again at 4), the peer's messages
 * dep->peer_reset (its EP, then its CREDIT). Steps 3 and 4 need both: each
 * event records itself and then advance_locked() moves our side on as far as the
 * peer's allows, whichever came first.
 *
 * dep->lock guards the ep pointer against fail_deps (peer.c), every write
 * of both states, and remote and peer_credits; the shard is the only
 * writer of dep->ep after the handshake. Control messages go out after the
 * lock is released (never two locks at once).
 */
#include "shard_loop.h"
#include "peer.h"

#include <stdio.h>

#include "ctrl.h"
#include "log.h"

static pdx_status_t send_reset(pdx_peer_t *peer, const pdx_dep_t *dep, uint32_t epoch,
                               pdx_status_t status, const char *why)
{
    pdx_wire_reset_t m = {.pair = dep->pair, .index = dep->index, .epoch = epoch,
                          .status = status < 0 ? status : PDX_ERR_PEER};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 32 + PDX_WIRE_REASON_MAX];
    pdx_status_t st;
    size_t len;

    snprintf(m.reason, sizeof(m.reason), "%s", why);
    st = pdx_wire_encode_reset(&m, frame, sizeof(frame), &len);
    return st == PDX_OK ? pdx_peer_send(peer, frame, len) : st;
}

/* The EP frame of the dep's new ep (dep->lock held: the ep is stable). */
typedef struct ep_frame {
    uint8_t bytes[PDX_WIRE_HEADER_SIZE + 16 + PDX_TP_ADDR_MAX];
    size_t  len;
} ep_frame_t;

static pdx_status_t encode_ep(const pdx_dep_t *dep, uint32_t epoch, ep_frame_t *f)
{
    pdx_wire_ep_t m = {.shard = dep->pair, .index = dep->index, .epoch = epoch};

    dep->peer->engine->ops->ep_address(dep->ep, &m.addr);
    return pdx_wire_encode_ep(&m, f->bytes, sizeof(f->bytes), &f->len);
}

static bool peer_ready(const pdx_peer_t *peer)
{
    return atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_READY;
}

/* The dep is usable again, or abandoned with its peer: the shard rebuilds its index. */
static void reset_over(pdx_dep_t *dep)
{
    atomic_fetch_sub_explicit(&dep->shard->resets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&dep->shard->deps_gen, 1, memory_order_release);
    pdx_shard_wake(dep->shard);
}

void pdx_dep_reset_begin(pdx_dep_t *dep, pdx_status_t status, const char *why, bool tell_peer)
{
    pdx_peer_t *peer = dep->peer;
    pdx_engine_t *e = peer->engine;
    uint32_t epoch;
    pdx_status_t st;

    if (atomic_load_explicit(&peer->closed, memory_order_acquire)) {
        /* A BYE went one way or the other: the peer is going, on purpose. */
        atomic_store_explicit(&dep->failed, 1, memory_order_release);
        pdx_peer_fail(peer, PDX_ERR_PEER, "data endpoint %u.%u to %s closed: %s", dep->pair,
                      dep->index, peer->addr, why);
        return;
    }
    if (!peer_ready(peer) ||
        atomic_load_explicit(&dep->streak, memory_order_relaxed) >= PDX_DEP_RESET_STREAK) {
        /* In the handshake, failing already, or an endpoint that fails again
         * as soon as it is rebuilt (a port down, say): the peer goes. */
        atomic_store_explicit(&dep->failed, 1, memory_order_release);
        pdx_peer_fail(peer, status, "data endpoint %u.%u to %s failed%s: %s", dep->pair,
                      dep->index, peer->addr,
                      peer_ready(peer) ? " again after each reset" : "", why);
        return;
    }
    pthread_mutex_lock(&dep->lock);
    if (atomic_load_explicit(&dep->reset, memory_order_relaxed) != PDX_DEP_RESET_NONE ||
        !dep->ep) {
        pthread_mutex_unlock(&dep->lock);
        return; /* under way already */
    }
    atomic_store_explicit(&dep->failed, 1, memory_order_release);
    atomic_store_explicit(&dep->reset, PDX_DEP_RESET_DRAINING, memory_order_release);
    atomic_store_explicit(&dep->connected, 0, memory_order_release);
    atomic_fetch_add_explicit(&dep->streak, 1, memory_order_relaxed);
    dep->peer_reset = PDX_PEER_RESET_SILENT;
    epoch = atomic_load_explicit(&dep->epoch, memory_order_relaxed);
    e->ops->ep_fail(dep->ep, status < 0 ? status : PDX_ERR_PEER, why);
    pthread_mutex_unlock(&dep->lock);

    atomic_fetch_add_explicit(&dep->shard->resets, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&dep->shard->deps_gen, 1, memory_order_release);
    pdx_warn("data endpoint %u.%u (epoch %u) to %s failed: %s; resetting it", dep->pair,
             dep->index, epoch, peer->addr, why);
    if (tell_peer) {
        st = send_reset(peer, dep, epoch, status, why);
        if (st != PDX_OK && st != PDX_ERR_PEER)
            pdx_peer_fail(peer, st, "cannot tell %s that data endpoint %u.%u failed: %s",
                          peer->addr, dep->pair, dep->index, pdx_status_str(st));
    }
    pdx_shard_wake(dep->shard);
}

/* Both sides' receives are posted (dep->lock held): the endpoint carries
 * rooms again. */
static void up_locked(pdx_dep_t *dep)
{
    atomic_store_explicit(&dep->credits, (int32_t)dep->peer_credits, memory_order_relaxed);
    dep->peer_reset = PDX_PEER_RESET_SILENT;
    atomic_store_explicit(&dep->failed, 0, memory_order_release);
    atomic_store_explicit(&dep->connected, 1, memory_order_release);
    atomic_store_explicit(&dep->reset, PDX_DEP_RESET_NONE, memory_order_release);
}

/*
 * Our side as far on as the peer's allows (dep->lock held): connect once our
 * EP went out and the peer's came, up once its CREDIT came too. Then,
 * unlocked, advance_done() sends our CREDIT and announces the endpoint.
 */
typedef struct advance {
    bool         credit; /* connected: our CREDIT goes out */
    bool         up;     /* the endpoint carries rooms again */
    uint32_t     epoch;
    pdx_status_t status;
} advance_t;

static advance_t advance_locked(pdx_dep_t *dep)
{
    advance_t a = {.epoch = atomic_load_explicit(&dep->epoch, memory_order_relaxed),
                   .status = PDX_OK};
    uint32_t state = atomic_load_explicit(&dep->reset, memory_order_relaxed);

    if (state == PDX_DEP_RESET_OFFERED && dep->peer_reset >= PDX_PEER_RESET_EP) {
        a.status = pdx_dep_ep_connect(dep, &dep->remote);
        if (a.status != PDX_OK) {
            /* its peer fails (the caller): no second try at the peer's CREDIT */
            atomic_store_explicit(&dep->reset, PDX_DEP_RESET_BROKEN, memory_order_release);
            return a;
        }
        state = PDX_DEP_RESET_CONNECTED;
        atomic_store_explicit(&dep->reset, state, memory_order_release);
        a.credit = true;
    }
    if (state == PDX_DEP_RESET_CONNECTED && dep->peer_reset == PDX_PEER_RESET_UP) {
        up_locked(dep);
        a.up = true;
    }
    return a;
}

static pdx_status_t advance_done(pdx_dep_t *dep, advance_t a)
{
    if (a.status == PDX_OK && a.credit)
        a.status = pdx_peer_send_credit(dep->peer, dep->pair, dep->index, a.epoch,
                                        PDX_NOTIFY_RQ);
    if (a.up) {
        pdx_info("data endpoint %u.%u to %s reconnected (epoch %u)", dep->pair, dep->index,
                 dep->peer->addr, a.epoch);
        reset_over(dep);
    }
    return a.status;
}

/* advance_done() for the control thread's events: a failure fails the peer. */
static void reconnect_done(pdx_dep_t *dep, advance_t a)
{
    pdx_status_t st = advance_done(dep, a);

    if (st != PDX_OK)
        pdx_peer_fail(dep->peer, st, "reconnecting data endpoint %u.%u to %s: %s", dep->pair,
                      dep->index, dep->peer->addr, pdx_status_str(st));
}

/* Shard: the old ep has nothing outstanding; replace it and offer the new one. */
static void rebuild(pdx_shard_loop_t *L, pdx_dep_t *dep)
{
    pdx_engine_t *e = L->e;
    pdx_peer_t *peer = dep->peer;
    const pdx_tp_ep_attr_t attr = {.sq_depth = dep->sq_depth, .rq_depth = PDX_NOTIFY_RQ,
                                   .direct = dep->peer->direct};
    uint32_t epoch = atomic_load_explicit(&dep->epoch, memory_order_relaxed) + 1;
    ep_frame_t f;
    pdx_status_t st;

    pthread_mutex_lock(&dep->lock);
    if (atomic_load_explicit(&dep->reset, memory_order_relaxed) != PDX_DEP_RESET_DRAINING ||
        !dep->ep) {
        pthread_mutex_unlock(&dep->lock);
        return; /* done already: waiting for the peer */
    }
    /* Destroy first: the CQ holds room for the dep's depths once. */
    e->ops->ep_destroy(dep->ep);
    dep->ep = NULL;
    st = e->ops->ep_create(e->tps[dep->nic], dep->cq, &attr, &dep->ep);
    if (st == PDX_OK) {
        atomic_store_explicit(&dep->epoch, epoch, memory_order_release);
        atomic_store_explicit(&dep->credits, 0, memory_order_relaxed);
        dep->reposted = 0;
        atomic_store_explicit(&dep->reset, PDX_DEP_RESET_REBUILT, memory_order_release);
        st = encode_ep(dep, epoch, &f);
    }
    if (st != PDX_OK) /* its peer fails (below) */
        atomic_store_explicit(&dep->reset, PDX_DEP_RESET_BROKEN, memory_order_release);
    pthread_mutex_unlock(&dep->lock);
    /* Sent unlocked (never two locks at once). Our CREDIT must follow our
     * EP: until OFFERED, the control thread only keeps the peer's EP. */
    if (st == PDX_OK)
        st = pdx_peer_send(peer, f.bytes, f.len);
    if (st == PDX_OK) {
        advance_t a;

        pthread_mutex_lock(&dep->lock);
        if (atomic_load_explicit(&dep->reset, memory_order_relaxed) == PDX_DEP_RESET_REBUILT)
            atomic_store_explicit(&dep->reset, PDX_DEP_RESET_OFFERED, memory_order_release);
        a = advance_locked(dep);
        pthread_mutex_unlock(&dep->lock);
        st = advance_done(dep, a);
    }
    if (st != PDX_OK)
        pdx_peer_fail(peer, st, "rebuilding data endpoint %u.%u to %s: %s", dep->pair,
                      dep->index, peer->addr, pdx_status_str(st));
    else
        pdx_info("data endpoint %u.%u to %s rebuilt (epoch %u)", dep->pair, dep->index,
                 peer->addr, epoch);
}

void pdx_shard_resets(pdx_shard_loop_t *L)
{
    pdx_shard_t *s = L->s;
    uint32_t n = atomic_load_explicit(&s->ndeps, memory_order_acquire);

    for (uint32_t i = 0; i < n; i++) {
        pdx_dep_t *dep = atomic_load_explicit(&s->deps[i], memory_order_acquire);

        uint32_t was;

        if (!dep || atomic_load_explicit(&dep->reset, memory_order_acquire) ==
                        PDX_DEP_RESET_NONE)
            continue;
        if (!peer_ready(dep->peer)) {
            /* The peer failed: its deps stay in error; the reset is over. */
            pthread_mutex_lock(&dep->lock);
            was = atomic_load_explicit(&dep->reset, memory_order_relaxed);
            atomic_store_explicit(&dep->reset, PDX_DEP_RESET_NONE, memory_order_release);
            pthread_mutex_unlock(&dep->lock);
            if (was != PDX_DEP_RESET_NONE)
                reset_over(dep);
            continue;
        }
        if (dep->completed != dep->posted ||
            atomic_load_explicit(&dep->rx_out, memory_order_relaxed) != 0)
            continue; /* still draining */
        rebuild(L, dep); /* once per reset: then it waits for the peer */
    }
}

/* ------------------------------------------------------ control thread */

static pdx_dep_t *find_dep(pdx_peer_t *peer, uint32_t pair, uint32_t index, const char *what)
{
    if (!peer->deps || pair >= peer->npairs || index >= peer->qps) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "%s for endpoint %u/%u from %s outside %u pairs x "
                      "%u endpoints", what, pair, index, peer->addr, peer->npairs, peer->qps);
        return NULL;
    }
    return &peer->deps[pair * peer->qps + index];
}

void pdx_dep_on_reset(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_reset_t *m)
{
    pdx_dep_t *dep = find_dep(peer, m->pair, m->index, "RESET");
    char why[PDX_NAME_MAX + PDX_WIRE_REASON_MAX + 16];

    (void)e;
    if (!dep)
        return;
    if (m->epoch != atomic_load_explicit(&dep->epoch, memory_order_acquire)) {
        pdx_debug("RESET of endpoint %u/%u epoch %u from %s: now at epoch %u, dropped",
                  m->pair, m->index, m->epoch, peer->addr, atomic_load(&dep->epoch));
        return;
    }
    snprintf(why, sizeof(why), "%s reset it: %s", peer->addr, m->reason);
    pdx_dep_reset_begin(dep, m->status, why, false);
}

void pdx_dep_on_ep(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_ep_t *m)
{
    pdx_dep_t *dep = find_dep(peer, m->shard, m->index, "EP");
    uint32_t epoch, want, state;
    advance_t a;

    (void)e;
    if (!dep)
        return;
    pthread_mutex_lock(&dep->lock);
    epoch = atomic_load_explicit(&dep->epoch, memory_order_relaxed);
    state = atomic_load_explicit(&dep->reset, memory_order_relaxed);
    want = state >= PDX_DEP_RESET_REBUILT ? epoch : epoch + 1;
    if (state == PDX_DEP_RESET_NONE || m->epoch != want ||
        dep->peer_reset != PDX_PEER_RESET_SILENT) {
        pthread_mutex_unlock(&dep->lock);
        if (m->epoch > want)
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EP %u/%u of epoch %u from %s, expected %u",
                          m->shard, m->index, m->epoch, peer->addr, want);
        return; /* an older epoch: dropped */
    }
    dep->remote = m->addr;
    dep->peer_reset = PDX_PEER_RESET_EP;
    a = advance_locked(dep);
    pthread_mutex_unlock(&dep->lock);
    reconnect_done(dep, a); /* unlocked: never two locks at once */
}

bool pdx_dep_on_credit(pdx_engine_t *e, pdx_peer_t *peer, pdx_dep_t *dep,
                       const pdx_wire_credit_t *m)
{
    advance_t a = {.status = PDX_OK};

    (void)e;
    (void)peer;
    if (m->epoch != atomic_load_explicit(&dep->epoch, memory_order_acquire))
        return true; /* of an older incarnation: dropped */
    if (atomic_load_explicit(&dep->reset, memory_order_acquire) == PDX_DEP_RESET_NONE)
        return false; /* a plain credit */
    pthread_mutex_lock(&dep->lock);
    /* The peer's receives are posted: up now if ours are, else once they are.
     * A CREDIT before its EP, or a second one, is dropped. */
    if (atomic_load_explicit(&dep->reset, memory_order_relaxed) >= PDX_DEP_RESET_REBUILT &&
        dep->peer_reset == PDX_PEER_RESET_EP) {
        dep->peer_reset = PDX_PEER_RESET_UP;
        dep->peer_credits = m->count;
        a = advance_locked(dep);
    }
    pthread_mutex_unlock(&dep->lock);
    reconnect_done(dep, a);
    return true;
}
