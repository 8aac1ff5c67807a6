/*
 * PDX_VERIFY's sums (runtime/verify.c) without a GPU: the hip calls are
 * replaced here by a fake device whose copies finish only at the second
 * query of their event, and memory is marked GPU memory by hand, so the
 * staged path (pieces of whole blocks, drains at the stage's end and at its
 * piece limit, pages larger than the stage) must give the sums the host
 * path gives, whole rooms and chunk by chunk. A changed byte and two
 * swapped blocks change the sum; a copy that fails is a status and a
 * message.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "verify.h"

/* ------------------------------------------------ the fake device */

typedef struct copy { void *dst; const void *src; size_t len; } copy_t;
static copy_t pending[1024];
static size_t npending, copies;
static int queries;
static pdx_status_t copy_fault = PDX_OK;

pdx_status_t pdx_hip_host_alloc(size_t len, void **p) { *p = malloc(len); return PDX_OK; }
void pdx_hip_host_free(void *p) { free(p); }
pdx_status_t pdx_hip_stream_create(void **s) { *s = &npending; return PDX_OK; }
void pdx_hip_stream_destroy(void *s) { (void)s; }
pdx_status_t pdx_hip_event_create(void **e) { *e = &queries; return PDX_OK; }
void pdx_hip_event_destroy(void *e) { (void)e; }
const char *pdx_hip_last_error(void) { return "fake device"; }
pdx_status_t pdx_hip_current_device(int *d) { *d = 0; return PDX_OK; }
pdx_status_t pdx_hip_set_device(int d) { (void)d; return PDX_OK; }

pdx_status_t pdx_hip_copy_async(void *stream, pdx_hip_copy_dir_t dir, void *dst, const void *src,
                                size_t len, void *done)
{
    cr_assert(stream && done && dir == PDX_HIP_D2H);
    if (copy_fault != PDX_OK)
        return copy_fault;
    cr_assert_lt(npending, 1024);
    pending[npending++] = (copy_t){dst, src, len};
    queries = 0;
    return PDX_OK;
}

/* In progress at the first query after copies were queued, done at the next. */
pdx_status_t pdx_hip_event_query(void *event)
{
    cr_assert(event);
    if (npending && queries++ == 0)
        return PDX_INPROGRESS;
    for (size_t i = 0; i < npending; i++)
        memcpy(pending[i].dst, pending[i].src, pending[i].len);
    copies += npending;
    npending = 0;
    return PDX_OK;
}

/* ------------------------------------------------------- fixture */

static pdx_engine_t E;
static pdx_reg_t reg;
static uint8_t *pool;

static void open_pool(size_t len)
{
    memset(&E, 0, sizeof(E));
    pool = malloc(len);
    cr_assert_not_null(pool);
    for (size_t i = 0; i < len; i++)
        pool[i] = (uint8_t)(i * 7 + (i >> 11) * 13);
    reg = (pdx_reg_t){.gpu = false};
    E.mems[0] = (pdx_mem_t){.used = true, .base = pool, .len = len, .reg = &reg};
    cr_assert_eq(pdx_verify_init(&E), PDX_OK);
}

static void close_pool(void)
{
    pdx_verify_fini(&E);
    free(pool);
}

/* The sum of pages[0, n) of L layers of bpp bytes, in chunks of `chunk` pages. */
static uint64_t room_sum(uint32_t layers, uint64_t bpp, uint32_t npages, const uint32_t *pages,
                         uint32_t n, uint32_t chunk)
{
    pdx_buffer_t bufs[8];
    pdx_group_t grp = {.buffers_per_layer = 1, .nbuffers = layers, .npages = npages,
                       .buffers = bufs};
    pdx_layout_t lay = {.ngroups = 1, .layer_begin = 0, .layer_end = layers, .groups = &grp};
    uint64_t sum = 0;
    char err[PDX_ERRMSG_MAX];

    cr_assert_leq(layers, 8);
    for (uint32_t l = 0; l < layers; l++)
        bufs[l] = (pdx_buffer_t){.mem = 0, .offset = (uint64_t)l * npages * bpp,
                                 .bytes_per_page = bpp};
    for (uint32_t at = 0; at < n; at += chunk) {
        pdx_pages_t part = {pages + at, PDX_MIN(chunk, n - at)};
        pdx_plan_t plan;

        cr_assert_eq(pdx_plan_init(&plan, &lay, &lay, &part, &part, 1u << 20, PDX_PLAN_STATE, err,
                                   sizeof(err)), PDX_OK, "%s", err);
        cr_assert_eq(pdx_verify_plan(&E, &plan, &sum, err, sizeof(err)), PDX_OK, "%s", err);
    }
    return sum;
}

static void staged_as_host(uint32_t layers, uint64_t bpp, uint32_t npages, uint32_t chunk)
{
    uint32_t *pages = malloc(npages * sizeof(*pages));
    uint64_t host, staged, staged_chunks;

    for (uint32_t i = 0; i < npages; i++)
        pages[i] = (i * 5 + 3) % npages; /* every page once, out of order */
    open_pool((size_t)layers * npages * bpp);
    host = room_sum(layers, bpp, npages, pages, npages, npages);
    cr_assert_eq(room_sum(layers, bpp, npages, pages, npages, chunk), host,
                 "host chunks of %u pages", chunk);
    reg.gpu = true;
    copies = 0;
    staged = room_sum(layers, bpp, npages, pages, npages, npages);
    staged_chunks = room_sum(layers, bpp, npages, pages, npages, chunk);
    cr_assert_gt(copies, 0, "the staged path ran");
    cr_assert_eq(staged, host, "%u layers, %llu bytes per page, %u pages", layers,
                 (unsigned long long)bpp, npages);
    cr_assert_eq(staged_chunks, host, "staged chunks of %u pages", chunk);
    close_pool();
    free(pages);
}

Test(verify_stage, pages_split_at_the_end_of_the_stage)
{
    staged_as_host(2, 36864, 64, 16);     /* 113.8 pages fill the 4 MiB stage */
}

Test(verify_stage, more_pieces_than_a_drain_holds)
{
    staged_as_host(3, 4096 + 24, 200, 7); /* 600 pieces, a short block each */
}

Test(verify_stage, pages_larger_than_the_stage)
{
    staged_as_host(1, (9u << 20) + 8, 3, 2);
}

Test(verify_stage, a_changed_byte_or_swapped_blocks_change_the_sum)
{
    const uint32_t pages[] = {0, 1, 2, 3};
    uint64_t sum, bpp = 3 * 4096;
    uint8_t tmp[4096];

    open_pool(4 * bpp);
    sum = room_sum(1, bpp, 4, pages, 4, 4);
    pool[bpp + 17] ^= 0x40;
    cr_assert_neq(room_sum(1, bpp, 4, pages, 4, 4), sum);
    pool[bpp + 17] ^= 0x40;
    cr_assert_eq(room_sum(1, bpp, 4, pages, 4, 4), sum);
    memcpy(tmp, pool + 2 * bpp, 4096);
    memcpy(pool + 2 * bpp, pool + 2 * bpp + 4096, 4096);
    memcpy(pool + 2 * bpp + 4096, tmp, 4096);
    cr_assert_neq(room_sum(1, bpp, 4, pages, 4, 4), sum, "blocks swapped in a page");
    close_pool();
}

Test(verify_stage, a_failed_copy_is_a_status_and_a_message)
{
    const uint32_t pages[] = {0, 1};
    pdx_buffer_t buf = {.mem = 0, .offset = 0, .bytes_per_page = 4096};
    pdx_group_t grp = {.buffers_per_layer = 1, .nbuffers = 1, .npages = 2, .buffers = &buf};
    pdx_layout_t lay = {.ngroups = 1, .layer_begin = 0, .layer_end = 1, .groups = &grp};
    pdx_pages_t list = {pages, 2};
    char err[PDX_ERRMSG_MAX] = "";
    uint64_t sum = 0;
    pdx_plan_t plan;

    open_pool(2 * 4096);
    reg.gpu = true;
    copy_fault = PDX_ERR_IO;
    cr_assert_eq(pdx_plan_init(&plan, &lay, &lay, &list, &list, 1u << 20, 0, err, sizeof(err)),
                 PDX_OK);
    cr_assert_eq(pdx_verify_plan(&E, &plan, &sum, err, sizeof(err)), PDX_ERR_IO);
    cr_assert(strstr(err, "copying GPU memory to check it failed") != NULL, "%s", err);
    copy_fault = PDX_OK;
    cr_assert_eq(pdx_verify_aux(&E, 0, 100, 5000, &sum, err, sizeof(err)), PDX_OK, "%s", err);
    cr_assert_eq(pdx_verify_aux(&E, 0, 8000, 5000, &sum, err, sizeof(err)), PDX_ERR_RANGE);
    cr_assert(strstr(err, "outside local memory 0") != NULL, "%s", err);
    close_pool();
}
