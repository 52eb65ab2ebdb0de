// The model zoo: registry, parameter arithmetic, eager and compiled forwards, dtypes, memory.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <cmath>
#include <functional>

#include <rcjit/rcjit.h>

#include "models/ModelCommon.h"
#include "models/ModelLlama.h"
#include "models/ModelVitGpt2.h"
#include "models/Models.h"

using namespace rcjit;
using namespace rcjit::tools;

namespace {

using rcjit::test::errorOf;

LlamaConfig tinyLlama(bool tied = true) {
  LlamaConfig c;
  c.name = "tiny-llama";
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = 2;
  c.intermediate = 64;
  c.vocab = 50;
  c.tiedEmbeddings = tied;
  c.ropeFactor = 8; // exercise Llama 3 scaling
  c.originalMaxPositions = 64;
  return c;
}

Gpt2Config tinyGpt2() {
  Gpt2Config c;
  c.name = "tiny-gpt2";
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.vocab = 50;
  c.context = 16;
  return c;
}

VitGpt2Config tinyVitGpt2() {
  VitGpt2Config c;
  c.encoder.image = 32;
  c.encoder.patch = 16;
  c.encoder.hidden = 32;
  c.encoder.layers = 1;
  c.encoder.heads = 4;
  c.encoder.intermediate = 64;
  c.decoder = tinyGpt2();
  c.decoder.layers = 1;
  c.decoder.crossAttention = true;
  return c;
}

ModelConfig smallRun(uint64_t seed = 1) {
  ModelConfig c;
  c.batch = 2;
  c.seq = 8;
  c.seed = seed;
  return c;
}

bool hasParameter(Model &m, const std::string &name) {
  for (const auto &[n, t] : m.module().named_parameters()) {
    if (n == name) return true;
  }
  return false;
}

// compile() in full and in regional mode against eager, on the model's own inputs.
void expectCompiledMatchesEager(Model &m, const ModelConfig &c) {
  std::vector<Tensor> in = m.makeInputs(c);
  Tensor ref = m.forward(in);
  auto cf = compile([&](const std::vector<Tensor> &x) { return m.forward(x); });
  Tensor y = cf(in);
  EXPECT_EQ(y.shape(), ref.shape());
  EXPECT_TRUE(allclose(y, ref, 1e-3, 1e-4));
  EXPECT_TRUE(allclose(cf(in), ref, 1e-3, 1e-4));
  EXPECT_EQ(cf.stats().compiles, 1);
  CompileOptions regional;
  regional.mode = Mode::regional;
  auto cr = compile([&](const std::vector<Tensor> &x) { return m.forward(x); }, regional);
  EXPECT_TRUE(allclose(cr(in), ref, 1e-3, 1e-4));
  EXPECT_TRUE(allclose(cr(in), ref, 1e-3, 1e-4));
  EXPECT_GE(cr.stats().compiles, 1);
}

TEST(ModelsRegistry, OrderAndRealParameterCounts) {
  std::vector<std::string> names;
  for (const ModelInfo &m : builtinModels()) names.push_back(m.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"toy64", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
                                      "llama-2-13b", "gpt2", "gpt2-xl", "vit-gpt2"}));
  EXPECT_EQ(findModel("toy64").parameters, 14190);
  EXPECT_EQ(findModel("llama-3.2-1b").parameters, 1235814400);
  EXPECT_EQ(findModel("llama-3.2-3b").parameters, 3212749824);
  EXPECT_EQ(findModel("llama-3.1-8b").parameters, 8030261248);
  EXPECT_EQ(findModel("llama-2-13b").parameters, 13015864320);
  EXPECT_EQ(findModel("gpt2").parameters, 124439808);
  EXPECT_EQ(findModel("gpt2-xl").parameters, 1557611200);
  EXPECT_EQ(findModel("vit-gpt2").parameters, 238605312);
  for (const ModelInfo &m : builtinModels()) EXPECT_EQ(m.bytesF32, 4 * m.parameters);
  ModelConfig two;
  two.layers = 2;
  EXPECT_EQ(findModel("toy64").countParameters(two), 550);
  EXPECT_EQ(findModel("llama-3.2-1b").countParameters(two), 262668288 + 2 * 60821504 + 2048);
}

TEST(ModelsRegistry, Toy64KeepsItsStructure) {
  ModelConfig c;
  auto m = findModel("toy64").build(c);
  EXPECT_EQ(m->module().named_parameters().size(), 258u);
  EXPECT_EQ(parameterCount(m->module()), findModel("toy64").parameters);
}

TEST(ModelsRegistry, CountsMatchBuiltModels) {
  ModelConfig c = smallRun();
  for (bool tied : {true, false}) {
    EXPECT_EQ(parameterCount(buildLlama(tinyLlama(tied), c)->module()),
              llamaParameterCount(tinyLlama(tied)));
  }
  EXPECT_EQ(parameterCount(buildGpt2(tinyGpt2(), c)->module()), gpt2ParameterCount(tinyGpt2()));
  EXPECT_EQ(parameterCount(buildVitGpt2(tinyVitGpt2(), c)->module()),
            vitGpt2ParameterCount(tinyVitGpt2()));
  c.layers = 0;
  EXPECT_EQ(parameterCount(findModel("gpt2").build(c)->module()),
            findModel("gpt2").countParameters(c));
}

TEST(ModelsRegistry, RefusesModelsThatDoNotFit) {
  ModelConfig c;
  c.memoryLimit = 1000000000;
  std::string e = errorOf([&] { findModel("llama-3.2-1b").build(c); });
  EXPECT_NE(e.find("does not fit in memory"), std::string::npos) << e;
  EXPECT_NE(e.find("4943257600 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("1000000000 bytes"), std::string::npos) << e;
  c.dtype = DType::bf16;
  e = errorOf([&] { findModel("llama-2-13b").build(c); });
  EXPECT_NE(e.find("26031728640 bytes"), std::string::npos) << e;
  ModelConfig real; // against MemAvailable: only where 13B in f32 cannot fit
  if (availableMemoryBytes() < findModel("llama-2-13b").bytesF32) {
    e = errorOf([&] { findModel("llama-2-13b").build(real); });
    EXPECT_NE(e.find("does not fit in memory"), std::string::npos) << e;
  }
  c.dtype = DType::i32;
  EXPECT_NE(errorOf([&] { buildLlama(tinyLlama(), c); }).find("f32 or bf16"), std::string::npos);
}

TEST(ModelsLlama, ForwardShapesNamesAndDeterminism) {
  ModelConfig c = smallRun();
  auto m = buildLlama(tinyLlama(), c);
  std::vector<Tensor> in = m->makeInputs(c);
  ASSERT_EQ(in.size(), 1u);
  EXPECT_EQ(in[0].dtype(), DType::i64);
  Tensor y = m->forward(in);
  EXPECT_EQ(y.shape(), (Shape{2, 8, 50}));
  EXPECT_TRUE(allclose(y, buildLlama(tinyLlama(), c)->forward(in), 0, 0));
  EXPECT_FALSE(allclose(y, buildLlama(tinyLlama(), smallRun(2))->forward(in), 1e-3, 1e-4));
  EXPECT_TRUE(hasParameter(*m, "model.layers.1.self_attn.k_proj.weight"));
  EXPECT_TRUE(hasParameter(*m, "model.embed_tokens.weight"));
  EXPECT_FALSE(hasParameter(*m, "lm_head.weight"));
  EXPECT_TRUE(hasParameter(*buildLlama(tinyLlama(false), c), "lm_head.weight"));
  const auto &model = m->module().children().at(0).second;
  EXPECT_TRUE(model->children().at(1).second->isModuleList());
}

TEST(ModelsLlama, ShorterSequenceIsCausalPrefix) {
  ModelConfig c = smallRun();
  auto m = buildLlama(tinyLlama(), c);
  Tensor ids = m->makeInputs(c)[0];
  Tensor full = m->forward({ids});
  Tensor part = m->forward({slice(ids, 1, 0, 5).contiguous()});
  EXPECT_TRUE(allclose(part, slice(full, 1, 0, 5), 1e-4, 1e-5));
  ModelConfig longer = c;
  longer.seq = 9;
  std::string e = errorOf([&] { m->forward(m->makeInputs(longer)); });
  EXPECT_NE(e.find("exceeds the RoPE tables"), std::string::npos) << e;
}

TEST(ModelsLlama, GroupedQueryAttentionEqualsRepeatedKvHeads) {
  // head i of a GQA model reads kv head i / (heads / kvHeads), like HF's repeat_kv
  ModelConfig c = smallRun();
  auto gqa = buildLlama(tinyLlama(), c);
  LlamaConfig full = tinyLlama();
  full.kvHeads = full.heads;
  auto mha = buildLlama(full, smallRun(2));
  auto src = gqa->module().named_parameters();
  auto dst = mha->module().named_parameters();
  ASSERT_EQ(src.size(), dst.size());
  for (size_t i = 0; i < src.size(); ++i) {
    Tensor w = src[i].second;
    if (w.shape() != dst[i].second.shape()) { // k_proj, v_proj: [kvHeads * headDim, hidden]
      Tensor heads = unsqueeze(reshape(w, {2, 8, 32}), 1);
      w = reshape(expand(heads, {2, 2, 8, 32}), {32, 32});
    }
    dst[i].second.copy_(w);
  }
  std::vector<Tensor> in = gqa->makeInputs(c);
  EXPECT_TRUE(allclose(gqa->forward(in), mha->forward(in), 1e-5, 1e-6));
}

TEST(ModelsLlama, RopeScaling) {
  std::vector<double> plain = llamaInvFreq(llama2_13b());
  EXPECT_EQ(plain.size(), 64u);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  std::vector<double> scaled = llamaInvFreq(llama31_8b());
  EXPECT_DOUBLE_EQ(scaled[0], 1.0); // high frequencies are kept
  LlamaConfig unscaled = llama31_8b();
  unscaled.ropeFactor = 0;
  EXPECT_DOUBLE_EQ(scaled.back(), llamaInvFreq(unscaled).back() / 8); // low ones divided
}

TEST(ModelsLlama, CompiledMatchesEager) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  ModelConfig c = smallRun();
  expectCompiledMatchesEager(*buildLlama(tinyLlama(false), c), c);
}

TEST(ModelsLlama, Bf16ParametersAndActivations) {
  ModelConfig c = smallRun();
  c.dtype = DType::bf16;
  auto m = buildLlama(tinyLlama(), c);
  for (const auto &[name, t] : m->module().named_parameters()) {
    EXPECT_EQ(t.dtype(), DType::bf16) << name;
  }
  Tensor y = m->forward(m->makeInputs(c));
  EXPECT_EQ(y.dtype(), DType::bf16);
  Tensor ref = buildLlama(tinyLlama(), smallRun())->forward(m->makeInputs(c));
  EXPECT_TRUE(allclose(y.to(DType::f32), ref, 0.1, 0.05));
}

TEST(ModelsCommon, Bf16EveryFamily) {
  ModelConfig c = smallRun();
  c.batch = 1;
  c.dtype = DType::bf16;
  std::vector<std::unique_ptr<Model>> models;
  models.push_back(buildLlama(tinyLlama(), c));
  models.push_back(buildGpt2(tinyGpt2(), c));
  models.push_back(buildVitGpt2(tinyVitGpt2(), c));
  ModelConfig toy = c;
  toy.layers = 2;
  models.push_back(findModel("toy64").build(toy));
  for (auto &m : models) {
    for (const auto &[name, t] : m->module().named_parameters()) {
      EXPECT_EQ(t.dtype(), DType::bf16) << name;
    }
    Tensor y = m->forward(m->makeInputs(c));
    EXPECT_EQ(y.dtype(), DType::bf16);
    for (float v : y.to_vector<float>()) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(ModelsGpt2, ForwardNamesAndCompile) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  ModelConfig c = smallRun();
  auto m = buildGpt2(tinyGpt2(), c);
  Tensor y = m->forward(m->makeInputs(c));
  EXPECT_EQ(y.shape(), (Shape{2, 8, 50}));
  EXPECT_TRUE(allclose(y, buildGpt2(tinyGpt2(), c)->forward(m->makeInputs(c)), 0, 0));
  EXPECT_TRUE(hasParameter(*m, "transformer.h.1.attn.c_attn.bias"));
  EXPECT_TRUE(hasParameter(*m, "transformer.wpe.weight"));
  ModelConfig tooLong = c;
  tooLong.seq = 17;
  std::string e = errorOf([&] { m->forward(m->makeInputs(tooLong)); });
  EXPECT_NE(e.find("exceeds the context of 16"), std::string::npos) << e;
  expectCompiledMatchesEager(*m, c);
}

TEST(ModelsVitGpt2, ForwardNamesAndCompile) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  ModelConfig c = smallRun();
  c.batch = 1;
  auto m = buildVitGpt2(tinyVitGpt2(), c);
  std::vector<Tensor> in = m->makeInputs(c);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].shape(), (Shape{1, 3, 32, 32}));
  EXPECT_EQ(m->forward(in).shape(), (Shape{1, 8, 50}));
  EXPECT_TRUE(hasParameter(*m, "encoder.encoder.layer.0.attention.attention.query.weight"));
  EXPECT_TRUE(hasParameter(*m, "encoder.embeddings.patch_embeddings.projection.weight"));
  EXPECT_TRUE(hasParameter(*m, "decoder.transformer.h.0.crossattention.q_attn.weight"));
  std::string e = errorOf([&] { m->forward({Tensor::zeros({1, 3, 16, 16}), in[1]}); });
  EXPECT_NE(e.find("pixels must be [batch, 3, 32, 32]"), std::string::npos) << e;
  expectCompiledMatchesEager(*m, c);
}

TEST(ModelsCommon, ParamInitIsSeededWithStd) {
  ParamInit a(7, DType::f32), b(7, DType::f32);
  Tensor x = a.normal({256, 256});
  EXPECT_TRUE(allclose(x, b.normal({256, 256}), 0, 0));
  EXPECT_FALSE(allclose(x, a.normal({256, 256}), 0, 1e-3)); // next parameter, next seed
  double m = mean(x).item();
  double sd = std::sqrt(mean(x * x).item() - m * m);
  EXPECT_NEAR(m, 0.0, 1e-3);
  EXPECT_NEAR(sd, 0.02, 1e-3);
}

} // namespace
