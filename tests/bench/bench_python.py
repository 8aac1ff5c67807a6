"""Python's cost per call against C's, in one run: pdx_poll() and pdx_send()
as bench_api (C, on libpdx.so) measures them, then the same calls through
pdx.Engine and through the raw ctypes function. Usage, from the repository:

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

BATCH, SAMPLES, ROOMS, PAGES, NPAGES, BPP = 1000, 200, 1000, 16, 64, 4096


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
    pf.close()
    dc.close()

    print("%-40s %12s %12s %10s" % ("call", "C [ns]", "Python [ns]", "ratio"))
    print("-" * 78)
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_poll via pdx.Engine.poll", c_poll, py_poll,
                                          py_poll / c_poll))
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_poll via the raw ctypes function", c_poll,
                                          raw_poll, raw_poll / c_poll))
    print("%-40s %12.1f %12.1f %9.1fx" % ("pdx_send (16 pages) via pdx.Engine.send", c_send,
                                          py_send, py_send / c_send))
    print("Python adds %.0f ns per poll() and %.0f ns per send()" % (py_poll - c_poll,
                                                                       py_send - c_send))


if __name__ == "__main__":
    main()
