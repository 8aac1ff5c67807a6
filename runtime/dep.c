/*
 * dep: a data endpoint's own life: connecting its ep and posting its notify
 * receives, deciding what a failure means (a reset, or its peer's loss),
 * and freeing it. Its place in a shard's table is shard.c's; its reset is
 * dep_reset.c's.
 */
#include "engine.h"
#include "dep.h"
#include "peer.h"
#include "shard.h"

#include <stdio.h>
#include <stdlib.h>

#include "log.h"

pdx_status_t pdx_dep_ep_connect(pdx_dep_t *dep, const pdx_tp_addr_t *remote)
{
    pdx_engine_t *e = dep->shard->engine;
    pdx_status_t status = e->ops->ep_connect(dep->ep, remote);

    if (status != PDX_OK)
        return status; /* the transport said why */
    for (uint32_t i = 0; i < PDX_NOTIFY_RQ; i++) {
        status = e->ops->post_recv(dep->ep, pdx_wr_id_recv(dep, i), dep->rx_mr,
                                   (uint64_t)i * PDX_TP_SEND_MAX, PDX_TP_SEND_MAX);
        if (status != PDX_OK) {
            pdx_error("data endpoint %u.%u to %s: posting notify receive %u of %u: %s",
                      dep->pair, dep->index, dep->peer->addr, i, PDX_NOTIFY_RQ,
                      pdx_status_str(status));
            return status;
        }
        atomic_fetch_add_explicit(&dep->rx_out, 1, memory_order_relaxed);
    }
    return PDX_OK;
}

pdx_status_t pdx_dep_connect(pdx_dep_t *dep, const pdx_tp_addr_t *remote)
{
    pdx_shard_t *s = dep->shard;
    pdx_status_t status;

    if (atomic_load_explicit(&dep->connected, memory_order_relaxed)) {
        pdx_error("data endpoint %u.%u to %s is already connected", dep->pair, dep->index,
                  dep->peer->addr);
        return PDX_ERR_STATE;
    }
    status = pdx_dep_ep_connect(dep, remote);
    if (status != PDX_OK)
        return status;
    /* The peer posted as many for us; CREDIT messages add to it later. */
    atomic_fetch_add_explicit(&dep->credits, PDX_NOTIFY_RQ, memory_order_relaxed);
    atomic_store_explicit(&dep->connected, 1, memory_order_release);
    atomic_fetch_add_explicit(&s->deps_gen, 1, memory_order_release);
    pdx_shard_wake(s); /* rooms may wait for an endpoint to their peer */
    return PDX_OK;
}

void pdx_shard_dep_broken(pdx_dep_t *dep, pdx_status_t status, const char *why)
{
    /* Failed already: being reset, or failed with its peer (peer.c). */
    if (atomic_load_explicit(&dep->failed, memory_order_acquire))
        return;
    if (status == PDX_ERR_PROTO) {
        /* Malformed bytes from the peer: it goes, not only the endpoint. */
        atomic_store_explicit(&dep->failed, 1, memory_order_release);
        pdx_peer_fail(dep->peer, status, "data endpoint %u.%u to %s: %s", dep->pair,
                      dep->index, dep->peer->addr, why);
        return;
    }
    pdx_dep_reset_begin(dep, status, why, true);
}

void pdx_dep_free(pdx_engine_t *e, pdx_dep_t *dep)
{
    pdx_status_t status;

    if (dep->ep)
        e->ops->ep_destroy(dep->ep);
    dep->ep = NULL;
    if (dep->rx_mr) {
        status = e->ops->mr_dereg(dep->rx_mr);
        if (status != PDX_OK)
            pdx_error("data endpoint %u.%u: receive buffers still in use (%s): kept",
                      dep->pair, dep->index, pdx_status_str(status));
        else
            free(dep->rx_buf);
    } else {
        free(dep->rx_buf);
    }
    dep->rx_mr = NULL;
    dep->rx_buf = NULL;
}
