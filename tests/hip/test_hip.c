/*
 * hip/ without a GPU: the layer must say why there is none, call all memory
 * host memory without crashing or leaving a sticky runtime error, refuse
 * dmabuf export cleanly without leaking fds, keep markers off, and reject
 * bad arguments. The GPU paths are tested by tests/gpu/test_gpu.c on a
 * machine with a GPU; here a present GPU makes the no-GPU tests skip.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "hip/hip_api.h"
#include "proc_usage.h"

#if defined(PDX_HIP_PLATFORM_NONE)
#define NO_GPU_STATUS PDX_ERR_UNSUPPORTED /* no runtime at all */
#else
#define NO_GPU_STATUS PDX_ERR_NO_DEVICE
#endif

/* Skip when the runtime sees a GPU: these tests are about having none. */
static void need_no_gpu(void)
{
    int n = -1;

    if (pdx_hip_device_count(&n) == PDX_OK)
        cr_skip_test("%d GPU(s) present: tests/gpu covers the GPU paths", n);
}

Test(hip, platform_name)
{
    const char *name = pdx_hip_platform_name();

    cr_assert_not_null(name);
#if defined(PDX_HIP_PLATFORM_AMD)
    cr_expect_str_eq(name, "amd");
#elif defined(PDX_HIP_PLATFORM_NVIDIA)
    cr_expect_str_eq(name, "nvidia");
#else
    cr_expect_str_eq(name, "none");
#endif
}

Test(hip, no_device_says_why)
{
    uint64_t errors = pdx_log_error_count();
    int n = -1;

    need_no_gpu();
    cr_expect_eq(pdx_hip_device_count(&n), NO_GPU_STATUS);
    cr_expect_eq(n, -1, "the output is written only on success");
    cr_expect_gt(strlen(pdx_hip_no_device_reason()), 0);
    cr_log_info("no GPU: %s", pdx_hip_no_device_reason());
#if !defined(PDX_HIP_PLATFORM_NONE)
    cr_expect_not_null(strstr(pdx_hip_no_device_reason(), "no GPU"));
#endif
    /* asked once per process: the same answer again */
    cr_expect_eq(pdx_hip_device_count(&n), NO_GPU_STATUS);
    cr_expect_eq(n, -1);
    /* no GPU is not an error for pdx: logged at info, not as an error */
    cr_expect_eq(pdx_log_error_count(), errors);
    cr_expect_eq(pdx_hip_device_count(NULL), PDX_ERR_INVALID);
}

Test(hip, device_calls_without_device)
{
    pdx_hip_identity_t id = {.device = 42};

    need_no_gpu();
    cr_expect_eq(pdx_hip_device_identity(0, &id), NO_GPU_STATUS);
    cr_expect_eq(id.device, 42, "the output is written only on success");
    cr_expect_eq(pdx_hip_set_device(0), NO_GPU_STATUS);
}

static void expect_pageable(const void *p, size_t len)
{
    pdx_hip_ptr_t info = {.kind = PDX_HIP_MEM_DEVICE};
#if !defined(PDX_HIP_PLATFORM_NONE)
    /* Without a GPU the runtime answers every call, hipGetLastError
     * included, with its start-up failure: that is the baseline. */
    hipError_t baseline = hipGetLastError();
#endif

    cr_assert_eq(pdx_hip_classify(p, len, &info), PDX_OK);
    cr_expect_eq(info.kind, PDX_HIP_MEM_PAGEABLE_HOST);
    cr_expect_eq(info.device, -1);
    cr_expect_eq(info.base, (uintptr_t)p);
    cr_expect_eq(info.size, len);
    cr_expect_eq(info.alloc_id, 0);
    cr_expect_not(info.id_unique);
    cr_expect_str_eq(pdx_hip_mem_name(info.kind), "pageable host");
#if !defined(PDX_HIP_PLATFORM_NONE)
    /* the runtime's complaint about an unknown pointer does not stick */
    cr_expect_eq(hipGetLastError(), baseline);
#endif
}

Test(hip, classify_host_memory)
{
    uint64_t errors = pdx_log_error_count();
    char stack[256];
    char *heap = malloc(1 << 20);

    need_no_gpu();
    cr_assert_not_null(heap);
    expect_pageable(heap, 1 << 20);
    expect_pageable(heap + 4097, 100);
    expect_pageable(stack, sizeof(stack));
    expect_pageable(&errors, sizeof(errors));
    free(heap);
    cr_expect_eq(pdx_log_error_count(), errors, "host memory is not an error");
}

Test(hip, classify_bad_arguments)
{
    pdx_hip_ptr_t info = {.kind = PDX_HIP_MEM_MANAGED};
    uint64_t errors = pdx_log_error_count();
    char buf[16];

    cr_expect_eq(pdx_hip_classify(NULL, 16, &info), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_classify(buf, 0, &info), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_classify((void *)(uintptr_t)(UINTPTR_MAX - 8), 16, &info),
                 PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_classify(buf, sizeof(buf), NULL), PDX_ERR_INVALID);
    cr_expect_eq(info.kind, PDX_HIP_MEM_MANAGED, "the output is written only on success");
    cr_expect_eq(pdx_log_error_count(), errors + 4, "each refusal is logged once");
}

Test(hip, dmabuf_refused_without_leaking_fds)
{
    char *heap = malloc(1 << 16);
    int fd = -7, before, after, n = 0;
    uint64_t off = 77;
    pdx_status_t st;

    need_no_gpu();
    cr_assert_not_null(heap);
    (void)pdx_hip_device_count(&n); /* the runtime's own start-up is not a leak */
    before = proc_open_fds();
    for (int i = 0; i < 200; i++) {
        st = pdx_hip_export_dmabuf(heap, 1 << 16, &fd, &off);
        cr_assert(st == PDX_ERR_UNSUPPORTED || st == PDX_ERR_NO_DEVICE,
                  "export without a GPU: %s", pdx_status_str(st));
    }
    cr_expect_eq(fd, -7, "the outputs are written only on success");
    cr_expect_eq(off, 77);
    cr_expect_eq(pdx_hip_export_dmabuf(NULL, 4096, &fd, &off) < 0, 1);
    cr_expect_eq(pdx_hip_export_dmabuf(heap, 4096, NULL, &off) < 0, 1);
    after = proc_open_fds();
    cr_expect_eq(after, before, "%d fds open before, %d after", before, after);
    free(heap);
}

Test(hip, markers_are_noops)
{
    pdx_status_t st = pdx_hip_markers_enable(true);

    /* no roctx here (nor NVTX on a none build): markers stay off */
    if (st == PDX_OK) {
        cr_expect(atomic_load(&pdx_hip_markers_on));
        cr_expect_eq(pdx_hip_markers_enable(false), PDX_OK);
    } else {
        cr_expect_eq(st, PDX_ERR_UNSUPPORTED);
    }
    cr_expect_not(atomic_load(&pdx_hip_markers_on));
    PDX_MARKER_PUSH("send");
    PDX_MARKER_PUSH_ROOM("room", 0x1234);
    PDX_MARKER_MARK("notify");
    PDX_MARKER_POP();
    PDX_MARKER_POP();
    /* direct calls without a backend do nothing either */
    pdx_hip_marker_push("direct");
    pdx_hip_marker_push_room("direct", 1);
    pdx_hip_marker_mark("direct");
    pdx_hip_marker_pop();
    pdx_hip_marker_pop();
    cr_expect_eq(pdx_hip_markers_enable(false), PDX_OK);
}

Test(hip, event_query_null_is_invalid)
{
    cr_expect_eq(pdx_hip_event_query(NULL), PDX_ERR_INVALID);
}

Test(hip, gpu_objects_need_a_gpu)
{
    pdx_hip_words_t *pool = (pdx_hip_words_t *)(uintptr_t)1;
    void *p = (void *)(uintptr_t)1;

    need_no_gpu();
    cr_expect_eq(pdx_hip_words_create(64, &pool), NO_GPU_STATUS);
    cr_expect_eq(pool, (pdx_hip_words_t *)(uintptr_t)1);
    cr_expect_eq(pdx_hip_host_alloc(4096, &p), NO_GPU_STATUS);
    cr_expect_eq(pdx_hip_stream_create(&p), NO_GPU_STATUS);
    cr_expect_eq(pdx_hip_event_create(&p), NO_GPU_STATUS);
    cr_expect_eq(pdx_hip_device_alloc(4096, &p), NO_GPU_STATUS);
    cr_expect_eq(p, (void *)(uintptr_t)1, "the outputs are written only on success");
    /* no fill kernel is built for amd; none has no GPU runtime */
    cr_expect_eq(pdx_hip_fill64_async(NULL, p, 1, 0, 1), PDX_ERR_UNSUPPORTED);
    /* destroy functions accept NULL */
    pdx_hip_device_free(NULL);
    pdx_hip_words_destroy(NULL);
    pdx_hip_host_free(NULL);
    pdx_hip_stream_destroy(NULL);
    pdx_hip_event_destroy(NULL);
}

Test(hip, bad_arguments)
{
    char buf[64] = {0};

#if !defined(PDX_HIP_PLATFORM_NONE)
    cr_expect_eq(pdx_hip_words_create(0, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_host_alloc(0, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_copy_async(NULL, PDX_HIP_H2D, buf, buf, sizeof(buf), NULL),
                 PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_stream_write_word(NULL, NULL, 1), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_stream_wait_word(NULL, NULL, 1), PDX_ERR_INVALID);
#else
    cr_expect_eq(pdx_hip_copy_async(NULL, PDX_HIP_H2D, buf, buf, sizeof(buf), NULL),
                 PDX_ERR_UNSUPPORTED);
#endif
}

Test(hip, visibility)
{
    bool needed = false;
    int ordering = -1;

#if defined(PDX_HIP_PLATFORM_AMD)
    /* no ordering attribute on amd: the engine always flushes */
    cr_expect_eq(pdx_hip_rdma_flush_needed(0, &needed), PDX_OK);
    cr_expect(needed);
    cr_expect_eq(pdx_hip_rdma_write_ordering(0, &ordering), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(pdx_hip_flush_rdma_writes(), PDX_ERR_UNSUPPORTED);
#else
    need_no_gpu();
    cr_expect_lt(pdx_hip_rdma_flush_needed(0, &needed), 0);
    cr_expect_not(needed);
    cr_expect_lt(pdx_hip_rdma_write_ordering(0, &ordering), 0);
#endif
    cr_expect_eq(ordering, -1);
    cr_expect_eq(pdx_hip_rdma_flush_needed(0, NULL) < 0, 1);
}

/* ------------------------------------------------------------ IPC handles */

#if defined(PDX_HIP_PLATFORM_NVIDIA)
#define THIS_PLATFORM PDX_HIP_IPC_NVIDIA
#define OTHER_PLATFORM PDX_HIP_IPC_AMD
#else
#define THIS_PLATFORM PDX_HIP_IPC_AMD
#define OTHER_PLATFORM PDX_HIP_IPC_NVIDIA
#endif

/* A well-formed handle of a process that is not this one. */
static pdx_hip_ipc_handle_t good_handle(void)
{
    pdx_hip_ipc_handle_t h;

    memset(&h, 0, sizeof(h));
    h.magic = PDX_HIP_IPC_MAGIC;
    h.version = PDX_HIP_IPC_VERSION;
    h.platform = THIS_PLATFORM;
    h.pid = 1;
    h.nonce = 0x1234567890abcdefull;
    h.alloc_id = 77;
    h.base = 0x7f0000000000ull;
    h.size = 1 << 30;
    h.offset = 4096;
    h.len = 65536;
    strcpy(h.pci_bus_id, "0000:c1:00.0");
    memset(h.runtime, 0xab, sizeof(h.runtime));
    return h;
}

Test(hip, ipc_handle_layout)
{
    pdx_hip_ipc_handle_t h = good_handle();
    unsigned char bytes[PDX_HIP_IPC_HANDLE_BYTES];
    pdx_hip_ipc_handle_t back;

    cr_expect_eq(sizeof(pdx_hip_ipc_handle_t), 160);
    cr_expect_eq(offsetof(pdx_hip_ipc_handle_t, pid), 8);
    cr_expect_eq(offsetof(pdx_hip_ipc_handle_t, base), 32);
    cr_expect_eq(offsetof(pdx_hip_ipc_handle_t, offset), 48);
    cr_expect_eq(offsetof(pdx_hip_ipc_handle_t, pci_bus_id), 64);
    cr_expect_eq(offsetof(pdx_hip_ipc_handle_t, runtime), 96);
    /* carried as bytes: "PDXI" first, the runtime's handle last */
    memcpy(bytes, &h, sizeof(bytes));
    cr_expect_eq(memcmp(bytes, "PDXI", 4), 0);
    cr_expect_eq(bytes[96], 0xab);
    cr_expect_eq(bytes[159], 0xab);
    memcpy(&back, bytes, sizeof(back));
    cr_expect_eq(pdx_hip_ipc_handle_check(&back), PDX_OK);
    cr_expect_eq(memcmp(&back, &h, sizeof(h)), 0);
}

/* Spoil one field of h the way case i says; its name and expected status. */
static const char *spoil(int i, pdx_hip_ipc_handle_t *h, pdx_status_t *st_p)
{
    *st_p = PDX_ERR_PROTO;
    switch (i) {
    case 0: h->magic = 0x12345678; return "magic";
    case 1: h->magic = 0x50445849; return "magic byte-swapped";
    case 2: h->version = 2; *st_p = PDX_ERR_VERSION; return "version";
    case 3: h->platform = 3; return "platform";
    case 4: h->reserved = 1; return "reserved";
    case 5: h->pid = 0; return "pid 0";
    case 6: h->base = 0; return "base 0";
    case 7: h->len = 0; return "len 0";
    case 8: h->offset = h->size - 100; return "range past the end";
    case 9: h->offset = h->size + 1; return "offset past the size";
    case 10: h->offset = 8; h->len = UINT64_MAX - 4; return "offset + len wraps";
    case 11: h->base = UINT64_MAX - 4096; return "base + size wraps";
    case 12: memset(h->pci_bus_id, '1', sizeof(h->pci_bus_id)); return "bus id unterminated";
    case 13: h->pci_bus_id[0] = 0; return "bus id empty";
    case 14: strcpy(h->pci_bus_id, "gpu0"); return "bus id garbage";
    case 15: strcpy(h->pci_bus_id, "0000:c1:00.0x"); return "bus id trailing bytes";
    case 16: strcpy(h->pci_bus_id, "0000:c1:20.0"); return "bus id device 0x20";
    default: return NULL;
    }
}

Test(hip, ipc_handle_check_refuses_bad_fields)
{
    void *p = (void *)(uintptr_t)0x5a5a;
    const char *what;
    pdx_status_t st;

    cr_expect_eq(pdx_hip_ipc_handle_check(NULL), PDX_ERR_INVALID);
    for (int i = 0;; i++) {
        pdx_hip_ipc_handle_t h = good_handle();
        uint64_t errors = pdx_log_error_count();

        what = spoil(i, &h, &st);
        if (!what)
            break;
        cr_expect_eq(pdx_hip_ipc_handle_check(&h), st, "%s: check", what);
        cr_expect_eq(pdx_log_error_count(), errors + 1, "%s: logged once", what);
        /* open refuses it the same way, before any runtime call */
        cr_expect_eq(pdx_hip_ipc_open(&h, &p), st, "%s: open", what);
        cr_expect_eq(p, (void *)(uintptr_t)0x5a5a, "%s: the output is written only on success",
                     what);
    }
}

Test(hip, ipc_without_gpu)
{
    pdx_hip_ipc_handle_t h = good_handle(), out = good_handle();
    pdx_hip_ipc_stats_t stats = {.allocations = 9};
    void *p = (void *)(uintptr_t)0x5a5a;
    char *heap = malloc(1 << 16);
    uint64_t errors;

    need_no_gpu();
    cr_assert_not_null(heap);
    /* a good handle cannot be opened without a GPU */
    cr_expect_eq(pdx_hip_ipc_open(&h, &p), NO_GPU_STATUS);
    cr_expect_eq(pdx_hip_ipc_open(&h, NULL) < 0, 1);
#if !defined(PDX_HIP_PLATFORM_NONE)
    /* a handle of the other GPU platform is refused before asking for a GPU */
    h.platform = OTHER_PLATFORM;
    cr_expect_eq(pdx_hip_ipc_open(&h, &p), PDX_ERR_UNSUPPORTED);
    /* host memory is not device memory */
    cr_expect_eq(pdx_hip_ipc_export(heap, 1 << 16, &out), PDX_ERR_INVALID);
#else
    cr_expect_eq(pdx_hip_ipc_export(heap, 1 << 16, &out), PDX_ERR_UNSUPPORTED);
#endif
    cr_expect_eq(pdx_hip_ipc_export(heap, 1 << 16, NULL) < 0, 1);
    cr_expect_eq(p, (void *)(uintptr_t)0x5a5a, "the outputs are written only on success");
    cr_expect_eq(out.alloc_id, 77);
    /* closing what was never opened is an error, and nothing else */
    errors = pdx_log_error_count();
    pdx_hip_ipc_close(heap);
    cr_expect_eq(pdx_log_error_count(), errors + 1);
    pdx_hip_ipc_close(NULL);
    pdx_hip_ipc_stats(&stats);
    cr_expect_eq(stats.runtime_opens, 0);
    cr_expect_eq(stats.runtime_closes, 0);
    cr_expect_eq(stats.allocations, 0);
    cr_expect_eq(stats.references, 0);
    free(heap);
}

Test(hip, gather_without_gpu)
{
    pdx_hip_run_t runs[2] = {{.src = 4096, .dst = 8192, .len = 16}};
    uint64_t errors;
    pdx_status_t st;

    need_no_gpu();
    cr_expect_eq(sizeof(pdx_hip_run_t), 24);
    errors = pdx_log_error_count();
    st = pdx_hip_gather_async(NULL, runs, 2);
    if (pdx_hip_gather_supported())
        cr_expect_eq(st, NO_GPU_STATUS, "%s", pdx_status_str(st));
    else
        cr_expect_eq(st, PDX_ERR_UNSUPPORTED, "no kernel in this build: %s", pdx_status_str(st));
    cr_expect_eq(pdx_log_error_count(), errors + 1, "said once why");
    errors = pdx_log_error_count();
    st = pdx_hip_gather_bounded_async(NULL, runs, 2, 16);
    if (pdx_hip_gather_supported())
        cr_expect_eq(st, NO_GPU_STATUS, "%s", pdx_status_str(st));
    else
        cr_expect_eq(st, PDX_ERR_UNSUPPORTED, "no kernel in this build: %s", pdx_status_str(st));
    cr_expect_eq(pdx_log_error_count(), errors + 1, "said once why");
#if defined(PDX_HIP_PLATFORM_AMD)
    cr_log_info("gather kernel in this build: %s", pdx_hip_gather_supported() ? "yes" : "no");
#elif defined(PDX_HIP_PLATFORM_NONE)
    cr_expect_not(pdx_hip_gather_supported());
#endif
#if !defined(PDX_HIP_PLATFORM_NONE)
    cr_expect_eq(pdx_hip_gather_async(NULL, NULL, 2), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_gather_async(NULL, runs, 0), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_gather_bounded_async(NULL, NULL, 2, 16), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_copy_runs_async(NULL, runs, 0), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_runs_upload_async(NULL, NULL, runs, 2), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_event_record(NULL, NULL), PDX_ERR_INVALID);
    cr_expect_eq(pdx_hip_stream_wait_event(NULL, NULL), PDX_ERR_INVALID);
#else
    cr_expect_eq(pdx_hip_copy_runs_async(NULL, runs, 2), PDX_ERR_UNSUPPORTED);
    cr_expect_eq(pdx_hip_event_record(NULL, NULL), PDX_ERR_UNSUPPORTED);
#endif
}
