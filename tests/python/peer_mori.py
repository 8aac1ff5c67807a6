"""The decode side of test_mori.py, a process of its own, through sglang's
imports: registers per-layer K and V buffers and an aux buffer (zeros),
prints its packed engine and memory descriptors (hex, one JSON line), then
answers `check INDEX SHA256` lines with ok/bad until `quit`."""

import ctypes
import hashlib
import json
import sys

import pdx.mori

pdx.mori.install()
from mori.io import (BackendType, IOEngine, IOEngineConfig, MemoryLocationType,  # noqa: E402
                     PollCqMode, RdmaBackendConfig)

LAYERS, NPAGES, PAGE = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

engine = IOEngine("io-decode-test", IOEngineConfig(host="127.0.0.1", port=0))
engine.create_backend(BackendType.RDMA,
                      RdmaBackendConfig(2, -1, 2, PollCqMode.POLLING, False))
bufs = [bytearray(NPAGES * PAGE) for _ in range(2 * LAYERS)] + [bytearray(4096)]
descs = []
for b in bufs:
    addr = ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
    descs.append(engine.register_memory(addr, len(b), -1, MemoryLocationType.CPU))
desc = engine.get_engine_desc()
assert desc.port > 0
print(json.dumps({"engine": desc.pack().hex(), "mems": [d.pack().hex() for d in descs]}),
      flush=True)
for line in sys.stdin:
    words = line.split()
    if not words or words[0] == "quit":
        break
    if words[0] == "check":
        got = hashlib.sha256(bufs[int(words[1])]).hexdigest()
        print("ok" if got == words[2] else "bad", flush=True)
engine.close()
