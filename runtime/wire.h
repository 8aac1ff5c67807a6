/*
 * wire: encode and decode of every control-channel message, and of the
 * notify record that travels on data endpoints. Pure: no sockets, no
 * threads, no logging; every function is safe from any thread.
 *
 * A frame is a 12-byte header followed by its body, every integer little
 * endian:
 *
 *     magic u32 ("pdxw")  type u16  flags u16 (0)  body length u32  | body
 *
 * Strings travel as a u16 length and that many bytes (no NUL inside); they
 * decode into fixed char arrays, always NUL-terminated. Counts and lengths
 * are bounded (PDX_WIRE_MAX_*) so that every frame fits PDX_WIRE_MAX_FRAME
 * and a reader can frame a stream with one buffer of that size:
 * pdx_wire_peek() says whether a whole frame is there, then pdx_wire_decode()
 * checks every length against the bytes present and the limits before
 * reading. Malformed, truncated or oversized input is PDX_ERR_PROTO with a
 * static reason. HELLO decodes whatever protocol version it carries; the
 * handshake compares versions (PDX_ERR_VERSION is decided there).
 *
 * Encoders write into a caller buffer: PDX_ERR_RANGE (nothing written) when
 * it is too small, PDX_ERR_INVALID when the message breaks a limit the
 * decoder enforces, so whatever encodes also decodes.
 *
 * wire.c: frames, HELLO, EP, ABORT, ABORT_ACK, HEARTBEAT, ERROR, CREDIT, READY,
 * RESET, BYE, AUTH, notify;
 * wire_desc.c: MEM, LAYOUT, ROOM; wire_buf.h: their byte readers/writers.
 */
#ifndef PDX_WIRE_H
#define PDX_WIRE_H

#include "layout.h"
#include "transport.h"

#define PDX_WIRE_MAGIC        0x77786470u  /* "pdxw" on the wire */
#define PDX_WIRE_HEADER_SIZE  12u
#define PDX_WIRE_MAX_FRAME    (4u << 20)   /* header included */
#define PDX_WIRE_SEAL_TAG     16u          /* what sealing adds to a frame's body */
/* What sealing adds to a frame: its SEALED header and the tag. */
#define PDX_WIRE_SEAL_EXTRA   (PDX_WIRE_HEADER_SIZE + PDX_WIRE_SEAL_TAG)
/* A SEALED frame holds one whole frame: it may pass PDX_WIRE_MAX_FRAME by this. */
#define PDX_WIRE_MAX_SEALED   (PDX_WIRE_MAX_FRAME + PDX_WIRE_SEAL_EXTRA)
#define PDX_WIRE_NONCE_SIZE   32u          /* AUTH nonce */
#define PDX_WIRE_MAC_SIZE     32u          /* AUTH proof */

#define PDX_WIRE_HOST_MAX       64         /* HELLO host name, bytes */
#define PDX_WIRE_TRANSPORT_MAX  32         /* HELLO transport name, bytes */
#define PDX_WIRE_REASON_MAX     256        /* ABORT reason, ERROR message, bytes */
#define PDX_WIRE_ID_SIZE        16         /* engine identity, random bytes */
#define PDX_WIRE_HOST_ID_SIZE 16
#define PDX_WIRE_GPU_MAX        31         /* HELLO GPU PCI bus id, bytes */
#define PDX_WIRE_MAX_SHARDS     1024       /* HELLO nshards, EP shard */
#define PDX_WIRE_MAX_NICS       16         /* HELLO nics, MEM nic */
#define PDX_WIRE_MAX_MEMS       4096       /* MEM entries per message */
#define PDX_WIRE_MAX_MEM_KEYS   65536      /* MEM rkeys of pieces after the first, per message */
/* The largest MEM frame of one region (header included). */
#define PDX_WIRE_MEM_ONE_MAX    (PDX_WIRE_HEADER_SIZE + 4u + 32u + 8u + 4u * PDX_TP_PIECES_MAX)
#define PDX_WIRE_MAX_SENDERS    PDX_MAX_SENDERS    /* ROOM nsenders */
#define PDX_WIRE_MAX_ROOM_PAGES PDX_MAX_ROOM_PAGES /* ROOM page indices, all groups */

typedef enum pdx_wire_type {
    PDX_WIRE_HELLO     = 1,
    PDX_WIRE_MEM       = 2,
    PDX_WIRE_LAYOUT    = 3,
    PDX_WIRE_EP        = 4,
    PDX_WIRE_ROOM      = 5,
    PDX_WIRE_ABORT     = 6,
    PDX_WIRE_ABORT_ACK = 7,
    PDX_WIRE_HEARTBEAT = 8,
    PDX_WIRE_ERROR     = 9,
    PDX_WIRE_CREDIT    = 10,
    PDX_WIRE_READY     = 11,
    PDX_WIRE_RESET     = 12,
    PDX_WIRE_BYE       = 13,
    PDX_WIRE_AUTH      = 14,
    PDX_WIRE_SEALED    = 15,
    PDX_WIRE_EXPORT    = 16,
} pdx_wire_type_t;

/* HELLO caps. */
enum {
    /* ipc: it exports its GPU regions (EXPORT) to direct peers and copies
     * into theirs (version 10) */
    PDX_WIRE_CAP_IPC = 1u << 0,
};

typedef struct pdx_wire_header {
    uint16_t type;      /* a pdx_wire_type_t */
    uint16_t flags;     /* none defined: 0 */
    uint32_t body_len;
} pdx_wire_header_t;

/*
 * HELLO: first message each way. The body begins with the version and later
 * protocol versions only append to it, so a HELLO of another version still
 * decodes (bytes after the fields known here are ignored for it).
 */
typedef struct pdx_wire_hello {
    uint32_t version;                        /* PDX_PROTOCOL_VERSION */
    uint64_t caps;                           /* capability bits */
    uint8_t  id[PDX_WIRE_ID_SIZE];           /* engine identity */
    uint32_t nshards;                        /* 1..PDX_WIRE_MAX_SHARDS */
    char     host[PDX_WIRE_HOST_MAX + 1];
    char     transport[PDX_WIRE_TRANSPORT_MAX + 1];
    uint32_t nics;                           /* 1..PDX_WIRE_MAX_NICS (version 4; 1 in a
                                              * HELLO of an earlier version) */
    uint32_t port;                           /* the control listener's port, 1..65535
                                              * (version 5; 0 in an earlier one): with
                                              * the connection's address, the engine's
                                              * identity across its incarnations */
    uint8_t  host_id[PDX_WIRE_HOST_ID_SIZE]; /* the running kernel's boot id (version 9;
                                              * all zero: unknown): engines that share
                                              * it share a host, its GPUs and memory */
    char     gpu[PDX_WIRE_GPU_MAX + 1];      /* its GPU's PCI bus id, "" without one
                                              * (version 10) */
} pdx_wire_hello_t;

/*
 * EXPORT: what a direct peer (both PDX_WIRE_CAP_IPC, one host) opens a
 * region with (the transport's mr_export bytes), after its MEM.
 */
typedef struct pdx_wire_export {
    uint32_t mem;
    uint32_t len;                            /* 1..PDX_TP_EXPORT_MAX */
    uint8_t  bytes[PDX_TP_EXPORT_MAX];
} pdx_wire_export_t;

/* MEM: regions the peer may write into, an entry per region and NIC of the
 * sender. A region in pieces carries the piece size and every piece's rkey
 * (pdx_tp_rkey_t). */
typedef struct pdx_wire_mem_entry {
    uint32_t      mem;
    uint32_t      nic;                       /* 0..PDX_WIRE_MAX_NICS - 1 */
    pdx_tp_rkey_t rkey;                      /* len >= 1, addr + len does not wrap;
                                              * decode: rkeys point into the entries'
                                              * allocation */
} pdx_wire_mem_entry_t;

typedef struct pdx_wire_mem {
    uint32_t              count;             /* 0..PDX_WIRE_MAX_MEMS */
    pdx_wire_mem_entry_t *entries;           /* decode: allocated, see pdx_wire_msg_free() */
} pdx_wire_mem_t;

/* LAYOUT: one of the sender's layouts, with the limits of layout.h. */
typedef struct pdx_wire_layout {
    uint32_t      id;
    pdx_layout_t *layout;                    /* decode: allocated, see pdx_wire_msg_free() */
} pdx_wire_layout_t;

/*
 * EP: the address of data endpoint `index` of shard `shard`, incarnation
 * `epoch` (0 in the handshake; each RESET of the endpoint starts the next).
 */
typedef struct pdx_wire_ep {
    uint32_t      shard;                     /* < PDX_WIRE_MAX_SHARDS */
    uint32_t      index;
    uint32_t      epoch;
    pdx_tp_addr_t addr;                      /* len <= PDX_TP_ADDR_MAX */
} pdx_wire_ep_t;

enum {
    PDX_WIRE_ROOM_AUX    = 1u << 0,          /* the aux region is set */
    PDX_WIRE_ROOM_VERIFY = 1u << 1,          /* PDX_VERIFY: the LAST notifies carry the
                                              * checksum of what was written (verify.h) */
};

/*
 * ROOM: what decode's pdx_expect() sends. The encoder takes the page lists
 * as a separate argument; the decoder leaves them inside the frame and
 * describes them in npages[] and pages_at[] (read them with
 * pdx_wire_room_page() or pdx_wire_room_copy() while the frame's bytes are
 * alive). Page values are not checked here: plan.c checks them against the
 * layout.
 */
typedef struct pdx_wire_room {
    uint64_t       room;
    uint32_t       layout;                   /* decode's layout id */
    uint32_t       nsenders;                 /* 1..PDX_WIRE_MAX_SENDERS */
    uint32_t       timeout_ms;
    uint32_t       flags;                    /* PDX_WIRE_ROOM_* */
    pdx_region_t   aux;                      /* without PDX_WIRE_ROOM_AUX: all zero */
    uint32_t       ngroups;                  /* 1..PDX_LAYOUT_MAX_GROUPS */
    uint32_t       npages[PDX_LAYOUT_MAX_GROUPS];   /* decode only */
    const uint8_t *pages_at[PDX_LAYOUT_MAX_GROUPS]; /* decode only: LE u32s in the frame */
} pdx_wire_room_t;

/* ABORT: fail the room on both sides. */
typedef struct pdx_wire_abort {
    uint64_t     room;
    pdx_status_t status;                     /* an error (< 0) */
    char         reason[PDX_WIRE_REASON_MAX + 1];
} pdx_wire_abort_t;

/* ABORT_ACK: the sender has nothing of the room in flight (the abort fence). */
typedef struct pdx_wire_abort_ack {
    uint64_t room;
} pdx_wire_abort_ack_t;

typedef struct pdx_wire_heartbeat {
    uint64_t seq;
    uint64_t time_ns;
} pdx_wire_heartbeat_t;

/* ERROR: something the peer should know; room 0 = not about a room. */
typedef struct pdx_wire_error {
    uint64_t     room;
    pdx_status_t status;                     /* an error (< 0) */
    char         message[PDX_WIRE_REASON_MAX + 1];
} pdx_wire_error_t;

/*
 * CREDIT: the receiver reposted `count` receive buffers on data endpoint
 * (pair, index) of incarnation `epoch`: the sender may send that many more
 * notify records on it. Only in an endpoint's reset (its receives of the new
 * incarnation are posted); routine credits are credit records on the
 * endpoint (PDX_WIRE_NOTIFY_CREDIT).
 */
typedef struct pdx_wire_credit {
    uint32_t pair;
    uint32_t index;
    uint32_t epoch;
    uint32_t count;
} pdx_wire_credit_t;

/*
 * RESET: the sender's data endpoint (pair, index) of incarnation `epoch`
 * failed (why: status, reason); the receiver fails its side too. Each side
 * then sends an EP of incarnation epoch + 1 once its old endpoint drained.
 */
typedef struct pdx_wire_reset {
    uint32_t     pair;
    uint32_t     index;
    uint32_t     epoch;
    pdx_status_t status;                     /* an error (< 0) */
    char         reason[PDX_WIRE_REASON_MAX + 1];
} pdx_wire_reset_t;

/* READY (no body): the sender has sent every handshake message. */

/* BYE: the sender closes the connection on purpose (its engine is being
 * destroyed, or pdx_peer_close()); the receiver ends the peer's rooms with
 * the reason and treats the loss as routine. Nothing follows it. */
typedef struct pdx_wire_bye {
    char reason[PDX_WIRE_REASON_MAX + 1];
} pdx_wire_bye_t;

/*
 * AUTH: a step of the key exchange (auth.h) of engines with PDX_AUTH_KEY:
 * 1 the connector's nonce, 2 the acceptor's nonce and proof, 3 the
 * connector's proof (fields a step does not use are zero).
 */
typedef struct pdx_wire_auth {
    uint32_t version;                        /* PDX_PROTOCOL_VERSION */
    uint32_t step;                           /* 1..3 */
    uint8_t  nonce[PDX_WIRE_NONCE_SIZE];
    uint8_t  mac[PDX_WIRE_MAC_SIZE];
} pdx_wire_auth_t;

/*
 * SEALED: after the key exchange, every frame, sealed (auth.h): its body is
 * the whole frame encrypted, then a tag of PDX_WIRE_SEAL_TAG bytes. The
 * control thread opens it (pdx_unseal) and decodes what it holds;
 * pdx_wire_decode() refuses it.
 */

/* A decoded frame. */
typedef struct pdx_wire_msg {
    pdx_wire_type_t type;
    union {
        pdx_wire_hello_t     hello;
        pdx_wire_mem_t       mem;
        pdx_wire_layout_t    layout;
        pdx_wire_ep_t        ep;
        pdx_wire_room_t      room;
        pdx_wire_abort_t     abort;
        pdx_wire_abort_ack_t abort_ack;
        pdx_wire_heartbeat_t heartbeat;
        pdx_wire_error_t     error;
        pdx_wire_credit_t    credit;
        pdx_wire_reset_t     reset;
        pdx_wire_bye_t       bye;
        pdx_wire_auth_t      auth;
        pdx_wire_export_t    export;
    } u;
} pdx_wire_msg_t;

/* "HELLO", ...; "?" for an unknown type. */
const char *pdx_wire_type_str(uint32_t type);

/*
 * Look at the first len bytes of a stream:
 * - PDX_OK: a whole frame is there; *hdr_p is its header and *need_p its
 *   size (header included, <= len).
 * - PDX_INPROGRESS: not yet; *need_p is the size the frame needs in total
 *   (PDX_WIRE_HEADER_SIZE while the header is incomplete, then the frame
 *   size); *hdr_p is written once the header is complete.
 * - PDX_ERR_PROTO: not a frame (bad magic, flags, unknown type, a body length
 *   outside the type's bounds); *why_p (may be NULL) says why. The stream
 *   cannot be resynchronised.
 */
pdx_status_t pdx_wire_peek(const void *buf, size_t len, pdx_wire_header_t *hdr_p,
                           size_t *need_p, const char **why_p);

/*
 * Decode exactly one frame of len bytes (header included). PDX_ERR_PROTO
 * with a static reason in *why_p (may be NULL) when it is malformed;
 * PDX_ERR_NOMEM when MEM or LAYOUT cannot be allocated. On PDX_OK release
 * the message with pdx_wire_msg_free(); a ROOM message points into buf.
 */
pdx_status_t pdx_wire_decode(const void *buf, size_t len, pdx_wire_msg_t *msg_p,
                             const char **why_p);

/* Free what decode allocated (MEM entries, the LAYOUT); NULL is fine. */
void pdx_wire_msg_free(pdx_wire_msg_t *msg);

/* Page i of group g of a decoded ROOM (g < ngroups, i < npages[g]). */
uint32_t pdx_wire_room_page(const pdx_wire_room_t *m, uint32_t g, uint32_t i);

/* Copy group g's pages into out; PDX_ERR_RANGE when cap < npages[g]. */
pdx_status_t pdx_wire_room_copy(const pdx_wire_room_t *m, uint32_t g, uint32_t *out,
                                uint32_t cap);

/*
 * Encoders: write the whole frame into buf and its size to *size_p.
 * PDX_ERR_RANGE when cap is too small (buf untouched), PDX_ERR_INVALID when
 * a field breaks a limit the decoder enforces.
 */
pdx_status_t pdx_wire_encode_hello(const pdx_wire_hello_t *m, void *buf, size_t cap,
                                   size_t *size_p);
pdx_status_t pdx_wire_encode_mem(const pdx_wire_mem_t *m, void *buf, size_t cap,
                                 size_t *size_p);
pdx_status_t pdx_wire_encode_layout(const pdx_wire_layout_t *m, void *buf, size_t cap,
                                    size_t *size_p);
pdx_status_t pdx_wire_encode_ep(const pdx_wire_ep_t *m, void *buf, size_t cap, size_t *size_p);
/* pages: m->ngroups lists; m->npages and m->pages_at are ignored. */
pdx_status_t pdx_wire_encode_room(const pdx_wire_room_t *m, const pdx_pages_t *pages, void *buf,
                                  size_t cap, size_t *size_p);
pdx_status_t pdx_wire_encode_abort(const pdx_wire_abort_t *m, void *buf, size_t cap,
                                   size_t *size_p);
pdx_status_t pdx_wire_encode_abort_ack(const pdx_wire_abort_ack_t *m, void *buf, size_t cap,
                                       size_t *size_p);
pdx_status_t pdx_wire_encode_reset(const pdx_wire_reset_t *m, void *buf, size_t cap,
                                   size_t *size_p);
pdx_status_t pdx_wire_encode_credit(const pdx_wire_credit_t *m, void *buf, size_t cap,
                                    size_t *size_p);
pdx_status_t pdx_wire_encode_ready(void *buf, size_t cap, size_t *size_p);
pdx_status_t pdx_wire_encode_export(const pdx_wire_export_t *m, void *buf, size_t cap,
                                    size_t *size_p);
pdx_status_t pdx_wire_encode_bye(const pdx_wire_bye_t *m, void *buf, size_t cap,
                                 size_t *size_p);
pdx_status_t pdx_wire_encode_heartbeat(const pdx_wire_heartbeat_t *m, void *buf, size_t cap,
                                       size_t *size_p);
pdx_status_t pdx_wire_encode_error(const pdx_wire_error_t *m, void *buf, size_t cap,
                                   size_t *size_p);
pdx_status_t pdx_wire_encode_auth(const pdx_wire_auth_t *m, void *buf, size_t cap,
                                  size_t *size_p);

/* ------------------------------------------------------------ notify record */

/*
 * The notify record: a fixed PDX_WIRE_NOTIFY_SIZE bytes sent as one SEND on
 * a data endpoint after the chunk's writes, without a frame header:
 *
 *     magic u32 ("pdxn")  flags u16  reserved u16 (0)  room u64  sender u64
 *     seq u32  count u32  status i32
 *
 * and, with PDX_WIRE_NOTIFY_SUM (PDX_WIRE_NOTIFY_SUM_SIZE bytes in all):
 *
 *     sum u64  layer_begin u32  layer_end u32
 *
 * or, with PDX_WIRE_NOTIFY_LAYERS (PDX_WIRE_NOTIFY_LAYERS_SIZE bytes):
 *
 *     layer_begin u32  layer_end u32  cover_begin u32  cover_end u32  pages u32
 */
#define PDX_WIRE_NOTIFY_MAGIC       0x6e786470u  /* "pdxn" on the wire */
#define PDX_WIRE_NOTIFY_SIZE        36u
#define PDX_WIRE_NOTIFY_SUM_SIZE    52u
#define PDX_WIRE_NOTIFY_LAYERS_SIZE 56u

enum {
    PDX_WIRE_NOTIFY_LAST        = 1u << 0, /* the sender's last chunk of the room */
    PDX_WIRE_NOTIFY_STATUS_ONLY = 1u << 1, /* no data; count must be 0 */
    PDX_WIRE_NOTIFY_CREDIT      = 1u << 2, /* not about a room: the sender reposted `count`
                                            * receive buffers for this endpoint's notifies
                                            * (1..PDX_WIRE_MAX_CREDIT; room, seq 0; alone) */
    PDX_WIRE_NOTIFY_SUM         = 1u << 3, /* a LAST notify of a room that verifies: the
                                            * checksum of every byte the sender wrote and
                                            * the layers its pages covered (verify.h) */
    PDX_WIRE_NOTIFY_AUX         = 1u << 4, /* with SUM: the sum includes aux bytes it wrote */
    PDX_WIRE_NOTIFY_LAYERS      = 1u << 5, /* a chunk that is not the last, every write of
                                            * which came before this record on its endpoint:
                                            * it wrote `pages` pages of decode's layered
                                            * groups in layers [layer_begin, layer_end) of
                                            * the sender's [cover_begin, cover_end), the
                                            * layers of decode's layout it holds */
};

#define PDX_WIRE_MAX_CREDIT 4096u

typedef struct pdx_wire_notify {
    uint64_t     room;
    uint64_t     sender;    /* the sending rank's identity */
    uint32_t     seq;       /* chunk sequence number */
    uint32_t     flags;     /* PDX_WIRE_NOTIFY_* */
    uint32_t     count;     /* writes of the chunk this notify follows */
    pdx_status_t status;    /* PDX_OK or an error (< 0) */
    /* PDX_WIRE_NOTIFY_SUM; all zero without it */
    uint64_t     sum;
    uint32_t     layer_begin; /* the layers of decode's layout it wrote: */
    uint32_t     layer_end;   /* [layer_begin, layer_end), begin <= end */
    /* PDX_WIRE_NOTIFY_LAYERS (with layer_begin, layer_end); all zero without it */
    uint32_t     cover_begin;
    uint32_t     cover_end;
    uint32_t     pages;
} pdx_wire_notify_t;

/* PDX_ERR_RANGE when cap is below the record's size, PDX_ERR_INVALID on bad fields. */
pdx_status_t pdx_wire_notify_encode(const pdx_wire_notify_t *n, void *buf, size_t cap,
                                    size_t *size_p);
/* len must be the record's size; otherwise or when malformed PDX_ERR_PROTO. */
pdx_status_t pdx_wire_notify_decode(const void *buf, size_t len, pdx_wire_notify_t *n_p,
                                    const char **why_p);

#endif
