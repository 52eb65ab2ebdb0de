// The plan-buffers step of lowering: graph outputs get per-call output buffers, the other
// intermediate buffers share one arena by liveness (greedy placement over step positions,
// the best of a few orders).
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

std::vector<std::vector<int>> moveLargeBuffersOut(Program &p, int64_t minBytes) {
  std::vector<std::vector<int>> at(p.steps.size());
  std::vector<bool> moved(p.buffers.size(), false);
  for (size_t s = 0; s < p.steps.size(); ++s) {
    std::vector<int> vs = p.steps[s].operands;
    if (p.steps[s].result >= 0) vs.push_back(p.steps[s].result);
    for (int v : vs) {
      const int b = p.values[static_cast<size_t>(v)].buffer;
      Buffer &buf = p.buffers[static_cast<size_t>(b)];
      if (moved[b] || buf.kind != Buffer::Kind::arena || buf.bytes < minBytes) continue;
      moved[b] = true;
      buf.kind = Buffer::Kind::dynamic;
      at[s].push_back(b);
    }
  }
  planArena(p);
  return at;
}

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
  // Greedy placement: buffers in a given order, each at the offset of the smallest gap
  // between placed buffers live at the same time that fits it (else above them). Which
  // order packs best depends on the program, so several are tried and the smallest arena
  // kept: largest first (small buffers fill the gaps large ones leave), longest-lived
  // first, largest size x lifetime first, and by first use (a linear scan).
  struct Placed {
    int64_t offset, bytes;
    int first, last;
  };
  std::vector<int> buffers;
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].kind == Buffer::Kind::arena && last[b] >= 0)
      buffers.push_back(static_cast<int>(b));
  }
  auto rounded = [&](int b) { return (p.buffers[b].bytes + 63) / 64 * 64; };
  auto span = [&](int b) { return static_cast<int64_t>(last[b] - first[b] + 1); };
  auto place = [&](const std::vector<int> &order, std::vector<int64_t> &offsets) {
    std::vector<Placed> placed;
    std::vector<const Placed *> live;
    int64_t top = 0;
    for (int b : order) {
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
      offsets[b] = best;
      placed.push_back({best, bytes, first[b], last[b]});
      top = std::max(top, best + bytes);
    }
    return top;
  };
  std::vector<std::vector<int>> orders(4, buffers);
  auto sortBy = [&](std::vector<int> &order, auto key) {
    // ties broken by id, which is the order `buffers` lists them in: a stable order
    // (std::stable_sort would do, but libstdc++ 12's trips clang 19's deprecation warning)
    std::sort(order.begin(), order.end(), [&](int a, int b) {
      auto ka = key(a), kb = key(b);
      if (ka != kb) return ka > kb;
      return first[a] != first[b] ? first[a] < first[b] : a < b;
    });
  };
  sortBy(orders[0], rounded);
  sortBy(orders[1], [&](int b) { return std::make_pair(span(b), rounded(b)); });
  sortBy(orders[2], [&](int b) { return rounded(b) * span(b); });
  sortBy(orders[3], [&](int b) { return std::make_pair(-first[b], rounded(b)); });
  int64_t top = INT64_MAX;
  std::vector<int64_t> offsets(nb, 0), bestOffsets;
  for (const std::vector<int> &order : orders) {
    const int64_t t = place(order, offsets);
    if (t < top) {
      top = t;
      bestOffsets = offsets;
    }
  }
  for (int b : buffers) p.buffers[b].offset = bestOffsets[b];
  if (buffers.empty()) top = 0;
  p.arenaBytes = top;
}

} // namespace rcjit
