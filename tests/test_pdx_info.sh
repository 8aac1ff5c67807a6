#!/usr/bin/env bash
# pdx-info as users run it: every section with no flag, exit 0 on a machine
# without GPU or RDMA device and saying so; --json parsing and holding the
# sections asked for, exactly; combined short flags; bad flags (exit 2,
# usage on stderr); --config --json with every PDX_* row; the softnic copy
# listing softnic's devices, ports, GIDs and RoCE versions; the GPU -> NIC
# mapping and the CPUs of the hwloc XML nodes of tests/topo/ (--topology,
# PDX_TEST_TOPOLOGY_XML) when the GPU runtime has no GPU.
# usage: test_pdx_info.sh PDX-INFO PDX-INFO-SOFTNIC|- SOURCE-DIR
set -uo pipefail
info=$1 softnic=$2 src=$3
py=/usr/bin/python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
# run NAME ARGS...: stdout in $work/NAME.out, stderr in $work/NAME.err, status in $rc
run() {
  local name=$1; shift
  "$@" >"$work/$name.out" 2>"$work/$name.err"; rc=$?
}
# jcheck NAME PYTHON: the JSON of $work/NAME.out as `d`; the code asserts
jcheck() {
  "$py" - "$work/$1.out" <<EOF || fail "$1: $(tail -c 600 "$work/$1.out")"
import json, sys
d = json.load(open(sys.argv[1]))
$2
EOF
}
has() { grep -qF -- "$2" "$work/$1.out" || fail "$1: no \"$2\" in: $(cat "$work/$1.out")"; }

export PDX_LISTEN=127.0.0.1:0
unset PDX_IB_DEVICES PDX_GPU PDX_CPU_AFFINITY PDX_TEST_TOPOLOGY_XML

# ---- every section, this machine
run all "$info"
[ $rc -eq 0 ] || fail "pdx-info: exit $rc: $(cat "$work/all.err")"
for h in "== Build ==" "== GPUs ==" "== RDMA devices ==" "== GPU -> NIC ==" "== CPUs ==" \
         "== Transport ==" "== Configuration =="; do
  has all "$h"
done
has all "pdx $(sed -n 's/^project(pdx VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt")"
run json "$info" --json
[ $rc -eq 0 ] || fail "pdx-info --json: exit $rc"
jcheck json '
assert set(d) == {"version", "machine", "gpus", "rdma", "mapping", "cpus", "transport", "config"}, sorted(d)
v = d["version"]
assert v["protocol"] >= 1 and v["gpu_platform"] in ("amd", "nvidia", "none"), v
assert set(v["capabilities"]) == {"tcp", "rdma", "libsodium", "hwloc", "rocm_smi"}, v
assert d["transport"]["auto"] in ("tcp", "rdma") and d["transport"]["setting"] == "auto"
assert d["transport"]["chosen"] == d["transport"]["auto"]
assert d["cpus"]["setting"] == "auto" and d["cpus"]["valid"]
assert d["machine"]["gpus"] == d["gpus"]["count"]
assert d["machine"]["rdma_devices"] == d["rdma"]["count"]'
ngpus=$("$py" -c 'import json,sys; print(json.load(sys.stdin)["gpus"]["count"])' <"$work/json.out")
nnics=$("$py" -c 'import json,sys; print(json.load(sys.stdin)["rdma"]["count"])' <"$work/json.out")
echo "this machine: $ngpus GPUs, $nnics RDMA devices"
if [ "$ngpus" = 0 ]; then
  has all "no GPU: "
  jcheck json 'assert d["gpus"]["reason"].startswith("no GPU: ") and d["gpus"]["devices"] == []'
  has all "GPU copies to engines of this host (ipc): no: no GPU"
  jcheck json 'assert not d["transport"]["ipc"]["used"] and d["transport"]["ipc"]["reach"] is None
assert d["transport"]["ipc"]["reason"].startswith("no GPU"), d["transport"]["ipc"]'
  # PDX_TRANSPORT=ipc needs a GPU: the engine fails, and pdx-info says so
  run ipc env PDX_TRANSPORT=ipc "$info" -t
  has ipc "PDX_TRANSPORT=ipc is set: the engine fails (no GPU copies here)"
else
  has all "GPU 0: "
fi
if [ "$nnics" = 0 ]; then
  has all "no RDMA device: "
  has all "PDX_TRANSPORT=auto chooses tcp here: no RDMA device"
  jcheck json 'assert d["rdma"]["reason"].startswith("no RDMA device: ") and d["transport"]["auto"] == "tcp"'
fi
if [ "$ngpus" = 0 ] && [ "$nnics" = 0 ]; then
  has all "This machine: no GPU and no RDMA device"
fi

# ---- sections picked by flags, exactly
run gn "$info" -gn
[ $rc -eq 0 ] || fail "-gn: exit $rc"
[ "$(grep -c '^== ' "$work/gn.out")" = 2 ] || fail "-gn: $(grep '^== ' "$work/gn.out")"
has gn "== GPUs =="; has gn "== RDMA devices =="
run gnj "$info" -gnj
jcheck gnj 'assert set(d) == {"machine", "gpus", "rdma"}, sorted(d)'
run vcj "$info" --json -Vc
jcheck vcj 'assert set(d) == {"version", "cpus"}, sorted(d)'
run mj "$info" -m --json
jcheck mj 'assert set(d) == {"mapping"}, sorted(d)'
run one "$info" -c
grep -q '^== ' "$work/one.out" && fail "-c alone printed a heading"
run version "$info" --version
[ "$(head -1 "$work/version.out")" = "$(sed -n 2p "$work/all.out")" ] ||
  fail "--version: $(head -1 "$work/version.out") (the Build section says $(sed -n 2p "$work/all.out"))"
grep -qE '^pdx [0-9]+\.[0-9]+\.[0-9]+, protocol [0-9]+$' "$work/version.out" ||
  fail "--version: $(head -1 "$work/version.out")"
run help "$info" --help
[ $rc -eq 0 ] && grep -q '^usage: pdx-info' "$work/help.out" || fail "--help: exit $rc"

# ---- bad flags: exit 2, usage on stderr, nothing on stdout
for args in "--bogus" "-x" "-gx" "extra" "--topology" "--markdown --json" "--markdown -g"; do
  run bad "$info" $args
  [ $rc -eq 2 ] || fail "pdx-info $args: exit $rc, not 2"
  grep -q '^usage: pdx-info' "$work/bad.err" || fail "pdx-info $args: no usage on stderr"
  [ -s "$work/bad.out" ] && fail "pdx-info $args: wrote to stdout"
done

# ---- --config --json: every row of --config
run config "$info" --config
run configj env PDX_SHARDS=12 "$info" --config --json
[ $rc -eq 0 ] || fail "--config --json: exit $rc"
awk '/^PDX_/ {print $1}' "$work/config.out" >"$work/names"
[ "$(wc -l <"$work/names")" -ge 30 ] || fail "--config lists $(wc -l <"$work/names") variables"
jcheck configj "
want = open('$work/names').read().split()
got = [v['name'] for v in d['config']['variables']]
assert got == want, (got, want)
row = {v['name']: v for v in d['config']['variables']}
assert row['PDX_SHARDS']['value'] == '12' and row['PDX_SHARDS']['set'], row['PDX_SHARDS']
assert row['PDX_TRANSPORT']['choices'] == 'auto|tcp|rdma|ipc'
assert all(v['help'] and v['default'] is not None for v in d['config']['variables'])"

# ---- PDX_TRANSPORT=tcp: what is set, and what auto would do
run tcp env PDX_TRANSPORT=tcp "$info" -tj
jcheck tcp 'assert d["transport"]["setting"] == "tcp" and d["transport"]["chosen"] == "tcp"
assert d["transport"]["engine"]["transport"] == "tcp", d
assert d["transport"]["ipc"] == {"used": False, "reason": "PDX_TRANSPORT=tcp", "reach": None}, d'

# ---- the softnic copy: its devices, ports, GIDs, RoCE versions, and rdma chosen
if [ "$softnic" != "-" ]; then
  run sn env SOFTNIC_DEVICES=2 "$softnic" -n
  [ $rc -eq 0 ] || fail "softnic -n: exit $rc"
  has sn "softnic0: node GUID 0200:0000:0000:0001, firmware softnic, 1 port"
  has sn "softnic1: node GUID 0200:0000:0000:0002"
  has sn "port 1: ACTIVE, Ethernet, active MTU 4096, 100 Gb/s (4x 25 Gb/s)"
  has sn "GID 0   RoCE v1  fe80::ff:fe00:1"
  has sn "GID 1   RoCE v2  10.0.0.1"
  has sn "GID 1   RoCE v2  10.0.0.2"
  run snj env SOFTNIC_DEVICES=2 "$softnic" --json -gnt
  jcheck snj '
r = d["rdma"]
assert r["count"] == 2 and [x["name"] for x in r["devices"]] == ["softnic0", "softnic1"], r
for i, dev in enumerate(r["devices"]):
    assert dev["firmware"] == "softnic" and dev["node_guid"] == "0200:0000:0000:%04x" % (i + 1)
    (p,) = dev["ports"]
    assert (p["port"], p["state"], p["link_layer"], p["active_mtu"], p["speed_gbps"]) == \
        (1, "ACTIVE", "Ethernet", 4096, 100), p
    assert [(g["index"], g["type"], g["address"]) for g in p["gids"]] == \
        [(0, "RoCE v1", "fe80::ff:fe00:%x" % (i + 1)), (1, "RoCE v2", "10.0.0.%d" % (i + 1))], p
t = d["transport"]
assert (t["auto"], t["device"], t["chosen"]) == ("rdma", "softnic0", "rdma"), t
assert "GID index 1: 10.0.0.1" in t["reason"], t
assert t["engine"]["transport"] == "rdma" and t["engine"]["nics"] == 1, t
assert d["machine"]["rdma_devices"] == 2'
  run snib env SOFTNIC_DEVICES=1 PDX_IB_DEVICES=softnic9 "$softnic" -tj
  [ $rc -eq 0 ] || fail "PDX_IB_DEVICES=softnic9 -t: exit $rc (auto falls back to tcp)"
  jcheck snib 't = d["transport"]
assert t["auto"] == "tcp" and "PDX_IB_DEVICES names softnic9, which is not present" in t["reason"], t
assert t["engine"]["transport"] == "tcp", t'
  run snrdma env SOFTNIC_DEVICES=1 PDX_IB_DEVICES=softnic9 PDX_TRANSPORT=rdma "$softnic" -t
  [ $rc -eq 1 ] || fail "PDX_TRANSPORT=rdma without the device: exit $rc, not 1"
  has snrdma "PDX_TRANSPORT=rdma is set: the engine fails"
fi

# ---- the GPU -> NIC mapping of tests/topo/ (GPUs from the topology)
topo=$src/tests/topo
hwloc=$("$py" -c 'import json,sys; print(json.load(sys.stdin)["version"]["capabilities"]["hwloc"])' <"$work/json.out")
if [ "$hwloc" != True ]; then
  echo "SKIP the mapping of tests/topo/: this build has no hwloc"
  run nohw "$info" -m --topology "$topo/mi300x.xml"
  has nohw "pdx was built without hwloc"
elif [ "$ngpus" != 0 ]; then
  echo "SKIP the mapping of tests/topo/: the GPU runtime has GPUs here, so the files' GPUs do not stand in"
elif [ ! -f "$topo/mi300x.xml" ]; then
  fail "no $topo/mi300x.xml"
else
  run map "$info" -m --json --topology "$topo/mi300x.xml"
  [ $rc -eq 0 ] || fail "--topology mi300x: exit $rc: $(cat "$work/map.err")"
  # each GPU's own NIC is the one of its PCIe switch; the names do not follow the GPUs
  jcheck map '
m = d["mapping"]
assert m["gpus_from"] == "topology" and m["topology"].endswith("mi300x.xml"), m
own = ["mlx5_2", "mlx5_3", "mlx5_0", "mlx5_1", "mlx5_6", "mlx5_7", "mlx5_4", "mlx5_5"]
assert [g["ordinal"] for g in m["gpus"]] == list(range(8))
for i, g in enumerate(m["gpus"]):
    assert g["found"] and g["numa_node"] == i // 4 and g["package"] == i // 4, g
    assert g["cpus"] == ("0-7,16-23" if i < 4 else "8-15,24-31"), g
    assert len(g["nics"]) == 8, g
    n = g["nics"]
    assert (n[0]["name"], n[0]["near"]) == (own[i], "same PCIe switch"), n[0]
    assert (n[1]["name"], n[1]["near"]) == (own[i ^ 1], "same host bridge"), n[1]
    assert all(x["near"] == "other socket" and x["numa_node"] == 1 - i // 4 for x in n[4:]), n
    assert n[0]["hops"] < n[1]["hops"] and n[0]["why"], n
g0 = m["gpus"][0]
assert g0["pci_bus_id"] == "0000:03:00.0" and g0["nics"][0]["pci_bus_id"] == "0000:04:00.0"
assert m["gpus"][7]["pci_bus_id"] == "0000:d3:00.0"'
  # the same through the environment, as text; PDX_IB_DEVICES said to override
  run maptext env PDX_TEST_TOPOLOGY_XML="$topo/mi300x.xml" PDX_IB_DEVICES=mlx5_5 "$info" -m
  [ $rc -eq 0 ] || fail "PDX_TEST_TOPOLOGY_XML: exit $rc"
  grep -q "is not a pdx variable" "$work/maptext.err" && fail "PDX_TEST_TOPOLOGY_XML called misspelled"
  has maptext "GPU 3  0000:53:00.0: NUMA node 0, package 0, local CPUs 0-7,16-23"
  grep -A1 "^GPU 3 " "$work/maptext.out" | grep -q "1\. mlx5_1 .*same PCIe switch" ||
    fail "GPU 3's first NIC: $(grep -A1 '^GPU 3 ' "$work/maptext.out")"
  has maptext "PDX_IB_DEVICES=mlx5_5 overrides this order"
  # the shards' CPUs: the GPU PDX_GPU names, its local CPUs
  run cpus env PDX_GPU=5 "$info" -c --json --topology "$topo/mi300x.xml"
  jcheck cpus 'c = d["cpus"]
assert (c["gpu"], c["gpu_pci_bus_id"], c["bound"], c["cpus"]) == (5, "0000:93:00.0", True, "8-15,24-31"), c'
  run cpus2 env PDX_CPU_AFFINITY=off "$info" -c --topology "$topo/mi300x.xml"
  has cpus2 "PDX_CPU_AFFINITY=off: shards are not bound"
  # no NIC; the far NIC; a file that cannot be read (said, the rest still printed, exit 0)
  run nonic "$info" -m --topology "$topo/no-nic.xml"
  has nonic "no RDMA device in the topology"
  run far "$info" -m --json --topology "$topo/far-nic.xml"
  jcheck far '(g,) = d["mapping"]["gpus"]
assert [(n["name"], n["near"]) for n in g["nics"]] == [("mlx5_0", "other socket")], g'
  run badtopo "$info" -gm --topology "$work/missing.xml"
  [ $rc -eq 0 ] || fail "a missing topology file: exit $rc"
  has badtopo "cannot read the topology $work/missing.xml"
  has badtopo "== GPUs =="
fi

[ $fails -eq 0 ] && echo "ok" || echo "$fails failure(s)" >&2
exit $((fails > 0))
