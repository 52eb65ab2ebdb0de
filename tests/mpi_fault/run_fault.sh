#!/usr/bin/env bash
# Runs rcjit_mpi_fault MODE under mpirun with NP ranks and checks that the job ends (no
# hang: `timeout` kills it after LIMIT seconds, which fails the test), with a non-zero exit
# status, and that its output matches every extended regex given.
# usage: run_fault.sh MPIEXEC BINARY NP MODE LIMIT REGEX...
set -u
mpiexec=$1 binary=$2 np=$3 mode=$4 limit=$5
shift 5
out=$(timeout "$limit" "$mpiexec" -np "$np" --oversubscribe "$binary" "$mode" 2>&1)
code=$?
printf '%s\n' "$out"
if [ "$code" -eq 124 ]; then # timeout's status (mpirun's own is 128 + a rank's signal)
  echo "FAIL: the job was still running after $limit s (a hang)"
  exit 1
fi
if [ "$code" -eq 0 ]; then
  echo "FAIL: the job exited 0; a failed rank must end it with an error"
  exit 1
fi
for re in "$@"; do
  if ! printf '%s\n' "$out" | grep -Eq -- "$re"; then
    echo "FAIL: no line of the output matches: $re"
    exit 1
  fi
done
echo "PASS: the job ended with status $code"
