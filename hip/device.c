/*
 * hip devices: how many GPUs the runtime sees, each one's identity (PCI bus
 * id, product name, NUMA node, XGMI hive), the calling thread's current
 * device, and the translation of runtime errors to pdx statuses.
 *
 * The device count is asked once per process (pthread_once) and kept: the
 * runtime's answer does not change while the process lives, and a machine
 * without a GPU must not pay for the question twice. No GPU is not an error
 * for pdx (the engine serves host memory), so it is logged at info, with
 * the runtime's reason kept for pdx_hip_no_device_reason().
 */
#include "hip_api.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define HIPX_WHY_MAX 256

static pthread_once_t count_once = PTHREAD_ONCE_INIT;
static pdx_status_t count_status;
static int count_value;
static char count_why[HIPX_WHY_MAX];

const char *pdx_hip_platform_name(void)
{
    return PDX_HIP_PLATFORM;
}

pdx_status_t hipx_status(hipError_t err)
{
    switch (err) {
    case hipSuccess:               return PDX_OK;
    case hipErrorNotReady:         return PDX_INPROGRESS;
    case hipErrorInvalidValue:     return PDX_ERR_INVALID;
    case hipErrorOutOfMemory:      return PDX_ERR_NOMEM;
    case hipErrorNoDevice:         return PDX_ERR_NO_DEVICE;
    case hipErrorInvalidDevice:    return PDX_ERR_INVALID;
    case hipErrorNotSupported:     return PDX_ERR_UNSUPPORTED;
    default:                       return PDX_ERR_IO;
    }
}

static _Thread_local char last_error[160];

void hipx_last_error_set(const char *name, const char *text)
{
    snprintf(last_error, sizeof(last_error), "%s: %s", name, text);
}

const char *pdx_hip_last_error(void)
{
    return last_error;
}

pdx_status_t hipx_fail(hipError_t err, const char *call, const char *what)
{
    pdx_error("hip: %s%s%s: %s: %s", call, what ? ": " : "", what ? what : "",
              hipGetErrorName(err), hipGetErrorString(err));
    hipx_last_error_set(hipGetErrorName(err), hipGetErrorString(err));
    (void)hipGetLastError();
    return hipx_status(err);
}

int hipx_current_device(void)
{
    int dev = -1;
    hipError_t err = hipGetDevice(&dev);

    if (err != hipSuccess) {
        (void)hipGetLastError();
        return -1;
    }
    return dev;
}

static void count_devices(void)
{
    hipError_t err;
    int n = 0;

    err = hipGetDeviceCount(&n);
    if (err != hipSuccess) {
        snprintf(count_why, sizeof(count_why), "no GPU: hipGetDeviceCount: %s: %s",
                 hipGetErrorName(err), hipGetErrorString(err));
        (void)hipGetLastError();
        count_status = PDX_ERR_NO_DEVICE;
    } else if (n <= 0) {
        snprintf(count_why, sizeof(count_why), "no GPU: hipGetDeviceCount found none");
        count_status = PDX_ERR_NO_DEVICE;
    } else {
        count_value = n;
        count_status = PDX_OK;
        pdx_info("hip: %d GPU%s (platform %s)", n, n == 1 ? "" : "s", PDX_HIP_PLATFORM);
        return;
    }
    pdx_info("hip: %s (platform %s)", count_why, PDX_HIP_PLATFORM);
}

pdx_status_t pdx_hip_device_count(int *count_p)
{
    if (!count_p) {
        pdx_error("hip: device_count: NULL output");
        return PDX_ERR_INVALID;
    }
    pthread_once(&count_once, count_devices);
    if (count_status != PDX_OK)
        return count_status;
    *count_p = count_value;
    return PDX_OK;
}

const char *pdx_hip_no_device_reason(void)
{
    return count_why;
}

/* PDX_OK when device is an ordinal of a present GPU; else logged. */
static pdx_status_t check_device(int device, const char *call)
{
    int n = 0;
    pdx_status_t st = pdx_hip_device_count(&n);

    if (st != PDX_OK) {
        pdx_error("hip: %s: GPU %d: %s", call, device, count_why);
        return st;
    }
    if (device < 0 || device >= n) {
        pdx_error("hip: %s: GPU %d does not exist (the runtime sees %d)", call, device, n);
        return PDX_ERR_INVALID;
    }
    return PDX_OK;
}

/* NUMA node of a PCI device from sysfs; -1 when unknown. *source_p:
 * "sysfs" when the file was read, "none" when not. */
static int numa_node_of(const char *bus_id, const char **source_p)
{
    char path[96];
    FILE *f;
    int node = -1;

    *source_p = "none";
    snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", bus_id);
    f = fopen(path, "re");
    if (!f) {
        pdx_debug("hip: %s: %s", path, strerror(errno));
        return -1;
    }
    if (fscanf(f, "%d", &node) == 1)
        *source_p = "sysfs";
    else
        node = -1;
    fclose(f);
    return node;
}

/* The runtime's product name of device into name; "" when it gives none
 * (logged at debug: a name is not needed to move pages). */
static void runtime_name(int device, char *name, size_t len)
{
    hipDeviceProp_t prop;
    hipError_t err;

    err = hipGetDeviceProperties(&prop, device);
    if (err != hipSuccess) {
        pdx_debug("hip: GPU %d: hipGetDeviceProperties: %s: %s; no name", device,
                  hipGetErrorName(err), hipGetErrorString(err));
        (void)hipGetLastError();
        return;
    }
    prop.name[sizeof(prop.name) - 1] = '\0';
    if (snprintf(name, len, "%s", prop.name) >= (int)len)
        pdx_debug("hip: GPU %d: name \"%s\" cut to %zu bytes", device, prop.name, len - 1);
}

pdx_status_t pdx_hip_device_identity(int device, pdx_hip_identity_t *id_p)
{
    unsigned domain, bus, dev, fn;
    char raw[PDX_HIP_BUS_ID_MAX];
    pdx_hip_identity_t id;
    hipError_t err;
    pdx_status_t st;

    if (!id_p) {
        pdx_error("hip: device_identity: NULL output");
        return PDX_ERR_INVALID;
    }
    st = check_device(device, "device_identity");
    if (st != PDX_OK)
        return st;
    memset(&id, 0, sizeof(id));
    id.device = device;
    err = hipDeviceGetPCIBusId(raw, (int)sizeof(raw), device);
    if (err != hipSuccess)
        return hipx_fail(err, "hipDeviceGetPCIBusId", NULL);
    /* The runtimes write upper-case hex, with a 4- or 8-digit domain;
     * sysfs names are "%04x:%02x:%02x.%x". */
    if (sscanf(raw, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) {
        pdx_error("hip: GPU %d: unexpected PCI bus id \"%s\"", device, raw);
        return PDX_ERR_IO;
    }
    snprintf(id.pci_bus_id, sizeof(id.pci_bus_id), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    id.numa_node = numa_node_of(id.pci_bus_id, &id.source);
#if defined(PDX_HIP_PLATFORM_AMD)
    hipx_smi_apply(hipx_smi_facts(), &id);
#endif
    if (!id.name[0])
        runtime_name(device, id.name, sizeof(id.name));
    *id_p = id;
    return PDX_OK;
}

pdx_status_t pdx_hip_current_device(int *device_p)
{
    int device = hipx_current_device();

    if (!device_p)
        return PDX_ERR_INVALID;
    if (device < 0) {
        pdx_error("hip: the calling thread has no current GPU (%s)", count_why[0] ? count_why
                                                                                 : "hipGetDevice failed");
        return PDX_ERR_NO_DEVICE;
    }
    *device_p = device;
    return PDX_OK;
}

pdx_status_t pdx_hip_set_device(int device)
{
    hipError_t err;
    pdx_status_t st = check_device(device, "set_device");

    if (st != PDX_OK)
        return st;
    err = hipSetDevice(device);
    if (err != hipSuccess)
        return hipx_fail(err, "hipSetDevice", NULL);
    return PDX_OK;
}
