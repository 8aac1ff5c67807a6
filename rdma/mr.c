/*
 * rdma registered regions: host memory (ibv_reg_mr) and dmabuf-backed
 * memory (ibv_reg_dmabuf_mr, GPU memory exported by hip/).
 *
 * Access: LOCAL_WRITE where the region is written locally (receives, READ
 * targets) or remotely (REMOTE_WRITE needs it), REMOTE_WRITE and
 * REMOTE_READ only when asked; never REMOTE_ATOMIC (some NICs refuse the
 * registration outright).
 *
 * A region longer than tp->base.mr_piece (the largest power of two not
 * above the device's max_mr_size) is registered in pieces of that many bytes
 * (docs/architecture.md §6), each an ibv_mr of its own with its own keys; the engine
 * cuts its runs at piece boundaries on both sides and names each piece's
 * rkey (pdx_tp_rkey_at()), and a WR crossing a piece boundary is refused.
 *
 * A region counts the posted WRs that read or write it (taken at post,
 * released when the completion covering the WR is consumed, or when its ep
 * is destroyed); mr_dereg answers PDX_ERR_STATE while any is held. Writes a
 * remote peer places into the region cannot be seen here: the engine fences
 * those (docs/architecture.md §3, pdx_release).
 */
#include "rdma.h"

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
    if (tp->base.mr_piece && (len - 1) / tp->base.mr_piece >= PDX_TP_PIECES_MAX) {
        pdx_error("rdma: %s: %s of %zu bytes needs more than %d pieces of the device's "
                  "max_mr_size (%llu bytes)", tp->dev.name, what, len, PDX_TP_PIECES_MAX,
                  (unsigned long long)tp->dev.max_mr_size);
        return PDX_ERR_UNSUPPORTED;
    }
    return PDX_OK;
}

static rdma_mr_t *mr_new(rdma_tp_t *tp, void *base, size_t len, unsigned access)
{
    const uint64_t piece = tp->base.mr_piece;
    const uint32_t n = piece && len > piece ? (uint32_t)((len - 1) / piece + 1) : 1;
    rdma_mr_t *mr = calloc(1, sizeof(*mr) + n * sizeof(mr->mr[0]));

    if (mr && n > 1 && !(mr->rkeys = calloc(n, sizeof(*mr->rkeys)))) {
        free(mr);
        mr = NULL;
    }
    if (!mr) {
        pdx_error("rdma: %s: out of memory registering %zu bytes", tp->dev.name, len);
        return NULL;
    }
    mr->tp = tp;
    mr->base = base;
    mr->len = len;
    mr->access = access;
    mr->npieces = n;
    atomic_init(&mr->refs, 0);
    return mr;
}

static void mr_free_pieces(rdma_mr_t *mr, uint32_t n)
{
    for (uint32_t i = n; i-- > 0;) {
        int rc = ibv_dereg_mr(mr->mr[i]);

        if (rc)
            pdx_error("rdma: %s: ibv_dereg_mr of piece %u of %zu bytes at %p: %s",
                      mr->tp->dev.name, i, mr->len, (void *)mr->base,
                      strerror(rc > 0 ? rc : errno));
    }
    free(mr->rkeys);
    free(mr);
}

/* Piece i: [off, off + len) of the region. */
static void mr_piece_span(const rdma_mr_t *mr, uint32_t i, uint64_t *off_p, size_t *len_p)
{
    const uint64_t off = (uint64_t)i * mr->tp->base.mr_piece;

    *off_p = off;
    *len_p = mr->npieces == 1 ? mr->len : (size_t)PDX_MIN(mr->tp->base.mr_piece, mr->len - off);
}

static void mr_keys(rdma_mr_t *mr)
{
    if (mr->npieces > 1)
        for (uint32_t i = 0; i < mr->npieces; i++)
            mr->rkeys[i] = mr->mr[i]->rkey;
}

static void mr_link(rdma_tp_t *tp, rdma_mr_t *mr)
{
    pthread_mutex_lock(&tp->lock);
    PDX_LIST_PUSH(tp->mrs, mr);
    pthread_mutex_unlock(&tp->lock);
}

static void mr_unlink(rdma_tp_t *tp, rdma_mr_t *mr)
{
    pthread_mutex_lock(&tp->lock);
    PDX_LIST_UNLINK(tp->mrs, mr);
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
    for (uint32_t i = 0; i < mr->npieces; i++) {
        uint64_t off;
        size_t plen;

        mr_piece_span(mr, i, &off, &plen);
        /* The function, not the macro: access is not a compile-time constant. */
        mr->mr[i] = (ibv_reg_mr)(tp->pd, (uint8_t *)base + off, plen, ibv_access(access));
        if (!mr->mr[i]) {
            pdx_error("rdma: %s: ibv_reg_mr of %zu bytes at %p%s: %s", tp->dev.name, plen,
                      (void *)((uint8_t *)base + off), mr->npieces > 1 ? " (a piece)" : "",
                      strerror(errno));
            mr_free_pieces(mr, i);
            return PDX_ERR_IO;
        }
    }
    mr_keys(mr);
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
    for (uint32_t i = 0; i < mr->npieces; i++) {
        uint64_t off;
        size_t plen;

        mr_piece_span(mr, i, &off, &plen);
        /* iova = base: WRs and remote peers address the region as the engine sees it */
        mr->mr[i] = ibv_reg_dmabuf_mr(tp->pd, offset + off, plen,
                                      (uint64_t)(uintptr_t)base + off, fd, ibv_access(access));
        if (!mr->mr[i]) {
            err = errno;
            mr_free_pieces(mr, i);
            if (err == ENOSYS || err == EOPNOTSUPP || err == EPROTONOSUPPORT) {
                pdx_error("rdma: dmabuf registration not supported by %s: %s", tp->dev.name,
                          strerror(err));
                return PDX_ERR_UNSUPPORTED;
            }
            pdx_error("rdma: %s: ibv_reg_dmabuf_mr of %zu bytes at offset %llu of dmabuf fd "
                      "%d: %s", tp->dev.name, plen, (unsigned long long)(offset + off), fd,
                      strerror(err));
            return PDX_ERR_IO;
        }
    }
    mr_keys(mr);
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
                  mr->mr[0]->lkey, refs);
        return PDX_ERR_STATE;
    }
    /* The last piece first: a failure leaves pieces [0, i] registered, and
     * the region shrinks to them (WRs beyond are refused) for another try. */
    for (uint32_t i = mr->npieces; i-- > 0;) {
        rc = ibv_dereg_mr(mr->mr[i]);
        if (rc) {
            pdx_error("rdma: %s: ibv_dereg_mr of %zu bytes at %p: %s", tp->dev.name, mr->len,
                      (void *)mr->base, strerror(rc > 0 ? rc : errno));
            if (i + 1 < mr->npieces) {
                mr->npieces = i + 1;
                mr->len = (size_t)mr->npieces * tp->base.mr_piece;
            }
            return PDX_ERR_IO;
        }
    }
    mr_unlink(tp, mr);
    free(mr->rkeys);
    free(mr);
    return PDX_OK;
}

void rdma_mr_free(rdma_mr_t *mr)
{
    mr_free_pieces(mr, mr->npieces);
}

void rdma_mr_remote(const pdx_tp_mr_t *pmr, pdx_tp_rkey_t *rkey_p)
{
    const rdma_mr_t *mr = rdma_mr(pmr);

    *rkey_p = (pdx_tp_rkey_t){
        .addr = (uint64_t)(uintptr_t)mr->base,
        .len = mr->len,
        .rkey = mr->mr[0]->rkey,
        .npieces = mr->npieces,
        .piece = mr->npieces > 1 ? mr->tp->base.mr_piece : 0,
        .rkeys = mr->npieces > 1 ? mr->rkeys : NULL,
    };
}
