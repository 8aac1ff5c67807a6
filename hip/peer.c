/*
 * hip peers: whether this process's GPU reaches another GPU's memory (the
 * ipc transport's choice of a direct path), and host callbacks on a stream
 * (its wake-up once copies finish).
 */
#include "hip_api.h"

#include <stdio.h>
#include <stdlib.h>

pdx_status_t pdx_hip_peer_reachable(int device, const char *bus_id, bool *yes_p, char *why,
                                    size_t len)
{
    int other = -1, can = 0;
    hipError_t err;

    if (!bus_id || !yes_p || !why || !len) {
        pdx_error("hip: peer_reachable: NULL argument");
        return PDX_ERR_INVALID;
    }
    *yes_p = false;
    if (!bus_id[0]) {
        snprintf(why, len, "the peer has no GPU");
        return PDX_OK;
    }
    err = hipDeviceGetByPCIBusId(&other, bus_id);
    if (err != hipSuccess) {
        snprintf(why, len, "its GPU %s is not one this process sees (%s)", bus_id,
                 hipGetErrorName(err));
        (void)hipGetLastError(); /* not sticky: clear it */
        return PDX_OK;
    }
    if (other == device) {
        *yes_p = true;
        snprintf(why, len, "the same GPU (%s)", bus_id);
        return PDX_OK;
    }
    err = hipDeviceCanAccessPeer(&can, device, other);
    if (err != hipSuccess)
        return hipx_fail(err, "hipDeviceCanAccessPeer", bus_id);
    *yes_p = can != 0;
    snprintf(why, len, can ? "GPU %d reaches GPU %d (%s) peer to peer"
                           : "GPU %d cannot reach GPU %d (%s) peer to peer", device, other,
             bus_id);
    return PDX_OK;
}

typedef struct callback {
    void (*fn)(void *);
    void *arg;
} callback_t;

/* hipStreamAddCallback's signature (hipLaunchHostFunc is missing from
 * older HIP runtimes), for fn(arg). */
static void trampoline(hipStream_t stream, hipError_t status, void *user)
{
    callback_t c = *(callback_t *)user;

    (void)stream;
    (void)status;
    free(user);
    c.fn(c.arg);
}

pdx_status_t pdx_hip_stream_callback(void *stream, void (*fn)(void *), void *arg)
{
    callback_t *c;
    hipError_t err;

    if (!fn) {
        pdx_error("hip: stream_callback: NULL function");
        return PDX_ERR_INVALID;
    }
    c = malloc(sizeof(*c));
    if (!c)
        return PDX_ERR_NOMEM;
    *c = (callback_t){.fn = fn, .arg = arg};
    err = hipStreamAddCallback((hipStream_t)stream, trampoline, c, 0);
    if (err != hipSuccess) {
        free(c);
        return hipx_fail(err, "hipStreamAddCallback", NULL);
    }
    return PDX_OK;
}
