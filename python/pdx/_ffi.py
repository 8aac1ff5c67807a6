"""ctypes declarations of pdx.h: the library, its structs and its calls.

The structs mirror pdx.h field by field; tests/python checks their sizes and
offsets against the C compiler's.
"""

import ctypes
import ctypes.util
import os

c_status = ctypes.c_int

NAME_MAX = 128
ENGINE_DESC_MAX = 96
MEM_DESC_MAX = 96


class Config(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("log_level", ctypes.c_int),
        ("transport", ctypes.c_char * NAME_MAX),
        ("listen", ctypes.c_char * NAME_MAX),
        ("shards", ctypes.c_uint32),
        ("ring_chunks", ctypes.c_uint32),
        ("ring_pages", ctypes.c_uint32),
        ("rooms", ctypes.c_uint32),
        ("held_notifies", ctypes.c_uint32),
        ("max_msg_size", ctypes.c_uint64),
        ("bootstrap_timeout_ms", ctypes.c_uint32),
        ("transfer_timeout_ms", ctypes.c_uint32),
        ("heartbeat_ms", ctypes.c_uint32),
        ("gate_backoff_us", ctypes.c_uint32),
        ("qps_per_peer", ctypes.c_uint32),
        ("sq_depth", ctypes.c_uint32),
        ("signal_every", ctypes.c_uint32),
        ("flush", ctypes.c_int),
        ("dmabuf", ctypes.c_int),
        ("markers", ctypes.c_int),
        ("ib_devices", ctypes.c_char * NAME_MAX),
        ("ib_gid_index", ctypes.c_int32),
        ("ib_traffic_class", ctypes.c_uint32),
        ("ib_hop_limit", ctypes.c_uint32),
        ("ib_timeout", ctypes.c_uint32),
        ("ib_retry_count", ctypes.c_uint32),
        ("ib_rnr_retry", ctypes.c_uint32),
        ("tcp_staging_bytes", ctypes.c_uint64),
        ("gpu", ctypes.c_int32),
        ("nics", ctypes.c_uint32),
        ("handshake_timeout_ms", ctypes.c_uint32),
        ("auth_key", ctypes.c_char * NAME_MAX),
        ("auth_key_file", ctypes.c_char * NAME_MAX),
        ("verify", ctypes.c_int),
        ("advertise_addr", ctypes.c_char * NAME_MAX),
        ("cpu_affinity", ctypes.c_char * NAME_MAX),
        ("gpu_gates", ctypes.c_int),
        ("shard_spin_us", ctypes.c_uint32),
        ("gate_spin_us", ctypes.c_uint32),
    ]


class BufferDesc(ctypes.Structure):
    _fields_ = [
        ("mem", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("bytes_per_page", ctypes.c_uint64),
        ("reserved", ctypes.c_uint64 * 2),
    ]


class GroupDesc(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint32),
        ("buffers_per_layer", ctypes.c_uint32),
        ("nbuffers", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("npages", ctypes.c_uint64),
        ("buffers", ctypes.POINTER(BufferDesc)),
    ]


class LayoutDesc(ctypes.Structure):
    _fields_ = [
        ("field_mask", ctypes.c_uint64),
        ("ngroups", ctypes.c_uint32),
        ("layer_begin", ctypes.c_uint32),
        ("layer_end", ctypes.c_uint32),
        ("tp_rank", ctypes.c_uint32),
        ("tp_size", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("groups", ctypes.POINTER(GroupDesc)),
    ]


class Pages(ctypes.Structure):
    _fields_ = [("pages", ctypes.c_void_p), ("npages", ctypes.c_uint32)]


class Region(ctypes.Structure):
    _fields_ = [
        ("mem", ctypes.c_uint32),
        ("reserved0", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("len", ctypes.c_uint64),
    ]


class Gate(ctypes.Structure):
    _fields_ = [
        ("kind", ctypes.c_int),
        ("reserved0", ctypes.c_uint32),
        ("event", ctypes.c_void_p),
        ("word", ctypes.POINTER(ctypes.c_uint64)),
        ("value", ctypes.c_uint64),
    ]


STATS_FIELDS = (
    "bytes_sent", "writes_posted", "chunks_sent", "notifies_sent", "notifies_received",
    "rooms_success", "rooms_failed", "send_again", "worker_wakeups", "ring_high_water",
    "registrations", "nics", "peers", "handshakes", "peers_retired", "handshakes_refused",
    "auth_refused", "rooms_verified", "checksum_mismatches", "bytes_direct", "gates_on_gpu",
    "ranges_merged", "send_kicks", "gates_waited", "gates_foreseen",
)


class Stats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in STATS_FIELDS]


class EngineDescInfo(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("host", ctypes.c_char * NAME_MAX),
        ("port", ctypes.c_uint32),
    ]


class MemDescInfo(ctypes.Structure):
    _fields_ = [
        ("engine", ctypes.c_uint64),
        ("mem", ctypes.c_uint32),
        ("nics", ctypes.c_uint32),
        ("len", ctypes.c_uint64),
        ("flags", ctypes.c_uint32),
    ]


class Desc(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class XferEntry(ctypes.Structure):
    _fields_ = [
        ("mem", ctypes.c_uint32),
        ("remote", ctypes.c_uint32),
        ("offset", ctypes.c_uint64),
        ("remote_offset", ctypes.c_uint64),
        ("len", ctypes.c_uint64),
    ]


XFER_WRITE, XFER_READ = 0, 1
MAX_XFER_ENTRIES = 1 << 20


LOG_HANDLER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p,
                               ctypes.c_char_p)

P = ctypes.POINTER
vp = ctypes.c_void_p
u32, u64, i32, sz = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t

# name: (result, argument types)
PROTOTYPES = {
    "pdx_status_str": (ctypes.c_char_p, [c_status]),
    "pdx_version": (ctypes.c_char_p, []),
    "pdx_log_set_handler": (None, [LOG_HANDLER, vp]),
    "pdx_config_init": (c_status, [P(Config)]),
    "pdx_config_set": (c_status, [P(Config), ctypes.c_char_p, ctypes.c_char_p]),
    "pdx_engine_create": (c_status, [P(Config), P(vp)]),
    "pdx_engine_destroy": (None, [vp]),
    "pdx_engine_address": (ctypes.c_char_p, [vp]),
    "pdx_engine_transport": (ctypes.c_char_p, [vp]),
    "pdx_mem_register": (c_status, [vp, vp, sz, P(u32)]),
    "pdx_mem_deregister": (c_status, [vp, u32]),
    "pdx_layout_create": (c_status, [vp, P(LayoutDesc), P(u32)]),
    "pdx_peer_connect": (c_status, [vp, ctypes.c_char_p, i32, P(u32)]),
    "pdx_peer_close": (c_status, [vp, u32]),
    "pdx_peer_accept": (c_status, [vp, i32, P(u32)]),
    "pdx_engine_desc": (c_status, [vp, vp, sz, P(sz)]),
    "pdx_engine_desc_info": (c_status, [vp, sz, P(EngineDescInfo)]),
    "pdx_peer_connect_desc": (c_status, [vp, vp, sz, i32, P(u32)]),
    "pdx_mem_desc": (c_status, [vp, u32, vp, sz, P(sz)]),
    "pdx_mem_desc_info": (c_status, [vp, sz, P(MemDescInfo)]),
    "pdx_expect": (c_status, [vp, u32, u64, u32, P(Pages), P(Region), u32, i32]),
    "pdx_gate_arm": (c_status, [vp, vp, P(Gate)]),
    "pdx_gate_release": (c_status, [vp, P(Gate)]),
    "pdx_send": (c_status, [vp, u64, u32, P(Pages), P(Gate), P(Region), ctypes.c_uint]),
    "pdx_send_layers": (c_status, [vp, u64, u32, u32, u32, P(Pages), P(Gate), P(Region),
                                   ctypes.c_uint]),
    "pdx_room_stream_wait": (c_status, [vp, u64, vp]),
    "pdx_room_stream_wait_layer": (c_status, [vp, u64, u32, vp, P(Gate)]),
    "pdx_room_layers": (c_status, [vp, u64, P(u32)]),
    "pdx_poll": (ctypes.c_int, [vp, u64]),
    "pdx_room_error": (c_status, [vp, u64, ctypes.c_char_p, sz]),
    "pdx_abort": (c_status, [vp, u64]),
    "pdx_release": (c_status, [vp, u64]),
    "pdx_xfer_post": (c_status, [vp, ctypes.c_int, P(Desc), u32, vp, u32, P(Gate), i32, P(u64)]),
    "pdx_xfer_poll": (c_status, [vp, u64]),
    "pdx_xfer_wait": (c_status, [vp, P(u64), u32, i32, P(u32)]),
    "pdx_xfer_error": (c_status, [vp, u64, ctypes.c_char_p, sz]),
    "pdx_xfer_release": (c_status, [vp, u64]),
    "pdx_engine_stats": (c_status, [vp, P(Stats)]),
}


def _candidates():
    env = os.environ.get("PDX_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    try:
        from . import _where  # written by the install

        found.append(_where.LIBRARY)
    except ImportError:
        pass
    # a source tree: python/pdx next to build/<preset>/
    for preset in ("default", "debug"):
        found.append(os.path.join(here, "..", "..", "build", preset, "libpdx.so"))
    name = ctypes.util.find_library("pdx")
    found.append(name or "libpdx.so.0")
    return found


def load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            errors.append("%s: no such file" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(str(exc))
            continue
        for name, (res, args) in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        return lib
    raise ImportError("pdx: cannot load libpdx.so (set PDX_LIBRARY): " + "; ".join(errors))
