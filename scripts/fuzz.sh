#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan+UBSan) into build-fuzz/ and runs each for a while.
#
#   bash scripts/fuzz.sh [SECONDS] [HARNESS...]
#
# SECONDS per harness (default 60; CI's smoke run uses 30, the documented long run 600).
# HARNESS is graph_parser, safetensors, artifacts, cache_entry or onnx_model (default: all). Each
# runs on a working copy of its committed seed corpus (fuzz/corpus/<harness>, grown in
# build-fuzz/corpus/<harness>) with its dictionary (fuzz/dict/<harness>.dict); a crash, an
# uncaught exception, a sanitizer report, a timeout or running out of memory stops it and
# fails the script, leaving the input under build-fuzz/findings/<harness>/.
# Reproduce one: build-fuzz/fuzz/<harness>_fuzzer build-fuzz/findings/<harness>/crash-...
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
secs="${1:-60}"
shift || true
harnesses=("$@")
((${#harnesses[@]})) || harnesses=(graph_parser safetensors artifacts cache_entry onnx_model)
cxx="${RCJIT_FUZZ_CXX:-clang++-19}"
if ! command -v "$cxx" >/dev/null; then
  echo "fuzz: $cxx not found (bash scripts/deps.sh fuzz installs clang-19 and libFuzzer)" >&2
  exit 1
fi
dir="$root/build-fuzz"
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_UNITY_BUILD=ON \
  -DRCJIT_FUZZ=ON -DRCJIT_SANITIZE=address,undefined -DRCJIT_BUILD_TESTS=OFF \
  -DRCJIT_BUILD_BENCH=OFF -DRCJIT_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$dir" -j "${JOBS:-$(nproc)}" --target "${harnesses[@]/%/_fuzzer}"

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$root/scripts/sanitizers/lsan.supp:print_suppressions=0"
for h in "${harnesses[@]}"; do
  corpus="$dir/corpus/$h" findings="$dir/findings/$h"
  mkdir -p "$corpus" "$findings"
  cp -n "$root/fuzz/corpus/$h"/* "$corpus"/
  echo "fuzz: $h for ${secs}s" >&2
  "$dir/fuzz/${h}_fuzzer" "$corpus" -dict="$root/fuzz/dict/$h.dict" \
    -max_total_time="$secs" -timeout=30 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
    -artifact_prefix="$findings/" -print_final_stats=1 2>"$dir/$h.log" || {
    tail -60 "$dir/$h.log" >&2
    echo "fuzz: $h found a problem: $(ls "$findings")" >&2
    exit 1
  }
  grep -E "stat::number_of_executed_units|stat::peak_rss_mb" "$dir/$h.log" | sed "s/^/fuzz: $h: /" >&2
done
