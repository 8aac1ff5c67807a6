/* The engine's fixed bounds and the names its headers share. */
#ifndef PDX_BOUNDS_H
#define PDX_BOUNDS_H

#include "pdx/pdx.h"
#include "room.h"

#define PDX_MAX_PEERS       64     /* admitted peers at once (slots) */
#define PDX_MAX_HANDSHAKES  64     /* connections in from peers not admitted yet */
#define PDX_HANDSHAKES_PER_HOST 16 /* ... of them from one address */
#define PDX_MAX_CONNS       (PDX_MAX_PEERS + PDX_MAX_HANDSHAKES)
#define PDX_PEER_SLOT_BITS  8      /* a handle: generation << 8 | slot */
#define PDX_MAX_MEMS        1024
#define PDX_MAX_SHARDS      64     /* PDX_SHARDS at most (config.c) */
#define PDX_MAX_LAYOUTS     64
#define PDX_MAX_DESTS       8      /* decode ranks one prefill room sends to */
#define PDX_MAX_NICS        4      /* PDX_NICS at most (config.c) */
#define PDX_ROOMS_MAX       (1u << 24) /* PDX_ROOMS at most (config.c) */
#define PDX_SQ_DEPTH_MAX    32768u /* PDX_SQ_DEPTH at most (config.c) */
#define PDX_DIRECT_SQ_DEPTH 8192u  /* ... and at least, to a direct peer (ipc) */
#define PDX_SHARD_MAX_CQS   (4 * PDX_MAX_NICS) /* CQs of one shard, all NICs */
#define PDX_NOTIFY_RQ       64     /* receive buffers per data endpoint */
#define PDX_CREDIT_BATCH    16     /* reposts returned per credit record */
#define PDX_SWEEP_MS        10     /* control thread tick: deadlines, heartbeats */
#define PDX_BYE_WAIT_MS     1000   /* after our BYE, the peer closes first this long */
#define PDX_PEER_OUT_MAX    (8u << 20) /* bytes queued per control connection */
#define PDX_PEER_BUF_START  (4u << 10)  /* a connection's input and output to begin with */
#define PDX_PEER_HELLO_MAX  (64u << 10) /* input a connection may hold before its HELLO */
#define PDX_ERRMSG_MAX      PDX_ROOM_ERR_MAX
#define PDX_DEP_RESET_STREAK 4     /* resets of an endpoint with no WR done between:
                                    * then its peer fails */

typedef struct pdx_peer  pdx_peer_t;
typedef struct pdx_shard pdx_shard_t;
typedef struct pdx_dep   pdx_dep_t;

/* How a decode room makes its bytes visible before SUCCESS (docs/architecture.md §5). */
enum {
    PDX_FLUSH_NONE = 0,
    PDX_FLUSH_READ = 1,   /* a loopback RDMA READ (flush.c) */
    PDX_FLUSH_HOST = 2,   /* the GPU runtime's flush call (gpu.c) */
};

typedef struct pdx_room_ext    pdx_room_ext_t;
typedef struct pdx_held_notify pdx_held_notify_t;

#endif
