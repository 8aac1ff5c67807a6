/*
 * softnic memory: protection domains and memory regions.
 *
 * An MR maps the addresses [iova, iova + length) to host memory: iova is the
 * user address for ibv_reg_mr, the given iova for ibv_reg_mr_iova(2) and
 * ibv_reg_dmabuf_mr. Local sges and remote accesses both use iova addresses,
 * as on hardware. A dmabuf MR maps the fd (MAP_SHARED, from the offset
 * rounded down to a page), so what softnic places there is what any other
 * mapping of the same buffer sees. With dmabuf_errno set, ibv_reg_dmabuf_mr
 * fails first thing with that errno, as rdma-core over a provider or kernel
 * without dmabuf (EOPNOTSUPP, ENOSYS).
 *
 * lkey and rkey are distinct pseudo-random 32-bit values, unique among the
 * keys of the process; the NIC looks them up in two hash tables under the
 * fabric lock. ibv_dereg_mr is immediate, as on hardware: a WR that still
 * names the MR fails at execution (IBV_WC_LOC_PROT_ERR locally,
 * IBV_WC_REM_ACCESS_ERR remotely); no access to the memory happens after
 * ibv_dereg_mr returned.
 *
 * Access rules: REMOTE_WRITE without LOCAL_WRITE is EINVAL (as verbs);
 * REMOTE_ATOMIC is always EINVAL (softnic has no atomics, and some providers
 * refuse it likewise: a transport must never ask for it). length 0 or above
 * max_mr_size is EINVAL. On a dead context (DEVICE_FATAL) ibv_alloc_pd and
 * the registrations fail with EIO; ibv_dereg_mr and ibv_dealloc_pd work.
 */
#include "softnic_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- protection domains ---- */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    sn_context_t *ctx = sn_ctx(context);
    sn_pd_t *pd;
    int err = sn_fault_call(SOFTNIC_CALL_ALLOC_PD, -1);

    if (err || sn_dead(ctx)) {
        errno = err ? err : EIO;
        return NULL;
    }
    pd = calloc(1, sizeof(*pd));
    if (!pd) {
        errno = ENOMEM;
        return NULL;
    }
    pd->ctx = ctx;
    pd->ibpd.context = context;
    pthread_mutex_lock(&softnic_g.lock);
    pd->ibpd.handle = ++softnic_g.next_handle;
    sn_list_add_tail(&ctx->pds, &pd->link);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_opened();
    return &pd->ibpd;
}

void sn_pd_free(sn_pd_t *pd)
{
    sn_list_del(&pd->link);
    free(pd);
}

int ibv_dealloc_pd(struct ibv_pd *ibpd)
{
    sn_pd_t *pd = sn_container_of(ibpd, sn_pd_t, ibpd);

    pthread_mutex_lock(&softnic_g.lock);
    if (pd->users) {
        pthread_mutex_unlock(&softnic_g.lock);
        SN_TRACE("ibv_dealloc_pd: %u MR(s) or QP(s) still use the PD", pd->users);
        return EBUSY;
    }
    sn_pd_free(pd);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_closed();
    return 0;
}

/* ---- key tables (fabric lock) ---- */

static uint32_t sn_bucket(uint32_t key)
{
    return (key * 2654435761u) >> 22; /* 1024 buckets */
}

sn_mr_t *sn_mr_lkey(uint32_t lkey)
{
    sn_mr_t *mr = softnic_g.lkey_hash[sn_bucket(lkey)];

    while (mr && mr->ibmr.lkey != lkey)
        mr = mr->lkey_next;
    return mr;
}

sn_mr_t *sn_mr_rkey(uint32_t rkey)
{
    sn_mr_t *mr = softnic_g.rkey_hash[sn_bucket(rkey)];

    while (mr && mr->ibmr.rkey != rkey)
        mr = mr->rkey_next;
    return mr;
}

static bool sn_key_used(uint32_t key)
{
    return key == 0 || sn_mr_lkey(key) || sn_mr_rkey(key);
}

static uint64_t sn_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void sn_keys_insert(sn_mr_t *mr)
{
    uint32_t lkey, rkey;
    sn_mr_t **b;

    do {
        uint64_t r = sn_mix(++softnic_g.key_seq);

        lkey = (uint32_t)r;
        rkey = (uint32_t)(r >> 32);
    } while (lkey == rkey || sn_key_used(lkey) || sn_key_used(rkey));
    mr->ibmr.lkey = lkey;
    mr->ibmr.rkey = rkey;
    b = &softnic_g.lkey_hash[sn_bucket(lkey)];
    mr->lkey_next = *b;
    *b = mr;
    b = &softnic_g.rkey_hash[sn_bucket(rkey)];
    mr->rkey_next = *b;
    *b = mr;
}

static void sn_keys_remove(sn_mr_t *mr)
{
    sn_mr_t **p = &softnic_g.lkey_hash[sn_bucket(mr->ibmr.lkey)];

    while (*p != mr)
        p = &(*p)->lkey_next;
    *p = mr->lkey_next;
    p = &softnic_g.rkey_hash[sn_bucket(mr->ibmr.rkey)];
    while (*p != mr)
        p = &(*p)->rkey_next;
    *p = mr->rkey_next;
}

/* ---- memory regions ---- */

static int sn_mr_check(sn_pd_t *pd, size_t length, unsigned int access)
{
    if (sn_dead(pd->ctx)) {
        SN_TRACE("reg_mr: %s is dead", pd->ctx->dev->ibdev.name);
        return EIO;
    }
    if (access & IBV_ACCESS_REMOTE_ATOMIC) {
        SN_TRACE("reg_mr: IBV_ACCESS_REMOTE_ATOMIC is not supported");
        return EINVAL;
    }
    if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
        SN_TRACE("reg_mr: remote write access needs IBV_ACCESS_LOCAL_WRITE");
        return EINVAL;
    }
    if (length == 0 || length > softnic_g.cfg.max_mr_size) {
        SN_TRACE("reg_mr: length %zu outside 1..%llu", length,
                 (unsigned long long)softnic_g.cfg.max_mr_size);
        return EINVAL;
    }
    return 0;
}

/* Fill, register and publish an MR; fabric lock held. */
static struct ibv_mr *sn_mr_publish(sn_pd_t *pd, sn_mr_t *mr, void *addr, size_t length,
                                    uint64_t iova, uint8_t *base, unsigned int access)
{
    mr->pd = pd;
    mr->ibmr.context = pd->ibpd.context;
    mr->ibmr.pd = &pd->ibpd;
    mr->ibmr.addr = addr;
    mr->ibmr.length = length;
    mr->iova = iova;
    mr->length = length;
    mr->base = base;
    mr->access = access;
    sn_keys_insert(mr);
    mr->ibmr.handle = mr->ibmr.lkey;
    sn_list_add_tail(&pd->ctx->mrs, &mr->link);
    pd->users++;
    sn_obj_opened();
    return &mr->ibmr;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *ibpd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    sn_pd_t *pd = sn_container_of(ibpd, sn_pd_t, ibpd);
    struct ibv_mr *ibmr;
    sn_mr_t *mr;
    int err = sn_fault_call(SOFTNIC_CALL_REG_MR, -1);

    if (err) {
        errno = err;
        return NULL;
    }
    pthread_mutex_lock(&softnic_g.lock);
    err = sn_mr_check(pd, length, access);
    if (!err && !addr)
        err = EFAULT;
    if (err)
        goto err_unlock;
    mr = calloc(1, sizeof(*mr));
    if (!mr) {
        err = ENOMEM;
        goto err_unlock;
    }
    ibmr = sn_mr_publish(pd, mr, addr, length, iova, addr, access);
    pthread_mutex_unlock(&softnic_g.lock);
    return ibmr;

err_unlock:
    pthread_mutex_unlock(&softnic_g.lock);
    errno = err;
    return NULL;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                 int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *ibpd, uint64_t offset, size_t length,
                                 uint64_t iova, int fd, int access)
{
    sn_pd_t *pd = sn_container_of(ibpd, sn_pd_t, ibpd);
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t start = offset & ~(page - 1);
    struct ibv_mr *ibmr;
    struct stat st;
    sn_mr_t *mr;
    void *map;
    size_t map_len;
    int err = sn_fault_call(SOFTNIC_CALL_REG_DMABUF_MR, -1);

    if (err)
        goto err_out;
    pthread_mutex_lock(&softnic_g.lock);
    err = softnic_g.cfg.dmabuf_errno;
    if (err)
        SN_TRACE("reg_dmabuf_mr: the provider has no dmabuf (dmabuf_errno %d)", err);
    else
        err = sn_mr_check(pd, length, (unsigned int)access);
    pthread_mutex_unlock(&softnic_g.lock);
    if (err)
        goto err_out;
    if (fstat(fd, &st) != 0) {
        err = errno;
        goto err_out;
    }
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size < offset + length) {
        SN_TRACE("reg_dmabuf_mr: [%llu, +%zu) passes the end of the buffer (%lld bytes)",
                 (unsigned long long)offset, length, (long long)st.st_size);
        err = EINVAL;
        goto err_out;
    }
    map_len = (size_t)(offset - start) + length;
    map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)start);
    if (map == MAP_FAILED) {
        err = errno;
        goto err_out;
    }
    mr = calloc(1, sizeof(*mr));
    if (!mr) {
        err = ENOMEM;
        goto err_unmap;
    }
    mr->map = map;
    mr->map_len = map_len;
    pthread_mutex_lock(&softnic_g.lock);
    ibmr = sn_mr_publish(pd, mr, (void *)(uintptr_t)offset, length, iova,
                         (uint8_t *)map + (offset - start), (unsigned int)access);
    pthread_mutex_unlock(&softnic_g.lock);
    return ibmr;

err_unmap:
    munmap(map, map_len);
err_out:
    errno = err;
    return NULL;
}

/* Unpublish and free an MR; fabric lock held. */
void sn_mr_free(sn_mr_t *mr)
{
    sn_keys_remove(mr);
    sn_list_del(&mr->link);
    mr->pd->users--;
    if (mr->map)
        munmap(mr->map, mr->map_len);
    free(mr);
}

int ibv_dereg_mr(struct ibv_mr *ibmr)
{
    sn_mr_t *mr = sn_container_of(ibmr, sn_mr_t, ibmr);

    pthread_mutex_lock(&softnic_g.lock);
    sn_mr_free(mr);
    pthread_mutex_unlock(&softnic_g.lock);
    sn_obj_closed();
    return 0;
}
