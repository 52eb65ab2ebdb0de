// hashGraph: the canonical structural hash of a graph (Merkle over nodes, XXH3 128-bit).
//
// A node's hash covers its op, the attrs the op uses, dtype, shape and its inputs' hashes
// in order. Nothing in it depends on node ids, names or regions:
//  - a symbolic dim hashes as its symbol's range and the symbol's ordinal of first
//    appearance in the canonical order (below), never the raw symbol id or traced value;
//  - an arg input hashes as (arg, inputIndex): the function's parameter position matters;
//  - a captured input hashes as (captured, its ordinal in the canonical order): which
//    tensor is bound to it (inputIndex, name) does not, but which uses share it does.
// The canonical order is a post-order walk from the outputs in order, following inputs in
// order, then from the nodes no output reaches, in order of their ordinal-free hash
// (ties between such dead nodes fall back to node order). It depends only on structure.
// The graph's hash combines the sorted multiset of node hashes, the ordered output hashes
// and the ranges of symbols no node uses.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include <xxhash.h>

#include <rcjit/Error.h>

#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

using Hash = XXH128_hash_t;

bool hashLess(const Hash &a, const Hash &b) {
  return a.high64 != b.high64 ? a.high64 < b.high64 : a.low64 < b.low64;
}

// Bytes fed to one XXH3 call; every field is a fixed-width integer.
class Bytes {
public:
  void u64(uint64_t v) { buf_.append(reinterpret_cast<const char *>(&v), sizeof v); }
  void i64(int64_t v) { u64(static_cast<uint64_t>(v)); }
  void f64(double v) { u64(std::isnan(v) ? 0x7ff8000000000000ull : std::bit_cast<uint64_t>(v)); }
  void hash(const Hash &h) {
    u64(h.low64);
    u64(h.high64);
  }
  Hash digest() const { return XXH3_128bits(buf_.data(), buf_.size()); }

private:
  std::string buf_;
};

// Structure-derived identities of captured inputs and symbols; -1 where unassigned.
struct Canon {
  std::vector<int> captured; // per node
  std::vector<int> symbol;   // per symbol
};

void validate(const Graph &g) {
  auto bad = [](const std::string &what) { throw Error("hashGraph: " + what); };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in < 0 || static_cast<size_t>(in) >= i) {
        bad("node %" + std::to_string(i) + " uses %" + std::to_string(in) +
            ", which is not an earlier node");
      }
    }
    for (const Dim &d : g.nodes[i].shape) {
      if (d.isSymbolic() && static_cast<size_t>(d.sym) >= g.symbols.size()) {
        bad("node %" + std::to_string(i) + " uses undeclared symbol s" + std::to_string(d.sym));
      }
    }
  }
  for (int o : g.outputs) {
    if (o < 0 || static_cast<size_t>(o) >= g.nodes.size()) {
      bad("output %" + std::to_string(o) + " is not a node");
    }
  }
}

void hashAttrs(Bytes &b, OpKind op, const Attrs &a) {
  const uint32_t used = opInfo(op).attrs;
  if (used & kDims) {
    b.u64(a.dims.size());
    for (int64_t d : a.dims) b.i64(d);
  }
  if (used & kDim) b.i64(a.dim);
  if (used & kStart) b.i64(a.start);
  if (used & kEnd) b.i64(a.end);
  if (used & kStride) b.i64(a.stride);
  if (used & kPadding) b.i64(a.padding);
  if (used & kValue) b.f64(a.value);
  if (used & kEps) b.f64(a.eps);
  if (used & kKeepdim) b.u64(a.keepdim);
  if (used & kCausal) b.u64(a.causal);
  if (used & kReduce) b.i64(a.reduce);
  if (used & kRoot) b.i64(a.root);
  if (used & kWorld) b.i64(a.world);
}

void hashShape(Bytes &b, const Graph &g, const SymShape &shape, const Canon *canon) {
  b.u64(shape.size());
  for (const Dim &d : shape) {
    if (!d.isSymbolic()) {
      b.u64(0);
      b.i64(d.value);
      continue;
    }
    const Symbol &s = g.symbols[static_cast<size_t>(d.sym)];
    b.u64(1);
    b.i64(s.min);
    b.i64(s.max);
    b.i64(canon ? canon->symbol[static_cast<size_t>(d.sym)] : -1);
  }
}

void hashInputBinding(Bytes &b, const Node &n, int id, const Canon *canon) {
  b.u64(static_cast<uint64_t>(n.inputKind));
  if (n.inputKind == InputKind::arg) {
    b.i64(n.inputIndex);
  } else {
    b.i64(canon ? canon->captured[static_cast<size_t>(id)] : -1);
  }
}

// The Merkle hash of node `id`, given the hashes of all earlier nodes.
Hash nodeHash(const Graph &g, int id, const std::vector<Hash> &hashes, const Canon *canon) {
  const Node &n = g.nodes[static_cast<size_t>(id)];
  Bytes b;
  b.u64(static_cast<uint64_t>(n.op));
  b.u64(static_cast<uint64_t>(n.dtype));
  hashShape(b, g, n.shape, canon);
  hashAttrs(b, n.op, n.attrs);
  if (n.op == OpKind::input) hashInputBinding(b, n, id, canon);
  b.u64(n.inputs.size());
  for (int in : n.inputs) b.hash(hashes[static_cast<size_t>(in)]);
  return b.digest();
}

std::vector<Hash> allNodeHashes(const Graph &g, const Canon *canon) {
  std::vector<Hash> hashes(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    hashes[i] = nodeHash(g, static_cast<int>(i), hashes, canon);
  }
  return hashes;
}

// Walks the graph in the canonical order, numbering captured inputs and symbols.
class CanonWalk {
public:
  explicit CanonWalk(const Graph &g) : g_(g), visited_(g.nodes.size(), false) {
    canon_.captured.assign(g.nodes.size(), -1);
    canon_.symbol.assign(g.symbols.size(), -1);
  }

  Canon run(const std::vector<Hash> &plainHashes) {
    for (int o : g_.outputs) visit(o);
    std::vector<int> rest;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!visited_[i]) rest.push_back(static_cast<int>(i));
    }
    // ties keep node order (rest is ascending)
    std::sort(rest.begin(), rest.end(), [&](int a, int b) {
      const Hash &ha = plainHashes[static_cast<size_t>(a)],
                 &hb = plainHashes[static_cast<size_t>(b)];
      return hashLess(ha, hb) || (!hashLess(hb, ha) && a < b);
    });
    for (int r : rest) visit(r);
    return std::move(canon_);
  }

private:
  void visit(int root) {
    if (visited_[static_cast<size_t>(root)]) return;
    visited_[static_cast<size_t>(root)] = true;
    std::vector<std::pair<int, size_t>> stack{{root, 0}};
    while (!stack.empty()) {
      auto &[id, next] = stack.back();
      const std::vector<int> &ins = g_.nodes[static_cast<size_t>(id)].inputs;
      if (next < ins.size()) {
        const int in = ins[next++];
        if (!visited_[static_cast<size_t>(in)]) {
          visited_[static_cast<size_t>(in)] = true;
          stack.emplace_back(in, 0);
        }
        continue;
      }
      emit(id);
      stack.pop_back();
    }
  }

  void emit(int id) {
    const Node &n = g_.nodes[static_cast<size_t>(id)];
    if (n.op == OpKind::input && n.inputKind == InputKind::captured) {
      canon_.captured[static_cast<size_t>(id)] = nextCaptured_++;
    }
    for (const Dim &d : n.shape) {
      if (d.isSymbolic() && canon_.symbol[static_cast<size_t>(d.sym)] < 0) {
        canon_.symbol[static_cast<size_t>(d.sym)] = nextSymbol_++;
      }
    }
  }

  const Graph &g_;
  std::vector<bool> visited_;
  Canon canon_;
  int nextCaptured_ = 0;
  int nextSymbol_ = 0;
};

void hashUnusedSymbols(Bytes &b, const Graph &g, const Canon &canon) {
  std::vector<std::pair<int64_t, int64_t>> unused;
  for (size_t i = 0; i < g.symbols.size(); ++i) {
    if (canon.symbol[i] < 0) unused.emplace_back(g.symbols[i].min, g.symbols[i].max);
  }
  std::sort(unused.begin(), unused.end());
  b.u64(g.symbols.size());
  for (const auto &[lo, hi] : unused) {
    b.i64(lo);
    b.i64(hi);
  }
}

Canon canonOf(const Graph &g) { return CanonWalk(g).run(allNodeHashes(g, nullptr)); }

} // namespace

std::string GraphHash::hex() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kHex[(hi >> (4 * i)) & 15];
    out[31 - i] = kHex[(lo >> (4 * i)) & 15];
  }
  return out;
}

std::vector<int> canonicalCaptured(const Graph &g) {
  validate(g);
  const Canon canon = canonOf(g);
  std::vector<int> ids;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (canon.captured[i] >= 0) ids.push_back(static_cast<int>(i));
  }
  std::sort(ids.begin(), ids.end(), [&](int a, int b) {
    return canon.captured[static_cast<size_t>(a)] < canon.captured[static_cast<size_t>(b)];
  });
  return ids;
}

GraphHash hashGraph(const Graph &g) {
  validate(g);
  const Canon canon = canonOf(g);
  const std::vector<Hash> hashes = allNodeHashes(g, &canon);
  std::vector<Hash> sorted = hashes;
  std::sort(sorted.begin(), sorted.end(), hashLess);
  Bytes b;
  b.u64(0x72636a6974677231ull); // "rcjitgr1": the hash scheme's version
  b.u64(sorted.size());
  for (const Hash &h : sorted) b.hash(h);
  b.u64(g.outputs.size());
  for (int o : g.outputs) b.hash(hashes[static_cast<size_t>(o)]);
  hashUnusedSymbols(b, g, canon);
  const Hash h = b.digest();
  return GraphHash{h.low64, h.high64};
}

} // namespace rcjit
