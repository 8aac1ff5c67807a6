"""pdx.mori between two processes in DeepSeek-R1's geometry, against pdx-bench
(C, rooms) between two processes in the same run and geometry.

61 layers (one buffer each, MLA), 576 B per token per layer, pages of 64
tokens, requests of 64 random pages, 8 requests in flight. The pdx.mori
side calls what sglang's MoRI connector calls: per request, per layer one
batch_write of the request's runs of pages (random pages: one run each),
then wait_all with a short timeout until done, then -1. The target process
checks every byte of its pool at the end against the last page written to
each place. Usage, from the repository:

    PYTHONPATH=python /usr/bin/python3 tests/bench/bench_mori.py [BUILD_DIR] [REQUESTS]
"""

import ctypes
import json
import mmap
import os
import random
import struct
import subprocess
import sys
import time

build = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else \
    "build/default"
os.environ.setdefault("PDX_LIBRARY", os.path.join(build, "libpdx.so"))

import pdx.mori  # noqa: E402

pdx.mori.install()
from mori.io import (BackendType, EngineDesc, IOEngine, IOEngineConfig,  # noqa: E402
                     MemoryDesc, MemoryLocationType, PollCqMode, RdmaBackendConfig,
                     StatusCode)

LAYERS, TOKEN, PAGE_TOKENS, PAGES, INFLIGHT = 61, 576, 64, 64, 8
PAGE = TOKEN * PAGE_TOKENS
POOL_PAGES = 537  # as pdx-bench's 1151 MiB pool


def page_bytes(layer, page):
    return struct.pack("<II", layer, page) * (PAGE // 8)


def engine(key):
    e = IOEngine(key, IOEngineConfig(host="127.0.0.1", port=0))
    e.create_backend(BackendType.RDMA, RdmaBackendConfig(1, -1, 4, PollCqMode.POLLING, False))
    pool = mmap.mmap(-1, LAYERS * POOL_PAGES * PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(pool))
    descs = [e.register_memory(base + l * POOL_PAGES * PAGE, POOL_PAGES * PAGE, -1,
                               MemoryLocationType.CPU) for l in range(LAYERS)]
    return e, pool, descs


def target():
    """The decode side: its pool, its descriptors out, then the final check."""
    e, pool, descs = engine("bench-mori-target")
    print(json.dumps({"engine": e.get_engine_desc().pack().hex(),
                      "mems": [d.pack().hex() for d in descs]}), flush=True)
    last = json.loads(sys.stdin.readline())  # {layer*POOL_PAGES+dst: src}
    bad = 0
    for where, src in last.items():
        at = int(where) * PAGE
        if pool[at:at + PAGE] != page_bytes(int(where) // POOL_PAGES, src):
            bad += 1
    print(json.dumps({"bad_pages": bad, "checked": len(last)}), flush=True)
    e.close()


def mori_run(requests):
    child = subprocess.Popen([sys.executable, __file__, build, "--target"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    info = json.loads(child.stdout.readline())
    e, pool, src = engine("bench-mori-source")
    for l in range(LAYERS):
        for p in range(POOL_PAGES):
            at = (l * POOL_PAGES + p) * PAGE
            pool[at:at + PAGE] = page_bytes(l, p)
    remote = EngineDesc.unpack(bytes.fromhex(info["engine"]))
    dst = [MemoryDesc.unpack(bytes.fromhex(m)) for m in info["mems"]]
    e.register_remote_engine(remote)
    rng = random.Random(1)
    last, calls, busy = {}, 0, []
    free_dst = list(range(POOL_PAGES))
    t0 = time.perf_counter()
    for r in range(requests):
        if len(busy) == INFLIGHT:  # the oldest request's writes end first
            statuses, pages = busy.pop(0)
            code = e.wait_all(statuses, 1)
            while code == StatusCode.IN_PROGRESS:
                code = e.wait_all(statuses, 5)
            e.wait_all(statuses, -1)
            assert code == StatusCode.SUCCESS, [s.Message() for s in statuses if s.Failed()]
            free_dst.extend(pages)
        dpages = rng.sample(free_dst, PAGES)
        for p in dpages:
            free_dst.remove(p)
        spages = rng.sample(range(POOL_PAGES), PAGES)
        statuses = []
        loffs = [p * PAGE for p in spages]
        roffs = [p * PAGE for p in dpages]
        sizes = [PAGE] * PAGES
        for l in range(LAYERS):
            uid = e.allocate_transfer_uid()
            statuses.extend(e.batch_write([src[l]], [loffs], [dst[l]], [roffs], [sizes], [uid]))
            calls += 1
            for s, d in zip(spages, dpages):
                last[str(l * POOL_PAGES + d)] = s
        busy.append((statuses, dpages))
    for statuses, _ in busy:
        assert e.wait_all(statuses, -1) == StatusCode.SUCCESS
    seconds = time.perf_counter() - t0
    child.stdin.write(json.dumps(last) + "\n")
    child.stdin.flush()
    check = json.loads(child.stdout.readline())
    child.wait(60)
    e.close()
    return {"seconds": seconds, "bytes": requests * LAYERS * PAGES * PAGE,
            "batch_writes": calls, **check}


def bench_c(requests):
    exe = os.path.join(build, "tools", "pdx-bench")
    flags = ["-L", str(LAYERS), "-b", str(TOKEN), "-P", str(PAGE_TOKENS), "-p", str(PAGES),
             "-n", str(requests), "-t", str(INFLIGHT), "--json"]
    dec = subprocess.Popen([exe, "--role", "decode", "--listen", "127.0.0.1:0"] + flags,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    addr = None
    for line in dec.stderr:  # decode prints where it listens
        if "listening on " in line:
            addr = line.split("listening on ")[1].split(";")[0]
            break
    pre = subprocess.run([exe, "--role", "prefill", "--connect", addr] + flags,
                         capture_output=True, text=True, timeout=600)
    out, _ = dec.communicate(timeout=600)
    res = json.loads(out)
    return res["decode"], 0 if res["verified"] and pre.returncode == 0 else 1


def main():
    requests = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    c, rc = bench_c(requests)
    m = mori_run(requests)
    gbs = m["bytes"] / m["seconds"] / 1e9
    print("DeepSeek-R1 geometry: %d layers x %d B/token x %d tokens/page, %d pages/request, "
          "%d requests, %d in flight, tcp on 127.0.0.1 (pdx transport: %s)" % (
              LAYERS, TOKEN, PAGE_TOKENS, PAGES, requests, INFLIGHT,
              os.environ.get("PDX_TRANSPORT", "auto")))
    print("%-44s %10s" % ("", "GB/s"))
    print("%-44s %10.2f" % ("pdx-bench (C rooms, verified while running)", c["bw_gbps"]))
    print("%-44s %10.2f   %d batch_writes, %d of %d pages bad" % (
        "pdx.mori (sglang's calls, checked after)", gbs, m["batch_writes"], m["bad_pages"],
        m["checked"]))
    print("ratio pdx.mori / pdx-bench: %.2f" % (gbs / c["bw_gbps"]))
    return 0 if rc == 0 and m["bad_pages"] == 0 else 1


if __name__ == "__main__":
    if "--target" in sys.argv:
        target()
    else:
        sys.exit(main())
