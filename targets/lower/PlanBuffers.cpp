// The plan-buffers step of lowering: graph outputs get per-call output buffers, the other
// intermediate buffers share one arena by liveness (greedy first fit over step positions).
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
  // Greedy first fit over step positions: a block is free after its last use.
  struct Block {
    int64_t offset, bytes;
    int freeAfter;
  };
  std::vector<Block> blocks;
  std::vector<int> byFirst;
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].kind == Buffer::Kind::arena && last[b] >= 0)
      byFirst.push_back(static_cast<int>(b));
  }
  std::sort(byFirst.begin(), byFirst.end(), [&](int a, int b) { return first[a] < first[b]; });
  int64_t top = 0;
  for (int b : byFirst) {
    int64_t bytes = (p.buffers[b].bytes + 63) / 64 * 64;
    bool placed = false;
    for (Block &blk : blocks) {
      if (blk.freeAfter < first[b] && blk.bytes >= bytes) {
        p.buffers[b].offset = blk.offset;
        blk.freeAfter = last[b];
        placed = true;
        break;
      }
    }
    if (!placed) {
      p.buffers[b].offset = top;
      blocks.push_back({top, bytes, last[b]});
      top += bytes;
    }
  }
  p.arenaBytes = top;
}

} // namespace rcjit
