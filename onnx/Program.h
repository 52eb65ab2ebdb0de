// The importer's internal form of a model: checked nodes in topological order, values
// numbered, constants decoded, layers found; and the context an op implementation sees.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <rcjit/Onnx.h>
#include <rcjit/Tensor.h>

#include "onnx/Proto.h"

namespace rcjit::onnx {

struct OpContext;
using OpFn = std::function<std::vector<Tensor>(OpContext &)>;

/// What an op is: its implementation, whether it makes sizes from values (Range,
/// ConstantOfShape: such outputs are also computed as traced ops, so that they stay
/// symbolic under dynamic shapes) and whether it only reads its input's sizes.
struct OpInfo {
  OpFn fn;
  bool makesSizes = false;
  bool readsSizes = false; // Shape, Size: the output is host data whatever the input is
};

/// The op table (every op of every domain rcjit implements), keyed "domain:OpType" with
/// "" for ai.onnx; nullptr when unsupported.
const OpInfo *findOp(const std::string &domain, const std::string &opType);
/// Every supported op type of the default domain, sorted (for docs and messages).
std::vector<std::string> supportedOps();

namespace detail {

struct Node {
  NodeData d;                      // attribute tensors are decoded into attrTensors
  std::vector<Tensor> attrTensors; // per attribute: its tensor, or undefined
  int64_t opset = 0;               // the opset of the node's domain
  const OpInfo *op = nullptr;
  std::vector<int> in, out; // value ids; -1 for an omitted optional input/output
  int layer = -1;           // index into Program::layers, or -1
};

struct Program {
  std::string what; // the file named in errors
  int64_t opset = 0;
  std::string producer;
  std::vector<std::string> inputNames, outputNames;
  std::vector<ValueInfo> inputInfo;
  std::vector<int> inputIds, outputIds;
  std::vector<std::string> valueNames;
  std::vector<Node> nodes;                        // topological order
  std::vector<std::pair<int, Tensor>> constants;  // integer initializers, Pow exponents
  std::vector<std::pair<int, Tensor>> parameters; // other floating initializers (initial values)
  std::vector<std::string> parameterNames;        // parallel to parameters
  std::vector<std::string> layers;                // repeated layers, in graph order
};

/// Builds the Program from a parsed model: decodes initializers (external data from
/// `dir`), numbers values, orders nodes, checks ops, finds layers.
std::shared_ptr<Program> buildProgram(ModelData &m, const std::string &dir,
                                      const std::string &what);
/// Decodes one TensorProto into a CPU tensor (`dir` for external data; "" refuses it).
Tensor decodeTensor(const TensorData &t, const std::string &dir, const std::string &what);
/// The layer of each node ("" for none), from name scopes, node names or initializers.
std::vector<std::string> findLayers(const Program &p);

} // namespace detail

/// One value of the interpreted graph: `t` the tensor ops run on (traced under compile),
/// `c` its value known on the host while tracing (shapes and what is computed from them
/// and from constants). Either or both are defined.
struct Value {
  Tensor t;
  Tensor c;
  /// For a Concat's traced result: its parts and axis, so that a Slice of it takes the
  /// parts it covers (no loop over the sum of the parts' sizes, which would pin symbolic
  /// sizes: GPT-2's position-id difference slices a cat of a prefix and the positions).
  std::vector<Tensor> catParts;
  int64_t catAxis = -1;
  /// A host value computed from a traced tensor's sizes: the node that made it, run again
  /// as traced ops when a traced op computes with the value (Model.cpp, tracedOf).
  const detail::Node *producer = nullptr;
};

/// What an op implementation sees: its inputs (the host values on the host pass, the
/// traced tensors otherwise), the node's attributes and opset, and error reporting.
struct OpContext {
  const detail::Node &node;
  std::vector<const Value *> ins;
  bool hostPass = false;
  /// Shape and Size under a trace: the sizes as traced values (sums of ones, which follow
  /// symbolic sizes) rather than host numbers, for traced ops that compute with them.
  bool tracedSizes = false;
  /// Under a trace: the traced form of a size-derived host input (Value::producer).
  std::function<Tensor(const Value &)> traced;

  size_t size() const { return ins.size(); }
  bool has(size_t i) const { return i < ins.size() && ins[i] != nullptr; }
  Tensor in(size_t i) const;
  /// Input i as integers read on the host (a shape, axes, indices): its constant value, or
  /// a host read of the tensor (a graph break under compile) when it depends on data.
  std::vector<int64_t> ints(size_t i) const;
  double scalar(size_t i) const;
  /// True when input i's value is known on the host and has no negative element (an index
  /// that needs no wrapping).
  bool knownNonNegative(size_t i) const;
  /// Input i when it is a one-element host constant (then ops can take it as a Scalar); not
  /// a size-derived value under a trace (in() gives its traced form).
  bool isScalarConst(size_t i) const;

  const Attribute *attr(const std::string &name) const;
  int64_t attrInt(const std::string &name, int64_t def) const;
  double attrFloat(const std::string &name, double def) const;
  std::string attrString(const std::string &name, const std::string &def) const;
  std::vector<int64_t> attrInts(const std::string &name) const;
  bool hasAttr(const std::string &name) const { return attr(name) != nullptr; }
  Tensor attrTensor(const std::string &name) const;
  int64_t opset() const { return node.opset; }
  [[noreturn]] void fail(const std::string &why) const;
  /// An axis in [-rank, rank) made non-negative; an Error otherwise.
  int64_t axis(int64_t a, int64_t rank) const;
};

/// An op's single output as the list an OpFn returns.
inline std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

/// Registration of each group of ops (onnx/Ops*.cpp).
using OpTable = std::vector<std::pair<std::string, OpInfo>>;
void addElementwiseOps(OpTable &t);
void addBinaryOps(OpTable &t);
void addShapeOps(OpTable &t);
void addNnOps(OpTable &t);

/// ONNX data type -> rcjit DType; an Error naming the type where rcjit has none.
DType dtypeFromOnnx(int32_t t, const std::string &where);

} // namespace rcjit::onnx
