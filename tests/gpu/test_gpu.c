/*
 * hip/ on a machine with a GPU: pointer classification, dmabuf export,
 * stream and event gates, staging copies, the visibility query, markers.
 * (Gather copies and IPC handles: test_gpu_ipc.c.)
 *
 * A plain C program (gpu_check.h). No kernels of its own: the GPU work is
 * copies and stream memory operations, so gcc builds it for every
 * platform. Run through tests/gpu/run.sh.
 */
#include <dirent.h>
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hip/hip_api.h"

#define MiB (1024ull * 1024)
#define GiB (1024ull * MiB)

#include "gpu_check.h"

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static int open_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

/* ------------------------------------------------------------ (a) classify */

static void test_classify(void)
{
    size_t dev_len = 64 * MiB;
    pdx_hip_ptr_t a, b;
    char *host = malloc(MiB);
    void *pinned = NULL, *managed = NULL, *dev = NULL, *again = NULL;
    pdx_status_t st;

    printf("-- (a) classification\n");
    st = pdx_hip_classify(host, MiB, &a);
    CHECK(st == PDX_OK && a.kind == PDX_HIP_MEM_PAGEABLE_HOST, "malloc: %s, kind %s",
          pdx_status_str(st), pdx_hip_mem_name(a.kind));
    CHECK(hipGetLastError() == hipSuccess, "no sticky error after classifying malloc memory");

    CHECK(hipHostMalloc(&pinned, MiB, hipHostMallocMapped) == hipSuccess, "hipHostMalloc");
    st = pdx_hip_classify((char *)pinned + 100, 1000, &a);
    CHECK(st == PDX_OK && a.kind == PDX_HIP_MEM_PINNED_HOST, "pinned: %s, kind %s",
          pdx_status_str(st), pdx_hip_mem_name(a.kind));
    printf("pinned: base %s, size %zu, id %#llx (unique %d)\n",
           a.base == (uintptr_t)pinned ? "= allocation" : "!= allocation", a.size,
           (unsigned long long)a.alloc_id, a.id_unique);
    CHECK(a.base <= (uintptr_t)pinned + 100 && a.base + a.size >= (uintptr_t)pinned + 1100,
          "pinned range covers the pointer");

    CHECK(hipMallocManaged(&managed, MiB, hipMemAttachGlobal) == hipSuccess, "hipMallocManaged");
    st = pdx_hip_classify(managed, MiB, &a);
    CHECK(st == PDX_OK && a.kind == PDX_HIP_MEM_MANAGED, "managed: %s, kind %s",
          pdx_status_str(st), pdx_hip_mem_name(a.kind));

    CHECK(hipMalloc(&dev, dev_len) == hipSuccess, "hipMalloc");
    st = pdx_hip_classify(dev, dev_len, &a);
    CHECK(st == PDX_OK && a.kind == PDX_HIP_MEM_DEVICE && a.device == 0,
          "device: %s, kind %s, device %d", pdx_status_str(st), pdx_hip_mem_name(a.kind),
          a.device);
    CHECK(a.base == (uintptr_t)dev && a.size >= dev_len, "device base %#lx size %zu",
          (unsigned long)a.base, a.size);
    printf("device: size %zu, id %#llx (unique %d)\n", a.size, (unsigned long long)a.alloc_id,
           a.id_unique);
    st = pdx_hip_classify((char *)dev + MiB + 123, 4096, &b);
    CHECK(st == PDX_OK && b.kind == PDX_HIP_MEM_DEVICE, "sub-pointer: %s", pdx_status_str(st));
    CHECK(b.base == a.base && b.size == a.size, "sub-pointer: same allocation");
    CHECK(b.alloc_id == a.alloc_id, "sub-pointer: same identity %#llx vs %#llx",
          (unsigned long long)b.alloc_id, (unsigned long long)a.alloc_id);
    st = pdx_hip_classify((char *)dev + a.size - 10, 100, &b);
    CHECK(st == PDX_ERR_RANGE, "a range past the allocation end: %s", pdx_status_str(st));

    /* Freed and allocated again at the same address: a new identity where
     * the platform can tell. */
    CHECK(hipFree(dev) == hipSuccess, "hipFree");
    CHECK(hipMalloc(&again, dev_len) == hipSuccess, "hipMalloc again");
    st = pdx_hip_classify(again, dev_len, &b);
    CHECK(st == PDX_OK && b.kind == PDX_HIP_MEM_DEVICE, "reallocated: %s", pdx_status_str(st));
    if (again != dev) {
        printf("reallocated: another address (%p, was %p): identity check not applicable\n",
               again, dev);
    } else if (!a.id_unique || !b.id_unique) {
        printf("reallocated at the same address: the platform has no buffer id, identity "
               "cannot tell (id %#llx)\n", (unsigned long long)b.alloc_id);
    } else {
        CHECK(b.alloc_id != a.alloc_id, "reallocated at the same address: id %#llx, was %#llx",
              (unsigned long long)b.alloc_id, (unsigned long long)a.alloc_id);
        printf("reallocated at the same address: id %#llx, was %#llx\n",
               (unsigned long long)b.alloc_id, (unsigned long long)a.alloc_id);
    }
    hipFree(again);
    hipFree(managed);
    hipHostFree(pinned);
    free(host);
}

/* ------------------------------------------------------------- (b) dmabuf */

/* size and exporter of a dmabuf fd from /proc/self/fdinfo. */
static int dmabuf_info(int fd, unsigned long long *size_p, char *exp, size_t exp_len)
{
    char path[64], line[256];
    FILE *f;
    int have_size = 0, have_exp = 0;

    snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "size: %llu", size_p) == 1)
            have_size = 1;
        if (strncmp(line, "exp_name:", 9) == 0) {
            snprintf(exp, exp_len, "%s", line + 9 + strspn(line + 9, " \t"));
            exp[strcspn(exp, "\n")] = 0;
            have_exp = 1;
        }
    }
    fclose(f);
    return have_size && have_exp ? 0 : -1;
}

static void test_dmabuf(void)
{
    static const size_t offsets[] = {0, 4096, MiB + 4096, 12345};
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t len = MiB, dev_len = 64 * MiB;
    void *dev = NULL, *pinned = NULL;
    int fd, before, after, errors = 0;
    uint64_t off;
    pdx_status_t st;
    uint64_t t0;

    printf("-- (b) dmabuf export\n");
    CHECK(hipMalloc(&dev, dev_len) == hipSuccess, "hipMalloc 64 MiB");
    for (size_t i = 0; i < PDX_ARRAY_SIZE(offsets); i++) {
        uintptr_t p = (uintptr_t)dev + offsets[i];
        uintptr_t start = p & ~(page - 1), end = (p + len + page - 1) & ~(page - 1);
        unsigned long long size = 0;
        char exp[64] = "";

        fd = -1;
        st = pdx_hip_export_dmabuf((void *)p, len, &fd, &off);
        CHECK(st == PDX_OK && fd >= 0, "export at offset %zu: %s", offsets[i],
              pdx_status_str(st));
        if (st != PDX_OK)
            continue;
#if defined(PDX_HIP_PLATFORM_NVIDIA)
        CHECK(off == p - start, "offset %zu: dmabuf offset %llu, expected %llu", offsets[i],
              (unsigned long long)off, (unsigned long long)(p - start));
#endif
        CHECK(dmabuf_info(fd, &size, exp, sizeof(exp)) == 0, "fdinfo of fd %d shows a dmabuf",
              fd);
#if defined(PDX_HIP_PLATFORM_NVIDIA)
        CHECK(size == end - start, "offset %zu: dmabuf size %llu, aligned range %llu",
              offsets[i], size, (unsigned long long)(end - start));
#else
        CHECK(size >= off + len, "offset %zu: dmabuf size %llu holds offset %llu + %zu",
              offsets[i], size, (unsigned long long)off, len);
#endif
        printf("export +%zu len %zu: fd %d, offset %llu, fdinfo size %llu (aligned range %llu), "
               "exp_name %s\n", offsets[i], len, fd, (unsigned long long)off, size,
               (unsigned long long)(end - start), exp);
        close(fd);
    }

    /* Refusals leave no fd either. */
    CHECK(hipHostMalloc(&pinned, MiB, hipHostMallocMapped) == hipSuccess, "hipHostMalloc");
    before = open_fds();
    fd = -1;
    st = pdx_hip_export_dmabuf(pinned, MiB, &fd, &off);
    CHECK(st == PDX_ERR_INVALID && fd == -1, "export of pinned host memory: %s",
          pdx_status_str(st));
    st = pdx_hip_export_dmabuf((char *)dev + dev_len - 4096, 2 * 4096, &fd, &off);
    CHECK(st == PDX_ERR_RANGE && fd == -1, "export past the allocation: %s", pdx_status_str(st));
    after = open_fds();
    CHECK(after == before, "refusals: %d fds before, %d after", before, after);

    /* 10,000 exports and closes leak nothing. */
    before = open_fds();
    t0 = pdx_now_ns();
    for (int i = 0; i < 10000; i++) {
        size_t o = ((size_t)i * 4096 * 7 + (size_t)i) % (dev_len - len);

        st = pdx_hip_export_dmabuf((char *)dev + o, len, &fd, &off);
        if (st != PDX_OK) {
            errors++;
            continue;
        }
        close(fd);
    }
    after = open_fds();
    CHECK(errors == 0, "10000 exports: %d failed", errors);
    CHECK(after == before, "10000 exports: %d fds before, %d after", before, after);
    printf("10000 exports + closes: %d errors, fds %d -> %d, %.1f us per export\n", errors,
           before, after, (double)(pdx_now_ns() - t0) / 10000 / 1000);
    hipHostFree(pinned);
    hipFree(dev);
}

/* -------------------------------------------------------------- (c) gates */

static int wait_word(volatile uint64_t *word, uint64_t value, uint64_t timeout_ms)
{
    uint64_t deadline = pdx_deadline_ns((uint32_t)timeout_ms);

    while (*word < value && pdx_now_ns() < deadline)
        pdx_cpu_relax();
    return *word >= value;
}

static void test_gates(void)
{
    size_t big = GiB, small = 4 * MiB;
    volatile uint64_t *w1 = NULL, *wa = NULL, *wb = NULL, *all[64];
    pdx_hip_words_t *pool = NULL;
    void *stream = NULL, *ev = NULL, *ev2 = NULL, *dev = NULL, *host = NULL, *host2 = NULL;
    uint64_t polls = 0, t0;
    pdx_status_t st, first;
    int n = 0, bad = 0;

    printf("-- (c) gates and copies\n");
    CHECK(pdx_hip_event_query(NULL) == PDX_ERR_INVALID, "event_query(NULL)");
    CHECK(pdx_hip_stream_create(&stream) == PDX_OK, "stream_create");
    CHECK(pdx_hip_event_create(&ev) == PDX_OK, "event_create");
    CHECK(pdx_hip_event_create(&ev2) == PDX_OK, "event_create");
    CHECK(pdx_hip_words_create(64, &pool) == PDX_OK, "words_create");
    CHECK(pdx_hip_host_alloc(big, &host) == PDX_OK, "host_alloc 1 GiB");
    CHECK(pdx_hip_host_alloc(small, &host2) == PDX_OK, "host_alloc 4 MiB");
    CHECK(hipMalloc(&dev, big) == hipSuccess, "hipMalloc 1 GiB");
    if (!stream || !ev || !ev2 || !pool || !host || !host2 || !dev) {
        printf("gates: setup failed, skipping the rest of (c)\n");
        goto out;
    }

    /* Copies: a round trip through the device keeps the bytes. */
    for (size_t i = 0; i < small; i++)
        ((unsigned char *)host)[i] = (unsigned char)(i * 7 + 3);
    memset(host2, 0, small);
    CHECK(pdx_hip_copy_async(stream, PDX_HIP_H2D, dev, host, small, ev) == PDX_OK, "H2D");
    CHECK(pdx_hip_copy_async(stream, PDX_HIP_D2H, host2, dev, small, ev) == PDX_OK, "D2H");
    st = wait_event(ev, 10000, &polls);
    CHECK(st == PDX_OK, "copy round trip completes: %s", pdx_status_str(st));
    CHECK(memcmp(host, host2, small) == 0, "copy round trip keeps the bytes");

    /* A stream gate behind 4 GiB of device-to-host copies (~tens of ms). */
    CHECK(pdx_hip_word_alloc(pool, &w1) == PDX_OK && *w1 == 0, "word_alloc");
    t0 = pdx_now_ns();
    for (int i = 0; i < 4; i++)
        CHECK(pdx_hip_copy_async(stream, PDX_HIP_D2H, host, dev, big, ev) == PDX_OK,
              "D2H 1 GiB #%d", i);
    CHECK(pdx_hip_stream_write_word(stream, w1, 42) == PDX_OK, "stream_write_word");
    CHECK(hipEventRecord((hipEvent_t)ev2, (hipStream_t)stream) == hipSuccess, "hipEventRecord");
    first = pdx_hip_event_query(ev2);
    CHECK(first == PDX_INPROGRESS, "event behind the copies is in progress: %s",
          pdx_status_str(first));
    CHECK(*w1 == 0, "the word is not written before the copies finished (%llu)",
          (unsigned long long)*w1);
    st = wait_event(ev2, 10000, &polls);
    CHECK(st == PDX_OK, "event completes: %s", pdx_status_str(st));
    CHECK(*w1 == 42, "the word is 42 once the event completed (%llu)", (unsigned long long)*w1);
    printf("stream gate: first query %s, then %llu more in progress; event done and word %llu "
           "after %.1f ms\n", pdx_status_str(first), (unsigned long long)polls,
           (unsigned long long)*w1, (double)(pdx_now_ns() - t0) / 1e6);

    /* A stream that waits for a host word, then writes another. */
    CHECK(pdx_hip_word_alloc(pool, &wa) == PDX_OK, "word_alloc a");
    CHECK(pdx_hip_word_alloc(pool, &wb) == PDX_OK, "word_alloc b");
    if (wa && wb) {
        CHECK(pdx_hip_stream_wait_word(stream, wa, 1) == PDX_OK, "stream_wait_word");
        CHECK(pdx_hip_stream_write_word(stream, wb, 7) == PDX_OK, "stream_write_word");
        CHECK(hipEventRecord((hipEvent_t)ev2, (hipStream_t)stream) == hipSuccess,
              "hipEventRecord");
        sleep_ms(50);
        CHECK(*wb == 0, "the stream waits for the host word (b = %llu)",
              (unsigned long long)*wb);
        CHECK(pdx_hip_event_query(ev2) == PDX_INPROGRESS, "event waits too");
        *wa = 1;
        CHECK(wait_word(wb, 7, 5000), "the stream went on once a >= 1 (b = %llu)",
              (unsigned long long)*wb);
        st = wait_event(ev2, 5000, &polls);
        CHECK(st == PDX_OK, "event completes after the wait: %s", pdx_status_str(st));
    }

    /* The pool: 64 words, then full, then reusable. */
    if (w1)
        pdx_hip_word_free(pool, w1);
    if (wa)
        pdx_hip_word_free(pool, wa);
    if (wb)
        pdx_hip_word_free(pool, wb);
    while (n < 64 && pdx_hip_word_alloc(pool, &all[n]) == PDX_OK) {
        for (int j = 0; j < n; j++)
            bad += all[j] == all[n];
        n++;
    }
    CHECK(n == 64 && bad == 0, "64 distinct words (%d, %d duplicates)", n, bad);
    CHECK(pdx_hip_word_alloc(pool, &w1) == PDX_ERR_FULL, "a full pool says so");
    for (int j = 0; j < n; j++)
        pdx_hip_word_free(pool, all[j]);
    CHECK(pdx_hip_word_alloc(pool, &w1) == PDX_OK, "freed words come back");
    pdx_hip_word_free(pool, w1);

out:
    if (stream)
        hipStreamSynchronize((hipStream_t)stream);
    hipFree(dev);
    pdx_hip_host_free(host2);
    pdx_hip_host_free(host);
    pdx_hip_words_destroy(pool);
    pdx_hip_event_destroy(ev2);
    pdx_hip_event_destroy(ev);
    pdx_hip_stream_destroy(stream);
}

/* --------------------------------------------------------- (d) visibility */

static void test_visibility(void)
{
    int ordering = -1;
    bool needed = true;
    pdx_status_t st;

    printf("-- (d) visibility\n");
    st = pdx_hip_rdma_write_ordering(0, &ordering);
    printf("GPU 0: RDMA write ordering attribute: %s, %d\n", pdx_status_str(st), ordering);
    st = pdx_hip_rdma_flush_needed(0, &needed);
    CHECK(st == PDX_OK, "rdma_flush_needed: %s", pdx_status_str(st));
    printf("GPU 0: flush needed: %s\n", needed ? "yes" : "no (owner ordering or wider)");
    st = pdx_hip_flush_rdma_writes();
#if defined(PDX_HIP_PLATFORM_NVIDIA)
    CHECK(st == PDX_OK, "flush_rdma_writes: %s", pdx_status_str(st));
#else
    CHECK(st == PDX_ERR_UNSUPPORTED, "flush_rdma_writes on amd: %s", pdx_status_str(st));
#endif
    printf("flush_rdma_writes: %s\n", pdx_status_str(st));
}

static void test_markers(void)
{
    pdx_status_t st = pdx_hip_markers_enable(true);

    printf("-- markers\n");
    printf("markers: %s\n", pdx_status_str(st));
    PDX_MARKER_PUSH("test_gpu");
    PDX_MARKER_PUSH_ROOM("room", 0xabcdef);
    PDX_MARKER_MARK("mark");
    PDX_MARKER_POP();
    PDX_MARKER_POP();
    CHECK(pdx_hip_markers_enable(false) == PDX_OK, "markers off");
}

int main(void)
{
    pdx_hip_identity_t id;
    int n = 0;
    pdx_status_t st;

    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("hip platform: %s\n", pdx_hip_platform_name());
    st = pdx_hip_device_count(&n);
    CHECK(st == PDX_OK && n > 0, "device_count: %s (%s)", pdx_status_str(st),
          pdx_hip_no_device_reason());
    if (st != PDX_OK)
        return gpu_check_summary();
    st = pdx_hip_device_identity(0, &id);
    CHECK(st == PDX_OK && id.pci_bus_id[0], "device_identity: %s", pdx_status_str(st));
    CHECK(st != PDX_OK || id.name[0], "device_identity: no product name");
    printf("%d GPU(s); GPU 0: %s, PCI %s, NUMA node %d, hive %#llx (%s)\n", n, id.name,
           id.pci_bus_id, id.numa_node, (unsigned long long)id.hive_id, id.source);
    CHECK(pdx_hip_set_device(0) == PDX_OK, "set_device(0)");

    test_classify();
    test_dmabuf();
    test_gates();
    test_visibility();
    test_markers();
    return gpu_check_summary();
}
