/*
 * Engine and memory descriptors (pdx.h): bytes another engine receives by a
 * side channel, little-endian, with wire_buf.h's reader and writer.
 *
 *   engine  "PDXE" | version u16 | 0 u16 | id u64 | port u32 | host len u8 | host
 *   memory  "PDXM" | version u16 | flags u16 | engine id u64 | mem u32 | nics u32 |
 *           len u64 | per NIC: address u64, key u32
 *
 * A memory descriptor's per-NIC address and key are those of the region's
 * first piece on that NIC: the peer that holds the region's table from the
 * handshake can tell a descriptor of the same registration from one of a
 * region deregistered since, whose id a newer region took.
 *
 * Decoding takes any bytes: every length is checked before it is read, the
 * host must be printable and end the descriptor, and nothing is trusted
 * beyond what it says about itself.
 */
#include "engine.h"
#include "mem.h"
#include "peer.h"
#include "wire_buf.h"

#include <stdio.h>
#include <string.h>

#include "log.h"

#define DESC_VERSION     1u
#define ENGINE_MAGIC     0x45584450u /* "PDXE" */
#define MEM_MAGIC        0x4d584450u /* "PDXM" */
#define ENGINE_FIXED     (4u + 2u + 2u + 8u + 4u + 1u)
#define MEM_FIXED        (4u + 2u + 2u + 8u + 4u + 4u + 8u)
#define MEM_PER_NIC      (8u + 4u)

_Static_assert(ENGINE_FIXED + PDX_WIRE_HOST_MAX <= PDX_ENGINE_DESC_MAX, "engine descriptor");
_Static_assert(MEM_FIXED + PDX_MAX_NICS * MEM_PER_NIC <= PDX_MEM_DESC_MAX, "memory descriptor");

/* The reader of a descriptor after its magic and version (out: where the
 * caller puts what it reads); PDX_OK or why not. */
static pdx_status_t desc_open(pdx_wire_rd_t *r, const void *desc, size_t len, const void *out,
                              uint32_t magic, const char *what)
{
    uint32_t got_magic;
    uint16_t version;

    if (!desc || !out)
        return PDX_ERR_INVALID;
    *r = (pdx_wire_rd_t){.p = desc, .len = len};
    got_magic = pdx_wire_rd_u32(r);
    version = pdx_wire_rd_u16(r);
    if (r->short_read || got_magic != magic) {
        pdx_error("%zu bytes that are not %s descriptor", len, what);
        return PDX_ERR_PROTO;
    }
    if (version != DESC_VERSION) {
        pdx_error("%s descriptor of version %u; this pdx reads version %u", what, version,
                  DESC_VERSION);
        return PDX_ERR_VERSION;
    }
    return PDX_OK;
}

typedef void desc_body_fn(pdx_wire_wr_t *w, const void *arg);

/* Measure the descriptor body writes; write it where it fits in cap. */
static pdx_status_t desc_write(desc_body_fn *body, const void *arg, void *buf, size_t cap,
                               size_t *len_p, const char *what)
{
    pdx_wire_wr_t w = {0};

    body(&w, arg);
    *len_p = w.off;
    if (w.off > cap) {
        pdx_error("%s descriptor of %zu bytes: the buffer holds %zu", what, w.off, cap);
        return PDX_ERR_RANGE;
    }
    w = (pdx_wire_wr_t){.p = buf};
    body(&w, arg);
    return PDX_OK;
}

/* ---------------------------------------------------------------- engine */

static void engine_body(pdx_wire_wr_t *w, const void *arg)
{
    const pdx_engine_t *e = arg;
    const size_t host_len = strnlen(e->host, PDX_WIRE_HOST_MAX);

    pdx_wire_wr_u32(w, ENGINE_MAGIC);
    pdx_wire_wr_u16(w, DESC_VERSION);
    pdx_wire_wr_u16(w, 0);
    pdx_wire_wr_u64(w, e->sender_id);
    pdx_wire_wr_u32(w, e->port);
    pdx_wire_wr_uint(w, 1, host_len);
    pdx_wire_wr_bytes(w, e->host, host_len);
}

pdx_status_t pdx_engine_desc(const pdx_engine_t *e, void *buf, size_t cap, size_t *len_p)
{
    if (!e || !len_p || (!buf && cap))
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    return desc_write(engine_body, e, buf, cap, len_p, "an engine");
}

pdx_status_t pdx_engine_desc_info(const void *desc, size_t len, pdx_engine_desc_info_t *info_p)
{
    pdx_engine_desc_info_t info = {0};
    pdx_wire_rd_t r;
    size_t host_len;
    pdx_status_t st;

    st = desc_open(&r, desc, len, info_p, ENGINE_MAGIC, "an engine");
    if (st != PDX_OK)
        return st;
    (void)pdx_wire_rd_u16(&r);
    info.id = pdx_wire_rd_u64(&r);
    info.port = pdx_wire_rd_u32(&r);
    host_len = (size_t)pdx_wire_rd_uint(&r, 1);
    if (r.short_read || host_len == 0 || host_len > PDX_WIRE_HOST_MAX ||
        host_len != pdx_wire_rd_left(&r) || info.port == 0 || info.port > 65535) {
        pdx_error("malformed engine descriptor of %zu bytes (port %u, host of %zu bytes)", len,
                  info.port, host_len);
        return PDX_ERR_PROTO;
    }
    pdx_wire_rd_bytes(&r, info.host, host_len);
    for (size_t i = 0; i < host_len; i++)
        if (info.host[i] <= ' ' || info.host[i] > '~') {
            pdx_error("malformed engine descriptor: byte %zu of its host is 0x%02x", i,
                      (unsigned)(uint8_t)info.host[i]);
            return PDX_ERR_PROTO;
        }
    *info_p = info;
    return PDX_OK;
}

pdx_peer_t *pdx_desc_peer(pdx_engine_t *e, uint64_t id)
{
    pdx_peer_t *found = NULL;

    pthread_mutex_lock(&e->peers_lock);
    for (uint32_t i = 0; i < PDX_MAX_PEERS && !found; i++) {
        pdx_peer_t *peer = atomic_load_explicit(&e->peers[i], memory_order_relaxed);

        if (peer && peer->remote_id == id &&
            atomic_load_explicit(&peer->state, memory_order_acquire) == PDX_PEER_READY) {
            found = peer;
            pdx_peer_ref(found); /* the slot's reference keeps it until here */
        }
    }
    pthread_mutex_unlock(&e->peers_lock);
    return found;
}

/* The READY peer whose engine is `id`, by handle; 0: none. */
static uint32_t peer_of_engine(pdx_engine_t *e, uint64_t id)
{
    pdx_peer_t *peer = pdx_desc_peer(e, id);
    uint32_t handle = peer ? peer->handle : 0;

    pdx_peer_put(peer);
    return handle;
}

pdx_status_t pdx_peer_connect_desc(pdx_engine_t *e, const void *desc, size_t len, int timeout_ms,
                                   uint32_t *peer_p)
{
    pdx_engine_desc_info_t info;
    char addr[PDX_NAME_MAX + 16];
    uint32_t handle;
    pdx_peer_t *peer;
    uint64_t got;
    pdx_status_t st;

    if (!e || !peer_p)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    st = pdx_engine_desc_info(desc, len, &info);
    if (st != PDX_OK)
        return st;
    if (info.id == e->sender_id) {
        pdx_error("pdx_peer_connect_desc: the descriptor names this engine");
        return PDX_ERR_INVALID;
    }
    handle = peer_of_engine(e, info.id);
    if (handle) {
        *peer_p = handle;
        return PDX_OK;
    }
    snprintf(addr, sizeof(addr), strchr(info.host, ':') ? "[%s]:%u" : "%s:%u", info.host,
             info.port);
    st = pdx_peer_connect(e, addr, timeout_ms, &handle);
    if (st != PDX_OK)
        return st;
    peer = pdx_peer_hold(e, handle, NULL);
    got = peer ? peer->remote_id : 0;
    pdx_peer_put(peer);
    if (got != info.id) {
        pdx_error("pdx_peer_connect_desc: the descriptor names engine %016llx, %s is engine "
                  "%016llx: closed again", (unsigned long long)info.id, addr,
                  (unsigned long long)got);
        pdx_peer_close(e, handle);
        return PDX_ERR_PEER;
    }
    *peer_p = handle;
    return PDX_OK;
}

/* ---------------------------------------------------------------- memory */

typedef struct mem_arg {
    const pdx_engine_t *e;
    uint32_t            id;
    const pdx_mem_t    *m;
} mem_arg_t;

static void mem_body(pdx_wire_wr_t *w, const void *arg)
{
    const mem_arg_t *a = arg;
    const pdx_engine_t *e = a->e;
    const pdx_mem_t *m = a->m;

    pdx_wire_wr_u32(w, MEM_MAGIC);
    pdx_wire_wr_u16(w, DESC_VERSION);
    pdx_wire_wr_u16(w, m->reg && m->reg->gpu ? PDX_MEM_DESC_GPU : 0);
    pdx_wire_wr_u64(w, e->sender_id);
    pdx_wire_wr_u32(w, a->id);
    pdx_wire_wr_u32(w, e->ntps);
    pdx_wire_wr_u64(w, m->len);
    for (uint32_t nic = 0; nic < e->ntps; nic++) {
        pdx_wire_wr_u64(w, m->rkey[nic].addr);
        pdx_wire_wr_u32(w, m->rkey[nic].rkey);
    }
}

pdx_status_t pdx_mem_desc(pdx_engine_t *e, uint32_t mem, void *buf, size_t cap, size_t *len_p)
{
    pdx_mem_t *m;
    pdx_status_t st;

    if (!e || !len_p || (!buf && cap))
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    pthread_mutex_lock(&e->lock);
    st = pdx_engine_mem_lookup(e, mem, &m);
    if (st == PDX_OK) {
        const mem_arg_t a = {.e = e, .id = mem, .m = m};

        st = desc_write(mem_body, &a, buf, cap, len_p, "a memory");
    } else {
        pdx_error("pdx_mem_desc: no region %u", mem);
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

pdx_status_t pdx_mem_desc_info(const void *desc, size_t len, pdx_mem_desc_info_t *info_p)
{
    pdx_mem_desc_info_t info = {0};
    pdx_wire_rd_t r;
    pdx_status_t st;

    st = desc_open(&r, desc, len, info_p, MEM_MAGIC, "a memory");
    if (st != PDX_OK)
        return st;
    info.flags = pdx_wire_rd_u16(&r);
    info.engine = pdx_wire_rd_u64(&r);
    info.mem = pdx_wire_rd_u32(&r);
    info.nics = pdx_wire_rd_u32(&r);
    info.len = pdx_wire_rd_u64(&r);
    if (r.short_read || info.nics == 0 || info.nics > PDX_MAX_NICS ||
        pdx_wire_rd_left(&r) != (size_t)info.nics * MEM_PER_NIC || info.mem >= PDX_MAX_MEMS ||
        info.len == 0 || (info.flags & ~PDX_MEM_DESC_GPU)) {
        pdx_error("malformed memory descriptor of %zu bytes (region %u, %u NICs, flags 0x%x)",
                  len, info.mem, info.nics, info.flags);
        return PDX_ERR_PROTO;
    }
    *info_p = info;
    return PDX_OK;
}

pdx_status_t pdx_desc_mem_of_peer(const pdx_peer_t *peer, const void *desc, size_t len,
                                  pdx_mem_desc_info_t *info_p)
{
    const pdx_remote_mem_t *rm;
    pdx_mem_desc_info_t info;
    pdx_wire_rd_t r;
    pdx_status_t st;

    st = pdx_mem_desc_info(desc, len, &info);
    if (st != PDX_OK)
        return st;
    if (info.engine != peer->remote_id) {
        pdx_error("a memory descriptor of engine %016llx among those of engine %016llx",
                  (unsigned long long)info.engine, (unsigned long long)peer->remote_id);
        return PDX_ERR_INVALID;
    }
    rm = &peer->mems[info.mem];
    r = (pdx_wire_rd_t){.p = desc, .len = len, .off = MEM_FIXED};
    for (uint32_t nic = 0; nic < info.nics; nic++) {
        const uint64_t addr = pdx_wire_rd_u64(&r);
        const uint32_t key = pdx_wire_rd_u32(&r);

        if (!(atomic_load_explicit(&rm->valid, memory_order_acquire) >> nic & 1)) {
            pdx_debug("region %u of %s is not described here yet", info.mem, peer->addr);
            return PDX_ERR_AGAIN;
        }
        if (rm->rkey[nic].addr != addr || rm->rkey[nic].rkey != key) {
            pdx_error("the descriptor names a region %u that %s no longer has (deregistered "
                      "since)", info.mem, peer->addr);
            return PDX_ERR_STATE;
        }
    }
    *info_p = info;
    return PDX_OK;
}
