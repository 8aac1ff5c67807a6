"""Python's cost per call against C's, in one run: pdx_poll(), pdx_send(),
pdx_xfer_post() and pdx_xfer_wait() as bench_api (C, on libpdx.so) measures
them, then the same calls through pdx.Engine (and the raw ctypes function),
and pdx.mori's batch_write() and wait_all(). Usage, from the repository:

    PYTHONPATH=python /usr/bin/python3 tests/bench/bench_python.py [BUILD_DIR]
"""

import os
import statistics
import subprocess
import sys
import time

build = sys.argv[1] if len(sys.argv) > 1 else "build/default"
os.environ.setdefault("PDX_LIBRARY", os.path.join(build, "libpdx.so"))

import pdx  # noqa: E402
import pdx.mori as mori  # noqa: E402

BATCH, SAMPLES, ROOMS, PAGES, NPAGES, BPP, XFERS = 1000, 200, 1000, 16, 64, 4096, 1000


def post_times(post):
    """Median cost of XFERS posts (a full ring is retried, not a sample)."""
    times, out = [], []
    while len(out) < XFERS:
        t0 = time.perf_counter_ns()
        try:
            out.append(post())
        except pdx.Again:
            time.sleep(0.00005)
            continue
        times.append(time.perf_counter_ns() - t0)
    return statistics.median(times), out


def mori_side(key):
    e = mori.IOEngine(key, mori.IOEngineConfig("127.0.0.1", 0))
    e.create_backend(mori.BackendType.TCP)
    pool = bytearray(NPAGES * BPP)
    addr = __import__("ctypes").addressof((__import__("ctypes").c_char * len(pool))
                                          .from_buffer(pool))
    return e, pool, e.register_memory(addr, len(pool), -1, mori.MemoryLocationType.CPU)


def side():
    e = pdx.Engine(listen="127.0.0.1:0", transport="tcp", shards=2, log="error")
    pool = bytearray(NPAGES * BPP)
    mem = e.register(pool)
    return e, pool, e.layout([pdx.Group([(mem, 0, BPP)], NPAGES)])


def per_call(fn, n=BATCH, samples=SAMPLES):
    out = []
    for _ in range(samples):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(out)


def main():
    c = dict(line.split() for line in subprocess.run(
        [os.path.join(build, "tests/bench/bench_api")], check=True, capture_output=True,
        text=True).stdout.splitlines())
    c_poll, c_send = float(c["poll_ns"]), float(c["send_ns"])

    pf, _, la = side()
    dc, _, lb = side()
    pages = list(range(PAGES))
    peer = dc.connect(pf.address)
    dc.expect(peer, 1, lb, [pages], timeout_ms=60000)
    py_poll = per_call(lambda: dc.poll(1))
    raw = pdx._lib.pdx_poll
    h = dc._e
    raw_poll = per_call(lambda: raw(h, 1))

    times = []
    for r in range(ROOMS):
        t0 = time.perf_counter_ns()
        pf.send(1000 + r, la, [pages], last=True)
        times.append(time.perf_counter_ns() - t0)
    py_send = statistics.median(times)
    for r in range(ROOMS):
        pf.abort(1000 + r)

    # one-sided: 16 runs of 4 KiB, none adjacent
    remote = dc.mem_desc(0)
    runs = pdx.xfer_runs(0, 0, [2 * i * BPP for i in range(PAGES)],
                         [(2 * i + 1) * BPP for i in range(PAGES)], [BPP] * PAGES)
    py_xfer, handles = post_times(lambda: pf.write([remote], runs, timeout_ms=60000))
    assert pf.xfer_wait(handles, 60000)[0] == pdx.Status.OK
    t0 = time.perf_counter_ns()
    assert pf.xfer_wait(handles, 0)[0] == pdx.Status.OK
    py_wait = (time.perf_counter_ns() - t0) / XFERS
    for h in handles:
        while not pf.xfer_release(h):
            time.sleep(0.00001)
    pf.close()
    dc.close()

    # pdx.mori as sglang's connector calls it
    src, src_pool, sdesc = mori_side("bench-src")  # the pools stay alive
    dst, dst_pool, ddesc = mori_side("bench-dst")
    src.register_remote_engine(dst.get_engine_desc())
    loffs = [2 * i * BPP for i in range(PAGES)]
    roffs = [(2 * i + 1) * BPP for i in range(PAGES)]
    sizes = [BPP] * PAGES
    mori_write, statuses = post_times(lambda: src.batch_write(
        [sdesc], [loffs], [ddesc], [roffs], [sizes], [src.allocate_transfer_uid()])[0])
    assert src.wait_all(statuses, -1) == mori.StatusCode.SUCCESS
    t0 = time.perf_counter_ns()
    assert src.wait_all(statuses, 0) == mori.StatusCode.SUCCESS
    mori_wait = (time.perf_counter_ns() - t0) / XFERS
    src.close()
    dst.close()
    del src_pool, dst_pool

    print("%-40s %12s %12s %10s" % ("call", "C [ns]", "Python [ns]", "ratio"))
    print("-" * 78)
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_poll via pdx.Engine.poll", c_poll, py_poll,
                                          py_poll / c_poll))
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_poll via the raw ctypes function", c_poll,
                                          raw_poll, raw_poll / c_poll))
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_send (16 pages) via pdx.Engine.send", c_send,
                                          py_send, py_send / c_send))
    c_xfer, c_wait = float(c["xfer_ns"]), float(c["wait_ns"])
    for name, cv, pv in (("pdx_xfer_post (16 runs) via Engine.write", c_xfer, py_xfer),
                         ("... via pdx.mori batch_write", c_xfer, mori_write),
                         ("pdx_xfer_wait, per done transfer", c_wait, py_wait),
                         ("... via pdx.mori wait_all", c_wait, mori_wait)):
        print("%-40s %12.1f %12.1f %9.1fx" % (name, cv, pv, pv / cv))
    print("Python adds %.0f ns per poll(), %.0f ns per send(), %.0f ns per batch_write() "
          "and %.0f ns per status in wait_all()" % (py_poll - c_poll, py_send - c_send,
                                                    mori_write - c_xfer, mori_wait - c_wait))


if __name__ == "__main__":
    main()
