/* PDX_VERIFY: the checksum units of pages and aux bytes (verify.h). */
#include "verify.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crc32c.h"
#include "engine.h"

#define STAGE_BYTES   (4u << 20)
#define STAGE_PAGES   256u          /* pieces staged before one wait */
#define COPY_WAIT_MS  10000u        /* a staged copy that takes longer fails the check */
#define AUX_GROUP     0xffu         /* the aux bytes' group in a unit's name */

/* One piece of GPU memory in the stage. */
typedef struct piece {
    uint64_t key;                   /* the page's name */
    uint32_t block0;                /* its first block in the page */
    uint32_t at;                    /* offset in the stage */
    uint32_t len;
} piece_t;

struct pdx_verify {
    pthread_mutex_t lock;           /* one caller at a time uses the stage */
    void           *stage;          /* pinned, STAGE_BYTES; made at the first use */
    void           *stream;
    void           *done;
    piece_t         pieces[STAGE_PAGES];
    uint32_t        npieces;
    uint32_t        used;           /* bytes of the stage taken */
};

static inline uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ x >> 31;
}

static inline uint64_t page_key(uint32_t group, uint32_t buffer, uint32_t page)
{
    return mix64(mix64((uint64_t)group << 32 | buffer) ^ page);
}

/* Units of the blocks block0, ... of a page, their bytes at p. */
static uint64_t blocks_sum(uint64_t key, uint32_t block0, const void *p, size_t len)
{
    uint32_t crc[64];
    uint64_t sum = 0;
    const size_t step = sizeof(crc) / sizeof(crc[0]) * PDX_VERIFY_BLOCK;

    for (size_t off = 0; off < len; off += step) {
        const size_t n = len - off < step ? len - off : step;
        const uint32_t nb = (uint32_t)((n + PDX_VERIFY_BLOCK - 1) / PDX_VERIFY_BLOCK);

        pdx_crc32c_blocks((const char *)p + off, n, PDX_VERIFY_BLOCK, crc);
        for (uint32_t i = 0; i < nb; i++)
            sum += mix64(key ^ ((uint64_t)(block0 + i) << 32 | crc[i]));
        block0 += nb;
    }
    return sum;
}

/* ---------------------------------------------------- GPU memory: staged */

static pdx_status_t stage_open(pdx_verify_t *v)
{
    pdx_status_t st;

    if (v->stage)
        return PDX_OK;
    st = pdx_hip_host_alloc(STAGE_BYTES, &v->stage);
    if (st == PDX_OK)
        st = pdx_hip_stream_create(&v->stream);
    if (st == PDX_OK)
        st = pdx_hip_event_create(&v->done);
    if (st != PDX_OK) {
        pdx_hip_event_destroy(v->done);
        pdx_hip_stream_destroy(v->stream);
        pdx_hip_host_free(v->stage);
        v->stage = v->stream = v->done = NULL;
    }
    return st;
}

/* Copy the pieces queued, wait for them, sum them. */
static pdx_status_t stage_drain(pdx_verify_t *v, const void *const *src, uint64_t *sum,
                                char *err, size_t errlen)
{
    const uint64_t deadline = pdx_deadline_ns(COPY_WAIT_MS);
    pdx_status_t st = PDX_OK;

    for (uint32_t i = 0; i < v->npieces && st == PDX_OK; i++)
        st = pdx_hip_copy_async(v->stream, PDX_HIP_D2H, (char *)v->stage + v->pieces[i].at,
                                src[i], v->pieces[i].len, v->done);
    if (st == PDX_OK && v->npieces) {
        while ((st = pdx_hip_event_query(v->done)) == PDX_INPROGRESS) {
            if (pdx_now_ns() > deadline) {
                st = PDX_ERR_TIMEOUT;
                break;
            }
            nanosleep(&(struct timespec){0, 20000}, NULL);
        }
    }
    if (st != PDX_OK) {
        /* The stage stays: a copy still queued writes into it, and the next
         * drain's event comes after it on the same stream. */
        snprintf(err, errlen, "copying GPU memory to check it failed: %s (%s)",
                 pdx_status_str(st), pdx_hip_last_error());
    } else {
        for (uint32_t i = 0; i < v->npieces; i++)
            *sum += blocks_sum(v->pieces[i].key, v->pieces[i].block0,
                               (const char *)v->stage + v->pieces[i].at, v->pieces[i].len);
    }
    v->npieces = 0;
    v->used = 0;
    return st;
}

/* ------------------------------------------------------------ the walk */

typedef struct walk {
    pdx_engine_t       *e;
    const pdx_plan_t   *plan;
    uint64_t           *sum;
    char               *err;
    size_t              errlen;
    pdx_status_t        status;
    bool                staged;     /* holds v->lock, the engine's GPU current */
    int                 old_device; /* the caller's current device to restore, -1: none */
    const void         *src[STAGE_PAGES];
} walk_t;

/* The bytes of one page (len at offset of region mem) into the sum. */
static int walk_bytes(walk_t *w, uint32_t mem, uint64_t offset, uint64_t len, uint64_t key)
{
    pdx_engine_t *e = w->e;
    const pdx_mem_t *m = mem < PDX_MAX_MEMS ? &e->mems[mem] : NULL;
    pdx_verify_t *v = e->verify;

    if (!m || !m->used || offset > m->len || len > m->len - offset) {
        snprintf(w->err, w->errlen, "%llu bytes at offset %llu are outside local memory %u",
                 (unsigned long long)len, (unsigned long long)offset, mem);
        w->status = PDX_ERR_RANGE;
        return 1;
    }
    if (!m->reg || !m->reg->gpu) {
        *w->sum += blocks_sum(key, 0, (const char *)m->base + offset, len);
        return 0;
    }
    if (!w->staged) {
        int cur = -1;

        pthread_mutex_lock(&v->lock);
        w->staged = true;
        /* An API thread may get here (a held notify applied by pdx_expect):
         * the stage's stream and copies belong to the engine's GPU. */
        if (pdx_hip_current_device(&cur) == PDX_OK && cur != e->gpu.device &&
            pdx_hip_set_device(e->gpu.device) == PDX_OK)
            w->old_device = cur;
        if ((w->status = stage_open(v)) != PDX_OK) {
            snprintf(w->err, w->errlen, "no staging memory to check GPU memory: %s",
                     pdx_status_str(w->status));
            return 1;
        }
    }
    /* In pieces of whole blocks: a block never spans two drains. */
    for (uint64_t done = 0; done < len;) {
        uint64_t n = PDX_MIN(len - done, (uint64_t)STAGE_BYTES - v->used);

        if (n < len - done)
            n -= n % PDX_VERIFY_BLOCK;
        if (n == 0 || v->npieces == STAGE_PAGES) {
            if ((w->status = stage_drain(v, w->src, w->sum, w->err, w->errlen)) != PDX_OK)
                return 1;
            continue;
        }
        w->src[v->npieces] = (const char *)m->base + offset + done;
        v->pieces[v->npieces++] = (piece_t){key, (uint32_t)(done / PDX_VERIFY_BLOCK), v->used,
                                            (uint32_t)n};
        v->used += (uint32_t)n;
        done += n;
    }
    return 0;
}

static int walk_page(void *ctx, uint32_t g, uint32_t sb, uint32_t sp, uint32_t db, uint32_t dp)
{
    walk_t *w = ctx;
    const pdx_buffer_t *b = &w->plan->src->groups[g].buffers[sb];

    return walk_bytes(w, b->mem, b->offset + (uint64_t)sp * b->bytes_per_page, b->bytes_per_page,
                      page_key(g, db, dp));
}

static pdx_status_t walk_end(walk_t *w)
{
    pdx_verify_t *v = w->e->verify;

    if (!w->staged)
        return w->status;
    if (w->status == PDX_OK)
        w->status = stage_drain(v, w->src, w->sum, w->err, w->errlen);
    v->npieces = 0;
    v->used = 0;
    if (w->old_device >= 0)
        pdx_hip_set_device(w->old_device);
    pthread_mutex_unlock(&v->lock);
    return w->status;
}

pdx_status_t pdx_verify_plan(pdx_engine_t *e, const pdx_plan_t *plan, uint64_t *sum, char *err,
                             size_t errlen)
{
    walk_t w = {.e = e, .plan = plan, .sum = sum, .err = err, .errlen = errlen,
                .old_device = -1};

    pdx_plan_pages(plan, walk_page, &w);
    return walk_end(&w);
}

pdx_status_t pdx_verify_aux(pdx_engine_t *e, uint32_t mem, uint64_t offset, uint64_t len,
                            uint64_t *sum, char *err, size_t errlen)
{
    walk_t w = {.e = e, .sum = sum, .err = err, .errlen = errlen, .old_device = -1};

    walk_bytes(&w, mem, offset, len, page_key(AUX_GROUP, 0, 0));
    return walk_end(&w);
}

pdx_status_t pdx_verify_init(pdx_engine_t *e)
{
    pdx_verify_t *v = calloc(1, sizeof(*v));

    if (!v)
        return PDX_ERR_NOMEM;
    pthread_mutex_init(&v->lock, NULL);
    e->verify = v;
    return PDX_OK;
}

void pdx_verify_fini(pdx_engine_t *e)
{
    pdx_verify_t *v = e->verify;

    if (!v)
        return;
    if (v->stage) {
        pdx_hip_stream_destroy(v->stream);
        pdx_hip_event_destroy(v->done);
        pdx_hip_host_free(v->stage);
    }
    pthread_mutex_destroy(&v->lock);
    free(v);
    e->verify = NULL;
}
