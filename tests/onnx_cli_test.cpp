// `rcjit run` and `rcjit bench --onnx` on the committed ONNX fixtures: outputs, .npy files,
// timing lines, and the errors for missing, unknown and mistyped inputs.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "tests/OnnxBuilder.h"
#include "tools/Cli.h"
#include "tools/Npy.h"
#include "tools/RunCommand.h"

namespace {

struct Result {
  int code;
  std::string out, err;
};

Result run(std::vector<std::string> args) {
  std::vector<const char *> argv = {"rcjit"};
  for (const std::string &a : args) argv.push_back(a.c_str());
  std::ostringstream out, err;
  int code = rcjit::tools::runCli(static_cast<int>(argv.size()), argv.data(), out, err);
  return {code, out.str(), err.str()};
}

const std::string kData = std::string(RCJIT_SOURCE_DIR) + "/tests/data/onnx/";
const std::string kBert = kData + "bert/model.onnx";
const std::string kGpt2 = kData + "gpt2/model.onnx";

std::string bertInput(int k, const std::string &name) {
  return name + "=" + kData + "bert/case" + std::to_string(k) + "/" + name + ".npy";
}

std::string tempDir(const std::string &name) {
  const std::string d =
      testing::TempDir() + "rcjit_onnx_cli_" + std::to_string(::getpid()) + "_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

// A token model written here (tests/OnnxBuilder.h), so that the tool's own behaviour is
// tested on ops every importer state has: input_ids i64 [batch, seq] -> Gather from an
// embedding [100, 8], times attention_mask i64 [batch, seq] (Cast, Unsqueeze), @ W [8, 4] ->
// logits [batch, seq, 4].
std::string tokenModel(const std::string &dir) {
  namespace b = rcjit::onnx::testing;
  std::vector<float> emb(800), w(32);
  for (size_t i = 0; i < emb.size(); ++i) emb[i] = static_cast<float>((i * 37) % 17) / 17 - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 11) % 7) / 7 - 0.4f;
  b::GraphSpec g;
  g.initializers = {b::floats("emb.weight", {100, 8}, emb), b::floats("proj.weight", {8, 4}, w),
                    b::int64s("last", {1}, {-1})};
  g.nodes = {
      b::node("Gather", {"emb.weight", "input_ids"}, {"e"}, "/emb/Gather", {b::attrInt("axis", 0)}),
      b::node("Cast", {"attention_mask"}, {"mf"}, "/Cast", {b::attrInt("to", b::kFloat)}),
      b::node("Unsqueeze", {"mf", "last"}, {"m3"}, "/Unsqueeze"),
      b::node("Mul", {"e", "m3"}, {"h"}, "/Mul"),
      b::node("MatMul", {"h", "proj.weight"}, {"logits"}, "/proj/MatMul")};
  g.inputs = {b::valueInfo("input_ids", b::kInt64, {-1, -1}, {"batch", "seq"}),
              b::valueInfo("attention_mask", b::kInt64, {-1, -1}, {"batch", "seq"})};
  g.outputs = {b::valueInfo("logits", b::kFloat, {-1, -1, 4}, {"batch", "seq"})};
  const std::string path = dir + "/tokens.onnx";
  std::ofstream(path, std::ios::binary) << b::model(g, 18);
  return path;
}

// .npy inputs of the token model: ids [2, 5] (the last row's last two tokens masked)
void tokenInputs(const std::string &dir) {
  std::vector<int64_t> ids = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};
  std::vector<int64_t> mask = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0};
  rcjit::tools::writeNpy(dir + "/input_ids.npy", rcjit::Tensor::from_vector(ids, {2, 5}));
  rcjit::tools::writeNpy(dir + "/attention_mask.npy", rcjit::Tensor::from_vector(mask, {2, 5}));
}

bool has(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

// logits of the token model computed with rcjit's ops from the file's weights
rcjit::Tensor tokenReference(const std::string &dir) {
  auto m = rcjit::onnx::load(dir + "/tokens.onnx");
  std::map<std::string, rcjit::Tensor> p;
  for (const auto &[n, t] : m.named_parameters()) p[n] = t.detach();
  const rcjit::Tensor ids = rcjit::tools::readNpy(dir + "/input_ids.npy");
  const rcjit::Tensor mask = rcjit::tools::readNpy(dir + "/attention_mask.npy");
  const rcjit::Tensor e =
      rcjit::embedding(p["emb.weight"], ids) * rcjit::unsqueeze(mask.to(rcjit::DType::f32), -1);
  return rcjit::matmul(e, p["proj.weight"]);
}

TEST(OnnxCli, RunPrintsTimesAndWritesOutputs) {
  const std::string dir = tempDir("run");
  const std::string model = tokenModel(dir);
  tokenInputs(dir);
  std::filesystem::create_directories(dir + "/expected");
  rcjit::tools::writeNpy(dir + "/expected/logits.npy", tokenReference(dir));
  for (const char *mode : {"eager", "full", "regional"}) {
    Result r = run({"run", model, "--input", "input_ids=" + dir + "/input_ids.npy", "--input",
                    "attention_mask=" + dir + "/attention_mask.npy", "--mode", mode, "--reps", "3",
                    "--output", dir + "/out", "--expected", dir + "/expected"});
    ASSERT_EQ(r.code, 0) << mode << "\n" << r.out << r.err;
    EXPECT_TRUE(has(r.out, "model " + model + ": opset 18")) << r.out;
    EXPECT_TRUE(has(r.out, "input  input_ids: i64 [2, 5] (declared [batch, seq]), from " + dir +
                               "/input_ids.npy"))
        << r.out;
    EXPECT_TRUE(has(r.out, "output logits: f32 [2, 5, 4]: ")) << r.out;
    EXPECT_TRUE(has(r.out, "mode " + std::string(mode) + ": first call ")) << r.out;
    EXPECT_TRUE(has(r.out, "then 3 calls: median ")) << r.out;
    EXPECT_TRUE(has(r.out, "wrote " + dir + "/out/logits.npy")) << r.out;
    EXPECT_TRUE(has(r.out, "logits: relative error ")) << r.out;
    EXPECT_TRUE(has(r.out, "(ok)")) << r.out;
    if (std::string(mode) != "eager") {
      EXPECT_TRUE(has(r.out, "1 compile")) << r.out;
    }
    // what was written: eager's values exactly; a compiled mode's up to the summation order
    // of its GEMM (one oneDNN call where eager's matmul runs another way)
    const rcjit::Tensor got = rcjit::tools::readNpy(dir + "/out/logits.npy");
    const rcjit::Tensor want = tokenReference(dir);
    ASSERT_EQ(got.shape(), want.shape()) << mode;
    if (std::string(mode) == "eager") {
      EXPECT_EQ(got.to_vector<float>(), want.to_vector<float>());
    } else {
      EXPECT_TRUE(rcjit::allclose(got, want, 1e-5, 1e-6)) << mode;
    }
  }
  // an expected file that differs: the error printed and exit 1; one of another shape too
  rcjit::tools::writeNpy(dir + "/expected/logits.npy", tokenReference(dir) * 1.01);
  Result off = run({"run", model, "--input", "input_ids=" + dir + "/input_ids.npy", "--input",
                    "attention_mask=" + dir + "/attention_mask.npy", "--reps", "1", "--expected",
                    dir + "/expected"});
  EXPECT_EQ(off.code, 1) << off.out;
  EXPECT_TRUE(has(off.out, "(over --rtol)")) << off.out;
  EXPECT_EQ(run({"run", model, "--input", "input_ids=" + dir + "/input_ids.npy", "--input",
                 "attention_mask=" + dir + "/attention_mask.npy", "--reps", "1", "--expected",
                 dir + "/expected", "--rtol", "0.05"})
                .code,
            0);
  rcjit::tools::writeNpy(dir + "/expected/logits.npy", rcjit::Tensor::zeros({2, 4}));
  Result shape = run({"run", model, "--input", "input_ids=" + dir + "/input_ids.npy", "--input",
                      "attention_mask=" + dir + "/attention_mask.npy", "--reps", "1", "--expected",
                      dir + "/expected"});
  EXPECT_EQ(shape.code, 1);
  EXPECT_TRUE(has(shape.out, "shape [2, 5, 4], expected [2, 4]")) << shape.out;
  std::filesystem::remove_all(dir);
}

TEST(OnnxCli, RunWithRandomInputsAndDynamicShapes) {
  const std::string dir = tempDir("random");
  const std::string model = tokenModel(dir);
  Result r = run({"run", model, "--shape", "input_ids=2x6", "--shape", "attention_mask=2x6",
                  "--mode", "full", "--dynamic", "--reps", "1", "--show", "3", "--output", dir});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, "input  input_ids: i64 [2, 6] (declared [batch, seq]), random")) << r.out;
  EXPECT_TRUE(has(r.out, "mode full, dynamic: first call")) << r.out;
  EXPECT_TRUE(has(r.out, "output logits: f32 [2, 6, 4]: ")) << r.out;
  EXPECT_TRUE(has(r.out, " ...\n")) << r.out;
  // the same seed gives the same values, another seed others
  auto logits = [&](const std::string &seed) {
    Result x = run({"run", model, "--shape", "input_ids=3x4", "--shape", "attention_mask=3x4",
                    "--reps", "1", "--seed", seed, "--output", dir});
    EXPECT_EQ(x.code, 0) << x.err;
    return rcjit::tools::readNpy(dir + "/logits.npy").to_vector<float>();
  };
  EXPECT_EQ(logits("5"), logits("5"));
  EXPECT_NE(logits("5"), logits("6"));
  // --int-max 1: every id is 0, so every row of the output is emb[0] @ W (the mask is ones)
  Result zero = run({"run", model, "--shape", "input_ids=1x3", "--shape", "attention_mask=1x3",
                     "--int-max", "1", "--reps", "1", "--output", dir});
  ASSERT_EQ(zero.code, 0) << zero.err;
  const std::vector<float> v = rcjit::tools::readNpy(dir + "/logits.npy").to_vector<float>();
  ASSERT_EQ(v.size(), 12u);
  for (size_t i = 4; i < 12; ++i) EXPECT_EQ(v[i], v[i % 4]) << i;
  std::filesystem::remove_all(dir);
}

TEST(OnnxCli, RunErrorsNameTheInput) {
  const std::string dir = tempDir("errors");
  const std::string model = tokenModel(dir);
  tokenInputs(dir);
  const std::string ids = "input_ids=" + dir + "/input_ids.npy";
  const std::string mask = "attention_mask=" + dir + "/attention_mask.npy";
  Result missing = run({"run", model, "--input", ids});
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(has(missing.err, "input 'attention_mask' i64 [batch, seq] has no value: give "
                               "--input attention_mask=FILE.npy or --shape"))
      << missing.err;
  Result unknown = run({"run", model, "--input", ids, "--input", mask, "--shape", "token=1x8"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_TRUE(has(unknown.err, "the model has no input 'token' (its inputs: input_ids, "
                               "attention_mask)"))
      << unknown.err;
  Result both = run({"run", model, "--input", ids, "--input", mask, "--shape", "input_ids=1x2"});
  EXPECT_EQ(both.code, 1);
  EXPECT_TRUE(has(both.err, "input 'input_ids' is given by both --input and --shape")) << both.err;
  // a float file for the token ids; a 1-d file for a [batch, seq] input
  rcjit::tools::writeNpy(dir + "/f.npy", rcjit::Tensor::zeros({2, 5}));
  rcjit::tools::writeNpy(dir + "/flat.npy", rcjit::Tensor::zeros({10}, rcjit::DType::i64));
  Result dtype = run({"run", model, "--input", "input_ids=" + dir + "/f.npy", "--input", mask});
  EXPECT_EQ(dtype.code, 1);
  EXPECT_TRUE(has(dtype.err, "input 'input_ids' (" + dir + "/f.npy): f32, but the model takes i64"))
      << dtype.err;
  Result shape = run({"run", model, "--input", "input_ids=" + dir + "/flat.npy", "--input", mask});
  EXPECT_EQ(shape.code, 1);
  EXPECT_TRUE(has(shape.err, "shape [10], but the model declares [batch, seq]")) << shape.err;
  // a file that is not ONNX, a missing one; a .npy file that is not NumPy's
  Result notOnnx = run({"run", dir + "/f.npy", "--shape", "x=1"});
  EXPECT_EQ(notOnnx.code, 1);
  EXPECT_TRUE(has(notOnnx.err, dir + "/f.npy")) << notOnnx.err;
  Result noFile = run({"run", dir + "/none.onnx"});
  EXPECT_EQ(noFile.code, 1);
  EXPECT_TRUE(has(noFile.err, "none.onnx")) << noFile.err;
  Result notNpy = run({"run", model, "--input", "input_ids=" + model, "--input", mask});
  EXPECT_EQ(notNpy.code, 1);
  EXPECT_TRUE(has(notNpy.err, "not a .npy file")) << notNpy.err;
  Result noOut =
      run({"run", model, "--input", ids, "--input", mask, "--output", dir + "/f.npy/sub"});
  EXPECT_EQ(noOut.code, 1);
  EXPECT_TRUE(has(noOut.err, "--output: cannot create the directory")) << noOut.err;
  // usage errors: exit 2, before the model is read
  EXPECT_EQ(run({"run"}).code, 2);
  EXPECT_EQ(run({"run", "--help"}).code, 0);
  EXPECT_EQ(run({"run", model, "--mode", "fast"}).code, 2);
  EXPECT_EQ(run({"run", model, "--dynamic"}).code, 2);
  EXPECT_EQ(run({"run", model, "--reps", "0"}).code, 2);
  Result badShape = run({"run", model, "--shape", "input_ids=1xq"});
  EXPECT_EQ(badShape.code, 2);
  EXPECT_TRUE(has(badShape.err, "is not a shape such as 1x128")) << badShape.err;
  EXPECT_EQ(run({"run", model, "--input", "input_ids"}).code, 2);
  EXPECT_EQ(run({"run", model, "--input", ids, "--input", ids}).code, 2);
  std::filesystem::remove_all(dir);
}

TEST(OnnxCli, BenchOnnxPrintsTheTable) {
  const std::string dir = tempDir("bench");
  const std::string model = tokenModel(dir);
  Result r = run({"bench", "--onnx", model, "--modes", "eager,full,dynamic", "--batch", "1,2",
                  "--seq", "6", "--reps", "2"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(has(r.out, model + " - cpu, f32, seq 6, 0 layers")) << r.out;
  EXPECT_TRUE(has(r.out, "Baseline (eager)        | 1x6")) << r.out;
  EXPECT_TRUE(has(r.out, "Full compilation        | 2x6")) << r.out;
  EXPECT_TRUE(has(r.out, "Full, dynamic seq       | 2x6")) << r.out;
  EXPECT_TRUE(has(r.out, "full b=2x6: 1 compile")) << r.out;
  // --shape sets batch and seq when --batch and --seq are not given
  Result s = run({"bench", "--onnx", model, "--shape", "input_ids=3x4", "--shape",
                  "attention_mask=3x4", "--modes", "eager", "--reps", "1"});
  ASSERT_EQ(s.code, 0) << s.out << s.err;
  EXPECT_TRUE(has(s.out, "Baseline (eager)        | 3x4")) << s.out;
  EXPECT_EQ(run({"bench", "--onnx", model, "--model", "gpt2"}).code, 2);
  EXPECT_EQ(run({"bench", "--onnx", model, "--warm"}).code, 2);
  EXPECT_EQ(run({"bench", "--onnx", model, "--shape", "input_ids=3"}).code, 1);
  Result missing = run({"bench", "--onnx", dir + "/nope.onnx", "--modes", "eager"});
  EXPECT_EQ(missing.code, 1);
  EXPECT_TRUE(has(missing.err, "nope.onnx")) << missing.err;
  std::filesystem::remove_all(dir);
}

// The committed exports (scripts/onnx_fixtures.py) through the tool: onnxruntime's outputs.
TEST(OnnxCli, RunExportedBertMatchesOnnxruntime) {
  const std::string dir = tempDir("bert");
  for (const char *mode : {"eager", "full", "regional"}) {
    Result r = run({"run", kBert, "--input", bertInput(1, "input_ids"), "--input",
                    bertInput(1, "attention_mask"), "--mode", mode, "--reps", "1", "--output", dir,
                    "--expected", kData + "bert/case1/expected"});
    ASSERT_EQ(r.code, 0) << mode << "\n" << r.out << r.err;
    EXPECT_TRUE(has(r.out, "output last_hidden_state: f32 [2, 5, 64]: ")) << r.out;
    EXPECT_TRUE(has(r.out, "output pooler_output: f32 [2, 64]: ")) << r.out;
    EXPECT_FALSE(has(r.out, "over --rtol")) << r.out;
  }
  EXPECT_TRUE(std::filesystem::exists(dir + "/pooler_output.npy"));
  std::filesystem::remove_all(dir);
  Result g =
      run({"run", kGpt2, "--shape", "input_ids=2x7", "--mode", "full", "--dynamic", "--reps", "1"});
  ASSERT_EQ(g.code, 0) << g.out << g.err;
  EXPECT_TRUE(has(g.out, "output logits: f32 [2, 7, 100]: ")) << g.out;
}

} // namespace
