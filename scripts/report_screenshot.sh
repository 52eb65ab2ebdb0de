#!/usr/bin/env bash
# The pictures of `rcjit logs --html`: records the trace of examples/trace_report.cpp
# (a GPT-2-like decoder compiled full and regional, a recompile, a graph break, a failed
# compile) with a fresh compile cache, writes its report, and renders with a headless
# Chromium (Debian: apt-get install chromium) the page's top (OUT_DIR/report.png) and the
# section of the full-mode function's first entry alone (OUT_DIR/report_entry.png). Run
# after scripts/build.sh.
#
#   scripts/report_screenshot.sh [OUT_DIR]    (default docs/; BUILD=dir for another build)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${BUILD:-$root/build}"
out="${1:-$root/docs}"
browser="$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)"
if [ -z "$browser" ]; then
  echo "report_screenshot.sh: no headless browser; install one (apt-get install chromium)" >&2
  exit 1
fi
for f in "$build/examples/example_trace_report" "$build/rcjit"; do
  [ -x "$f" ] || { echo "report_screenshot.sh: $f is not built (scripts/build.sh)" >&2; exit 1; }
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
RCJIT_CACHE_DIR="$tmp/cache" RCJIT_TRACE_FILE="$tmp/trace.jsonl" \
  "$build/examples/example_trace_report" >/dev/null
"$build/rcjit" logs "$tmp/trace.jsonl" --html "$tmp/report.html" >/dev/null 2>&1
# the first entry's section on a page of its own (a browser's screenshot ignores #anchors)
python3 - "$tmp/report.html" "$tmp/entry.html" <<'PY'
import sys
page = open(sys.argv[1]).read()
at = page.index('id="fn-1-0-e0"')
start, end = page.rindex("<section", 0, at), page.index("</section>", at) + len("</section>")
open(sys.argv[2], "w").write(page[: page.index("<body>") + 6] + page[start:end] + "</body></html>")
PY
shot() { # shot PAGE PNG HEIGHT
  # --no-sandbox: Chromium refuses to sandbox itself as root (CI containers)
  "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --force-device-scale-factor=1 --window-size="1100,$3" --screenshot="$2" "file://$1" \
    2>/dev/null
}
mkdir -p "$out"
shot "$tmp/report.html" "$out/report.png" 1300
shot "$tmp/entry.html" "$out/report_entry.png" 1100
for f in "$out/report.png" "$out/report_entry.png"; do echo "wrote $f ($(stat -c %s "$f") bytes)"; done
