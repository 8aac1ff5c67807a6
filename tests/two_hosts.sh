#!/usr/bin/env bash
# Two hosts made of two network namespaces, A and B, joined by a veth pair
# (198.18.0.1/24 and 2001:2::1/64 in A, 198.18.0.2/24 and 2001:2::2/64 in B,
# each namespace's default routes via the other end), pdx-bench over tcp:
#   1. decode in A on the default wildcard listener (0.0.0.0:0), prefill in
#      B dialing 198.18.0.1: every room verified, decode advertised
#      198.18.0.1 (the default route's interface, not 127.0.0.1), and the
#      room bytes crossed the veth (A's receive counter grew by at least
#      them);
#   2. the same on [::]:0 and [2001:2::1];
#   3. decode with PDX_ADVERTISE_ADDR=127.0.0.1: the prefill fails at once
#      (well before its timeout) with the loopback error, and decode says
#      why too;
#   4. the same decode dialed at 198.18.0.1 from its own host (a prefill in
#      A): the connection's two ends have one address, and it is served.
# Nothing is sent outside the two namespaces. Exit 77 (a skip, with the
# reason) where the namespaces cannot be made: not root, no ip command, or
# `ip netns add`, `ip netns exec` or the veth refused.
set -euo pipefail
bench=$1
a=pdxa$$ b=pdxb$$ va=pdxva$$ vb=pdxvb$$
dir=$(mktemp -d)
dpid=
made=()
cleanup() {
  [ -n "$dpid" ] && kill -9 "$dpid" 2>/dev/null
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
skip() { echo "two_hosts: skipped: $*"; exit 77; }
fail() { echo "two_hosts: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || skip "not root (network namespaces need CAP_SYS_ADMIN)"
command -v ip >/dev/null || skip "no ip command (iproute2)"
for ns in "$a" "$b"; do
  ip netns add "$ns" 2>"$dir/err" || skip "ip netns add $ns: $(cat "$dir/err")"
  made+=("$ns")
  ip netns exec "$ns" true 2>"$dir/err" || skip "ip netns exec $ns: $(cat "$dir/err")"
done
# Both ends are made inside the namespaces: the host's own links are never touched.
ip link add "$va" netns "$a" type veth peer name "$vb" netns "$b" 2>"$dir/err" ||
  skip "veth pair: $(cat "$dir/err")"
ip -n "$a" addr add 198.18.0.1/24 dev "$va"
ip -n "$b" addr add 198.18.0.2/24 dev "$vb"
ip -n "$a" addr add 2001:2::1/64 dev "$va" nodad
ip -n "$b" addr add 2001:2::2/64 dev "$vb" nodad
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "$va" up
ip -n "$b" link set "$vb" up
ip -n "$a" route add default via 198.18.0.2 dev "$va"
ip -n "$b" route add default via 198.18.0.1 dev "$vb"
ip -n "$a" -6 route add default via 2001:2::2 dev "$va"
ip -n "$b" -6 route add default via 2001:2::1 dev "$vb"

flags=(--transport tcp --layers 4 --bytes-per-token 576 --page-size 16 --pages 8
       --requests 64 --concurrency 4 --chunks 2 --pool-mib 16 --timeout-ms 20000)
room_bytes=$((4 * 576 * 16 * 8 * 64))

rx_bytes() { ip netns exec "$a" cat "/sys/class/net/$va/statistics/rx_bytes"; }

# Start decode in A (extra environment in $@; its own --timeout-ms bounds
# its waits) and wait, with a deadline, for the address it advertises.
start_decode() {
  local listen=$1
  shift
  : >"$dir/decode.err"
  env "$@" PDX_LOG=info ip netns exec "$a" "$bench" --role decode --listen "$listen" --json \
    "${flags[@]}" >"$dir/decode" 2>"$dir/decode.err" &
  dpid=$!
  addr=
  for _ in $(seq 300); do
    addr=$(sed -n 's/.*listening on \(.*:[0-9]*\); waiting.*/\1/p' "$dir/decode.err")
    [ -n "$addr" ] && return 0
    kill -0 "$dpid" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/decode.err" >&2
  fail "decode on $listen did not listen within 30 s"
}

# Cases 1 and 2: decode on a wildcard listener advertises want (its host
# as peers dial it: [brackets] for IPv6), the veth's address.
transfer() {
  local listen=$1 want=$2 before after rc=0 host
  start_decode "$listen"
  [ "${addr%:*}" = "$want" ] ||
    { cat "$dir/decode.err" >&2; fail "decode on $listen advertised $addr, not $want"; }
  before=$(rx_bytes)
  ip netns exec "$b" timeout 60 "$bench" --role prefill --connect "$addr" "${flags[@]}" \
    >"$dir/prefill" 2>&1 || { cat "$dir/prefill" >&2; fail "prefill to $addr failed"; }
  wait "$dpid" || rc=$?
  dpid=
  after=$(rx_bytes)
  [ "$rc" -eq 0 ] || { cat "$dir/decode" "$dir/decode.err" >&2; fail "decode on $listen exited $rc"; }
  grep -q '"verified": true' "$dir/decode" &&
    grep -q '"done": 64, "failed": 0,' "$dir/decode" ||
    { cat "$dir/decode" >&2; fail "decode on $listen: not every room verified"; }
  host=${want#[}
  host=${host%]}
  grep -q "advertised as $host: the address of $va, the .*default route's interface" \
    "$dir/decode.err" || { cat "$dir/decode.err" >&2; fail "decode did not say why it advertised $host"; }
  [ $((after - before)) -ge "$room_bytes" ] ||
    fail "$va received $((after - before)) bytes, fewer than the rooms' $room_bytes"
  echo "two_hosts: decode on $listen advertised $addr; 64 rooms verified; $va received" \
       "$((after - before)) bytes (the rooms: $room_bytes)"
}

transfer 0.0.0.0:0 198.18.0.1
transfer [::]:0 [2001:2::1]

# Case 3: a decode that advertises loopback, dialed from the other host.
start_decode 0.0.0.0:0 PDX_ADVERTISE_ADDR=127.0.0.1
[ "${addr%:*}" = 127.0.0.1 ] || fail "decode advertised $addr, not 127.0.0.1"
port=${addr##*:}
t0=$(date +%s%N)
if ip netns exec "$b" timeout 60 "$bench" --role prefill --connect "198.18.0.1:$port" \
     "${flags[@]}" >"$dir/prefill" 2>&1; then
  fail "a prefill was served by a decode that advertises 127.0.0.1"
fi
ms=$((($(date +%s%N) - t0) / 1000000))
kill "$dpid" 2>/dev/null || true
wait "$dpid" 2>/dev/null || true
dpid=
grep -q "peer 198.18.0.1:$port reported: it advertises 127.0.0.1, a loopback address, to a peer on another host: set PDX_LISTEN or PDX_ADVERTISE_ADDR there" \
  "$dir/prefill" || { cat "$dir/prefill" >&2; fail "prefill's error does not say why"; }
grep -q "advertised as 127.0.0.1, a loopback address, to peer 198.18.0.2:[0-9]* on another host: set PDX_LISTEN or PDX_ADVERTISE_ADDR" \
  "$dir/decode.err" || { cat "$dir/decode.err" >&2; fail "decode's error does not say why"; }
[ "$ms" -lt 10000 ] || fail "the prefill took $ms ms to fail (its timeout is 20000 ms): not at once"
echo "two_hosts: a decode that advertises 127.0.0.1 is refused from another host in $ms ms, on both sides"

# Case 4: the same decode, dialed over A's veth address from A itself.
start_decode 0.0.0.0:0 PDX_ADVERTISE_ADDR=127.0.0.1
port=${addr##*:}
ip netns exec "$a" timeout 60 "$bench" --role prefill --connect "198.18.0.1:$port" \
  "${flags[@]}" >"$dir/prefill" 2>&1 || { cat "$dir/prefill" >&2; fail "a prefill on the decode's own host was refused"; }
rc=0
wait "$dpid" || rc=$?
dpid=
[ "$rc" -eq 0 ] && grep -q '"done": 64, "failed": 0,' "$dir/decode" ||
  { cat "$dir/decode" "$dir/decode.err" >&2; fail "decode advertising 127.0.0.1, dialed from its own host: exit $rc"; }
! grep -q "on another host" "$dir/prefill" "$dir/decode.err" ||
  fail "a peer on the same host was told about loopback"
echo "two_hosts: a decode that advertises 127.0.0.1 serves a prefill on its own host that dials 198.18.0.1"
