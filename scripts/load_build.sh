#!/usr/bin/env bash
# The background load of the "On a busy machine" figures (docs/performance.md): this project
# compiled from scratch on every core at normal priority, again and again, until stopped (Ctrl-C,
# or kill the script and its ninja). Run it in one terminal and `rcjit bench` in another.
#
#   scripts/load_build.sh [DIR]   (DIR: the build tree to use, default /tmp/rcjit-loadbuild)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${1:-/tmp/rcjit-loadbuild}"
jobs="$(nproc)"
cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
echo "load_build: compiling $root in $dir with $jobs jobs, again and again (Ctrl-C stops)" >&2
while true; do
  CCACHE_DISABLE=1 ninja -C "$dir" -j"$jobs" >/dev/null
  ninja -C "$dir" -t clean >/dev/null
done
