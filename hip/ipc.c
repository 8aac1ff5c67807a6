/*
 * hip IPC: device ranges shared between processes of one node, the first
 * piece of the intra-node transport (pages between GPUs over XGMI/NVLink).
 *
 * Export: pdx_hip_classify() gives the range's allocation; the runtime's
 * handle is taken on the allocation's base (hipIpcGetMemHandle /
 * cudaIpcGetMemHandle), and the handle says where the range lies in it.
 *
 * Open: the runtime maps an allocation at most once per process, and CUDA
 * and HIP refuse a second open of the same allocation (and any open of a
 * process's own handle). So opens go through a table of the allocations
 * this process has open, keyed by (exporter pid, nonce, base, alloc_id),
 * each with a count of opens: the first open maps (hipIpcOpenMemHandle,
 * lazy peer access), later ones count, the last close unmaps. A handle of
 * this process (same pid and nonce) enters the table too, with its own
 * pointer and no runtime call, after checking that its allocation still
 * exists. The nonce (random, once per process) keeps a reused pid, or a
 * process of another pid namespace with the same pid, from passing for
 * this one.
 *
 * Lock: ipc_lock guards the table and the counters, and is held across the
 * runtime's open and close so two threads opening one allocation map it
 * once. Opens and closes are setup work, never on the copy path.
 */
#include "hip_api.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(sizeof(hipIpcMemHandle_t) == PDX_HIP_IPC_RUNTIME_BYTES,
               "the runtime's IPC handle is 64 bytes");

#if defined(PDX_HIP_PLATFORM_NVIDIA)
#define IPC_PLATFORM PDX_HIP_IPC_NVIDIA
#else
#define IPC_PLATFORM PDX_HIP_IPC_AMD
#endif

typedef struct ipc_entry {
    uint32_t  pid;
    uint64_t  nonce;
    uint64_t  base;     /* the exporter's address */
    uint64_t  alloc_id;
    uint64_t  size;
    uintptr_t local;    /* this process's address of base */
    uint32_t  refs;
    bool      own;      /* this process's allocation: nothing to unmap */
} ipc_entry_t;

static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static ipc_entry_t *ipc_table;
static uint32_t ipc_count, ipc_cap;
static uint64_t ipc_opens, ipc_closes;

static pthread_once_t nonce_once = PTHREAD_ONCE_INIT;
static uint64_t nonce_value;

static void nonce_make(void)
{
    uint64_t v = 0;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
        v = pdx_hash64(pdx_now_ns() ^ ((uint64_t)getpid() << 32));
    nonce_value = v | 1;
}

static uint64_t process_nonce(void)
{
    pthread_once(&nonce_once, nonce_make);
    return nonce_value;
}

static const char *platform_name(uint16_t platform)
{
    return platform == PDX_HIP_IPC_NVIDIA ? "nvidia" : "amd";
}

/* "0000:c1:00.0" of device, lower case as sysfs writes it. */
static pdx_status_t bus_id_of(int device, char *out, size_t len)
{
    unsigned domain, bus, dev, fn;
    char raw[PDX_HIP_BUS_ID_MAX];
    hipError_t err = hipDeviceGetPCIBusId(raw, (int)sizeof(raw), device);

    if (err != hipSuccess)
        return hipx_fail(err, "hipDeviceGetPCIBusId", "the exported range's GPU");
    if (sscanf(raw, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) {
        pdx_error("hip: ipc: GPU %d: unexpected PCI bus id \"%s\"", device, raw);
        return PDX_ERR_IO;
    }
    snprintf(out, len, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    return PDX_OK;
}

pdx_status_t pdx_hip_ipc_export(const void *ptr, size_t len, pdx_hip_ipc_handle_t *handle_p)
{
    pdx_hip_ipc_handle_t h;
    hipIpcMemHandle_t rt;
    pdx_hip_ptr_t info;
    hipError_t err;
    pdx_status_t st;

    if (!handle_p) {
        pdx_error("hip: ipc_export: NULL output");
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_classify(ptr, len, &info);
    if (st != PDX_OK)
        return st;
    if (info.kind != PDX_HIP_MEM_DEVICE) {
        pdx_error("hip: ipc_export: %p + %zu is %s memory, not device memory: only hipMalloc'ed "
                  "memory can be shared between processes", ptr, len,
                  pdx_hip_mem_name(info.kind));
        return PDX_ERR_INVALID;
    }
    memset(&h, 0, sizeof(h));
    st = bus_id_of(info.device, h.pci_bus_id, sizeof(h.pci_bus_id));
    if (st != PDX_OK)
        return st;
    memset(&rt, 0, sizeof(rt));
    err = hipIpcGetMemHandle(&rt, (void *)info.base);
    if (err != hipSuccess)
        return hipx_fail(err, "hipIpcGetMemHandle", "the range's allocation");
    h.magic = PDX_HIP_IPC_MAGIC;
    h.version = PDX_HIP_IPC_VERSION;
    h.platform = IPC_PLATFORM;
    h.pid = (uint32_t)getpid();
    h.nonce = process_nonce();
    h.alloc_id = info.alloc_id;
    h.base = info.base;
    h.size = info.size;
    h.offset = (uintptr_t)ptr - info.base;
    h.len = len;
    memcpy(h.runtime, &rt, sizeof(rt));
    *handle_p = h;
    return PDX_OK;
}

/* The table entry of h's allocation, or NULL. Under ipc_lock. */
static ipc_entry_t *entry_find(const pdx_hip_ipc_handle_t *h)
{
    for (uint32_t i = 0; i < ipc_count; i++) {
        ipc_entry_t *e = &ipc_table[i];

        if (e->pid == h->pid && e->nonce == h->nonce && e->base == h->base &&
            e->alloc_id == h->alloc_id)
            return e;
    }
    return NULL;
}

/* Room for one more entry. Under ipc_lock. */
static pdx_status_t entry_reserve(void)
{
    ipc_entry_t *t;
    uint32_t cap;

    if (ipc_count < ipc_cap)
        return PDX_OK;
    cap = ipc_cap ? ipc_cap * 2 : 16;
    t = realloc(ipc_table, cap * sizeof(*t));
    if (!t) {
        pdx_error("hip: ipc_open: out of memory for %u open allocations", cap);
        return PDX_ERR_NOMEM;
    }
    ipc_table = t;
    ipc_cap = cap;
    return PDX_OK;
}

/* A handle of this process: its allocation must still be the one exported. */
static pdx_status_t own_check(const pdx_hip_ipc_handle_t *h)
{
    pdx_hip_ptr_t info;
    pdx_status_t st;

    st = pdx_hip_classify((void *)(uintptr_t)(h->base + h->offset), h->len, &info);
    if (st == PDX_OK && info.kind == PDX_HIP_MEM_DEVICE && info.base == h->base &&
        info.alloc_id == h->alloc_id)
        return PDX_OK;
    pdx_error("hip: ipc_open: this process's handle of %llu bytes at %#llx: the allocation is "
              "gone (freed since it was exported)", (unsigned long long)h->size,
              (unsigned long long)h->base);
    return PDX_ERR_NOT_FOUND;
}

/*
 * A handle from another host names a GPU this machine does not have. A GPU
 * this process cannot see (CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES) is
 * still one the runtime may open, so sysfs decides; without a readable
 * sysfs the runtime does.
 */
static pdx_status_t bus_check(const pdx_hip_ipc_handle_t *h)
{
    char path[96];
    struct stat sb;
    int device = -1;
    hipError_t err = hipDeviceGetByPCIBusId(&device, h->pci_bus_id);

    if (err == hipSuccess)
        return PDX_OK;
    (void)hipGetLastError();
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s", h->pci_bus_id);
    if (stat("/sys/bus/pci/devices", &sb) != 0 || stat(path, &sb) == 0)
        return PDX_OK;
    pdx_error("hip: ipc_open: the handle names GPU %s, which this machine does not have: a "
              "handle from another host (pid %u there)", h->pci_bus_id, h->pid);
    return PDX_ERR_NO_DEVICE;
}

/* Map h's allocation with the runtime. Under ipc_lock. */
static pdx_status_t runtime_open(const pdx_hip_ipc_handle_t *h, uintptr_t *local_p)
{
    hipIpcMemHandle_t rt;
    void *p = NULL;
    char what[192];
    hipError_t err;
    pdx_status_t st;

    memcpy(&rt, h->runtime, sizeof(rt));
    err = hipIpcOpenMemHandle(&p, rt, hipIpcMemLazyEnablePeerAccess);
    if (err == hipSuccess) {
        *local_p = (uintptr_t)p;
        return PDX_OK;
    }
    if (kill((pid_t)h->pid, 0) != 0 && errno == ESRCH)
        snprintf(what, sizeof(what), "%llu bytes of GPU %s: the exporting process %u is gone",
                 (unsigned long long)h->size, h->pci_bus_id, h->pid);
    else
        snprintf(what, sizeof(what), "%llu bytes of GPU %s exported by pid %u: the allocation "
                 "was freed, or the handle is not the runtime's", (unsigned long long)h->size,
                 h->pci_bus_id, h->pid);
    st = hipx_fail(err, "hipIpcOpenMemHandle", what);
    if (st != PDX_ERR_NOMEM && st != PDX_ERR_NO_DEVICE && st != PDX_ERR_UNSUPPORTED)
        st = PDX_ERR_NOT_FOUND;
    return st;
}

pdx_status_t pdx_hip_ipc_open(const pdx_hip_ipc_handle_t *h, void **ptr_p)
{
    bool own;
    ipc_entry_t *e;
    uintptr_t local = 0;
    pdx_status_t st;
    int ndev;

    if (!ptr_p) {
        pdx_error("hip: ipc_open: NULL output");
        return PDX_ERR_INVALID;
    }
    st = pdx_hip_ipc_handle_check(h);
    if (st != PDX_OK)
        return st;
    if (h->platform != IPC_PLATFORM) {
        pdx_error("hip: ipc_open: a handle of the %s platform; this build is %s",
                  platform_name(h->platform), PDX_HIP_PLATFORM);
        return PDX_ERR_UNSUPPORTED;
    }
    st = pdx_hip_device_count(&ndev);
    if (st != PDX_OK) {
        pdx_error("hip: ipc_open: %s", pdx_hip_no_device_reason());
        return st;
    }
    own = h->pid == (uint32_t)getpid() && h->nonce == process_nonce();

    pthread_mutex_lock(&ipc_lock);
    e = entry_find(h);
    if (e) {
        if (e->size != h->size) {
            pdx_error("hip: ipc_open: allocation %#llx of pid %u is open with %llu bytes, the "
                      "handle says %llu", (unsigned long long)h->base, h->pid,
                      (unsigned long long)e->size, (unsigned long long)h->size);
            st = PDX_ERR_PROTO;
            goto out_unlock;
        }
        e->refs++;
        local = e->local;
        goto out_unlock;
    }
    st = entry_reserve();
    if (st != PDX_OK)
        goto out_unlock;
    if (own) {
        st = own_check(h);
        local = (uintptr_t)h->base;
    } else {
        st = bus_check(h);
        if (st == PDX_OK)
            st = runtime_open(h, &local);
        if (st == PDX_OK)
            ipc_opens++;
    }
    if (st != PDX_OK)
        goto out_unlock;
    ipc_table[ipc_count++] = (ipc_entry_t){
        .pid = h->pid, .nonce = h->nonce, .base = h->base, .alloc_id = h->alloc_id,
        .size = h->size, .local = local, .refs = 1, .own = own,
    };
out_unlock:
    pthread_mutex_unlock(&ipc_lock);
    if (st == PDX_OK)
        *ptr_p = (void *)(local + (uintptr_t)h->offset);
    return st;
}

void pdx_hip_ipc_close(void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    hipError_t err;
    ipc_entry_t e;
    uint32_t i;

    if (!ptr)
        return;
    pthread_mutex_lock(&ipc_lock);
    for (i = 0; i < ipc_count; i++)
        if (p >= ipc_table[i].local && p - ipc_table[i].local < ipc_table[i].size)
            break;
    if (i == ipc_count) {
        pthread_mutex_unlock(&ipc_lock);
        pdx_error("hip: ipc_close: %p is not in an allocation pdx_hip_ipc_open opened", ptr);
        return;
    }
    if (--ipc_table[i].refs > 0) {
        pthread_mutex_unlock(&ipc_lock);
        return;
    }
    e = ipc_table[i];
    ipc_table[i] = ipc_table[--ipc_count];
    if (!e.own) {
        err = hipIpcCloseMemHandle((void *)e.local);
        ipc_closes++;
        if (err != hipSuccess)
            hipx_fail(err, "hipIpcCloseMemHandle", "an allocation of another process");
    }
    pthread_mutex_unlock(&ipc_lock);
}

void pdx_hip_ipc_stats(pdx_hip_ipc_stats_t *stats_p)
{
    pdx_hip_ipc_stats_t s = {0};

    if (!stats_p)
        return;
    pthread_mutex_lock(&ipc_lock);
    s.runtime_opens = ipc_opens;
    s.runtime_closes = ipc_closes;
    s.allocations = ipc_count;
    for (uint32_t i = 0; i < ipc_count; i++)
        s.references += ipc_table[i].refs;
    pthread_mutex_unlock(&ipc_lock);
    *stats_p = s;
}
