/*
 * ctrl_auth: the key exchange at the start of a control connection between
 * engines with PDX_AUTH_KEY (the exchange and the sealing are in auth.h).
 * Runs on the control thread, but for pdx_ctrl_auth_prepare and
 * pdx_ctrl_auth_start (the connecting thread: the nonce before the control
 * thread watches the socket, AUTH 1 after).
 *
 * Until the peer proved the key, an engine with one acts on nothing it
 * sends but AUTH, an ERROR or a BYE (which end the connection) and tells it
 * nothing but its nonce and proof: no HELLO, no descriptors, no endpoints.
 * Every refusal is PDX_ERR_AUTH on both sides, after an ERROR that says
 * why, and counted (pdx_stats_t.auth_refused). Engines of which one has a
 * key and the other not refuse each other the same way.
 */
#include "ctrl.h"
#include "peer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "log.h"

void pdx_ctrl_auth_fail(pdx_peer_t *peer, const char *fmt, ...)
{
    char msg[PDX_ERRMSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (!pdx_peer_failed(peer))
        atomic_fetch_add_explicit(&peer->engine->stats.auth_refused, 1, memory_order_relaxed);
    pdx_ctrl_fail(peer, PDX_ERR_AUTH, "%s", msg);
}

#define AUTH_FRAME (PDX_WIRE_HEADER_SIZE + 8 + PDX_WIRE_NONCE_SIZE + PDX_WIRE_MAC_SIZE)

static size_t encode_auth(const pdx_peer_t *peer, uint32_t step, const uint8_t *nonce,
                          const uint8_t *mac, uint8_t frame[AUTH_FRAME])
{
    pdx_wire_auth_t m = {.version = peer->engine->protocol_version, .step = step};
    size_t len = 0;

    if (nonce)
        memcpy(m.nonce, nonce, sizeof(m.nonce));
    if (mac)
        memcpy(m.mac, mac, sizeof(m.mac));
    return pdx_wire_encode_auth(&m, frame, AUTH_FRAME, &len) == PDX_OK ? len : 0;
}

static pdx_status_t send_auth(pdx_peer_t *peer, uint32_t step, const uint8_t *nonce,
                              const uint8_t *mac)
{
    uint8_t frame[AUTH_FRAME];
    size_t len = encode_auth(peer, step, nonce, mac, frame);

    return len ? pdx_peer_send(peer, frame, len) : PDX_ERR_INVALID;
}

pdx_status_t pdx_ctrl_auth_prepare(pdx_peer_t *peer)
{
    if (!pdx_auth_nonce(peer->nc, sizeof(peer->nc))) {
        pdx_error("no random bytes for the key exchange with %s", peer->addr);
        return PDX_ERR_IO;
    }
    peer->auth_step = 1;
    return PDX_OK;
}

pdx_status_t pdx_ctrl_auth_start(pdx_peer_t *peer)
{
    return send_auth(peer, 1, peer->nc, NULL);
}

/* Both sides proved the key: after `last` (the connector's AUTH 3; NULL for
 * the acceptor) everything is sealed, both ways. */
static pdx_status_t authed(pdx_peer_t *peer, const void *last, size_t len)
{
    pdx_seal_t seal;
    pdx_status_t st;

    pdx_seal_init(&seal, &peer->engine->key, peer->outgoing, peer->nc, peer->na);
    st = pdx_peer_start_sealing(peer, last, len, &seal);
    pdx_auth_wipe(&seal, sizeof(seal));
    if (st == PDX_OK) {
        peer->authed = true;
        pdx_debug("%s proved the key", peer->addr);
    }
    return st;
}

/* Acceptor: the connector's nonce; answer with ours and our proof. */
static void on_challenge(pdx_peer_t *peer, const pdx_wire_auth_t *m)
{
    uint8_t mac[PDX_AUTH_MAC_BYTES];
    pdx_status_t st;

    memcpy(peer->nc, m->nonce, sizeof(peer->nc));
    if (!pdx_auth_nonce(peer->na, sizeof(peer->na))) {
        pdx_ctrl_fail(peer, PDX_ERR_IO, "no random bytes for the key exchange with %s",
                      peer->addr);
        return;
    }
    pdx_auth_proof(&peer->engine->key, 'A', peer->nc, peer->na, mac);
    peer->auth_step = 2;
    st = send_auth(peer, 2, peer->na, mac);
    if (st != PDX_OK)
        pdx_ctrl_fail(peer, st, "key exchange with %s: AUTH not sent: %s", peer->addr,
                      pdx_status_str(st));
}

/* Connector: the acceptor's nonce and proof; if it holds, ours, then HELLO. */
static void on_answer(pdx_peer_t *peer, const pdx_wire_auth_t *m)
{
    uint8_t mac[PDX_AUTH_MAC_BYTES], frame[AUTH_FRAME];
    pdx_status_t st;
    size_t len;

    memcpy(peer->na, m->nonce, sizeof(peer->na));
    if (!pdx_auth_check(&peer->engine->key, 'A', peer->nc, peer->na, m->mac)) {
        pdx_ctrl_auth_fail(peer, "%s did not prove the key: PDX_AUTH_KEY differs there",
                           peer->addr);
        return;
    }
    pdx_auth_proof(&peer->engine->key, 'C', peer->nc, peer->na, mac);
    peer->auth_step = 3;
    len = encode_auth(peer, 3, NULL, mac, frame);
    st = len ? authed(peer, frame, len) : PDX_ERR_INVALID;
    if (st == PDX_OK)
        st = pdx_peer_send_hello(peer, false);
    if (st != PDX_OK)
        pdx_ctrl_fail(peer, st, "handshake with %s: not sent: %s", peer->addr,
                      pdx_status_str(st));
}

/* Acceptor: the connector's proof. */
static void on_proof(pdx_peer_t *peer, const pdx_wire_auth_t *m)
{
    if (!pdx_auth_check(&peer->engine->key, 'C', peer->nc, peer->na, m->mac)) {
        pdx_ctrl_auth_fail(peer, "%s did not prove the key: PDX_AUTH_KEY differs there",
                           peer->addr);
        return;
    }
    peer->auth_step = 3;
    if (authed(peer, NULL, 0) != PDX_OK)
        pdx_ctrl_fail(peer, PDX_ERR_PEER, "key exchange with %s: cannot seal", peer->addr);
}

void pdx_ctrl_on_auth(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_auth_t *m)
{
    /* the step this side takes next: acceptor 1 then 3, connector 2 */
    uint32_t want = peer->outgoing ? 2 : peer->auth_step == 0 ? 1 : 3;

    if (!e->key.set) {
        pdx_ctrl_auth_fail(peer, "%s offers a key exchange, but this engine has no "
                           "PDX_AUTH_KEY", peer->addr);
        return;
    }
    if (m->version != e->protocol_version) {
        pdx_ctrl_fail(peer, PDX_ERR_VERSION, "peer %s speaks protocol version %u, this "
                      "engine %u", peer->addr, m->version, e->protocol_version);
        return;
    }
    if (peer->authed || m->step != want || (peer->outgoing && peer->auth_step != 1) ||
        (!peer->outgoing && want == 3 && peer->auth_step != 2)) {
        pdx_ctrl_fail(peer, PDX_ERR_PROTO, "AUTH step %u from %s out of place", m->step,
                      peer->addr);
        return;
    }
    if (m->step == 1)
        on_challenge(peer, m);
    else if (m->step == 2)
        on_answer(peer, m);
    else
        on_proof(peer, m);
}

bool pdx_ctrl_auth_admits(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_msg_t *msg)
{
    if (!e->key.set || peer->authed || msg->type == PDX_WIRE_BYE ||
        (msg->type == PDX_WIRE_ERROR && msg->u.error.room == 0))
        return true;
    pdx_ctrl_auth_fail(peer, "%s sent %s before proving the key (this engine has "
                       "PDX_AUTH_KEY)", peer->addr, pdx_wire_type_str(msg->type));
    return false;
}
