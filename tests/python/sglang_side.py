"""A model's pools for the pdx.sglang tests: 2 layers of K and V (4 buffers of
PAGES pages of PAGE bytes, sglang's order: K layers, then V layers) and two
aux buffers of SLOTS request slots, in bytearrays, with their KVArgs."""

import ctypes

from pdx.sglang import KVArgs

LAYERS, PAGES, PAGE, SLOTS = 2, 48, 256, 8
AUX_ITEMS = (16, 32)


def pattern(room, buf, pos, n=PAGE):
    head = b"r%06d b%d p%04d|" % (room, buf, pos)
    return (head * (n // len(head) + 1))[:n]


class Pools:
    def __init__(self, rank=0):
        self.kv = [bytearray(PAGES * PAGE) for _ in range(2 * LAYERS)]
        self.aux = [bytearray(SLOTS * item) for item in AUX_ITEMS]
        ptr = lambda b: ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))
        self.args = KVArgs(engine_rank=rank,
                           kv_data_ptrs=[ptr(b) for b in self.kv],
                           kv_data_lens=[len(b) for b in self.kv],
                           kv_item_lens=[PAGE] * len(self.kv),
                           aux_data_ptrs=[ptr(b) for b in self.aux],
                           aux_data_lens=[len(b) for b in self.aux],
                           aux_item_lens=list(AUX_ITEMS))

    def fill(self, room, pages, aux_index, pos0=0):
        for b, buf in enumerate(self.kv):
            for i, p in enumerate(pages):
                buf[p * PAGE:(p + 1) * PAGE] = pattern(room, b, pos0 + i)
        for a, (buf, item) in enumerate(zip(self.aux, AUX_ITEMS)):
            buf[aux_index * item:(aux_index + 1) * item] = pattern(room, 100 + a, 0, item)

    def check(self, room, pages, aux_index):
        for b, buf in enumerate(self.kv):
            for i, p in enumerate(pages):
                if buf[p * PAGE:(p + 1) * PAGE] != pattern(room, b, i):
                    return "room %d buffer %d page %d differs" % (room, b, p)
        for a, (buf, item) in enumerate(zip(self.aux, AUX_ITEMS)):
            if buf[aux_index * item:(aux_index + 1) * item] != pattern(room, 100 + a, 0, item):
                return "room %d aux %d differs" % (room, a)
        return None
