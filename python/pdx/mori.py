"""MoRI-IO's Python surface on pdx: sglang's MoRI connector, unchanged.

sglang's MoRI disaggregation connector imports `mori.io` and `mori.cpp`. This
module provides the names it uses, with MoRI-IO's arguments and semantics,
on pdx's one-sided transfers (pdx_xfer_post): after `pdx.mori.install()`,
`import mori.io` and `from mori.cpp import TransferStatus` resolve here.

    import pdx.mori
    pdx.mori.install()
    from mori.io import IOEngine, IOEngineConfig, BackendType, RdmaBackendConfig

The RDMA backend is pdx's automatic transport choice: RDMA where a usable
device is, tcp elsewhere (PDX_TRANSPORT overrides), so the same code runs in
a CI image without a NIC. Descriptors pack to pdx's own bytes, not MoRI's
msgpack: both ends must run this module. Reads (batch_read) over tcp take
host memory only. Notifications (pop_inbound_transfer_status) are not
provided; sglang turns them off.
"""

import enum
import itertools
import os
import socket
import struct
import sys
import threading
import time
import types

from . import Again, Engine, Error, READ, Status, WRITE, xfer_runs

__all__ = [
    "BackendType", "MemoryLocationType", "PollCqMode", "StatusCode", "IOEngineConfig",
    "RdmaBackendConfig", "XgmiBackendConfig", "TcpBackendConfig", "EngineDesc",
    "MemoryDesc", "TransferStatus", "IOEngine", "set_log_level", "install",
]


class BackendType(enum.IntEnum):
    Unknown = 0
    XGMI = 1
    RDMA = 2
    TCP = 3


class MemoryLocationType(enum.IntEnum):
    Unknown = 0
    CPU = 1
    GPU = 2


class PollCqMode(enum.IntEnum):
    POLLING = 0
    EVENT = 1


class StatusCode(enum.IntEnum):
    """Failed() is every code past the (hidden) ERR_BEGIN, as in MoRI-IO."""
    SUCCESS = 0
    INIT = 1
    IN_PROGRESS = 2
    ERR_INVALID_ARGS = 4
    ERR_NOT_FOUND = 5
    ERR_RDMA_OP = 6
    ERR_BAD_STATE = 7
    ERR_GPU_OP = 8


_ERR_BEGIN = 3

# pdx's failures as MoRI-IO's codes
_CODES = {
    Status.ERR_INVALID: StatusCode.ERR_INVALID_ARGS,
    Status.ERR_RANGE: StatusCode.ERR_INVALID_ARGS,
    Status.ERR_NOT_FOUND: StatusCode.ERR_NOT_FOUND,
    Status.ERR_STATE: StatusCode.ERR_BAD_STATE,
    Status.ERR_EXISTS: StatusCode.ERR_BAD_STATE,
    Status.ERR_UNSUPPORTED: StatusCode.ERR_GPU_OP,
    Status.ERR_NO_DEVICE: StatusCode.ERR_GPU_OP,
}


def _code(status):
    return _CODES.get(status, StatusCode.ERR_RDMA_OP)


def set_log_level(level):
    """MoRI-IO's log level names; pdx's PDX_LOG for engines made after."""
    os.environ["PDX_LOG"] = {"trace": "trace", "debug": "debug", "info": "info",
                             "warning": "warn", "warn": "warn",
                             "error": "error"}.get(str(level).lower(), "warn")


class IOEngineConfig:
    def __init__(self, host="", port=0):
        self.host = host
        self.port = port


class RdmaBackendConfig:
    def __init__(self, qp_per_transfer=1, post_batch_size=-1, num_worker_threads=-1,
                 poll_cq_mode=PollCqMode.POLLING, enable_notification=True,
                 notif_per_qp=1024):
        self.qp_per_transfer = qp_per_transfer
        self.post_batch_size = post_batch_size
        self.num_worker_threads = num_worker_threads
        self.poll_cq_mode = poll_cq_mode
        self.enable_notification = enable_notification
        self.notif_per_qp = notif_per_qp
        self.max_send_wr = -1
        self.max_cqe_num = -1
        self.max_msg_sge = -1


class XgmiBackendConfig:
    def __init__(self, num_streams=64, num_events=64):
        self.num_streams = num_streams
        self.num_events = num_events


class TcpBackendConfig:
    pass


# ------------------------------------------------------------- descriptors

def _pack(magic, fields, blob):
    out = [magic]
    for f in fields:
        if isinstance(f, str):
            b = f.encode()
            out.append(struct.pack("<BH", 0, len(b)) + b)
        else:
            out.append(struct.pack("<Bq", 1, f))
    out.append(struct.pack("<BH", 2, len(blob)) + blob)
    return b"".join(out)


def _unpack(magic, data, what):
    data = bytes(data)
    if data[:4] != magic:
        raise ValueError("%d bytes that are not a packed %s" % (len(data), what))
    at, fields = 4, []
    try:
        while True:
            kind = data[at]
            if kind == 0 or kind == 2:
                n = struct.unpack_from("<H", data, at + 1)[0]
                value = data[at + 3:at + 3 + n]
                if len(value) != n:
                    raise ValueError("truncated")
                at += 3 + n
                if kind == 2:
                    if at != len(data):
                        raise ValueError("bytes after the end")
                    return fields, value
                fields.append(value.decode())
            elif kind == 1:
                fields.append(struct.unpack_from("<q", data, at + 1)[0])
                at += 9
            else:
                raise ValueError("field kind %d" % kind)
    except (IndexError, struct.error, UnicodeDecodeError, ValueError) as exc:
        raise ValueError("a malformed packed %s: %s" % (what, exc)) from None


class EngineDesc:
    """An engine: its key and where it listens (pdx's engine descriptor)."""
    _MAGIC = b"PXME"

    def __init__(self, key="", hostname="", host="", port=0, pid=0, node_id="", pdx=b""):
        self.key, self.hostname, self.host, self.port = key, hostname, host, port
        self.pid, self.node_id, self._pdx = pid, node_id, pdx

    def pack(self):
        return _pack(self._MAGIC, [self.key, self.node_id, self.hostname, self.host,
                                   self.port, self.pid], self._pdx)

    @staticmethod
    def unpack(data):
        (key, node_id, hostname, host, port, pid), blob = _unpack(EngineDesc._MAGIC, data,
                                                                  "EngineDesc")
        return EngineDesc(key, hostname, host, port, pid, node_id, blob)

    def __eq__(self, other):
        return isinstance(other, EngineDesc) and self.pack() == other.pack()

    def __hash__(self):
        return hash(self.pack())

    def __repr__(self):
        return "EngineDesc(key=%r, host=%r, port=%d)" % (self.key, self.host, self.port)


class MemoryDesc:
    """A registered region: its engine's key and pdx's memory descriptor."""
    _MAGIC = b"PXMM"

    def __init__(self, engine_key="", id=0, device_id=-1, data=0, size=0,
                 loc=MemoryLocationType.Unknown, device_bus_id="", pdx=b""):
        self.engine_key, self.id, self.device_id = engine_key, id, device_id
        self.data, self.size, self.loc = data, size, MemoryLocationType(loc)
        self.device_bus_id, self._pdx = device_bus_id, pdx
        self.ipc_handle = bytes(64)

    def pack(self):
        return _pack(self._MAGIC, [self.engine_key, self.id, self.device_id, self.data,
                                   self.size, int(self.loc), self.device_bus_id], self._pdx)

    @staticmethod
    def unpack(data):
        (key, mid, dev, addr, size, loc, bus), blob = _unpack(MemoryDesc._MAGIC, data,
                                                              "MemoryDesc")
        return MemoryDesc(key, mid, dev, addr, size, loc, bus, blob)

    def __eq__(self, other):
        return isinstance(other, MemoryDesc) and self.pack() == other.pack()

    def __hash__(self):
        return hash(self.pack())

    def __repr__(self):
        return "MemoryDesc(engine_key=%r, id=%d, size=%d, loc=%s)" % (
            self.engine_key, self.id, self.size, self.loc.name)


# --------------------------------------------------------------- statuses

class TransferStatus:
    """One transfer's state. A status of a pdx transfer asks pdx when read
    and lets pdx forget the transfer once it ended."""

    def __init__(self):
        self._code, self._msg = StatusCode.INIT, ""
        self._engine, self._xfer = None, None

    def _ended(self, code, msg):
        if self._code not in (StatusCode.INIT, StatusCode.IN_PROGRESS):
            return  # the first end stays, as Update() keeps a failure
        self._code, self._msg = code, msg

    def _refresh(self):
        if self._xfer is None or self._code != StatusCode.IN_PROGRESS:
            return
        e = self._engine
        st = e._pdx.xfer_poll(self._xfer)
        if st == Status.INPROGRESS:
            return
        if st == Status.OK:
            self._code = StatusCode.SUCCESS
        else:
            self._code = _code(st)
            self._msg = e._pdx.xfer_error(self._xfer) or "pdx: %s" % Status(st).name
        e._retire(self._xfer)
        self._xfer = None

    def Code(self):
        self._refresh()
        return self._code

    def Message(self):
        self._refresh()
        return self._msg

    def Update(self, code, msg):
        if not self.Failed():
            self._code, self._msg = StatusCode(code), msg

    def SetCode(self, code):
        self._code = StatusCode(code)

    def SetMessage(self, msg):
        self._msg = msg

    def Init(self):
        return self.Code() == StatusCode.INIT

    def InProgress(self):
        return self.Code() == StatusCode.IN_PROGRESS

    def Succeeded(self):
        return self.Code() == StatusCode.SUCCESS

    def Failed(self):
        return self.Code() > _ERR_BEGIN

    def WaitFor(self, timeout_ms=-1):
        code = self.Code()
        if code != StatusCode.IN_PROGRESS:
            return code
        self._engine._pdx.xfer_wait([self._xfer], timeout_ms)
        return self.Code()

    def Wait(self):
        return self.WaitFor(-1)

    def __repr__(self):
        return "TransferStatus(%s%s)" % (self.Code().name, ": " + self._msg if self._msg else "")


# ----------------------------------------------------------------- engine

class IOEngine:
    """MoRI-IO's engine on a pdx engine, made by the first create_backend()."""

    def __init__(self, key, config=None):
        self.key = key
        self._config = config or IOEngineConfig()
        self._pdx = None
        self._remotes = {}          # key -> EngineDesc
        self._lock = threading.Lock()
        self._uid = itertools.count(1)
        self._retiring = []         # ended transfers pdx still holds (WRs in flight)
        self._gone = {}             # key -> why: engines whose connection failed
        self._up = set()            # keys connected to (as far as we know)

    # lifetime
    def create_backend(self, backend_type, config=None):
        """RDMA (and TCP): pdx's transport; XGMI is not provided."""
        backend_type = BackendType(backend_type)
        if backend_type == BackendType.XGMI:
            raise NotImplementedError("pdx.mori: the XGMI backend is not provided")
        if self._pdx is not None:
            return
        cfg = {}
        host = self._config.host
        if host or self._config.port:
            host = host or "127.0.0.1"
            if ":" in host and not host.startswith("["):
                host = "[%s]" % host  # an IPv6 address, as PDX_LISTEN takes it
            cfg["listen"] = "%s:%d" % (host, self._config.port)
        if backend_type == BackendType.TCP:
            cfg["transport"] = "tcp"
        if isinstance(config, RdmaBackendConfig):
            if config.qp_per_transfer > 0:
                cfg["qps_per_peer"] = config.qp_per_transfer
            if config.num_worker_threads > 0:
                cfg["shards"] = config.num_worker_threads
        self._pdx = Engine(**cfg)

    def remove_backend(self, backend_type):
        self.close()

    def close(self):
        if self._pdx is not None:
            self._settle(5.0)
            self._pdx.close()
            self._pdx = None

    def __del__(self):
        if getattr(self, "_pdx", None) is not None:
            self.close()

    def _engine(self):
        if self._pdx is None:
            self.create_backend(BackendType.RDMA)
        return self._pdx

    def get_engine_desc(self):
        if self._pdx is None:
            return EngineDesc(self.key, socket.gethostname(), self._config.host, 0, os.getpid())
        host, _, port = self._pdx.address.rpartition(":")
        return EngineDesc(self.key, socket.gethostname(), host.strip("[]"), int(port),
                          os.getpid(), "", self._pdx.desc())

    # peers
    def register_remote_engine(self, desc):
        """Remember a peer engine; the connection is made at its first transfer."""
        with self._lock:
            self._remotes[desc.key] = desc
            self._gone.pop(desc.key, None)
            self._up.discard(desc.key)

    def deregister_remote_engine(self, desc):
        with self._lock:
            self._remotes.pop(desc.key, None)
            self._gone.pop(desc.key, None)
            self._up.discard(desc.key)

    def _peer(self, key):
        """Connect to a registered engine (once; again after its connection
        closed). An engine that could not be reached stays gone, without a
        new attempt (and log line) per transfer, until it is registered again:
        an engine that restarts comes back under a new key."""
        with self._lock:
            desc, gone = self._remotes.get(key), self._gone.get(key)
        if desc is None:
            raise Error(Status.ERR_NOT_FOUND, "pdx.mori",
                        "engine %r was not registered (register_remote_engine)" % key)
        if gone is not None:
            raise Error(gone.status, "pdx.mori", "engine %r is gone: %s" % (key, gone))
        try:
            self._engine().connect_desc(desc._pdx)  # the connection there, or a new one
        except Error as exc:
            with self._lock:
                self._gone[key] = exc
            raise

    # memory
    def register_memory(self, ptr, size, device_id, mem_loc):
        e = self._engine()
        mem = e.register(int(ptr), int(size))
        return MemoryDesc(self.key, mem, device_id, int(ptr), int(size), mem_loc, "",
                          e.mem_desc(mem))

    def register_torch_tensor(self, tensor):
        if not tensor.is_contiguous():
            raise ValueError("pdx.mori: the tensor must be contiguous")
        gpu = tensor.device.type != "cpu"
        return self.register_memory(tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                                    tensor.device.index if gpu else -1,
                                    MemoryLocationType.GPU if gpu else MemoryLocationType.CPU)

    def deregister_memory(self, mem_desc):
        self._engine().deregister(mem_desc.id)

    def allocate_transfer_uid(self):
        return next(self._uid)

    # transfers
    def _post(self, op, local, loffs, remote, roffs, sizes):
        status = TransferStatus()
        status._code = StatusCode.IN_PROGRESS
        try:
            if local.engine_key != self.key:
                raise Error(Status.ERR_INVALID, "pdx.mori", "the local MemoryDesc is engine "
                            "%r's, not this engine's (%r)" % (local.engine_key, self.key))
            key = remote.engine_key
            if key not in self._up:
                self._peer(key)
                self._up.add(key)
            runs = xfer_runs(local.id, 0, loffs, roffs, sizes)
            # a full ring, or a region the peer's engine described a moment ago
            until = time.monotonic() + 5.0
            while True:
                try:
                    status._xfer = self._pdx.xfer(op, [remote._pdx], runs)
                    break
                except Again:
                    if time.monotonic() > until:
                        raise
                    time.sleep(0.0005)
                except Error as exc:
                    if exc.status != Status.ERR_NOT_FOUND or key not in self._up:
                        raise
                    self._up.discard(key)  # its connection went: once more, connecting
                    self._peer(key)
                    self._up.add(key)
            status._engine = self
        except Error as exc:
            status._code, status._msg = _code(exc.status), str(exc)
        return status

    def _batch(self, op, local_descs, local_offsets, remote_descs, remote_offsets, sizes):
        self._sweep()
        return [self._post(op, ld, lo, rd, ro, sz) for ld, lo, rd, ro, sz in
                zip(local_descs, local_offsets, remote_descs, remote_offsets, sizes)]

    def batch_write(self, local_descs, local_offsets, remote_descs, remote_offsets, sizes,
                    uids):
        return self._batch(WRITE, local_descs, local_offsets, remote_descs, remote_offsets,
                           sizes)

    def batch_read(self, local_descs, local_offsets, remote_descs, remote_offsets, sizes,
                   uids):
        return self._batch(READ, local_descs, local_offsets, remote_descs, remote_offsets,
                           sizes)

    def write(self, local_desc, local_offset, remote_desc, remote_offset, size, uid):
        return self._post(WRITE, local_desc, [local_offset], remote_desc, [remote_offset],
                          [size])

    def read(self, local_desc, local_offset, remote_desc, remote_offset, size, uid):
        return self._post(READ, local_desc, [local_offset], remote_desc, [remote_offset],
                          [size])

    def wait_all(self, statuses, timeout_ms=-1):
        """The first failure (or a status never started: INIT); else IN_PROGRESS
        when some are not done by the deadline; else SUCCESS. With a negative
        timeout it returns once every transfer ended and none can still move
        bytes."""
        self._sweep()
        live = [s._xfer for s in statuses if s._xfer is not None and
                s._code == StatusCode.IN_PROGRESS]
        if live:
            self._pdx.xfer_wait(live, timeout_ms)
        result = StatusCode.SUCCESS
        for s in statuses:
            code = s.Code()
            if code == StatusCode.IN_PROGRESS:
                result = StatusCode.IN_PROGRESS
            elif code != StatusCode.SUCCESS:
                result = code
                break
        if timeout_ms < 0:
            self._settle(60.0)
        return result

    # a failed transfer's WRs may still be in flight when it ends: pdx
    # forgets it (and its regions may be reused) only once they are done
    def _retire(self, xfer):
        if not self._pdx.xfer_release(xfer):
            with self._lock:
                self._retiring.append(xfer)

    def _sweep(self):
        """One more try at those ended before (a moment after SUCCESS, pdx's
        shard still holds a transfer): their room slots come back."""
        if self._retiring:
            with self._lock:
                self._retiring = [x for x in self._retiring if not self._pdx.xfer_release(x)]

    def _settle(self, timeout):
        until = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                left = [x for x in self._retiring if not self._pdx.xfer_release(x)]
                self._retiring = left
            if not left or (until is not None and time.monotonic() > until):
                return not left
            time.sleep(0.001)


# ---------------------------------------------------------------- install

def install():
    """Make `import mori.io` and `import mori.cpp` resolve to this module
    (as PyMySQL's install_as_MySQLdb() does for MySQLdb)."""
    me = sys.modules[__name__]
    pkg = sys.modules.get("mori")
    if pkg is None or not getattr(pkg, "__pdx__", False):
        pkg = types.ModuleType("mori", "MoRI-IO's Python surface, provided by pdx.mori")
        pkg.__path__ = []
        pkg.__pdx__ = True
        sys.modules["mori"] = pkg
    for name in ("io", "cpp"):
        sys.modules["mori." + name] = me
        setattr(pkg, name, me)
    return me
