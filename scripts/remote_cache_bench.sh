#!/usr/bin/env bash
# The remote compile cache's figure: a first call that compiles (cold: empty local cache,
# empty server) against one whose objects come from the server (remote: empty local cache,
# the server filled by the cold run), interleaved rounds in one run, min and median.
#
#   remote_cache_bench.sh [BUILD_DIR] [ROUNDS] [-- rcjit bench flags...]
#
# Starts its own redis-server on a free loopback port (--save '' --appendonly no) and stops it.
# Default flags: --model gpt2 --layers 2 --modes full --batch 1 --seq 32 --reps 3.
set -euo pipefail
build="${1:-build}"
rounds="${2:-5}"
shift $(($# > 2 ? 2 : $#))
[[ ${1:-} == -- ]] && shift
flags=("$@")
((${#flags[@]})) || flags=(--model gpt2 --layers 2 --modes full --batch 1 --seq 32 --reps 3)
rcjit="$build/rcjit"
work="$(mktemp -d)"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
  >"$work/redis.log" 2>&1 &
redis=$!
trap 'kill $redis 2>/dev/null; wait $redis 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export RCJIT_REMOTE_CACHE="redis://127.0.0.1:$port" RCJIT_CACHE_KEY_FILE="$work/cache.key"

# one run: prints "first_call_ms compile_ms remote_cache_hits" of its single row
one() {
  rm -rf "$work/local"
  "$rcjit" bench "${flags[@]}" --cache-dir="$work/local" --json="$work/row.json" >/dev/null 2>&1
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]
print(r["first_call_ms"], r["compile_ms"], r["remote_cache_hits"])' "$work/row.json"
}
: >"$work/cold" && : >"$work/remote"
for i in $(seq "$rounds"); do
  redis-cli -p "$port" flushall >/dev/null
  one >>"$work/cold"   # compiles everything, publishes
  one >>"$work/remote" # every object from the server
  echo "round $i: cold $(tail -1 "$work/cold"); remote $(tail -1 "$work/remote")" >&2
done
python3 - "$work/cold" "$work/remote" "$rounds" "${flags[*]}" <<'EOF'
import statistics, sys
rows = {n: [list(map(float, l.split())) for l in open(p)] for n, p in (("cold", sys.argv[1]), ("remote", sys.argv[2]))}
print(f"rcjit bench {sys.argv[4]}: {sys.argv[3]} interleaved rounds (first call ms / compile ms)")
for n, r in rows.items():
    f = [x[0] for x in r]; c = [x[1] for x in r]; h = int(r[0][2])
    print(f"  {n:6s} first call min {min(f):8.1f} median {statistics.median(f):8.1f}   "
          f"compile min {min(c):8.1f} median {statistics.median(c):8.1f}   remote hits {h}")
cold = statistics.median(x[0] for x in rows["cold"]); rem = statistics.median(x[0] for x in rows["remote"])
print(f"  remote/cold first call (medians): {rem / cold:.2f}")
EOF
