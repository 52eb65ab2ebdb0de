#!/usr/bin/env bash
# A rehearsal, on this machine, of what a GPU machine does with the bundle: proves that the
# bundle needs nothing from the machine it was built on.
#
#   scripts/gpu_rehearsal.sh [--bare-root] [BUNDLE]
#
# BUNDLE: rcjit-gpu.tar.xz (default build-gpu/out/rcjit-gpu.tar.xz, made with
# scripts/gpu_bundle.sh when missing). Steps, each reported as it ends:
#   1. unpack; every ELF resolves every library inside the bundle or to the base set
#      (glibc's libraries, libstdc++, libgcc_s), by ldd with no LD_LIBRARY_PATH;
#   2. under `env -i`: `rcjit bench --model toy64 --layers 2` and the CUDA tests that need no
#      GPU (CudaPtx*, CudaDriver*, CudaLowering*, CudaRuntime*, Cublas*);
#   3. under `env -i`: gpu_check.sh from the unpacked bundle, which here, without a GPU, runs
#      every step, reports each GPU step as skipped with the reason and ends with its summary;
#   4. with --bare-root (as root): a minimal Debian (debootstrap --variant=minbase, kept in
#      build-gpu/bare-root) without LLVM, oneDNN, Boost or Open MPI, where the bundle's CPU
#      tests pass and gpu_check.sh runs again and its GPU tests say there is no GPU.
# Exit status 0 when every step held.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bare=0
if [[ ${1:-} == --bare-root ]]; then
  bare=1
  shift
fi
bundle="${1:-$root/build-gpu/out/rcjit-gpu.tar.xz}"
[[ -f $bundle ]] || "$root/scripts/gpu_bundle.sh" "$(dirname "$bundle")"
bundle="$(realpath "$bundle")"
source "$root/scripts/bundle_lib.sh"

work="$(mktemp -d)"
mounted=""
cleanup() {
  [[ -n $mounted ]] && umount "$mounted" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
failures=0
step() { # NAME CMD...: runs CMD, reports and counts its outcome
  local name="$1" t0=$SECONDS
  shift
  echo "rehearsal: $name ..."
  if "$@"; then
    echo "rehearsal: $name: ok ($((SECONDS - t0)) s)"
  else
    echo "rehearsal: $name: FAILED ($((SECONDS - t0)) s)"
    failures=$((failures + 1))
  fi
}

tar -C "$work" -xf "$bundle"
dir="$work/rcjit-gpu"
echo "rehearsal: $(head -1 "$dir/share/MANIFEST"), $(du -sh "$dir" | cut -f1) unpacked"
step "every library inside the bundle or in the base set" check_bundle_deps "$dir"

bare_env=(env -i PATH=/usr/bin:/bin HOME="$work/home" RCJIT_CACHE_DIR="$work/cache")
cuda_tests='CudaPtx*:CudaDriver*:CudaLowering*:CudaRuntime*:Cublas*'
step "env -i: rcjit bench --model toy64 --layers 2" \
  "${bare_env[@]}" "$dir/bin/rcjit" bench --model toy64 --layers 2 --reps 3
step "env -i: the CUDA tests that need no GPU" \
  "${bare_env[@]}" "$dir/bin/rcjit_tests" --gtest_filter="$cuda_tests" --gtest_brief=1

# gpu_check.sh without a GPU: every step runs or is skipped with the reason, the summary comes
# last, no failure, and it ends within its budget.
check_no_gpu() { # LOG: gpu_check.sh's output
  local last
  last="$(tail -1 "$1")"
  echo "  $last"
  grep -E '^-- .*: skipped: no usable GPU' "$1" | head -3 | sed 's/^/  /'
  [[ $last =~ ^gpu\ check:\ [0-9]+\ passed,\ 0\ failed,\ [0-9]+\ skipped$ ]] &&
    grep -q '^-- bench toy64: skipped: no usable GPU: ' "$1" &&
    grep -q '^-- train gpt2 f32: skipped: no usable GPU: ' "$1" &&
    grep -q '"result": "SKIPPED"' "$2"
}
run_check_here() {
  "${bare_env[@]}" bash "$dir/bin/gpu_check.sh" "$bundle" "$work/check" >"$work/check.out" 2>&1 ||
    true
  check_no_gpu "$work/check.out" "$work/check/tests_gpu.json"
}
step "env -i: gpu_check.sh without a GPU" run_check_here

if ((bare)); then
  broot="$root/build-gpu/bare-root"
  if [[ ! -x $broot/bin/bash ]]; then
    mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
    debootstrap --variant=minbase --include=xz-utils bookworm "$broot" \
      "${mirror:-http://deb.debian.org/debian}" >"$root/build-gpu/debootstrap.log" 2>&1
  fi
  for lib in libLLVM-19.so.1 libdnnl.so.2 libboost_program_options.so.1.74.0 libmpi.so.40; do
    if [[ -n $(find "$broot/usr/lib" -name "$lib" -print -quit) ]]; then
      echo "rehearsal: the bare root has $lib: not bare" >&2
      exit 1
    fi
  done
  rm -rf "$broot/tmp/rehearsal"
  mkdir -p "$broot/tmp/rehearsal"
  cp "$bundle" "$broot/tmp/rehearsal/"
  tar -C "$broot/tmp/rehearsal" -xf "$bundle"
  mount -t proc proc "$broot/proc"
  mounted="$broot/proc"
  in_root=(chroot "$broot" env -i PATH=/usr/bin:/bin HOME=/tmp/rehearsal/home
    RCJIT_CACHE_DIR=/tmp/rehearsal/cache
    RCJIT_LIBDEVICE=/tmp/rehearsal/rcjit-gpu/share/libdevice.10.bc)
  # The CPU tests that need nothing outside the test binary: not those that start the rcjit
  # tool by its build-machine path (Cli*, CacheCli*, two Profiler and one Logs test) or read
  # the source tree's fixtures (ReferenceGrads*, LogsCommand*).
  cpu_tests="-Gpu*:Cli*:CacheCli*:LogsCommand*:ReferenceGrads*"
  cpu_tests+=":Logs.TraceFileGetsOneJsonLinePerEvent:Profiler.EnvironmentVariableProfilesAProcess"
  cpu_tests+=":Profiler.RecordsCallsStepsCompilesAndEagerOpsAsAChromeTrace"
  step "bare root: the CPU tests" "${in_root[@]}" /tmp/rehearsal/rcjit-gpu/bin/rcjit_tests \
    --gtest_filter="$cpu_tests" --gtest_brief=1
  run_check_bare() {
    "${in_root[@]}" bash /tmp/rehearsal/rcjit-gpu/bin/gpu_check.sh \
      /tmp/rehearsal/rcjit-gpu.tar.xz /tmp/rehearsal/check >"$work/bare_check.out" 2>&1 || true
    check_no_gpu "$work/bare_check.out" "$broot/tmp/rehearsal/check/tests_gpu.json"
  }
  step "bare root: gpu_check.sh without a GPU" run_check_bare
fi
echo "rehearsal: $failures step(s) failed"
((failures == 0))
