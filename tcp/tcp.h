/*
 * tcp transport: hooks for tests. The transport itself is reached through
 * pdx_tcp_ops (base/transport.h).
 */
#ifndef PDX_TCP_H
#define PDX_TCP_H

#include "transport.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Hold (paused = true) or release the receive side of every endpoint of tp:
 * its progress thread stops reading from sockets, so incoming frames wait in
 * the kernel before placement and nothing is acknowledged. Everything else
 * (sending, commands, deadlines, close) keeps working. Returns once the
 * thread applied it (bounded).
 */
void pdx_tcp_pause(pdx_tp_t *tp, bool paused);

/* ------------------------------------------------------------- GPU copies */

typedef enum pdx_tcp_copy_dir {
    PDX_TCP_COPY_H2D = 0, /* staging -> GPU region (receiver) */
    PDX_TCP_COPY_D2H = 1, /* GPU region -> staging (sender) */
} pdx_tcp_copy_dir_t;

/* One copy of a batch: len bytes from src to dst (the layout hip/'s gather
 * kernel reads). */
typedef struct pdx_tcp_run {
    uint64_t src;
    uint64_t dst;
    uint64_t len;
} pdx_tcp_run_t;

/*
 * How tcp reaches GPU memory (regions registered with PDX_TP_ACCESS_DEVICE):
 * through pinned staging buffers and asynchronous copies (tcp/stage.c). The
 * default copier calls hip/; tests install one that copies with memcpy on a
 * thread of their own.
 *
 * Threads: device_of and stream_create run on the thread that registers a
 * tp's first GPU region; host_alloc and event_create on the thread that
 * creates an endpoint (or, for an endpoint created before any GPU region,
 * once on the progress thread); copy_async only on the progress thread;
 * query on the progress thread and, while an endpoint is destroyed, on the
 * destroying thread; the *_free/_destroy calls on threads that destroy an
 * endpoint or close the tp, once no copy uses the object. Every call names
 * the GPU the staging serves (device_of's answer). copy_runs_async runs
 * where copy_async does.
 */
typedef struct pdx_tcp_copier {
    const char *name;
    /* The GPU owning [base, base + len); PDX_ERR_UNSUPPORTED (logged) when
     * the range is not GPU memory or there is no GPU runtime. */
    pdx_status_t (*device_of)(const void *base, size_t len, int *device_p);
    /* Pinned host memory for staging. */
    pdx_status_t (*host_alloc)(int device, size_t len, void **ptr_p);
    void         (*host_free)(int device, void *ptr);
    pdx_status_t (*stream_create)(int device, void **stream_p);
    void         (*stream_destroy)(int device, void *stream);
    /* A copy's completion, made at setup (none is made per copy). */
    pdx_status_t (*event_create)(int device, void **event_p);
    void         (*event_destroy)(int device, void *event);
    /* Enqueue a copy of len bytes on stream and record done after it. Never
     * waits for the copy. An error is logged; the copy may have been
     * enqueued all the same (tcp then never frees that staging). */
    pdx_status_t (*copy_async)(int device, void *stream, pdx_tcp_copy_dir_t dir, void *dst,
                               const void *src, size_t len, void *done);
    /* PDX_OK once the copy before done finished, PDX_INPROGRESS before, or
     * the error that ended it (logged); never blocks. After an error the copy
     * no longer touches its buffers. PDX_ERR_AGAIN (logged): a thread
     * other than the progress thread could not ask; the copy may still run. */
    pdx_status_t (*query)(int device, void *done);
    /* The calling thread's last error as text, for endpoint messages. */
    const char  *(*last_error)(void);
    /* Optional (NULL: one copy_async per piece). Enqueue the copies of
     * runs[0, nruns) on stream as one operation, not one copy each, and
     * record done after them. runs is in memory from host_alloc and does
     * not change until done completed; no two runs write the same bytes.
     * Errors as copy_async. */
    pdx_status_t (*copy_runs_async)(int device, void *stream, pdx_tcp_copy_dir_t dir,
                                    const pdx_tcp_run_t *runs, uint32_t nruns, void *done);
    /* Optional, with copy_runs_async: make it ready on device (load what it
     * launches), where stream_create runs. Done on first use instead, it
     * could wait for the GPU's other work, and that may be a stream waiting
     * for a word the host raises once this very copy finished. An error:
     * this tp copies piece by piece. */
    pdx_status_t (*runs_prepare)(int device);
} pdx_tcp_copier_t;

/*
 * Install the copier that tps opened from now on use (NULL: the hip one).
 * The table must outlive those tps. For tests.
 */
void pdx_tcp_set_copier(const pdx_tcp_copier_t *copier);

#endif
