/*
 * hip rocm-smi (amd): the NUMA node, XGMI hive and product name of each GPU,
 * for pdx_hip_device_identity() (docs/architecture.md §7).
 *
 * rocm-smi-lib is optional: it is dlopen'ed (RTLD_NOW | RTLD_LOCAL), never
 * linked, so pdx builds without its header and runs without the library.
 * The process opens it at most once, and only after HIP has counted a GPU
 * (on a machine without one rocm-smi has nothing to say): rsmi_init, every
 * GPU's facts read into a table, rsmi_shut_down, dlclose. Nothing stays
 * open; the table is written under a pthread_once and only read afterwards.
 *
 * rocm-smi numbers GPUs in its own order, which is not HIP's, and
 * HIP_VISIBLE_DEVICES renumbers HIP's only: a GPU of the table is matched to
 * a HIP device by PCI bus id, never by index. A GPU the table lacks keeps
 * the sysfs facts device.c read.
 */
#include "hip_api.h"

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/*
 * The rocm-smi C ABI pdx calls, declared here instead of taken from
 * <rocm_smi/rocm_smi.h>, so the build does not need librocm-smi-dev.
 * Checked against that header of librocm-smi-dev 5.2.3 and of ROCm 6:
 *  - rsmi_status_t is an int-sized enum; RSMI_STATUS_SUCCESS is 0.
 *  - rsmi_topo_numa_affinity_get writes a uint32_t in 5.2 and an int32_t in
 *    later releases: the same four bytes, read here as int32_t, so that
 *    "no node" (-1, 0xffffffff) is negative with either.
 *  - rsmi_dev_pci_id_get's BDFID: domain in bits 63:32, bus 15:8, device
 *    7:3, function 2:0; bits 31:28 are reserved in 5.2 and carry a
 *    partition id in ROCm 6: masked off with the rest of 31:16.
 *  - rsmi_dev_name_get takes a size_t length; rsmi_dev_market_name_get
 *    (ROCm 6, absent from 5.2: resolved when present) a uint32_t one.
 */
typedef int smi_status_t;
#define SMI_SUCCESS 0

typedef struct smi_api {
    smi_status_t (*init)(uint64_t init_flags);
    smi_status_t (*shut_down)(void);
    smi_status_t (*num_monitor_devices)(uint32_t *count);
    smi_status_t (*pci_id_get)(uint32_t index, uint64_t *bdfid);
    smi_status_t (*numa_affinity_get)(uint32_t index, int32_t *node);
    smi_status_t (*xgmi_hive_id_get)(uint32_t index, uint64_t *hive_id);
    smi_status_t (*name_get)(uint32_t index, char *name, size_t len);
    /* optional */
    smi_status_t (*market_name_get)(uint32_t index, char *name, uint32_t len);
    smi_status_t (*status_string)(smi_status_t status, const char **text);
} smi_api_t;

static const struct {
    const char *name;
    size_t      offset;
    bool        required;
} smi_symbols[] = {
    {"rsmi_init",                   offsetof(smi_api_t, init),                true},
    {"rsmi_shut_down",              offsetof(smi_api_t, shut_down),           true},
    {"rsmi_num_monitor_devices",    offsetof(smi_api_t, num_monitor_devices), true},
    {"rsmi_dev_pci_id_get",         offsetof(smi_api_t, pci_id_get),          true},
    {"rsmi_topo_numa_affinity_get", offsetof(smi_api_t, numa_affinity_get),   true},
    {"rsmi_dev_xgmi_hive_id_get",   offsetof(smi_api_t, xgmi_hive_id_get),    true},
    {"rsmi_dev_name_get",           offsetof(smi_api_t, name_get),            true},
    {"rsmi_dev_market_name_get",    offsetof(smi_api_t, market_name_get),     false},
    {"rsmi_status_string",          offsetof(smi_api_t, status_string),       false},
};

/* Debian's librocm-smi64-1 ships .so.1; ROCm's own packages .so.5 to .so.7. */
static const char *const smi_libraries[] = {
    "librocm_smi64.so.1", "librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5",
    "librocm_smi64.so",
};

#define SMI_FALLBACK "; NUMA nodes from sysfs"

static const char *smi_text(const smi_api_t *api, smi_status_t status, char *buf, size_t len)
{
    const char *text = NULL;

    if (api->status_string && api->status_string(status, &text) == SMI_SUCCESS && text)
        return text;
    snprintf(buf, len, "rocm-smi status %d", status);
    return buf;
}

/* The first library that opens; NULL (logged) when none does. */
static void *smi_open(const char *lib, const char **name_p)
{
    const char *const *names = lib ? &lib : smi_libraries;
    size_t count = lib ? 1 : PDX_ARRAY_SIZE(smi_libraries);
    const char *why = NULL;

    for (size_t i = 0; i < count; i++) {
        void *dl = hipx_dlopen(names[i]);

        if (dl) {
            *name_p = names[i];
            return dl;
        }
        why = dlerror();
    }
    pdx_info("hip: rocm-smi not used: %s%s" SMI_FALLBACK,
             lib ? "" : "no librocm_smi64 (.so.1, .so.7, .so.6, .so.5, .so): ",
             why ? why : "dlopen failed");
    return NULL;
}

static pdx_status_t smi_resolve(void *dl, const char *name, smi_api_t *api)
{
    for (size_t i = 0; i < PDX_ARRAY_SIZE(smi_symbols); i++) {
        void *fn = dlsym(dl, smi_symbols[i].name);

        if (!fn && smi_symbols[i].required) {
            pdx_info("hip: rocm-smi not used: %s lacks %s" SMI_FALLBACK, name,
                     smi_symbols[i].name);
            return PDX_ERR_UNSUPPORTED;
        }
        memcpy((char *)api + smi_symbols[i].offset, &fn, sizeof(fn)); /* to a function pointer */
    }
    return PDX_OK;
}

/* The product name: ROCm 6's market name ("AMD Instinct MI300X"), else
 * rsmi_dev_name_get's, which is the PCI device id in hex ("0x74a1") when
 * pci.ids does not know the GPU: that is no name. "" when neither says. */
static void smi_name(const smi_api_t *api, uint32_t index, char *name, size_t len)
{
    smi_status_t st = -1;

    name[0] = '\0';
    if (api->market_name_get)
        st = api->market_name_get(index, name, (uint32_t)len);
    if (st != SMI_SUCCESS || !name[0]) {
        name[0] = '\0';
        st = api->name_get(index, name, len);
    }
    name[len - 1] = '\0';
    if (st != SMI_SUCCESS || strncmp(name, "0x", 2) == 0)
        name[0] = '\0';
}

/* One GPU of rocm-smi's list; false (logged) when it has no PCI id. */
static bool smi_read_gpu(const smi_api_t *api, uint32_t index, hipx_smi_gpu_t *gpu)
{
    uint64_t bdfid = 0, hive = 0;
    int32_t node = -1;
    smi_status_t st;
    char buf[48];

    st = api->pci_id_get(index, &bdfid);
    if (st != SMI_SUCCESS) {
        pdx_debug("hip: rocm-smi GPU %u: rsmi_dev_pci_id_get: %s; not matched to a HIP device",
                  index, smi_text(api, st, buf, sizeof(buf)));
        return false;
    }
    snprintf(gpu->pci_bus_id, sizeof(gpu->pci_bus_id), "%04x:%02x:%02x.%x",
             (unsigned)(bdfid >> 32), (unsigned)((bdfid >> 8) & 0xff),
             (unsigned)((bdfid >> 3) & 0x1f), (unsigned)(bdfid & 0x7));
    gpu->numa_node = api->numa_affinity_get(index, &node) == SMI_SUCCESS && node >= 0 ? node : -1;
    gpu->hive_id = api->xgmi_hive_id_get(index, &hive) == SMI_SUCCESS ? hive : 0;
    smi_name(api, index, gpu->name, sizeof(gpu->name));
    pdx_debug("hip: rocm-smi GPU %u: PCI %s, NUMA node %d, hive %#" PRIx64 ", \"%s\"", index,
              gpu->pci_bus_id, gpu->numa_node, gpu->hive_id, gpu->name);
    return true;
}

pdx_status_t hipx_smi_load(const char *lib, hipx_smi_facts_t *facts_p)
{
    hipx_smi_facts_t facts = {0};
    const char *name = NULL;
    smi_api_t api = {0};
    uint32_t n = 0;
    smi_status_t sst;
    pdx_status_t st;
    char buf[48];
    void *dl;

    if (!facts_p) {
        pdx_error("hip: smi_load: NULL output");
        return PDX_ERR_INVALID;
    }
    dl = smi_open(lib, &name);
    if (!dl)
        return PDX_ERR_UNSUPPORTED;
    st = smi_resolve(dl, name, &api);
    if (st != PDX_OK)
        goto err_close;
    sst = api.init(0);
    if (sst != SMI_SUCCESS) {
        pdx_info("hip: rocm-smi not used: %s: rsmi_init: %s" SMI_FALLBACK, name,
                 smi_text(&api, sst, buf, sizeof(buf)));
        st = PDX_ERR_IO;
        goto err_close;
    }
    sst = api.num_monitor_devices(&n);
    if (sst != SMI_SUCCESS) {
        pdx_info("hip: rocm-smi not used: %s: rsmi_num_monitor_devices: %s" SMI_FALLBACK, name,
                 smi_text(&api, sst, buf, sizeof(buf)));
        st = PDX_ERR_IO;
        goto err_shut_down;
    }
    if (n > HIPX_SMI_MAX)
        pdx_info("hip: rocm-smi lists %u GPUs, pdx reads the first %u; the others' NUMA "
                 "nodes come from sysfs", n, HIPX_SMI_MAX);
    for (uint32_t i = 0; i < n && i < HIPX_SMI_MAX; i++)
        if (smi_read_gpu(&api, i, &facts.gpu[facts.count]))
            facts.count++;
    (void)api.shut_down();
    dlclose(dl);
    pdx_info("hip: rocm-smi (%s): %u GPU%s", name, facts.count, facts.count == 1 ? "" : "s");
    *facts_p = facts;
    return PDX_OK;

err_shut_down:
    (void)api.shut_down();
err_close:
    dlclose(dl);
    return st;
}

const hipx_smi_gpu_t *hipx_smi_find(const hipx_smi_facts_t *facts, const char *pci_bus_id)
{
    for (uint32_t i = 0; i < facts->count; i++)
        if (strcmp(facts->gpu[i].pci_bus_id, pci_bus_id) == 0)
            return &facts->gpu[i];
    return NULL;
}

void hipx_smi_apply(const hipx_smi_facts_t *facts, pdx_hip_identity_t *id)
{
    const hipx_smi_gpu_t *gpu = hipx_smi_find(facts, id->pci_bus_id);

    _Static_assert(sizeof(gpu->name) == sizeof(id->name), "one name size");
    if (!gpu) {
        if (facts->count)
            pdx_debug("hip: GPU %d (PCI %s): not listed by rocm-smi; NUMA node from sysfs",
                      id->device, id->pci_bus_id);
        return;
    }
    id->hive_id = gpu->hive_id;
    if (gpu->name[0])
        memcpy(id->name, gpu->name, sizeof(id->name));
    /* the NUMA node says where it came from: rocm-smi's, or sysfs's kept */
    if (gpu->numa_node >= 0) {
        id->numa_node = gpu->numa_node;
        id->source = "rocm-smi";
    } else {
        id->source = "rocm-smi, NUMA node from sysfs";
    }
}

/* ------------------------------------------------------- the process's table */

static pthread_once_t facts_once = PTHREAD_ONCE_INIT;
static hipx_smi_facts_t facts_table;
static const char *facts_lib;

static void facts_load(void)
{
    int n = 0;

    if (pdx_hip_device_count(&n) != PDX_OK) {
        pdx_debug("hip: rocm-smi not opened: %s", pdx_hip_no_device_reason());
        return;
    }
    (void)hipx_smi_load(facts_lib, &facts_table);
}

const hipx_smi_facts_t *hipx_smi_facts(void)
{
    pthread_once(&facts_once, facts_load);
    return &facts_table;
}

void hipx_smi_library_set(const char *lib)
{
    facts_lib = lib;
}
