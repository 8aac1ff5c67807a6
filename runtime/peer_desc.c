/*
 * peer_desc: what this engine tells its peers about itself: the HELLO, the
 * MEM and LAYOUT snapshot of the handshake, and the regions and layouts
 * made after it (broadcast to every peer that has the snapshot).
 */
#include "ctrl.h"
#include "peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

pdx_status_t pdx_peer_send_hello(pdx_peer_t *peer, bool last)
{
    pdx_engine_t *e = peer->engine;
    pdx_wire_hello_t m = {.version = e->protocol_version, .caps = e->ipc ? PDX_WIRE_CAP_IPC : 0,
                          .nshards = e->nshards, .nics = e->ntps, .port = e->port};
    uint8_t frame[PDX_WIRE_HEADER_SIZE + 64 + PDX_WIRE_HOST_ID_SIZE + PDX_WIRE_HOST_MAX +
                  PDX_WIRE_TRANSPORT_MAX + 2 + PDX_WIRE_GPU_MAX];
    pdx_status_t st;
    size_t len;

    memcpy(m.id, e->id, sizeof(m.id));
    memcpy(m.host_id, e->host_id, sizeof(m.host_id));
    snprintf(m.host, sizeof(m.host), "%s", e->host);
    snprintf(m.transport, sizeof(m.transport), "%s", e->ops->name);
    snprintf(m.gpu, sizeof(m.gpu), "%s", e->gpu_bus_id);
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

/* Under engine->lock: what a direct peer opens region mem with (x->len 0:
 * nothing, host memory say). */
static void export_of(const pdx_engine_t *e, uint32_t mem, pdx_wire_export_t *x)
{
    const pdx_mem_t *m = &e->mems[mem];
    size_t len = 0;

    x->mem = mem;
    x->len = 0;
    if (e->ipc && m->used && m->mr[0] &&
        e->ops->mr_export(m->mr[0], x->bytes, sizeof(x->bytes), &len) == PDX_OK)
        x->len = (uint32_t)len;
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
    pdx_wire_export_t *exports = NULL;
    uint32_t *keys = NULL, count = 0, nkeys = 0, nexports = 0;
    pdx_status_t st = PDX_OK;
    uint8_t *buf;

    /* The control thread's, made once: a handshake need not map megabytes. */
    if (!e->desc_frame)
        e->desc_frame = malloc(PDX_WIRE_MAX_FRAME);
    if (!e->desc_entries)
        e->desc_entries = malloc((size_t)PDX_MAX_MEMS * PDX_MAX_NICS * sizeof(*entries));
    buf = e->desc_frame;
    entries = e->desc_entries;
    if (peer->direct)
        exports = calloc(PDX_MAX_MEMS, sizeof(*exports));
    if (!buf || !entries || (peer->direct && !exports))
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
        if (exports && e->mems[i].used) {
            export_of(e, i, &exports[nexports]);
            nexports += exports[nexports].len > 0;
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
    for (uint32_t i = 0; i < nexports && st == PDX_OK; i++) {
        size_t len;

        st = pdx_wire_encode_export(&exports[i], buf, PDX_WIRE_MAX_FRAME, &len);
        if (st == PDX_OK)
            st = send_desc(peer, buf, len, "export of region", exports[i].mem);
    }
    for (uint32_t i = 0; i < nlayouts && st == PDX_OK; i++)
        st = send_layout(peer, buf, ids[i], layouts[i]);
    free(exports);
    free(keys);
    return st;

err_nomem:
    pdx_error("out of memory for the descriptors of %s", peer->addr);
    free(exports);
    return PDX_ERR_NOMEM;
}

/* A reference to every connection not failed (peers_lock, which is not
 * held with engine->lock). */
static uint32_t hold_conns(pdx_engine_t *e, pdx_peer_t **to)
{
    uint32_t n = 0;

    pthread_mutex_lock(&e->peers_lock);
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_relaxed);

        if (peer && !pdx_peer_failed(peer)) {
            pdx_peer_ref(peer);
            to[n++] = peer;
        }
    }
    pthread_mutex_unlock(&e->peers_lock);
    return n;
}

/* Under engine->lock: keep the held peers that have our descriptors. A peer
 * connected after hold_conns() takes its snapshot after the caller's change. */
static uint32_t keep_desc_peers(pdx_peer_t **to, uint32_t n)
{
    uint32_t kept = 0;

    for (uint32_t i = 0; i < n; i++) {
        if (to[i]->desc_sent)
            to[kept++] = to[i];
        else
            pdx_peer_put(to[i]);
    }
    return kept;
}

static void put_all(pdx_peer_t **to, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        pdx_peer_put(to[i]);
}

void pdx_peer_broadcast_mem(pdx_engine_t *e, uint32_t mem)
{
    uint32_t keys[PDX_MAX_NICS][PDX_TP_PIECES_MAX];
    pdx_wire_mem_entry_t entries[PDX_MAX_NICS];
    uint8_t frame[PDX_WIRE_MEM_ONE_MAX];
    pdx_wire_export_t x;
    pdx_peer_t *to[PDX_MAX_CONNS];
    uint32_t n, nics;
    pdx_status_t st = PDX_OK;
    size_t len;

    if (!e || mem >= PDX_MAX_MEMS)
        return;
    n = hold_conns(e, to);
    pthread_mutex_lock(&e->lock);
    if (!e->mems[mem].used) {
        pthread_mutex_unlock(&e->lock);
        put_all(to, n);
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
    export_of(e, mem, &x);
    n = keep_desc_peers(to, n);
    pthread_mutex_unlock(&e->lock);
    /* A frame per NIC: each fits PDX_WIRE_MEM_ONE_MAX. */
    for (uint32_t nic = 0; nic < nics && n && st == PDX_OK; nic++) {
        st = pdx_wire_encode_mem(&(pdx_wire_mem_t){.count = 1, .entries = &entries[nic]}, frame,
                                 sizeof(frame), &len);
        if (st != PDX_OK) {
            pdx_error("cannot encode region %u for the peers: %s", mem, pdx_status_str(st));
            break;
        }
        for (uint32_t i = 0; i < n; i++)
            send_desc(to[i], frame, len, "region", mem);
    }
    /* then, to direct peers, what opens it */
    if (st == PDX_OK && x.len && pdx_wire_encode_export(&x, frame, sizeof(frame), &len) == PDX_OK)
        for (uint32_t i = 0; i < n; i++)
            if (to[i]->direct)
                send_desc(to[i], frame, len, "export of region", mem);
    put_all(to, n);
}

void pdx_peer_broadcast_layout(pdx_engine_t *e, uint32_t layout)
{
    pdx_peer_t *to[PDX_MAX_CONNS];
    const pdx_layout_t *l;
    uint8_t *buf;
    uint32_t n;

    if (!e || layout >= PDX_MAX_LAYOUTS)
        return;
    n = hold_conns(e, to);
    pthread_mutex_lock(&e->lock);
    l = e->layouts[layout];
    if (!l) {
        pthread_mutex_unlock(&e->lock);
        put_all(to, n);
        return;
    }
    n = keep_desc_peers(to, n);
    pthread_mutex_unlock(&e->lock);
    buf = n ? malloc(PDX_WIRE_MAX_FRAME) : NULL;
    for (uint32_t i = 0; i < n; i++) {
        if (!buf) {
            pdx_peer_fail(to[i], PDX_ERR_NOMEM, "out of memory: layout %u not sent to %s",
                          layout, to[i]->addr);
            continue;
        }
        send_layout(to[i], buf, layout, l);
    }
    free(buf);
    put_all(to, n);
}

