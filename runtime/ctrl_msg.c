/*
 * ctrl_msg: what the control thread does with each message from a peer:
 * the handshake, descriptors, reset credits, and handing room messages to
 * room_send.c, room_recv.c and rooms.c. Everything here runs on the
 * control thread (ctrl.c).
 *
 * Handshake, connector C (called pdx_peer_connect) and acceptor A; both
 * engines run this code, the peer's `outgoing` says which side we are.
 * With PDX_AUTH_KEY the key exchange (ctrl_auth.c) comes first and C sends
 * its HELLO once A proved the key; every frame after it is sealed.
 *
 *   C -> A  HELLO                          (pdx_peer_connect)
 *   A -> C  HELLO, MEM, LAYOUT...          (A on HELLO)
 *   C -> A  MEM, LAYOUT..., EP x npairs*qps, READY   (C on HELLO: deps created)
 *   A -> C  EP x npairs*qps, READY         (A on READY: deps created, connected;
 *                                           A is READY)
 *   C: on each EP, connect that dep; on READY, C is READY.
 *
 * npairs = max(both shard counts); qps = lanes x the connector's
 * PDX_QPS_PER_PEER, lanes = max(both NIC counts): endpoint q of a pair is on
 * lane q % lanes, which joins NIC lane % nics of each side. The acceptor
 * holds the EPs until READY, so it learns qps before it sizes its deps
 * (npairs x qps on both sides). A HELLO of another protocol
 * version, or of another transport, is answered with our HELLO and an
 * ERROR (room 0) and fails the peer with PDX_ERR_VERSION (resp.
 * PDX_ERR_UNSUPPORTED), on both sides.
 *
 * The acceptor admits the connector (a peer slot) at its READY; without a
 * free slot it answers an ERROR (PDX_ERR_FULL) instead. Either side admits
 * a new incarnation of an engine it knows (the same address and listener
 * port, another identity) by failing the old one's peer.
 *
 * Any malformed, unknown or out-of-place message fails the peer with
 * PDX_ERR_PROTO, after an ERROR that tells it why. MEM and LAYOUT may come
 * at any time after HELLO. A BYE, at any time, ends the peer as routine.
 */
#include "ctrl.h"
#include "addr.h"
#include "dep.h"
#include "peer.h"
#include "rooms.h"
#include "shard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

void pdx_ctrl_fail(pdx_peer_t *peer, pdx_status_t status, const char *fmt, ...)
{
    pdx_wire_error_t m = {.room = 0, .status = status < 0 ? status : PDX_ERR_PEER};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 16 + PDX_WIRE_REASON_MAX];
    char msg[PDX_ERRMSG_MAX];
    size_t len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(m.message, sizeof(m.message), "%s", msg);
    if (atomic_load(&peer->state) != PDX_PEER_FAILED &&
        pdx_wire_encode_error(&m, frame, sizeof(frame), &len) == PDX_OK)
        pdx_peer_queue_last(peer, frame, len);
    pdx_peer_fail(peer, m.status, "%s", msg);
}

static void out_of_place(pdx_peer_t *peer, pdx_wire_type_t type, const char *when)
{
    pdx_ctrl_fail(peer, PDX_ERR_PROTO, "%s from %s %s", pdx_wire_type_str(type), peer->addr,
                  when);
}

/* A send the handshake needs; false (peer failed) if it did not go out. */
static bool hs_sent(pdx_peer_t *peer, pdx_status_t st, const char *what)
{
    if (st == PDX_OK)
        return true;
    pdx_ctrl_fail(peer, st, "handshake with %s: %s not sent: %s", peer->addr, what,
                  pdx_status_str(st));
    return false;
}

static pdx_status_t send_ready(pdx_peer_t *peer)
{
    uint8_t frame[PDX_WIRE_HEADER_SIZE];
    pdx_status_t st;
    size_t len;

    st = pdx_wire_encode_ready(frame, sizeof(frame), &len);
    if (st == PDX_OK)
        st = pdx_peer_send(peer, frame, len);
    if (st == PDX_OK)
        peer->ready_sent = true;
    return st;
}

static pdx_status_t send_ep(pdx_engine_t *e, pdx_peer_t *peer, const pdx_dep_t *dep)
{
    pdx_wire_ep_t m = {.shard = dep->pair, .index = dep->index};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 16 + PDX_TP_ADDR_MAX];
    pdx_status_t st;
    size_t len;

    e->ops->ep_address(dep->ep, &m.addr);
    st = pdx_wire_encode_ep(&m, frame, sizeof(frame), &len);
    return st == PDX_OK ? pdx_peer_send(peer, frame, len) : st;
}

/* Size peer->deps for npairs x qps (published before any dep is created). */
static bool alloc_deps(pdx_engine_t *e, pdx_peer_t *peer, uint32_t qps)
{
    uint32_t per_shard = (peer->npairs + e->nshards - 1) / e->nshards * qps;
    pdx_dep_t *deps;

    if (qps % peer->lanes) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "%u endpoints per pair from %s do not spread over "
                      "%u NIC lanes", qps, peer->addr, peer->lanes);
        return false;
    }
    if (qps == 0 || qps > PDX_PEER_MAX_QPS || per_shard > PDX_PEER_SHARD_DEPS) {
        pdx_ctrl_fail(peer, PDX_ERR_FULL, "%u pairs x %u endpoints with %s put %u endpoints "
                      "on one of our %u shards; a peer may have %u there", peer->npairs, qps,
                      peer->addr, per_shard, e->nshards, PDX_PEER_SHARD_DEPS);
        return false;
    }
    deps = calloc((size_t)peer->npairs * qps, sizeof(*deps));
    if (!deps) {
        pdx_ctrl_fail(peer, PDX_ERR_NOMEM, "out of memory for %u x %u endpoints of %s",
                      peer->npairs, qps, peer->addr);
        return false;
    }
    peer->qps = qps;
    peer->deps = deps;
    return true;
}

/* Create data endpoint (k, q) on our shard k % nshards; connect it if remote is set. */
static bool make_dep(pdx_engine_t *e, pdx_peer_t *peer, uint32_t k, uint32_t q,
                     const pdx_tp_addr_t *remote)
{
    pdx_dep_t *dep = &peer->deps[k * peer->qps + q];
    pdx_status_t st;

    dep->peer = peer;
    dep->pair = k;
    dep->index = q;
    dep->nic = q % peer->lanes % e->ntps;
    dep->rnic = q % peer->lanes % peer->remote_nics;
    st = pdx_shard_add_dep(&e->shards[k % e->nshards], dep);
    if (st == PDX_OK && remote)
        st = pdx_dep_connect(dep, remote);
    if (st != PDX_OK) {
        pdx_ctrl_fail(peer, st, "data endpoint %u/%u with %s: %s", k, q, peer->addr,
                      pdx_status_str(st));
        return false;
    }
    return hs_sent(peer, send_ep(e, peer, dep), "EP");
}

/* ---------------------------------------------------------------- HELLO */

/*
 * An engine is named by the address its connection comes from and the port
 * it listens on; its incarnation by the identity in its HELLO. A new
 * incarnation replaces the peers of an old one, which may not have noticed
 * its loss yet (a host that rebooted sends no FIN).
 */
static void replace_incarnations(pdx_engine_t *e, pdx_peer_t *peer)
{
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *old = atomic_load_explicit(&e->conns[i], memory_order_acquire);

        if (!old || old == peer || old->remote_shards == 0 ||
            old->remote_port != peer->remote_port || old->remote_id == peer->remote_id ||
            strcmp(old->ip, peer->ip) != 0 ||
            atomic_load_explicit(&old->state, memory_order_acquire) == PDX_PEER_FAILED)
            continue;
        pdx_peer_fail(old, PDX_ERR_PEER, "peer %s was replaced by a new incarnation of its "
                      "engine (%016llx after %016llx)", old->addr,
                      (unsigned long long)peer->remote_id, (unsigned long long)old->remote_id);
    }
}

/* Tell the peer `told` (ERROR, room 0), then fail it with our own words;
 * the acceptor logs them as an error too (a handshake in that fails is
 * otherwise only info). */
static void fail_told(pdx_peer_t *peer, pdx_status_t status, const char *told, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));

static void fail_told(pdx_peer_t *peer, pdx_status_t status, const char *told, const char *fmt,
                      ...)
{
    pdx_wire_error_t m = {.room = 0, .status = status};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 16 + PDX_WIRE_REASON_MAX];
    char ours[PDX_ERRMSG_MAX];
    size_t len;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(ours, sizeof(ours), fmt, ap);
    va_end(ap);
    snprintf(m.message, sizeof(m.message), "%s", told);
    if (pdx_wire_encode_error(&m, frame, sizeof(frame), &len) == PDX_OK)
        pdx_peer_queue_last(peer, frame, len);
    peer->refused_loudly = true; /* one line, an error, on either side */
    pdx_peer_fail(peer, status, "%s", ours);
}

/*
 * A loopback address reaches only its own host: a HELLO over a connection
 * between two hosts is refused, PDX_ERR_INVALID, when either side
 * advertises one (its peer would dial it for the control connection or the
 * data endpoints), with a message on both sides.
 */
static bool loopback_refused(pdx_engine_t *e, pdx_peer_t *peer, const char *host)
{
    bool theirs = pdx_addr_is_loopback(host);
    char told[PDX_WIRE_REASON_MAX + 1];

    if ((!theirs && !pdx_addr_is_loopback(e->host)) || pdx_addr_same_host(peer->fd))
        return false;
    if (theirs) {
        snprintf(told, sizeof(told), "%s, a loopback address, was advertised to it from another "
                 "host: set PDX_LISTEN or PDX_ADVERTISE_ADDR here", host);
        fail_told(peer, PDX_ERR_INVALID, told, "peer %s advertises %s, a loopback address, to a "
                  "peer on another host: set PDX_LISTEN or PDX_ADVERTISE_ADDR there", peer->addr,
                  host);
    } else {
        snprintf(told, sizeof(told), "it advertises %s, a loopback address, to a peer on another "
                 "host: set PDX_LISTEN or PDX_ADVERTISE_ADDR there", e->host);
        fail_told(peer, PDX_ERR_INVALID, told, "advertised as %s, a loopback address, to peer %s "
                  "on another host: set PDX_LISTEN or PDX_ADVERTISE_ADDR", e->host, peer->addr);
    }
    return true;
}

/*
 * Whether WRITEs to peer are GPU copies (ipc): both engines do ipc, they
 * share the host, and this GPU reaches the peer's. PDX_TRANSPORT=ipc
 * refuses a peer that is not direct (false, the peer failed).
 */
static bool direct_peer(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_hello_t *h)
{
    const bool forced = strcmp(e->cfg.transport, "ipc") == 0;
    char why[160];
    bool yes = false;

    if (!e->ipc)
        return false;
    if (!peer->same_host)
        snprintf(why, sizeof(why), "it runs on another host");
    else if (!(h->caps & PDX_WIRE_CAP_IPC))
        snprintf(why, sizeof(why), "it does not copy with a GPU (no GPU, or PDX_TRANSPORT "
                 "tcp or rdma there)");
    else if (pdx_hip_peer_reachable(e->gpu.device, h->gpu, &yes, why, sizeof(why)) != PDX_OK)
        snprintf(why, sizeof(why), "peer access to its GPU %s: %s", h->gpu,
                 pdx_hip_last_error());
    if (yes) {
        pdx_info("peer %s: pages go by GPU copies (ipc): %s", peer->addr, why);
        return true;
    }
    if (forced) {
        pdx_ctrl_fail(peer, PDX_ERR_UNSUPPORTED, "PDX_TRANSPORT=ipc: peer %s cannot be reached "
                      "by GPU copies: %s", peer->addr, why);
        return false;
    }
    pdx_info("peer %s: pages go over %s: %s", peer->addr, e->ops->name, why);
    return false;
}

static void on_hello(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_hello_t *h)
{
    uint64_t id = 0;

    if (h->version != e->protocol_version || strcmp(h->transport, e->ops->name) != 0) {
        bool version = h->version != e->protocol_version;

        if (!peer->outgoing)
            pdx_peer_send_hello(peer, true); /* so it can say what we speak */
        if (version)
            pdx_ctrl_fail(peer, PDX_ERR_VERSION, "peer %s speaks protocol version %u, this "
                          "engine %u", peer->addr, h->version, e->protocol_version);
        else
            pdx_ctrl_fail(peer, PDX_ERR_UNSUPPORTED, "peer %s uses transport %s, this "
                          "engine %s", peer->addr, h->transport, e->ops->name);
        return;
    }
    if (h->nshards == 0 || h->nshards > PDX_PEER_MAX_SHARDS) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "HELLO from %s has %u shards (limit %u)", peer->addr,
                      h->nshards, PDX_PEER_MAX_SHARDS);
        return;
    }
    if (h->nics == 0 || h->nics > PDX_MAX_NICS) {
        pdx_ctrl_fail(peer, PDX_ERR_UNSUPPORTED, "HELLO from %s has %u NICs (limit %u)",
                      peer->addr, h->nics, PDX_MAX_NICS);
        return;
    }
    if (memcmp(h->id, e->id, sizeof(e->id)) == 0) {
        pdx_ctrl_fail(peer, PDX_ERR_INVALID, "%s is this engine itself: a connection to its own "
                      "listener is refused", peer->addr);
        return;
    }
    if (loopback_refused(e, peer, h->host))
        return;
    /* A connection's handshake costs little; a peer's region table comes with its HELLO. */
    if (!peer->mems)
        peer->mems = calloc(PDX_MAX_MEMS, sizeof(*peer->mems));
    if (!peer->mems) {
        pdx_ctrl_fail(peer, PDX_ERR_NOMEM, "out of memory for the regions of %s", peer->addr);
        return;
    }
    for (int i = 7; i >= 0; i--)
        id = id << 8 | h->id[i];
    peer->remote_id = id;
    peer->remote_shards = h->nshards;
    peer->remote_nics = h->nics;
    peer->remote_port = h->port;
    peer->same_host = pdx_host_ids_match(e->host_id, h->host_id);
    peer->direct = direct_peer(e, peer, h);
    if (pdx_peer_failed(peer))
        return;
    peer->npairs = PDX_MAX(e->nshards, h->nshards);
    peer->lanes = PDX_MAX(e->ntps, h->nics);
    pdx_debug("HELLO from %s: engine %016llx on %s%s, %u shards, %u NICs", peer->addr,
              (unsigned long long)id, h->host, peer->same_host ? " (this host)" : "",
              h->nshards, h->nics);

    if (!peer->outgoing) {
        /* Acceptor: answer, then wait for the connector's EPs and READY. */
        if (hs_sent(peer, pdx_peer_send_hello(peer, false), "HELLO"))
            hs_sent(peer, pdx_peer_send_descs(peer), "descriptors");
        return;
    }
    /* Connector: descriptors, one EP per data endpoint, READY. */
    replace_incarnations(e, peer);
    if (!hs_sent(peer, pdx_peer_send_descs(peer), "descriptors") ||
        !alloc_deps(e, peer, e->cfg.qps_per_peer * peer->lanes))
        return;
    for (uint32_t k = 0; k < peer->npairs; k++)
        for (uint32_t q = 0; q < peer->qps; q++)
            if (!make_dep(e, peer, k, q, NULL))
                return;
    hs_sent(peer, send_ready(peer), "READY");
}

/* ------------------------------------------------------------- EP, READY */

/* Acceptor: hold the connector's EPs until its READY says how many. */
static void on_ep_offer(pdx_peer_t *peer, const pdx_wire_ep_t *m)
{
    uint32_t cap = peer->npairs * PDX_PEER_MAX_QPS;

    if (peer->ready_received) {
        out_of_place(peer, PDX_WIRE_EP, "after READY");
        return;
    }
    if (m->shard >= peer->npairs || m->index >= PDX_PEER_MAX_QPS || peer->neps_in == cap) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EP %u/%u from %s outside %u pairs x %u endpoints",
                      m->shard, m->index, peer->addr, peer->npairs, PDX_PEER_MAX_QPS);
        return;
    }
    if (!peer->eps_in) {
        peer->eps_in = malloc((size_t)cap * sizeof(*peer->eps_in));
        if (!peer->eps_in) {
            pdx_ctrl_fail(peer, PDX_ERR_NOMEM, "out of memory for the EPs of %s", peer->addr);
            return;
        }
    }
    peer->eps_in[peer->neps_in++] = *m;
}

/* Acceptor: the connector's EPs are all here: check them, create ours, answer. */
static void on_ready_acceptor(pdx_engine_t *e, pdx_peer_t *peer)
{
    uint32_t qps = 0, n;
    uint8_t *seen;

    if (peer->ready_received) {
        out_of_place(peer, PDX_WIRE_READY, "twice");
        return;
    }
    for (uint32_t i = 0; i < peer->neps_in; i++)
        qps = PDX_MAX(qps, peer->eps_in[i].index + 1);
    n = peer->npairs * qps;
    if (n == 0 || peer->neps_in != n) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "READY from %s after %u EPs for %u pairs x %u "
                      "endpoints", peer->addr, peer->neps_in, peer->npairs, qps);
        return;
    }
    seen = calloc(n, 1);
    if (!seen) {
        pdx_ctrl_fail(peer, PDX_ERR_NOMEM, "out of memory for the EPs of %s", peer->addr);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        const pdx_wire_ep_t *m = &peer->eps_in[i];

        if (seen[m->shard * qps + m->index]++) {
            free(seen);
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EP %u/%u from %s twice", m->shard, m->index,
                          peer->addr);
            return;
        }
    }
    free(seen);
    if (pdx_peer_admit(peer) != PDX_OK) {
        pdx_ctrl_fail(peer, PDX_ERR_FULL, "%s refused %s: all %d peer slots are in use",
                      e->address, peer->addr, PDX_MAX_PEERS);
        return;
    }
    replace_incarnations(e, peer);
    if (!alloc_deps(e, peer, qps))
        return;
    for (uint32_t i = 0; i < n; i++)
        if (!make_dep(e, peer, peer->eps_in[i].shard, peer->eps_in[i].index,
                      &peer->eps_in[i].addr))
            return;
    free(peer->eps_in);
    peer->eps_in = NULL;
    peer->ready_received = true;
    if (!hs_sent(peer, send_ready(peer), "READY"))
        return;
    if (pdx_peer_set_ready(peer))
        pdx_info("peer %s (%u) connected: %u pairs x %u endpoints", peer->addr, peer->id,
                 peer->npairs, peer->qps);
}

/* Connector: the acceptor's address of one of our deps. */
static void on_ep_reply(pdx_peer_t *peer, const pdx_wire_ep_t *m)
{
    pdx_dep_t *dep;
    pdx_status_t st;

    if (!peer->deps || peer->ready_received) {
        out_of_place(peer, PDX_WIRE_EP, peer->deps ? "after READY" : "before our EPs");
        return;
    }
    if (m->shard >= peer->npairs || m->index >= peer->qps) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EP %u/%u from %s outside %u pairs x %u endpoints",
                      m->shard, m->index, peer->addr, peer->npairs, peer->qps);
        return;
    }
    dep = &peer->deps[m->shard * peer->qps + m->index];
    if (atomic_load(&dep->connected)) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EP %u/%u from %s twice", m->shard, m->index,
                      peer->addr);
        return;
    }
    st = pdx_dep_connect(dep, &m->addr);
    if (st != PDX_OK) {
        pdx_ctrl_fail(peer, st, "data endpoint %u/%u with %s: %s", m->shard, m->index,
                      peer->addr, pdx_status_str(st));
        return;
    }
    peer->neps_in++;
}

static void on_ready_connector(pdx_peer_t *peer)
{
    if (!peer->ready_sent || peer->ready_received) {
        out_of_place(peer, PDX_WIRE_READY, peer->ready_received ? "twice" : "before ours");
        return;
    }
    if (peer->neps_in != peer->npairs * peer->qps) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "READY from %s after %u of %u EPs", peer->addr,
                      peer->neps_in, peer->npairs * peer->qps);
        return;
    }
    peer->ready_received = true;
    pdx_peer_set_ready(peer); /* pdx_peer_connect() logs it */
}

/* ------------------------------------------------------------ descriptors */

static bool rkey_equal(const pdx_tp_rkey_t *a, const pdx_tp_rkey_t *b)
{
    return a->addr == b->addr && a->len == b->len && a->rkey == b->rkey &&
           a->npieces == b->npieces && a->piece == b->piece &&
           (a->npieces == 1 || !memcmp(a->rkeys, b->rkeys, a->npieces * sizeof(a->rkeys[0])));
}

static void on_mem(pdx_peer_t *peer, const pdx_wire_mem_t *m)
{
    for (uint32_t i = 0; i < m->count; i++) {
        const pdx_wire_mem_entry_t *ent = &m->entries[i];
        uint64_t piece = atomic_load_explicit(&peer->mem_piece, memory_order_relaxed);
        pdx_remote_mem_t *rm;
        uint32_t *keys = NULL, valid;

        if (ent->mem >= PDX_MAX_MEMS || ent->nic >= peer->remote_nics) {
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "MEM from %s names region %u of NIC %u (limits "
                          "%u, %u)", peer->addr, ent->mem, ent->nic, PDX_MAX_MEMS,
                          peer->remote_nics);
            return;
        }
        rm = &peer->mems[ent->mem];
        valid = atomic_load_explicit(&rm->valid, memory_order_relaxed);
        if (valid >> ent->nic & 1) {
            if (rkey_equal(&rm->rkey[ent->nic], &ent->rkey))
                continue; /* sent twice around our snapshot: the same */
            /* Never replaced: a shard may be reading it without a lock. */
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "memory %u described twice by %s", ent->mem,
                          peer->addr);
            return;
        }
        if (valid) { /* another NIC's key of the region: the same bytes */
            const pdx_tp_rkey_t *other = &rm->rkey[__builtin_ctz(valid)];

            if (other->addr != ent->rkey.addr || other->len != ent->rkey.len) {
                pdx_ctrl_fail(peer, PDX_ERR_PROTO, "memory %u of %s differs between its NICs",
                              ent->mem, peer->addr);
                return;
            }
        }
        if (ent->rkey.npieces > 1) {
            keys = malloc(ent->rkey.npieces * sizeof(*keys));
            if (!keys) {
                pdx_ctrl_fail(peer, PDX_ERR_NOMEM, "out of memory for the %u pieces of "
                              "memory %u of %s", ent->rkey.npieces, ent->mem, peer->addr);
                return;
            }
            memcpy(keys, ent->rkey.rkeys, ent->rkey.npieces * sizeof(*keys));
            /* Shards cut runs at the smallest piece; a region's own is never smaller. */
            if (!piece || ent->rkey.piece < piece)
                atomic_store_explicit(&peer->mem_piece, ent->rkey.piece, memory_order_relaxed);
        }
        free((void *)(uintptr_t)rm->rkey[ent->nic].rkeys);
        rm->rkey[ent->nic] = ent->rkey;
        rm->rkey[ent->nic].rkeys = keys;
        atomic_store_explicit(&rm->valid, valid | 1u << ent->nic, memory_order_release);
    }
}

/* A direct peer's region, opened for GPU copies once; one that cannot be
 * opened is written over the inner transport (said once). */
static void on_export(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_export_t *x)
{
    pdx_remote_mem_t *rm;
    pdx_tp_rmr_t *rmr = NULL;
    uint32_t valid;
    pdx_status_t st;

    if (x->mem >= PDX_MAX_MEMS) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EXPORT from %s names region %u (limit %u)",
                      peer->addr, x->mem, PDX_MAX_MEMS);
        return;
    }
    rm = &peer->mems[x->mem];
    valid = atomic_load_explicit(&rm->valid, memory_order_relaxed);
    if (!valid) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "EXPORT from %s of region %u before its MEM",
                      peer->addr, x->mem);
        return;
    }
    if (!peer->direct || atomic_load_explicit(&rm->rmr, memory_order_relaxed))
        return; /* not ours to copy into, or sent twice around our snapshot */
    st = e->ops->rmr_open(e->tps[0], x->bytes, x->len, &rm->rkey[__builtin_ctz(valid)], &rmr);
    if (st != PDX_OK) {
        pdx_warn("peer %s: region %u cannot be opened for GPU copies (%s): its pages go over %s",
                 peer->addr, x->mem, pdx_status_str(st), e->ops->name);
        return;
    }
    atomic_store_explicit(&rm->rmr, rmr, memory_order_release);
}

static bool layout_equal(const pdx_layout_t *a, const pdx_layout_t *b)
{
    if (a->ngroups != b->ngroups || a->layer_begin != b->layer_begin ||
        a->layer_end != b->layer_end)
        return false;
    for (uint32_t g = 0; g < a->ngroups; g++) {
        const pdx_group_t *ga = &a->groups[g], *gb = &b->groups[g];

        if (ga->flags != gb->flags || ga->buffers_per_layer != gb->buffers_per_layer ||
            ga->nbuffers != gb->nbuffers || ga->npages != gb->npages)
            return false;
        for (uint32_t i = 0; i < ga->nbuffers; i++)
            if (ga->buffers[i].mem != gb->buffers[i].mem ||
                ga->buffers[i].offset != gb->buffers[i].offset ||
                ga->buffers[i].bytes_per_page != gb->buffers[i].bytes_per_page)
                return false;
    }
    return true;
}

static void on_layout(pdx_peer_t *peer, pdx_wire_layout_t *m)
{
    pdx_layout_t *old;

    if (m->id >= PDX_MAX_LAYOUTS) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "LAYOUT from %s has id %u (limit %u)", peer->addr,
                      m->id, PDX_MAX_LAYOUTS);
        return;
    }
    old = atomic_load_explicit(&peer->layouts[m->id], memory_order_relaxed);
    if (old) {
        /* Layouts are never replaced: shards may be reading this one. */
        if (!layout_equal(old, m->layout))
            pdx_ctrl_fail(peer, PDX_ERR_PROTO, "LAYOUT %u from %s changed", m->id, peer->addr);
        return;
    }
    atomic_store_explicit(&peer->layouts[m->id], m->layout, memory_order_release);
    m->layout = NULL; /* the peer owns it now */
}

/* ----------------------------------------------------------------- others */

static void on_credit(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_credit_t *m)
{
    pdx_dep_t *dep;

    if (!peer->deps || m->pair >= peer->npairs || m->index >= peer->qps ||
        m->count > PDX_NOTIFY_RQ) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "CREDIT of %u for endpoint %u/%u from %s outside "
                      "%u pairs x %u endpoints", m->count, m->pair, m->index, peer->addr,
                      peer->npairs, peer->qps);
        return;
    }
    dep = &peer->deps[m->pair * peer->qps + m->index];
    /* Only a reset endpoint's peer says so here (its receives are posted);
     * routine credits travel on the endpoint itself (shard_cq.c). */
    if (!pdx_dep_on_credit(e, peer, dep, m))
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "CREDIT from %s for endpoint %u/%u, which is not "
                      "being reset", peer->addr, m->pair, m->index);
}

void pdx_ctrl_on_msg(pdx_engine_t *e, pdx_peer_t *peer, pdx_wire_msg_t *msg)
{
    bool ready = atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_READY;

    if (msg->type == PDX_WIRE_ERROR && msg->u.error.room == 0) {
        if (msg->u.error.status == PDX_ERR_AUTH && !pdx_peer_failed(peer))
            atomic_fetch_add_explicit(&e->stats.auth_refused, 1, memory_order_relaxed);
        pdx_peer_fail(peer, msg->u.error.status, "peer %s reported: %s", peer->addr,
                      msg->u.error.message);
        return;
    }
    if (msg->type == PDX_WIRE_BYE) {
        atomic_store_explicit(&peer->closed, 1, memory_order_release);
        pdx_peer_fail(peer, PDX_ERR_PEER, "%s said goodbye: %s", peer->addr,
                      msg->u.bye.reason);
        return;
    }
    if (msg->type == PDX_WIRE_AUTH) {
        pdx_ctrl_on_auth(e, peer, &msg->u.auth);
        return;
    }
    if (!pdx_ctrl_auth_admits(e, peer, msg))
        return;
    if (peer->remote_shards == 0 && msg->type != PDX_WIRE_HELLO) {
        out_of_place(peer, msg->type, "before HELLO");
        return;
    }
    switch (msg->type) {
    case PDX_WIRE_HELLO:
        if (peer->remote_shards)
            out_of_place(peer, msg->type, "twice");
        else
            on_hello(e, peer, &msg->u.hello);
        return;
    case PDX_WIRE_MEM:
        on_mem(peer, &msg->u.mem);
        return;
    case PDX_WIRE_EXPORT:
        on_export(e, peer, &msg->u.export);
        return;
    case PDX_WIRE_LAYOUT:
        on_layout(peer, &msg->u.layout);
        return;
    case PDX_WIRE_EP:
        if (msg->u.ep.epoch != 0) {
            if (ready)
                pdx_dep_on_ep(e, peer, &msg->u.ep); /* a reset endpoint's new address */
            else
                out_of_place(peer, msg->type, "of a later epoch before READY");
        } else if (peer->outgoing) {
            on_ep_reply(peer, &msg->u.ep);
        } else {
            on_ep_offer(peer, &msg->u.ep);
        }
        return;
    case PDX_WIRE_READY:
        if (peer->outgoing)
            on_ready_connector(peer);
        else
            on_ready_acceptor(e, peer);
        return;
    case PDX_WIRE_HEARTBEAT: /* reading it reset last_heard_ns */
        return;
    case PDX_WIRE_CREDIT:
        on_credit(e, peer, &msg->u.credit);
        return;
    default:
        break;
    }
    if (!ready) {
        out_of_place(peer, msg->type, "before READY");
        return;
    }
    switch (msg->type) {
    case PDX_WIRE_ROOM:
        pdx_rooms_on_room_msg(e, peer, &msg->u.room);
        return;
    case PDX_WIRE_ABORT:
        pdx_rooms_on_abort(e, peer, &msg->u.abort);
        return;
    case PDX_WIRE_ABORT_ACK:
        pdx_rooms_on_abort_ack(e, peer, msg->u.abort_ack.room);
        return;
    case PDX_WIRE_ERROR:
        pdx_rooms_on_error(e, peer, &msg->u.error);
        return;
    case PDX_WIRE_RESET:
        pdx_dep_on_reset(e, peer, &msg->u.reset);
        return;
    default:
        out_of_place(peer, msg->type, "(not a control message)");
        return;
    }
}
