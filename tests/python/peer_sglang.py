"""The prefill rank of test_sglang.py: registers with the bootstrap service
(argv[1]) and sends the rooms argv[2] lists ("room:first_page:npages:aux",
comma-separated) in chunks of 4 pages (argv[4] "layers": each chunk layer by
layer, send_layer); "wait" instead prints "ready" and waits to be killed. Exit
status 0 when every room ended as the test expects (argv[3]: "success", or
"any")."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from pdx.sglang import KVManager, KVPoll, KVSender  # noqa: E402
from sglang_side import PAGES, Pools  # noqa: E402


def main():
    boot, spec, want = sys.argv[1], sys.argv[2], sys.argv[3]
    by_layer = len(sys.argv) > 4 and sys.argv[4] == "layers"
    pools = Pools()
    mgr = KVManager(pools.args, "prefill", is_mla_backend=False, bootstrap_addr=boot,
                    listen="127.0.0.1:0", transport="tcp", shards=2)
    mgr.register_to_bootstrap()
    if spec == "wait":
        print("ready", flush=True)
        time.sleep(60)
        return 1
    senders = []
    for item in spec.split(","):
        room, first, n, aux = (int(x) for x in item.split(":"))
        pages = [PAGES - 1 - (first + i) for i in range(n)]
        pools.fill(room, pages, aux)
        s = KVSender(mgr, boot, room, [0], 0)
        s.init(n, aux)
        for at in range(0, n, 4):
            if by_layer:
                for layer in range(mgr.layers):
                    s.send_layer(pages[at:at + 4], layer)
            else:
                s.send(pages[at:at + 4])
        senders.append(s)
    until = time.monotonic() + 20
    while time.monotonic() < until and any(s.poll() not in (KVPoll.Success, KVPoll.Failed)
                                           for s in senders):
        time.sleep(0.001)
    states = [s.poll() for s in senders]
    for s in senders:
        s.clear()
    mgr.close()
    if want == "success" and any(st != KVPoll.Success for st in states):
        print("prefill states: %s" % states, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
