"""GPU memory, gates and streams from Python (tests/gpu/run.sh runs it on a
machine with a GPU): two engines over tcp with KV pools in GPU memory; a
room whose source pages a stream copies in, sent behind a gate armed on
that stream (and behind a recorded event), checked on the host after;
one-sided writes between GPU regions through pdx.Engine and pdx.mori. The
GPU runtime is reached with ctypes: libcudart (nvidia) or libamdhip64
(amd); PDX_TEST_GPU_RUNTIME names another.
"""

import ctypes
import ctypes.util
import os
import random
import time
import unittest

import pdx
import pdx.mori as mori

LAYERS, NPAGES, BPP = 2, 64, 4096
H2D, D2H = 1, 2  # cudaMemcpyKind and hipMemcpyKind alike


def runtime():
    names = [os.environ["PDX_TEST_GPU_RUNTIME"]] if os.environ.get("PDX_TEST_GPU_RUNTIME") else [
        "libcudart.so", "libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so",
        "libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        pre = "cuda" if hasattr(lib, "cudaMalloc") else "hip"
        return lib, pre
    raise RuntimeError("no GPU runtime among %s" % names)


LIB, PRE = runtime()


def call(name, *args):
    rc = getattr(LIB, PRE + name)(*args)
    if rc != 0:
        raise RuntimeError("%s%s failed: %d" % (PRE, name, rc))


def dev_alloc(n):
    p = ctypes.c_void_p()
    call("Malloc", ctypes.byref(p), ctypes.c_size_t(n))
    call("Memset", p, 0, ctypes.c_size_t(n))
    return p.value


def stream():
    s = ctypes.c_void_p()
    call("StreamCreate", ctypes.byref(s))
    return s.value


def to_host(dev, n):
    buf = (ctypes.c_char * n)()
    call("DeviceSynchronize")
    call("Memcpy", buf, ctypes.c_void_p(dev), ctypes.c_size_t(n), D2H)
    return bytes(buf)


class Side:
    def __init__(self, shards=2, **config):
        self.e = pdx.Engine(listen="127.0.0.1:0", transport="tcp", shards=shards, **config)
        self.size = LAYERS * NPAGES * BPP
        self.dev = dev_alloc(self.size)
        self.mem = self.e.register(self.dev, self.size)
        bufs = [(self.mem, l * NPAGES * BPP, BPP) for l in range(LAYERS)]
        self.layout = self.e.layout([pdx.Group(bufs, NPAGES)], 0, LAYERS)

    def close(self):
        self.e.close()
        call("Free", ctypes.c_void_p(self.dev))


def wait_room(e, room, timeout=20.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        st = e.poll(room)
        if st in (pdx.RoomState.SUCCESS, pdx.RoomState.FAILED):
            return st
        time.sleep(0.001)
    return e.poll(room)


class Gpu(unittest.TestCase):
    def setUp(self):
        self.pf, self.dc = Side(), Side()
        self.rng = random.Random(3)

    def tearDown(self):
        self.pf.close()
        self.dc.close()

    def room(self, room, gate_kind):
        """Source pages copied in on a stream; the chunk sent at once behind a
        gate on that stream; decode's pages checked on the host."""
        s = stream()
        src = self.rng.sample(range(NPAGES), 16)
        dst = self.rng.sample(range(NPAGES), 16)
        peer = self.dc.e.connect(self.pf.e.address)
        self.dc.e.expect(peer, room, self.dc.layout, [dst], timeout_ms=20000)
        want = {}
        keep = []
        for l in range(LAYERS):
            for p, d in zip(src, dst):
                data = bytes(self.rng.getrandbits(8) for _ in range(64)) * (BPP // 64)
                host = ctypes.create_string_buffer(data, BPP)
                keep.append(host)
                call("MemcpyAsync", ctypes.c_void_p(self.pf.dev + (l * NPAGES + p) * BPP), host,
                     ctypes.c_size_t(BPP), H2D, ctypes.c_void_p(s))
                want[(l, d)] = data
        if gate_kind == "stream":
            gate = self.pf.e.gate_arm(s)
        else:
            ev = ctypes.c_void_p()
            call("EventCreate", ctypes.byref(ev))
            call("EventRecord", ev, ctypes.c_void_p(s))
            gate = pdx._ffi.Gate(kind=1, event=ev.value)
        self.pf.e.send(room, self.pf.layout, [src], gate=gate, last=True)
        self.assertEqual(wait_room(self.dc.e, room), pdx.RoomState.SUCCESS,
                         self.dc.e.error(room))
        self.assertEqual(wait_room(self.pf.e, room), pdx.RoomState.SUCCESS)
        got = to_host(self.dc.dev, self.dc.size)
        for (l, d), data in want.items():
            at = (l * NPAGES + d) * BPP
            self.assertEqual(got[at:at + BPP], data, "layer %d page %d" % (l, d))
        call("StreamSynchronize", ctypes.c_void_p(s))
        for e in (self.dc.e, self.pf.e):
            until = time.monotonic() + 5
            while not e.release(room):
                self.assertLess(time.monotonic(), until)
                time.sleep(0.001)

    def test_room_behind_a_stream_gate(self):
        self.room(1, "stream")

    def test_room_behind_an_event(self):
        self.room(2, "event")

    def test_verify_gpu_pages(self):
        """PDX_VERIFY=crc32c with both pools in GPU memory (staged checks):
        a room in two chunks matches; the same with a byte of the first
        chunk changed in decode's GPU memory before the last one fails
        with "checksum mismatch". One shard and one endpoint: the first
        chunk's notify follows all of its writes."""
        pf = Side(shards=1, qps_per_peer=1)
        dc = Side(shards=1, qps_per_peer=1, verify="crc32c")
        try:
            peer = dc.e.connect(pf.e.address)
            data = bytes(self.rng.getrandbits(8) for _ in range(pf.size))
            call("Memcpy", ctypes.c_void_p(pf.dev), data, ctypes.c_size_t(len(data)), H2D)
            for room, corrupt in ((11, False), (12, True)):
                src = self.rng.sample(range(NPAGES), 8)
                dst = self.rng.sample(range(NPAGES), 8)
                dc.e.expect(peer, room, dc.layout, [dst], timeout_ms=20000)
                pf.e.send(room, pf.layout, [src[:4]])
                until = time.monotonic() + 10
                while dc.e.poll(room) != pdx.RoomState.TRANSFERRING:
                    self.assertLess(time.monotonic(), until)
                    time.sleep(0.001)
                if corrupt:
                    one = ctypes.create_string_buffer(b"\x5a", 1)
                    call("Memcpy", ctypes.c_void_p(dc.dev + dst[1] * BPP + 7), one,
                         ctypes.c_size_t(1), H2D)
                pf.e.send(room, pf.layout, [src[4:]], last=True)
                st = wait_room(dc.e, room)
                if corrupt:
                    self.assertEqual(st, pdx.RoomState.FAILED)
                    self.assertIn("checksum mismatch", dc.e.error(room))
                else:
                    self.assertEqual(st, pdx.RoomState.SUCCESS, dc.e.error(room))
                    got = to_host(dc.dev, dc.size)
                    for l in range(LAYERS):
                        for p, d in zip(src, dst):
                            s_at, d_at = (l * NPAGES + p) * BPP, (l * NPAGES + d) * BPP
                            self.assertEqual(got[d_at:d_at + BPP], data[s_at:s_at + BPP])
                wait_room(pf.e, room)
                for e in (dc.e, pf.e):
                    until = time.monotonic() + 5
                    while not e.release(room):
                        self.assertLess(time.monotonic(), until)
                        time.sleep(0.001)
            stats = dc.e.stats()
            self.assertEqual((stats["rooms_verified"], stats["checksum_mismatches"]), (1, 1))
        finally:
            dc.close()
            pf.close()

    def test_one_sided_writes_between_gpu_regions(self):
        data = bytes(self.rng.getrandbits(8) for _ in range(self.pf.size))
        call("Memcpy", ctypes.c_void_p(self.pf.dev), data, ctypes.c_size_t(len(data)), H2D)
        self.pf.e.connect_desc(self.dc.e.desc())
        remote = self.dc.e.mem_desc(self.dc.mem)
        runs = pdx.xfer_runs(self.pf.mem, 0, [0, 8192, 100000], [4096, 40000, 200000],
                             [8192, 1000, 30000])
        x = self.pf.e.write([remote], runs)
        self.assertEqual(self.pf.e.xfer_wait([x], 20000), (pdx.Status.OK, 1))
        got = to_host(self.dc.dev, self.dc.size)
        want = bytearray(self.dc.size)
        for off, roff, n in ((0, 4096, 8192), (8192, 40000, 1000), (100000, 200000, 30000)):
            want[roff:roff + n] = data[off:off + n]
        self.assertEqual(got, bytes(want))
        # tcp READs take host memory only: refused before anything moves
        with self.assertRaises(pdx.Error) as cm:
            self.pf.e.read([remote], [(self.pf.mem, 0, 0, 0, 64)])
        self.assertEqual(cm.exception.status, pdx.Status.ERR_UNSUPPORTED)

    def test_mori_gpu_regions(self):
        data = bytes(self.rng.getrandbits(8) for _ in range(BPP * 4))
        a = mori.IOEngine("gpu-a", mori.IOEngineConfig("127.0.0.1", 0))
        b = mori.IOEngine("gpu-b", mori.IOEngineConfig("127.0.0.1", 0))
        da, db = dev_alloc(len(data)), dev_alloc(len(data))
        try:
            for e in (a, b):
                e.create_backend(mori.BackendType.RDMA)
            call("Memcpy", ctypes.c_void_p(da), data, ctypes.c_size_t(len(data)), H2D)
            ma = a.register_memory(da, len(data), 0, mori.MemoryLocationType.GPU)
            mb = b.register_memory(db, len(data), 0, mori.MemoryLocationType.GPU)
            a.register_remote_engine(mori.EngineDesc.unpack(b.get_engine_desc().pack()))
            st = a.batch_write([ma], [[0, 2 * BPP]], [mori.MemoryDesc.unpack(mb.pack())],
                               [[BPP, 2 * BPP]], [[BPP, 2 * BPP]], [a.allocate_transfer_uid()])
            self.assertEqual(a.wait_all(st, -1), mori.StatusCode.SUCCESS, st[0].Message())
            got = to_host(db, len(data))
            self.assertEqual(got[:BPP], bytes(BPP), "nothing outside the entries")
            self.assertEqual(got[BPP:2 * BPP], data[:BPP])
            self.assertEqual(got[2 * BPP:], data[2 * BPP:])
        finally:
            a.close()
            b.close()
            for d in (da, db):
                call("Free", ctypes.c_void_p(d))


if __name__ == "__main__":
    unittest.main(verbosity=2)
