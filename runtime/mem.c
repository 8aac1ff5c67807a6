/*
 * mem: registered regions (pdx_mem_register) and the registrations behind
 * them (docs/architecture.md §6).
 *
 * A region is what the caller registered: an id, a base and a length, the
 * rkey its peers write with, and the transport registration it lies in at
 * offset mr_off. Registrations are cached by the identity of the
 * allocation they cover, not by address alone:
 *   - GPU memory and pinned host memory whose allocation the runtime names
 *     with a buffer id (hip/ pdx_hip_classify, id_unique): the first region
 *     of an allocation registers the whole allocation once; later regions
 *     inside it (a KV buffer per layer inside one pool, say) share that
 *     registration. An allocation freed and allocated again at the same
 *     address has another id, so a stale registration is never reused.
 *     Without a buffer id, only a region of the same range shares.
 *   - Pageable host memory: no allocation is known; only a region of the
 *     same base and length shares a registration.
 *   - A registration the transport must make in pieces (longer than its
 *     mr_piece) covers exactly its region and is not shared: the region's
 *     rkeys then follow the pieces.
 * A registration is made on every NIC of the engine (each has its own keys)
 * and lives while a region uses it (refs); everything here runs under
 * engine->lock, on setup calls only.
 */
#include "engine.h"
#include "peer.h"

#include <string.h>

#include "log.h"

/* The range to register for [base, base + len) and its identity. */
typedef struct mem_key {
    uintptr_t base;
    size_t    len;
    uint64_t  id;     /* 0: pageable host memory, shared by exact range only */
} mem_key_t;

static pdx_status_t mem_key(pdx_engine_t *e, void *base, size_t len, mem_key_t *key_p)
{
    pdx_hip_ptr_t p = {.kind = PDX_HIP_MEM_PAGEABLE_HOST};
    mem_key_t k = {(uintptr_t)base, len, 0};
    pdx_status_t st;

    if (e->gpu.device >= 0) {
        st = pdx_hip_classify(base, len, &p);
        if (st != PDX_OK)
            return st;
    }
    /* Whole allocations, when the runtime names them uniquely (a range freed
     * and allocated again gets a new id) and the transport registers them
     * at once; else the region's own range. */
    if (p.kind != PDX_HIP_MEM_PAGEABLE_HOST && p.size && p.id_unique && p.alloc_id &&
        (!e->mr_piece || p.size <= e->mr_piece))
        k = (mem_key_t){p.base, p.size, p.alloc_id};
    *key_p = k;
    return PDX_OK;
}

/* A live registration with key's identity holding [base, base + len). */
static pdx_reg_t *reg_find(pdx_engine_t *e, const mem_key_t *k, uintptr_t base, size_t len)
{
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++) {
        pdx_reg_t *r = &e->regs[i];

        if (!r->refs || r->id != k->id)
            continue;
        if (k->id == 0 ? r->base == base && r->len == len
                       : r->base <= base && base + len <= r->base + r->len)
            return r;
    }
    return NULL;
}

static pdx_status_t reg_get(pdx_engine_t *e, void *base, size_t len, pdx_reg_t **reg_p)
{
    /* REMOTE_READ where the transport reads: flush reads, and peers'
     * one-sided READ transfers (pdx_xfer_post). */
    const unsigned access = PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE |
                            (e->ops->post_read != pdx_tp_unsupported_post_read
                                 ? PDX_TP_ACCESS_REMOTE_READ : 0);
    pdx_reg_t *r;
    mem_key_t k;
    pdx_status_t st;

    st = mem_key(e, base, len, &k);
    if (st != PDX_OK)
        return st;
    r = reg_find(e, &k, (uintptr_t)base, len);
    if (r) {
        r->refs++;
        *reg_p = r;
        return PDX_OK;
    }
    for (r = e->regs; r < e->regs + PDX_MAX_MEMS && r->refs; r++)
        ;
    if (r == e->regs + PDX_MAX_MEMS) /* never: a region holds at most one */
        return PDX_ERR_FULL;
    for (uint32_t nic = 0; nic < e->ntps; nic++) {
        st = pdx_gpu_mem_reg(e, nic, (void *)k.base, k.len, access, &r->mr[nic], &r->gpu);
        if (st != PDX_OK) {
            while (nic-- > 0)
                e->ops->mr_dereg(r->mr[nic]); /* nothing posted on it yet */
            memset(r, 0, sizeof(*r));
            return st;
        }
    }
    r->base = k.base;
    r->len = k.len;
    r->id = k.id;
    r->refs = 1;
    atomic_fetch_add_explicit(&e->nregs, 1, memory_order_relaxed);
    *reg_p = r;
    return PDX_OK;
}

/* The last region of a registration lets go: m's view of each NIC's part
 * goes with it (a later part still busy leaves the region usable on the
 * NICs that kept theirs). */
static pdx_status_t reg_put(pdx_engine_t *e, pdx_reg_t *r, pdx_mem_t *m)
{
    pdx_status_t st;

    if (r->refs > 1) {
        r->refs--;
        return PDX_OK;
    }
    for (uint32_t nic = 0; nic < e->ntps; nic++) {
        if (!r->mr[nic])
            continue;
        st = e->ops->mr_dereg(r->mr[nic]);
        if (st != PDX_OK)
            return st; /* WRs still use it, or the device failed: kept */
        r->mr[nic] = NULL;
        m->mr[nic] = NULL; /* the send path fails a room that meets it */
    }
    memset(r, 0, sizeof(*r));
    atomic_fetch_sub_explicit(&e->nregs, 1, memory_order_relaxed);
    return PDX_OK;
}

pdx_status_t pdx_mem_register(pdx_engine_t *e, void *base, size_t len, uint32_t *mem_p)
{
    pdx_reg_t *reg;
    pdx_mem_t *m;
    pdx_status_t st;
    uint32_t id;

    if (!e || !base || len == 0 || !mem_p || (uintptr_t)base + len < (uintptr_t)base)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    pthread_mutex_lock(&e->lock);
    /* Peers never let a region id change its description (shards read it
     * without a lock): an id described before is taken only when no fresh
     * one is left, and peers that knew the old region then fail. */
    for (id = 0; id < PDX_MAX_MEMS && (e->mems[id].used || e->mems[id].rkey[0].len); id++)
        ;
    if (id == PDX_MAX_MEMS) {
        for (id = 0; id < PDX_MAX_MEMS && e->mems[id].used; id++)
            ;
        if (id < PDX_MAX_MEMS)
            pdx_warn("pdx_mem_register: region id %u is used again; peers that knew "
                     "the old region will fail", id);
    }
    if (id == PDX_MAX_MEMS) {
        pthread_mutex_unlock(&e->lock);
        pdx_error("pdx_mem_register: all %d regions in use", PDX_MAX_MEMS);
        return PDX_ERR_FULL;
    }
    st = reg_get(e, base, len, &reg);
    if (st != PDX_OK) {
        pthread_mutex_unlock(&e->lock);
        return st;
    }
    m = &e->mems[id];
    m->reg = reg;
    m->mr_off = (uintptr_t)base - reg->base;
    for (uint32_t nic = 0; nic < e->ntps; nic++) {
        pdx_tp_rkey_t *k = &m->rkey[nic];

        m->mr[nic] = reg->mr[nic];
        e->ops->mr_remote(reg->mr[nic], k);
        if (k->npieces == 1) { /* one key covers the registration: this region's window */
            k->addr = (uintptr_t)base;
            k->len = len;
        }
    }
    m->base = base;
    m->len = len;
    atomic_store(&m->users, 0);
    m->used = true;
    pthread_mutex_unlock(&e->lock);
    pdx_peer_broadcast_mem(e, id);
    *mem_p = id;
    return PDX_OK;
}

pdx_status_t pdx_mem_deregister(pdx_engine_t *e, uint32_t mem)
{
    pdx_mem_t *m;
    pdx_status_t st;

    if (!e || mem >= PDX_MAX_MEMS)
        return PDX_ERR_INVALID;
    pdx_engine_log_tag(e);
    pthread_mutex_lock(&e->lock);
    m = &e->mems[mem];
    if (!m->used) {
        st = PDX_ERR_NOT_FOUND;
    } else if (atomic_load(&m->users) > 0) {
        pdx_error("pdx_mem_deregister: region %u is still used by a layout, a room or a transfer", mem);
        st = PDX_ERR_STATE;
    } else {
        st = reg_put(e, m->reg, m);
        if (st == PDX_OK) {
            pdx_tp_rkey_t described = m->rkey[0]; /* kept: the id is not fresh */

            memset(m, 0, sizeof(*m));
            described.rkeys = NULL; /* the transport's, gone with the registration */
            m->rkey[0] = described;
        }
    }
    pthread_mutex_unlock(&e->lock);
    return st;
}

pdx_status_t pdx_engine_mem_lookup(pdx_engine_t *e, uint32_t mem, pdx_mem_t **mem_p)
{
    if (mem >= PDX_MAX_MEMS || !e->mems[mem].used)
        return PDX_ERR_NOT_FOUND;
    *mem_p = &e->mems[mem];
    return PDX_OK;
}

void pdx_mem_fini(pdx_engine_t *e)
{
    for (uint32_t i = 0; i < PDX_MAX_MEMS; i++)
        for (uint32_t nic = 0; nic < e->ntps && e->regs[i].refs; nic++)
            if (e->regs[i].mr[nic])
                e->ops->mr_dereg(e->regs[i].mr[nic]);
}
