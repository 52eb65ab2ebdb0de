#!/usr/bin/env bash
# Open MPI's rsh agent for the namespace hosts (--mca plm_rsh_agent): mpirun runs
# `rsh_agent.sh HOST COMMAND...` to start its daemon on HOST, as it would run ssh; here HOST
# is a namespace's address (MH_IP_A or MH_IP_B, exported by netns_hosts.sh) and the command
# runs inside that namespace, with this environment (as ssh with a shared home and
# AcceptEnv would give).
set -u
host=$1
shift
case "$host" in
"$MH_IP_A") ns=$MH_NS_A ;;
"$MH_IP_B") ns=$MH_NS_B ;;
*)
  echo "rsh_agent.sh: unknown host '$host' (expected $MH_IP_A or $MH_IP_B)" >&2
  exit 255
  ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
