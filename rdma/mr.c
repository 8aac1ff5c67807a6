/*
 * rdma registered regions: host memory (ibv_reg_mr) and dmabuf-backed
 * memory (ibv_reg_dmabuf_mr, GPU memory exported by hip/).
 *
 * Access: LOCAL_WRITE where the region is written locally (receives, READ
 * targets) or remotely (REMOTE_WRITE needs it), REMOTE_WRITE and
 * REMOTE_READ only when asked; never REMOTE_ATOMIC (some NICs refuse the
 * registration outright).
 *
 * A region larger than the device's max_mr_size would have to be registered
 * in pieces with runs split at piece boundaries (DESIGN.md §6). That is not
 * supported yet: the engine's rkey format carries one rkey per region, so
 * such a region is PDX_ERR_UNSUPPORTED.
 *
 * A region counts the posted WRs that read or write it (taken at post,
 * released when the completion covering the WR is consumed, or when its ep
 * is destroyed); mr_dereg answers PDX_ERR_STATE while any is held. Writes a
 * remote peer places into the region cannot be seen here: the engine fences
 * those (DESIGN.md §3, pdx_release).
 */
#include "rdma/rdma.h"

#include <errno.h>
#include <stdlib.h>

#define RDMA_ACCESS_KNOWN \
    (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE | PDX_TP_ACCESS_REMOTE_READ)

static int ibv_access(unsigned access)
{
    int a = 0;

    if (access & (PDX_TP_ACCESS_LOCAL_WRITE | PDX_TP_ACCESS_REMOTE_WRITE))
        a |= IBV_ACCESS_LOCAL_WRITE;
    if (access & PDX_TP_ACCESS_REMOTE_WRITE)
        a |= IBV_ACCESS_REMOTE_WRITE;
    if (access & PDX_TP_ACCESS_REMOTE_READ)
        a |= IBV_ACCESS_REMOTE_READ;
    return a;
}

static pdx_status_t mr_check(const rdma_tp_t *tp, const void *base, size_t len, unsigned access,
                             const char *what)
{
    if (!base || len == 0 || (access & ~RDMA_ACCESS_KNOWN) ||
        (uintptr_t)base + len < (uintptr_t)base) {
        pdx_error("rdma: %s: cannot register %zu bytes at %p with access 0x%x", tp->dev.name,
                  len, base, access);
        return PDX_ERR_INVALID;
    }
    if (len > tp->dev.max_mr_size) {
        pdx_error("rdma: %s: %s of %zu bytes exceeds the device's max_mr_size of %llu; "
                  "registration in pieces is not supported yet", tp->dev.name, what, len,
                  (unsigned long long)tp->dev.max_mr_size);
        return PDX_ERR_UNSUPPORTED;
    }
    return PDX_OK;
}

static rdma_mr_t *mr_new(rdma_tp_t *tp, void *base, size_t len, unsigned access)
{
    rdma_mr_t *mr = calloc(1, sizeof(*mr));

    if (!mr) {
        pdx_error("rdma: %s: out of memory registering %zu bytes", tp->dev.name, len);
        return NULL;
    }
    mr->tp = tp;
    mr->base = base;
    mr->len = len;
    mr->access = access;
    atomic_init(&mr->refs, 0);
    return mr;
}

static void mr_link(rdma_tp_t *tp, rdma_mr_t *mr)
{
    pthread_mutex_lock(&tp->lock);
    mr->prev = NULL;
    mr->next = tp->mrs;
    if (tp->mrs)
        tp->mrs->prev = mr;
    tp->mrs = mr;
    pthread_mutex_unlock(&tp->lock);
}

static void mr_unlink(rdma_tp_t *tp, rdma_mr_t *mr)
{
    pthread_mutex_lock(&tp->lock);
    if (mr->prev)
        mr->prev->next = mr->next;
    else
        tp->mrs = mr->next;
    if (mr->next)
        mr->next->prev = mr->prev;
    pthread_mutex_unlock(&tp->lock);
}

pdx_status_t rdma_mr_reg(pdx_tp_t *ptp, void *base, size_t len, unsigned access,
                         pdx_tp_mr_t **mr_p)
{
    rdma_tp_t *tp = rdma_tp(ptp);
    pdx_status_t status;
    rdma_mr_t *mr;

    status = mr_check(tp, base, len, access, "a region");
    if (status != PDX_OK)
        return status;
    mr = mr_new(tp, base, len, access);
    if (!mr)
        return PDX_ERR_NOMEM;
    /* The function, not the macro: access is not a compile-time constant. */
    mr->mr = (ibv_reg_mr)(tp->pd, base, len, ibv_access(access));
    if (!mr->mr) {
        pdx_error("rdma: %s: ibv_reg_mr of %zu bytes at %p: %s", tp->dev.name, len, base,
                  strerror(errno));
        free(mr);
        return PDX_ERR_IO;
    }
    mr_link(tp, mr);
    *mr_p = (pdx_tp_mr_t *)(void *)mr;
    return PDX_OK;
}

pdx_status_t rdma_mr_reg_dmabuf(pdx_tp_t *ptp, void *base, size_t len, int fd, uint64_t offset,
                                unsigned access, pdx_tp_mr_t **mr_p)
{
    rdma_tp_t *tp = rdma_tp(ptp);
    pdx_status_t status;
    rdma_mr_t *mr;
    int err;

    if (fd < 0 || offset + len < offset) {
        pdx_error("rdma: %s: dmabuf registration needs an fd and an offset that does not "
                  "wrap (fd %d, offset %llu, %zu bytes)", tp->dev.name, fd,
                  (unsigned long long)offset, len);
        return PDX_ERR_INVALID;
    }
    status = mr_check(tp, base, len, access, "a dmabuf region");
    if (status != PDX_OK)
        return status;
    mr = mr_new(tp, base, len, access);
    if (!mr)
        return PDX_ERR_NOMEM;
    /* iova = base: WRs and remote peers address the region as the engine sees it */
    mr->mr = ibv_reg_dmabuf_mr(tp->pd, offset, len, (uint64_t)(uintptr_t)base, fd,
                               ibv_access(access));
    if (!mr->mr) {
        err = errno;
        free(mr);
        if (err == ENOSYS || err == EOPNOTSUPP || err == EPROTONOSUPPORT) {
            pdx_error("rdma: dmabuf registration not supported by %s: %s", tp->dev.name,
                      strerror(err));
            return PDX_ERR_UNSUPPORTED;
        }
        pdx_error("rdma: %s: ibv_reg_dmabuf_mr of %zu bytes at offset %llu of dmabuf fd %d: %s",
                  tp->dev.name, len, (unsigned long long)offset, fd, strerror(err));
        return PDX_ERR_IO;
    }
    mr_link(tp, mr);
    *mr_p = (pdx_tp_mr_t *)(void *)mr;
    return PDX_OK;
}

pdx_status_t rdma_mr_dereg(pdx_tp_mr_t *pmr)
{
    rdma_mr_t *mr = rdma_mr(pmr);
    rdma_tp_t *tp = mr->tp;
    uint32_t refs = atomic_load_explicit(&mr->refs, memory_order_acquire);
    int rc;

    if (refs) {
        pdx_debug("rdma: %s: region lkey 0x%x still used by %u work requests", tp->dev.name,
                  mr->mr->lkey, refs);
        return PDX_ERR_STATE;
    }
    rc = ibv_dereg_mr(mr->mr);
    if (rc) {
        pdx_error("rdma: %s: ibv_dereg_mr of %zu bytes at %p: %s", tp->dev.name, mr->len,
                  (void *)mr->base, strerror(rc > 0 ? rc : errno));
        return PDX_ERR_IO;
    }
    mr_unlink(tp, mr);
    free(mr);
    return PDX_OK;
}

void rdma_mr_free(rdma_mr_t *mr)
{
    int rc = ibv_dereg_mr(mr->mr);

    if (rc)
        pdx_error("rdma: %s: ibv_dereg_mr at close: %s", mr->tp->dev.name,
                  strerror(rc > 0 ? rc : errno));
    free(mr);
}

void rdma_mr_remote(const pdx_tp_mr_t *pmr, pdx_tp_rkey_t *rkey_p)
{
    const rdma_mr_t *mr = rdma_mr(pmr);

    rkey_p->addr = (uint64_t)(uintptr_t)mr->base;
    rkey_p->len = mr->len;
    rkey_p->rkey = mr->mr->rkey;
}
