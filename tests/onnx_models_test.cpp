// Exported transformers models (tests/data/onnx, scripts/onnx_fixtures.py) through
// rcjit::onnx::load in eager, full, regional and dynamic mode, against onnxruntime's outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include <rcjit/Onnx.h>
#include <rcjit/rcjit.h>

#include "tools/Cli.h"
#include "tools/Npy.h"

namespace {

using rcjit::Tensor;

// One exported model of tests/data/onnx: its folder, graph inputs and outputs.
struct Fixture {
  std::string dir;
  std::vector<std::string> inputs, outputs;
  std::vector<std::string> layers; // the repeated layers regional mode must find
};

const Fixture kFixtures[] = {
    {"bert",
     {"input_ids", "attention_mask"},
     {"last_hidden_state", "pooler_output"},
     {"encoder.layer.0", "encoder.layer.1"}},
    {"gpt2", {"input_ids"}, {"logits"}, {"transformer.h.0", "transformer.h.1"}},
    {"bert_ts",
     {"input_ids", "attention_mask"},
     {"last_hidden_state", "pooler_output"},
     {"encoder.layer.0", "encoder.layer.1"}},
};
constexpr int kCases = 4; // case0..case3: (1, 8), (2, 5), (3, 12), (4, 7)

std::string fixturePath(const Fixture &f, const std::string &rest) {
  return std::string(RCJIT_SOURCE_DIR) + "/tests/data/onnx/" + f.dir + "/" + rest;
}

std::vector<Tensor> caseInputs(const Fixture &f, int k) {
  std::vector<Tensor> in;
  for (const std::string &n : f.inputs)
    in.push_back(
        rcjit::tools::readNpy(fixturePath(f, "case" + std::to_string(k) + "/" + n + ".npy")));
  return in;
}

std::vector<Tensor> caseExpected(const Fixture &f, int k) {
  std::vector<Tensor> out;
  for (const std::string &n : f.outputs)
    out.push_back(rcjit::tools::readNpy(
        fixturePath(f, "case" + std::to_string(k) + "/expected/" + n + ".npy")));
  return out;
}

// max |got - want| / max |want|: what scripts/onnx_fixtures.py checks onnxruntime with
double relativeError(const Tensor &got, const Tensor &want) {
  const std::vector<double> a = got.to(rcjit::DType::f64).contiguous().to_vector<double>();
  const std::vector<double> b = want.to(rcjit::DType::f64).contiguous().to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    if (std::isnan(a[i])) diff = INFINITY;
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

void expectMatches(const Fixture &f, int k, const std::vector<Tensor> &got,
                   const std::string &mode) {
  const std::vector<Tensor> want = caseExpected(f, k);
  ASSERT_EQ(got.size(), want.size()) << f.dir << " " << mode;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(f.dir + " " + mode + " case" + std::to_string(k) + " " + f.outputs[i]);
    ASSERT_EQ(got[i].shape(), want[i].shape());
    EXPECT_EQ(got[i].dtype(), rcjit::DType::f32);
    EXPECT_LE(relativeError(got[i], want[i]), 2e-3);
  }
}

struct Param {
  const Fixture *fixture;
  std::string mode; // eager, full, regional, dynamic
};

void PrintTo(const Param &p, std::ostream *os) { *os << p.fixture->dir << " " << p.mode; }

class OnnxModels : public testing::TestWithParam<Param> {};

TEST_P(OnnxModels, MatchesOnnxruntime) {
  const Fixture &f = *GetParam().fixture;
  const std::string &mode = GetParam().mode;
  rcjit::NoGradGuard noGrad;
  auto model = rcjit::onnx::load(fixturePath(f, "model.onnx"));
  EXPECT_EQ(model.input_names(), f.inputs);
  EXPECT_EQ(model.output_names(), f.outputs);
  if (mode == "eager") {
    for (int k = 0; k < kCases; ++k) expectMatches(f, k, model(caseInputs(f, k)), mode);
    return;
  }
  rcjit::tools::TempCacheDir cacheDir("onnx_models"); // counts from this test's compiles only
  rcjit::cache::clear();
  rcjit::CompileOptions opts;
  opts.mode = mode == "regional" ? rcjit::Mode::regional : rcjit::Mode::full;
  opts.name = "onnx_" + f.dir + "_" + mode;
  auto cm = rcjit::compile(model, opts);
  // dynamic: the three cases of batch 2 and up (mark_dynamic_inputs' range is [2, inf): a
  // batch of 1 would be a static entry of its own)
  for (int k = mode == "dynamic" ? 1 : 0; k < kCases; ++k) {
    std::vector<Tensor> in = caseInputs(f, k);
    if (mode == "dynamic") model.mark_dynamic_inputs(in);
    expectMatches(f, k, cm(in), mode);
  }
  const rcjit::CompileStats s = cm.stats();
  EXPECT_EQ(s.graph_breaks, 0) << cm.explain();
  EXPECT_EQ(s.fallbacks, 0) << cm.explain();
  bool counts = true; // what the mode promises about compiles and reuse
  if (mode == "dynamic") {
    // the dim_params batch and seq are symbolic from the first call: one compile, three shapes
    counts = s.compiles == 1;
  } else if (mode == "full") {
    // the first entry static; at the first size change automatic dynamic shapes make batch
    // and seq symbolic, and that entry serves the other shapes
    counts = s.compiles >= 1 && s.compiles <= 2;
  } else {
    // regional: per entry (a shape, or a symbolic entry once automatic dynamic shapes have
    // seen a size change) the stages around the layers and one layer compiled; the other
    // layer reuses it (a cache hit)
    EXPECT_EQ(model.layers(), f.layers);
    const int entries = s.recompiles + 1;
    counts = entries <= 2 && s.cache_hits >= entries * static_cast<int>(f.layers.size() - 1) &&
             s.compiles <= 3 * entries;
  }
  EXPECT_TRUE(counts) << "compiles " << s.compiles << ", cache hits " << s.cache_hits << "\n"
                      << cm.explain();
}

std::vector<Param> params() {
  std::vector<Param> out;
  for (const Fixture &f : kFixtures) {
    for (const char *m : {"eager", "full", "regional", "dynamic"}) out.push_back({&f, m});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Exported, OnnxModels, testing::ValuesIn(params()),
                         [](const testing::TestParamInfo<Param> &p) {
                           return p.param.fixture->dir + "_" + p.param.mode;
                         });

// The imported encoder trains: every parameter that reaches last_hidden_state gets a gradient,
// and a few AdamW steps on a new head lower the loss (examples/onnx_finetune.cpp at test size).
TEST(OnnxModelsTraining, ImportedEncoderFineTunes) {
  const Fixture &f = kFixtures[0];
  auto model = rcjit::onnx::load(fixturePath(f, "model.onnx"));
  const std::vector<Tensor> in = caseInputs(f, 2); // [3, 12]
  Tensor head = (Tensor::randn({64, 2}, 7) * 0.1).detach();
  head.requires_grad_();
  const Tensor labels = Tensor::from_vector(std::vector<int64_t>{0, 1, 1}, {3});
  std::vector<Tensor> params = model.parameters();
  EXPECT_EQ(params.size(), model.named_parameters().size());
  for (const Tensor &p : params) EXPECT_TRUE(p.requires_grad());
  params.push_back(head);
  rcjit::optim::AdamW opt(params, {.lr = 1e-2});
  std::vector<float> losses;
  for (int step = 0; step < 6; ++step) {
    opt.zero_grad();
    const Tensor hidden = model(in)[0]; // [3, 12, 64]
    const Tensor cls = rcjit::slice(hidden, 1, 0, 1).reshape({3, 64});
    const Tensor loss = rcjit::cross_entropy(rcjit::matmul(cls, head), labels);
    loss.backward();
    if (step == 0) {
      int withGrad = 0;
      for (const auto &[name, p] : model.named_parameters()) {
        if (p.grad().defined()) {
          ++withGrad;
        } else {
          EXPECT_NE(name.find("pooler"), std::string::npos) << name << " got no gradient";
        }
      }
      EXPECT_GE(withGrad, static_cast<int>(params.size()) - 3);
    }
    opt.step();
    losses.push_back(static_cast<float>(loss.item()));
  }
  EXPECT_LT(losses.back(), losses.front());
}

} // namespace
