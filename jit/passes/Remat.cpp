// remat: see Remat.h. One round: find each candidate's uses (through view chains), split
// them at the widest gap, check that its operands outlive the late uses, then rebuild the
// graph with a clone before the first late use.
#include "jit/passes/Remat.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "jit/passes/GraphBuilder.h"
#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

constexpr int kRematDepth = 4; // operands recomputed along with a value, at most this deep

bool rematCheap(OpKind op) {
  switch (opInfo(op).category) {
  case OpCategory::Unary:
  case OpCategory::Binary:
  case OpCategory::Compare:
  case OpCategory::Where:
  case OpCategory::Copy:
    return true;
  default:
    return false;
  }
}

bool rematIsView(OpKind op) { return opInfo(op).category == OpCategory::View; }

// A use of a candidate: node `user` reads `via` (the candidate, or a view chain over it).
struct RematUse {
  int user;
  int via;
};

class RematRound {
public:
  RematRound(const Graph &g, const RematOptions &o) : g_(g), o_(o) {
    const size_t n = g.nodes.size();
    users_.resize(n);
    lastUse_.assign(n, -1);
    output_.assign(n, false);
    for (int out : g.outputs) output_[static_cast<size_t>(out)] = true;
    for (size_t i = 0; i < n; ++i) {
      for (int in : g.nodes[i].inputs) {
        auto &u = users_[static_cast<size_t>(in)];
        if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
        lastUse_[static_cast<size_t>(in)] = static_cast<int>(i);
      }
    }
  }

  Graph run(bool &changed) {
    std::map<int, std::vector<int>> lateReads; // late user -> the values it reads anew
    for (size_t f = 0; f < g_.nodes.size(); ++f) plan(static_cast<int>(f), lateReads);
    changed = !lateReads.empty();
    if (!changed) return g_;
    GraphBuilder b(g_);
    std::map<int, int> fresh; // old value -> its clone (made before the first late user)
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const int old = static_cast<int>(i);
      b.begin(old);
      auto it = lateReads.find(old);
      if (it == lateReads.end()) {
        b.copy(old);
        continue;
      }
      Node n = b.remapped(old);
      for (int via : it->second) {
        const int from = b.at(via), to = clone(b, via, fresh);
        for (int &in : n.inputs) {
          if (in == from) in = to;
        }
      }
      b.map(old, b.append(std::move(n)));
    }
    return b.finish();
  }

private:
  // The clone of `v` (a value to recompute), its operands that are recomputed too cloned
  // first; made once, before the first late use that needs it.
  int clone(GraphBuilder &b, int v, std::map<int, int> &fresh) {
    if (auto f = fresh.find(v); f != fresh.end()) return f->second;
    Node c = b.remapped(v);
    const std::vector<int> &ins = g_.nodes[static_cast<size_t>(v)].inputs;
    for (size_t k = 0; k < ins.size(); ++k) {
      if (recompute_.count(ins[k])) c.inputs[k] = clone(b, ins[k], fresh);
    }
    const int id = b.append(std::move(c));
    fresh[v] = id;
    return id;
  }

  // Whether `v` is available at `until` without holding a large value longer than now:
  // it is alive then anyway, or small, or cheap to recompute from such values (then it is
  // added to `chain`).
  bool available(int v, int until, int depth, std::vector<int> &chain) {
    const Node &n = g_.nodes[static_cast<size_t>(v)];
    if (n.op == OpKind::input || n.op == OpKind::full || output_[static_cast<size_t>(v)])
      return true;
    if (lastUse_[static_cast<size_t>(v)] >= until) return true;
    if (tracedBytes(n) * 16 <= o_.minBytes) return true; // a small value may live longer
    if (depth == 0 || !(rematCheap(n.op) || rematIsView(n.op))) return false;
    for (int in : n.inputs) {
      if (!available(in, until, depth - 1, chain)) return false;
    }
    chain.push_back(v);
    return true;
  }

  // The uses of `v`, looking through views; false when a view of it is a graph output.
  bool usesOf(int v, std::vector<RematUse> &out) {
    for (int u : users_[static_cast<size_t>(v)]) {
      if (rematIsView(g_.nodes[static_cast<size_t>(u)].op)) {
        if (output_[static_cast<size_t>(u)]) return false;
        viewsOnPath_.push_back(u);
        if (!usesOf(u, out)) return false;
      } else {
        out.push_back({u, v});
      }
    }
    return true;
  }

  void plan(int f, std::map<int, std::vector<int>> &lateReads) {
    const Node &n = g_.nodes[static_cast<size_t>(f)];
    if (n.op == OpKind::input || !rematCheap(n.op) || output_[static_cast<size_t>(f)]) return;
    if (tracedBytes(n) < o_.minBytes) return;
    std::vector<RematUse> uses;
    viewsOnPath_.clear();
    if (!usesOf(f, uses) || uses.empty()) return;
    std::sort(uses.begin(), uses.end(),
              [](const RematUse &a, const RematUse &b) { return a.user < b.user; });
    // the widest gap: between the value (or an early use) and the next use
    int split = 0, widest = uses[0].user - f;
    for (size_t k = 1; k < uses.size(); ++k) {
      if (uses[k].user - uses[k - 1].user > widest) {
        widest = uses[k].user - uses[k - 1].user;
        split = static_cast<int>(k);
      }
    }
    if (widest < o_.minGap) return;
    const int lastLate = uses.back().user;
    std::vector<int> chain; // operands to recompute too
    for (int in : n.inputs) {
      if (!available(in, lastLate, kRematDepth, chain)) return;
    }
    recompute_.insert(f);
    recompute_.insert(chain.begin(), chain.end());
    recompute_.insert(viewsOnPath_.begin(), viewsOnPath_.end());
    for (size_t k = static_cast<size_t>(split); k < uses.size(); ++k) {
      std::vector<int> &reads = lateReads[uses[k].user];
      if (std::find(reads.begin(), reads.end(), uses[k].via) == reads.end())
        reads.push_back(uses[k].via);
    }
  }

  const Graph &g_;
  const RematOptions &o_;
  std::vector<std::vector<int>> users_;
  std::vector<int> lastUse_;
  std::vector<bool> output_;
  std::vector<int> viewsOnPath_; // the views between the candidate being planned and its uses
  std::set<int> recompute_;      // values cloned where a late use needs them
};

} // namespace

Graph remat(const Graph &g, const RematOptions &o) {
  Graph cur = g;
  for (int r = 0; r < o.rounds; ++r) {
    bool changed = false;
    Graph next = RematRound(cur, o).run(changed);
    if (!changed) break;
    cur = std::move(next);
  }
  return cur;
}

} // namespace rcjit
