/*
 * Internal to the control channel: peer.c (peer objects, output, failure,
 * pdx_peer_connect), ctrl.c (the control thread, listener, input framing,
 * sweep) and ctrl_msg.c (handshake and message dispatch). The rest of the
 * engine uses the interface in engine.h.
 */
#ifndef PDX_CTRL_H
#define PDX_CTRL_H

#include <sys/socket.h>

#include "engine.h"

/* Endpoints per (pair, peer) that a peer may ask for: the PDX_QPS_PER_PEER
 * bound times the most lanes (PDX_PEER_SHARD_DEPS bounds them further). */
#define PDX_PEER_MAX_QPS (64u * PDX_MAX_NICS)

/* Shards a peer may have (HELLO nshards): the PDX_SHARDS bound. */
#define PDX_PEER_MAX_SHARDS 64u

/* Data endpoints one peer may have on one shard: an eighth of its table, so
 * one peer never fills it (with npairs <= nshards, every PDX_QPS_PER_PEER fits). */
#define PDX_PEER_SHARD_DEPS (PDX_MAX_PEERS * 8u / 8u)

/* engine->ctrl_stop bit: pdx_ctrl_stop() has begun (ctrl.c owns the others). */
#define PDX_CTRL_STOP 1u

/* ------------------------------------------------------------------ ctrl.c */

/*
 * Wake the control thread. False when it has stopped for good (the caller
 * then does the thread's part itself); true otherwise.
 */
bool pdx_ctrl_kick(pdx_engine_t *e);

/*
 * True while the control thread may run: started and not joined (after
 * pdx_ctrl_stop(), only if its join timed out). Then nothing it uses may
 * be freed.
 */
bool pdx_ctrl_running(pdx_engine_t *e);

/* Watch a new peer's socket (any thread, after the peer is in the table). */
pdx_status_t pdx_ctrl_watch(pdx_engine_t *e, pdx_peer_t *peer);

/* The numeric "host:port" of a socket address. */
void pdx_ctrl_format_addr(const struct sockaddr *sa, char *buf, size_t len);

/* -------------------------------------------------------------- ctrl_msg.c */

/* Handle one decoded frame from a peer (control thread). */
void pdx_ctrl_on_msg(pdx_engine_t *e, pdx_peer_t *peer, pdx_wire_msg_t *msg);

/* Tell the peer why (ERROR, room 0, best effort), then fail it. */
void pdx_ctrl_fail(pdx_peer_t *peer, pdx_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ------------------------------------------------------------------ peer.c */

/*
 * A connected socket as a new peer in HELLO, in a free slot of the
 * connection table: one we dialled (outgoing) is admitted at once (a peer
 * slot, its handle); one that connected in holds no peer slot until its
 * READY (pdx_peer_admit). The caller gets the table's reference and one
 * of its own (pdx_peer_put it). The socket is the peer's from PDX_OK on; on
 * failure (the tables are full: PDX_ERR_FULL, logged) the caller still
 * owns it.
 */
pdx_status_t pdx_peer_open(pdx_engine_t *e, int fd, bool outgoing, const char *addr,
                           pdx_peer_t **peer_p);

/* A peer that connected in takes a peer slot (control thread, at its
 * READY): PDX_ERR_FULL when every slot is in use. */
pdx_status_t pdx_peer_admit(pdx_peer_t *peer);

/* Connections in from peers not admitted yet (handshakes in progress), in
 * all and from `ip`. */
uint32_t pdx_peer_handshakes(pdx_engine_t *e, const char *ip, uint32_t *from_ip_p);

/* True once nothing refers to the FAILED peer but rooms and held notifies:
 * its socket is closed, every shard dropped its endpoints, its rooms were
 * told. pdx_peer_retire() then frees its slots (control thread). */
bool pdx_peer_retirable(pdx_peer_t *peer);
void pdx_peer_retire(pdx_peer_t *peer);

/* Queue a BYE with `reason` and mark the loss routine (closed); the peer is
 * failed by the caller, or by the other side's close. */
void pdx_peer_say_bye(pdx_peer_t *peer, const char *reason);

/* Why we said BYE to the peer, or NULL. */
const char *pdx_peer_bye_reason(pdx_peer_t *peer);

/* Engine teardown, the control thread stopped: a BYE to every peer not
 * failed, then wait (at most timeout_ms) for each to close its side. */
void pdx_peer_goodbye_all(pdx_engine_t *e, uint32_t timeout_ms);

/*
 * Once per FAILED peer: push what output the socket takes without waiting,
 * close it, fail every data endpoint with the peer's status, then set
 * peer->reaped (and, if rooms were told it is gone already, call
 * pdx_rooms_peer_fenced). Runs on the control thread, or on any thread once
 * that has stopped. False when the peer was reaped already.
 */
bool pdx_peer_reap(pdx_peer_t *peer);

/* Send what the socket takes now (control thread: EPOLLOUT, sweep). */
void pdx_peer_flush(pdx_peer_t *peer);

/* True while output waits for the socket. */
bool pdx_peer_output_pending(pdx_peer_t *peer);

/* HELLO with the engine's protocol version, identity, shards and transport;
 * `last`: queued like pdx_peer_queue_last() (a refusal: an ERROR follows). */
pdx_status_t pdx_peer_send_hello(pdx_peer_t *peer, bool last);

/*
 * MEM with every registered region, then one LAYOUT per layout. From here on
 * pdx_peer_broadcast_*() send new ones to this peer too. The control thread
 * only (it encodes into the engine's desc_frame).
 */
pdx_status_t pdx_peer_send_descs(pdx_peer_t *peer);

/* Queue a frame even on a FAILED peer (the reap pushes it out); no errors. */
void pdx_peer_queue_last(pdx_peer_t *peer, const void *frame, size_t len);

/* Queue `last` (NULL: none) as the last plaintext frame, then seal every
 * frame after it with `seal` (auth.h): one step under out_lock. */
pdx_status_t pdx_peer_start_sealing(pdx_peer_t *peer, const void *last, size_t len,
                                    const pdx_seal_t *seal);

/*
 * ctrl_auth.c: the key exchange of engines with a key (auth.h).
 * pdx_ctrl_auth_prepare: the connector's nonce, before the control thread
 * watches the socket; pdx_ctrl_auth_start: its AUTH 1 (pdx_peer_connect).
 * pdx_ctrl_on_auth: an AUTH from the peer. pdx_ctrl_auth_admits: whether a
 * message of this type may be acted on yet (false: the peer was failed).
 */
pdx_status_t pdx_ctrl_auth_prepare(pdx_peer_t *peer);
pdx_status_t pdx_ctrl_auth_start(pdx_peer_t *peer);
void pdx_ctrl_on_auth(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_auth_t *m);
bool pdx_ctrl_auth_admits(pdx_engine_t *e, pdx_peer_t *peer, const pdx_wire_msg_t *msg);
/* Fail the peer with PDX_ERR_AUTH (counted), after an ERROR that says why. */
void pdx_ctrl_auth_fail(pdx_peer_t *peer, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* HELLO -> READY and wake pdx_peer_connect(); false if the peer FAILED. */
bool pdx_peer_set_ready(pdx_peer_t *peer);

#endif
