/*
 * A fake rocm-smi-lib for tests/hip/test_hip_smi.c. The fake library
 * (fake_rocm_smi.c, built as a module the test dlopens through hip/smi.c)
 * takes its GPUs from, and counts its calls into, fake_rsmi: a variable the
 * test program defines and exports (ENABLE_EXPORTS), so the counts outlive
 * the library's dlclose.
 */
#ifndef PDX_FAKE_ROCM_SMI_H
#define PDX_FAKE_ROCM_SMI_H

#include <stdint.h>

#define FAKE_RSMI_MAX 8

#define FAKE_RSMI_SUCCESS        0
#define FAKE_RSMI_NOT_SUPPORTED  2 /* RSMI_STATUS_NOT_SUPPORTED */
#define FAKE_RSMI_INIT_ERROR     8 /* RSMI_STATUS_INIT_ERROR */

typedef struct fake_rsmi_gpu {
    uint64_t    bdfid;     /* as rsmi_dev_pci_id_get answers it */
    int32_t     numa_node; /* what rsmi_topo_numa_affinity_get writes */
    uint64_t    hive_id;   /* 0: rsmi_dev_xgmi_hive_id_get is NOT_SUPPORTED */
    const char *name;      /* NULL: rsmi_dev_name_get is NOT_SUPPORTED */
    int         pci_status; /* what rsmi_dev_pci_id_get answers */
} fake_rsmi_gpu_t;

typedef struct fake_rsmi {
    /* set by the test */
    int             init_status;  /* what rsmi_init answers */
    uint32_t        count;        /* GPUs listed, in rocm-smi's order */
    fake_rsmi_gpu_t gpu[FAKE_RSMI_MAX];
    /* counted by the fake */
    int loads;        /* constructor runs (dlopen) */
    int unloads;      /* destructor runs (the last dlclose) */
    int inits;        /* rsmi_init calls that succeeded */
    int init_calls;   /* every rsmi_init call */
    int shut_downs;   /* rsmi_shut_down calls */
    int queries;      /* device queries */
    int outside;      /* calls made while not initialised */
} fake_rsmi_t;

extern fake_rsmi_t fake_rsmi;

/* BDFID of domain:bus:device.function, as rocm-smi encodes it. */
#define FAKE_BDFID(domain, bus, dev, fn)                                        \
    (((uint64_t)(domain) << 32) | ((uint64_t)(bus) << 8) | ((uint64_t)(dev) << 3) | \
     (uint64_t)(fn))

#endif
