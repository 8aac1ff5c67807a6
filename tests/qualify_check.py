#!/usr/bin/python3
"""Checks a qualify-report.json against the report's schema (tools/qualify.sh).

usage: qualify_check.py REPORT_DIR all-skipped|info-only|bench-tcp
"""
import json
import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
import qualify_report as q  # noqa: E402

MACHINE = ("platform", "gpu_runtime", "rocm", "rdma_core", "kernel", "dmabuf_move_notify",
           "p2pdma", "peer_memory_module", "gpus", "rdma_devices", "hipcc")


def fail(why):
    print("qualify_check: " + why)
    sys.exit(1)


def main():
    out, mode = sys.argv[1], sys.argv[2]
    with open(os.path.join(out, "qualify-report.json"), encoding="utf-8") as f:
        text = f.read()
    r = json.loads(text)
    if r.get("schema") != q.SCHEMA:
        fail("schema %r" % r.get("schema"))
    for key, kind in (("pdx", str), ("seconds", int), ("identify", bool), ("machine", dict),
                      ("checks", list), ("summary", dict)):
        if not isinstance(r.get(key), kind):
            fail("%s is not a %s" % (key, kind.__name__))
    missing = [k for k in MACHINE if k not in r["machine"]]
    if missing:
        fail("machine lacks %s" % missing)
    steps = set()
    for c in r["checks"]:
        if set(c) != {"step", "name", "status", "why", "numbers"}:
            fail("a check with fields %s" % sorted(c))
        if c["step"] not in q.STEPS or c["status"] not in q.STATUSES:
            fail("a check of step %r, status %r" % (c["step"], c["status"]))
        if c["status"] != "pass" and not c["why"].strip():
            fail("%s %s without a reason" % (c["status"], c["name"]))
        if not isinstance(c["numbers"], dict):
            fail("numbers of %s" % c["name"])
        steps.add(c["step"])
    if steps != set(q.STEPS):
        fail("steps without a check: %s" % sorted(set(q.STEPS) - steps))
    counts = {s: sum(c["status"] == s for c in r["checks"]) for s in q.STATUSES}
    if counts != r["summary"]:
        fail("summary %s, checks %s" % (r["summary"], counts))
    if mode == "bench-tcp":
        bench = [c for c in r["checks"] if c["step"] == "bench" and c["status"] == "pass"]
        if len(bench) != 2 or counts["fail"]:
            fail("bench over tcp: %s" % [c for c in r["checks"] if c["step"] == "bench"])
        for c in bench:
            n = c["numbers"]
            if not (isinstance(n.get("gbps"), (int, float)) and n["gbps"] > 0 and
                    n.get("lat_p50_us", 0) > 0 and n.get("lat_p99_us", 0) >= n["lat_p50_us"]):
                fail("bench numbers of %s: %s" % (c["name"], n))
    if mode == "all-skipped":
        if counts["skipped"] != len(r["checks"]) or r["pdx_info"] is not None:
            fail("with --skip all: %s, pdx_info %r" % (counts, r["pdx_info"]))
    else:
        info = [c for c in r["checks"] if c["step"] == "info"]
        if [c["status"] for c in info] != ["pass"] or not isinstance(r["pdx_info"], dict):
            fail("pdx-info did not pass: %s" % info)
        if r["pdx_info"]["transport"].get("address", "<left out>") != "<left out>":
            fail("the engine's address is in the report")
    host = socket.gethostname()
    if host and host in text:
        fail("the host name %r is in the report" % host)
    sample = q.redact({"gid": "fe80::1", "ports": [{"gids": ["x"], "speed": "400 Gb/s"}],
                       "why": "fe80:0000:0000:0000:0202:c9ff:fe00:0001 at 10.1.2.3"}, "")
    if sample != {"gid": "<left out>", "ports": [{"gids": "<left out>", "speed": "400 Gb/s"}],
                  "why": "<left out> at <left out>"}:
        fail("redaction: %s" % sample)
    with open(os.path.join(out, "qualify-report.md"), encoding="utf-8") as f:
        md = f.read()
    for s in q.STEPS:
        if "| %s |" % s not in md:
            fail("the summary lacks step %s" % s)
    print("qualify-report.json: %d checks (%s), schema %s" % (len(r["checks"]), counts, q.SCHEMA))
    return 0


if __name__ == "__main__":
    sys.exit(main())
