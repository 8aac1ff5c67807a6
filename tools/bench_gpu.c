/*
 * pdx-bench --gpu N: the KV pool and the aux slots in memory of GPU N,
 * through hip/'s interface (hip/pdx_hip.h includes no GPU runtime header),
 * linked as pdx_gpu_helpers: the engine itself is reached only through pdx.h.
 *
 * Prefill: a kernel on the side's stream writes each page of the chunk
 * (hip/'s fill kernel, one launch per page and layer). Where hip/ has no
 * kernel (the amd platform) or pages are not whole 64-bit words, the pages
 * are generated into pinned staging and copied host-to-device on the stream
 * instead. The last chunk's aux record follows from its pinned host mirror. Then
 * pdx_gate_arm() enqueues the gate word behind those copies and the chunk
 * goes to pdx_send() with that gate: the engine posts nothing of a chunk
 * before the GPU has written it.
 *
 * Decode: once a room is SUCCESS, its aux slot and then its pages are copied
 * device-to-host on the stream (launched after SUCCESS, so they see the
 * placed bytes) and checked in staging.
 *
 * Staging is two halves used in turn, each a whole number of pages; the
 * event recorded behind every copy through a half tells when the half is
 * free again, so generating (prefill) or checking (decode) one half overlaps
 * the copies of the other. Every wait polls an event against a deadline.
 * The stream is drained before the engine is destroyed; memory the stream
 * may still touch is never freed.
 */
#include "bench_gpu.h"

#include "hip/pdx_hip.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HALF_MAX (32ull << 20) /* bytes per staging half, at most (at least one page) */
#define POLL_NS  2000ull       /* between queries of an event still pending */
#define ARM_NS   50000ull      /* between pdx_gate_arm answers of PDX_ERR_AGAIN */

struct bench_gpu {
    int       device;
    void     *stream;
    void     *ev[2];     /* behind the latest copy through each half */
    void     *aux_ev;    /* behind the latest aux copy; also the drain's */
    uint8_t  *stage;     /* pinned: half 0, then half 1 */
    uint64_t  half;      /* bytes of a half: cap pages */
    uint32_t  cap;
    uint32_t  cur;       /* the half being filled */
    uint32_t  n[2];      /* pages staged in each half */
    int       busy[2];   /* a copy through the half may be in flight */
    uint64_t *where[2];  /* decode: layer << 32 | position of each staged page */
    void     *pool_dev;  /* the KV pool (s->pool) */
    void     *aux_dev;   /* the aux slots; s->aux is their pinned host mirror */
    int       idle;      /* nothing of ours is in flight on the stream */
    int       kernel;    /* prefill writes pages with hip/'s fill kernel (1), with
                          * copies (0: no kernel on this platform, or pages not
                          * whole words), or does not know yet (-1) */
};

const char *bench_gpu_platform(void)
{
    return pdx_hip_platform_name();
}

int bench_gpu_probe(int device)
{
    const char *platform = pdx_hip_platform_name();
    int count = 0;

    if (strcmp(platform, "none") == 0) {
        fprintf(stderr, "pdx-bench: --gpu %d: this pdx-bench has no GPU runtime (built with "
                "PDX_HIP_PLATFORM=none); without --gpu the KV pool is host memory\n", device);
        return BENCH_EXIT_FAIL;
    }
    if (pdx_hip_device_count(&count) != PDX_OK) {
        const char *why = pdx_hip_no_device_reason();

        fprintf(stderr, "pdx-bench: --gpu %d: %s (platform %s); without --gpu the KV pool is "
                "host memory\n", device, why[0] ? why : "no GPU", platform);
        return BENCH_EXIT_FAIL;
    }
    if (device >= count) {
        fprintf(stderr, "pdx-bench: --gpu %d: the %s runtime sees %d GPU%s (0 to %d)\n", device,
                platform, count, count == 1 ? "" : "s", count - 1);
        return BENCH_EXIT_USAGE;
    }
    return BENCH_EXIT_OK;
}

/* ------------------------------------------------------------------ setup */

int bench_gpu_open(bench_side_t *s)
{
    const bench_opts_t *o = s->o;
    uint64_t bpp = o->bytes_per_page, half;
    void *stage = NULL, *mirror = NULL;
    bench_gpu_t *g;
    pdx_status_t st;
    const char *what;

    g = calloc(1, sizeof(*g));
    if (!g) {
        bench_err(s->role, "out of memory for the GPU state");
        return -1;
    }
    s->gpu = g;
    g->device = o->gpu;
    g->idle = 1;
    g->kernel = -1;
    half = o->bytes_per_request < HALF_MAX ? o->bytes_per_request : HALF_MAX;
    g->cap = half / bpp ? (uint32_t)(half / bpp) : 1;
    g->half = (uint64_t)g->cap * bpp;

    what = "make it the current device";
    st = pdx_hip_set_device(g->device);
    if (st == PDX_OK) {
        what = "allocate the KV pool";
        st = pdx_hip_device_alloc(o->pool_bytes, &g->pool_dev);
    }
    if (st == PDX_OK) {
        what = "allocate the aux slots";
        st = pdx_hip_device_alloc(s->aux_len, &g->aux_dev);
    }
    if (st == PDX_OK) {
        what = "allocate pinned staging";
        st = pdx_hip_host_alloc(2 * g->half, &stage);
        g->stage = stage;
    }
    if (st == PDX_OK) {
        what = "allocate the pinned aux mirror";
        st = pdx_hip_host_alloc(s->aux_len, &mirror);
        s->aux = mirror;
    }
    if (st == PDX_OK) {
        what = "create a stream";
        st = pdx_hip_stream_create(&g->stream);
    }
    for (int i = 0; i < 3 && st == PDX_OK; i++) {
        what = "create an event";
        st = pdx_hip_event_create(i < 2 ? &g->ev[i] : &g->aux_ev);
    }
    if (st != PDX_OK) {
        bench_err(s->role, "GPU %d: cannot %s (KV pool %" PRIu64 " MiB, staging 2 x %" PRIu64
                  " KiB): %s; hip says why above", g->device, what, o->pool_bytes >> 20,
                  g->half >> 10, pdx_status_str(st));
        return -1;
    }
    g->where[0] = calloc(g->cap, sizeof(*g->where[0]));
    g->where[1] = calloc(g->cap, sizeof(*g->where[1]));
    if (!g->where[0] || !g->where[1]) {
        bench_err(s->role, "out of memory for the staging tables");
        return -1;
    }
    /* Device memory starts with whatever it held: a page or aux record left
     * from anything else cannot pass as a room's (both depend on the room). */
    memset(s->aux, 0, s->aux_len);
    s->pool = g->pool_dev;
    return 0;
}

void *bench_gpu_aux_device(const bench_side_t *s)
{
    return s->gpu->aux_dev;
}

/* Poll ev until it completed or deadline_ns passed. */
static int wait_event(bench_gpu_t *g, void *ev, uint64_t deadline_ns, const char *what,
                      char *why, size_t len)
{
    for (;;) {
        pdx_status_t st = pdx_hip_event_query(ev);

        if (st == PDX_OK)
            return 0;
        if (st != PDX_INPROGRESS) {
            snprintf(why, len, "%s on GPU %d: %s", what, g->device, pdx_status_str(st));
            return -1;
        }
        if (bench_now_ns() >= deadline_ns) {
            snprintf(why, len, "%s on GPU %d did not finish by the deadline", what, g->device);
            return -1;
        }
        bench_sleep_ns(POLL_NS);
    }
}

static int enqueue_copy(bench_gpu_t *g, pdx_hip_copy_dir_t dir, void *dst, const void *src,
                        uint64_t bytes, void *done, char *why, size_t len)
{
    pdx_status_t st = pdx_hip_copy_async(g->stream, dir, dst, src, bytes, done);

    if (st != PDX_OK) {
        snprintf(why, len, "%s copy of %" PRIu64 " B on GPU %d: %s",
                 dir == PDX_HIP_H2D ? "host-to-device" : "device-to-host", bytes, g->device,
                 pdx_status_str(st));
        return -1;
    }
    g->idle = 0;
    return 0;
}

/*
 * Half h once its copies finished: decode checks the pages staged there
 * against room sl->room (sl NULL: forgets them), then the half is empty.
 */
static int settle(bench_side_t *s, uint32_t h, const bench_slot_t *sl, bench_diff_t *d,
                  uint64_t deadline_ns, char *why, size_t len)
{
    bench_gpu_t *g = s->gpu;
    uint64_t bpp = s->o->bytes_per_page;

    if (g->busy[h] && wait_event(g, g->ev[h], deadline_ns,
                                 s->role == BENCH_DECODE ? "reading pages back" : "writing pages",
                                 why, len) != 0)
        return -1;
    g->busy[h] = 0;
    for (uint32_t k = 0; sl && k < g->n[h]; k++)
        bench_diff_page(d, g->stage + h * g->half + k * bpp, bpp, sl->room,
                        (uint32_t)(g->where[h][k] >> 32), (uint32_t)g->where[h][k]);
    g->n[h] = 0;
    return 0;
}

/* The next free page of staging, switching halves when the current one is full. */
static uint8_t *stage_page(bench_side_t *s, const bench_slot_t *sl, bench_diff_t *d,
                           uint64_t deadline_ns, char *why, size_t len)
{
    bench_gpu_t *g = s->gpu;

    if (g->n[g->cur] == g->cap) {
        if (settle(s, g->cur ^ 1, sl, d, deadline_ns, why, len) != 0)
            return NULL;
        g->cur ^= 1;
    }
    return g->stage + g->cur * g->half + (uint64_t)g->n[g->cur] * s->o->bytes_per_page;
}

/* ---------------------------------------------------------------- prefill */

int bench_gpu_write_chunk(bench_side_t *s, pdx_room_t room, const uint32_t *pages, uint32_t pos,
                          uint32_t n, uint64_t aux_off, uint64_t deadline_ns, pdx_gate_t *gate_p,
                          char *why, size_t len)
{
    const bench_opts_t *o = s->o;
    bench_gpu_t *g = s->gpu;
    pdx_status_t st;

    if (g->kernel != 0 && o->bytes_per_page % 8 == 0) {
        /* A kernel on the stream writes each page; the gate goes after them. */
        for (uint32_t l = 0; l < o->layers && g->kernel != 0; l++)
            for (uint32_t i = 0; i < n; i++) {
                st = pdx_hip_fill64_async(g->stream, bench_page_at(s, l, pages[i]),
                                          o->bytes_per_page / 8,
                                          bench_pattern_base(room, l, pos + i), BENCH_WORD_STEP);
                if (st == PDX_ERR_UNSUPPORTED && g->kernel < 0) {
                    g->kernel = 0; /* nothing launched yet: copies from here on */
                    break;
                }
                if (st != PDX_OK) {
                    snprintf(why, len, "the fill kernel on GPU %d: %s", g->device,
                             pdx_status_str(st));
                    return -1;
                }
                if (g->kernel < 0)
                    bench_err(s->role, "GPU %d: pages are written by hip/'s fill kernel",
                              g->device);
                g->kernel = 1;
                g->idle = 0;
            }
    } else {
        g->kernel = 0;
    }
    for (uint32_t l = 0; l < o->layers && g->kernel == 0; l++)
        for (uint32_t i = 0; i < n; i++) {
            uint8_t *p = stage_page(s, NULL, NULL, deadline_ns, why, len);

            if (!p)
                return -1;
            bench_fill_page(p, o->bytes_per_page, bench_pattern_base(room, l, pos + i));
            if (enqueue_copy(g, PDX_HIP_H2D, bench_page_at(s, l, pages[i]), p,
                             o->bytes_per_page, g->ev[g->cur], why, len) != 0)
                return -1;
            g->n[g->cur]++;
            g->busy[g->cur] = 1;
        }
    /* The mirror slot stays as it is until the room is released. */
    if (aux_off != BENCH_GPU_NO_AUX &&
        enqueue_copy(g, PDX_HIP_H2D, (uint8_t *)g->aux_dev + aux_off, s->aux + aux_off,
                     BENCH_AUX_SLOT, g->aux_ev, why, len) != 0)
        return -1;
    while ((st = pdx_gate_arm(s->e, g->stream, gate_p)) == PDX_ERR_AGAIN &&
           bench_now_ns() < deadline_ns)
        bench_sleep_ns(ARM_NS);
    if (st != PDX_OK) {
        snprintf(why, len, "pdx_gate_arm on the stream of GPU %d: %s%s", g->device,
                 pdx_status_str(st),
                 st == PDX_ERR_AGAIN ? " (every gate word stayed armed until the deadline)" : "");
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------------- decode */

int bench_gpu_verify(bench_side_t *s, const bench_slot_t *sl, uint64_t aux_off, bench_diff_t *d,
                     char *why, size_t len)
{
    const bench_opts_t *o = s->o;
    bench_gpu_t *g = s->gpu;
    uint64_t deadline = bench_now_ns() + (uint64_t)o->timeout_ms * 1000000ull;

    /* Pages a failed check left staged belong to another room. */
    if (settle(s, g->cur ^ 1, NULL, d, deadline, why, len) != 0 ||
        settle(s, g->cur, NULL, d, deadline, why, len) != 0)
        return -1;
    if (enqueue_copy(g, PDX_HIP_D2H, s->aux + aux_off, (uint8_t *)g->aux_dev + aux_off,
                     BENCH_AUX_SLOT, g->aux_ev, why, len) != 0)
        return -1;
    for (uint32_t l = 0; l < o->layers; l++)
        for (uint32_t i = 0; i < o->pages; i++) {
            uint8_t *p = stage_page(s, sl, d, deadline, why, len);

            if (!p || enqueue_copy(g, PDX_HIP_D2H, p, bench_page_at(s, l, sl->pages[i]),
                                   o->bytes_per_page, g->ev[g->cur], why, len) != 0)
                return -1;
            g->where[g->cur][g->n[g->cur]++] = (uint64_t)l << 32 | i;
            g->busy[g->cur] = 1;
        }
    /* The older half, then the newer; the aux copy went before both. */
    if (settle(s, g->cur ^ 1, sl, d, deadline, why, len) != 0 ||
        settle(s, g->cur, sl, d, deadline, why, len) != 0)
        return -1;
    return wait_event(g, g->aux_ev, deadline, "reading the aux slot back", why, len);
}

/* --------------------------------------------------------------- teardown */

void bench_gpu_drain(bench_side_t *s)
{
    bench_gpu_t *g = s->gpu;
    uint64_t deadline = bench_now_ns() + (uint64_t)s->o->timeout_ms * 1000000ull;
    char why[256];

    if (!g || g->idle)
        return;
    /* One word behind everything on the stream, gate words included. */
    if (enqueue_copy(g, PDX_HIP_D2H, g->stage, g->pool_dev, 8, g->aux_ev, why,
                     sizeof(why)) == 0 &&
        wait_event(g, g->aux_ev, deadline, "draining the stream", why, sizeof(why)) == 0) {
        g->idle = 1;
        return;
    }
    bench_err(s->role, "%s", why);
}

void bench_gpu_close(bench_side_t *s)
{
    bench_gpu_t *g = s->gpu;

    if (!g)
        return;
    for (int i = 0; i < 2; i++)
        pdx_hip_event_destroy(g->ev[i]);
    pdx_hip_event_destroy(g->aux_ev);
    pdx_hip_stream_destroy(g->stream);
    if (g->idle) {
        pdx_hip_device_free(g->pool_dev);
        pdx_hip_device_free(g->aux_dev);
        pdx_hip_host_free(g->stage);
        pdx_hip_host_free(s->aux);
    } else {
        bench_err(s->role, "copies may still run on GPU %d: its pool, aux slots and staging "
                  "are left allocated", g->device);
    }
    free(g->where[0]);
    free(g->where[1]);
    free(g);
    s->gpu = NULL;
    s->pool = NULL;
    s->aux = NULL;
}
