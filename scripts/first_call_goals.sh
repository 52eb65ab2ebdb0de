#!/usr/bin/env bash
# Issue 32's first-call goals for the zoo, checked from outside through `rcjit bench --json`
# (API.md's tool): per model one process runs eager, full and regional mode (tiered, the
# default) at 1x128 on a cold compile cache of its own, and the first calls are compared:
#   gpt2 (12 layers):          full and regional at most 1.2x eager's first call
#   llama-3.2-1b (16 layers):  full and regional at most eager's first call
#   every model:               regional at most full
# toy64's goals (and the lazy backward's) are checked by build/examples/example_first_call.
# Usage: scripts/first_call_goals.sh [BUILD_DIR] [MODEL ...]   (default: build, gpt2 llama-3.2-1b)
# Prints each model's first calls and ratios and "met"/"NOT met" per goal; exits 1 when a goal
# is missed. Times belong to the machine: run it by hand on a quiet one (llama-3.2-1b needs
# about 6 GB of memory and a minute or two); the test suite never runs it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(gpt2 llama-3.2-1b)
rcjit="$build/rcjit"
[ -x "$rcjit" ] || { echo "first_call_goals: no $rcjit (build first: scripts/build.sh)" >&2; exit 2; }
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
status=0
for model in "${models[@]}"; do
  case "$model" in
    gpt2) limit=1.2 ;;
    llama-3.2-1b) limit=1.0 ;;
    *) limit="" ;; # regional <= full only
  esac
  json="$work/$model.json"
  if ! RCJIT_CACHE_DIR="$work/cache-$model" "$rcjit" bench --model "$model" \
    --modes eager,full,regional --batch 1 --seq 128 --reps 3 --json "$json" \
    >"$work/$model.log" 2>&1; then
    cat "$work/$model.log" >&2
    echo "first_call_goals: rcjit bench failed for $model" >&2
    exit 2
  fi
  # the results' keys are sorted: first_call_ms comes before mode in each row
  read -r eager full regional < <(awk '
    /"first_call_ms"/ { gsub(/[ ,]/, "", $2); first = $2 }
    /"mode"/ { gsub(/[ ",]/, "", $2); ms[$2] = first }
    END { print ms["eager"], ms["full"], ms["regional"] }' FS=: "$json")
  awk -v m="$model" -v e="$eager" -v f="$full" -v r="$regional" -v lim="$limit" '
    function goal(ok, what) { printf "  %-52s %s\n", what, ok ? "met" : "NOT met"; if (!ok) bad = 1 }
    BEGIN {
      printf "%s 1x128 first call (ms, tiered): eager %.1f, full %.1f (%.2fx), regional %.1f (%.2fx)\n",
             m, e, f, f / e, r, r / e
      if (lim != "") {
        goal(f <= lim * e, sprintf("full first call at most %.1fx eager'"'"'s", lim))
        goal(r <= lim * e, sprintf("regional first call at most %.1fx eager'"'"'s", lim))
      }
      goal(r <= f, "regional first call at most full'"'"'s")
      exit bad
    }' || status=1
done
exit $status
