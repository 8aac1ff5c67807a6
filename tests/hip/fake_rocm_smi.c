/*
 * The fake rocm-smi-lib: rsmi_init, rsmi_shut_down, rsmi_num_monitor_devices,
 * rsmi_dev_pci_id_get, rsmi_topo_numa_affinity_get, rsmi_dev_xgmi_hive_id_get
 * and rsmi_dev_name_get over the GPUs of fake_rsmi (fake_rocm_smi.h), with
 * the ABI of librocm-smi 5.2. Built twice: whole, and with
 * FAKE_RSMI_NO_HIVE (rsmi_dev_xgmi_hive_id_get missing) for the test of a
 * library that lacks a symbol.
 */
#include "fake_rocm_smi.h"

#include <stddef.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))

static int initialised; /* rsmi_init minus rsmi_shut_down, as the library counts */

__attribute__((constructor)) static void fake_load(void)
{
    fake_rsmi.loads++;
}

__attribute__((destructor)) static void fake_unload(void)
{
    fake_rsmi.unloads++;
}

/* The GPU of index, counting the query; NULL when there is none. */
static const fake_rsmi_gpu_t *gpu_of(uint32_t index)
{
    fake_rsmi.queries++;
    if (!initialised)
        fake_rsmi.outside++;
    return index < fake_rsmi.count ? &fake_rsmi.gpu[index] : NULL;
}

EXPORT int rsmi_init(uint64_t flags);
EXPORT int rsmi_shut_down(void);
EXPORT int rsmi_num_monitor_devices(uint32_t *count);
EXPORT int rsmi_dev_pci_id_get(uint32_t index, uint64_t *bdfid);
EXPORT int rsmi_topo_numa_affinity_get(uint32_t index, uint32_t *node);
EXPORT int rsmi_dev_name_get(uint32_t index, char *name, size_t len);
#ifndef FAKE_RSMI_NO_HIVE
EXPORT int rsmi_dev_xgmi_hive_id_get(uint32_t index, uint64_t *hive_id);
#endif

int rsmi_init(uint64_t flags)
{
    fake_rsmi.init_calls++;
    if (flags != 0 || fake_rsmi.init_status != FAKE_RSMI_SUCCESS)
        return fake_rsmi.init_status ? fake_rsmi.init_status : 1;
    fake_rsmi.inits++;
    initialised++;
    return FAKE_RSMI_SUCCESS;
}

int rsmi_shut_down(void)
{
    fake_rsmi.shut_downs++;
    if (!initialised) {
        fake_rsmi.outside++;
        return FAKE_RSMI_INIT_ERROR;
    }
    initialised--;
    return FAKE_RSMI_SUCCESS;
}

int rsmi_num_monitor_devices(uint32_t *count)
{
    (void)gpu_of(0);
    *count = fake_rsmi.count;
    return FAKE_RSMI_SUCCESS;
}

int rsmi_dev_pci_id_get(uint32_t index, uint64_t *bdfid)
{
    const fake_rsmi_gpu_t *gpu = gpu_of(index);

    if (!gpu)
        return 1; /* RSMI_STATUS_INVALID_ARGS */
    if (gpu->pci_status != FAKE_RSMI_SUCCESS)
        return gpu->pci_status;
    *bdfid = gpu->bdfid;
    return FAKE_RSMI_SUCCESS;
}

/* 5.2's signature: a uint32_t, -1 written as 0xffffffff. */
int rsmi_topo_numa_affinity_get(uint32_t index, uint32_t *node)
{
    const fake_rsmi_gpu_t *gpu = gpu_of(index);

    if (!gpu)
        return 1;
    *node = (uint32_t)gpu->numa_node;
    return FAKE_RSMI_SUCCESS;
}

#ifndef FAKE_RSMI_NO_HIVE
int rsmi_dev_xgmi_hive_id_get(uint32_t index, uint64_t *hive_id)
{
    const fake_rsmi_gpu_t *gpu = gpu_of(index);

    if (!gpu)
        return 1;
    if (!gpu->hive_id)
        return FAKE_RSMI_NOT_SUPPORTED; /* no XGMI: no hive_info in sysfs */
    *hive_id = gpu->hive_id;
    return FAKE_RSMI_SUCCESS;
}
#endif

int rsmi_dev_name_get(uint32_t index, char *name, size_t len)
{
    const fake_rsmi_gpu_t *gpu = gpu_of(index);

    if (!gpu || !name || len == 0)
        return 1;
    if (!gpu->name)
        return FAKE_RSMI_NOT_SUPPORTED;
    snprintf(name, len, "%s", gpu->name);
    return FAKE_RSMI_SUCCESS;
}
