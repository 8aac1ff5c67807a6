/*
 * tcp registered regions. A region is host or GPU memory plus an rkey; the rkey
 * indexes a per-tp table (slot in the low TCP_MR_SLOT_BITS bits, a generation
 * above them, so a stale rkey never finds a reused slot).
 *
 * A region counts its users: each posted WRITE reading from it and each
 * posted RECV into it holds a reference until its completion (or flush), and
 * the progress thread holds one while it places an incoming WRITE. Deregister
 * answers PDX_ERR_STATE while any is held. Lookups and (de)registration take
 * the table lock; releasing a reference is an atomic decrement.
 *
 * GPU memory (PDX_TP_ACCESS_DEVICE) is never touched by the CPU: the tp's
 * first GPU region sets up staging (stage.c), and WRITEs from or into it go
 * through it. A running copy holds a reference on its region too.
 */
#include "tcp_internal.h"

#include <stdlib.h>

pdx_status_t tcp_mr_table_init(tcp_mr_table_t *table)
{
    int rc = pthread_mutex_init(&table->lock, NULL);

    if (rc) {
        pdx_error("tcp: mutex init: %s", strerror(rc));
        return PDX_ERR_IO;
    }
    for (uint32_t i = 0; i < TCP_MR_MAX; i++) {
        table->slot[i] = NULL;
        table->gen[i] = 1;
        table->free_list[i] = TCP_MR_MAX - 1 - i; /* slot 0 is handed out first */
    }
    table->nfree = TCP_MR_MAX;
    return PDX_OK;
}

void tcp_mr_table_fini(tcp_mr_table_t *table)
{
    for (uint32_t i = 0; i < TCP_MR_MAX; i++)
        free(table->slot[i]);
    pthread_mutex_destroy(&table->lock);
}

pdx_status_t tcp_mr_reg(pdx_tp_t *ptp, void *base, size_t len, unsigned access,
                        pdx_tp_mr_t **mr_p)
{
    tcp_tp_t *tp = tcp_tp(ptp);
    tcp_mr_table_t *table = &tp->mrs;
    const unsigned known = PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE |
                           PDX_TP_ACCESS_REMOTE_READ | PDX_TP_ACCESS_DEVICE;
    pdx_status_t st;
    tcp_mr_t *mr;
    uint32_t slot;

    if (!base || len == 0 || (access & ~known) || (uintptr_t)base + len < (uintptr_t)base) {
        pdx_error("tcp: cannot register %zu bytes at %p with access 0x%x", len, base, access);
        return PDX_ERR_INVALID;
    }
    if (access & PDX_TP_ACCESS_DEVICE) {
        st = tcp_staging_init(tp, base, len);
        if (st != PDX_OK)
            return st;
    }
    mr = calloc(1, sizeof(*mr));
    if (!mr) {
        pdx_error("tcp: out of memory registering %zu bytes", len);
        return PDX_ERR_NOMEM;
    }
    mr->tp = tp;
    mr->base = base;
    mr->len = len;
    mr->access = access;
    mr->kind = access & PDX_TP_ACCESS_DEVICE ? TCP_MEM_DEVICE : TCP_MEM_HOST;
    atomic_init(&mr->refs, 0);

    pthread_mutex_lock(&table->lock);
    if (table->nfree == 0) {
        pthread_mutex_unlock(&table->lock);
        free(mr);
        pdx_error("tcp: all %u memory regions of %s are registered", TCP_MR_MAX, tp->name);
        return PDX_ERR_FULL;
    }
    slot = table->free_list[--table->nfree];
    mr->rkey = (table->gen[slot] << TCP_MR_SLOT_BITS) | slot;
    table->slot[slot] = mr;
    pthread_mutex_unlock(&table->lock);

    *mr_p = (pdx_tp_mr_t *)(void *)mr;
    return PDX_OK;
}

pdx_status_t tcp_mr_dereg(pdx_tp_mr_t *pmr)
{
    tcp_mr_t *mr = (tcp_mr_t *)(void *)pmr;
    tcp_mr_table_t *table = &mr->tp->mrs;
    uint32_t slot = mr->rkey & (TCP_MR_MAX - 1);
    uint32_t refs;

    if (atomic_load_explicit(&mr->refs, memory_order_acquire))
        tcp_stage_reap(mr->tp, false); /* copies of destroyed eps may have finished */
    pthread_mutex_lock(&table->lock);
    refs = atomic_load_explicit(&mr->refs, memory_order_acquire);
    if (refs) {
        pthread_mutex_unlock(&table->lock);
        pdx_debug("tcp: region rkey 0x%x still used by %u work requests", mr->rkey, refs);
        return PDX_ERR_STATE;
    }
    table->slot[slot] = NULL;
    /* 20 generation bits; skip 0 so an rkey is never 0 */
    table->gen[slot] = (table->gen[slot] + 1) & ((1u << (32 - TCP_MR_SLOT_BITS)) - 1);
    if (table->gen[slot] == 0)
        table->gen[slot] = 1;
    table->free_list[table->nfree++] = slot;
    pthread_mutex_unlock(&table->lock);
    free(mr);
    return PDX_OK;
}

void tcp_mr_remote(const pdx_tp_mr_t *pmr, pdx_tp_rkey_t *rkey_p)
{
    const tcp_mr_t *mr = (const tcp_mr_t *)(const void *)pmr;

    *rkey_p = (pdx_tp_rkey_t){.addr = (uint64_t)(uintptr_t)mr->base, .len = mr->len,
                              .rkey = mr->rkey, .npieces = 1};
}

pdx_status_t tcp_mr_lookup(tcp_tp_t *tp, uint32_t rkey, uint64_t addr, uint64_t len,
                           unsigned access, tcp_mr_t **mr_p, uint8_t **ptr_p)
{
    tcp_mr_table_t *table = &tp->mrs;
    uint32_t slot = rkey & (TCP_MR_MAX - 1);
    uint64_t base;
    tcp_mr_t *mr;

    pthread_mutex_lock(&table->lock);
    mr = table->slot[slot];
    if (!mr || mr->rkey != rkey || (mr->access & access) != access) {
        pthread_mutex_unlock(&table->lock);
        return PDX_ERR_RANGE;
    }
    base = (uint64_t)(uintptr_t)mr->base;
    if (addr < base || len > mr->len || addr - base > mr->len - len) {
        pthread_mutex_unlock(&table->lock);
        return PDX_ERR_RANGE;
    }
    atomic_fetch_add_explicit(&mr->refs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&table->lock);
    *mr_p = mr;
    *ptr_p = mr->base + (addr - base);
    return PDX_OK;
}
