"""The prefill side of test_pdx.py's two-process tests: connects to the decode
engine its descriptor names (argv[1], hex) and sends `rooms` rooms of `pages`
pages each (argv[2], argv[3]), rooms 100.., source pages from the end of the
pool; with 0 rooms it prints "ready" and waits to be killed."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pdx  # noqa: E402
from test_pdx import NPAGES, Side, wait  # noqa: E402


def main():
    desc, rooms, pages = bytes.fromhex(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    pf = Side()
    pf.e.connect_desc(desc, 10000)
    if rooms == 0:
        print("ready", flush=True)
        time.sleep(60)
        return 1
    for r in range(rooms):
        src = [NPAGES - 1 - (r * pages + i) for i in range(pages)]
        pf.fill(100 + r, src)
        pf.e.send(100 + r, pf.layout, [src[:pages // 2]])
        pf.e.send(100 + r, pf.layout, [src[pages // 2:]], last=True)
    for r in range(rooms):
        if wait(pf.e, 100 + r, pdx.RoomState.SUCCESS) != pdx.RoomState.SUCCESS:
            print("room %d: %s" % (100 + r, pf.e.error(100 + r)), file=sys.stderr)
            return 1
    pf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
