// safetensors: round trips of every dtype, loading checkpoints by HF names, error messages.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include <rcjit/rcjit.h>

#include "models/ModelLlama.h"
#include "models/ModelVitGpt2.h"
#include "models/Safetensors.h"

using namespace rcjit;
using namespace rcjit::tools;

namespace {

using rcjit::test::errorOf;

// A fresh file path under the test temp dir, removed at scope exit.
struct TempFile : test::TempFile {
  explicit TempFile(const std::string &name) : test::TempFile("st", name) {}
};

void writeRaw(const std::string &path, const std::string &header, const std::string &data) {
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char *>(&n), 8);
  out << header << data;
}

LlamaConfig tinyLlama(bool tied) {
  LlamaConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = 2;
  c.intermediate = 48;
  c.vocab = 40;
  c.tiedEmbeddings = tied;
  return c;
}

Gpt2Config tinyGpt2() {
  Gpt2Config c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.vocab = 40;
  c.context = 16;
  return c;
}

ModelConfig run(uint64_t seed) {
  ModelConfig c;
  c.batch = 2;
  c.seq = 6;
  c.seed = seed;
  return c;
}

TEST(Safetensors, RoundTripsEveryDtypeAndMetadata) {
  TempFile f("dtypes.safetensors");
  Tensor x = Tensor::randn({3, 5}, 1);
  std::vector<std::pair<std::string, Tensor>> ts = {{"f32", x},
                                                    {"f16", x.to(DType::f16)},
                                                    {"bf16", x.to(DType::bf16)},
                                                    {"f64", x.to(DType::f64)},
                                                    {"i64", Tensor::arange(7)},
                                                    {"i32", Tensor::arange(4, DType::i32)},
                                                    {"bool", gt(x, 0.0)},
                                                    {"strided", transpose(x, 0, 1)},
                                                    {"scalar", Tensor::full({}, 2.5)}};
  writeSafetensors(f.path, ts, {{"format", "pt"}});
  SafetensorsReader r(f.path);
  EXPECT_EQ(r.metadata().at("format"), "pt");
  EXPECT_EQ(r.entries().size(), ts.size());
  std::map<std::string, Tensor> back = readSafetensors(f.path);
  for (const auto &[name, t] : ts) {
    ASSERT_TRUE(back.count(name)) << name;
    EXPECT_EQ(back[name].dtype(), t.dtype()) << name;
    EXPECT_EQ(back[name].shape(), t.shape()) << name;
    EXPECT_EQ(back[name].to_vector<double>(), t.to_vector<double>()) << name;
  }
}

TEST(Safetensors, LlamaWeightsLoadIntoAnotherSeed) {
  for (bool tied : {true, false}) {
    TempFile f("llama.safetensors");
    auto a = buildLlama(tinyLlama(tied), run(1));
    auto b = buildLlama(tinyLlama(tied), run(2));
    std::vector<Tensor> in = a->makeInputs(run(1));
    ASSERT_FALSE(allclose(a->forward(in), b->forward(in), 1e-3, 1e-4));
    saveWeights(a->module(), f.path, WeightNaming::llama());
    SafetensorsReader r(f.path);
    ASSERT_NE(r.find("model.layers.0.self_attn.q_proj.weight"), nullptr);
    EXPECT_EQ(r.find("lm_head.weight") != nullptr, !tied);
    LoadReport rep = loadWeights(b->module(), f.path, WeightNaming::llama());
    EXPECT_TRUE(rep.missing.empty());
    EXPECT_EQ(rep.loaded.size(), b->module().named_parameters().size());
    EXPECT_TRUE(allclose(a->forward(in), b->forward(in), 0, 0));
  }
}

TEST(Safetensors, ShardedCheckpoint) {
  TempFile f1("shard1.safetensors"), f2("shard2.safetensors");
  auto a = buildLlama(tinyLlama(false), run(1));
  std::vector<std::pair<std::string, Tensor>> all = a->module().named_parameters();
  size_t half = all.size() / 2;
  writeSafetensors(f1.path, {all.begin(), all.begin() + half});
  writeSafetensors(f2.path, {all.begin() + half, all.end()});
  auto b = buildLlama(tinyLlama(false), run(2));
  std::string e = errorOf([&] { loadWeights(b->module(), f1.path, WeightNaming::llama()); });
  EXPECT_NE(e.find("missing parameters ["), std::string::npos) << e;
  loadWeights(b->module(), {f1.path, f2.path}, WeightNaming::llama());
  std::vector<Tensor> in = a->makeInputs(run(1));
  EXPECT_TRUE(allclose(a->forward(in), b->forward(in), 0, 0));
}

TEST(Safetensors, TiedLlamaIgnoresAnLmHeadCopy) {
  TempFile f("tied.safetensors");
  auto a = buildLlama(tinyLlama(true), run(1));
  std::vector<std::pair<std::string, Tensor>> ts = a->module().named_parameters();
  ts.emplace_back("lm_head.weight", ts.front().second);
  writeSafetensors(f.path, ts);
  LoadReport rep = loadWeights(a->module(), f.path, WeightNaming::llama());
  EXPECT_EQ(rep.ignored, (std::vector<std::string>{"lm_head.weight"}));
}

TEST(Safetensors, Gpt2Conv1DWeightsAreTransposed) {
  TempFile f("gpt2.safetensors");
  auto a = buildGpt2(tinyGpt2(), run(1));
  auto b = buildGpt2(tinyGpt2(), run(2));
  saveWeights(a->module(), f.path, WeightNaming::gpt2());
  SafetensorsReader r(f.path);
  const SafetensorsEntry *e = r.find("transformer.h.0.attn.c_attn.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (Shape{32, 96})); // Conv1D: [in, out]
  loadWeights(b->module(), f.path, WeightNaming::gpt2());
  std::vector<Tensor> in = a->makeInputs(run(1));
  EXPECT_TRUE(allclose(a->forward(in), b->forward(in), 0, 0));
}

TEST(Safetensors, Gpt2ModelCheckpointWithBuffersAndBf16) {
  // GPT2Model's names (no "transformer."), attention-mask buffers, bf16 data into f32
  TempFile f("gpt2model.safetensors");
  auto a = buildGpt2(tinyGpt2(), run(1));
  std::vector<std::pair<std::string, Tensor>> ts;
  for (auto &[name, t] : a->module().named_parameters()) {
    bool conv = name.find(".c_") != std::string::npos && name.ends_with(".weight");
    ts.emplace_back(name.substr(12), (conv ? transpose(t, 0, 1) : t).to(DType::bf16));
  }
  ts.emplace_back("h.0.attn.bias", Tensor::ones({1, 1, 16, 16}));
  writeSafetensors(f.path, ts);
  auto b = buildGpt2(tinyGpt2(), run(2));
  LoadReport rep = loadWeights(b->module(), f.path, WeightNaming::gpt2());
  EXPECT_EQ(rep.ignored, (std::vector<std::string>{"h.0.attn.bias"}));
  for (auto &[name, t] : b->module().named_parameters()) EXPECT_EQ(t.dtype(), DType::f32);
  std::vector<Tensor> in = a->makeInputs(run(1));
  EXPECT_TRUE(allclose(a->forward(in), b->forward(in), 0.02, 0.02));
}

TEST(Safetensors, VitGpt2RoundTrip) {
  TempFile f("vitgpt2.safetensors");
  VitGpt2Config cfg;
  cfg.encoder = {32, 16, 3, 32, 1, 4, 64, 1e-12};
  cfg.decoder = tinyGpt2();
  cfg.decoder.layers = 1;
  cfg.decoder.crossAttention = true;
  ModelConfig c = run(1);
  c.batch = 1;
  auto a = buildVitGpt2(cfg, c);
  saveWeights(a->module(), f.path, WeightNaming::vitGpt2());
  EXPECT_EQ(
      SafetensorsReader(f.path).find("decoder.transformer.h.0.crossattention.c_attn.weight")->shape,
      (Shape{32, 64}));
  c.seed = 2;
  auto b = buildVitGpt2(cfg, c);
  loadWeights(b->module(), f.path, WeightNaming::vitGpt2());
  std::vector<Tensor> in = a->makeInputs(c);
  EXPECT_TRUE(allclose(a->forward(in), b->forward(in), 0, 0));
}

TEST(Safetensors, ShapeDtypeAndNameMismatchesAreErrors) {
  TempFile f("bad.safetensors");
  auto m = buildLlama(tinyLlama(true), run(1));
  std::vector<std::pair<std::string, Tensor>> ts = m->module().named_parameters();
  Tensor before = ts[1].second.clone();
  ts[1].second = Tensor::zeros({3, 3});
  writeSafetensors(f.path, ts);
  std::string e = errorOf([&] { loadWeights(m->module(), f.path, WeightNaming::llama()); });
  EXPECT_NE(e.find(f.path), std::string::npos) << e;
  EXPECT_NE(e.find("'" + ts[1].first + "': shape [3, 3] does not match"), std::string::npos) << e;
  EXPECT_TRUE(allclose(m->module().named_parameters()[0].second, ts[0].second, 0, 0));
  EXPECT_TRUE(allclose(m->module().named_parameters()[1].second, before, 0, 0));

  ts[1].second = Tensor::zeros(before.shape(), DType::i64);
  writeSafetensors(f.path, ts);
  e = errorOf([&] { loadWeights(m->module(), f.path, WeightNaming::llama()); });
  EXPECT_NE(e.find("dtype i64 cannot be converted"), std::string::npos) << e;

  ts.erase(ts.begin() + 1);
  ts.emplace_back("model.extra.weight", Tensor::zeros({2}));
  writeSafetensors(f.path, ts);
  e = errorOf([&] { loadWeights(m->module(), f.path, WeightNaming::llama()); });
  EXPECT_NE(e.find("missing parameters [" + m->module().named_parameters()[1].first + "]"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("unexpected tensors [model.extra.weight]"), std::string::npos) << e;
  LoadReport rep = loadWeights(m->module(), f.path, WeightNaming::llama(), false);
  EXPECT_EQ(rep.missing.size(), 1u);
  EXPECT_EQ(rep.unexpected, (std::vector<std::string>{"model.extra.weight"}));
}

TEST(Safetensors, CorruptFilesAreErrors) {
  TempFile f("corrupt.safetensors");
  auto err = [&] { return errorOf([&] { SafetensorsReader r(f.path); }); };
  EXPECT_NE(err().find("cannot open"), std::string::npos);
  writeSafetensors(f.path, {{"w", Tensor::ones({4, 4})}});
  std::filesystem::resize_file(f.path, std::filesystem::file_size(f.path) - 8);
  std::string e = err();
  EXPECT_NE(e.find("tensor 'w': data_offsets [0, 64] out of range"), std::string::npos) << e;
  EXPECT_NE(e.find(f.path), std::string::npos) << e;
  std::filesystem::resize_file(f.path, 5);
  EXPECT_NE(err().find("truncated: 5 bytes"), std::string::npos) << err();
  writeRaw(f.path, "{\"w\": {\"dtype\": ", "");
  EXPECT_NE(err().find("bad JSON header"), std::string::npos) << err();
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", "");
  std::ofstream(f.path, std::ios::binary | std::ios::in).write("\xff\xff\xff\x7f", 4);
  EXPECT_NE(err().find("header length 2147483647 exceeds"), std::string::npos) << err();
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}",
           std::string(8, '\0'));
  EXPECT_NE(err().find("hold 8 bytes but F32 [3] needs 12"), std::string::npos) << err();
  writeRaw(f.path, "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "x");
  EXPECT_NE(err().find("tensor 'w': unsupported dtype 'U8'"), std::string::npos) << err();
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}", "");
  EXPECT_NE(err().find("lacks \"data_offsets\""), std::string::npos) << err();
  writeRaw(f.path, "[1, 2]", "");
  EXPECT_NE(err().find("must be an object"), std::string::npos) << err();
}

TEST(Safetensors, OffsetsAndSizesThatWrapAreErrors) {
  TempFile f("wrap.safetensors");
  auto err = [&] { return errorOf([&] { SafetensorsReader r(f.path); }); };
  // 2^64 - 8 read as int64 was -8: the 8 header bytes before the data loaded as weights.
  writeRaw(f.path,
           "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [18446744073709551608, "
           "0]}}",
           std::string(8, '\0'));
  std::string e = err();
  EXPECT_NE(e.find("tensor 'w': \"data_offsets\" must hold integers in [0, 2^63), got "
                   "18446744073709551608"),
            std::string::npos)
      << e;
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [-8, 0]}}",
           std::string(8, '\0'));
  EXPECT_NE(err().find("\"data_offsets\" must hold integers"), std::string::npos) << err();
  // [2^32, 2^32] wrapped to 0 bytes and passed the size check with offsets [0, 0].
  writeRaw(f.path,
           "{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": "
           "[0, 0]}}",
           "");
  e = err();
  EXPECT_NE(e.find("tensor 'w': shape [4294967296, 4294967296] has about 1.84e+19 elements"),
            std::string::npos)
      << e;
  writeRaw(f.path,
           "{\"w\": {\"dtype\": \"F32\", \"shape\": [9223372036854775808], \"data_offsets\": "
           "[0, 0]}}",
           "");
  EXPECT_NE(err().find("\"shape\" must hold integers in [0, 2^63)"), std::string::npos) << err();
}

TEST(Safetensors, JsonErrorsOfEveryKindAreRcjitErrors) {
  TempFile f("json.safetensors");
  auto err = [&] { return errorOf([&] { SafetensorsReader r(f.path); }); };
  // nlohmann's out_of_range (number overflow) escaped as a foreign exception.
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [1e999], \"data_offsets\": [0, 4]}}",
           std::string(4, '\0'));
  std::string e = err();
  EXPECT_NE(e.find("bad JSON header"), std::string::npos) << e;
  // Nesting deeper than a header has is refused while parsing.
  writeRaw(f.path, "{\"w\": {\"dtype\": \"F32\", \"shape\": [[[[1]]]], \"data_offsets\": [0, 4]}}",
           std::string(4, '\0'));
  e = err();
  EXPECT_NE(e.find("bad JSON header: nested deeper"), std::string::npos) << e;
}

TEST(Safetensors, HeadersOverTheCapAreRefusedBeforeReading) {
  // A 20 MB header (sparse file) is refused from its length alone: parsing such a header
  // took ~20x its size in memory.
  TempFile f("bighead.safetensors");
  writeRaw(f.path, "{}", "");
  const uint64_t n = 20'000'000;
  std::ofstream(f.path, std::ios::binary | std::ios::in)
      .write(reinterpret_cast<const char *>(&n), 8);
  std::filesystem::resize_file(f.path, 8 + n);
  std::string e = errorOf([&] { SafetensorsReader r(f.path); });
  EXPECT_NE(e.find("header length 20000000 exceeds rcjit's limit of 16777216 bytes"),
            std::string::npos)
      << e;
}

} // namespace
