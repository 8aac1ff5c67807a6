#!/usr/bin/python3
"""qualify-report.json and qualify-report.md from what tools/qualify.sh found.

usage: qualify_report.py OUT_DIR

OUT_DIR holds results.tsv (a check per line: step, name, status, why,
numbers as key=value;key=value), machine.tsv (key, value), pdx-info.json
(when pdx-info ran) and meta.tsv (key, value). Without identify=1 in
meta.tsv, host names, addresses, GIDs, GUIDs and MACs are left out.
"""
import json
import os
import re
import socket
import sys

SCHEMA = "pdx-qualify/1"
STEPS = ("info", "gpu-tests", "bench", "visibility", "perftest", "markers")
STATUSES = ("pass", "fail", "skipped")
# keys whose values name this machine or its network
IDENTIFYING = re.compile(r"(^|_)(gid|gids|guid|mac|hostname|host|address|addr|ip|serial|"
                         r"node_guid|sys_image_guid|listen|advertise)s?$", re.I)
GID_OR_MAC = re.compile(r"\b([0-9a-f]{4}:){7}[0-9a-f]{4}\b|\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b",
                        re.I)
IPV4 = re.compile(r"\b(?!127\.)(\d{1,3}\.){3}\d{1,3}\b")


def table(path):
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\n")
                if line:
                    rows.append(line.split("\t"))
    return rows


def number(text):
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def redact(value, host):
    if isinstance(value, dict):
        return {k: ("<left out>" if IDENTIFYING.search(k) else redact(v, host))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, host) for v in value]
    if isinstance(value, str):
        value = GID_OR_MAC.sub("<left out>", value)
        value = IPV4.sub("<left out>", value)
        if host:
            value = value.replace(host, "<host>")
    return value


def main():
    out = sys.argv[1]
    meta = dict((r + [""])[:2] for r in table(os.path.join(out, "meta.tsv")))
    identify = meta.get("identify") == "1"
    machine = {k: number(v) for k, v in ((r + [""])[:2] for r in table(
        os.path.join(out, "machine.tsv")))}
    checks = []
    for r in table(os.path.join(out, "results.tsv")):
        step, name, status, why, nums = (r + [""] * 5)[:5]
        numbers = {}
        for kv in filter(None, nums.split(";")):
            k, _, v = kv.partition("=")
            numbers[k] = number(v)
        checks.append({"step": step, "name": name, "status": status, "why": why,
                       "numbers": numbers})
    info = None
    info_path = os.path.join(out, "pdx-info.json")
    if os.path.exists(info_path):
        with open(info_path, encoding="utf-8") as f:
            try:
                info = json.load(f)
            except ValueError as exc:
                info = {"unreadable": str(exc)}
    report = {
        "schema": SCHEMA,
        "pdx": meta.get("pdx", ""),
        "seconds": number(meta.get("seconds", "0")),
        "identify": identify,
        "options": meta.get("options", ""),
        "machine": machine,
        "checks": checks,
        "summary": {s: sum(c["status"] == s for c in checks) for s in STATUSES},
        "pdx_info": info,
    }
    if not identify:
        report = redact(report, socket.gethostname())
    with open(os.path.join(out, "qualify-report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=False)
        f.write("\n")
    with open(os.path.join(out, "qualify-report.md"), "w", encoding="utf-8") as f:
        s = report["summary"]
        f.write("# pdx qualification report\n\n")
        f.write("pdx %s, %s s; %d passed, %d failed, %d skipped.\n\n" % (
            report["pdx"], report["seconds"], s["pass"], s["fail"], s["skipped"]))
        f.write("| machine | |\n|---|---|\n")
        for k, v in report["machine"].items():
            f.write("| %s | %s |\n" % (k, v))
        f.write("\n| step | check | result | why | numbers |\n|---|---|---|---|---|\n")
        for c in report["checks"]:
            nums = ", ".join("%s %s" % kv for kv in c["numbers"].items())
            f.write("| %s | %s | %s | %s | %s |\n" % (c["step"], c["name"], c["status"],
                                                     c["why"], nums))
    return 0


if __name__ == "__main__":
    sys.exit(main())
