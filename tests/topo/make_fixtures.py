#!/usr/bin/python3
"""Writes the hwloc XML topologies of tests/topo/ (test_topo.c reads them).

Each is a made-up node, small enough to read: 2 packages of 8 cores with 2
threads each (package 0 has CPUs 0-7 and 16-23, package 1 8-15 and 24-31,
as Linux numbers hyperthreads), and PCI trees of host bridges, root ports,
PCIe switches, GPUs and RDMA NICs. Run it again after changing a layout:
    /usr/bin/python3 tests/topo/make_fixtures.py tests/topo
"""
import sys
from xml.sax.saxutils import quoteattr

AMD_GPU = {"mi300x": "1002:74a1", "mi355x": "1002:75a3"}
NIC = {"mlx5": ("0207", "15b3:1021"), "ionic": ("0200", "1dd8:1002"), "bnxt_re": ("0200", "14e4:1760")}


class Xml:
    def __init__(self):
        self.lines = []
        self.gp = 0

    def open(self, depth, typ, attrs, close=False):
        self.gp += 1
        a = " ".join(f"{k}={quoteattr(str(v))}" for k, v in [("type", typ)] + attrs + [("gp_index", self.gp)])
        self.lines.append("  " * depth + f"<object {a}{'/' if close else ''}>")

    def close(self, depth):
        self.lines.append("  " * depth + "</object>")


def mask(cpus):
    v = 0
    for c in cpus:
        v |= 1 << c
    return f"0x{v:08x}"


def pus_of(cores):
    """Core c runs threads c and c + 16."""
    return sorted(cores + [c + 16 for c in cores])


def cpu_attrs(cpus, nodes):
    return [("cpuset", mask(cpus)), ("complete_cpuset", mask(cpus)),
            ("nodeset", mask(nodes)), ("complete_nodeset", mask(nodes))]


def busid(bus, dev=0, fn=0):
    return f"0000:{bus:02x}:{dev:02x}.{fn:x}"


def pci_bridge(x, d, bus, dev, fn, lo, hi):
    x.open(d, "Bridge", [("bridge_type", "1-1"), ("depth", 0), ("pci_busid", busid(bus, dev, fn)),
                         ("pci_type", "0604 [1022:14ab] [0000:0000] 00"),
                         ("pci_link_speed", "32.000000"), ("bridge_pci", f"0000:[{lo:02x}-{hi:02x}]")])


def device(x, d, dev):
    """dev: ("gpu", bus, model, index) or ("nic", bus, name)."""
    if dev[0] == "gpu":
        _, bus, model, index = dev
        x.open(d, "PCIDev", [("pci_busid", busid(bus)), ("pci_type", f"1200 [{AMD_GPU[model]}] [{AMD_GPU[model]}] 00"),
                             ("pci_link_speed", "32.000000")])
        x.open(d + 1, "OSDev", [("name", f"rsmi{index}"), ("osdev_type", 1)], close=True)
    else:
        _, bus, name = dev
        kind = name.rstrip("0123456789").rstrip("_")
        cls, ids = NIC[kind]
        x.open(d, "PCIDev", [("pci_busid", busid(bus)), ("pci_type", f"{cls} [{ids}] [{ids}] 00"),
                             ("pci_link_speed", "32.000000")])
        x.open(d + 1, "OSDev", [("name", name), ("osdev_type", 3)], close=True)
    x.close(d)


def host_bridge(x, d, hb):
    """hb: (first bus, [root port]); a root port is ("switch", [device]) or a device."""
    base, ports = hb
    x.open(d, "Bridge", [("bridge_type", "0-1"), ("depth", 0), ("bridge_pci", f"0000:[{base:02x}-{base + 0x3f:02x}]")])
    for i, port in enumerate(ports):
        lo = base + 1 + i * 0x10
        pci_bridge(x, d + 1, base, 1, i + 1, lo, lo + 0xf)
        if port[0] == "switch":
            pci_bridge(x, d + 2, lo, 0, 0, lo + 1, lo + 0xf)
            for j, dev in enumerate(port[1]):
                pci_bridge(x, d + 3, lo + 1, j, 0, dev[1], dev[1])
                device(x, d + 4, dev)
                x.close(d + 3)
            x.close(d + 2)
        else:
            device(x, d + 2, port)
        x.close(d + 1)
    x.close(d)


def node(numas):
    """numas: per package, a list of NUMA nodes (cores, [host bridge])."""
    x = Xml()
    allc = list(range(32))
    nodes = [n for pkg in numas for n in range(len(pkg))]
    nnodes = sum(len(p) for p in numas)
    x.lines += ['<?xml version="1.0" encoding="UTF-8"?>', '<!DOCTYPE topology SYSTEM "hwloc2.dtd">',
                '<topology version="2.0">']
    x.open(1, "Machine", [("os_index", 0)] + cpu_attrs(allc, range(nnodes)) +
           [("allowed_cpuset", mask(allc)), ("allowed_nodeset", mask(range(nnodes)))])
    nid = 0
    for p, pkg in enumerate(numas):
        pcpus = pus_of([c for n in pkg for c in n[0]])
        pnodes = list(range(nid, nid + len(pkg)))
        x.open(2, "Package", [("os_index", p)] + cpu_attrs(pcpus, pnodes))
        for cores, hbs in pkg:
            d = 3
            if len(pkg) > 1:
                x.open(3, "Group", cpu_attrs(pus_of(cores), [nid]) + [("kind", 1000), ("subkind", 0)])
                d = 4
            x.open(d, "NUMANode", [("os_index", nid)] + cpu_attrs(pus_of(cores), [nid]) +
                   [("local_memory", 1 << 37)], close=True)
            for c in cores:
                x.open(d, "Core", [("os_index", c)] + cpu_attrs([c, c + 16], [nid]))
                for t in (c, c + 16):
                    x.open(d + 1, "PU", [("os_index", t)] + cpu_attrs([t], [nid]), close=True)
                x.close(d)
            for hb in hbs:
                host_bridge(x, d, hb)
            if len(pkg) > 1:
                x.close(3)
            nid += 1
        x.close(2)
    x.close(1)
    x.lines.append("</topology>")
    return "\n".join(x.lines) + "\n"


def gpu_nic_switch(bus, model, gpu, nics):
    devs = [("gpu", bus, model, gpu)] + [("nic", bus + 1 + k, n) for k, n in enumerate(nics)]
    return ("switch", devs)


def mi300x():
    # 4 host bridges, 2 per package, each with 2 root ports to a PCIe switch
    # holding one GPU and one NIC. The NICs' names do not follow the GPUs'.
    names = [2, 3, 0, 1, 6, 7, 4, 5]
    hbs = []
    for h in range(4):
        base = h * 0x40
        hbs.append((base, [gpu_nic_switch(base + 3 + r * 0x10, "mi300x", 2 * h + r, [f"mlx5_{names[2 * h + r]}"])
                           for r in range(2)]))
    return node([[(list(range(0, 8)), hbs[0:2])], [(list(range(8, 16)), hbs[2:4])]])


def mi355x():
    # 2 NUMA nodes per package (NPS2), a host bridge each with 2 switches of
    # one GPU and one Pollara NIC.
    hbs = []
    for h in range(4):
        base = h * 0x40
        hbs.append((base, [gpu_nic_switch(base + 3 + r * 0x10, "mi355x", 2 * h + r, [f"ionic_{2 * h + r}"])
                           for r in range(2)]))
    return node([[(list(range(0, 4)), [hbs[0]]), (list(range(4, 8)), [hbs[1]])],
                 [(list(range(8, 12)), [hbs[2]]), (list(range(12, 16)), [hbs[3]])]])


def far_nic():
    # The GPU on package 0, the only NIC on package 1.
    return node([[(list(range(0, 8)), [(0x00, [("gpu", 0x03, "mi300x", 0)])])],
                 [(list(range(8, 16)), [(0x80, [("nic", 0x83, "mlx5_0")])])]])


def no_nic():
    return node([[(list(range(0, 8)), [(0x00, [gpu_nic_switch(0x03, "mi300x", 0, [])])])],
                 [(list(range(8, 16)), [(0x80, [gpu_nic_switch(0x83, "mi300x", 1, [])])])]])


def two_nics():
    # 2 NICs under each GPU's switch; names interleaved across the GPUs.
    return node([[(list(range(0, 8)), [(0x00, [gpu_nic_switch(0x03, "mi300x", 0, ["mlx5_1", "mlx5_3"]),
                                                gpu_nic_switch(0x13, "mi300x", 1, ["mlx5_0", "mlx5_2"])])])],
                 [(list(range(8, 16)), [])]])


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    for name, fn in [("mi300x", mi300x), ("mi355x", mi355x), ("far-nic", far_nic), ("no-nic", no_nic),
                     ("two-nics", two_nics)]:
        with open(f"{out}/{name}.xml", "w") as f:
            f.write(fn())
