/*
 * bench_ipc: pages between two processes on one GPU, as the intra-node
 * transport will move them. The decode process (this one) allocates 1 GiB
 * on GPU 0 and exports it (pdx_hip_ipc_export); the prefill process (this
 * program again, posix_spawn'ed with --prefill, the handle on its stdin)
 * opens it (pdx_hip_ipc_open) and times, on one stream with events:
 *
 *   (a) one contiguous device-to-device copy of 1 GiB
 *   (b) the gather kernel: 16,384 pages of 64 KiB to a random page map
 *   (c) the same pages as 16,384 async copies, one per page
 *   (d) DeepSeek-R1-like: 61 layers x 128 pages of 64 tokens x 576 B
 *       (36,864 B pages), random page maps, one gather launch per request
 *   (e) Llama-3-70B TP8-like: 80 layers x K and V x 128 pages of 16 tokens
 *       x 128 B (2 KiB fragments), one gather launch per request
 *
 * and prints one table, perftest style, with each case's GB/s (bytes
 * copied, not read plus written) and its ratio to (a). Run lists live in
 * device memory, uploaded before the timing. A sample of (b)'s pages is
 * checked byte for byte. If the handle cannot be opened, the prefill times
 * into a buffer of its own and says so.
 *
 * Usage: bench_ipc [-n iterations] (default 20; (c) runs a fifth of them).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hip/hip_api.h"
#include "spawn_self.h"

#define MiB (1024ull * 1024)
#define GiB (1024ull * MiB)
#define POOL GiB
#define REQUESTS 16

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rng(void)
{
    return pdx_xorshift64(&rng_state);
}

/* The first n entries of a random permutation of [0, total) into out. */
static void random_pages(uint32_t *out, uint32_t n, uint32_t total, uint32_t *scratch)
{
    for (uint32_t i = 0; i < total; i++)
        scratch[i] = i;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t j = i + (uint32_t)(rng() % (total - i)), t = scratch[i];

        scratch[i] = scratch[j];
        scratch[j] = t;
        out[i] = scratch[i];
    }
}

typedef struct bench {
    void          *stream;
    hipEvent_t     start, stop;
    unsigned char *src, *dst;      /* prefill's pages, decode's pages (opened) */
    uint32_t      *scratch;        /* POOL / 2 KiB entries */
} bench_t;

typedef struct result {
    const char *name;
    uint64_t    bytes;     /* per iteration */
    uint64_t    runs;      /* per launch */
    uint32_t    launches;  /* per iteration */
    uint32_t    iters;
    double      ms;        /* all iterations */
    bool        ok;
} result_t;

static double gbps(const result_t *r)
{
    return r->ms > 0 ? (double)r->bytes * r->iters / (r->ms * 1e6) : 0;
}

static bool check_hip(hipError_t err, const char *what)
{
    if (err == hipSuccess)
        return true;
    fprintf(stderr, "bench_ipc: %s: %s\n", what, hipGetErrorName(err));
    return false;
}

/* Time iters x launch(arg), one warm-up first. */
static bool timed(bench_t *b, result_t *r, pdx_status_t (*launch)(bench_t *, void *), void *arg)
{
    float ms = 0;

    if (launch(b, arg) != PDX_OK ||
        !check_hip(hipStreamSynchronize((hipStream_t)b->stream), "warm-up"))
        return false;
    if (!check_hip(hipEventRecord(b->start, (hipStream_t)b->stream), "hipEventRecord"))
        return false;
    for (uint32_t i = 0; i < r->iters; i++)
        if (launch(b, arg) != PDX_OK)
            return false;
    if (!check_hip(hipEventRecord(b->stop, (hipStream_t)b->stream), "hipEventRecord") ||
        !check_hip(hipEventSynchronize(b->stop), "hipEventSynchronize") ||
        !check_hip(hipEventElapsedTime(&ms, b->start, b->stop), "hipEventElapsedTime"))
        return false;
    r->ms = ms;
    r->ok = true;
    return true;
}

static pdx_status_t launch_copy(bench_t *b, void *arg)
{
    hipError_t err = hipMemcpyAsync(b->dst, b->src, *(uint64_t *)arg, hipMemcpyDeviceToDevice,
                                    (hipStream_t)b->stream);

    return check_hip(err, "hipMemcpyAsync") ? PDX_OK : PDX_ERR_IO;
}

typedef struct lists {
    pdx_hip_run_t *dev;    /* requests x per_request runs */
    pdx_hip_run_t *host;   /* the same, for (c) */
    uint32_t       requests, per_request;
} lists_t;

static pdx_status_t launch_gather(bench_t *b, void *arg)
{
    lists_t *l = arg;
    pdx_status_t st = PDX_OK;

    for (uint32_t q = 0; q < l->requests && st == PDX_OK; q++)
        st = pdx_hip_gather_async(b->stream, l->dev + (size_t)q * l->per_request,
                                  l->per_request);
    return st;
}

static pdx_status_t launch_copies(bench_t *b, void *arg)
{
    lists_t *l = arg;

    return pdx_hip_copy_runs_async(b->stream, l->host, l->requests * l->per_request);
}

/*
 * Run lists of requests x (groups x pages) runs of page bytes: each request
 * takes `pages` random pages of the prefill's pool and as many of the
 * decode's, per group (layer, or layer and K/V), pages of a pool of page
 * bytes each.
 */
static bool make_lists(bench_t *b, lists_t *l, uint32_t requests, uint32_t groups,
                       uint32_t pages, uint64_t page)
{
    uint32_t per = groups * pages, total = (uint32_t)(POOL / page);
    uint32_t *sp = malloc(per * sizeof(*sp)), *dp = malloc(per * sizeof(*dp));
    size_t bytes = (size_t)requests * per * sizeof(pdx_hip_run_t);
    bool ok = sp && dp;

    memset(l, 0, sizeof(*l));
    l->requests = requests;
    l->per_request = per;
    l->host = malloc(bytes);
    ok = ok && l->host && pdx_hip_device_alloc(bytes, (void **)&l->dev) == PDX_OK;
    for (uint32_t q = 0; ok && q < requests; q++) {
        random_pages(sp, per, total, b->scratch);
        random_pages(dp, per, total, b->scratch);
        for (uint32_t i = 0; i < per; i++)
            l->host[(size_t)q * per + i] = (pdx_hip_run_t){
                .src = (uintptr_t)b->src + sp[i] * page, .dst = (uintptr_t)b->dst + dp[i] * page,
                .len = page};
    }
    ok = ok && check_hip(hipMemcpy(l->dev, l->host, bytes, hipMemcpyHostToDevice), "run lists");
    free(sp);
    free(dp);
    return ok;
}

static void free_lists(lists_t *l)
{
    pdx_hip_device_free(l->dev);
    free(l->host);
}

/* (b)'s mapping: page i of src went to page perm[i] of dst, for a sample. */
static bool verify_pages(const lists_t *l, uint64_t page)
{
    unsigned char *x = malloc(page), *y = malloc(page);
    bool ok = x && y;

    for (uint32_t k = 0; ok && k < 64; k++) {
        const pdx_hip_run_t *r = &l->host[rng() % l->per_request];

        ok = check_hip(hipMemcpy(x, (void *)(uintptr_t)r->src, page, hipMemcpyDeviceToHost),
                       "D2H") &&
             check_hip(hipMemcpy(y, (void *)(uintptr_t)r->dst, page, hipMemcpyDeviceToHost),
                       "D2H") &&
             memcmp(x, y, page) == 0;
    }
    free(x);
    free(y);
    return ok;
}

static void print_table(const result_t *r, int n, const char *where)
{
    const char *line = "-------------------------------------------------------------------"
                       "--------------------------------------------";

    printf("%s\n", line);
    printf(" pdx bench_ipc: %s\n", where);
    printf("%s\n", line);
    printf(" %-44s %12s %8s %9s %11s %17s %7s\n", "#case", "#bytes/iter", "#runs", "#launches",
           "#iterations", "BW average[GB/s]", "vs (a)");
    for (int i = 0; i < n; i++) {
        if (!r[i].ok) {
            printf(" %-44s %12llu %8llu %9u %11u %17s %7s\n", r[i].name,
                   (unsigned long long)r[i].bytes, (unsigned long long)r[i].runs, r[i].launches,
                   r[i].iters, "failed", "-");
            continue;
        }
        printf(" %-44s %12llu %8llu %9u %11u %17.1f %7.3f\n", r[i].name,
               (unsigned long long)r[i].bytes, (unsigned long long)r[i].runs, r[i].launches,
               r[i].iters, gbps(&r[i]), r[0].ok ? gbps(&r[i]) / gbps(&r[0]) : 0);
    }
    printf("%s\n", line);
}

static int prefill(uint32_t iters)
{
    pdx_hip_identity_t id;
    pdx_hip_ipc_handle_t h;
    pdx_hip_ipc_stats_t stats;
    bench_t b = {0};
    lists_t lb = {0}, ld = {0}, le = {0};
    result_t r[5] = {
        {"(a) contiguous copy, 1 GiB", POOL, 1, 1, iters, 0, false},
        {"(b) gather, 16384 pages of 64 KiB", 16384ull * 65536, 16384, 1, iters, 0, false},
        {"(c) 16384 async copies of 64 KiB", 16384ull * 65536, 1, 16384,
         iters / 5 ? iters / 5 : 1, 0, false},
        {"(d) DeepSeek-R1 61L x 128p x 36864 B", REQUESTS * 61ull * 128 * 36864, 61 * 128,
         REQUESTS, iters, 0, false},
        {"(e) Llama-3-70B TP8 80L x KV x 128p x 2 KiB", REQUESTS * 160ull * 128 * 2048,
         160 * 128, REQUESTS, iters, 0, false},
    };
    char where[256];
    void *opened = NULL, *own = NULL;
    bool verified = false;
    uint64_t len;
    pdx_status_t st;
    size_t got = 0;

    if (pdx_hip_set_device(0) != PDX_OK || pdx_hip_device_identity(0, &id) != PDX_OK)
        return 1;
    while (got < sizeof(h)) {
        ssize_t n = read(0, (char *)&h + got, sizeof(h) - got);

        if (n <= 0) {
            fprintf(stderr, "bench_ipc: prefill: no handle on stdin\n");
            return 1;
        }
        got += (size_t)n;
    }
    st = pdx_hip_ipc_open(&h, &opened);
    if (st == PDX_OK) {
        pdx_hip_ipc_stats(&stats);
        snprintf(where, sizeof(where), "GPU 0 (%s, %s): prefill pid %d writes into 1 GiB that "
                 "decode pid %u exported (IPC, %llu runtime open)", id.name, id.pci_bus_id,
                 (int)getpid(), h.pid, (unsigned long long)stats.runtime_opens);
        b.dst = opened;
    } else {
        fprintf(stderr, "bench_ipc: the handle could not be opened (%s: %s); timing into a "
                "buffer of this process instead\n", pdx_status_str(st), pdx_hip_last_error());
        if (pdx_hip_device_alloc(POOL, &own) != PDX_OK)
            return 1;
        snprintf(where, sizeof(where), "GPU 0 (%s, %s): one process (IPC open FAILED: %s)",
                 id.name, id.pci_bus_id, pdx_status_str(st));
        b.dst = own;
    }
    b.scratch = malloc((POOL / 2048) * sizeof(*b.scratch));
    if (!b.scratch || pdx_hip_device_alloc(POOL, (void **)&b.src) != PDX_OK ||
        pdx_hip_stream_create(&b.stream) != PDX_OK ||
        !check_hip(hipEventCreate(&b.start), "hipEventCreate") ||
        !check_hip(hipEventCreate(&b.stop), "hipEventCreate"))
        return 1;
    /* the prefill's pages: distinct bytes in every page */
    {
        unsigned char *host = NULL;

        if (pdx_hip_host_alloc(64 * MiB, (void **)&host) != PDX_OK)
            return 1;
        for (uint64_t off = 0; off < POOL; off += 64 * MiB) {
            for (uint64_t i = 0; i < 64 * MiB; i += 8) {
                uint64_t v = (off + i) * 0x9e3779b97f4a7c15ull;

                memcpy(host + i, &v, 8);
            }
            if (!check_hip(hipMemcpy(b.src + off, host, 64 * MiB, hipMemcpyHostToDevice),
                           "H2D"))
                return 1;
        }
        pdx_hip_host_free(host);
    }

    len = POOL;
    timed(&b, &r[0], launch_copy, &len);
    if (make_lists(&b, &lb, 1, 1, 16384, 65536)) {
        /* (b) is a page map of one pool into the other: src pages in order */
        for (uint32_t i = 0; i < 16384; i++)
            lb.host[i].src = (uintptr_t)b.src + (uint64_t)i * 65536;
        if (check_hip(hipMemcpy(lb.dev, lb.host, 16384 * sizeof(pdx_hip_run_t),
                                hipMemcpyHostToDevice), "run list")) {
            if (timed(&b, &r[1], launch_gather, &lb))
                verified = verify_pages(&lb, 65536);
            timed(&b, &r[2], launch_copies, &lb);
        }
    }
    if (make_lists(&b, &ld, REQUESTS, 61, 128, 36864))
        timed(&b, &r[3], launch_gather, &ld);
    if (make_lists(&b, &le, REQUESTS, 160, 128, 2048))
        timed(&b, &r[4], launch_gather, &le);

    print_table(r, 5, where);
    printf(" (b)/(a) %.3f  (d)/(a) %.3f  (e)/(a) %.3f  (c)/(a) %.3f   target (b)/(a) >= 0.90: %s"
           "   (b) pages checked: %s\n",
           gbps(&r[1]) / gbps(&r[0]), gbps(&r[3]) / gbps(&r[0]), gbps(&r[4]) / gbps(&r[0]),
           gbps(&r[2]) / gbps(&r[0]), gbps(&r[1]) >= 0.9 * gbps(&r[0]) ? "met" : "NOT met",
           verified ? "64 of 64 equal" : "FAILED");
    printf(" per request: (d) %.1f us for %.1f MB, (e) %.1f us for %.1f MB\n",
           r[3].ms * 1000 / (r[3].iters * REQUESTS), r[3].bytes / REQUESTS / 1e6,
           r[4].ms * 1000 / (r[4].iters * REQUESTS), r[4].bytes / REQUESTS / 1e6);

    hipStreamSynchronize((hipStream_t)b.stream);
    free_lists(&le);
    free_lists(&ld);
    free_lists(&lb);
    hipEventDestroy(b.stop);
    hipEventDestroy(b.start);
    pdx_hip_stream_destroy(b.stream);
    pdx_hip_device_free(b.src);
    free(b.scratch);
    if (opened)
        pdx_hip_ipc_close(opened);
    pdx_hip_device_free(own);
    return r[0].ok && r[1].ok && r[2].ok && r[3].ok && r[4].ok && verified ? 0 : 1;
}

/* The decode: export 1 GiB, run the prefill, wait for it. */
static int decode(const char *iters)
{
    char *argv[] = {"/proc/self/exe", "--prefill", "-n", (char *)iters, NULL};
    pdx_hip_ipc_handle_t h;
    void *pool = NULL;
    int rc, status = -1;
    pid_t pid;

    if (pdx_hip_set_device(0) != PDX_OK || pdx_hip_device_alloc(POOL, &pool) != PDX_OK ||
        !check_hip(hipMemset(pool, 0, POOL), "hipMemset") ||
        pdx_hip_ipc_export(pool, POOL, &h) != PDX_OK)
        return 1;
    rc = spawn_self(argv, &h, sizeof(h), &pid);
    if (rc != 0) {
        fprintf(stderr, "bench_ipc: the prefill process with the handle: %s\n", strerror(rc));
        return 1;
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    pdx_hip_device_free(pool);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
    const char *iters = "20";
    bool is_prefill = false;

    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--prefill") == 0) {
            is_prefill = true;
        } else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0) {
            iters = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_ipc [-n iterations]\n");
            return 2;
        }
    }
    return is_prefill ? prefill((uint32_t)atoi(iters)) : decode(iters);
}
