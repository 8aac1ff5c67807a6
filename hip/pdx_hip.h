/*
 * hip/: the GPU layer of pdx (docs/architecture.md §7), the only code that includes
 * HIP, HSA or CUDA headers. This header includes none of them: streams and
 * events are opaque pointers (a hipStream_t, a hipEvent_t; on the nvidia
 * platform a cudaStream_t, a cudaEvent_t).
 *
 * Platforms (PDX_HIP_PLATFORM at configure time):
 *   amd     HIP (libamdhip64); late-bound pieces (HSA dmabuf export, roctx)
 *           are resolved with dlsym and reported as unsupported when absent
 *   nvidia  the same sources against hip/hip_nvidia.h, which maps the HIP
 *           calls pdx uses onto the CUDA runtime; driver calls are resolved
 *           through cudaGetDriverEntryPointByVersion (libcuda is never linked)
 *   none    no GPU runtime: every call answers PDX_ERR_UNSUPPORTED ("no GPU
 *           runtime in this build"), except pdx_hip_classify(), which calls
 *           all memory pageable host memory, and the markers, which are off
 *
 * Conventions: calls return a pdx_status_t; outputs (arguments ending in _p)
 * are written only on PDX_OK; the first failing call logs the error with
 * its cause (hipGetErrorName / the driver's error name). Unless a function
 * says otherwise it may be called from any thread. Device calls act on the
 * calling thread's current device: worker threads call pdx_hip_set_device()
 * once before anything else.
 */
#ifndef PDX_HIP_H
#define PDX_HIP_H

#include "pdx/pdx.h"
#include "util.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---------------------------------------------------------- device (device.c) */

/* "amd", "nvidia" or "none": the platform this build was configured for. */
const char *pdx_hip_platform_name(void);

/*
 * Number of GPUs the runtime sees (>= 1). The runtime is asked once per
 * process; later calls return the same answer. No GPU (the runtime failed
 * to start or counts none) is PDX_ERR_NO_DEVICE, logged once at info: the
 * engine then serves host memory. pdx_hip_no_device_reason() says why.
 */
pdx_status_t pdx_hip_device_count(int *count_p);

/* Why pdx_hip_device_count() found no GPU, as text; "" when it found one
 * or was not called yet. The text lives as long as the process. */
const char *pdx_hip_no_device_reason(void);

#define PDX_HIP_BUS_ID_MAX 32
#define PDX_HIP_NAME_MAX   64

typedef struct pdx_hip_identity {
    int         device;                         /* runtime ordinal */
    int         numa_node;                      /* -1: unknown (or a single node) */
    char        pci_bus_id[PDX_HIP_BUS_ID_MAX]; /* "0000:c1:00.0", lower case as in sysfs */
    char        name[PDX_HIP_NAME_MAX];         /* "AMD Instinct MI300X", "NVIDIA H200";
                                                   "" unknown */
    uint64_t    hive_id;                        /* XGMI hive; 0: none or unknown */
    const char *source;                         /* where numa_node and hive_id came
                                                   from: "rocm-smi", "rocm-smi, NUMA
                                                   node from sysfs", "sysfs" or "none"
                                                   (static text) */
} pdx_hip_identity_t;

/*
 * What pdx knows of device: its PCI bus id (from the runtime), product name,
 * NUMA node and XGMI hive.
 *   amd     rocm-smi-lib (librocm_smi64, dlopen'ed once per process, and only
 *           once the runtime has counted a GPU) for the NUMA node, the hive
 *           and the name, matched to the device by PCI bus id; a GPU
 *           rocm-smi does not list, or no usable rocm-smi (logged once at
 *           info), gives the NUMA node of /sys/bus/pci/devices/<id>/numa_node,
 *           hive 0, and the runtime's name (hipGetDeviceProperties)
 *   nvidia  the name from cudaGetDeviceProperties, the NUMA node from sysfs,
 *           hive 0
 * A name or NUMA node that cannot be read is left unknown, not an error.
 */
pdx_status_t pdx_hip_device_identity(int device, pdx_hip_identity_t *id_p);

/* Make device the calling thread's current device (worker threads). */
pdx_status_t pdx_hip_set_device(int device);

/* The calling thread's current device. */
pdx_status_t pdx_hip_current_device(int *device_p);

/* The runtime error the calling thread's last failing hip/ call logged
 * ("hipErrorInvalidHandle: invalid resource handle"), for room messages;
 * "" when none. Valid until the thread's next hip/ call. */
const char *pdx_hip_last_error(void);

/* ------------------------------------------------ pointer classification (ptr.c) */

typedef enum pdx_hip_mem {
    PDX_HIP_MEM_PAGEABLE_HOST = 0, /* unknown to the GPU runtime: malloc, stack, mmap */
    PDX_HIP_MEM_PINNED_HOST   = 1, /* hipHostMalloc / hipHostRegister */
    PDX_HIP_MEM_DEVICE        = 2, /* hipMalloc: memory of pdx_hip_ptr_t.device */
    PDX_HIP_MEM_MANAGED       = 3, /* hipMallocManaged */
} pdx_hip_mem_t;

typedef struct pdx_hip_ptr {
    pdx_hip_mem_t kind;
    int           device;     /* owning device for DEVICE (and where known, else -1) */
    uintptr_t     base;       /* start of the allocation (PAGEABLE_HOST: the pointer) */
    size_t        size;       /* bytes of the allocation (PAGEABLE_HOST: len) */
    uint64_t      alloc_id;   /* identity of the allocation; 0 for PAGEABLE_HOST */
    bool          id_unique;  /* alloc_id is the runtime's buffer id (a range freed
                                 and allocated again gets a new one); false: made
                                 from base and size, which cannot tell them apart */
} pdx_hip_ptr_t;

/*
 * What [ptr, ptr + len) is. A pointer the runtime does not know (its error
 * is cleared, never left sticky) is PAGEABLE_HOST. A range that runs past
 * the end of its GPU allocation is PDX_ERR_RANGE; NULL or len 0 is
 * PDX_ERR_INVALID.
 */
pdx_status_t pdx_hip_classify(const void *ptr, size_t len, pdx_hip_ptr_t *info_p);

const char *pdx_hip_mem_name(pdx_hip_mem_t kind);

/* ------------------------------------------------------------ dmabuf (dmabuf.c) */

/*
 * Export [ptr, ptr + len) of device memory as a dmabuf: bytes [*offset_p,
 * *offset_p + len) of the dmabuf *fd_p are the range. The caller owns the
 * fd (close() it; ibv_reg_dmabuf_mr may close it right after use).
 * amd: hsa_amd_portable_export_dmabuf (absent before ROCm 5.3: Debian's 5.2
 * answers PDX_ERR_UNSUPPORTED, and the caller falls back to peer memory).
 * nvidia: cuMemGetHandleForAddressRange over the range widened to host
 * pages; the offset is ptr minus the page-aligned start.
 * Not device memory: PDX_ERR_INVALID. No fd is left open on any error.
 */
pdx_status_t pdx_hip_export_dmabuf(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p);

/* -------------------------------------------------------------- gates (gate.c) */

/*
 * PDX_OK once everything recorded before event finished, PDX_INPROGRESS
 * before; an error from the runtime is logged with its name. HIP and CUDA
 * report a never-recorded event as complete (docs/architecture.md §7). NULL:
 * PDX_ERR_INVALID. Never blocks.
 */
pdx_status_t pdx_hip_event_query(void *event);

/* Fault injection for tests: from now on a query of event fails as the
 * runtime fails one of an invalid handle (NULL: none). */
void pdx_hip_fault_event_set(void *event);

/*
 * A pool of pdx-owned 64-bit words in pinned, device-mapped host memory
 * for stream gates. Created at setup on the current device; alloc and free
 * take no lock and make no runtime call (a bitmap of atomics), so they may
 * be called on the post path from any thread.
 */
typedef struct pdx_hip_words pdx_hip_words_t;

pdx_status_t pdx_hip_words_create(uint32_t count, pdx_hip_words_t **pool_p);
/* Every word must be free and no stream may still write one. */
void pdx_hip_words_destroy(pdx_hip_words_t *pool);
/* A word as its last user left it (0 from a new pool): the runtime's values
 * of a word only grow, so a stream still waiting for an old value is never
 * set back by a new user. PDX_ERR_FULL (not logged) when all are in use. */
pdx_status_t pdx_hip_word_alloc(pdx_hip_words_t *pool, volatile uint64_t **word_p);
/* Only once no stream will write the word any more (it reached its value). */
void pdx_hip_word_free(pdx_hip_words_t *pool, volatile uint64_t *word);
/* Whether word is one of the pool's (a caller's own word is not). */
bool pdx_hip_word_owned(const pdx_hip_words_t *pool, const volatile uint64_t *word);
/* The index of a pool word in [0, count), or -1 for any other pointer. */
int64_t pdx_hip_word_index(const pdx_hip_words_t *pool, const volatile uint64_t *word);

/*
 * Enqueue on stream a write of value to word (pinned host memory the GPU can
 * map: a pool word or hipHostMalloc'ed memory), after everything enqueued
 * before it, with a system-scope release: hipStreamWriteValue64 (amd),
 * cuStreamWriteValue64 (nvidia).
 */
pdx_status_t pdx_hip_stream_write_word(void *stream, volatile uint64_t *word, uint64_t value);
/* Enqueue on stream a wait until *word >= value (hipStreamWaitValue64, GEQ). */
pdx_status_t pdx_hip_stream_wait_word(void *stream, volatile uint64_t *word, uint64_t value);

/* ------------------------------------------------ staging copies (copy.c) */

/* Pinned, device-mapped host memory for staging (hipHostMalloc). */
pdx_status_t pdx_hip_host_alloc(size_t len, void **ptr_p);
void pdx_hip_host_free(void *ptr);

/* Device memory on the current device (hipMalloc), for tools and tests;
 * pdx itself registers the caller's memory and allocates none. */
pdx_status_t pdx_hip_device_alloc(size_t len, void **ptr_p);
void pdx_hip_device_free(void *ptr);

/*
 * Enqueue on stream a kernel writing nwords 64-bit words at dst (device
 * memory of the current device): word k = base + k * step. For tools and
 * tests that need a GPU producer without a compiler of their own. nvidia: a
 * PTX kernel loaded once per device through the driver; amd and none:
 * PDX_ERR_UNSUPPORTED (no code object is built for the AMD targets).
 */
pdx_status_t pdx_hip_fill64_async(void *stream, void *dst, uint64_t nwords, uint64_t base,
                                  uint64_t step);

/* A pdx-owned non-blocking stream on the current device. Destroying a
 * stream with work in flight lets the work finish. */
pdx_status_t pdx_hip_stream_create(void **stream_p);
void pdx_hip_stream_destroy(void *stream);

/* An event without timing, keeping the system-scope release (usable as a
 * gate and as the completion of a copy). Created at setup: no event is made
 * on the copy path. */
pdx_status_t pdx_hip_event_create(void **event_p);
void pdx_hip_event_destroy(void *event);

typedef enum pdx_hip_copy_dir {
    PDX_HIP_H2D = 0, /* host to device */
    PDX_HIP_D2H = 1, /* device to host */
} pdx_hip_copy_dir_t;

/*
 * Enqueue a copy of len bytes on stream and record done (an event from
 * pdx_hip_event_create; NULL: none) after it; pdx_hip_event_query(done) tells when it
 * finished. Never waits for the copy. The host side must be pinned memory
 * (pdx_hip_host_alloc) for the copy to be asynchronous. An error from the
 * event record leaves the copy enqueued: synchronize or destroy the stream
 * before reusing its buffers.
 */
pdx_status_t pdx_hip_copy_async(void *stream, pdx_hip_copy_dir_t dir, void *dst, const void *src,
                                size_t len, void *done);

/* An event after everything enqueued on stream so far (hipEventRecord). */
pdx_status_t pdx_hip_event_record(void *event, void *stream);

/* Make stream wait, on the GPU, for event's last record (hipStreamWaitEvent):
 * work enqueued on stream afterwards starts once that record completed. The
 * host does not wait. */
pdx_status_t pdx_hip_stream_wait_event(void *stream, void *event);

/* --------------------------------------------------- IPC handles (ipc.c) */

/*
 * A device range exported for another process of the same node (a peer
 * engine on another GPU of the node, reached over XGMI or NVLink, or on the
 * same GPU). Fixed size, no pointers, no padding: a peer carries it as its
 * 160 bytes (memcpy), in the node's byte order (it is only meaningful on the
 * node that made it). Fields are the exporter's view; none is trusted by
 * the opener before pdx_hip_ipc_handle_check() passes.
 */
#define PDX_HIP_IPC_MAGIC         0x49584450u /* "PDXI" in little-endian bytes */
#define PDX_HIP_IPC_VERSION       1
#define PDX_HIP_IPC_RUNTIME_BYTES 64          /* hipIpcMemHandle_t, cudaIpcMemHandle_t */
#define PDX_HIP_IPC_AMD           1           /* .platform */
#define PDX_HIP_IPC_NVIDIA        2

typedef struct pdx_hip_ipc_handle {
    uint32_t magic;                          /* PDX_HIP_IPC_MAGIC */
    uint16_t version;                        /* PDX_HIP_IPC_VERSION */
    uint16_t platform;                       /* PDX_HIP_IPC_AMD or PDX_HIP_IPC_NVIDIA */
    uint32_t pid;                            /* the exporting process */
    uint32_t reserved;                       /* 0 */
    uint64_t nonce;                          /* the exporting process's random id: with
                                                pid, tells it from a reused pid */
    uint64_t alloc_id;                       /* the allocation's identity in the exporter
                                                (pdx_hip_ptr_t.alloc_id) */
    uint64_t base;                           /* the allocation's address in the exporter */
    uint64_t size;                           /* the allocation's bytes */
    uint64_t offset;                         /* the range's start, from base */
    uint64_t len;                            /* the range's bytes */
    char     pci_bus_id[PDX_HIP_BUS_ID_MAX]; /* the exporter's GPU, "0000:c1:00.0" */
    uint8_t  runtime[PDX_HIP_IPC_RUNTIME_BYTES]; /* the runtime's handle of the allocation */
} pdx_hip_ipc_handle_t;

#define PDX_HIP_IPC_HANDLE_BYTES 160 /* sizeof(pdx_hip_ipc_handle_t), on every ABI */

/*
 * Whether handle is well formed: magic, version, a known platform, reserved
 * zero, a PCI bus id of the form "dddd:bb:dd.f", a range of at least one
 * byte inside the allocation. No runtime call (every platform, no GPU
 * needed). Refused: PDX_ERR_PROTO (PDX_ERR_VERSION for another version),
 * logged with the field that is wrong.
 */
pdx_status_t pdx_hip_ipc_handle_check(const pdx_hip_ipc_handle_t *handle);

/*
 * Export [ptr, ptr + len), device memory of any GPU of this process: the
 * runtime's IPC handle of its whole allocation (hipIpcGetMemHandle /
 * cudaIpcGetMemHandle on the base pdx_hip_classify() gives) and where the
 * range lies in it. The allocation must stay allocated while any process
 * may open the handle or use what it opened. Not device memory (host,
 * pinned, managed): PDX_ERR_INVALID; past the allocation: PDX_ERR_RANGE.
 */
pdx_status_t pdx_hip_ipc_export(const void *ptr, size_t len, pdx_hip_ipc_handle_t *handle_p);

/*
 * Open handle in this process: *ptr_p is the range's first byte, usable by
 * kernels and copies of the current device (peer access to the exporter's
 * GPU is enabled lazily, hipIpcMemLazyEnablePeerAccess). Each allocation is
 * opened with the runtime once per process, however many of its ranges are
 * opened and by how many threads: a table keyed by the exporter's pid,
 * nonce, allocation base and identity counts the opens. A handle this
 * process exported resolves to its own pointer without the runtime (CUDA
 * and HIP refuse to open their own handles). Refused: a malformed handle
 * (pdx_hip_ipc_handle_check), another platform's (PDX_ERR_UNSUPPORTED), a
 * GPU bus id this machine does not have (PDX_ERR_NO_DEVICE: a handle from
 * another host), an allocation that was freed or whose process is gone
 * (PDX_ERR_NOT_FOUND); each logged with the reason. Any thread.
 */
pdx_status_t pdx_hip_ipc_open(const pdx_hip_ipc_handle_t *handle, void **ptr_p);

/*
 * Undo one pdx_hip_ipc_open; ptr is what it gave (or any byte of the same
 * opened allocation). The allocation is closed with the runtime
 * (hipIpcCloseMemHandle) when its last open is undone: no kernel or copy may
 * still use it then. A pointer pdx did not open is logged as an error and
 * otherwise ignored. Any thread.
 */
void pdx_hip_ipc_close(void *ptr);

typedef struct pdx_hip_ipc_stats {
    uint64_t runtime_opens;  /* hipIpcOpenMemHandle calls that succeeded */
    uint64_t runtime_closes; /* hipIpcCloseMemHandle calls */
    uint32_t allocations;    /* allocations open now (own ones included) */
    uint32_t references;     /* pdx_hip_ipc_open calls not yet closed */
} pdx_hip_ipc_stats_t;

/* This process's IPC counters, for tests and pdx-info. */
void pdx_hip_ipc_stats(pdx_hip_ipc_stats_t *stats_p);

/* ------------------------------------------------------- peers (peer.c) */

/*
 * Whether device (of this process) reaches the memory of the GPU at PCI
 * bus id bus_id: the same GPU, or peer access (hipDeviceCanAccessPeer).
 * why says which, or why not (no GPU named, a GPU this process does not
 * see): those are answers, PDX_OK with *yes_p false. A runtime failure is
 * an error.
 */
pdx_status_t pdx_hip_peer_reachable(int device, const char *bus_id, bool *yes_p, char *why,
                                    size_t len);

/*
 * Enqueue fn(arg) on stream (hipStreamAddCallback): the runtime calls it on
 * a thread of its own once the work before it finished (or failed); it must
 * not call the runtime. Work after it waits for it to return.
 */
pdx_status_t pdx_hip_stream_callback(void *stream, void (*fn)(void *), void *arg);

/* --------------------------------------------- gather copies (gather.c) */

/*
 * One run of a gather: len bytes from src to dst, device addresses the
 * current device can reach (its own memory, a peer GPU's with peer access,
 * or an allocation opened with pdx_hip_ipc_open). The layout the kernel
 * reads: 24 bytes, no padding.
 */
typedef struct pdx_hip_run {
    uint64_t src;
    uint64_t dst;
    uint64_t len; /* 0: nothing to copy */
} pdx_hip_run_t;

/*
 * Whether this build has the gather kernel: nvidia builds with nvcc (PTX,
 * JIT-compiled for the GPU present), amd builds where hipcc was found (code
 * objects for PDX_HIP_GPU_TARGETS). No log, no runtime call.
 */
bool pdx_hip_gather_supported(void);

/*
 * Enqueue on stream (of the current device) one kernel that copies the
 * nruns runs of runs, a list in device memory of the current device: written
 * there by the caller's own kernel, or by pdx_hip_runs_upload_async() on the
 * same stream before. Destinations must not overlap each other or any
 * source. Each run is copied in 16-byte words when src and dst agree modulo
 * 16 (8, 4, 2 or 1 bytes otherwise; the ends byte by byte); several warps
 * share a long run. Never waits: record an event after it to know when it
 * finished (pdx_hip_event_record). The list must stay unchanged until then.
 * No kernel in this build: PDX_ERR_UNSUPPORTED, saying why; the caller
 * falls back to pdx_hip_copy_runs_async(). The kernel is loaded once per
 * device, on its first use there.
 */
pdx_status_t pdx_hip_gather_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns);

/*
 * The same kernel for runs of at most longest bytes: a grid of as many
 * workers as such runs need, not the whole GPU. runs may also be in pinned
 * host memory (pdx_hip_host_alloc: mapped), read by the kernel over the bus:
 * for a short list of short runs (tcp's staging copies) that costs less
 * than uploading it. Runs longer than longest are still copied, by fewer
 * workers.
 */
pdx_status_t pdx_hip_gather_bounded_async(void *stream, const pdx_hip_run_t *runs,
                                          uint32_t nruns, uint64_t longest);

/*
 * Load the gather kernel on the current device now (once per device; then
 * it returns at once). Otherwise the first launch loads it, and loading a
 * module may wait for the device's other work: from a thread that work
 * waits for (a stream waiting for a word that thread raises after the copy)
 * it never returns. PDX_ERR_UNSUPPORTED without a kernel in the build.
 */
pdx_status_t pdx_hip_gather_prepare(void);

/*
 * Page copies from page lists: for every buffer b < nbufs and list position
 * i < npages, bytes_per_page bytes from bufs[b].src + src[i] *
 * bytes_per_page to bufs[b].dst + dst[i] * bytes_per_page, the addresses
 * made by the kernel (one launch, no run list). bufs, src and dst are in
 * device memory of the current device and stay unchanged until an event
 * after it completed; destinations must not overlap. Same kernel module,
 * words and grid as pdx_hip_gather_async. skip: NULL, or a word in device
 * memory the kernel reads when it starts: nonzero, it copies nothing (a
 * copy queued behind a wait the host gave up on: the host's word is copied
 * there on the same stream first; thousands of blocks reading one host
 * word over PCIe take milliseconds).
 */
typedef struct pdx_hip_page_buf {
    uint64_t src; /* page 0 of the buffer, both sides */
    uint64_t dst;
} pdx_hip_page_buf_t;

pdx_status_t pdx_hip_pages_async(void *stream, const pdx_hip_page_buf_t *bufs,
                                 const uint32_t *src, const uint32_t *dst, uint32_t nbufs,
                                 uint32_t npages, uint64_t bytes_per_page,
                                 const volatile uint64_t *skip);

/*
 * Enqueue on stream a copy of nruns runs from host memory (runs_host, pinned
 * with pdx_hip_host_alloc for the copy to be asynchronous; it must stay
 * unchanged until the copy finished) into runs_dev, device memory of the
 * current device, for a pdx_hip_gather_async() enqueued after it.
 */
pdx_status_t pdx_hip_runs_upload_async(void *stream, pdx_hip_run_t *runs_dev,
                                       const pdx_hip_run_t *runs_host, uint32_t nruns);

/*
 * The same copies as one device-to-device hipMemcpyAsync per run, runs in
 * host memory (read before the call returns), for a few large runs and for
 * builds without the kernel. Runs of length 0 are skipped. Stops at the
 * first failure, leaving the runs before it enqueued.
 */
pdx_status_t pdx_hip_copy_runs_async(void *stream, const pdx_hip_run_t *runs, uint32_t nruns);

/* --------------------------------------------------- visibility (visible.c) */

/*
 * Whether RDMA writes into device memory need a flush before kernels that
 * run afterwards see them (docs/architecture.md §5). nvidia: not when the device's
 * GPU_DIRECT_RDMA_WRITES_ORDERING is at least owner scope. amd: always (the
 * engine flushes with a loopback RDMA READ).
 */
pdx_status_t pdx_hip_rdma_flush_needed(int device, bool *needed_p);

/* The raw ordering attribute (nvidia: 0 none, 100 owner, 200 all devices);
 * PDX_ERR_UNSUPPORTED on amd, which has no such attribute. */
pdx_status_t pdx_hip_rdma_write_ordering(int device, int *ordering_p);

/* nvidia: cuFlushGPUDirectRDMAWrites toward the calling thread's current
 * device, owner scope; blocks until earlier RDMA writes are visible.
 * PDX_ERR_UNSUPPORTED on amd and on devices without the host flush. */
pdx_status_t pdx_hip_flush_rdma_writes(void);

/* Whether device offers that host-side flush (nvidia: the flush-writes
 * options attribute); false on amd. */
pdx_status_t pdx_hip_rdma_host_flush_supported(int device, bool *yes_p);

/* -------------------------------------------------------- markers (marker.c) */

/*
 * Profiler ranges: roctx on amd (libroctx64 or rocprofiler-sdk-roctx,
 * dlopen'ed), NVTX3 on nvidia (header only). Off by default; while off the
 * macros below cost one relaxed load and a not-taken branch.
 */
extern _Atomic bool pdx_hip_markers_on;

/* Turn markers on or off, while no range is open. On: PDX_ERR_UNSUPPORTED
 * (logged at info, markers stay off) when no marker library is present. */
pdx_status_t pdx_hip_markers_enable(bool on);

void pdx_hip_marker_push(const char *name);
void pdx_hip_marker_push_room(const char *name, uint64_t room);
void pdx_hip_marker_pop(void);
void pdx_hip_marker_mark(const char *name);

#define PDX_MARKERS_ON() \
    PDX_UNLIKELY(atomic_load_explicit(&pdx_hip_markers_on, memory_order_relaxed))
#define PDX_MARKER_PUSH(name)                                    \
    do {                                                         \
        if (PDX_MARKERS_ON())                                    \
            pdx_hip_marker_push(name);                           \
    } while (0)
#define PDX_MARKER_PUSH_ROOM(name, room)                         \
    do {                                                         \
        if (PDX_MARKERS_ON())                                    \
            pdx_hip_marker_push_room((name), (room));            \
    } while (0)
#define PDX_MARKER_POP()                                         \
    do {                                                         \
        if (PDX_MARKERS_ON())                                    \
            pdx_hip_marker_pop();                                \
    } while (0)
#define PDX_MARKER_MARK(name)                                    \
    do {                                                         \
        if (PDX_MARKERS_ON())                                    \
            pdx_hip_marker_mark(name);                           \
    } while (0)

#endif
