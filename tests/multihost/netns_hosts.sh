#!/usr/bin/env bash
# Two "hosts" as network namespaces joined by a veth pair, for the multihost tests: sourced
# by run_multihost.sh. Only the namespaces get interfaces and addresses; the host's own
# interfaces, addresses and routes are never touched. mh_setup makes them (or returns 77
# with the reason when namespaces cannot be made here), mh_cleanup removes them (idempotent;
# the caller traps it on every exit path).
#
# After mh_setup: MH_NS_A, MH_NS_B (namespace names), MH_IF_A, MH_IF_B (each one's veth end),
# MH_IP_A, MH_IP_B (their addresses, 10.231.X.1 and .2), MH_NET (10.231.X.0/24).

mh_setup() {
  local tag=$1 # unique per run (the pid): parallel runs do not collide
  MH_NS_A="rcjit-mh-${tag}-a" MH_NS_B="rcjit-mh-${tag}-b"
  # interface names are at most 15 characters and live inside the namespaces only
  local short
  short=$(printf '%06d' $((tag % 1000000)))
  MH_IF_A="rcjmh${short}a" MH_IF_B="rcjmh${short}b"
  local octet=$(((tag % 200) + 20))
  MH_IP_A="10.231.${octet}.1" MH_IP_B="10.231.${octet}.2" MH_NET="10.231.${octet}.0/24"
  if [ "$(id -u)" -ne 0 ]; then
    MH_SKIP_REASON="not root: making network namespaces needs CAP_NET_ADMIN"
    return 77
  fi
  if ! command -v ip >/dev/null; then
    MH_SKIP_REASON="no 'ip' (iproute2): scripts/deps.sh installs it"
    return 77
  fi
  if ! ip netns add "$MH_NS_A" 2>/tmp/rcjit-mh-$tag.err; then
    MH_SKIP_REASON="ip netns add failed (no CAP_NET_ADMIN here?): $(cat /tmp/rcjit-mh-$tag.err)"
    rm -f /tmp/rcjit-mh-$tag.err
    return 77
  fi
  rm -f /tmp/rcjit-mh-$tag.err
  ip netns add "$MH_NS_B" || return 1
  # the pair is made inside A, then one end moved to B: nothing appears in the host's namespace
  ip -n "$MH_NS_A" link add "$MH_IF_A" type veth peer name "$MH_IF_B" || return 1
  ip -n "$MH_NS_A" link set "$MH_IF_B" netns "$MH_NS_B" || return 1
  ip -n "$MH_NS_A" addr add "$MH_IP_A/24" dev "$MH_IF_A" || return 1
  ip -n "$MH_NS_B" addr add "$MH_IP_B/24" dev "$MH_IF_B" || return 1
  for ns in "$MH_NS_A" "$MH_NS_B"; do ip -n "$ns" link set lo up || return 1; done
  ip -n "$MH_NS_A" link set "$MH_IF_A" up || return 1
  ip -n "$MH_NS_B" link set "$MH_IF_B" up || return 1
  export MH_NS_A MH_NS_B MH_IF_A MH_IF_B MH_IP_A MH_IP_B MH_NET # for the rsh agent
  return 0
}

mh_cleanup() {
  local ns
  for ns in "${MH_NS_A:-}" "${MH_NS_B:-}"; do
    [ -n "$ns" ] && ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    [ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
  done
  return 0
}
