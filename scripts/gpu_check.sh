#!/usr/bin/env bash
# The GPU check: one run that proves the CUDA target on a lent GPU machine, or shows what fails.
#
#   gpu_check.sh [BUNDLE] [OUT_DIR]
#
# BUNDLE: rcjit-gpu.tar.xz (scripts/gpu_bundle.sh), or an unpacked rcjit-gpu/ folder; default:
# the bundle this script sits in (rcjit-gpu/bin/gpu_check.sh), else build-gpu/out/rcjit-gpu.tar.xz
# beside it in the repository. OUT_DIR: where logs and JSON go (at most 7 files); default $OUT
# when set (the device tool's output folder), else ./gpu-check-out.
#
# Each step runs under its own timeout, and the whole run ends within RCJIT_GPU_CHECK_BUDGET_S
# (default 480 s). Without a usable GPU every GPU step is reported as skipped with the reason.
# RCJIT_GPU_CHECK_STEPS, an extended regex, runs only the steps whose names match (a rerun of
# what failed, e.g. 'GPU tests|bench toy64'); RCJIT_GPU_CHECK_TESTS narrows the GPU tests'
# gtest filter (default 'Gpu*').
# Counted: each test of the test binary, and each benchmark or training run. The last line is
#   gpu check: N passed, M failed, K skipped
# and the exit status is 1 when anything failed. Needs bash, coreutils, tar and xz; nothing
# from the machine but glibc, libstdc++ and libgcc_s (the bundle carries the rest) and, for the
# GPU steps, the NVIDIA driver and cuBLAS.
set -uo pipefail
export PATH="${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}"
budget="${RCJIT_GPU_CHECK_BUDGET_S:-480}"
start=$SECONDS
here="$(cd "$(dirname "$0")" && pwd)"

bundle="${1:-}"
if [[ -z $bundle ]]; then
  if [[ -x $here/rcjit && -d $here/../lib ]]; then
    bundle="$here/.."
  else
    bundle="$here/../build-gpu/out/rcjit-gpu.tar.xz"
  fi
fi
out="${2:-${OUT:-$PWD/gpu-check-out}}"
mkdir -p "$out" || exit 1
out="$(cd "$out" && pwd)"
log="$out/check.log"
: >"$log"
passed=0 failed=0 skipped=0
only="${RCJIT_GPU_CHECK_STEPS:-}"

say() { echo "$*" | tee -a "$log"; }
selected() { # NAME: whether RCJIT_GPU_CHECK_STEPS selects the step
  [[ -z $only || $1 =~ $only ]] && return 0
  say "-- $1: not selected (RCJIT_GPU_CHECK_STEPS=$only)"
  return 1
}
left() { echo $((budget - (SECONDS - start))); }
# run_step NAME TIMEOUT CMD...: CMD under min(TIMEOUT, what is left of the budget less 15 s for
# the steps after it), its output appended to the log. Returns CMD's status, 124 on a timeout.
run_step() {
  local name="$1" limit="$2" t0=$SECONDS rc
  shift 2
  local avail=$(($(left) - 15))
  ((limit > avail)) && limit=$avail
  if ((limit < 5)); then
    say "-- $name: not run: the check's budget of ${budget} s is spent"
    return 125
  fi
  say "-- $name (timeout ${limit} s): $*"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1
  rc=$?
  ((rc == 124 || rc == 137)) && say "   timed out after ${limit} s" && rc=124
  say "   exit $rc, $((SECONDS - t0)) s"
  return $rc
}
count() { # RC NAME: a benchmark or training step's outcome
  if (($1 == 0)); then
    passed=$((passed + 1))
  elif (($1 == 125)); then
    skipped=$((skipped + 1))
  else
    failed=$((failed + 1))
    say "   FAILED: $2"
  fi
}
# gtest STEP_NAME JSON FILTER TIMEOUT: one test binary run, each test counted
gtest() {
  local name="$1" json="$2" filter="$3" limit="$4" rc p f s
  selected "$name" || return 0
  run_step "$name" "$limit" "$dir/bin/rcjit_tests" --gtest_filter="$filter" \
    --gtest_output="json:$json" --gtest_brief=0
  rc=$?
  if [[ -f $json ]]; then
    p=$(grep -c '"result": "COMPLETED"' "$json")
    s=$(grep -c '"result": "SKIPPED"' "$json")
    f=$(grep -c '"failures": \[' "$json")
    p=$((p - f))
    ((p < 0)) && p=0
    passed=$((passed + p)) skipped=$((skipped + s)) failed=$((failed + f))
    say "   $name: $p passed, $f failed, $s skipped"
    awk '/^ *"name": "/ { n = $0; sub(/^ *"name": "/, "", n); sub(/",?$/, "", n) }
      /^ *"classname": "/ { c = $0; sub(/^ *"classname": "/, "", c); sub(/",?$/, "", c) }
      /"failures": \[/ { print "   FAILED: " c "." n }' "$json" | tee -a "$log"
    ((rc != 0 && f == 0)) && failed=$((failed + 1)) && say "   FAILED: $name ended with $rc"
  else
    failed=$((failed + 1))
    say "   FAILED: $name wrote no results (exit $rc)"
  fi
}

say "gpu check: $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${budget} s, output in $out"
work="$(mktemp -d)" # the unpacked bundle and the compile cache: removed at exit
trap 'rm -rf "$work"' EXIT
# 1. The bundle, unpacked unless it is a folder already.
if [[ -d $bundle ]]; then
  dir="$(cd "$bundle" && pwd)"
else
  if ! run_step "unpack $bundle" 60 tar -C "$work" -xf "$bundle"; then
    say "gpu check: 0 passed, 1 failed, 0 skipped"
    exit 1
  fi
  dir="$work/rcjit-gpu"
fi
[[ -f $dir/share/MANIFEST ]] && head -2 "$dir/share/MANIFEST" | tee -a "$log"
export RCJIT_CACHE_DIR="${RCJIT_CACHE_DIR:-$work/cache}" # cold compiles, nothing left behind
export HOME="${HOME:-$RCJIT_CACHE_DIR}"

# 2. The machine: the driver, cuBLAS, libdevice and ptxas where the image keeps them.
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu/nvidia; do
  [[ -e $d/libcuda.so.1 ]] && export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
if [[ -z ${RCJIT_CUBLAS:-} ]]; then
  for f in /usr/local/cuda/lib64/libcublas.so.* /usr/local/cuda/targets/x86_64-linux/lib/libcublas.so.* \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu*/lib/libcublas.so.* \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cublas/lib/libcublas.so.* \
    /usr/lib/python3*/*-packages/nvidia/cublas/lib/libcublas.so.*; do
    if [[ -f $f ]]; then
      export RCJIT_CUBLAS="$f" LD_LIBRARY_PATH="$(dirname "$f")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      break
    fi
  done
fi
if [[ -z ${RCJIT_PTXAS:-} ]]; then
  p="$(command -v ptxas || true)"
  [[ -z $p && -x /usr/local/cuda/bin/ptxas ]] && p=/usr/local/cuda/bin/ptxas
  [[ -n $p ]] && export RCJIT_PTXAS="$p"
fi
if command -v nvidia-smi >/dev/null; then
  run_step "nvidia-smi" 20 nvidia-smi
else
  say "-- nvidia-smi: not on the PATH"
fi
devices="$(timeout 30 "$dir/bin/rcjit" devices 2>&1)"
echo "$devices" | tee -a "$log" "$out/devices.txt"
if grep -q '^libdevice: not found' <<<"$devices" && [[ -f $dir/share/libdevice.10.bc ]]; then
  export RCJIT_LIBDEVICE="$dir/share/libdevice.10.bc"
  say "libdevice: using the bundle's $RCJIT_LIBDEVICE"
fi
gpu_reason=""
if ! grep -q '^cuda: available' <<<"$devices"; then
  gpu_reason="$(sed -n 's/^cuda: unavailable: //p' <<<"$devices")"
  gpu_reason="no usable GPU: ${gpu_reason:-rcjit devices failed}"
fi
say "RCJIT_CUBLAS=${RCJIT_CUBLAS:-} RCJIT_PTXAS=${RCJIT_PTXAS:-} LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

# 3. The tests: the CUDA tests that need no GPU, then every gpu-labelled suite (they skip
# themselves, each with the reason, where no GPU can be used).
gtest "no-GPU CUDA tests" "$out/tests_cuda.json" \
  'CudaPtx*:CudaDriver*:CudaLowering*:CudaRuntime*:Cublas*' 90
# One process per suite, so that a crash (a bad kernel can take the process down) costs one
# suite's results, not all of them; the suites' JSON reports go into one array.
gpu_filter="${RCJIT_GPU_CHECK_TESTS:-Gpu*}"
parts="$work/gpu-tests"
mkdir -p "$parts"
# "Suite<TAB>Suite.a:Suite.b" per suite, from the tests the filter selects
timeout 30 "$dir/bin/rcjit_tests" --gtest_list_tests --gtest_filter="$gpu_filter" |
  awk '/^[^ ].*\.$/ { if (s != "") print s "\t" f; s = $1; sub(/\.$/, "", s); f = "" }
       /^  [^ ]/ { f = f (f == "" ? "" : ":") s "." $1 }
       END { if (s != "") print s "\t" f }' >"$parts/suites"
while IFS=$'\t' read -r suite filter; do
  limit=60
  [[ $suite == GpuCompile || $suite == GpuTraining ]] && limit=120
  gtest "GPU tests: $suite" "$parts/$suite.json" "$filter" $limit
done <"$parts/suites"
{
  echo "["
  first=1
  for f in "$parts"/*.json; do
    [[ -f $f ]] || continue
    ((first)) || echo ","
    first=0
    cat "$f"
  done
  echo "]"
} >"$out/tests_gpu.json"

# 4. Benchmarks and training runs: each a JSON record in bench.json / train.json.
echo "[" >"$out/bench.json"
echo "[" >"$out/train.json"
# tool_run FILE TIMEOUT NAME ARGS...: `rcjit ARGS --json tmp`, the result kept in FILE
tool_run() {
  local file="$1" limit="$2" name="$3" rc tmp
  shift 3
  selected "$name" || return 0
  if [[ -n $gpu_reason ]]; then
    say "-- $name: skipped: $gpu_reason"
    skipped=$((skipped + 1))
    return
  fi
  tmp="$work/run.json"
  run_step "$name" "$limit" "$dir/bin/rcjit" "$@" --json "$tmp"
  rc=$?
  count $rc "$name"
  if [[ -s $tmp ]]; then
    [[ $(grep -c . "$file") -gt 1 ]] && echo "," >>"$file"
    printf '{"run": "%s", "exit": %d, "result":\n' "rcjit $*" "$rc" >>"$file"
    cat "$tmp" >>"$file"
    echo "}" >>"$file"
  fi
  rm -f "$tmp"
}
if ! selected cuda_bench; then
  :
elif [[ -n $gpu_reason ]]; then
  say "-- cuda_bench: skipped: $gpu_reason"
  skipped=$((skipped + 1))
else
  run_step "cuda_bench" 90 "$dir/bin/cuda_bench" --benchmark_min_time=0.2 \
    --benchmark_counters_tabular=true --benchmark_out="$out/cuda_bench.json" \
    --benchmark_out_format=json
  count $? cuda_bench
fi
b=(bench --target cuda --batch 1,4 --seq 128)
tool_run "$out/bench.json" 60 "bench toy64" "${b[@]}" --model toy64 --modes eager,full,regional --reps 20
tool_run "$out/bench.json" 60 "bench gpt2 2 layers" "${b[@]}" --model gpt2 --layers 2
tool_run "$out/bench.json" 90 "bench gpt2" "${b[@]}" --model gpt2 --reps 5
tool_run "$out/bench.json" 60 "bench llama-3.2-1b 2 layers" "${b[@]}" --model llama-3.2-1b --layers 2 --reps 5
tool_run "$out/bench.json" 90 "bench llama-3.2-1b" "${b[@]}" --model llama-3.2-1b --reps 3
tool_run "$out/bench.json" 90 "bench llama-3.2-1b bf16" "${b[@]}" --model llama-3.2-1b --dtype bf16 --reps 3
t=(train --target cuda --model gpt2 --modes eager,full,regional,whole --steps 6)
tool_run "$out/train.json" 90 "train gpt2 f32" "${t[@]}"
tool_run "$out/train.json" 90 "train gpt2 bf16 autocast" "${t[@]}" --dtype bf16
echo "]" >>"$out/bench.json"
echo "]" >>"$out/train.json"

# 5. PyTorch's figures on the same GPU, where the image has PyTorch with CUDA: the
# side-by-side rows of docs/gpu.md, by peer_bench.py (in the bundle) into the log. A
# reference, not a check: not counted, and left out when the budget is spent.
peer="$dir/bin/peer_bench.py"
[[ -f $peer ]] || peer="$here/peer_bench.py"
torch_reason=""
if [[ -n $gpu_reason ]]; then
  torch_reason="$gpu_reason"
elif [[ ! -f $peer ]]; then
  torch_reason="peer_bench.py is not in the bundle"
elif ! timeout 60 python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
  torch_reason="no PyTorch with CUDA for python3 here"
fi
peer_run() { # NAME TIMEOUT ARGS...: peer_bench.py --device cuda ARGS
  local name="$1" limit="$2"
  shift 2
  selected "$name" || return 0
  if [[ -n $torch_reason ]]; then
    say "-- $name: skipped: $torch_reason"
    return
  fi
  run_step "$name" "$limit" python3 "$peer" --device cuda "$@"
  say "   (a reference: not counted)"
}
peer_run "torch gpt2" 150 --model gpt2 --modes eager,full --batch 1,4 --reps 10
peer_run "torch train gpt2" 240 --train --model gpt2 --modes eager,whole --batch 4 \
  --reps 5 --rounds 1

# The log is the one file that can grow: keep its last 15 MiB.
if (($(stat -c %s "$log") > 15 << 20)); then
  tail -c $((15 << 20)) "$log" >"$log.tmp" && mv "$log.tmp" "$log"
fi
say "gpu check: took $((SECONDS - start)) s"
say "gpu check: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
