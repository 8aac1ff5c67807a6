"""pdx.mori with two Python processes over tcp, through sglang's imports: the
prefill side here replays the MoRI connector's calls (per-layer K and V
batch_writes of chunked page runs, aux in one batch, wait_all with a short
timeout, then -1) into the decode side's buffers (peer_mori.py), which
checks every byte; a failing write; a killed peer."""

import ctypes
import hashlib
import json
import os
import random
import subprocess
import sys
import time
import unittest

import pdx.mori

pdx.mori.install()
from mori.cpp import TransferStatus  # noqa: E402
from mori.io import (BackendType, EngineDesc, IOEngine, IOEngineConfig,  # noqa: E402
                     MemoryDesc, MemoryLocationType, PollCqMode, RdmaBackendConfig,
                     StatusCode)

HERE = os.path.dirname(os.path.abspath(__file__))
LAYERS, NPAGES, PAGE = 4, 64, 1152  # 576 B per token, 2 tokens per page


def runs_of(src_pages, dst_pages):
    """Contiguous runs on both sides as (src offset, dst offset, bytes), the
    way sglang groups pages before its batch_write."""
    out = []
    for s, d in zip(src_pages, dst_pages):
        if out and out[-1][0] + out[-1][2] == s * PAGE and out[-1][1] + out[-1][2] == d * PAGE:
            out[-1][2] += PAGE
        else:
            out.append([s * PAGE, d * PAGE, PAGE])
    return out


class Mori(unittest.TestCase):
    def setUp(self):
        self.child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer_mori.py"), str(LAYERS), str(NPAGES),
             str(PAGE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        info = json.loads(self.child.stdout.readline())
        self.remote = EngineDesc.unpack(bytes.fromhex(info["engine"]))
        self.dst = [MemoryDesc.unpack(bytes.fromhex(m)) for m in info["mems"]]
        self.engine = IOEngine("io-prefill-test", IOEngineConfig(host="127.0.0.1", port=0))
        self.engine.create_backend(BackendType.RDMA,
                                   RdmaBackendConfig(2, -1, 2, PollCqMode.POLLING, False))
        rng = random.Random(7)
        self.src = [bytearray(rng.randbytes(NPAGES * PAGE)) for _ in range(2 * LAYERS)]
        self.src.append(bytearray(rng.randbytes(4096)))
        self.src_descs = []
        for b in self.src:
            addr = ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
            self.src_descs.append(self.engine.register_memory(addr, len(b), -1,
                                                              MemoryLocationType.CPU))
        self.engine.register_remote_engine(self.remote)
        self.want = [bytearray(len(b)) for b in self.src]

    def tearDown(self):
        self.engine.close()
        if self.child.poll() is None:
            self.child.stdin.write("quit\n")
            self.child.stdin.flush()
            self.child.wait(20)
        self.child.stdin.close()
        self.child.stdout.close()

    def write(self, buf, runs):
        """One batch_write of one buffer's runs, as the connector makes it."""
        uid = self.engine.allocate_transfer_uid()
        for s, d, n in runs:
            self.want[buf][d:d + n] = self.src[buf][s:s + n]
        return self.engine.batch_write([self.src_descs[buf]], [[r[0] for r in runs]],
                                       [self.dst[buf]], [[r[1] for r in runs]],
                                       [[r[2] for r in runs]], [uid])

    def wait(self, statuses):
        """The connector's loop: short waits while IN_PROGRESS, then a drain."""
        code = self.engine.wait_all(statuses, 1)
        while code == StatusCode.IN_PROGRESS:
            code = self.engine.wait_all(statuses, 5)
        self.engine.wait_all(statuses, -1)
        return code

    def check_all(self):
        for i, want in enumerate(self.want):
            self.child.stdin.write("check %d %s\n" % (i, hashlib.sha256(want).hexdigest()))
            self.child.stdin.flush()
            self.assertEqual(self.child.stdout.readline().strip(), "ok", "buffer %d" % i)

    def test_names_and_descriptors(self):
        import mori.cpp
        import mori.io
        self.assertIs(mori.io.IOEngine, IOEngine)
        self.assertIs(mori.cpp.TransferStatus, TransferStatus)
        st = TransferStatus()
        self.assertTrue(st.Init())
        self.assertFalse(st.Failed() or st.Succeeded() or st.InProgress())
        self.assertEqual(st.Code(), StatusCode.INIT)
        desc = self.engine.get_engine_desc()
        self.assertGreater(desc.port, 0)
        self.assertEqual(EngineDesc.unpack(desc.pack()), desc)
        self.assertEqual(MemoryDesc.unpack(self.dst[0].pack()), self.dst[0])
        self.assertEqual(self.dst[0].size, NPAGES * PAGE)
        with self.assertRaises(ValueError):
            MemoryDesc.unpack(desc.pack())
        with self.assertRaises(ValueError):
            EngineDesc.unpack(desc.pack()[:-3])
        self.assertEqual(self.engine.wait_all([], -1), StatusCode.SUCCESS)
        self.assertEqual(self.engine.wait_all([st], 0), StatusCode.INIT, "never started")

    def test_ipv6_host(self):
        engine = IOEngine("io-v6-test", IOEngineConfig(host="::1", port=0))
        try:
            engine.create_backend(BackendType.TCP)
            desc = engine.get_engine_desc()
            self.assertEqual(desc.host, "::1")
            self.assertGreater(desc.port, 0)
        finally:
            engine.close()

    def test_connector_pattern(self):
        rng = random.Random(11)
        for req in range(6):
            # decode's pages for the request, prefill's, sent in two chunks
            n = rng.randrange(8, 24)
            dst_pages = rng.sample(range(NPAGES), n)
            if req % 2:
                dst_pages.sort()  # long runs: few entries per batch_write
            src_pages = rng.sample(range(NPAGES), n)
            statuses = []
            for lo, hi in ((0, n // 2), (n // 2, n)):
                runs = runs_of(src_pages[lo:hi], dst_pages[lo:hi])
                for layer in range(LAYERS):
                    for kv in range(2):
                        statuses.extend(self.write(2 * layer + kv, runs))
            aux = 2 * LAYERS
            uids = [self.engine.allocate_transfer_uid()]
            off = 64 * req
            self.want[aux][off:off + 64] = self.src[aux][off:off + 64]
            statuses.extend(self.engine.batch_write(
                [self.src_descs[aux]], [[off]], [self.dst[aux]], [[off]], [[64]], uids))
            self.assertEqual(self.wait(statuses), StatusCode.SUCCESS)
            self.assertTrue(all(s.Succeeded() for s in statuses))
        self.check_all()

    def test_failing_write(self):
        good = self.write(0, [[0, 0, PAGE]])
        bad = self.engine.batch_write([self.src_descs[1]], [[0]], [self.dst[1]],
                                      [[NPAGES * PAGE - 8]], [[16]], [0])
        other = self.engine.batch_write([self.dst[0]], [[0]], [self.dst[3]], [[0]], [[8]],
                                        [0])
        self.assertTrue(bad[0].Failed())
        self.assertEqual(bad[0].Code(), StatusCode.ERR_INVALID_ARGS)
        self.assertIn("out of range", bad[0].Message())
        self.assertEqual(other[0].Code(), StatusCode.ERR_INVALID_ARGS, "a local MemoryDesc "
                         "of another engine")
        code = self.wait(good + bad)
        self.assertEqual(code, StatusCode.ERR_INVALID_ARGS, "failure wins")
        self.assertTrue(good[0].Succeeded())
        self.check_all()

    def test_killed_peer(self):
        statuses = self.write(0, [[0, 0, PAGE]])
        self.assertEqual(self.wait(statuses), StatusCode.SUCCESS)
        self.child.kill()
        self.child.wait(10)
        t0 = time.monotonic()
        later = []
        for _ in range(20):
            later.extend(self.write(1, [[0, 0, PAGE]]))
            time.sleep(0.01)
        code = self.engine.wait_all(later, -1)
        self.assertNotEqual(code, StatusCode.SUCCESS)
        self.assertTrue(any(s.Failed() for s in later))
        self.assertTrue(all(not s.InProgress() for s in later), "-1 drains")
        self.assertLess(time.monotonic() - t0, 30)


if __name__ == "__main__":
    unittest.main()
