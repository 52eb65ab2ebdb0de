// The IR verifier's checks, in node order.
#include "tracer/GraphVerify.h"

#include <rcjit/Error.h>

#include "support/Env.h"
#include "tracer/GraphIO.h"
#include "tracer/ShapeInference.h"

namespace rcjit {

namespace {

[[noreturn]] void fail(const std::string &after, const Graph &g, size_t id,
                       const std::string &what) {
  throw Error("IR verifier (after " + after + "): %" + std::to_string(id) + " " +
              std::string(opName(g.nodes[id].op)) + ": " + what);
}

std::string metaStr(DType dtype, const Shape &shape) {
  return std::string(dtypeName(dtype)) + shapeStr(shape);
}

void verifyNode(const Graph &g, size_t id, const std::string &after) {
  const Node &n = g.nodes[id];
  const OpInfo &info = opInfo(n.op);
  for (int in : n.inputs) {
    if (in < 0 || static_cast<size_t>(in) >= id) {
      fail(after, g, id, "operand %" + std::to_string(in) + " does not come before its user");
    }
  }
  if (info.arity >= 0 && static_cast<int>(n.inputs.size()) != info.arity) {
    fail(after, g, id,
         "has " + std::to_string(n.inputs.size()) + " operands, the op takes " +
             std::to_string(info.arity));
  }
  for (const Dim &d : n.shape) {
    if (d.isSymbolic() && static_cast<size_t>(d.sym) >= g.symbols.size()) {
      fail(after, g, id,
           "names symbol s" + std::to_string(d.sym) + " of " + std::to_string(g.symbols.size()));
    }
    if (d.value < 0) fail(after, g, id, "has a negative size");
  }
  if (info.category == OpCategory::Source) return; // their shape is the node's own
  std::vector<TensorMeta> in;
  for (int i : n.inputs) in.push_back({g.nodes[i].dtype, concreteShape(g.nodes[i].shape)});
  TensorMeta want;
  try {
    want = inferMeta(n.op, in, n.attrs);
  } catch (const Error &e) {
    fail(after, g, id, std::string("shape inference rejects it: ") + e.what());
  }
  if (n.op == OpKind::cast) want.dtype = n.dtype; // a cast's result type is its node's
  Shape have = concreteShape(n.shape);
  if (want.dtype != n.dtype || want.shape != have) {
    fail(after, g, id,
         "is " + metaStr(n.dtype, have) + ", but its operands give " +
             metaStr(want.dtype, want.shape));
  }
}

} // namespace

void verifyGraph(const Graph &g, const std::string &after) {
  for (size_t id = 0; id < g.nodes.size(); ++id) verifyNode(g, id, after);
  for (int o : g.outputs) {
    if (o < 0 || static_cast<size_t>(o) >= g.nodes.size()) {
      throw Error("IR verifier (after " + after + "): output %" + std::to_string(o) +
                  " is not a node");
    }
  }
  for (const Region &r : g.regions) {
    if (r.begin < 0 || r.begin > r.end || static_cast<size_t>(r.end) > g.nodes.size()) {
      throw Error("IR verifier (after " + after + "): region " + r.name + " spans [" +
                  std::to_string(r.begin) + ", " + std::to_string(r.end) + ") of " +
                  std::to_string(g.nodes.size()) + " nodes");
    }
  }
  try {
    g.programInputs();
  } catch (const Error &e) {
    throw Error("IR verifier (after " + after + "): " + e.what());
  }
}

bool verifyIrEnabled() {
#ifndef NDEBUG
  return true;
#else
  static const bool on = envFlag("RCJIT_VERIFY_IR", false);
  return on;
#endif
}

} // namespace rcjit
