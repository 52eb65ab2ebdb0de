// rcjit::onnx: load an ONNX model as an nn module that can be called, compiled and trained.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rcjit/Tensor.h>
#include <rcjit/nn.h>

namespace rcjit::onnx {

namespace detail {
struct Program; // the checked graph, its constants and the interpreter's plan
}

/// An ONNX graph as an nn module: its floating initializers are its parameters, named as
/// in the file ("encoder.layer.0.attention.self.query.weight"; each '.' is a level of child
/// modules, so named_parameters() gives the file's names back) and requiring grad; integer
/// initializers and Constant nodes are constants. Calling it interprets the graph node by
/// node through rcjit's ops, so under rcjit::compile the whole graph traces into one graph
/// (shape arithmetic — Shape, Gather, Concat, Range, ... — is evaluated on the sizes while
/// tracing, so dynamic mode makes one compile serve every size). Nodes that the exporter
/// placed in a repeated layer ("encoder.layer.3", "h.3": from node names, the dynamo
/// exporter's name_scopes metadata or the initializers' names) run inside
/// rcjit::region(layer name), so regional mode compiles each distinct layer once.
/// Not copyable or movable (a module); load() returns it by guaranteed elision:
/// `auto model = rcjit::onnx::load("bert.onnx");`.
class Model : public nn::ModuleBase {
public:
  explicit Model(std::shared_ptr<detail::Program> program);
  ~Model() override;

  /// Runs the graph on `inputs` (graph-input order, one per input that is not an
  /// initializer); returns the graph's outputs in order. A wrong count, dtype or a size
  /// that contradicts a fixed dim of the file is an rcjit::Error naming the input.
  std::vector<Tensor> operator()(const std::vector<Tensor> &inputs) const;
  const std::vector<std::string> &input_names() const;
  const std::vector<std::string> &output_names() const;

  /// The declared shape of input i: -1 where the file gives a dim_param or nothing.
  std::vector<int64_t> input_shape(size_t i) const;
  /// The element type the file declares for input i (f32 where it declares none); a type
  /// rcjit has no dtype for (uint8, string, ...) is an rcjit::Error naming the input.
  DType input_dtype(size_t i) const;
  /// The dim_param names of input i ("" for a fixed dim).
  std::vector<std::string> input_dim_params(size_t i) const;
  /// Calls rcjit::mark_dynamic on every input dim the file names with a dim_param (range
  /// [2, inf]: size 1 broadcasts, so it stays a specialization), so the first compile is
  /// already symbolic in those dims.
  void mark_dynamic_inputs(std::vector<Tensor> &inputs) const;
  /// The repeated layers found (in graph order), e.g. "encoder.layer.0"; empty if none.
  std::vector<std::string> layers() const;
  /// The default-domain opset the model imports, the producer ("pytorch 2.5").
  int64_t opset() const;
  std::string producer() const;

private:
  nn::ModuleBase &scopeFor(const std::string &path);
  std::shared_ptr<detail::Program> program_;
  std::map<std::string, std::unique_ptr<nn::ModuleBase>> scopes_;
  std::vector<std::unique_ptr<Tensor>> params_;
  std::vector<std::pair<int, Tensor *>> slots_; // graph value id -> registered parameter
};

/// Loads `path` (.onnx; external data files are read from its folder, memory-mapped, and
/// may not name a path outside it). A file that is not ONNX, a truncated or corrupt one,
/// an unsupported op (named with node name, op type, domain and opset), a missing or short
/// external-data file, an initializer whose bytes disagree with its shape, a cycle or an
/// undefined value: each an rcjit::Error naming it.
Model load(const std::string &path);
/// The same from the bytes of a model in memory; `dir` is where external data is looked
/// for ("" refuses external data).
Model load_bytes(const std::string &bytes, const std::string &dir = "");

/// Reads a serialized TensorProto (the .pb files of ONNX's backend tests) into a Tensor.
Tensor load_tensor_proto(const std::string &path);

} // namespace rcjit::onnx
