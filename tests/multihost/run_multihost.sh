#!/usr/bin/env bash
# The multihost tests (CTest label `multihost`): two hosts made of network namespaces joined
# by a veth pair (netns_hosts.sh), mpirun started inside host A with a hostfile of both
# addresses, Open MPI's rsh agent entering host B's namespace (rsh_agent.sh), TCP only
# (btl tcp,self; the hosts' subnet named for the BTL and the out-of-band channel), 2 ranks
# per host.
#
# usage: run_multihost.sh RCJIT COMPARE MPIRUN train ddp|zero3 MODES
#          2 hosts x 2 ranks train the 2-layer gpt2; every loss equals one process's
#          (relative 1e-5; COMPARE is rcjit_multihost_compare)
#        run_multihost.sh RCJIT COMPARE MPIRUN run ARGS...
#          runs `rcjit ARGS...` on 2 hosts x 2 ranks and prints its output (by hand: the
#          figures in docs/distributed.md)
#        run_multihost.sh RCJIT COMPARE MPIRUN cut TIMEOUT
#          host B's link goes down mid-run: every rank ends within the collective timeout
#          (RCJIT_DIST_TIMEOUT=TIMEOUT), host B's ranks (which nothing can reach) each with
#          the rcjit::Error, host A's with the Error or the job's abort
# Exit 77 (CTest's skip) with the reason where namespaces cannot be made.
set -u
here=$(cd "$(dirname "$0")" && pwd)
rcjit=$1 compare=$2 mpirun=$3 what=$4
shift 4
source "$here/netns_hosts.sh"
work=$(mktemp -d /tmp/rcjit-multihost.XXXXXX)
mpirun_pid=""
finish() {
  [ -n "$mpirun_pid" ] && kill -9 "$mpirun_pid" 2>/dev/null
  mh_cleanup
  rm -rf "$work"
}
trap finish EXIT
trap 'exit 1' INT TERM
mh_setup $$
rc=$?
if [ $rc -eq 77 ]; then
  echo "SKIP: $MH_SKIP_REASON"
  exit 77
fi
[ $rc -ne 0 ] && { echo "FAIL: could not make the namespace hosts"; exit 1; }
printf '%s slots=2\n%s slots=2\n' "$MH_IP_A" "$MH_IP_B" >"$work/hostfile"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
launch=(ip netns exec "$MH_NS_A" "$mpirun" --hostfile "$work/hostfile" -np 4 --map-by slot
  --display-map --mca plm_rsh_agent "$here/rsh_agent.sh" --mca plm_rsh_no_tree_spawn 1
  --mca btl tcp,self --mca btl_tcp_if_include "$MH_NET" --mca oob_tcp_if_include "$MH_NET" -x OMP_NUM_THREADS -x RCJIT_DIST_TIMEOUT)
train=(train --model gpt2 --layers 2 --batch 4 --seq 16 --optimizer adamw)

# the map has two nodes of two ranks each, one of them host B (host A, where mpirun runs, is
# named by its hostname)
check_map() {
  if [ "$(grep -Ec "Data for node: .*Num procs: 2" "$1")" -ne 2 ] ||
    ! grep -Eq "Data for node: $MH_IP_B[[:space:]].*Num procs: 2" "$1"; then
    echo "FAIL: mpirun's map is not 2 ranks on host A and 2 on host B ($MH_IP_B)"
    return 1
  fi
}

if [ "$what" = train ]; then
  dist=$1 modes=$2
  export RCJIT_DIST_TIMEOUT=300
  "$rcjit" "${train[@]}" --steps 3 --modes "$modes" --json "$work/one.json" >"$work/one.out" 2>&1 ||
    { cat "$work/one.out"; echo "FAIL: the one-process run failed"; exit 1; }
  timeout 900 "${launch[@]}" "$rcjit" "${train[@]}" --steps 3 --modes "$modes" --dist "$dist" \
    --json "$work/dist.json" >"$work/dist.out" 2>&1
  code=$?
  cat "$work/dist.out"
  [ $code -ne 0 ] && { echo "FAIL: mpirun across the hosts exited $code"; exit 1; }
  check_map "$work/dist.out" || exit 1
  grep -q "$dist on 4 ranks" "$work/dist.out" || { echo "FAIL: not 4 ranks under $dist"; exit 1; }
  "$compare" "$work/dist.json" "$work/one.json" 1e-5 || { echo "FAIL: the losses differ"; exit 1; }
  echo "PASS: $dist on 2 hosts x 2 ranks equals one process"
  exit 0
fi

if [ "$what" = run ]; then
  export RCJIT_DIST_TIMEOUT=${RCJIT_DIST_TIMEOUT:-600}
  "${launch[@]}" "$rcjit" "$@"
  exit $?
fi

if [ "$what" = cut ]; then
  limit=$1
  export RCJIT_DIST_TIMEOUT=$limit
  # each rank records its pid and its own error output (the files are shared: one machine)
  cat >"$work/rank.sh" <<EOS
#!/bin/sh
echo \$\$ >"$work/pid.\$OMPI_COMM_WORLD_RANK"
exec "$rcjit" ${train[*]} --steps 200 --modes eager --dist ddp 2>"$work/err.\$OMPI_COMM_WORLD_RANK"
EOS
  chmod +x "$work/rank.sh"
  "${launch[@]}" "$work/rank.sh" >"$work/mpirun.out" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 600); do # the ranks train: rank 0 reports its second step
    grep -q "step 2/200" "$work/err.0" 2>/dev/null && break
    kill -0 "$mpirun_pid" 2>/dev/null || break
    sleep 0.5
  done
  if ! grep -q "step 2/200" "$work/err.0" 2>/dev/null; then
    cat "$work/mpirun.out" "$work"/err.* 2>/dev/null
    echo "FAIL: the job did not start training"
    exit 1
  fi
  check_map "$work/mpirun.out" || exit 1
  ip -n "$MH_NS_B" link set "$MH_IF_B" down
  cut_at=$(date +%s)
  echo "host B's link ($MH_IF_B) cut at $(grep -o 'step [0-9]*/200' "$work/err.0" | tail -1)"
  # every rank process ends (hang guard: the timeout plus a minute)
  deadline=$((cut_at + limit + 60))
  alive=4
  while [ "$(date +%s)" -le $deadline ]; do
    alive=0
    for r in 0 1 2 3; do kill -0 "$(cat "$work/pid.$r")" 2>/dev/null && alive=$((alive + 1)); done
    [ $alive -eq 0 ] && break
    sleep 0.5
  done
  ended=$(($(date +%s) - cut_at))
  for r in 0 1 2 3; do echo "--- rank $r:"; grep -v "^train: gpt2" "$work/err.$r"; done
  if [ $alive -ne 0 ]; then
    echo "FAIL: $alive ranks still running $ended s after the cut"
    exit 1
  fi
  echo "every rank ended within $ended s of the cut (RCJIT_DIST_TIMEOUT=$limit)"
  error="rcjit train: error: .*made no progress for $limit s"
  for r in 2 3; do # host B: nothing reaches it, so each rank must end itself
    grep -Eq "$error" "$work/err.$r" || { echo "FAIL: rank $r (host B) ended without the Error"; exit 1; }
  done
  errorsA=$(grep -El "$error" "$work/err.0" "$work/err.1" | wc -l)
  [ "$errorsA" -ge 1 ] || { echo "FAIL: no rank of host A ended with the Error"; exit 1; }
  # mpirun itself learns of host B's end once the link is back (its TCP would otherwise wait
  # for the kernel's retransmission timeout)
  ip -n "$MH_NS_B" link set "$MH_IF_B" up
  for _ in $(seq 120); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$mpirun_pid" 2>/dev/null; then
    echo "note: mpirun still waiting for host B's daemon a minute after the link came back; ended"
  else
    wait "$mpirun_pid"
    code=$?
    mpirun_pid=""
    [ $code -eq 0 ] && { echo "FAIL: mpirun exited 0 after the cut"; exit 1; }
    echo "mpirun exited $code"
  fi
  echo "PASS: a cut link ended every rank: host B's 2 ranks and $errorsA of host A's with the Error (any other by the job's abort)"
  exit 0
fi
echo "run_multihost.sh: unknown test '$what'"
exit 2
