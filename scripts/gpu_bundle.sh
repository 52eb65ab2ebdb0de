#!/usr/bin/env bash
# Builds what the GPU check needs and packs it, with every shared library it loads, into one
# self-contained archive for a GPU machine that has no LLVM, oneDNN, Boost or Open MPI.
#
#   scripts/gpu_bundle.sh [OUT_DIR]     (default: build-gpu/out)
#
# Writes OUT_DIR/rcjit-gpu.tar.xz, which unpacks into rcjit-gpu/:
#   bin/     rcjit, rcjit_tests, cuda_bench, gpu_check.sh, peer_bench.py (the ELF files with
#            RUNPATH $ORIGIN/../lib)
#   lib/     librcjit.so.0 (LLVM linked in statically: RCJIT_LLVM_STATIC) and every library
#            the binaries need except glibc's, libstdc++ and libgcc_s (RUNPATH $ORIGIN)
#   share/   libdevice.10.bc (for a machine whose CUDA toolkit is elsewhere), MANIFEST
# The build is a Release build of its own in build-gpu/ (the ordinary ./build is untouched).
# Fails when the archive is over RCJIT_BUNDLE_MAX_MIB (default 40) or when a bundled ELF
# needs a library that is neither in the bundle nor in the base set.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$root/build-gpu/out}"
max_mib="${RCJIT_BUNDLE_MAX_MIB:-40}"
build="$root/build-gpu"

"$root/scripts/deps.sh" bundle
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRCJIT_LLVM_STATIC=ON \
  -DRCJIT_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$build" -j "$(nproc)" --target rcjit-cli rcjit_tests cuda_bench

# The base set: what every glibc-based Linux with a C++ runtime has. Everything else travels.
source "$root/scripts/bundle_lib.sh"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
dir="$stage/rcjit-gpu"
mkdir -p "$dir/bin" "$dir/lib" "$dir/share"
cp "$build/rcjit" "$build/tests/rcjit_tests" "$build/bench/cuda_bench" "$dir/bin/"
cp "$root/scripts/gpu_check.sh" "$root/scripts/peer_bench.py" "$dir/bin/"
cp -L "$build/librcjit.so.0" "$dir/lib/"

# Every library the binaries reach, found by the loader here (ldd follows the whole tree).
for elf in "$dir/bin/rcjit" "$dir/bin/rcjit_tests" "$dir/bin/cuda_bench" "$dir/lib/librcjit.so.0"; do
  LD_LIBRARY_PATH="$build" ldd "$elf" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  is_base_lib "$name" && continue
  [[ $name == librcjit.so.0 ]] && continue
  cp -L "$path" "$dir/lib/$name"
done
chmod u+w "$dir"/lib/* "$dir"/bin/*
strip --strip-unneeded "$dir/bin/rcjit" "$dir/bin/rcjit_tests" "$dir/bin/cuda_bench" \
  "$dir"/lib/*.so*
for f in "$dir/bin/rcjit" "$dir/bin/rcjit_tests" "$dir/bin/cuda_bench"; do
  patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
for f in "$dir"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$f"; done

cuda_root="$(sed -n 's/^RCJIT_CUDA_ROOT:PATH=//p' "$build/CMakeCache.txt")"
libdevice="${cuda_root:-/usr/local/cuda}/nvvm/libdevice/libdevice.10.bc"
[[ -f $libdevice ]] && cp "$libdevice" "$dir/share/"

check_bundle_deps "$dir" # the same check the rehearsal makes, before anything is packed
{
  echo "rcjit GPU bundle, $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(uname -m)"
  (cd "$dir" && find . -type f -printf '%P %s\n' | sort)
} >"$dir/share/MANIFEST"

mkdir -p "$out"
archive="$out/rcjit-gpu.tar.xz"
tar -C "$stage" -cf - rcjit-gpu | xz -9e -T "$(nproc)" >"$archive.tmp"
mv "$archive.tmp" "$archive"
bytes=$(stat -c %s "$archive")
unpacked=$(du -sb "$dir" | cut -f1)
files=$(find "$dir" -type f | wc -l)
awk -v a="$archive" -v b="$bytes" -v u="$unpacked" -v n="$files" 'BEGIN {
  printf "gpu bundle: %s, %.1f MiB (%.1f MiB unpacked, %d files)\n", a, b / 1048576, u / 1048576, n
}'
if ((bytes > max_mib * 1048576)); then
  echo "gpu bundle: over the limit of $max_mib MiB" >&2
  exit 1
fi
