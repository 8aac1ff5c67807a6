/*
 * hip/'s intra-node primitives on a machine with a GPU: gather copies (the
 * kernel, the bounded kernel over lists in pinned memory, and one copy per
 * run) against a host reference, and IPC handles in one process and across
 * two.
 *
 * A plain C program (gpu_check.h); run through tests/gpu/run.sh. IPC across
 * processes: the program runs itself again (posix_spawn of /proc/self/exe
 * --ipc-child; never fork() once the runtime started) as the opener,
 * handing it handles on a pipe.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "hip/hip_api.h"
#include "gpu_check.h"
#include "spawn_self.h"

#define MiB (1024ull * 1024)

/* ---------------------------------------------------- (e) gather copies */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    return pdx_xorshift64(&rng_state);
}

/* Byte i of a test pattern. */
static unsigned char pattern(uint64_t i, unsigned seed)
{
    return (unsigned char)(i * 131 + (i >> 9) * 7 + seed);
}

/*
 * nruns random runs from [0, src_len) to [0, dst_len): lengths 1 B to
 * max_len (log-uniform), destinations in order with random gaps (no two
 * overlap), offsets misaligned at random, half of them congruent modulo 16
 * (the kernel's 16-byte path). Offsets only: the caller adds the bases.
 * Returns how many runs fit.
 */
static uint32_t random_runs(pdx_hip_run_t *runs, uint32_t nruns, uint64_t src_len,
                            uint64_t dst_len, uint64_t max_len)
{
    uint64_t at = 0;
    uint32_t i;

    for (i = 0; i < nruns; i++) {
        unsigned bits = (unsigned)(rng() % 64);
        uint64_t len = 1 + rng() % PDX_MIN(max_len, (1ull << (bits * 18 / 63)) + 1);
        uint64_t src = rng() % (src_len - len);
        uint64_t dst = at + rng() % 64;

        if (rng() % 2)
            dst += (src - dst) & 15; /* same address modulo 16 */
        if (dst + len > dst_len)
            break;
        runs[i] = (pdx_hip_run_t){.src = src, .dst = dst, .len = len};
        at = dst + len;
    }
    return i;
}

/* Copy runs (offsets) from src to dst through the gather kernel (kernel) or
 * one copy per run, and compare dst with the host's reference. */
static void gather_case(const char *name, bool kernel, void *stream, void *done,
                        unsigned char *dev_src, unsigned char *dev_dst, const unsigned char *host_src,
                        unsigned char *ref, unsigned char *back, uint64_t dst_len, pdx_hip_run_t *runs, uint32_t nruns, void *runs_dev,
                        pdx_hip_run_t *runs_pinned)
{
    uint64_t bytes = 0, polls, t0, bad = 0;
    pdx_status_t st;

    memset(ref, 0, dst_len);
    for (uint32_t i = 0; i < nruns; i++) {
        memcpy(ref + runs[i].dst, host_src + runs[i].src, runs[i].len);
        bytes += runs[i].len;
        runs_pinned[i] = (pdx_hip_run_t){.src = (uintptr_t)dev_src + runs[i].src,
                                         .dst = (uintptr_t)dev_dst + runs[i].dst,
                                         .len = runs[i].len};
    }
    CHECK(hipMemset(dev_dst, 0, dst_len) == hipSuccess, "hipMemset");
    t0 = pdx_now_ns();
    if (kernel) {
        st = pdx_hip_runs_upload_async(stream, runs_dev, runs_pinned, nruns);
        CHECK(st == PDX_OK, "%s: runs_upload: %s", name, pdx_status_str(st));
        st = pdx_hip_gather_async(stream, runs_dev, nruns);
    } else {
        st = pdx_hip_copy_runs_async(stream, runs_pinned, nruns);
    }
    CHECK(st == PDX_OK, "%s: %s", name, pdx_status_str(st));
    CHECK(pdx_hip_event_record(done, stream) == PDX_OK, "%s: event_record", name);
    st = wait_event(done, 20000, &polls);
    CHECK(st == PDX_OK, "%s: completes: %s", name, pdx_status_str(st));
    CHECK(hipMemcpy(back, dev_dst, dst_len, hipMemcpyDeviceToHost) == hipSuccess, "D2H");
    for (uint64_t i = 0; i < dst_len; i++)
        bad += back[i] != ref[i];
    CHECK(bad == 0, "%s: %llu of %llu bytes differ from the host's reference", name,
          (unsigned long long)bad, (unsigned long long)dst_len);
    printf("%s: %u runs, %llu bytes, %.2f ms with the upload, %s\n", name, nruns,
           (unsigned long long)bytes, (double)(pdx_now_ns() - t0) / 1e6,
           bad ? "WRONG" : "byte for byte");
}

static void test_gather(void)
{
    const uint64_t src_len = 64 * MiB, dst_len = 160 * MiB;
    const uint32_t max_runs = 8192;
    unsigned char *host_src = malloc(src_len), *ref = malloc(dst_len), *back = malloc(dst_len);
    pdx_hip_run_t *runs = calloc(max_runs, sizeof(*runs)), *pinned = NULL;
    void *dev_src = NULL, *dev_dst = NULL, *runs_dev = NULL, *stream = NULL, *done = NULL;
    bool kernel = pdx_hip_gather_supported();
    uint32_t n;
    pdx_status_t st;

    printf("-- (e) gather copies (kernel in this build: %s)\n", kernel ? "yes" : "no");
    CHECK(host_src && ref && back && runs, "host memory");
    CHECK(hipMalloc(&dev_src, src_len) == hipSuccess, "hipMalloc src");
    CHECK(hipMalloc(&dev_dst, dst_len) == hipSuccess, "hipMalloc dst");
    CHECK(pdx_hip_device_alloc(max_runs * sizeof(*runs), &runs_dev) == PDX_OK, "run list");
    CHECK(pdx_hip_host_alloc(max_runs * sizeof(*runs), (void **)&pinned) == PDX_OK,
          "pinned run list");
    CHECK(pdx_hip_stream_create(&stream) == PDX_OK, "stream_create");
    CHECK(pdx_hip_event_create(&done) == PDX_OK, "event_create");
    if (!host_src || !ref || !back || !runs || !dev_src || !dev_dst || !runs_dev || !pinned ||
        !stream || !done) {
        printf("gather: setup failed, skipping (e)\n");
        goto out;
    }
    for (uint64_t i = 0; i < src_len; i++)
        host_src[i] = pattern(i, 1);
    CHECK(hipMemcpy(dev_src, host_src, src_len, hipMemcpyHostToDevice) == hipSuccess, "H2D");

    if (!kernel) {
        st = pdx_hip_gather_async(stream, runs_dev, 1);
        CHECK(st == PDX_ERR_UNSUPPORTED, "no kernel: gather says %s", pdx_status_str(st));
    } else {
        /* thousands of runs of 1 B .. 256 KiB */
        n = random_runs(runs, max_runs, src_len, dst_len, 256 * 1024);
        CHECK(n >= 2000, "%u random runs fit", n);
        gather_case("gather, random runs", true, stream, done, dev_src, dev_dst, host_src, ref,
                    back, dst_len, runs, n, runs_dev, pinned);
        /* small runs only: many per warp */
        n = random_runs(runs, max_runs, src_len, dst_len, 64);
        gather_case("gather, runs of 1-64 B", true, stream, done, dev_src, dev_dst, host_src,
                    ref, back, dst_len, runs, n, runs_dev, pinned);
        /* one long run: many workers share it; then one misaligned */
        runs[0] = (pdx_hip_run_t){.src = 0, .dst = 0, .len = 48 * MiB};
        gather_case("gather, one 48 MiB run", true, stream, done, dev_src, dev_dst, host_src,
                    ref, back, dst_len, runs, 1, runs_dev, pinned);
        runs[0] = (pdx_hip_run_t){.src = 3, .dst = 1 * MiB + 1, .len = 32 * MiB + 5};
        runs[1] = (pdx_hip_run_t){.src = 40 * MiB, .dst = 40 * MiB + 8, .len = 0};
        runs[2] = (pdx_hip_run_t){.src = 40 * MiB + 6, .dst = 40 * MiB + 2, .len = 9 * MiB + 3};
        gather_case("gather, long runs in 2- and 4-byte words and one of 0 B", true, stream,
                    done, dev_src, dev_dst, host_src, ref, back, dst_len, runs, 3,
                    runs_dev, pinned);
        /* 64 KiB pages to a random page map, as a transport moves them */
        for (uint32_t i = 0; i < 1024; i++)
            runs[i] = (pdx_hip_run_t){.src = (uint64_t)i * 65536, .dst = 0, .len = 65536};
        {
            uint32_t perm[2048];

            for (uint32_t i = 0; i < 2048; i++)
                perm[i] = i;
            for (uint32_t i = 2047; i > 0; i--) {
                uint32_t j = (uint32_t)(rng() % (i + 1)), t = perm[i];

                perm[i] = perm[j];
                perm[j] = t;
            }
            for (uint32_t i = 0; i < 1024; i++)
                runs[i].dst = (uint64_t)perm[i] * 65536;
        }
        gather_case("gather, 1024 pages of 64 KiB to a random page map", true, stream, done,
                    dev_src, dev_dst, host_src, ref, back, dst_len, runs, 1024,
                    runs_dev, pinned);
    }
    /* the per-run copies over the same kind of list */
    n = random_runs(runs, 2000, src_len, dst_len, 256 * 1024);
    gather_case("copy_runs, random runs", false, stream, done, dev_src, dev_dst, host_src, ref,
                back, dst_len, runs, n, runs_dev, pinned);
    CHECK(pdx_hip_gather_async(stream, NULL, 4) == PDX_ERR_INVALID, "gather without a list");
    CHECK(pdx_hip_copy_runs_async(stream, runs, 0) == PDX_ERR_INVALID, "copy_runs of none");

out:
    if (stream)
        hipStreamSynchronize((hipStream_t)stream);
    pdx_hip_event_destroy(done);
    pdx_hip_stream_destroy(stream);
    pdx_hip_host_free(pinned);
    pdx_hip_device_free(runs_dev);
    hipFree(dev_dst);
    hipFree(dev_src);
    free(runs);
    free(back);
    free(ref);
    free(host_src);
}

/*
 * The bounded gather as tcp's staging uses it: lists of pieces of up to
 * 256 KiB between GPU memory and a pinned ring, the list itself in pinned
 * host memory (read by the kernel over the bus), the grid sized by a bound
 * that is exact, smaller than the longest run (fewer workers still copy it
 * all) or generous.
 */
static void test_gather_bounded(void)
{
    const uint64_t dev_len = 32 * MiB, ring_len = 16 * MiB;
    const uint32_t n = 64;
    unsigned char *ring = NULL, *host = malloc(dev_len), *back = malloc(dev_len);
    pdx_hip_run_t *list = NULL;
    void *dev = NULL, *stream = NULL, *done = NULL;
    static const uint64_t bounds[] = {0, 4096, 1u << 30};

    printf("-- (e) bounded gather, list in pinned host memory\n");
    if (!pdx_hip_gather_supported()) {
        CHECK(pdx_hip_gather_bounded_async(NULL, (const pdx_hip_run_t *)&n, 1, 1) ==
                  PDX_ERR_UNSUPPORTED, "no kernel: the bounded gather is unsupported");
        free(host);
        free(back);
        return;
    }
    CHECK(host && back, "host memory");
    CHECK(hipMalloc(&dev, dev_len) == hipSuccess, "hipMalloc");
    CHECK(pdx_hip_host_alloc(ring_len, (void **)&ring) == PDX_OK, "pinned ring");
    CHECK(pdx_hip_host_alloc(n * sizeof(*list), (void **)&list) == PDX_OK, "pinned list");
    CHECK(pdx_hip_stream_create(&stream) == PDX_OK, "stream_create");
    CHECK(pdx_hip_event_create(&done) == PDX_OK, "event_create");
    if (!host || !back || !dev || !ring || !list || !stream || !done)
        goto out;
    for (uint64_t i = 0; i < dev_len; i++)
        host[i] = pattern(i, 5);
    CHECK(hipMemcpy(dev, host, dev_len, hipMemcpyHostToDevice) == hipSuccess, "H2D");
    for (int b = 0; b < 3; b++) {
        for (int dir = 0; dir < 2; dir++) { /* 0: GPU -> ring, 1: ring -> GPU */
            uint64_t at = 0, longest = 0, bad = 0, polls;
            pdx_status_t st;

            memset(ring, 0, ring_len);
            for (uint32_t i = 0; i < n; i++) {
                uint64_t len = 1 + rng() % (i % 8 ? 40960 : 262144);
                uint64_t off = (rng() % (dev_len / 65536 - 8)) * 65536 + rng() % 64;

                list[i] = dir ? (pdx_hip_run_t){.src = (uintptr_t)ring + at,
                                                .dst = (uintptr_t)dev + (uint64_t)i * 262144 + 8,
                                                .len = len}
                              : (pdx_hip_run_t){.src = (uintptr_t)dev + off,
                                                .dst = (uintptr_t)ring + at, .len = len};
                if (dir)
                    for (uint64_t j = 0; j < len; j++)
                        ring[at + j] = pattern(at + j, 9);
                longest = PDX_MAX(longest, len);
                at += len + rng() % 32;
            }
            st = pdx_hip_gather_bounded_async(stream, list, n, bounds[b] ? bounds[b] : longest);
            CHECK(st == PDX_OK, "bounded gather: %s", pdx_status_str(st));
            CHECK(pdx_hip_event_record(done, stream) == PDX_OK, "event_record");
            CHECK(wait_event(done, 20000, &polls) == PDX_OK, "bounded gather completes");
            if (dir)
                CHECK(hipMemcpy(back, dev, dev_len, hipMemcpyDeviceToHost) == hipSuccess, "D2H");
            for (uint32_t i = 0; i < n; i++) {
                const unsigned char *got = dir ? back + (list[i].dst - (uintptr_t)dev)
                                               : (const unsigned char *)(uintptr_t)list[i].dst;
                uint64_t from = dir ? list[i].src - (uintptr_t)ring : list[i].src - (uintptr_t)dev;

                for (uint64_t j = 0; j < list[i].len; j++)
                    bad += got[j] != (dir ? pattern(from + j, 9) : host[from + j]);
            }
            CHECK(bad == 0, "bounded gather (%s, bound %llu, longest %llu): %llu bytes differ",
                  dir ? "ring to GPU" : "GPU to ring",
                  (unsigned long long)(bounds[b] ? bounds[b] : longest),
                  (unsigned long long)longest, (unsigned long long)bad);
            printf("bounded gather, %s, %u runs up to %llu B, bound %llu: %s\n",
                   dir ? "ring to GPU" : "GPU to ring", n, (unsigned long long)longest,
                   (unsigned long long)(bounds[b] ? bounds[b] : longest),
                   bad ? "WRONG" : "byte for byte");
            if (dir) /* put the source back for the next round */
                CHECK(hipMemcpy(dev, host, dev_len, hipMemcpyHostToDevice) == hipSuccess, "H2D");
        }
    }
    CHECK(pdx_hip_gather_bounded_async(stream, NULL, 4, 1) == PDX_ERR_INVALID,
          "bounded gather without a list");
out:
    if (stream)
        hipStreamSynchronize((hipStream_t)stream);
    pdx_hip_event_destroy(done);
    pdx_hip_stream_destroy(stream);
    pdx_hip_host_free(list);
    pdx_hip_host_free(ring);
    hipFree(dev);
    free(back);
    free(host);
}

/* ------------------------------------------------------------ (f) IPC */

#define IPC_ALLOC   (64 * MiB)
#define IPC_R1_OFF  (MiB + 5)
#define IPC_R1_LEN  (3 * MiB + 7)
#define IPC_R2_OFF  (8 * MiB)
#define IPC_R2_LEN  MiB

static void test_ipc_same_process(void)
{
    pdx_hip_ipc_handle_t h, h2, bad;
    pdx_hip_ipc_stats_t s0, s;
    void *dev = NULL, *gone = NULL, *pinned = NULL, *managed = NULL;
    void *p = NULL, *p2 = NULL, *q = (void *)(uintptr_t)0x5a5a;
    struct stat sb;
    pdx_status_t st;

    printf("-- (f) IPC handles in one process\n");
    CHECK(hipMalloc(&dev, IPC_ALLOC) == hipSuccess, "hipMalloc");
    CHECK(hipMalloc(&gone, MiB) == hipSuccess, "hipMalloc");
    if (!dev || !gone)
        return;
    pdx_hip_ipc_stats(&s0);
    st = pdx_hip_ipc_export((char *)dev + IPC_R1_OFF, IPC_R1_LEN, &h);
    CHECK(st == PDX_OK, "export: %s", pdx_status_str(st));
    CHECK(h.base == (uintptr_t)dev && h.offset == IPC_R1_OFF && h.len == IPC_R1_LEN &&
          h.size >= IPC_ALLOC && h.pid == (uint32_t)getpid(), "export: the exporter's view");
    CHECK(pdx_hip_ipc_handle_check(&h) == PDX_OK, "the exported handle is well formed");
    printf("exported: pid %u, GPU %s, base %#llx, size %llu, offset %llu, len %llu\n", h.pid,
           h.pci_bus_id, (unsigned long long)h.base, (unsigned long long)h.size,
           (unsigned long long)h.offset, (unsigned long long)h.len);
    st = pdx_hip_ipc_open(&h, &p);
    CHECK(st == PDX_OK && p == (char *)dev + IPC_R1_OFF, "own handle: the original pointer "
          "(%s, %p vs %p)", pdx_status_str(st), p, (void *)((char *)dev + IPC_R1_OFF));
    CHECK(pdx_hip_ipc_export((char *)dev + IPC_R2_OFF, IPC_R2_LEN, &h2) == PDX_OK, "export 2");
    st = pdx_hip_ipc_open(&h2, &p2);
    CHECK(st == PDX_OK && p2 == (char *)dev + IPC_R2_OFF, "own handle 2: %s", pdx_status_str(st));
    pdx_hip_ipc_stats(&s);
    CHECK(s.runtime_opens == s0.runtime_opens, "own handles: no runtime open");
    CHECK(s.allocations == s0.allocations + 1 && s.references == s0.references + 2,
          "own handles: one allocation, two references (%u, %u)", s.allocations, s.references);
    pdx_hip_ipc_close(p2);
    pdx_hip_ipc_close(p);
    pdx_hip_ipc_stats(&s);
    CHECK(s.allocations == s0.allocations && s.references == s0.references &&
          s.runtime_closes == s0.runtime_closes, "closed: the table is empty again");

    /* the allocation gone: freed after the export */
    CHECK(pdx_hip_ipc_export(gone, MiB, &bad) == PDX_OK, "export of a range to free");
    CHECK(hipFree(gone) == hipSuccess, "hipFree");
    st = pdx_hip_ipc_open(&bad, &q);
    CHECK(st == PDX_ERR_NOT_FOUND && q == (void *)(uintptr_t)0x5a5a,
          "own handle of a freed allocation: %s", pdx_status_str(st));

    /* a bad handle, and one of another host's GPU */
    bad = h;
    bad.magic ^= 1;
    CHECK(pdx_hip_ipc_open(&bad, &q) == PDX_ERR_PROTO, "bad magic");
    bad = h;
    bad.pid = 1;
    strcpy(bad.pci_bus_id, "00fe:ed:1f.7");
    st = pdx_hip_ipc_open(&bad, &q);
    if (stat("/sys/bus/pci/devices", &sb) == 0)
        CHECK(st == PDX_ERR_NO_DEVICE, "a GPU this machine lacks: %s", pdx_status_str(st));
    else
        CHECK(st == PDX_ERR_NOT_FOUND, "no sysfs: the runtime refuses: %s", pdx_status_str(st));
    CHECK(q == (void *)(uintptr_t)0x5a5a, "refusals leave the output");

    /* only device memory is exported */
    CHECK(hipHostMalloc(&pinned, MiB, hipHostMallocMapped) == hipSuccess, "hipHostMalloc");
    CHECK(hipMallocManaged(&managed, MiB, hipMemAttachGlobal) == hipSuccess, "managed");
    CHECK(pdx_hip_ipc_export(pinned, MiB, &bad) == PDX_ERR_INVALID, "pinned host refused");
    CHECK(pdx_hip_ipc_export(managed, MiB, &bad) == PDX_ERR_INVALID, "managed refused");
    CHECK(pdx_hip_ipc_export(dev, IPC_ALLOC + 4096, &bad) == PDX_ERR_RANGE, "past the end");
    hipFree(managed);
    hipHostFree(pinned);
    hipFree(dev);
}

static int read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t r = read(fd, (char *)buf + got, len - got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/*
 * The opener: handles R1, R2 (one allocation of the parent) and one of a
 * freed allocation on stdin. Writes pattern 2 over R1 with the gather kernel
 * (copy_runs without it) and pattern 3 over R2 with copy_runs, checks the
 * allocation is opened once, and that the freed one is refused. Exit status:
 * the number of failed checks.
 */
static int ipc_child(void)
{
    pdx_hip_ipc_handle_t h[3];
    pdx_hip_ipc_stats_t s0, s;
    pdx_hip_run_t *list = NULL;
    void *p1 = NULL, *p2 = NULL, *q = NULL, *src = NULL, *runs_dev = NULL, *stream = NULL;
    unsigned char *host = NULL;
    uint32_t n = 0;
    uint64_t at = 0;
    pdx_status_t st;

    CHECK(pdx_hip_set_device(0) == PDX_OK, "child: set_device");
    CHECK(read_full(0, h, sizeof(h)) == 0, "child: three handles on stdin");
    pdx_hip_ipc_stats(&s0);
    st = pdx_hip_ipc_open(&h[0], &p1);
    CHECK(st == PDX_OK, "child: open R1: %s", pdx_status_str(st));
    st = pdx_hip_ipc_open(&h[1], &p2);
    CHECK(st == PDX_OK, "child: open R2: %s", pdx_status_str(st));
    if (!p1 || !p2)
        goto out;
    pdx_hip_ipc_stats(&s);
    CHECK(s.runtime_opens == s0.runtime_opens + 1, "child: the allocation opened once (%llu)",
          (unsigned long long)(s.runtime_opens - s0.runtime_opens));
    CHECK(s.allocations == 1 && s.references == 2, "child: 1 allocation, 2 references (%u, %u)",
          s.allocations, s.references);
    CHECK((char *)p2 - (char *)p1 == IPC_R2_OFF - IPC_R1_OFF, "child: one mapping for both");

    CHECK(hipMalloc(&src, IPC_R1_LEN + IPC_R2_LEN) == hipSuccess, "child: hipMalloc");
    CHECK(pdx_hip_host_alloc(IPC_R1_LEN + IPC_R2_LEN, (void **)&host) == PDX_OK, "child: host");
    CHECK(pdx_hip_host_alloc(4096 * sizeof(*list), (void **)&list) == PDX_OK, "child: list");
    CHECK(pdx_hip_device_alloc(4096 * sizeof(*list), &runs_dev) == PDX_OK, "child: dev list");
    CHECK(pdx_hip_stream_create(&stream) == PDX_OK, "child: stream");
    if (!src || !host || !list || !runs_dev || !stream)
        goto out;
    for (uint64_t i = 0; i < IPC_R1_LEN; i++)
        host[i] = pattern(i, 2);
    for (uint64_t i = 0; i < IPC_R2_LEN; i++)
        host[IPC_R1_LEN + i] = pattern(i, 3);
    CHECK(hipMemcpy(src, host, IPC_R1_LEN + IPC_R2_LEN, hipMemcpyHostToDevice) == hipSuccess,
          "child: H2D");
    /* R1 in runs of 1 B .. 8 KiB, written into the parent's memory */
    while (at < IPC_R1_LEN && n < 4096) {
        uint64_t want = 1 + rng() % 8192; /* once: PDX_MIN evaluates twice */
        uint64_t len = PDX_MIN(want, IPC_R1_LEN - at);

        if (n == 4095)
            len = IPC_R1_LEN - at;
        list[n++] = (pdx_hip_run_t){.src = (uintptr_t)src + at, .dst = (uintptr_t)p1 + at,
                                    .len = len};
        at += len;
    }
    if (pdx_hip_gather_supported()) {
        CHECK(pdx_hip_runs_upload_async(stream, runs_dev, list, n) == PDX_OK, "child: upload");
        st = pdx_hip_gather_async(stream, runs_dev, n);
    } else {
        st = pdx_hip_copy_runs_async(stream, list, n);
    }
    CHECK(st == PDX_OK, "child: R1 in %u runs: %s", n, pdx_status_str(st));
    CHECK(hipStreamSynchronize((hipStream_t)stream) == hipSuccess, "child: sync");
    for (uint32_t i = 0; i < 8; i++)
        list[i] = (pdx_hip_run_t){.src = (uintptr_t)src + IPC_R1_LEN + i * (IPC_R2_LEN / 8),
                                  .dst = (uintptr_t)p2 + i * (IPC_R2_LEN / 8),
                                  .len = IPC_R2_LEN / 8};
    st = pdx_hip_copy_runs_async(stream, list, 8);
    CHECK(st == PDX_OK, "child: R2 in 8 copies: %s", pdx_status_str(st));
    CHECK(hipStreamSynchronize((hipStream_t)stream) == hipSuccess, "child: sync");

    pdx_hip_ipc_close(p1);
    pdx_hip_ipc_stats(&s);
    CHECK(s.runtime_closes == s0.runtime_closes && s.references == 1,
          "child: still open while R2 is");
    pdx_hip_ipc_close(p2);
    pdx_hip_ipc_stats(&s);
    CHECK(s.runtime_closes == s0.runtime_closes + 1 && s.allocations == 0,
          "child: closed once with its last range");
    st = pdx_hip_ipc_open(&h[0], &p1);
    CHECK(st == PDX_OK, "child: opened again: %s", pdx_status_str(st));
    if (st == PDX_OK)
        pdx_hip_ipc_close(p1);
    st = pdx_hip_ipc_open(&h[2], &q);
    CHECK(st == PDX_ERR_NOT_FOUND && !q, "child: a freed allocation is refused: %s",
          pdx_status_str(st));

out:
    pdx_hip_stream_destroy(stream);
    pdx_hip_device_free(runs_dev);
    pdx_hip_host_free(list);
    pdx_hip_host_free(host);
    hipFree(src);
    printf("ipc child: %d checks passed, %d failed\n", passed, failed);
    return failed > 100 ? 100 : failed;
}

static void test_ipc_two_processes(void)
{
    pdx_hip_ipc_handle_t h[3];
    char *argv[] = {"/proc/self/exe", "--ipc-child", NULL};
    unsigned char *back = malloc(IPC_ALLOC);
    void *dev = NULL, *gone = NULL;
    uint64_t bad1 = 0, bad2 = 0, bad0 = 0, first0 = 0, last0 = 0;
    int status = -1, rc;
    pid_t pid = -1;

    printf("-- (f) IPC handles across two processes on GPU 0\n");
    CHECK(back && hipMalloc(&dev, IPC_ALLOC) == hipSuccess, "hipMalloc");
    CHECK(hipMalloc(&gone, MiB) == hipSuccess, "hipMalloc");
    if (!back || !dev || !gone)
        goto out;
    CHECK(hipMemset(dev, 0, IPC_ALLOC) == hipSuccess, "hipMemset");
    CHECK(pdx_hip_ipc_export((char *)dev + IPC_R1_OFF, IPC_R1_LEN, &h[0]) == PDX_OK, "export R1");
    CHECK(pdx_hip_ipc_export((char *)dev + IPC_R2_OFF, IPC_R2_LEN, &h[1]) == PDX_OK, "export R2");
    CHECK(pdx_hip_ipc_export(gone, MiB, &h[2]) == PDX_OK, "export a range to free");
    CHECK(hipFree(gone) == hipSuccess, "hipFree");
    CHECK(hipDeviceSynchronize() == hipSuccess, "sync");
    rc = spawn_self(argv, h, sizeof(h), &pid);
    CHECK(rc == 0, "the child with the handles: %s", strerror(rc));
    if (rc != 0)
        goto out;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's checks (status %#x)",
          status);
    CHECK(hipMemcpy(back, dev, IPC_ALLOC, hipMemcpyDeviceToHost) == hipSuccess, "D2H");
    for (uint64_t i = 0; i < IPC_ALLOC; i++) {
        if (i >= IPC_R1_OFF && i < IPC_R1_OFF + IPC_R1_LEN)
            bad1 += back[i] != pattern(i - IPC_R1_OFF, 2);
        else if (i >= IPC_R2_OFF && i < IPC_R2_OFF + IPC_R2_LEN)
            bad2 += back[i] != pattern(i - IPC_R2_OFF, 3);
        else if (back[i] != 0) {
            first0 = bad0++ ? first0 : i;
            last0 = i;
        }
    }
    CHECK(bad1 == 0, "R1 written by the child's gather: %llu bytes differ",
          (unsigned long long)bad1);
    CHECK(bad2 == 0, "R2 written by the child's copies: %llu bytes differ",
          (unsigned long long)bad2);
    CHECK(bad0 == 0, "nothing else written: %llu bytes differ, at offsets %#llx to %#llx (R1 "
          "is [%#llx, %#llx), R2 [%#llx, %#llx))", (unsigned long long)bad0,
          (unsigned long long)first0, (unsigned long long)last0,
          (unsigned long long)IPC_R1_OFF, (unsigned long long)(IPC_R1_OFF + IPC_R1_LEN),
          (unsigned long long)IPC_R2_OFF, (unsigned long long)(IPC_R2_OFF + IPC_R2_LEN));
    printf("ipc: the child (pid %d) wrote %llu + %llu bytes into this process's memory: %s\n",
           (int)pid, (unsigned long long)IPC_R1_LEN, (unsigned long long)IPC_R2_LEN,
           bad0 + bad1 + bad2 ? "WRONG" : "every byte as expected");
out:
    hipFree(dev);
    free(back);
}

int main(int argc, char **argv)
{
    int n = 0;
    pdx_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--ipc-child") == 0)
        return ipc_child();
    st = pdx_hip_device_count(&n);
    CHECK(st == PDX_OK && n > 0, "device_count: %s (%s)", pdx_status_str(st),
          pdx_hip_no_device_reason());
    if (st != PDX_OK)
        return gpu_check_summary();
    CHECK(pdx_hip_set_device(0) == PDX_OK, "set_device(0)");
    test_gather();
    test_gather_bounded();
    test_ipc_same_process();
    test_ipc_two_processes();
    return gpu_check_summary();
}
