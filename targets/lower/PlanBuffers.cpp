// The plan-buffers step of lowering: graph outputs get per-call output buffers, the other
// intermediate buffers share one arena by liveness (greedy by size over step positions).
#include <algorithm>
#include <cstdint>

#include "targets/lower/Lowering.h"

namespace rcjit {

namespace lowering {

Program Lowering::planBuffers() {
  for (int o : g.outputs) {
    int v = value[o];
    Buffer &b = p.buffers[p.values[v].buffer];
    if (b.kind == Buffer::Kind::arena) b.kind = Buffer::Kind::output;
    p.outputs.push_back(v);
  }
  planArena(p);
  return std::move(p);
}

} // namespace lowering

void planArena(Program &p) {
  size_t nb = p.buffers.size();
  std::vector<int> first(nb, INT32_MAX), last(nb, -1);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    const Step &st = p.steps[s];
    std::vector<int> vs = st.operands;
    if (st.result >= 0) vs.push_back(st.result);
    for (int v : vs) {
      int b = p.values[v].buffer;
      first[b] = std::min(first[b], static_cast<int>(s));
      last[b] = std::max(last[b], static_cast<int>(s));
    }
  }
  // Greedy by size: the largest buffers are placed first, each at the lowest offset where
  // it overlaps no placed buffer that is live at the same time (in the smallest such gap),
  // so small buffers fill the gaps large ones leave instead of claiming whole blocks.
  struct Placed {
    int64_t offset, bytes;
    int first, last;
  };
  std::vector<int> bySize;
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].kind == Buffer::Kind::arena && last[b] >= 0)
      bySize.push_back(static_cast<int>(b));
  }
  auto rounded = [&](int b) { return (p.buffers[b].bytes + 63) / 64 * 64; };
  std::sort(bySize.begin(), bySize.end(), [&](int a, int b) {
    return rounded(a) != rounded(b) ? rounded(a) > rounded(b) : first[a] < first[b];
  });
  std::vector<Placed> placed;
  std::vector<const Placed *> live;
  int64_t top = 0;
  for (int b : bySize) {
    const int64_t bytes = rounded(b);
    live.clear();
    for (const Placed &q : placed) {
      if (!(q.last < first[b] || last[b] < q.first)) live.push_back(&q);
    }
    std::sort(live.begin(), live.end(),
              [](const Placed *x, const Placed *y) { return x->offset < y->offset; });
    int64_t at = 0, best = -1, bestGap = INT64_MAX;
    for (const Placed *q : live) {
      const int64_t gap = q->offset - at;
      if (gap >= bytes && gap < bestGap) {
        best = at;
        bestGap = gap;
      }
      at = std::max(at, q->offset + q->bytes);
    }
    if (best < 0) best = at;
    p.buffers[b].offset = best;
    placed.push_back({best, bytes, first[b], last[b]});
    top = std::max(top, best + bytes);
  }
  p.arenaBytes = top;
}

} // namespace rcjit
