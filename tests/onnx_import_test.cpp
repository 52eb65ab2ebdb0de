// The ONNX importer on small hand-written models: ops, shape arithmetic, compile modes,
// parameters and training, and every kind of bad file as an rcjit::Error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <rcjit/rcjit.h>

#include "tests/OnnxBuilder.h"

namespace rcjit::onnx {
namespace {

using namespace testing;
namespace fs = std::filesystem;

std::vector<float> seq(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 7) % 11) - 0.3f;
  return v;
}

// x [batch, 4] -> Gelu(x W1 + b1) -> reshape to [batch, 2, 4] by a computed shape ->
// ReduceMean over dim 1 -> @ W2 [4, 3]
GraphSpec mlpGraph() {
  GraphSpec g;
  g.initializers = {floats("fc1.weight", {4, 8}, seq(32, 0.1f)),
                    floats("fc1.bias", {8}, seq(8, 0.05f)),
                    floats("fc2.weight", {4, 3}, seq(12, 0.2f)),
                    int64s("zero", {1}, {0}), int64s("tail", {2}, {2, 4})};
  g.nodes = {node("MatMul", {"x", "fc1.weight"}, {"h0"}, "/fc1/MatMul"),
             node("Add", {"h0", "fc1.bias"}, {"h1"}, "/fc1/Add"),
             node("Gelu", {"h1"}, {"h2"}, "/act/Gelu"),
             node("Shape", {"x"}, {"xs"}, "/Shape"),
             node("Gather", {"xs", "zero"}, {"b"}, "/Gather", {attrInt("axis", 0)}),
             node("Concat", {"b", "tail"}, {"shape"}, "/Concat", {attrInt("axis", 0)}),
             node("Reshape", {"h2", "shape"}, {"h3"}, "/Reshape"),
             node("ReduceMean", {"h3", "one"}, {"h4"}, "/Mean", {attrInt("keepdims", 0)}),
             node("MatMul", {"h4", "fc2.weight"}, {"y"}, "/fc2/MatMul")};
  g.initializers.push_back(int64s("one", {1}, {1}));
  g.inputs = {valueInfo("x", kFloat, {-1, 4}, {"batch"})};
  g.outputs = {valueInfo("y", kFloat, {-1, 3}, {"batch"})};
  return g;
}

Tensor mlpReference(Model &m, const Tensor &x) {
  std::map<std::string, Tensor> p;
  for (auto &[n, t] : m.named_parameters()) p[n] = t.detach();
  Tensor h = gelu(matmul(x, p["fc1.weight"]) + p["fc1.bias"]);
  h = mean(reshape(h, {x.size(0), 2, 4}), {1});
  return matmul(h, p["fc2.weight"]);
}

TEST(OnnxImport, MlpEagerMatchesOps) {
  Model m = load_bytes(model(mlpGraph(), 20));
  EXPECT_EQ(m.input_names(), std::vector<std::string>{"x"});
  EXPECT_EQ(m.output_names(), std::vector<std::string>{"y"});
  EXPECT_EQ(m.opset(), 20);
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(named[0].first, "fc1.weight");
  EXPECT_TRUE(named[0].second.requires_grad());
  Tensor x = Tensor::randn({5, 4}, 1);
  std::vector<Tensor> y = m({x});
  ASSERT_EQ(y.size(), 1u);
  EXPECT_EQ(y[0].shape(), (Shape{5, 3}));
  EXPECT_TRUE(allclose(y[0], mlpReference(m, x), 1e-5, 1e-6));
  EXPECT_EQ(m.input_dim_params(0), (std::vector<std::string>{"batch", ""}));
}

TEST(OnnxImport, CompiledFullAndDynamicServeSeveralBatches) {
  Model m = load_bytes(model(mlpGraph(), 20));
  CompileOptions o;
  o.mode = Mode::full;
  auto cm = compile(m, o);
  for (int64_t b : {3, 5, 9, 17}) {
    Tensor x = Tensor::randn({b, 4}, static_cast<uint64_t>(b));
    std::vector<Tensor> y = cm(std::vector<Tensor>{x});
    EXPECT_TRUE(allclose(y.at(0), m({x})[0], 1e-4, 1e-5)) << b;
  }
  // automatic dynamic: the second batch size makes the batch symbolic, then no more compiles
  // (each entry is a forward and a backward program: the parameters require grad)
  EXPECT_EQ(cm.stats().recompiles, 1);
  EXPECT_EQ(cm.stats().graph_breaks, 0);
  auto marked = compile(m, o);
  for (int64_t b : {4, 6, 11}) {
    std::vector<Tensor> in{Tensor::randn({b, 4}, static_cast<uint64_t>(b))};
    m.mark_dynamic_inputs(in);
    EXPECT_TRUE(allclose(marked(in).at(0), m(in)[0], 1e-4, 1e-5)) << b;
  }
  EXPECT_EQ(marked.stats().recompiles, 0) << marked.explain();
  EXPECT_NE(marked.explain().find("s0 in [1, inf]"), std::string::npos) << marked.explain();
}

} // namespace
} // namespace rcjit::onnx
