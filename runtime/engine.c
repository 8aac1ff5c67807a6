/*
 * Engine lifecycle, registered memory, layouts and statistics.
 *
 * Create order: config, transport, room table, shards (not started), the
 * control thread (listener bound), then the shard workers. Destroy runs it
 * backwards: no new control messages, a BYE to every peer (and a short wait
 * for each to close its side), every room still in flight failed with a
 * message, workers stopped, endpoints and peers freed, memory deregistered,
 * transport closed.
 */
#include "engine.h"
#include "dep.h"
#include "peer.h"
#include "rooms.h"
#include "verify.h"
#include "shard.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "addr.h"
#include "config.h"
#include "ctrl.h"
#include "log.h"

/* How long a destroyed engine waits for its peers to read its BYE. */
#define ENGINE_BYE_WAIT_MS 1000u

/*
 * PDX_TRANSPORT: rdma opens the RDMA device or fails; auto tries rdma and,
 * when no device is usable, serves over tcp and says why; tcp is tcp, and
 * so is ipc until open_ipc() wraps it. This opens the first NIC;
 * open_nics() the others.
 */
static pdx_status_t open_transport(pdx_engine_t *e, pdx_tp_params_t *params)
{
    const char *name = e->cfg.transport;
    bool want_rdma = strcmp(name, "rdma") == 0;

    if (want_rdma || strcmp(name, "auto") == 0) {
#ifdef PDX_HAVE_RDMA
        pdx_status_t st;

        params->quiet_no_device = !want_rdma;
        st = pdx_rdma_ops.open(params, &e->tps[0]);
        if (st == PDX_OK) {
            e->ops = e->base_ops = &pdx_rdma_ops;
            return PDX_OK;
        }
        if (want_rdma || st != PDX_ERR_NO_DEVICE)
            return st; /* the transport said why */
        pdx_info("PDX_TRANSPORT=auto: no usable RDMA device, using tcp");
#else
        if (want_rdma) {
            pdx_error("PDX_TRANSPORT=rdma: this build has no rdma transport (libibverbs was not "
                      "found when it was built)");
            return PDX_ERR_UNSUPPORTED;
        }
#endif
    }
    e->ops = e->base_ops = &pdx_tcp_ops;
    return e->ops->open(params, &e->tps[0]);
}

/*
 * PDX_TRANSPORT=auto on an engine with a GPU, and ipc: the transport opened
 * becomes ipc over it (transport.h), copying with the GPU to the peers of
 * this host whose GPU this one reaches (chosen per peer at HELLO:
 * ctrl_msg.c). ipc without a GPU or the gather kernel is an error; auto
 * then keeps the transport as it is.
 */
static pdx_status_t open_ipc(pdx_engine_t *e, pdx_tp_params_t *params)
{
    const bool want = strcmp(e->cfg.transport, "ipc") == 0;
    const pdx_transport_ops_t *inner = e->ops;
    pdx_tp_t *tps[PDX_MAX_NICS];
    pdx_hip_identity_t id;
    pdx_status_t st = PDX_OK;
    uint32_t k;

    if (!want && strcmp(e->cfg.transport, "auto") != 0)
        return PDX_OK;
    if (e->gpu.device < 0 || !pdx_hip_gather_supported()) {
        const char *why = e->gpu.device < 0 ? "the engine has no GPU"
                                            : "this build has no gather kernel (built without "
                                              "nvcc or hipcc)";

        if (!want) {
            pdx_debug("no ipc transport: %s", why);
            return PDX_OK;
        }
        pdx_error("PDX_TRANSPORT=ipc: %s", why);
        return PDX_ERR_UNSUPPORTED;
    }
    st = pdx_hip_device_identity(e->gpu.device, &id);
    if (st != PDX_OK)
        return st;
    params->inner = inner;
    params->gpu = e->gpu.device;
    for (k = 0; k < e->ntps && st == PDX_OK; k++)
        st = pdx_ipc_wrap(inner, e->tps[k], params, &tps[k]);
    if (st != PDX_OK) {
        while (--k > 0)
            free(tps[k - 1]); /* a wrapper holds nothing else yet */
        return st;
    }
    for (k = 0; k < e->ntps; k++)
        e->tps[k] = tps[k];
    e->ops = pdx_ipc_ops(inner);
    e->ipc = true;
    snprintf(e->gpu_bus_id, sizeof(e->gpu_bus_id), "%s", id.pci_bus_id);
    pdx_info("ipc: GPU %d (%s) copies to the peers of this host whose GPU it reaches; %s "
             "carries the rest", e->gpu.device, id.pci_bus_id, inner->name);
    return PDX_OK;
}

/* PDX_NICS: one tp per NIC, the first open already. Fewer usable devices
 * than asked for is a warning: the engine serves with those it has. */
static pdx_status_t open_nics(pdx_engine_t *e, pdx_tp_params_t *params)
{
    e->ntps = 1;
    e->mr_piece = e->tps[0]->mr_piece;
    params->quiet_no_device = true;
    for (uint32_t k = 1; k < e->cfg.nics; k++) {
        pdx_status_t st;

        params->nic = k;
        st = e->ops->open(params, &e->tps[k]);
        if (st == PDX_ERR_NO_DEVICE) {
            pdx_warn("PDX_NICS=%u: %u usable %s device%s: serving with %u", e->cfg.nics, k,
                     e->ops->name, k == 1 ? "" : "s", k);
            break;
        }
        if (st != PDX_OK)
            return st; /* the transport said why; close_nics() closes the others */
        e->ntps++;
        if (e->tps[k]->mr_piece && (!e->mr_piece || e->tps[k]->mr_piece < e->mr_piece))
            e->mr_piece = e->tps[k]->mr_piece;
    }
    return PDX_OK;
}

static void close_nics(pdx_engine_t *e)
{
    for (uint32_t k = PDX_MAX_NICS; k-- > 0;)
        if (e->tps[k]) {
            e->ops->close(e->tps[k]);
            e->tps[k] = NULL;
        }
}

/* The host peers dial to reach this engine (addr.h says how it is chosen),
 * and why, for the log line once the listener is up. PDX_LISTEN was
 * checked with the configuration. */
static void pick_host(pdx_engine_t *e, char *why, size_t whylen)
{
    char listen_host[PDX_NAME_MAX];
    uint32_t port;

    if (pdx_addr_split(e->cfg.listen, 0, listen_host, sizeof(listen_host), &port, why,
                       whylen) != PDX_OK)
        listen_host[0] = '\0';
    pdx_addr_advertise(listen_host, e->cfg.advertise_addr, NULL, e->host, sizeof(e->host), why,
                       whylen);
}

/* A room slot's engine data, the first time the slot is used (under the
 * room table's lock, before any thread can find the room). */
static void ext_first_use(void *arg, uint32_t i)
{
    pdx_engine_t *e = arg;

    pthread_mutex_init(&e->ext[i].lock, NULL);
    e->ext[i].head_cell = e->ext[i].tail_cell = UINT32_MAX;
    e->ext[i].aux_mem = -1;
}

static size_t ext_bytes(const pdx_engine_t *e)
{
    return (size_t)e->cfg.rooms * sizeof(*e->ext);
}

static pdx_status_t rooms_init(pdx_engine_t *e)
{
    pdx_status_t st;

    /* Mapped, not committed: a slot costs memory once a room used it. */
    e->ext = pdx_map_zeroed(ext_bytes(e));
    if (!e->ext)
        return PDX_ERR_NOMEM;
    st = pdx_room_table_init(&e->rooms, e->cfg.rooms, ext_first_use, e);
    e->held = calloc(PDX_MAX(e->cfg.held_notifies, 1), sizeof(*e->held));
    if (st != PDX_OK || !e->held) {
        if (st == PDX_OK)
            pdx_room_table_fini(&e->rooms);
        pdx_unmap(e->ext, ext_bytes(e));
        free(e->held);
        return st != PDX_OK ? st : PDX_ERR_NOMEM;
    }
    pthread_mutex_init(&e->held_lock, NULL);
    pdx_map_prefer_node(e->ext, ext_bytes(e), e->mem_node);
    pdx_room_table_prefer_node(&e->rooms, e->mem_node);
    return PDX_OK;
}

static void rooms_fini(pdx_engine_t *e)
{
    for (uint32_t i = 0; i < e->rooms.touched; i++) {
        pdx_room_ext_t *ext = &e->ext[i];

        for (uint32_t d = 0; d < PDX_MAX_DESTS; d++) {
            free(ext->dests[d].pages);
            free(ext->vrecs[d]);
        }
        free(ext->senders);
        free(ext->last_left);
        free(ext->xfer); /* its pins go with the regions */
        pdx_layers_free(e, ext->layers); /* its room failed: its word at its last value */
        pthread_mutex_destroy(&ext->lock);
    }
    pthread_mutex_destroy(&e->held_lock);
    free(e->held);
    pdx_unmap(e->ext, ext_bytes(e));
    pdx_room_table_fini(&e->rooms);
}

/* Fail every room still in flight: the engine is going away. */
static void fail_all_rooms(pdx_engine_t *e)
{
    for (uint32_t i = 0; i < pdx_room_span(&e->rooms); i++) {
        pdx_room_obj_t *obj = &e->rooms.objs[i];
        uint64_t id = atomic_load(&obj->id);
        int32_t state;

        if (pdx_room_read(obj, id, &state) && state != PDX_ROOM_SUCCESS &&
            state != PDX_ROOM_FAILED && pdx_room_fail(obj, PDX_ERR_ABORTED,
                                                      "engine destroyed with the room in flight"))
            atomic_fetch_add(&e->stats.rooms_failed, 1);
    }
}

/* After the stops: true (logged) when a thread did not stop in time. Then
 * nothing it may touch is freed: a leak is better than a use after free. */
static bool threads_left(pdx_engine_t *e)
{
    uint32_t left = 0;

    for (uint32_t i = 0; i < e->nshards; i++)
        left += e->shards[i].running;
    if (pdx_ctrl_running(e))
        left++;
    if (left)
        pdx_error("engine %016llx: %u thread(s) did not stop; its memory is kept",
                  (unsigned long long)e->sender_id, left);
    return left > 0;
}

pdx_status_t pdx_engine_create(const pdx_config_t *cfg, pdx_engine_t **engine_p)
{
    pthread_condattr_t cattr;
    pdx_tp_params_t params;
    pdx_engine_t *e;
    char err[256], why[320], nic_order[512];
    pdx_status_t st;
    uint32_t started = 0;

    if (!engine_p)
        return PDX_ERR_INVALID;
    e = calloc(1, sizeof(*e));
    if (!e)
        return PDX_ERR_NOMEM;
    e->listen_fd = e->ctrl_epfd = e->ctrl_wake_fd = -1;
    st = pdx_config_resolve(cfg, &e->cfg);
    if (st != PDX_OK)
        goto err_free; /* the variable was named when it was parsed */
    st = pdx_config_check(&e->cfg, err, sizeof(err));
    if (st != PDX_OK) {
        pdx_error("%s", err);
        goto err_free;
    }
    pdx_log_set_level(e->cfg.log_level);
    st = pdx_auth_load(&e->cfg, &e->key);
    /* The engine keeps the derived key only. */
    pdx_auth_wipe(e->cfg.auth_key, sizeof(e->cfg.auth_key));
    if (st != PDX_OK)
        goto err_free;
    if (getrandom(e->id, sizeof(e->id), 0) != (ssize_t)sizeof(e->id)) {
        pdx_error("getrandom: %s", strerror(errno));
        st = PDX_ERR_IO;
        goto err_free;
    }
    for (int i = 7; i >= 0; i--)
        e->sender_id = e->sender_id << 8 | e->id[i];
    pick_host(e, why, sizeof(why));
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->peers_lock, NULL);
    pthread_mutex_init(&e->accept_lock, NULL);
    pthread_condattr_init(&cattr);
    pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
    pthread_cond_init(&e->accept_cond, &cattr);
    pthread_condattr_destroy(&cattr);

    st = pdx_engine_place(e, nic_order, sizeof(nic_order));
    if (st != PDX_OK)
        goto err_lock;
    /* The listener first: the engine's address tags every thread's log lines. */
    st = pdx_ctrl_listen(e);
    if (st != PDX_OK)
        goto err_lock;
    pdx_engine_log_tag(e);
    pdx_info("advertised as %s: %s", e->host, why);
    /*
     * tcp's data listener binds what the control listener bound (a wildcard
     * stays one); its endpoint addresses carry the advertised host, the one
     * peers already reach the control listener by. The local address of
     * each peer's control connection would follow that connection's
     * interface on a multi-homed host, but it would have to cross the
     * transport seam with every endpoint (an ep_create attribute or an op
     * of every transport): docs/architecture.md §8.
     */
    params = (pdx_tp_params_t){.host = e->bind_host, .advertise = e->host,
                               .progress_timeout_ms = e->cfg.transfer_timeout_ms,
                               .max_msg_size = e->cfg.max_msg_size, .config = &e->cfg,
                               .log_id = e->sender_id, .log_engine = e->address,
                               .wr_group_mask = PDX_WR_ROOM_MASK << PDX_WR_ROOM_SHIFT};
    params.nic_order = nic_order;
    params.cpus = e->bind ? &e->cpus : NULL;
    st = open_transport(e, &params);
    if (st != PDX_OK)
        goto err_lock;
    st = open_nics(e, &params);
    if (st != PDX_OK)
        goto err_close_tp;
    st = pdx_gpu_open(e);
    if (st != PDX_OK)
        goto err_close_tp;
    st = open_ipc(e, &params);
    if (st != PDX_OK)
        goto err_close_gpu;
    st = pdx_verify_init(e);
    if (st != PDX_OK)
        goto err_close_gpu;
    /* Flush reads: for every decode room with PDX_FLUSH=on, for rooms with
     * GPU destinations with auto where the device needs one (gpu.c). tcp
     * places bytes before its notify. */
    e->flush = (e->ops->caps & PDX_TP_CAP_FLUSH_READ) &&
               (e->cfg.flush == PDX_MODE_ON || (e->gpu.flush && !e->gpu.flush_host));
    if (e->cfg.flush == PDX_MODE_ON && !(e->ops->caps & PDX_TP_CAP_FLUSH_READ))
        pdx_info("PDX_FLUSH=on: the %s transport places bytes before its notify; no flush read",
                 e->ops->name);
    st = rooms_init(e);
    if (st != PDX_OK) {
        pdx_error("PDX_ROOMS=%u, PDX_HELD_NOTIFIES=%u: no memory for the room table (%zu "
                  "bytes of address space and more): lower them", e->cfg.rooms,
                  e->cfg.held_notifies, ext_bytes(e));
        goto err_close_gpu;
    }

    e->nshards = e->cfg.shards;
    e->shards = calloc(e->nshards, sizeof(*e->shards));
    if (!e->shards) {
        st = PDX_ERR_NOMEM;
        goto err_rooms;
    }
    for (uint32_t i = 0; i < e->nshards; i++) {
        st = pdx_shard_init(e, &e->shards[i], i);
        if (st != PDX_OK) {
            while (i-- > 0)
                pdx_shard_fini(&e->shards[i]);
            goto err_free_shards;
        }
    }
    st = pdx_ctrl_start(e);
    if (st != PDX_OK)
        goto err_fini_shards;
    for (; started < e->nshards; started++) {
        st = pdx_shard_start(&e->shards[started]);
        if (st != PDX_OK)
            goto err_stop;
    }
    pdx_info("engine %016llx listening on %s (transport %s, %u NIC%s, %u shards)",
             (unsigned long long)e->sender_id, e->address, e->ops->name, e->ntps,
             e->ntps == 1 ? "" : "s", e->nshards);
    *engine_p = e;
    return PDX_OK;

err_stop:
    while (started-- > 0)
        pdx_shard_stop(&e->shards[started]);
    pdx_ctrl_stop(e);
    if (threads_left(e))
        return st; /* a thread still runs: its engine stays allocated */
err_fini_shards:
    for (uint32_t i = 0; i < e->nshards; i++)
        pdx_shard_fini(&e->shards[i]);
err_free_shards:
    free(e->shards);
err_rooms:
    rooms_fini(e);
err_close_gpu:
    pdx_verify_fini(e);
    pdx_gpu_close(e);
err_close_tp:
    close_nics(e);
err_lock:
    if (e->listen_fd >= 0)
        close(e->listen_fd); /* the control thread never took it */
    pthread_cond_destroy(&e->accept_cond);
    pthread_mutex_destroy(&e->accept_lock);
    pthread_mutex_destroy(&e->peers_lock);
    pthread_mutex_destroy(&e->lock);
err_free:
    pdx_auth_wipe(&e->key, sizeof(e->key));
    free(e);
    return st;
}

void pdx_engine_destroy(pdx_engine_t *e)
{
    if (!e)
        return;
    pdx_engine_log_tag(e);
    pdx_ctrl_stop(e);
    if (!pdx_ctrl_running(e))
        pdx_peer_goodbye_all(e, ENGINE_BYE_WAIT_MS);
    fail_all_rooms(e);
    for (uint32_t i = 0; i < e->nshards; i++)
        pdx_shard_stop(&e->shards[i]);
    if (threads_left(e))
        return;
    for (uint32_t i = 0; i < e->nshards; i++)
        pdx_shard_fini(&e->shards[i]);
    pdx_rooms_drop_peers(e); /* retired peers only rooms held go here */
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load(&e->conns[i]);

        if (peer)
            pdx_peer_destroy(peer);
    }
    for (uint32_t i = 0; i < PDX_MAX_LAYOUTS; i++)
        pdx_layout_free(e->layouts[i]);
    pdx_mem_fini(e);
    close_nics(e);
    rooms_fini(e);
    pdx_verify_fini(e);
    pdx_gpu_close(e);
    free(e->shards);
    pthread_cond_destroy(&e->accept_cond);
    pthread_mutex_destroy(&e->accept_lock);
    pthread_mutex_destroy(&e->peers_lock);
    pthread_mutex_destroy(&e->lock);
    pdx_auth_wipe(&e->key, sizeof(e->key));
    free(e);
    pdx_log_tag(0, NULL);
}

const char *pdx_engine_address(const pdx_engine_t *e)
{
    return e ? e->address : "";
}

const char *pdx_engine_transport(const pdx_engine_t *e)
{
    return e ? e->ops->name : "";
}


/* ------------------------------------------------------------------ layouts */

/* Every buffer's pages must lie inside its registered region. */
static pdx_status_t layout_check_mems(pdx_engine_t *e, const pdx_layout_t *l)
{
    for (uint32_t g = 0; g < l->ngroups; g++) {
        const pdx_group_t *grp = &l->groups[g];

        for (uint32_t b = 0; b < grp->nbuffers; b++) {
            const pdx_buffer_t *buf = &grp->buffers[b];
            uint64_t end = buf->offset + grp->npages * buf->bytes_per_page;

            if (buf->mem >= PDX_MAX_MEMS || !e->mems[buf->mem].used) {
                pdx_error("pdx_layout_create: group %u buffer %u: memory %u is not registered",
                          g, b, buf->mem);
                return PDX_ERR_NOT_FOUND;
            }
            if (end > e->mems[buf->mem].len) {
                pdx_error("pdx_layout_create: group %u buffer %u: %llu pages of %llu bytes at "
                          "offset %llu pass the end of memory %u (%zu bytes)", g, b,
                          (unsigned long long)grp->npages,
                          (unsigned long long)buf->bytes_per_page,
                          (unsigned long long)buf->offset, buf->mem, e->mems[buf->mem].len);
                return PDX_ERR_RANGE;
            }
        }
    }
    return PDX_OK;
}

pdx_status_t pdx_layout_create(pdx_engine_t *e, const pdx_layout_desc_t *desc, uint32_t *layout_p)
{
    pdx_layout_t *layout;
    char err[256];
    pdx_status_t st;
    uint32_t id;

    if (!e || !desc || !layout_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    st = pdx_layout_from_desc(desc, &layout, err, sizeof(err));
    if (st != PDX_OK) {
        pdx_error("pdx_layout_create: %s", err);
        return st;
    }
    pthread_mutex_lock(&e->lock);
    st = layout_check_mems(e, layout);
    if (st == PDX_OK && e->nlayouts == PDX_MAX_LAYOUTS) {
        pdx_error("pdx_layout_create: all %d layouts in use", PDX_MAX_LAYOUTS);
        st = PDX_ERR_FULL;
    }
    if (st != PDX_OK) {
        pthread_mutex_unlock(&e->lock);
        pdx_layout_free(layout);
        return st;
    }
    for (uint32_t g = 0; g < layout->ngroups; g++)
        for (uint32_t b = 0; b < layout->groups[g].nbuffers; b++)
            atomic_fetch_add(&e->mems[layout->groups[g].buffers[b].mem].users, 1);
    id = e->nlayouts++;
    e->layouts[id] = layout;
    pthread_mutex_unlock(&e->lock);
    pdx_peer_broadcast_layout(e, id);
    *layout_p = id;
    return PDX_OK;
}

const pdx_layout_t *pdx_engine_layout(pdx_engine_t *e, uint32_t id)
{
    /* Layouts are never freed before the engine: a reader that got the id
     * after pdx_layout_create returned sees the pointer. */
    return id < PDX_MAX_LAYOUTS ? e->layouts[id] : NULL;
}

/* ------------------------------------------------------------------- stats */

pdx_status_t pdx_engine_stats(pdx_engine_t *e, pdx_stats_t *stats_p)
{
    pdx_stats_t s = {0};

    if (!e || !stats_p)
        return PDX_ERR_INVALID;
    for (uint32_t i = 0; i < e->nshards; i++) {
        const pdx_shard_stats_t *st = &e->shards[i].stats;
        uint32_t hw = atomic_load_explicit(&e->shards[i].ring.high_water, memory_order_relaxed);

        s.bytes_sent += atomic_load_explicit(&st->bytes_sent, memory_order_relaxed);
        s.bytes_direct += atomic_load_explicit(&st->bytes_direct, memory_order_relaxed);
        s.gates_on_gpu += atomic_load_explicit(&st->gates_on_gpu, memory_order_relaxed);
        s.ranges_merged += atomic_load_explicit(&st->ranges_merged, memory_order_relaxed);
        s.gates_waited += atomic_load_explicit(&st->gates_waited, memory_order_relaxed);
        s.gates_foreseen += atomic_load_explicit(&st->gates_foreseen, memory_order_relaxed);
        s.writes_posted += atomic_load_explicit(&st->writes_posted, memory_order_relaxed);
        s.chunks_sent += atomic_load_explicit(&st->chunks_sent, memory_order_relaxed);
        s.notifies_sent += atomic_load_explicit(&st->notifies_sent, memory_order_relaxed);
        s.notifies_received += atomic_load_explicit(&st->notifies_received, memory_order_relaxed);
        s.worker_wakeups += atomic_load_explicit(&st->wakeups, memory_order_relaxed);
        s.ring_high_water = PDX_MAX(s.ring_high_water, hw);
    }
    s.rooms_success = atomic_load_explicit(&e->stats.rooms_success, memory_order_relaxed);
    s.rooms_failed = atomic_load_explicit(&e->stats.rooms_failed, memory_order_relaxed);
    s.send_again = atomic_load_explicit(&e->stats.send_again, memory_order_relaxed);
    s.send_kicks = atomic_load_explicit(&e->stats.send_kicks, memory_order_relaxed);
    s.registrations = atomic_load_explicit(&e->nregs, memory_order_relaxed);
    s.nics = e->ntps;
    pthread_mutex_lock(&e->peers_lock);
    for (uint32_t i = 0; i < PDX_MAX_CONNS; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->conns[i], memory_order_relaxed);

        if (peer && peer->id < PDX_MAX_PEERS)
            s.peers++;
        else if (peer && !peer->outgoing)
            s.handshakes++;
    }
    pthread_mutex_unlock(&e->peers_lock);
    s.peers_retired = atomic_load_explicit(&e->stats.peers_retired, memory_order_relaxed);
    s.handshakes_refused =
        atomic_load_explicit(&e->stats.handshakes_refused, memory_order_relaxed);
    s.auth_refused = atomic_load_explicit(&e->stats.auth_refused, memory_order_relaxed);
    s.rooms_verified = atomic_load_explicit(&e->stats.rooms_verified, memory_order_relaxed);
    s.checksum_mismatches = atomic_load_explicit(&e->stats.checksum_mismatches,
                                                 memory_order_relaxed);
    *stats_p = s;
    return PDX_OK;
}
