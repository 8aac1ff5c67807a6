/*
 * The C side of tests/bench/bench_python.py: what a pdx_poll() and a
 * pdx_send() cost through the public API, measured the way the Python
 * benchmark measures its calls. Two engines over tcp on 127.0.0.1: decode
 * expects one room and polls it; prefill sends one 16-page chunk to each of
 * ROOMS fresh rooms (queued: decode never asks for them) and aborts them;
 * then prefill writes XFERS one-sided transfers of 16 runs of 4 KiB into
 * decode's pool, waits for them, and waits once more for all of them done.
 * Prints "poll_ns", "send_ns", "xfer_ns" (medians) and "wait_ns" (per
 * transfer of a wait over transfers already done).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <pdx/pdx.h>

enum { BATCH = 1000, SAMPLES = 200, ROOMS = 1000, PAGES = 16, NPAGES = 64, BPP = 4096,
       XFERS = 1000 };

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return x < y ? -1 : x > y;
}

static pdx_engine_t *engine(uint8_t *pool, uint32_t *layout)
{
    pdx_config_t cfg;
    pdx_engine_t *e = NULL;
    uint32_t mem;
    pdx_buffer_desc_t b = {.offset = 0, .bytes_per_page = BPP};
    pdx_group_desc_t g = {.buffers_per_layer = 1, .nbuffers = 1, .npages = NPAGES, .buffers = &b};
    pdx_layout_desc_t d = {.field_mask = PDX_LAYOUT_FIELD_GROUPS, .ngroups = 1, .groups = &g};

    pdx_config_init(&cfg);
    pdx_config_set(&cfg, "PDX_LISTEN", "127.0.0.1:0");
    pdx_config_set(&cfg, "PDX_TRANSPORT", "tcp");
    pdx_config_set(&cfg, "PDX_SHARDS", "2");
    pdx_config_set(&cfg, "PDX_LOG", "error"); /* the aborts are routine here */
    if (pdx_engine_create(&cfg, &e) != PDX_OK || pdx_mem_register(e, pool, NPAGES * BPP, &mem))
        exit(1);
    b.mem = mem;
    if (pdx_layout_create(e, &d, layout) != PDX_OK)
        exit(1);
    return e;
}

/* pdx_xfer_post of 16 runs (none adjacent: no coalescing) into decode's
 * region `mem`, XFERS times, then the waits. */
static int xfers(pdx_engine_t *pf, pdx_engine_t *dc, uint32_t mem)
{
    static double post_ns[XFERS];
    static pdx_xfer_t h[XFERS];
    pdx_xfer_entry_t x[PAGES];
    uint8_t desc[PDX_MEM_DESC_MAX];
    pdx_desc_t d = {desc, 0};
    uint64_t t0;
    double wait_ns;

    if (pdx_mem_desc(dc, mem, desc, sizeof(desc), &d.len) != PDX_OK)
        return 1;
    for (uint32_t i = 0; i < PAGES; i++)
        x[i] = (pdx_xfer_entry_t){.mem = 0, .offset = (uint64_t)(2 * i) * BPP,
                                  .remote_offset = (uint64_t)(2 * i + 1) * BPP, .len = BPP};
    for (int r = 0; r < XFERS; r++) {
        pdx_status_t st;

        for (;;) {
            t0 = now_ns();
            st = pdx_xfer_post(pf, PDX_XFER_WRITE, &d, 1, x, PAGES, NULL, 60000, &h[r]);
            post_ns[r] = (double)(now_ns() - t0);
            if (st != PDX_ERR_AGAIN)
                break;
            usleep(50); /* the ring is full: not a sample */
        }
        if (st != PDX_OK)
            return 1;
    }
    if (pdx_xfer_wait(pf, h, XFERS, 60000, NULL) != PDX_OK)
        return 1;
    t0 = now_ns();
    if (pdx_xfer_wait(pf, h, XFERS, 0, NULL) != PDX_OK)
        return 1;
    wait_ns = (double)(now_ns() - t0) / XFERS;
    for (int r = 0; r < XFERS; r++)
        while (pdx_xfer_release(pf, h[r]) == PDX_INPROGRESS)
            usleep(10);
    qsort(post_ns, XFERS, sizeof(double), cmp);
    printf("xfer_ns %.1f\nwait_ns %.1f\n", post_ns[XFERS / 2], wait_ns);
    return 0;
}

int main(void)
{
    static uint8_t pool_a[NPAGES * BPP], pool_b[NPAGES * BPP];
    static double poll_ns[SAMPLES], send_ns[ROOMS];
    uint32_t pages[PAGES], la, lb, peer;
    pdx_engine_t *pf = engine(pool_a, &la), *dc = engine(pool_b, &lb);
    pdx_pages_t p = {pages, PAGES};
    volatile int sink = 0;

    for (uint32_t i = 0; i < PAGES; i++)
        pages[i] = i;
    if (pdx_peer_connect(dc, pdx_engine_address(pf), 5000, &peer) != PDX_OK ||
        pdx_expect(dc, peer, 1, lb, &p, NULL, 1, 60000) != PDX_OK)
        return 1;
    for (int s = 0; s < SAMPLES; s++) {
        uint64_t t0 = now_ns();

        for (int i = 0; i < BATCH; i++)
            sink += pdx_poll(dc, 1);
        poll_ns[s] = (double)(now_ns() - t0) / BATCH;
    }
    for (int r = 0; r < ROOMS; r++) {
        uint64_t t0 = now_ns();

        if (pdx_send(pf, 1000 + (uint64_t)r, la, &p, NULL, NULL, PDX_SEND_LAST) != PDX_OK)
            return 1;
        send_ns[r] = (double)(now_ns() - t0);
    }
    for (int r = 0; r < ROOMS; r++)
        pdx_abort(pf, 1000 + (uint64_t)r);
    qsort(poll_ns, SAMPLES, sizeof(double), cmp);
    qsort(send_ns, ROOMS, sizeof(double), cmp);
    printf("poll_ns %.1f\nsend_ns %.1f\n", poll_ns[SAMPLES / 2], send_ns[ROOMS / 2]);
    if (xfers(pf, dc, 0) != 0)
        return 1;
    pdx_engine_destroy(pf);
    pdx_engine_destroy(dc);
    (void)sink;
    return 0;
}
