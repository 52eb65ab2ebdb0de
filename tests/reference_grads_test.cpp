// The built-in gpt2 and llama models' gradients, eager and compiled, against PyTorch's.
//
// scripts/reference_grads.py wrote the fixtures: tiny configs (in each file's metadata),
// random weights, token ids and targets, and PyTorch's logits, mean cross-entropy loss and
// the gradient of every parameter (computed in float64, stored as float32). Each test builds
// the built-in model at the fixture's config, loads the weights, runs forward, cross_entropy
// and backward (eagerly, or through rcjit::compile in full or regional mode) and compares
// logits, loss and every gradient. No Python is needed here.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "models/ModelLlama.h"
#include "models/Models.h"
#include "models/Safetensors.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

// allclose tolerances: the fixtures hold float64 results rounded to float32, and rcjit
// computes in float32 (its error is what is measured).
constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

const char *const kRegenerate = "regenerate it with `python scripts/reference_grads.py` "
                                "(see that script's header)";

std::string fixturePath(const std::string &model) {
  return std::string(RCJIT_SOURCE_DIR) + "/tests/data/grad_" + model + ".safetensors";
}

// The fixture file's parts besides the weights (which loadWeights reads).
const std::vector<std::string> kNonWeights = {"input_ids", "targets", "logits", "loss",
                                              "grad\\..*"};

// A reference fixture: its tensors and its metadata (the model's config).
struct Fixture {
  std::string path;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;

  const Tensor &at(const std::string &name) const {
    auto it = tensors.find(name);
    if (it == tensors.end()) throw Error(path + ": the fixture has no tensor '" + name + "'");
    return it->second;
  }
  std::string text(const std::string &key) const {
    auto it = meta.find(key);
    if (it == meta.end()) {
      throw Error(path + ": the fixture's metadata has no '" + key + "'; " + kRegenerate);
    }
    return it->second;
  }
  double number(const std::string &key) const {
    std::string v = text(key);
    try {
      size_t used = 0;
      double d = std::stod(v, &used);
      if (used == v.size()) return d;
    } catch (const std::exception &) {
    }
    throw Error(path + ": metadata '" + key + "' is '" + v + "', not a number");
  }
  int64_t integer(const std::string &key) const {
    double d = number(key);
    if (d != std::floor(d)) throw Error(path + ": metadata '" + key + "' is not an integer");
    return static_cast<int64_t>(d);
  }
};

// Reads the fixture of `model` ("gpt2", "llama") at `path`; an rcjit::Error naming the file
// when it is missing, not a safetensors file, or not a fixture of that model.
Fixture readFixture(const std::string &model, const std::string &path) {
  if (!std::ifstream(path)) {
    throw Error("reference gradient fixture " + path + " cannot be read; " + kRegenerate);
  }
  Fixture f;
  f.path = path;
  rcjit::SafetensorsReader reader(path);
  f.meta = reader.metadata();
  for (const rcjit::SafetensorsEntry &e : reader.entries()) f.tensors[e.name] = reader.read(e.name);
  if (f.text("model") != model) {
    throw Error(path + ": a fixture of model '" + f.text("model") + "', expected '" + model + "'");
  }
  for (const char *name : {"input_ids", "targets", "logits", "loss"}) f.at(name);
  return f;
}

// The built-in model at the fixture's config, with the fixture's weights.
std::unique_ptr<tools::Model> buildFromFixture(const Fixture &f) {
  tools::ModelConfig c;
  c.batch = f.integer("batch");
  c.seq = f.integer("seq");
  std::unique_ptr<tools::Model> m;
  if (f.text("model") == "gpt2") {
    tools::Gpt2Config g;
    g.name = "reference-gpt2";
    g.hidden = f.integer("hidden");
    g.layers = static_cast<int>(f.integer("layers"));
    g.heads = f.integer("heads");
    g.vocab = f.integer("vocab");
    g.context = f.integer("context");
    g.eps = f.number("eps");
    m = tools::buildGpt2(g, c);
  } else {
    tools::LlamaConfig l;
    l.name = "reference-llama";
    l.hidden = f.integer("hidden");
    l.layers = static_cast<int>(f.integer("layers"));
    l.heads = f.integer("heads");
    l.kvHeads = f.integer("kv_heads");
    l.intermediate = f.integer("intermediate");
    l.vocab = f.integer("vocab");
    l.ropeTheta = f.number("rope_theta");
    l.eps = f.number("eps");
    l.tiedEmbeddings = f.integer("tied_embeddings") != 0;
    l.ropeFactor = f.number("rope_factor");
    l.lowFreqFactor = f.number("low_freq_factor");
    l.highFreqFactor = f.number("high_freq_factor");
    l.originalMaxPositions = f.integer("original_max_positions");
    m = tools::buildLlama(l, c);
  }
  tools::WeightNaming naming = tools::WeightNaming::exact();
  naming.ignored = kNonWeights;
  // strict: a parameter the file lacks, or a weight no parameter takes, is an Error
  tools::loadWeights(m->module(), f.path, naming, true);
  return m;
}

// What one run produced.
struct RunResult {
  Tensor logits, loss;
  std::map<std::string, Tensor> grads; // by parameter name; undefined when none
};

// Forward, cross_entropy and backward of `m` on the fixture's inputs: eagerly for
// Mode::eager, else through rcjit::compile in `mode`.
RunResult runModel(tools::Model &m, const Fixture &f, Mode mode) {
  m.module().zero_grad();
  const Tensor &ids = f.at("input_ids"), &targets = f.at("targets");
  auto step = [&m](const Tensor &in, const Tensor &tg) {
    Tensor logits = m.forward({in});
    return std::vector<Tensor>{logits, cross_entropy(logits, tg)};
  };
  std::vector<Tensor> out;
  if (mode == Mode::eager) {
    out = step(ids, targets);
  } else {
    CompileOptions o;
    o.mode = mode;
    o.fullgraph = mode == Mode::full;
    auto cf = compile(step, o);
    out = cf(ids, targets);
    EXPECT_GE(cf.stats().compiles + cf.stats().cache_hits, 1) << cf.explain();
    EXPECT_EQ(cf.stats().fallbacks, 0) << cf.explain();
  }
  out.at(1).backward();
  RunResult r{out.at(0), out.at(1), {}};
  for (const auto &[name, p] : m.module().named_parameters()) r.grads[name] = p.grad();
  return r;
}

// Every difference found, and the worst errors over the values checked.
struct Comparison {
  std::vector<std::string> problems;
  int tensors = 0;
  double maxAbs = 0;   // max |got - want|
  double maxRel = 0;   // max |got - want| / max |want| of the same tensor
  std::string worstAt; // the tensor of maxRel
};

// got against want: allclose(rtol, atol) elementwise, same shape.
void compare(Comparison &c, const std::string &what, const Tensor &got, const Tensor &want) {
  ++c.tensors;
  if (got.shape() != want.shape()) {
    c.problems.push_back(what + ": shape " + shapeStr(got.shape()) + ", PyTorch's " +
                         shapeStr(want.shape()));
    return;
  }
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double scale = 0, worst = 0;
  for (double v : w) scale = std::max(scale, std::abs(v));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = std::abs(g[i] - w[i]);
    if (!(d <= kAtol + kRtol * std::abs(w[i]))) {
      if (bad++ == 0) first = i;
    }
    worst = std::max(worst, std::isnan(d) ? INFINITY : d);
  }
  c.maxAbs = std::max(c.maxAbs, worst);
  double rel = scale > 0 ? worst / scale : worst;
  if (rel >= c.maxRel) {
    c.maxRel = rel;
    c.worstAt = what;
  }
  if (bad > 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf, ": %zu of %zu values differ; first at %zu: %.9g, PyTorch %.9g",
                  bad, g.size(), first, g[first], w[first]);
    c.problems.push_back(what + buf);
  }
}

// Logits, loss and every parameter's gradient of `r` against the fixture. A gradient in the
// fixture with no parameter, a parameter with no gradient in the fixture, and a parameter
// that got no gradient are problems too.
Comparison compareRun(const RunResult &r, const Fixture &f) {
  Comparison c;
  compare(c, "logits", r.logits, f.at("logits"));
  compare(c, "loss", reshape(r.loss, {}), reshape(f.at("loss"), {}));
  std::set<std::string> referenced;
  for (const auto &[name, want] : f.tensors) {
    if (name.rfind("grad.", 0) != 0) continue;
    std::string param = name.substr(5);
    referenced.insert(param);
    auto it = r.grads.find(param);
    if (it == r.grads.end()) {
      c.problems.push_back(f.path + ": " + name + " names no parameter of the model");
    } else if (!it->second.defined()) {
      c.problems.push_back(param + ": got no gradient");
    } else {
      compare(c, "grad of " + param, it->second, want);
    }
  }
  for (const auto &[param, g] : r.grads) {
    if (!referenced.count(param)) {
      c.problems.push_back(param + ": " + f.path + " has no reference gradient grad." + param);
    }
  }
  return c;
}

// The whole check of one model in one mode.
void checkAgainstPyTorch(const std::string &model, Mode mode) {
  Fixture f;
  std::unique_ptr<tools::Model> m;
  try {
    f = readFixture(model, fixturePath(model));
    m = buildFromFixture(f);
  } catch (const Error &e) {
    FAIL() << e.what();
  }
  Comparison c = compareRun(runModel(*m, f, mode), f);
  EXPECT_EQ(static_cast<size_t>(c.tensors), 2 + m->module().named_parameters().size());
  for (const std::string &p : c.problems) ADD_FAILURE() << p;
  std::printf("%s %s: %d tensors, max |error| %.3g, max |error| / max |value| %.3g (%s)\n",
              model.c_str(),
              mode == Mode::eager  ? "eager"
              : mode == Mode::full ? "full"
                                   : "regional",
              c.tensors, c.maxAbs, c.maxRel, c.worstAt.c_str());
}

TEST(ReferenceGrads, Gpt2EagerEqualsPyTorch) { checkAgainstPyTorch("gpt2", Mode::eager); }
TEST(ReferenceGrads, Gpt2CompiledEqualsPyTorch) { checkAgainstPyTorch("gpt2", Mode::full); }
TEST(ReferenceGrads, Gpt2RegionalEqualsPyTorch) { checkAgainstPyTorch("gpt2", Mode::regional); }
TEST(ReferenceGrads, LlamaEagerEqualsPyTorch) { checkAgainstPyTorch("llama", Mode::eager); }
TEST(ReferenceGrads, LlamaCompiledEqualsPyTorch) { checkAgainstPyTorch("llama", Mode::full); }
TEST(ReferenceGrads, LlamaRegionalEqualsPyTorch) { checkAgainstPyTorch("llama", Mode::regional); }

// ---- the checks themselves -------------------------------------------------------------

std::string tempPath(const std::string &name) {
  return std::string(RCJIT_BINARY_DIR) + "/reference_grads_test_" + name;
}

TEST(ReferenceGrads, AMissingOrBrokenFixtureIsAClearError) {
  std::string msg = errorOf([] { readFixture("gpt2", tempPath("absent.safetensors")); });
  EXPECT_NE(msg.find("absent.safetensors cannot be read"), std::string::npos) << msg;
  EXPECT_NE(msg.find("scripts/reference_grads.py"), std::string::npos) << msg;

  std::string junk = tempPath("junk.safetensors");
  std::ofstream(junk, std::ios::binary) << "not a safetensors file";
  msg = errorOf([&] { readFixture("gpt2", junk); });
  EXPECT_NE(msg.find(junk), std::string::npos) << msg;

  // the llama fixture read as gpt2's
  msg = errorOf([] { readFixture("gpt2", fixturePath("llama")); });
  EXPECT_NE(msg.find("a fixture of model 'llama', expected 'gpt2'"), std::string::npos) << msg;
  std::remove(junk.c_str());
}

// Rewrites the gpt2 fixture without `drop` (and with `extra` tensors) at `path`.
void rewriteFixture(const std::string &path, const std::string &drop,
                    const std::vector<std::pair<std::string, Tensor>> &extra = {}) {
  rcjit::SafetensorsReader reader(fixturePath("gpt2"));
  std::vector<std::pair<std::string, Tensor>> keep = extra;
  for (const rcjit::SafetensorsEntry &e : reader.entries()) {
    if (e.name != drop) keep.emplace_back(e.name, reader.read(e.name));
  }
  rcjit::writeSafetensors(path, keep, reader.metadata());
}

TEST(ReferenceGrads, AGradientMissingFromTheFixtureOrTheModelIsAProblem) {
  const std::string param = "transformer.h.1.mlp.c_fc.bias";
  std::string path = tempPath("dropped.safetensors");
  rewriteFixture(path, "grad." + param,
                 {{"grad.transformer.h.9.attn.c_attn.bias", Tensor::zeros({96})}});
  Fixture f = readFixture("gpt2", path);
  auto m = buildFromFixture(f);
  Comparison c = compareRun(runModel(*m, f, Mode::eager), f);
  std::string all;
  for (const std::string &p : c.problems) all += p + "\n";
  EXPECT_NE(all.find(param + ": " + path + " has no reference gradient grad." + param),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("grad.transformer.h.9.attn.c_attn.bias names no parameter of the model"),
            std::string::npos)
      << all;
  EXPECT_EQ(c.problems.size(), 2u) << all;

  // a weight missing from the fixture: loading fails naming it
  rewriteFixture(path, param);
  std::string msg = errorOf([&] { buildFromFixture(readFixture("gpt2", path)); });
  EXPECT_NE(msg.find(param), std::string::npos) << msg;
  std::remove(path.c_str());
}

TEST(ReferenceGrads, AWrongGradientIsReported) {
  Fixture f = readFixture("gpt2", fixturePath("gpt2"));
  auto m = buildFromFixture(f);
  RunResult r = runModel(*m, f, Mode::eager);
  const std::string param = "transformer.ln_f.weight";
  r.grads[param] = r.grads[param] * 1.01;
  Comparison c = compareRun(r, f);
  ASSERT_EQ(c.problems.size(), 1u);
  EXPECT_NE(c.problems[0].find("grad of " + param + ": "), std::string::npos) << c.problems[0];
}

} // namespace
