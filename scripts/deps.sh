#!/usr/bin/env bash
# Installs rcjit's build dependencies from Debian's packages when any is missing.
# `deps.sh fuzz` also installs clang 19, its libFuzzer runtime and OpenMP library (scripts/fuzz.sh);
# `deps.sh bundle` what the GPU bundle and its rehearsal use; `deps.sh docs` Doxygen (the API
# reference: `cmake --build build --target docs`).
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config ccache llvm-19-dev libdnnl-dev
  libboost-program-options-dev googletest libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libxxhash-dev libzstd-dev libssl-dev libopenmpi-dev openmpi-bin
  libonnx-testdata redis-server libhiredis-dev
  iproute2) # iproute2: the multihost tests' network namespaces (ip netns)
if [[ ${1:-} == fuzz ]]; then
  packages+=(clang-19 libclang-rt-19-dev libomp-19-dev)
fi
# `deps.sh bundle`: the GPU bundle (scripts/gpu_bundle.sh) and its rehearsal (gpu_rehearsal.sh)
if [[ ${1:-} == bundle ]]; then
  packages+=(patchelf xz-utils binutils debootstrap)
fi
# `deps.sh docs`: Doxygen for the `docs` target (docs/Doxyfile.in)
if [[ ${1:-} == docs ]]; then
  packages+=(doxygen)
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""
  [[ $(id -u) -ne 0 ]] && sudo="sudo"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q "${missing[@]}"
fi
