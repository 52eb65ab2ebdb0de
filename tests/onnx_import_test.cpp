// The ONNX importer on small hand-written models: ops, shape arithmetic, compile modes,
// parameters and training, and every kind of bad file as an rcjit::Error naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <unistd.h>

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
                    floats("fc2.weight", {4, 3}, seq(12, 0.2f)), int64s("zero", {1}, {0}),
                    int64s("tail", {2}, {2, 4})};
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

TEST(OnnxImport, APowsConstantExponentIsNoParameterAndCompilesToProducts) {
  // the dynamo exporter writes the 3 of `x ** 3` (GPT-2's GELU) as a rank-0 initializer
  GraphSpec g;
  g.initializers = {floats("val_3", {}, {3.0f}), floats("scale", {1}, {0.5f})};
  g.nodes = {node("Pow", {"x", "val_3"}, {"cube"}, "/act/Pow"),
             node("Mul", {"cube", "scale"}, {"y"}, "/act/Mul")};
  g.inputs = {valueInfo("x", kFloat, {-1, 8}, {"batch"})};
  g.outputs = {valueInfo("y", kFloat, {-1, 8}, {"batch"})};
  Model m = load_bytes(model(g, 20));
  auto named = m.named_parameters();
  ASSERT_EQ(named.size(), 1u); // the exponent is a constant, the Mul's operand a parameter
  EXPECT_EQ(named[0].first, "scale");
  Tensor x = Tensor::randn({4, 8}, 7);
  Tensor want = x * x * x * 0.5;
  EXPECT_TRUE(allclose(m({x})[0], want, 1e-5, 1e-6));
  NoGradGuard inference;
  CompileOptions o;
  o.tiered = false;
  auto cm = compile(m, o);
  EXPECT_TRUE(allclose(cm(std::vector<Tensor>{x}).at(0), want, 1e-5, 1e-6));
  std::string ex = cm.explain();
  EXPECT_EQ(ex.find("pow"), std::string::npos) << ex; // x * x * x in the kernel
  EXPECT_NE(ex.find("mul"), std::string::npos) << ex;
}

TEST(OnnxImport, PowKeepsTheBasesRankAndAnIntegerBaseTakesAFractionalExponent) {
  GraphSpec g; // an exponent of shape [1] over a rank-0 base; 2.5 over int64 values
  g.initializers = {floats("e1", {1}, {3.0f}), floats("e2", {}, {2.5f})};
  g.nodes = {node("Pow", {"s", "e1"}, {"cube"}, "/Pow"),
             node("Pow", {"i", "e2"}, {"ipow"}, "/IntPow")};
  g.inputs = {valueInfo("s", kFloat, {}), valueInfo("i", kInt64, {3})};
  g.outputs = {valueInfo("cube", kFloat, {1}), valueInfo("ipow", kInt64, {3})};
  Model m = load_bytes(model(g, 20));
  EXPECT_EQ(m.input_dtype(0), DType::f32);
  EXPECT_EQ(m.input_dtype(1), DType::i64);
  Tensor s = Tensor::full({}, 2.0), i = Tensor::from_vector(std::vector<int64_t>{2, 3, 4}, {3});
  std::vector<Tensor> out = m({s, i});
  EXPECT_EQ(out[0].shape(), (Shape{1})); // broadcast to the exponent's rank
  EXPECT_FLOAT_EQ(out[0].item(), 8.0f);
  // as onnxruntime: pow in double, truncated (2 ** 2.5 = 5.66, 3 ** 2.5 = 15.59, 4 ** 2.5 = 32)
  EXPECT_EQ(out[1].to_vector<int64_t>(), (std::vector<int64_t>{5, 15, 32}));
}

TEST(OnnxImport, AnInputTypeWithoutADtypeIsAnErrorNamingTheInput) {
  GraphSpec g;
  g.nodes = {node("Identity", {"pixels"}, {"y"}, "/Identity")};
  g.inputs = {valueInfo("pixels", 2 /* uint8 */, {4})};
  g.outputs = {valueInfo("y", 2, {4})};
  Model m = load_bytes(model(g, 20));
  try {
    m.input_dtype(0);
    FAIL() << "expected an Error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("'pixels'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("uint8"), std::string::npos) << e.what();
  }
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
  EXPECT_NE(marked.explain().find("s0 in [2, inf]"), std::string::npos) << marked.explain();
}

// three identical layers "/layers.i/..." (TorchScript-style node names), each x @ W_i + b_i
// then tanh
GraphSpec layeredGraph() {
  GraphSpec g;
  std::string x = "x";
  for (int i = 0; i < 3; ++i) {
    std::string l = "layers." + std::to_string(i);
    g.initializers.push_back(floats(l + ".w", {6, 6}, seq(36, 0.05f * (i + 1))));
    g.initializers.push_back(floats(l + ".b", {6}, seq(6, 0.1f)));
    std::string h = "h" + std::to_string(i), a = "a" + std::to_string(i);
    g.nodes.push_back(node("MatMul", {x, l + ".w"}, {h}, "/" + l + "/MatMul"));
    g.nodes.push_back(node("Add", {h, l + ".b"}, {a}, "/" + l + "/Add"));
    x = "t" + std::to_string(i);
    g.nodes.push_back(node("Tanh", {a}, {x}, "/" + l + "/Tanh"));
  }
  g.nodes.push_back(node("ReduceSum", {x, "axes"}, {"y"}, "/head/Sum", {attrInt("keepdims", 0)}));
  g.initializers.push_back(int64s("axes", {1}, {1}));
  g.inputs = {valueInfo("x", kFloat, {-1, 6})};
  g.outputs = {valueInfo("y", kFloat, {-1})};
  return g;
}

TEST(OnnxImport, RegionalCompilesEachDistinctLayerOnce) {
  Model m = load_bytes(model(layeredGraph()));
  EXPECT_EQ(m.layers(), (std::vector<std::string>{"layers.0", "layers.1", "layers.2"}));
  Tensor x = Tensor::randn({4, 6}, 3);
  NoGradGuard inference; // forward programs only
  CompileOptions o;
  o.mode = Mode::regional;
  auto cm = compile(m, o);
  EXPECT_TRUE(allclose(cm(std::vector<Tensor>{x}).at(0), m({x})[0], 1e-5, 1e-6));
  std::string ex = cm.explain();
  EXPECT_NE(ex.find("layers.0"), std::string::npos) << ex;
  // three identical layers: one compiled region reused twice, plus the glue
  EXPECT_LE(cm.stats().compiles, 3) << ex;
}

TEST(OnnxImport, TrainingEagerAndCompiledGradientsAgree) {
  Model m = load_bytes(model(layeredGraph()));
  Tensor x = Tensor::randn({8, 6}, 4), target = Tensor::randn({8}, 5);
  auto lossOf = [&](const std::vector<Tensor> &in) { return mse_loss(m(in)[0], target); };
  m.zero_grad();
  lossOf({x}).backward();
  std::vector<Tensor> eagerGrads;
  for (const Tensor &p : m.parameters()) eagerGrads.push_back(p.grad().clone());
  ASSERT_EQ(eagerGrads.size(), 6u);
  m.zero_grad();
  CompileOptions o;
  auto step = compile(
      [&](const Tensor &in) {
        Tensor l = lossOf({in});
        l.backward();
        return l;
      },
      o);
  step(x);
  std::vector<Tensor> params = m.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i].grad().defined()) << i;
    EXPECT_TRUE(allclose(params[i].grad(), eagerGrads[i], 1e-4, 1e-5)) << i;
  }
  optim::SGDOptions so;
  so.lr = 0.1;
  optim::SGD sgd(m.parameters(), so);
  double first = 0, last = 0;
  for (int it = 0; it < 20; ++it) {
    sgd.zero_grad();
    Tensor l = lossOf({x});
    l.backward();
    sgd.step();
    (it == 0 ? first : last) = l.item();
  }
  EXPECT_LT(last, first * 0.8);
}

// ---- bad input -------------------------------------------------------------------------

std::string errorOf(const std::function<void()> &f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR(stmt, text)                                                                   \
  do {                                                                                             \
    std::string msg = errorOf([&] { stmt; });                                                      \
    EXPECT_NE(msg.find(text), std::string::npos) << msg;                                           \
  } while (0)

fs::path scratchDir(const std::string &name) {
  fs::path d = fs::temp_directory_path() / ("rcjit_onnx_" + name + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void writeFile(const fs::path &p, const std::string &bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

TEST(OnnxImport, BadFilesAreErrorsNamingTheProblem) {
  fs::path d = scratchDir("bad");
  writeFile(d / "text.onnx", "this is not an onnx model at all\n");
  EXPECT_ERROR(load((d / "text.onnx").string()), "text.onnx");
  EXPECT_ERROR(load((d / "missing.onnx").string()), "cannot open");
  writeFile(d / "empty.onnx", "");
  EXPECT_ERROR(load((d / "empty.onnx").string()), "empty file");
  std::string good = model(mlpGraph());
  for (size_t cut : {good.size() / 2, good.size() - 1, size_t(3)}) {
    EXPECT_ERROR(load_bytes(good.substr(0, cut)), "bad protobuf");
  }
  // a length field far past the end
  EXPECT_ERROR(load_bytes(std::string("\x3a\xff\xff\xff\xff\x0f", 6)), "runs past the end");
  EXPECT_ERROR(load_bytes(std::string("\x0b\x01", 2)), "wire type");
  EXPECT_ERROR(load_bytes(Msg().varint(1, 7).str()), "no graph");
  fs::remove_all(d);
}

TEST(OnnxImport, GraphErrorsNameNodeOpAndValue) {
  GraphSpec g = mlpGraph();
  g.nodes.push_back(node("FancyOp", {"y"}, {"z"}, "my_node"));
  std::string msg = errorOf([&] { load_bytes(model(g, 17)); });
  for (const char *part : {"FancyOp", "my_node", "ai.onnx", "opset 17"}) {
    EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
  GraphSpec u = mlpGraph();
  u.nodes.push_back(node("Relu", {"nowhere"}, {"z"}, "reader"));
  EXPECT_ERROR(load_bytes(model(u)), "'nowhere'");
  GraphSpec c;
  c.nodes = {node("Relu", {"b"}, {"a"}, "first"), node("Relu", {"a"}, {"b"}, "second")};
  c.outputs = {valueInfo("a", kFloat, {2})};
  EXPECT_ERROR(load_bytes(model(c)), "cycle");
  GraphSpec o = mlpGraph();
  o.outputs.push_back(valueInfo("ghost", kFloat, {1}));
  EXPECT_ERROR(load_bytes(model(o)), "'ghost' is never defined");
  GraphSpec s = mlpGraph();
  s.initializers[1] = tensor("fc1.bias", kFloat, {8}, std::string(12, '\0'));
  EXPECT_ERROR(load_bytes(model(s)), "raw_data has 12 bytes");
  // a shape of 2^40 elements (4 TiB of f32) with 12 bytes of data: refused by the sizes, before
  // anything is allocated (allocating first gave an allocation failure; the fuzzer's finding)
  s.initializers[1] = tensor("fc1.bias", kFloat, {1 << 20, 1 << 20}, std::string(12, '\0'));
  EXPECT_ERROR(load_bytes(model(s)), "raw_data has 12 bytes, its shape [1048576, 1048576]");
  Model m = load_bytes(model(mlpGraph()));
  EXPECT_ERROR(m({}), "takes 1 inputs");
  EXPECT_ERROR(m({Tensor::randn({2, 5}, 1)}), "input 'x' has shape [2, 5]");
  EXPECT_ERROR(m({Tensor::zeros({2, 4}, DType::i64)}), "must be float");
}

Msg externalTensor(const std::string &name, const std::string &location, int64_t offset) {
  Msg t;
  t.varint(1, 4).varint(2, kFloat).bytes(8, name);
  t.msg(13, Msg().bytes(1, "location").bytes(2, location));
  t.msg(13, Msg().bytes(1, "offset").bytes(2, std::to_string(offset)));
  t.varint(14, 1);
  return t;
}

TEST(OnnxImport, ExternalDataIsReadAndChecked) {
  fs::path d = scratchDir("ext");
  std::vector<float> w{1, 2, 3, 4, 5, 6, 7, 8};
  writeFile(d / "weights.bin", rawOf(w));
  auto withWeight = [&](const Msg &t) {
    GraphSpec g;
    g.initializers = {t};
    g.nodes = {node("Add", {"x", "w"}, {"y"}, "add")};
    g.inputs = {valueInfo("x", kFloat, {4})};
    g.outputs = {valueInfo("y", kFloat, {4})};
    return model(g);
  };
  writeFile(d / "ok.onnx", withWeight(externalTensor("w", "weights.bin", 16)));
  Model m = load((d / "ok.onnx").string());
  EXPECT_EQ(m({Tensor::zeros({4})})[0].to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
  writeFile(d / "short.onnx", withWeight(externalTensor("w", "weights.bin", 24)));
  EXPECT_ERROR(load((d / "short.onnx").string()), "too short");
  writeFile(d / "missing.onnx", withWeight(externalTensor("w", "nope.bin", 0)));
  EXPECT_ERROR(load((d / "missing.onnx").string()), "cannot open");
  writeFile(d / "escape.onnx", withWeight(externalTensor("w", "../weights.bin", 0)));
  EXPECT_ERROR(load((d / "escape.onnx").string()), "inside the model's folder");
  writeFile(d / "abs.onnx", withWeight(externalTensor("w", (d / "weights.bin").string(), 0)));
  EXPECT_ERROR(load((d / "abs.onnx").string()), "inside the model's folder");
  EXPECT_ERROR(load_bytes(withWeight(externalTensor("w", "weights.bin", 0))),
               "not loaded from a file");
  fs::remove_all(d);
}

} // namespace
} // namespace rcjit::onnx
