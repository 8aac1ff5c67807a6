"""A disaggregation connector shaped like sglang's (sglang/srt/disaggregation/
base/conn.py) on pdx rooms.

    KVArgs           what the model's pools are: kv_data_ptrs / lens / item_lens
                     (one buffer per layer, or K then V layers), aux_data_ptrs /
                     lens / item_lens (one slot per request in each)
    KVManager        an engine per rank: registers the pools, describes them as
                     one layout (the KV buffers layer by layer, and the aux
                     buffers as a state group: one page = one request's slot,
                     sent with the last chunk)
    KVSender         prefill: init(num_kv_indices, aux_index), send(kv_indices)
                     per chunk (the chunk that completes num_kv_indices is the
                     last), or send_layer(kv_indices, layer) per layer of it
                     as the forward pass writes them, poll(),
                     failure_exception(), abort()
    KVReceiver       decode: init() then send_metadata(kv_indices, aux_index),
                     or init(kv_indices, aux_index) at once; poll(), ...
    KVPoll           sglang's numbers
    KVBootstrapServer  maps (bootstrap address, rank) to a prefill engine's
                     descriptor: the only side channel; page lists travel in
                     pdx_expect, inside pdx

A sender may send before its receiver asked (the room waits in
BOOTSTRAPPING). The gate of a chunk is the producer's: send(..., gate=)
takes a pdx gate (Engine.gate_arm on the forward stream); without one the
pages must be final when send() is called. abort() is pdx's fence: once
poll() says Failed, release (clear()) returns only when no write of the
room can still land. Decode sees Success only when its pages are visible.
"""

import socket
import socketserver
import threading
import time

import pdx


class KVPoll:
    Failed = 0
    Bootstrapping = 1
    WaitingForInput = 2
    Transferring = 3
    Success = 4


class KVArgs:
    """The fields of sglang's KVArgs this connector reads."""

    def __init__(self, **fields):
        self.engine_rank = 0
        self.kv_data_ptrs, self.kv_data_lens, self.kv_item_lens = [], [], []
        self.aux_data_ptrs, self.aux_data_lens, self.aux_item_lens = [], [], []
        self.gpu_id = -1
        for k, v in fields.items():
            setattr(self, k, v)


class TransferError(Exception):
    """A room failed: the reason pdx gives."""


# ------------------------------------------------------------------ bootstrap

class KVBootstrapServer:
    """Engine descriptors by rank, over one TCP port: "PUT rank hex" and
    "GET rank" lines, answered with "OK", the hex descriptor, or "NONE"."""

    def __init__(self, host, port):
        table, lock = {}, threading.Lock()

        class Handler(socketserver.StreamRequestHandler):
            timeout = 10

            def handle(self):
                for raw in self.rfile:
                    parts = raw.decode(errors="replace").split()
                    with lock:
                        if len(parts) == 3 and parts[0] == "PUT" and len(parts[2]) <= 512:
                            table[parts[1]] = parts[2]
                            reply = "OK"
                        elif len(parts) == 2 and parts[0] == "GET":
                            reply = table.get(parts[1], "NONE")
                        else:
                            reply = "ERR"
                    self.wfile.write((reply + "\n").encode())

        class Server(socketserver.ThreadingTCPServer):
            allow_reuse_address = True
            daemon_threads = True

        self._server = Server((host, port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def _bootstrap(addr, line, timeout=10.0):
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall((line + "\n").encode())
        reply = s.makefile().readline().strip()
    if not reply or reply == "ERR":
        raise TransferError("bootstrap %s refused %r" % (addr, line.split()[0]))
    return reply


# -------------------------------------------------------------------- manager

class KVManager:
    """One pdx engine for this rank, its pools registered and described.
    is_mla_backend: one buffer per layer; otherwise kv_data_ptrs are all K
    layers, then all V layers."""

    def __init__(self, args, disaggregation_mode="prefill", server_args=None,
                 is_mla_backend=False, bootstrap_addr=None, **engine_config):
        self.args = args
        self.mode = str(getattr(disaggregation_mode, "value", disaggregation_mode)).lower()
        self.bootstrap_addr = bootstrap_addr
        cfg = {"listen": "0.0.0.0:0"}
        if args.gpu_id is not None and args.gpu_id >= 0:
            cfg["gpu"] = args.gpu_id
        cfg.update(engine_config)
        self.engine = pdx.Engine(**cfg)
        self._peers = {}
        self._lock = threading.Lock()
        self.layout = self._describe(bool(is_mla_backend))

    def _describe(self, mla):
        a, e = self.args, self.engine
        n = len(a.kv_data_ptrs)
        mems = [e.register(p, size) for p, size in zip(a.kv_data_ptrs, a.kv_data_lens)]
        npages = min(size // item for size, item in zip(a.kv_data_lens, a.kv_item_lens))
        if mla or n % 2:
            order, per_layer = list(range(n)), 1
        else:  # K0..K(L-1), V0..V(L-1) -> K0, V0, K1, V1, ...
            order, per_layer = [i // 2 + (i % 2) * (n // 2) for i in range(n)], 2
        kv = pdx.Group([(mems[i], 0, a.kv_item_lens[i]) for i in order], npages, per_layer)
        groups = [kv]
        self.has_aux = bool(a.aux_data_ptrs)
        if self.has_aux:
            aux_mems = [e.register(p, size) for p, size in zip(a.aux_data_ptrs, a.aux_data_lens)]
            slots = min(size // item for size, item in zip(a.aux_data_lens, a.aux_item_lens))
            groups.append(pdx.Group([(m, 0, item) for m, item in zip(aux_mems, a.aux_item_lens)],
                                    slots, 1, pdx.Group.NO_LAYERS | pdx.Group.STATE))
        self.layers = n // per_layer
        return e.layout(groups, 0, self.layers)

    def register_to_bootstrap(self):
        """Prefill: publish this engine's descriptor under its rank."""
        if self.bootstrap_addr:
            _bootstrap(self.bootstrap_addr,
                       "PUT %d %s" % (self.args.engine_rank, self.engine.desc().hex()))

    def peer_for(self, bootstrap_addr, rank):
        """Decode: the prefill engine of `rank` behind a bootstrap address."""
        key = (bootstrap_addr, rank)
        with self._lock:
            peer = self._peers.get(key)
        if peer is not None:
            return peer
        reply = _bootstrap(bootstrap_addr, "GET %d" % rank)
        if reply == "NONE":
            raise TransferError("no prefill engine of rank %d at %s" % (rank, bootstrap_addr))
        peer = self.engine.connect_desc(bytes.fromhex(reply), 10000)
        with self._lock:
            self._peers[key] = peer
        return peer

    def close(self):
        self.engine.close()


def _state(mgr, room):
    st = mgr.engine.poll(room)
    return KVPoll.Bootstrapping if st == pdx.RoomState.NONE else int(st)


class _Room:
    def __init__(self, mgr, bootstrap_room):
        self.mgr = mgr
        self.room = int(bootstrap_room)
        self.failed = None

    def poll(self):
        if self.failed:
            return KVPoll.Failed
        return _state(self.mgr, self.room)

    def failure_exception(self):
        reason = self.failed or self.mgr.engine.error(self.room) or "the transfer failed"
        raise TransferError("room %d: %s" % (self.room, reason))

    def abort(self):
        try:
            self.mgr.engine.abort(self.room)
        except pdx.Error as exc:
            if exc.status != pdx.Status.ERR_NOT_FOUND:
                raise

    def clear(self, timeout=10.0):
        """Forget the room; returns once none of its writes can still land."""
        until = time.monotonic() + timeout
        while True:
            try:
                if self.mgr.engine.release(self.room):
                    return
            except pdx.Error as exc:
                if exc.status == pdx.Status.ERR_NOT_FOUND:
                    return
                raise
            if time.monotonic() > until:
                raise TransferError("room %d still has writes in flight" % self.room)
            time.sleep(0.0005)


class KVSender(_Room):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room, dest_tp_ranks=None, pp_rank=0,
                 *args, **kwargs):
        super().__init__(mgr, bootstrap_room)
        self.num_kv_indices = None
        self.aux_index = None
        self.sent = 0

    def init(self, num_kv_indices, aux_index=None):
        self.num_kv_indices = int(num_kv_indices)
        self.aux_index = aux_index

    def send(self, kv_indices, state_indices=None, token_position_offset=0, gate=None):
        """One chunk; the one that completes num_kv_indices is the last."""
        pages = [int(p) for p in kv_indices]
        self.sent += len(pages)
        self._send(pages, self._ends(), gate, self._ends(), None)

    def send_layer(self, kv_indices, layer, gate=None):
        """Layer-wise (like vLLM's save_kv_layer): layer `layer` of the chunk
        kv_indices, once the forward pass wrote it (gate: after that layer's
        kernels). Call it for every layer in order; the chunk counts towards
        num_kv_indices with its last layer."""
        pages = [int(p) for p in kv_indices]
        final = layer + 1 == self.mgr.layers
        ends = self.num_kv_indices is None or self.sent + len(pages) >= self.num_kv_indices
        if final:
            self.sent += len(pages)
        self._send(pages, ends, gate, final and ends, (layer, layer + 1))

    def _ends(self):
        return self.num_kv_indices is None or self.sent >= self.num_kv_indices

    def _send(self, pages, aux, gate, last, layers):
        """aux: this chunk completes the request (its aux slot goes with it;
        every layer range of it lists the slot, sent with the last one)."""
        lists = [pages]
        if self.mgr.has_aux:
            lists.append([int(self.aux_index)] if aux and self.aux_index is not None else [])
        while True:
            try:
                self.mgr.engine.send(self.room, self.mgr.layout, lists, gate=gate, last=last,
                                     layers=layers)
                return
            except pdx.Again:
                time.sleep(0.0001)  # the shard's ring is full: it drains on its own
            except pdx.Error as exc:
                self.failed = str(exc)
                return

    def get_transfer_metric(self):
        return None


class KVReceiver(_Room):
    def __init__(self, mgr, bootstrap_addr, bootstrap_room=None, *args, **kwargs):
        super().__init__(mgr, bootstrap_room or 0)
        self.bootstrap_addr = bootstrap_addr
        self.peer = None

    def init(self, kv_indices_or_rank=0, aux_index=None, *args, **kwargs):
        """init(prefill_dp_rank) then send_metadata(), or init(kv_indices, aux_index)."""
        if isinstance(kv_indices_or_rank, int):
            self._resolve()
            return
        self._resolve()
        self.send_metadata(kv_indices_or_rank, aux_index)

    def _resolve(self):
        if self.peer is None:
            try:
                self.peer = self.mgr.peer_for(self.bootstrap_addr, self.mgr.args.engine_rank)
            except (pdx.Error, OSError, TransferError) as exc:
                self.failed = str(exc)

    def send_metadata(self, kv_indices, aux_index=None, state_indices=None,
                      decode_prefix_len=None, timeout_ms=0):
        self._resolve()
        if self.failed:
            return
        lists = [[int(p) for p in kv_indices]]
        if self.mgr.has_aux:
            lists.append([int(aux_index)] if aux_index is not None else [])
        try:
            self.mgr.engine.expect(self.peer, self.room, self.mgr.layout, lists,
                                   timeout_ms=timeout_ms)
        except pdx.Error as exc:
            self.failed = str(exc)

    def poll(self):
        if not self.failed and self.peer is None:
            return KVPoll.Bootstrapping
        return super().poll()

    def layers_landed(self):
        """How many layers, from the first, have landed (prefill sent them
        with send_layer); all of them once the request succeeded."""
        return self.mgr.engine.layers(self.room)

    def wait_layer(self, layer, stream):
        """Make a GPU stream (a raw hipStream_t, e.g. torch's cuda_stream)
        wait until `layer` landed, as a layer-wise load_kv_layer would; the
        failure gate it returns opens if the request fails."""
        return self.mgr.engine.stream_wait(self.room, stream, layer=layer)
