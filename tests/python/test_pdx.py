"""The Python binding over tcp: struct mirrors against C, errors, a transfer in
one process and between two, descriptors, abort, a killed peer, log lines.

Run by ctest with PDX_LIBRARY (the build's libpdx.so), PDX_TEST_PY_LAYOUT (the
tests/python/layout.c program) and PYTHONPATH=python.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time
import unittest

import pdx
from pdx import _ffi

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, NPAGES, BPP = 3, 64, 512


def pattern(room, layer, pos):
    """The bytes of one page: room, layer and position in the room."""
    head = b"%08d:%02d:%05d|" % (room % 10 ** 8, layer, pos)
    return (head * (BPP // len(head) + 1))[:BPP]


class Side:
    """An engine with a KV pool of LAYERS buffers of NPAGES pages and 4 KiB of aux."""

    def __init__(self, **cfg):
        self.e = pdx.Engine(listen="127.0.0.1:0", transport="tcp", shards=2, **cfg)
        self.pool = bytearray(LAYERS * NPAGES * BPP)
        self.aux = bytearray(4096)
        self.mem = self.e.register(self.pool)
        self.aux_mem = self.e.register(self.aux)
        bufs = [(self.mem, l * NPAGES * BPP, BPP) for l in range(LAYERS)]
        self.layout = self.e.layout([pdx.Group(bufs, NPAGES)], 0, LAYERS)

    def page(self, layer, p):
        at = (layer * NPAGES + p) * BPP
        return self.pool[at:at + BPP]

    def fill(self, room, pages, pos0=0):
        for l in range(LAYERS):
            for i, p in enumerate(pages):
                at = (l * NPAGES + p) * BPP
                self.pool[at:at + BPP] = pattern(room, l, pos0 + i)

    def check(self, room, pages, pos0=0):
        for l in range(LAYERS):
            for i, p in enumerate(pages):
                if self.page(l, p) != pattern(room, l, pos0 + i):
                    return "room %d layer %d page %d differs" % (room, l, p)
        return None

    def close(self):
        self.e.close()


def wait(e, room, want, timeout=10.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        st = e.poll(room)
        if st in (pdx.RoomState.SUCCESS, pdx.RoomState.FAILED):
            return st
        time.sleep(0.001)
    return e.poll(room)


def release(e, room, timeout=5.0):
    until = time.monotonic() + timeout
    while not e.release(room):
        if time.monotonic() > until:
            raise AssertionError("room %d not released" % room)
        time.sleep(0.001)


class Structs(unittest.TestCase):
    def test_mirrors_match_the_c_header(self):
        out = subprocess.run([os.environ["PDX_TEST_PY_LAYOUT"]], check=True, capture_output=True,
                             text=True).stdout
        mirror = {"pdx_config_t": _ffi.Config, "pdx_buffer_desc_t": _ffi.BufferDesc,
                  "pdx_group_desc_t": _ffi.GroupDesc, "pdx_layout_desc_t": _ffi.LayoutDesc,
                  "pdx_pages_t": _ffi.Pages, "pdx_region_t": _ffi.Region,
                  "pdx_gate_t": _ffi.Gate, "pdx_stats_t": _ffi.Stats,
                  "pdx_engine_desc_info_t": _ffi.EngineDescInfo,
                  "pdx_mem_desc_info_t": _ffi.MemDescInfo, "pdx_desc_t": _ffi.Desc,
                  "pdx_xfer_entry_t": _ffi.XferEntry}
        seen = 0
        for line in out.splitlines():
            struct, field, value = line.split()
            cls = mirror[struct]
            got = ctypes.sizeof(cls) if field == "-" else getattr(cls, field).offset
            self.assertEqual(got, int(value), "%s %s" % (struct, field))
            seen += 1
        self.assertGreater(seen, 20)


class Engine(unittest.TestCase):
    def setUp(self):
        self.sides = []

    def tearDown(self):
        for s in self.sides:
            s.close()

    def side(self, **cfg):
        s = Side(**cfg)
        self.sides.append(s)
        return s

    def test_version_and_errors(self):
        self.assertEqual(pdx.version().count("."), 2)
        with self.assertRaises(pdx.Error) as cm:
            pdx.Engine(shards="many")
        self.assertEqual(cm.exception.status, pdx.Status.ERR_INVALID)
        self.assertIn("PDX_SHARDS", str(cm.exception))
        s = self.side()
        with self.assertRaises(pdx.Error) as cm:
            s.e.deregister(999)
        self.assertEqual(cm.exception.status, pdx.Status.ERR_NOT_FOUND)
        with self.assertRaises(ValueError):
            s.e.register(b"read-only bytes")
        self.assertEqual(s.e.transport, "tcp")
        self.assertTrue(s.e.address.startswith("127.0.0.1:"))

    def test_one_sided_writes(self):
        a, b = self.side(), self.side()
        a.e.connect_desc(b.e.desc())
        a.pool[:] = bytes(range(256)) * (len(a.pool) // 256)
        remote = b.e.mem_desc(b.mem)
        runs = pdx.xfer_runs(a.mem, 0, [0, 512, 4096], [100, 612, 9000], [512, 77, 3000])
        x = a.e.write([remote], runs)
        y = a.e.write([remote], [(a.mem, 0, 20000, 30000, 100)], timeout_ms=5000)
        self.assertEqual(a.e.xfer_wait([x, y], 5000), (pdx.Status.OK, 2))
        self.assertEqual(a.e.xfer_poll(x), pdx.Status.OK)
        want = bytearray(len(b.pool))
        for off, roff, n in ((0, 100, 512), (512, 612, 77), (4096, 9000, 3000),
                             (20000, 30000, 100)):
            want[roff:roff + n] = a.pool[off:off + n]
        self.assertEqual(b.pool, want, "every byte, and none elsewhere")
        for h in (x, y):  # False for a moment after SUCCESS: the shard's last touch
            until = time.monotonic() + 5
            while not a.e.xfer_release(h):
                self.assertLess(time.monotonic(), until)
                time.sleep(0.001)
        self.assertEqual(a.e.xfer_poll(x), pdx.Status.ERR_NOT_FOUND)
        with self.assertRaises(pdx.Error) as cm:
            a.e.write([remote], [(a.mem, 0, 0, len(b.pool) - 8, 16)])
        self.assertEqual(cm.exception.status, pdx.Status.ERR_RANGE)
        b.pool[5000:5100] = bytes(range(100))
        r = a.e.read([remote], [(a.mem, 0, 70000, 5000, 100)])
        self.assertEqual(a.e.xfer_wait([r], 5000), (pdx.Status.OK, 1))
        self.assertEqual(a.pool[70000:70100], bytes(range(100)), "pulled")

    def test_one_sided_deadline(self):
        a, b = self.side(), self.side()
        a.e.connect_desc(b.e.desc())
        word = ctypes.c_uint64(0)
        gate = _ffi.Gate(kind=2, word=ctypes.pointer(word), value=1)
        x = a.e.write([b.e.mem_desc(b.mem)], [(a.mem, 0, 0, 0, 64)], gate=gate,
                      timeout_ms=200)
        self.assertEqual(a.e.xfer_wait([x], 0), (pdx.Status.INPROGRESS, 0))
        self.assertEqual(a.e.xfer_wait([x], -1), (pdx.Status.ERR_TIMEOUT, 0))
        self.assertIn("deadline", a.e.xfer_error(x))
        until = time.monotonic() + 5
        while not a.e.xfer_release(x):  # the shard lets its chunk go
            self.assertLess(time.monotonic(), until)
            time.sleep(0.001)

    def test_transfer_in_process(self):
        pf, dc = self.side(), self.side()
        peer = dc.e.connect(pf.e.address)
        src, dst = [5, 9, 1, 40, 33, 2], [60, 3, 7, 8, 21, 50]
        dc.e.expect(peer, 77, dc.layout, [dst], aux=(dc.aux_mem, 0, 64))
        self.assertEqual(dc.e.poll(77), pdx.RoomState.WAITING)
        pf.fill(77, src)
        pf.aux[:64] = bytes(range(64))
        pf.e.send(77, pf.layout, [src[:4]])
        pf.e.send(77, pf.layout, [src[4:]], aux=(pf.aux_mem, 0, 64), last=True)
        self.assertEqual(wait(dc.e, 77, pdx.RoomState.SUCCESS), pdx.RoomState.SUCCESS,
                         dc.e.error(77))
        self.assertEqual(wait(pf.e, 77, pdx.RoomState.SUCCESS), pdx.RoomState.SUCCESS)
        self.assertIsNone(dc.check(77, dst))
        self.assertEqual(bytes(dc.aux[:64]), bytes(range(64)))
        release(dc.e, 77)
        release(pf.e, 77)
        self.assertEqual(dc.e.poll(77), pdx.RoomState.NONE)
        st = pf.e.stats()
        self.assertEqual(st["rooms_success"], 1)
        self.assertGreater(st["bytes_sent"], 6 * LAYERS * BPP - 1)

    def test_layer_ranges(self):
        pf, dc = self.side(), self.side()
        peer = dc.e.connect(pf.e.address)
        src, dst = [5, 9, 1, 40], [60, 3, 7, 8]
        dc.e.expect(peer, 78, dc.layout, [dst])
        pf.fill(78, src)
        half = LAYERS // 2
        pf.e.send(78, pf.layout, [src], layers=(0, half))
        end = time.monotonic() + 10
        while dc.e.layers(78) < half and time.monotonic() < end:
            time.sleep(0.001)
        self.assertEqual(dc.e.layers(78), half, "decode counts the first range's layers")
        self.assertNotEqual(dc.e.poll(78), pdx.RoomState.SUCCESS)
        with self.assertRaises(pdx.Error):  # no GPU to wait on
            dc.e.stream_wait(78, None, layer=0)
        pf.e.send(78, pf.layout, [src], layers=(half, LAYERS), last=True)
        self.assertEqual(wait(dc.e, 78, pdx.RoomState.SUCCESS), pdx.RoomState.SUCCESS,
                         dc.e.error(78))
        self.assertEqual(dc.e.layers(78), LAYERS)
        self.assertIsNone(dc.check(78, dst))
        self.assertEqual(pf.e.stats()["bytes_sent"], 4 * LAYERS * BPP)
        with self.assertRaises(pdx.Error):
            pf.e.send(79, pf.layout, [src], layers=(half, half))
        release(dc.e, 78)
        release(pf.e, 78)

    def test_auth_key(self):
        key = "a key of more than sixteen bytes"
        pf, dc = self.side(auth_key=key), self.side(auth_key=key)
        peer = dc.e.connect(pf.e.address)
        dc.e.expect(peer, 5, dc.layout, [[1, 2]])
        pf.fill(5, [3, 4])
        pf.e.send(5, pf.layout, [[3, 4]], last=True)
        self.assertEqual(wait(dc.e, 5, pdx.RoomState.SUCCESS), pdx.RoomState.SUCCESS)
        self.assertIsNone(dc.check(5, [1, 2]))
        other = self.side(auth_key=key + "!")
        with self.assertRaises(pdx.Error) as cm:
            other.e.connect(pf.e.address)
        self.assertEqual(cm.exception.status, pdx.Status.ERR_AUTH)
        with self.assertRaises(pdx.Error) as cm:
            pdx.Engine(auth_key="short")
        self.assertNotIn("short", str(cm.exception), "the key is not repeated")

    def test_descriptors(self):
        pf, dc = self.side(), self.side()
        desc = pf.e.desc()
        info = pdx.engine_desc_info(desc)
        self.assertEqual("%s:%d" % (info["host"], info["port"]), pf.e.address)
        peer = dc.e.connect_desc(desc)
        self.assertEqual(dc.e.connect_desc(desc), peer)
        m = pdx.mem_desc_info(pf.e.mem_desc(pf.mem))
        self.assertEqual((m["engine"], m["mem"], m["len"], m["gpu"]),
                         (info["id"], pf.mem, len(pf.pool), False))
        with self.assertRaises(pdx.Error) as cm:
            pdx.engine_desc_info(b"not a descriptor")
        self.assertEqual(cm.exception.status, pdx.Status.ERR_PROTO)
        with self.assertRaises(pdx.Error) as cm:
            pf.e.mem_desc(999)
        self.assertEqual(cm.exception.status, pdx.Status.ERR_NOT_FOUND)

    def test_abort_fails_the_room_on_both_sides(self):
        pf, dc = self.side(), self.side()
        peer = dc.e.connect(pf.e.address)
        dc.e.expect(peer, 5, dc.layout, [[1, 2]])
        dc.e.abort(5)
        self.assertEqual(wait(dc.e, 5, pdx.RoomState.FAILED), pdx.RoomState.FAILED)
        self.assertIn("abort", dc.e.error(5))
        release(dc.e, 5)

    def test_log_lines_reach_a_handler(self):
        lines = []
        pdx.set_log_handler(lambda level, engine, msg: lines.append((level, engine, msg)))
        try:
            s = self.side()
            with self.assertRaises(pdx.Error):
                s.e.mem_desc(4242)
        finally:
            pdx.set_log_handler(None)
        hits = [l for l in lines if "4242" in l[2]]
        self.assertTrue(hits, lines)
        self.assertEqual(hits[0][0], pdx.LogLevel.ERROR)
        self.assertEqual(hits[0][1], s.e.address)


class TwoProcesses(unittest.TestCase):
    """Decode here, prefill in a child process (peer_prefill.py)."""

    def child(self, desc, *args):
        env = dict(os.environ)
        return subprocess.Popen([sys.executable, os.path.join(HERE, "peer_prefill.py"),
                                 desc.hex()] + [str(a) for a in args], env=env,
                                stdout=subprocess.PIPE, text=True)

    def test_rooms_from_another_process(self):
        dc = Side()
        try:
            proc = self.child(dc.e.desc(), 4, 6)  # 4 rooms of 6 pages
            peer = dc.e.accept(10000)
            self.assertIsNotNone(peer, "the prefill process never connected")
            for r in range(4):
                dst = [r * 6 + i for i in range(6)]
                dc.e.expect(peer, 100 + r, dc.layout, [dst])
            for r in range(4):
                dst = [r * 6 + i for i in range(6)]
                self.assertEqual(wait(dc.e, 100 + r, pdx.RoomState.SUCCESS),
                                 pdx.RoomState.SUCCESS, dc.e.error(100 + r))
                self.assertIsNone(dc.check(100 + r, dst))
                release(dc.e, 100 + r)
            self.assertEqual(proc.wait(20), 0)
        finally:
            proc.stdout.close()
            dc.close()

    def test_a_killed_prefill_fails_the_room(self):
        dc = Side()
        try:
            proc = self.child(dc.e.desc(), 0, 0)  # connects, then waits to be killed
            peer = dc.e.accept(10000)
            self.assertIsNotNone(peer)
            dc.e.expect(peer, 9, dc.layout, [[1, 2, 3]], timeout_ms=20000)
            self.assertEqual(proc.stdout.readline().strip(), "ready")
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            self.assertEqual(wait(dc.e, 9, pdx.RoomState.FAILED, 15.0), pdx.RoomState.FAILED)
            self.assertTrue(dc.e.error(9), "no reason given")
            release(dc.e, 9)
        finally:
            proc.stdout.close()
            dc.close()


if __name__ == "__main__":
    unittest.main()
