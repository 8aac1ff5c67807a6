"""pdx from Python: KV-cache pages from a prefill engine to a decode engine.

A thin binding of pdx.h over ctypes (no dependency beyond the standard
library). Failures raise pdx.Error, which carries the status and pdx's
message. Memory is a writable buffer (bytearray, memoryview, numpy array)
or a raw address and size (a torch tensor's data_ptr(), GPU memory); GPU
streams and events are raw handles (integers).

    import pdx
    with pdx.Engine(listen="127.0.0.1:0", transport="tcp") as e:
        mem = e.register(buf)
        layout = e.layout([pdx.Group([(mem, 0, 4096)], npages=64)])
"""

import array
import ctypes
import enum
import itertools

from . import _ffi

__all__ = [
    "Error", "Again", "Status", "RoomState", "LogLevel", "Group", "Engine", "version",
    "engine_desc_info", "mem_desc_info", "set_log_handler", "WRITE", "READ", "xfer_entries", "xfer_runs",
]

WRITE, READ = _ffi.XFER_WRITE, _ffi.XFER_READ

_lib = _ffi.load()


class Status(enum.IntEnum):
    OK = 0
    INPROGRESS = 1
    ERR_INVALID = -1
    ERR_NOMEM = -2
    ERR_AGAIN = -3
    ERR_TIMEOUT = -4
    ERR_NOT_FOUND = -5
    ERR_EXISTS = -6
    ERR_RANGE = -7
    ERR_VERSION = -8
    ERR_PEER = -9
    ERR_PROTO = -10
    ERR_IO = -11
    ERR_UNSUPPORTED = -12
    ERR_ABORTED = -13
    ERR_NO_DEVICE = -14
    ERR_FULL = -15
    ERR_STATE = -16
    ERR_AUTH = -17
    ERR_CORRUPT = -18


class RoomState(enum.IntEnum):
    """pdx_poll(): the numbers of sglang's KVPoll, plus NONE."""
    NONE = -1
    FAILED = 0
    BOOTSTRAPPING = 1
    WAITING = 2
    TRANSFERRING = 3
    SUCCESS = 4


_STATES = {s.value: s for s in RoomState}


class LogLevel(enum.IntEnum):
    ERROR = 0
    WARN = 1
    INFO = 2
    DEBUG = 3
    TRACE = 4


class Error(Exception):
    """A pdx call failed: .status (a Status), .call, and pdx's message."""

    def __init__(self, status, call, message=""):
        self.status = _status(status)
        self.call = call
        self.message = message
        text = "%s: %s" % (call, _lib.pdx_status_str(int(status)).decode())
        super().__init__(text + (": " + message if message else ""))


class Again(Error):
    """A bounded queue is full (PDX_ERR_AGAIN): try again later."""


def _status(value):
    try:
        return Status(value)
    except ValueError:
        return value


def _check(status, call, message=""):
    if status < 0:
        raise (Again if status == Status.ERR_AGAIN else Error)(status, call, message)
    return status


def version():
    return _lib.pdx_version().decode()


_handler_ref = None


def set_log_handler(fn):
    """fn(level, engine, message) receives pdx's log lines, process-wide, on the
    thread that logs (it must not call pdx); None restores stderr."""
    global _handler_ref
    if fn is None:
        _lib.pdx_log_set_handler(ctypes.cast(None, _ffi.LOG_HANDLER), None)
        _handler_ref = None
        return

    def trampoline(_arg, level, engine, message):
        try:
            fn(_level(level), engine.decode(errors="replace"), message.decode(errors="replace"))
        except Exception:  # a handler's failure must not unwind into C
            pass

    ref = _ffi.LOG_HANDLER(trampoline)
    _lib.pdx_log_set_handler(ref, None)
    _handler_ref = ref


def _level(value):
    try:
        return LogLevel(value)
    except ValueError:
        return value


def engine_desc_info(desc):
    """What an engine descriptor says: {'id', 'host', 'port'}."""
    info = _ffi.EngineDescInfo()
    data = bytes(desc)
    _check(_lib.pdx_engine_desc_info(data, len(data), ctypes.byref(info)), "engine_desc_info")
    return {"id": info.id, "host": info.host.decode(), "port": info.port}


def mem_desc_info(desc):
    """What a memory descriptor says: {'engine', 'mem', 'nics', 'len', 'gpu'}."""
    info = _ffi.MemDescInfo()
    data = bytes(desc)
    _check(_lib.pdx_mem_desc_info(data, len(data), ctypes.byref(info)), "mem_desc_info")
    return {"engine": info.engine, "mem": info.mem, "nics": info.nics, "len": info.len,
            "gpu": bool(info.flags & 1)}


class Group:
    """A buffer group of a layout: buffers as (mem, offset, bytes_per_page),
    layer-major unless flags has NO_LAYERS."""
    NO_LAYERS = 1
    STATE = 2

    def __init__(self, buffers, npages, buffers_per_layer=1, flags=0):
        self.buffers = [tuple(b) for b in buffers]
        self.npages = npages
        self.buffers_per_layer = buffers_per_layer
        self.flags = flags


def _u32_array(pages):
    """(address, count, keep) of page indices: an array('I') as it is, any
    other sequence of ints (a list, a numpy array) copied into one."""
    arr = pages if isinstance(pages, array.array) and pages.typecode == "I" else \
        array.array("I", pages)
    addr, n = arr.buffer_info()
    return addr, n, arr


def _pages(lists):
    """One pdx_pages_t per group; the arrays are kept alive by the result."""
    keep = [_u32_array(p) for p in lists]
    arr = (_ffi.Pages * len(keep))(*[(ptr, n) for ptr, n, _ in keep])
    return arr, keep


def _region(aux):
    if aux is None:
        return None
    mem, offset, length = aux
    return ctypes.byref(_ffi.Region(mem=mem, offset=offset, len=length))


def _address(buf, size):
    """(address, size, keep) of a writable buffer, or of a raw address."""
    if isinstance(buf, int):
        if size is None:
            raise ValueError("a raw address needs its size")
        return buf, size, None
    view = memoryview(buf)
    if view.readonly or not view.contiguous:
        raise ValueError("memory to register must be a writable, contiguous buffer")
    raw = (ctypes.c_char * view.nbytes).from_buffer(view.cast("B"))
    return ctypes.addressof(raw), view.nbytes if size is None else size, (view, raw)


class Engine:
    """One pdx engine. Configuration as keyword arguments, by variable name
    without PDX_ (listen="127.0.0.1:0", transport="tcp", shards=2, ...);
    the PDX_* environment applies first."""

    def __init__(self, **config):
        cfg = _ffi.Config()
        _check(_lib.pdx_config_init(ctypes.byref(cfg)), "pdx_config_init",
               "a PDX_* variable of the environment is malformed")
        for key, value in config.items():
            name = key.upper()
            if not name.startswith("PDX_"):
                name = "PDX_" + name
            shown = "(the key)" if name == "PDX_AUTH_KEY" else value
            _check(_lib.pdx_config_set(ctypes.byref(cfg), name.encode(), str(value).encode()),
                   "pdx_config_set", "%s=%s" % (name, shown))
        handle = ctypes.c_void_p()
        st = _lib.pdx_engine_create(ctypes.byref(cfg), ctypes.byref(handle))
        ctypes.memset(ctypes.addressof(cfg) + _ffi.Config.auth_key.offset, 0,
                      _ffi.Config.auth_key.size)
        _check(st, "pdx_engine_create")
        self._e = handle
        self._mems = {}
        self._descs = {}

    # lifecycle
    def close(self):
        """Destroy the engine (a goodbye to every peer); idempotent."""
        e, self._e = self._e, None
        if e:
            _lib.pdx_engine_destroy(e)
            self._mems.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_e", None):
            self.close()

    def _h(self):
        if not self._e:
            raise Error(Status.ERR_STATE, "pdx", "the engine is closed")
        return self._e

    @property
    def address(self):
        return _lib.pdx_engine_address(self._h()).decode()

    @property
    def transport(self):
        return _lib.pdx_engine_transport(self._h()).decode()

    def stats(self):
        st = _ffi.Stats()
        _check(_lib.pdx_engine_stats(self._h(), ctypes.byref(st)), "pdx_engine_stats")
        return {name: getattr(st, name) for name in _ffi.STATS_FIELDS}

    # memory and layouts
    def register(self, buf, size=None):
        """Register a writable buffer, or a raw address with its size; returns
        the region id. The buffer is kept alive until deregister()."""
        addr, length, keep = _address(buf, size)
        mem = ctypes.c_uint32()
        _check(_lib.pdx_mem_register(self._h(), addr, length, ctypes.byref(mem)),
               "pdx_mem_register")
        self._mems[mem.value] = keep
        return mem.value

    def deregister(self, mem):
        _check(_lib.pdx_mem_deregister(self._h(), mem), "pdx_mem_deregister")
        self._mems.pop(mem, None)

    def layout(self, groups, layer_begin=0, layer_end=1):
        """Create a layout from Groups; returns its id."""
        garr = (_ffi.GroupDesc * len(groups))()
        keep = []
        for i, g in enumerate(groups):
            barr = (_ffi.BufferDesc * len(g.buffers))()
            for k, (mem, offset, bpp) in enumerate(g.buffers):
                barr[k].mem, barr[k].offset, barr[k].bytes_per_page = mem, offset, bpp
            keep.append(barr)
            garr[i].flags = g.flags
            garr[i].buffers_per_layer = g.buffers_per_layer
            garr[i].nbuffers = len(g.buffers)
            garr[i].npages = g.npages
            garr[i].buffers = ctypes.cast(barr, ctypes.POINTER(_ffi.BufferDesc))
        desc = _ffi.LayoutDesc(field_mask=3, ngroups=len(groups), layer_begin=layer_begin,
                               layer_end=layer_end,
                               groups=ctypes.cast(garr, ctypes.POINTER(_ffi.GroupDesc)))
        out = ctypes.c_uint32()
        _check(_lib.pdx_layout_create(self._h(), ctypes.byref(desc), ctypes.byref(out)),
               "pdx_layout_create")
        return out.value

    # peers and descriptors
    def connect(self, addr, timeout_ms=5000):
        peer = ctypes.c_uint32()
        _check(_lib.pdx_peer_connect(self._h(), addr.encode(), timeout_ms, ctypes.byref(peer)),
               "pdx_peer_connect", addr)
        return peer.value

    def connect_desc(self, desc, timeout_ms=5000):
        """The peer an engine descriptor names (its connection, or a new one)."""
        data = bytes(desc)
        peer = ctypes.c_uint32()
        _check(_lib.pdx_peer_connect_desc(self._h(), data, len(data), timeout_ms,
                                          ctypes.byref(peer)), "pdx_peer_connect_desc")
        return peer.value

    def accept(self, timeout_ms=5000):
        """The next peer that connected in; None when none came in time."""
        peer = ctypes.c_uint32()
        st = _lib.pdx_peer_accept(self._h(), timeout_ms, ctypes.byref(peer))
        if st == Status.ERR_TIMEOUT:
            return None
        _check(st, "pdx_peer_accept")
        return peer.value

    def close_peer(self, peer):
        _check(_lib.pdx_peer_close(self._h(), peer), "pdx_peer_close")

    def desc(self):
        """This engine's descriptor (bytes)."""
        buf = ctypes.create_string_buffer(_ffi.ENGINE_DESC_MAX)
        n = ctypes.c_size_t()
        _check(_lib.pdx_engine_desc(self._h(), buf, len(buf), ctypes.byref(n)), "pdx_engine_desc")
        return buf.raw[:n.value]

    def mem_desc(self, mem):
        """Region `mem`'s descriptor (bytes)."""
        buf = ctypes.create_string_buffer(_ffi.MEM_DESC_MAX)
        n = ctypes.c_size_t()
        _check(_lib.pdx_mem_desc(self._h(), mem, buf, len(buf), ctypes.byref(n)),
               "pdx_mem_desc", "region %d" % mem)
        return buf.raw[:n.value]

    # rooms
    def expect(self, peer, room, layout, pages, aux=None, nsenders=1, timeout_ms=0):
        """Decode: room receives from peer into pages (one list per group);
        aux is (mem, offset, len) or None."""
        arr, _keep = _pages(pages)
        _check(_lib.pdx_expect(self._h(), peer, room, layout, arr, _region(aux), nsenders,
                               timeout_ms), "pdx_expect", "room %d" % room)

    def send(self, room, layout, pages, gate=None, aux=None, last=False, layers=None):
        """Prefill: queue one chunk (one page list per group). Raises Again when
        the shard's ring is full. layers=(begin, end): only those layers of the
        chunk (pdx_send_layers), each range with its own gate, in order."""
        arr, _keep = _pages(pages)
        g = ctypes.byref(gate) if gate is not None else None
        a = _region(aux) if aux is not None else None
        if layers is None:
            st = _lib.pdx_send(self._e or self._h(), room, layout, arr, g, a, 1 if last else 0)
        else:
            st = _lib.pdx_send_layers(self._e or self._h(), room, layout, layers[0], layers[1],
                                      arr, g, a, 1 if last else 0)
        if st < 0:
            _check(st, "pdx_send_layers" if layers is not None else "pdx_send", "room %d" % room)

    def gate_arm(self, stream):
        """A gate on a GPU stream (a raw hipStream_t): pass it to send()."""
        gate = _ffi.Gate()
        _check(_lib.pdx_gate_arm(self._h(), stream, ctypes.byref(gate)), "pdx_gate_arm")
        return gate

    def gate_release(self, gate):
        _check(_lib.pdx_gate_release(self._h(), ctypes.byref(gate)), "pdx_gate_release")

    def stream_wait(self, room, stream, layer=None):
        """Make a GPU stream (a raw hipStream_t) wait until the room ended, or
        with layer= until that layer (and those before it) landed. With a
        layer, returns the room's failure gate: its word (a device-readable
        address) reaches its value once the room failed. The kernels queued
        behind the wait must already be loaded (one launch beforehand, or
        CUDA_MODULE_LOADING=EAGER): a lazy load at that launch holds up the
        copies that land the room until its deadline."""
        if layer is None:
            _check(_lib.pdx_room_stream_wait(self._h(), room, stream), "pdx_room_stream_wait")
            return None
        failed = _ffi.Gate()
        _check(_lib.pdx_room_stream_wait_layer(self._h(), room, layer, stream,
                                               ctypes.byref(failed)),
               "pdx_room_stream_wait_layer", "room %d layer %d" % (room, layer))
        return failed

    def layers(self, room):
        """Decode: how many layers of the room, from its layout's first, have
        landed and are visible."""
        n = ctypes.c_uint32()
        _check(_lib.pdx_room_layers(self._h(), room, ctypes.byref(n)), "pdx_room_layers",
               "room %d" % room)
        return n.value

    def poll(self, room):
        return _STATES[_lib.pdx_poll(self._e or self._h(), room)]

    def error(self, room):
        """Why the room failed ("" when it did not)."""
        buf = ctypes.create_string_buffer(512)
        st = _lib.pdx_room_error(self._h(), room, buf, len(buf))
        if st in (Status.ERR_NOT_FOUND, Status.ERR_STATE):
            return ""  # no such room, or one that did not fail
        _check(st, "pdx_room_error", "room %d" % room)
        return buf.value.decode(errors="replace")

    def abort(self, room):
        _check(_lib.pdx_abort(self._h(), room), "pdx_abort", "room %d" % room)

    def release(self, room):
        """Forget the room: True once its slot is free, False while writes for
        it may still land (call again)."""
        st = _lib.pdx_release(self._e or self._h(), room)
        if st < 0:
            _check(st, "pdx_release", "room %d" % room)
        return st == 0

    # one-sided transfers
    def xfer(self, op, remotes, entries, gate=None, timeout_ms=0):
        """Queue one transfer (WRITE or READ) and return its handle. remotes
        are memory descriptors (bytes) of one peer engine; entries are
        (mem, remote index, offset, remote offset, length) tuples, or
        the packed array of xfer_entries() or xfer_runs(). Raises Again when
        the ring is full."""
        keep = tuple(bytes(r) for r in remotes)
        descs = self._descs.get(keep)
        if descs is None:  # the descriptors of a peer's regions come again and again
            descs = (_ffi.Desc * len(keep))()
            for i, r in enumerate(keep):
                descs[i].bytes = ctypes.cast(r, ctypes.c_void_p)
                descs[i].len = len(r)
            if len(self._descs) >= 4096:
                self._descs.clear()
            self._descs[keep] = descs  # the key keeps the bytes alive
        packed = entries if isinstance(entries, array.array) else xfer_entries(entries)
        n = len(packed) // 4
        addr = packed.buffer_info()[0] if n else None
        out = ctypes.c_uint64()
        g = ctypes.byref(gate) if gate is not None else None
        st = _lib.pdx_xfer_post(self._e or self._h(), op, descs, len(keep), addr, n, g,
                                timeout_ms, ctypes.byref(out))
        if st < 0:
            _check(st, "pdx_xfer_post")
        return out.value

    def write(self, remotes, entries, gate=None, timeout_ms=0):
        return self.xfer(WRITE, remotes, entries, gate, timeout_ms)

    def read(self, remotes, entries, gate=None, timeout_ms=0):
        return self.xfer(READ, remotes, entries, gate, timeout_ms)

    def xfer_poll(self, xfer):
        """Status.INPROGRESS, Status.OK, or the Status it failed with."""
        return _status(_lib.pdx_xfer_poll(self._e or self._h(), xfer))

    def xfer_wait(self, xfers, timeout_ms=-1):
        """Wait for every transfer (< 0: until each ends, which it does by its
        deadline): (Status, index) as pdx_xfer_wait() tells them."""
        arr = (ctypes.c_uint64 * len(xfers))(*xfers)
        at = ctypes.c_uint32()
        st = _lib.pdx_xfer_wait(self._e or self._h(), arr, len(xfers), timeout_ms,
                                ctypes.byref(at))
        if st == Status.ERR_INVALID:
            _check(st, "pdx_xfer_wait")
        return _status(st), at.value

    def xfer_error(self, xfer):
        """Why the transfer failed ("" when it did not)."""
        buf = ctypes.create_string_buffer(512)
        st = _lib.pdx_xfer_error(self._h(), xfer, buf, len(buf))
        if st in (Status.ERR_NOT_FOUND, Status.ERR_STATE):
            return ""
        _check(st, "pdx_xfer_error")
        return buf.value.decode(errors="replace")

    def xfer_release(self, xfer):
        """Forget the transfer (failing it when not done): True once its WRs can
        no longer move bytes, False while they may (call again)."""
        st = _lib.pdx_xfer_release(self._e or self._h(), xfer)
        if st < 0:
            _check(st, "pdx_xfer_release")
        return st == 0


def xfer_entries(entries):
    """(mem, remote, offset, remote offset, length) tuples as the packed
    array pdx_xfer_post() reads (pdx_xfer_entry_t: four 64-bit words)."""
    return array.array("Q", itertools.chain.from_iterable(
        (mem | remote << 32, off, roff, n) for mem, remote, off, roff, n in entries))


def xfer_runs(mem, remote, offsets, remote_offsets, sizes):
    """Entries of one local and one remote region from parallel lists."""
    key = mem | remote << 32
    return array.array("Q", itertools.chain.from_iterable(
        (key, off, roff, n) for off, roff, n in zip(offsets, remote_offsets, sizes)))
