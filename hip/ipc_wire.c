/*
 * hip IPC handles as bytes: the layout of pdx_hip_ipc_handle_t, fixed on
 * every ABI, and the check an opener runs before trusting any field. No
 * runtime call, so every platform (none included) builds this file, and
 * tests without a GPU exercise it.
 *
 * Layout (byte offsets): magic 0, version 4, platform 6, pid 8, reserved 12,
 * nonce 16, alloc_id 24, base 32, size 40, offset 48, len 56, pci_bus_id
 * 64 (32 bytes, NUL-terminated), runtime 96 (64 bytes); 160 in all. Every
 * field sits at a multiple of its size, so no ABI pads it.
 */
#include "hip_api.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(pdx_hip_ipc_handle_t) == PDX_HIP_IPC_HANDLE_BYTES,
               "pdx_hip_ipc_handle_t is 160 bytes on the wire");
_Static_assert(offsetof(pdx_hip_ipc_handle_t, nonce) == 16, "nonce at 16");
_Static_assert(offsetof(pdx_hip_ipc_handle_t, len) == 56, "len at 56");
_Static_assert(offsetof(pdx_hip_ipc_handle_t, pci_bus_id) == 64, "pci_bus_id at 64");
_Static_assert(offsetof(pdx_hip_ipc_handle_t, runtime) == 96, "runtime at 96");

/* Whether s (NUL within len) is a bus id as export writes it, "%04x:%02x:%02x.%x"
 * in lower case: parsed and printed again, it must read the same. */
static bool bus_id_ok(const char *s, size_t len)
{
    unsigned domain, bus, dev, fn;
    char again[PDX_HIP_BUS_ID_MAX];

    if (!memchr(s, '\0', len) || !s[0])
        return false;
    if (sscanf(s, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4 || bus > 0xff || dev > 0x1f ||
        fn > 7)
        return false;
    snprintf(again, sizeof(again), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    return strcmp(again, s) == 0;
}

pdx_status_t pdx_hip_ipc_handle_check(const pdx_hip_ipc_handle_t *h)
{
    if (!h) {
        pdx_error("hip: ipc: NULL handle");
        return PDX_ERR_INVALID;
    }
    if (h->magic != PDX_HIP_IPC_MAGIC) {
        pdx_error("hip: ipc: not a pdx IPC handle (magic %#x, expected %#x)", h->magic,
                  PDX_HIP_IPC_MAGIC);
        return PDX_ERR_PROTO;
    }
    if (h->version != PDX_HIP_IPC_VERSION) {
        pdx_error("hip: ipc: handle version %u, this pdx reads %u", h->version,
                  PDX_HIP_IPC_VERSION);
        return PDX_ERR_VERSION;
    }
    if (h->platform != PDX_HIP_IPC_AMD && h->platform != PDX_HIP_IPC_NVIDIA) {
        pdx_error("hip: ipc: handle of unknown platform %u", h->platform);
        return PDX_ERR_PROTO;
    }
    if (h->reserved != 0 || h->pid == 0 || h->base == 0) {
        pdx_error("hip: ipc: malformed handle (reserved %u, pid %u, base %#llx)", h->reserved,
                  h->pid, (unsigned long long)h->base);
        return PDX_ERR_PROTO;
    }
    if (!bus_id_ok(h->pci_bus_id, sizeof(h->pci_bus_id))) {
        pdx_error("hip: ipc: handle's PCI bus id is not of the form 0000:c1:00.0");
        return PDX_ERR_PROTO;
    }
    if (h->len == 0 || h->offset > h->size || h->len > h->size - h->offset ||
        h->base + h->size < h->base) {
        pdx_error("hip: ipc: handle's range %llu + %llu lies outside its allocation of %llu "
                  "bytes at %#llx", (unsigned long long)h->offset, (unsigned long long)h->len,
                  (unsigned long long)h->size, (unsigned long long)h->base);
        return PDX_ERR_PROTO;
    }
    return PDX_OK;
}
