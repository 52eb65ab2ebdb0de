// The graph IR: one list of nodes in topological order, used from tracer to codegen.
//
// A Graph is a plain value: copyable, comparable, printable (GraphPrinter.h), parseable
// and hashable. Node ids are positions in `nodes`. Not thread-safe to mutate.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <rcjit/Types.h>

#include <rcjit/ir/OpKind.h>

namespace rcjit {

/// One dim of a node's shape: a constant, or symbol `sym` (an index into Graph::symbols)
/// whose value at trace time was `value`.
struct Dim {
  int64_t value = 0;
  int32_t sym = -1;
  bool isSymbolic() const { return sym >= 0; }
  friend bool operator==(const Dim &, const Dim &) = default;
};
using SymShape = std::vector<Dim>;

/// A symbolic size with its allowed range (inclusive).
struct Symbol {
  int64_t min = 2;
  int64_t max = INT64_MAX;
  friend bool operator==(const Symbol &, const Symbol &) = default;
};

/// Op attributes; only the fields named by opInfo(op).attrs are meaningful (and printed,
/// compared and hashed).
struct Attrs {
  Dims dims;           // reduce dims, permute order, reshape/expand target shape
  int64_t dim = 0;     // softmax/argmax/slice/cat dim (already normalized, >= 0)
  int64_t start = 0;   // slice
  int64_t end = 0;     // slice
  int64_t stride = 1;  // conv2d
  int64_t padding = 0; // conv2d
  double value = 0;    // full
  double eps = 0;      // layer_norm, rms_norm
  bool keepdim = false;
  bool causal = false;
  int64_t reduce = 0; // all_reduce: 0 sum, 1 mean, 2 max (dist::ReduceOp's order)
  int64_t root = 0;   // broadcast: the rank whose value every rank gets
  int64_t world = 1;  // collectives: the world size the graph was made for
};

/// Whether an input node is an argument of the traced function or a captured tensor
/// (a module parameter or any tensor the function reads that it did not create).
enum class InputKind : uint8_t { arg, captured };

struct Node {
  OpKind op = OpKind::input;
  std::vector<int> inputs; // ids of earlier nodes
  DType dtype = DType::f32;
  SymShape shape;
  Attrs attrs;
  // input nodes only:
  InputKind inputKind = InputKind::arg;
  int inputIndex = 0; // position among the function's args, or among captured tensors
  std::string name;   // a captured parameter's dotted path, when known
  int region = -1;    // innermost region the node was recorded in, or -1
};

/// A region: the nodes recorded during one module call or rcjit::region body. Regions
/// nest; a region's nodes are the contiguous id range [begin, end).
struct Region {
  std::string name; // "layers.3" (module path) or the rcjit::region name
  std::string type; // module type ("Layer"), or "region" for rcjit::region
  int parent = -1;  // enclosing region, or -1
  int begin = 0;
  int end = 0;
  bool inList = false; // the module is an element of a ModuleList
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<int> outputs;
  std::vector<Region> regions;
  std::vector<Symbol> symbols;

  int add(Node n) {
    nodes.push_back(std::move(n));
    return static_cast<int>(nodes.size()) - 1;
  }
  /// Ids of the input nodes, in node order.
  std::vector<int> inputNodes() const;
  /// The calling convention of compiled code: the input node bound to each program input
  /// (args by inputIndex, then captured tensors by inputIndex). Throws rcjit::Error when
  /// the input indices are not dense.
  std::vector<int> programInputs() const;
};

bool operator==(const Attrs &a, const Attrs &b) = delete; // compare with attrsEqual
/// Equal in the fields `op` uses.
bool attrsEqual(OpKind op, const Attrs &a, const Attrs &b);
/// Structural equality: same nodes (op, inputs, dtype, shape, used attrs, input binding and
/// name, region), outputs, regions and symbols.
bool operator==(const Node &a, const Node &b);
bool operator==(const Region &a, const Region &b);
bool operator==(const Graph &a, const Graph &b);

/// Shape of a node with symbols replaced by their trace-time values.
Shape concreteShape(const SymShape &s);
/// A SymShape of constants.
SymShape staticShape(const Shape &s);

} // namespace rcjit
