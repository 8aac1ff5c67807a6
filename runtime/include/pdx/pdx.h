/*
 * pdx — moves KV-cache pages from a prefill engine to a decode engine.
 *
 * This is the only header users include. All handles are opaque; all
 * functions return a pdx_status_t unless stated otherwise; outputs (arguments
 * ending in _p) are written only when the call returns PDX_OK.
 *
 * Threading: unless a function says otherwise it is safe to call from any
 * thread, concurrently with any other function on the same engine, except
 * pdx_engine_destroy(), which must be the last call on its engine.
 *
 * A decode step:   pdx_peer_connect() once per prefill engine; per request
 *                  pdx_expect() with the pages it allocated, pdx_poll() until
 *                  PDX_ROOM_SUCCESS, read the aux slot, pdx_release().
 * A prefill step:  per request, after each forward chunk is enqueued on the
 *                  GPU, pdx_gate_arm() then pdx_send() with the chunk's pages,
 *                  the last chunk with PDX_SEND_LAST; pdx_poll() until
 *                  PDX_ROOM_SUCCESS; pdx_release().
 */
#ifndef PDX_PDX_H
#define PDX_PDX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PDX_BUILDING_LIBRARY)
#define PDX_API __attribute__((visibility("default")))
#else
#define PDX_API
#endif

#define PDX_VERSION_MAJOR 0
#define PDX_VERSION_MINOR 1
#define PDX_VERSION_PATCH 0

/* Control-channel protocol version, checked at handshake. */
#define PDX_PROTOCOL_VERSION 11

/* ---------------------------------------------------------------- status */

typedef enum pdx_status {
    PDX_OK              = 0,
    PDX_INPROGRESS      = 1,   /* not done yet; ask again */
    PDX_ERR_INVALID     = -1,  /* bad argument */
    PDX_ERR_NOMEM       = -2,  /* out of host memory */
    PDX_ERR_AGAIN       = -3,  /* a bounded queue is full; retry later */
    PDX_ERR_TIMEOUT     = -4,  /* a deadline passed */
    PDX_ERR_NOT_FOUND   = -5,  /* unknown room, peer, memory or layout */
    PDX_ERR_EXISTS      = -6,  /* the id is already in use */
    PDX_ERR_RANGE       = -7,  /* page, offset or length outside a region */
    PDX_ERR_VERSION     = -8,  /* peer speaks another protocol version */
    PDX_ERR_PEER        = -9,  /* the peer closed, reset or stopped answering */
    PDX_ERR_PROTO       = -10, /* malformed bytes on the wire */
    PDX_ERR_IO          = -11, /* a system or device call failed */
    PDX_ERR_UNSUPPORTED = -12, /* not available in this build or on this device */
    PDX_ERR_ABORTED     = -13, /* the room was aborted */
    PDX_ERR_NO_DEVICE   = -14, /* no GPU or NIC where one is required */
    PDX_ERR_FULL        = -15, /* a fixed-capacity table is full */
    PDX_ERR_STATE       = -16, /* the call does not fit the object's state */
    PDX_ERR_AUTH        = -17, /* the peer did not prove the key (PDX_AUTH_KEY) */
    PDX_ERR_CORRUPT     = -18, /* received bytes failed their checksum (PDX_VERIFY) */
} pdx_status_t;

/* A static string naming the status; never NULL, also for unknown values. */
PDX_API const char *pdx_status_str(pdx_status_t status);

/* "major.minor.patch" of the library actually loaded. */
PDX_API const char *pdx_version(void);

/* ------------------------------------------------------------ room states */

typedef uint64_t pdx_room_t; /* caller-chosen id (sglang's bootstrap_room) */

/* The numbers of sglang's KVPoll, so bindings map 1:1, plus NONE. */
typedef enum pdx_room_state {
    PDX_ROOM_NONE          = -1, /* the id is not in the room table */
    PDX_ROOM_FAILED        = 0,  /* terminal */
    PDX_ROOM_BOOTSTRAPPING = 1,  /* prefill: waiting for decode's metadata */
    PDX_ROOM_WAITING       = 2,  /* prefill: no chunk yet; decode: expected */
    PDX_ROOM_TRANSFERRING  = 3,
    PDX_ROOM_SUCCESS       = 4,  /* terminal; on decode the data is visible */
} pdx_room_state_t;

/* ----------------------------------------------------------- configuration */

typedef enum pdx_log_level {
    PDX_LOG_ERROR = 0,
    PDX_LOG_WARN  = 1,
    PDX_LOG_INFO  = 2,
    PDX_LOG_DEBUG = 3,
    PDX_LOG_TRACE = 4,
} pdx_log_level_t;

/*
 * Where pdx's log lines go, process-wide. Without a handler each line goes
 * to stderr as "TIME PID ENGINE pdx LEVEL file:line: message" (TIME in UTC
 * with microseconds, ENGINE the address of the engine the line is about, "-"
 * for none). A handler gets the level, the engine's address ("" for none)
 * and "file:line: message" (no newline), on the thread that logs, and must
 * not call back into pdx. NULL restores stderr. Install it before creating
 * engines. Only lines at or above PDX_LOG's level are made.
 */
typedef void pdx_log_handler_t(void *arg, pdx_log_level_t level, const char *engine,
                               const char *message);
PDX_API void pdx_log_set_handler(pdx_log_handler_t *handler, void *arg);

typedef enum pdx_mode {
    PDX_MODE_AUTO = 0,
    PDX_MODE_ON   = 1,
    PDX_MODE_OFF  = 2,
} pdx_mode_t;

/* Bits of pdx_config_t.field_mask. Never renumbered; new fields get new bits. */
enum {
    PDX_CONFIG_FIELD_LOG_LEVEL           = 1ull << 0,
    PDX_CONFIG_FIELD_TRANSPORT           = 1ull << 1,
    PDX_CONFIG_FIELD_LISTEN              = 1ull << 2,
    PDX_CONFIG_FIELD_SHARDS              = 1ull << 3,
    PDX_CONFIG_FIELD_RING_CHUNKS         = 1ull << 4,
    PDX_CONFIG_FIELD_RING_PAGES          = 1ull << 5,
    PDX_CONFIG_FIELD_ROOMS               = 1ull << 6,
    PDX_CONFIG_FIELD_HELD_NOTIFIES       = 1ull << 7,
    PDX_CONFIG_FIELD_MAX_MSG_SIZE        = 1ull << 8,
    PDX_CONFIG_FIELD_BOOTSTRAP_TIMEOUT   = 1ull << 9,
    PDX_CONFIG_FIELD_TRANSFER_TIMEOUT    = 1ull << 10,
    PDX_CONFIG_FIELD_HEARTBEAT           = 1ull << 11,
    PDX_CONFIG_FIELD_GATE_BACKOFF        = 1ull << 12,
    PDX_CONFIG_FIELD_QPS_PER_PEER        = 1ull << 13,
    PDX_CONFIG_FIELD_SQ_DEPTH            = 1ull << 14,
    PDX_CONFIG_FIELD_SIGNAL_EVERY        = 1ull << 15,
    PDX_CONFIG_FIELD_FLUSH               = 1ull << 16,
    PDX_CONFIG_FIELD_DMABUF              = 1ull << 17,
    PDX_CONFIG_FIELD_MARKERS             = 1ull << 18,
    PDX_CONFIG_FIELD_IB_DEVICES          = 1ull << 19,
    PDX_CONFIG_FIELD_IB_GID_INDEX        = 1ull << 20,
    PDX_CONFIG_FIELD_IB_TRAFFIC_CLASS    = 1ull << 21,
    PDX_CONFIG_FIELD_IB_HOP_LIMIT        = 1ull << 22,
    PDX_CONFIG_FIELD_IB_TIMEOUT          = 1ull << 23,
    PDX_CONFIG_FIELD_IB_RETRY_COUNT      = 1ull << 24,
    PDX_CONFIG_FIELD_IB_RNR_RETRY        = 1ull << 25,
    PDX_CONFIG_FIELD_TCP_STAGING         = 1ull << 26,
    PDX_CONFIG_FIELD_GPU                 = 1ull << 27,
    PDX_CONFIG_FIELD_NICS                = 1ull << 28,
    PDX_CONFIG_FIELD_HANDSHAKE_TIMEOUT   = 1ull << 29,
    PDX_CONFIG_FIELD_AUTH_KEY            = 1ull << 30,
    PDX_CONFIG_FIELD_AUTH_KEY_FILE       = 1ull << 31,
    PDX_CONFIG_FIELD_VERIFY              = 1ull << 32,
    PDX_CONFIG_FIELD_ADVERTISE_ADDR      = 1ull << 33,
    PDX_CONFIG_FIELD_CPU_AFFINITY        = 1ull << 34,
    PDX_CONFIG_FIELD_GPU_GATES           = 1ull << 35,
    PDX_CONFIG_FIELD_SHARD_SPIN          = 1ull << 36,
    PDX_CONFIG_FIELD_GATE_SPIN           = 1ull << 37,
};

/* PDX_VERIFY: decode checks each room's bytes against its senders' checksums. */
typedef enum pdx_verify_mode {
    PDX_VERIFY_OFF    = 0,
    PDX_VERIFY_CRC32C = 1,
} pdx_verify_mode_t;

#define PDX_NAME_MAX 128

/*
 * Engine configuration. pdx_config_init() fills every field from its default
 * and the PDX_* environment and sets field_mask to every field this header
 * knows; fields written afterwards override the environment. A caller that
 * builds the struct by hand sets the bits of the fields it filled; fields
 * without their bit take their defaults. `pdx-info --config` and
 * docs/configuration.md list every variable.
 */
typedef struct pdx_config {
    uint64_t        field_mask;
    pdx_log_level_t log_level;                 /* PDX_LOG */
    char            transport[PDX_NAME_MAX];   /* PDX_TRANSPORT: auto, tcp, rdma */
    char            listen[PDX_NAME_MAX];      /* PDX_LISTEN: host:port, [ipv6]:port,
                                                * port 0 = any */
    uint32_t        shards;                    /* PDX_SHARDS */
    uint32_t        ring_chunks;               /* PDX_RING_CHUNKS: chunks per shard ring */
    uint32_t        ring_pages;                /* PDX_RING_PAGES: page indices per shard ring */
    uint32_t        rooms;                     /* PDX_ROOMS: room table capacity */
    uint32_t        held_notifies;             /* PDX_HELD_NOTIFIES: notifies held before pdx_expect */
    uint64_t        max_msg_size;              /* PDX_MAX_MSG_SIZE: bytes per write */
    uint32_t        bootstrap_timeout_ms;      /* PDX_BOOTSTRAP_TIMEOUT_MS */
    uint32_t        transfer_timeout_ms;       /* PDX_TRANSFER_TIMEOUT_MS */
    uint32_t        heartbeat_ms;              /* PDX_HEARTBEAT_MS */
    uint32_t        gate_backoff_us;           /* PDX_GATE_BACKOFF_US: sleep between polls of
                                                * closed gates (gates closed long: longer) */
    uint32_t        qps_per_peer;              /* PDX_QPS_PER_PEER: endpoints per (shard, peer) */
    uint32_t        sq_depth;                  /* PDX_SQ_DEPTH: send queue depth per endpoint */
    uint32_t        signal_every;              /* PDX_SIGNAL_EVERY: signal every K-th write */
    pdx_mode_t      flush;                     /* PDX_FLUSH: auto, on, off */
    pdx_mode_t      dmabuf;                    /* PDX_DMABUF: auto, off */
    pdx_mode_t      markers;                   /* PDX_MARKERS: on, off */
    char            ib_devices[PDX_NAME_MAX];  /* PDX_IB_DEVICES: comma list, empty = all */
    int32_t         ib_gid_index;              /* PDX_IB_GID_INDEX: -1 = pick RoCEv2 */
    uint32_t        ib_traffic_class;          /* PDX_IB_TRAFFIC_CLASS */
    uint32_t        ib_hop_limit;              /* PDX_IB_HOP_LIMIT */
    uint32_t        ib_timeout;                /* PDX_IB_TIMEOUT: 4.096 us * 2^n */
    uint32_t        ib_retry_count;            /* PDX_IB_RETRY_COUNT */
    uint32_t        ib_rnr_retry;              /* PDX_IB_RNR_RETRY: at most 6 */
    uint64_t        tcp_staging_bytes;         /* PDX_TCP_STAGING_BYTES: pinned staging per endpoint */
    int32_t         gpu;                       /* PDX_GPU: device ordinal, -1 = the creating
                                                * thread's current device */
    uint32_t        nics;                      /* PDX_NICS: NICs the engine's data uses */
    uint32_t        handshake_timeout_ms;      /* PDX_HANDSHAKE_TIMEOUT_MS: from accept to READY */
    char            auth_key[PDX_NAME_MAX];    /* PDX_AUTH_KEY: the shared key, "" = none */
    char            auth_key_file[PDX_NAME_MAX]; /* PDX_AUTH_KEY_FILE: a file holding it */
    pdx_verify_mode_t verify;                  /* PDX_VERIFY: off, crc32c */
    char            advertise_addr[PDX_NAME_MAX]; /* PDX_ADVERTISE_ADDR: the host peers dial,
                                                * "" = from PDX_LISTEN (a wildcard: the
                                                * default route's interface) */
    char            cpu_affinity[PDX_NAME_MAX]; /* PDX_CPU_AFFINITY: auto, off or a CPU list */
    pdx_mode_t      gpu_gates;                 /* PDX_GPU_GATES: auto, off */
    uint32_t        shard_spin_us;             /* PDX_SHARD_SPIN_US: a shard polls this long
                                                * after its last work before it sleeps */
    uint32_t        gate_spin_us;              /* PDX_GATE_SPIN_US: a closed gate is polled
                                                * without sleeping this close to the ages
                                                * at which the shard's last gates opened */
} pdx_config_t;

/*
 * Fill cfg with defaults, then apply the PDX_* environment. A malformed
 * variable is reported (its name, value and why) and makes the call return
 * PDX_ERR_INVALID; cfg then holds the defaults and every valid variable.
 */
PDX_API pdx_status_t pdx_config_init(pdx_config_t *cfg);

/*
 * Set one field by its variable name ("PDX_SHARDS") from text, as the
 * environment would. Unknown name: PDX_ERR_NOT_FOUND; bad value:
 * PDX_ERR_INVALID with a message naming the variable.
 */
PDX_API pdx_status_t pdx_config_set(pdx_config_t *cfg, const char *name, const char *value);

/* One PDX_* variable, as pdx_config_describe() tells it. */
typedef struct pdx_config_var {
    const char *name;           /* "PDX_SHARDS" */
    const char *default_value;  /* as text */
    const char *help;           /* what it means */
    const char *choices;        /* the words it takes, "|"-separated; NULL: not words */
    char        value[PDX_NAME_MAX + 8]; /* its value in cfg as text; "" without cfg */
} pdx_config_var_t;

/*
 * The index-th PDX_* variable (0, 1, ...; PDX_ERR_NOT_FOUND past the last):
 * its name, default and meaning, and its value in cfg (may be NULL). The
 * strings are static. `pdx-info --config` prints the table this way.
 */
PDX_API pdx_status_t pdx_config_describe(const pdx_config_t *cfg, uint32_t index,
                                         pdx_config_var_t *var_p);

/* ------------------------------------------------------------------ engine */

typedef struct pdx_engine pdx_engine_t;

/*
 * Create an engine: one per GPU per process. Starts the shard workers and the
 * control thread and binds the listener (port 0 picks a free port; see
 * pdx_engine_address()). cfg may be freed when the call returns; NULL means
 * pdx_config_init()'s result.
 */
PDX_API pdx_status_t pdx_engine_create(const pdx_config_t *cfg, pdx_engine_t **engine_p);

/*
 * Stop every thread, fail every room still in flight (with a message), close
 * every peer and free everything. Must be the last call on the engine; no
 * other call on it may run concurrently.
 */
PDX_API void pdx_engine_destroy(pdx_engine_t *engine);

/* "host:port" ("[ipv6]:port") peers dial to reach the engine: its advertised
 * host (PDX_ADVERTISE_ADDR; for a wildcard PDX_LISTEN the address of the
 * default route's interface) and its listener's port. Valid until
 * pdx_engine_destroy(). */
PDX_API const char *pdx_engine_address(const pdx_engine_t *engine);

/* The data transport the engine uses: "rdma" or "tcp" (PDX_TRANSPORT=auto
 * picks rdma when an RDMA device is usable). Valid until
 * pdx_engine_destroy(). */
PDX_API const char *pdx_engine_transport(const pdx_engine_t *engine);

/* ------------------------------------------------------------------ memory */

/*
 * Register [base, base + len) for transfers: host memory, or GPU memory (which
 * is exported as a dmabuf or reached through a peer-memory client). The
 * memory must stay allocated until pdx_mem_deregister() returned PDX_OK. An
 * unusable GPU pointer is PDX_ERR_UNSUPPORTED with a message naming what is
 * missing.
 */
PDX_API pdx_status_t pdx_mem_register(pdx_engine_t *engine, void *base, size_t len,
                                      uint32_t *mem_p);

/* PDX_ERR_STATE while a layout or a room in flight still uses the memory. */
PDX_API pdx_status_t pdx_mem_deregister(pdx_engine_t *engine, uint32_t mem);

/* ------------------------------------------------------------------ layout */

/* One KV buffer: pages of bytes_per_page, back to back, from mem + offset. */
typedef struct pdx_buffer_desc {
    uint32_t mem;            /* from pdx_mem_register() */
    uint32_t reserved0;
    uint64_t offset;         /* of page 0 inside the registered region */
    uint64_t bytes_per_page;
    uint64_t reserved[2];    /* TP-mismatch head slicing: head offset, head bytes */
} pdx_buffer_desc_t;

enum {
    /* The group's buffers are not per layer: buffer i maps to the peer's buffer i. */
    PDX_GROUP_NO_LAYERS = 1u << 0,
    /* State buffers (Mamba-style): sent with the last chunk only. */
    PDX_GROUP_STATE     = 1u << 1,
};

/*
 * A buffer group: every buffer holds the same number of pages and a page
 * index means the same token slots in each of them. Unless
 * PDX_GROUP_NO_LAYERS is set, buffers are layer-major: buffer
 * (layer - layer_begin) * buffers_per_layer + k is part k (K, V, ...) of that
 * layer, and nbuffers = (layer_end - layer_begin) * buffers_per_layer.
 */
typedef struct pdx_group_desc {
    uint32_t                 flags;
    uint32_t                 buffers_per_layer;
    uint32_t                 nbuffers;
    uint32_t                 reserved0;
    uint64_t                 npages;
    const pdx_buffer_desc_t *buffers;
} pdx_group_desc_t;

enum {
    PDX_LAYOUT_FIELD_GROUPS = 1ull << 0,
    PDX_LAYOUT_FIELD_LAYERS = 1ull << 1,
    PDX_LAYOUT_FIELD_TP     = 1ull << 2, /* reserved: TP-mismatch head slicing */
};

/*
 * Where this engine's KV pages live. Layers [layer_begin, layer_end) are the
 * ones this engine holds (pipeline parallelism); only layers both sides hold
 * are sent. A missing PDX_LAYOUT_FIELD_LAYERS means one layer.
 */
typedef struct pdx_layout_desc {
    uint64_t                field_mask;
    uint32_t                ngroups;
    uint32_t                layer_begin;
    uint32_t                layer_end;
    uint32_t                tp_rank;      /* reserved */
    uint32_t                tp_size;      /* reserved */
    uint32_t                reserved0;
    const pdx_group_desc_t *groups;
} pdx_layout_desc_t;

/* Copy desc into the engine; desc and its arrays may be freed on return. */
PDX_API pdx_status_t pdx_layout_create(pdx_engine_t *engine, const pdx_layout_desc_t *desc,
                                       uint32_t *layout_p);

/* ------------------------------------------------------------------- peers */

/*
 * Connect to the engine listening at addr ("host:port", "[ipv6]:port"; a
 * port of 1-65535, else PDX_ERR_INVALID), handshake (protocol version,
 * capabilities, identity, memory and layout descriptors) and return its
 * handle. Blocks at most timeout_ms. A peer of another protocol version is
 * PDX_ERR_VERSION, on both sides; an engine whose peer slots are all in use
 * answers PDX_ERR_FULL, one with too many handshakes in progress from this
 * address PDX_ERR_AGAIN; across hosts, either side advertising a loopback
 * address (PDX_ADVERTISE_ADDR) is PDX_ERR_INVALID, on both sides. Either
 * side may connect; the connection serves both directions.
 *
 * With PDX_AUTH_KEY (or PDX_AUTH_KEY_FILE) set, both engines first prove to
 * each other that they hold the same key, which never crosses the wire;
 * until then neither learns anything of the other, and everything after is
 * sealed (encrypted and authenticated). A peer without the key, with
 * another key, or with a key where this engine has none is PDX_ERR_AUTH,
 * on both sides.
 *
 * A handle names one connection: once that peer is gone (failed, closed,
 * or replaced by a new incarnation of its engine, which is the same address
 * and listener port with a new identity) calls with it are PDX_ERR_PEER,
 * and its slot serves the next peer under another handle. An engine serves
 * any number of peers over its life, 64 at once.
 */
PDX_API pdx_status_t pdx_peer_connect(pdx_engine_t *engine, const char *addr, int timeout_ms,
                                      uint32_t *peer_p);

/*
 * Close the connection with a peer on purpose: it is told (a goodbye), and
 * on both sides the rooms that need it fail with "peer closed" as a
 * routine event (nothing is logged as a warning). The handle is stale
 * afterwards. PDX_OK also for a peer already gone; PDX_ERR_NOT_FOUND for a
 * handle this engine never returned. pdx_engine_destroy() says goodbye to
 * every peer the same way.
 */
PDX_API pdx_status_t pdx_peer_close(pdx_engine_t *engine, uint32_t peer);

/*
 * Wait at most timeout_ms for the next peer that connected to this engine
 * (an incoming connection whose handshake finished) and return its handle;
 * each incoming peer is returned once. PDX_ERR_TIMEOUT when none came.
 */
PDX_API pdx_status_t pdx_peer_accept(pdx_engine_t *engine, int timeout_ms, uint32_t *peer_p);

/* ------------------------------------------------------------ descriptors */

/*
 * Descriptors name an engine, or one of its registered regions, to another
 * engine as bytes that travel by any side channel (a bootstrap service, a
 * framework's own messages). They are versioned and checked on use: bytes
 * that are not a descriptor are PDX_ERR_PROTO, one of another descriptor
 * version PDX_ERR_VERSION, each with a message.
 */
#define PDX_ENGINE_DESC_MAX 96   /* bytes of an engine descriptor at most */
#define PDX_MEM_DESC_MAX    96   /* bytes of a memory descriptor at most */

/* This engine's descriptor: its identity and its listener's address. */
PDX_API pdx_status_t pdx_engine_desc(const pdx_engine_t *engine, void *buf, size_t cap,
                                     size_t *len_p);

typedef struct pdx_engine_desc_info {
    uint64_t id;                 /* the engine's identity */
    char     host[PDX_NAME_MAX]; /* its listener's address */
    uint32_t port;
} pdx_engine_desc_info_t;

PDX_API pdx_status_t pdx_engine_desc_info(const void *desc, size_t len,
                                          pdx_engine_desc_info_t *info_p);

/*
 * The peer an engine descriptor names: the handle of the connection to that
 * engine when there is one (READY; no second connection is made), else
 * pdx_peer_connect() to its address. An engine reached there with another
 * identity (restarted, or another engine on the address) is PDX_ERR_PEER,
 * and that connection is closed again.
 */
PDX_API pdx_status_t pdx_peer_connect_desc(pdx_engine_t *engine, const void *desc, size_t len,
                                           int timeout_ms, uint32_t *peer_p);

/* Region `mem`'s descriptor: the engine's identity, the region's id and
 * length, and what its registration on each NIC is known by. */
PDX_API pdx_status_t pdx_mem_desc(pdx_engine_t *engine, uint32_t mem, void *buf, size_t cap,
                                  size_t *len_p);

typedef struct pdx_mem_desc_info {
    uint64_t engine;             /* the identity of the engine that registered it */
    uint32_t mem;                /* its region id there */
    uint32_t nics;
    uint64_t len;                /* bytes */
    uint32_t flags;              /* PDX_MEM_DESC_GPU: GPU memory */
} pdx_mem_desc_info_t;

#define PDX_MEM_DESC_GPU 1u

PDX_API pdx_status_t pdx_mem_desc_info(const void *desc, size_t len, pdx_mem_desc_info_t *info_p);

/* ----------------------------------------------------------------- rooms */

#define PDX_MAX_ROOM_PAGES (1u << 19) /* page indices of one pdx_expect, all groups */
#define PDX_MAX_SENDERS    1024u      /* senders of one room */

/* One page list per buffer group, in the group order of the layout. */
typedef struct pdx_pages {
    const uint32_t *pages;
    uint32_t        npages;
} pdx_pages_t;

/* A byte range of registered memory: aux data (output ids, logprobs, ...). */
typedef struct pdx_region {
    uint32_t mem;
    uint32_t reserved0;
    uint64_t offset;
    uint64_t len;
} pdx_region_t;

/*
 * Decode: room will receive data from `peer` into these pages of `layout`
 * (dst holds one list per group) and, with the last chunk, aux bytes into
 * `aux` (NULL: none). nsenders is how many prefill ranks behind this peer
 * send for the room (each a last chunk or a status-only notify). The room is
 * WAITING on return and FAILED if not SUCCESS within timeout_ms (<= 0:
 * PDX_TRANSFER_TIMEOUT_MS). The page arrays may be freed on return; the
 * destination pages must not be reused until pdx_release() returned PDX_OK.
 * Call once per prefill peer: again for the same peer, or for a room that
 * ended and is not released, is PDX_ERR_EXISTS. At most PDX_MAX_ROOM_PAGES
 * page indices over all groups and PDX_MAX_SENDERS senders
 * (PDX_ERR_INVALID beyond). On an error the room is not made: nothing to
 * release, and the id may be expected again (PDX_ERR_PEER: the peer is
 * gone; PDX_ERR_AGAIN: its control connection is full). Only a room an
 * earlier pdx_expect made for another peer stays, FAILED when this one's
 * metadata could not be sent, and is released as usual.
 */
PDX_API pdx_status_t pdx_expect(pdx_engine_t *engine, uint32_t peer, pdx_room_t room,
                                uint32_t layout, const pdx_pages_t *dst, const pdx_region_t *aux,
                                uint32_t nsenders, int timeout_ms);

/* ------------------------------------------------------------------- gates */

typedef enum pdx_gate_kind {
    PDX_GATE_NONE  = 0, /* pages are final when pdx_send is called */
    PDX_GATE_EVENT = 1, /* a recorded hipEvent_t without hipEventDisableSystemFence */
    PDX_GATE_WORD  = 2, /* open once *word >= value: pdx_gate_arm() or a host flag */
} pdx_gate_kind_t;

/*
 * A gate holds a chunk back until the GPU finished writing its pages. HIP
 * reports a never-recorded event as complete: record it before pdx_send()
 * and keep it alive until the room leaves TRANSFERRING. A host flag is a
 * PDX_GATE_WORD on a word the caller raises once the pages are final. To
 * engines of this host (the ipc transport) the page copies of a chunk whose
 * event or pdx_gate_arm() gate is still closed are queued at once and wait
 * for it on the GPU (PDX_GPU_GATES=auto); those of a room that fails or is
 * aborted first are given up and never write.
 */
typedef struct pdx_gate {
    pdx_gate_kind_t kind;
    uint32_t        reserved0;
    void           *event;               /* PDX_GATE_EVENT: hipEvent_t */
    const volatile uint64_t *word;       /* PDX_GATE_WORD */
    uint64_t        value;               /* PDX_GATE_WORD */
} pdx_gate_t;

/*
 * Enqueue on hip_stream (a hipStream_t) a write of a pdx-owned pinned word
 * and return the gate that opens when the stream reaches it: for chunks
 * queued before their forward pass is launched. Such a gate gates one chunk:
 * pdx_send() takes it (a second pdx_send() with a copy of it is
 * PDX_ERR_INVALID: arm one gate per chunk), hands it back on PDX_ERR_AGAIN,
 * and frees it on any other failure. The word is recycled once the stream
 * has written it and its chunk is done with it. PDX_ERR_AGAIN when every
 * word is armed; PDX_ERR_UNSUPPORTED without a GPU.
 */
PDX_API pdx_status_t pdx_gate_arm(pdx_engine_t *engine, void *hip_stream, pdx_gate_t *gate_p);

/* Give back a gate of pdx_gate_arm() that will not be sent. PDX_ERR_INVALID
 * for one sent or released already. */
PDX_API pdx_status_t pdx_gate_release(pdx_engine_t *engine, const pdx_gate_t *gate);

/* ------------------------------------------------------------------- send */

enum {
    PDX_SEND_LAST = 1u << 0, /* last chunk of the room: aux, state groups, then done */
};

/*
 * Prefill: queue one chunk of `room`: src holds one page list per group of
 * `layout`; the pages map onto the next unused destination pages of every
 * decode rank that expects the room. With PDX_SEND_LAST, aux (NULL: none)
 * is written to decode's aux slot after the data. Never blocks: the chunk
 * and its page lists are copied, so the arrays may be reused on return; a
 * full submission ring is PDX_ERR_AGAIN. gate (NULL: none) is copied too.
 * Source pages must stay unchanged until the room is SUCCESS or FAILED.
 * Chunks of one room are sent in the order of their pdx_send() calls when
 * called from one thread.
 */
PDX_API pdx_status_t pdx_send(pdx_engine_t *engine, pdx_room_t room, uint32_t layout,
                              const pdx_pages_t *src, const pdx_gate_t *gate,
                              const pdx_region_t *aux, unsigned flags);

/*
 * pdx_send() of the layers [layer_begin, layer_end) of `layout` only (its
 * own numbering: within the layout's layer range), each range with its own
 * gate, so a chunk's first layers go while the forward pass still computes
 * the later ones. The ranges of one chunk come one after another, with the
 * same page lists: the first starts at the layout's first layer, each next
 * one where the one before ended, the last ends at its last layer; only then
 * do the chunk's pages take up decode's destination pages, and groups
 * without layers go with that last range. PDX_SEND_LAST goes with the range
 * that ends the room's last chunk. A range out of that order, or a chunk
 * whose ranges stop short of the last layer, fails the room (PDX_ERR_RANGE,
 * saying which layers are missing); a range outside the layout's layers is
 * PDX_ERR_RANGE at once, an empty one PDX_ERR_INVALID. Not with PDX_VERIFY
 * (its sums are of whole chunks: the room fails, saying so). Ranges whose
 * gates are all open when the first of them is taken go as one.
 */
PDX_API pdx_status_t pdx_send_layers(pdx_engine_t *engine, pdx_room_t room, uint32_t layout,
                                     uint32_t layer_begin, uint32_t layer_end,
                                     const pdx_pages_t *src, const pdx_gate_t *gate,
                                     const pdx_region_t *aux, unsigned flags);

/*
 * Decode: enqueue on hip_stream (a hipStream_t of the engine's GPU) a wait
 * until `room` ends, SUCCESS or FAILED: kernels enqueued after it run once
 * the room's pages are visible, without a host round trip. The stream also
 * goes on when the room ended in failure, so such a kernel must not trust
 * the pages without pdx_poll() saying SUCCESS (or it checks its own flag).
 * One wait per room (PDX_ERR_EXISTS for another); PDX_ERR_STATE for a room
 * not expected here; PDX_ERR_UNSUPPORTED without a GPU. pdx_release() of the
 * room lets a stream still waiting go on. The kernels behind the wait must
 * be loaded before it is enqueued (CUDA_MODULE_LOADING=EAGER, or one launch
 * beforehand): a kernel loaded lazily at its first launch behind the wait
 * holds up the GPU copies that land the room (staged transports, and
 * writers in the same process; see pdx_room_stream_wait_layer) until the
 * room's deadline.
 */
PDX_API pdx_status_t pdx_room_stream_wait(pdx_engine_t *engine, pdx_room_t room,
                                          void *hip_stream);

/*
 * Decode, layer by layer: enqueue on hip_stream (of the engine's GPU) a wait
 * until `layer` of the room's layout, and every layer before it, has landed
 * and is visible, or the room ended (SUCCESS or FAILED): kernels enqueued
 * after it may read that layer's pages, with no host round trip. A layer
 * lands when every sender wrote its pages of it with pdx_send_layers()
 * (each range's notify follows its writes on one endpoint); layers sent
 * whole with pdx_send(), and rooms expected with layouts of different layer
 * ranges, land at SUCCESS. The wait is a stream memory operation on a
 * pdx-owned word, so it can be captured in a graph. failed_p (optional)
 * receives a word gate that is open (*word >= value) once the room failed
 * or was released: a kernel checks it before it trusts the pages; valid
 * until pdx_release(). Any number of waits per room, on any streams;
 * PDX_ERR_RANGE for a layer outside the layout, PDX_ERR_STATE for a room not
 * expected here, PDX_ERR_UNSUPPORTED without a GPU. Where the kernels that
 * write the layers run in the same process (one engine sending to another
 * in it), the waiting stream must not share a hardware queue with them
 * (CUDA_DEVICE_MAX_CONNECTIONS, GPU_MAX_HW_QUEUES above the streams in use):
 * that holds up the writer behind the wait until the room's deadline. As
 * with pdx_room_stream_wait, the kernels behind the wait are loaded first.
 */
PDX_API pdx_status_t pdx_room_stream_wait_layer(pdx_engine_t *engine, pdx_room_t room,
                                                uint32_t layer, void *hip_stream,
                                                pdx_gate_t *failed_p);

/*
 * Decode: *landed_p = how many layers of the room, from its layout's first,
 * have landed and are visible (all of them at SUCCESS; see
 * pdx_room_stream_wait_layer). PDX_ERR_STATE for a room not expected here.
 */
PDX_API pdx_status_t pdx_room_layers(pdx_engine_t *engine, pdx_room_t room,
                                     uint32_t *landed_p);

/* --------------------------------------------------- one-sided transfers */

/*
 * Plain one-sided WRITEs or READs between this engine's registered regions
 * and a peer's, named by memory descriptors: for callers that keep their own
 * bookkeeping. A transfer is a room of its own (the top bit of its id is
 * set: room ids of pdx_send and pdx_expect stay below 2^63), so it goes the
 * rooms' way: enqueued on the caller's thread, worked by the shard its id
 * hashes to, its runs coalesced and striped over the endpoints to the peer,
 * with send-queue backpressure, an optional gate and a deadline.
 */
typedef uint64_t pdx_xfer_t;

typedef enum pdx_xfer_op {
    PDX_XFER_WRITE = 0, /* local bytes into the remote regions */
    PDX_XFER_READ  = 1, /* remote bytes into the local regions (pull) */
} pdx_xfer_op_t;

/* A memory descriptor of pdx_mem_desc(), as bytes. */
typedef struct pdx_desc {
    const void *bytes;
    size_t      len;
} pdx_desc_t;

/* len bytes between local region `mem` at offset and remote region
 * remotes[remote] at remote_offset. */
typedef struct pdx_xfer_entry {
    uint32_t mem;
    uint32_t remote;         /* index into the call's remotes */
    uint64_t offset;
    uint64_t remote_offset;
    uint64_t len;
} pdx_xfer_entry_t;

/*
 * Queue one transfer of n entries (at most PDX_MAX_XFER_ENTRIES) and return
 * its handle. Every remote descriptor must name the same engine, one this
 * engine is connected to (pdx_peer_connect_desc()); entries are checked
 * against both regions before anything is queued: out of range is
 * PDX_ERR_RANGE, a descriptor of a region the peer no longer has
 * PDX_ERR_STATE, each with a message. gate (NULL: none) holds the transfer
 * back as it does a chunk. The transfer fails unless done within
 * timeout_ms (<= 0: PDX_TRANSFER_TIMEOUT_MS). Never blocks; a full ring is
 * PDX_ERR_AGAIN. The local regions stay pinned (pdx_mem_deregister refuses
 * them) and must not be reused until pdx_xfer_release() returned PDX_OK.
 */
#define PDX_MAX_XFER_ENTRIES (1u << 20)

PDX_API pdx_status_t pdx_xfer_post(pdx_engine_t *engine, pdx_xfer_op_t op,
                                   const pdx_desc_t *remotes, uint32_t nremotes,
                                   const pdx_xfer_entry_t *entries, uint32_t n,
                                   const pdx_gate_t *gate, int timeout_ms, pdx_xfer_t *xfer_p);

/* PDX_INPROGRESS, PDX_OK once every byte is placed, or why it failed
 * (pdx_xfer_error() tells more); PDX_ERR_NOT_FOUND for an unknown handle.
 * A lookup and atomic loads, as pdx_poll(). */
PDX_API pdx_status_t pdx_xfer_poll(pdx_engine_t *engine, pdx_xfer_t xfer);

/*
 * Wait until every one of n transfers is done or failed, at most timeout_ms
 * (0: look once; < 0: until then, which comes: every transfer ends by its
 * deadline). Then the first failure in array order wins; else
 * PDX_INPROGRESS when some are not done; else PDX_OK. *index_p (may be
 * NULL) is the index that decided: the failed or unfinished one, n for
 * PDX_OK. An unknown handle counts as failed (PDX_ERR_NOT_FOUND).
 */
PDX_API pdx_status_t pdx_xfer_wait(pdx_engine_t *engine, const pdx_xfer_t *xfers, uint32_t n,
                                   int timeout_ms, uint32_t *index_p);

/* Why the transfer failed, as text, into buf (always terminated). */
PDX_API pdx_status_t pdx_xfer_error(pdx_engine_t *engine, pdx_xfer_t xfer, char *buf,
                                    size_t len);

/* Forget the transfer, failing it first (PDX_ERR_ABORTED) when not done:
 * PDX_INPROGRESS while its WRs may still move bytes or its shard still
 * holds it (call again; also for a moment after it became PDX_OK), PDX_OK
 * once neither is so, after which its regions may be reused. */
PDX_API pdx_status_t pdx_xfer_release(pdx_engine_t *engine, pdx_xfer_t xfer);

/* ------------------------------------------------------------------- both */

/* A lookup and atomic loads: never blocks, never allocates. */
PDX_API pdx_room_state_t pdx_poll(pdx_engine_t *engine, pdx_room_t room);

/* Why the room failed, as text, into buf (always terminated). */
PDX_API pdx_status_t pdx_room_error(pdx_engine_t *engine, pdx_room_t room, char *buf,
                                    size_t len);

/* Fail the room on both sides; stops posting its writes. */
PDX_API pdx_status_t pdx_abort(pdx_engine_t *engine, pdx_room_t room);

/*
 * Forget the room. PDX_INPROGRESS while writes for it may still land (call
 * again); PDX_OK once its slot is free, after which decode may reuse the
 * destination pages and prefill the source pages.
 */
PDX_API pdx_status_t pdx_release(pdx_engine_t *engine, pdx_room_t room);

/* Counters summed over shards when read. */
typedef struct pdx_stats {
    uint64_t bytes_sent;
    uint64_t writes_posted;
    uint64_t chunks_sent;
    uint64_t notifies_sent;
    uint64_t notifies_received;
    uint64_t rooms_success;
    uint64_t rooms_failed;
    uint64_t send_again;      /* pdx_send() answers of PDX_ERR_AGAIN */
    uint64_t worker_wakeups;
    uint64_t ring_high_water; /* most chunks queued in one shard's ring */
    uint64_t registrations;   /* registrations held: regions inside one allocation
                               * share one (made on each NIC) */
    uint64_t nics;            /* NICs the engine uses (PDX_NICS, or fewer usable) */
    uint64_t peers;           /* peers holding a slot now (connected, or being retired) */
    uint64_t handshakes;      /* connections in whose handshake is under way */
    uint64_t peers_retired;   /* peers whose slots were freed, since the start */
    uint64_t handshakes_refused; /* connections in that failed or were refused before
                                  * their handshake finished, since the start */
    uint64_t auth_refused;    /* connections either way refused for the key (PDX_ERR_AUTH),
                               * since the start */
    uint64_t rooms_verified;  /* decode rooms whose bytes matched their checksums (PDX_VERIFY) */
    uint64_t checksum_mismatches; /* ... and those that did not (FAILED, PDX_ERR_CORRUPT) */
    uint64_t bytes_direct;    /* of bytes_sent, those copied by the GPU to peers of this
                               * host (the ipc transport) */
    uint64_t gates_on_gpu;    /* page copies to such peers posted before their gate
                               * opened, waiting for it on the GPU */
    uint64_t ranges_merged;   /* layer ranges (pdx_send_layers) whose gate was open when
                               * the range before them went: they went with it */
    uint64_t send_kicks;      /* pdx_send/pdx_xfer_post calls that found their shard
                               * asleep and woke it: a system call on the caller's
                               * thread (PDX_SHARD_SPIN_US) */
    uint64_t gates_waited;    /* gates a shard found closed and polled until they opened */
    uint64_t gates_foreseen;  /* ... of them, found open by a poll made without sleeping
                               * because gates before had opened at that age
                               * (PDX_GATE_SPIN_US) */
} pdx_stats_t;

PDX_API pdx_status_t pdx_engine_stats(pdx_engine_t *engine, pdx_stats_t *stats_p);

#ifdef __cplusplus
}
#endif

#endif /* PDX_PDX_H */
