"""pdx.sglang with two Python processes over tcp: decode here, a prefill rank
in a child (peer_sglang.py), the bootstrap service here. Several requests
in chunks with aux bytes (whole chunks, and layer by layer), abort, a killed
prefill, a room nobody serves."""

import os
import signal
import subprocess
import sys
import time
import unittest

from pdx.sglang import (KVBootstrapServer, KVManager, KVPoll, KVReceiver, TransferError)
from sglang_side import PAGES, Pools

HERE = os.path.dirname(os.path.abspath(__file__))


def wait_end(obj, timeout=15.0):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        st = obj.poll()
        if st in (KVPoll.Success, KVPoll.Failed):
            return st
        time.sleep(0.001)
    return obj.poll()


class Connector(unittest.TestCase):
    def setUp(self):
        self.boot = KVBootstrapServer("127.0.0.1", 0)
        self.addr = "127.0.0.1:%d" % self.boot.port
        self.pools = Pools()
        self.mgr = KVManager(self.pools.args, "decode", is_mla_backend=False,
                             listen="127.0.0.1:0", transport="tcp", shards=2)
        self.child = None

    def tearDown(self):
        if self.child:
            if self.child.poll() is None:
                self.child.kill()
                self.child.wait(10)
            self.child.stdout.close()
        self.mgr.close()
        self.boot.close()

    def prefill(self, spec, want="success", how="chunks"):
        self.child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer_sglang.py"), self.addr, spec, want, how],
            stdout=subprocess.PIPE, text=True)

    def receiver(self, room, pages, aux):
        r = KVReceiver(self.mgr, self.addr, room)
        deadline = time.monotonic() + 10
        while True:  # the prefill rank registers once its engine is up
            r.failed, r.peer = None, None
            r.init(pages, aux)
            if not r.failed or time.monotonic() > deadline:
                return r
            time.sleep(0.05)

    def test_requests_in_chunks_with_aux(self):
        self.requests("chunks")

    def test_requests_layer_by_layer(self):
        self.requests("layers")

    def requests(self, how):
        rooms = [(11, 0, 9, 1), (12, 9, 4, 5), (13, 13, 12, 7)]
        self.prefill(",".join("%d:%d:%d:%d" % r for r in rooms), how=how)
        recvs = []
        for room, first, n, aux in rooms:
            dst = [first + i for i in range(n)]
            recvs.append((self.receiver(room, dst, aux), room, dst, aux))
        for r, room, dst, aux in recvs:
            self.assertEqual(wait_end(r), KVPoll.Success, r.failed or "")
            self.assertIsNone(self.pools.check(room, dst, aux))
            self.assertEqual(r.layers_landed(), self.mgr.layers)
            r.clear()
        self.assertEqual(self.child.wait(20), 0)

    def test_abort_fails_the_request(self):
        self.prefill("wait")
        self.assertEqual(self.child.stdout.readline().strip(), "ready")
        r = self.receiver(21, [1, 2, 3], 0)
        self.assertIsNone(r.failed)
        self.assertIn(r.poll(), (KVPoll.WaitingForInput, KVPoll.Bootstrapping))
        r.abort()
        self.assertEqual(wait_end(r), KVPoll.Failed)
        with self.assertRaises(TransferError) as cm:
            r.failure_exception()
        self.assertIn("abort", str(cm.exception))
        r.clear()

    def test_a_killed_prefill_fails_its_requests(self):
        self.prefill("wait")
        self.assertEqual(self.child.stdout.readline().strip(), "ready")
        r = self.receiver(31, [4, 5], 2)
        self.assertIsNone(r.failed)
        self.child.send_signal(signal.SIGKILL)
        self.child.wait(10)
        self.assertEqual(wait_end(r), KVPoll.Failed)
        with self.assertRaises(TransferError):
            r.failure_exception()
        r.clear()

    def test_a_rank_nobody_serves(self):
        r = KVReceiver(self.mgr, self.addr, 41)
        r.init([1], 0)
        self.assertEqual(r.poll(), KVPoll.Failed)
        with self.assertRaises(TransferError) as cm:
            r.failure_exception()
        self.assertIn("no prefill engine", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
