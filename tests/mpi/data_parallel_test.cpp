// Data-parallel training over rcjit::dist: 20 steps of the built-in 2-layer gpt2 on a global
// batch of 8, split over the ranks with the gradients averaged, give one process's loss curve
// and final parameters on the full batch; and `rcjit train --dist ddp` does the same.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include <rcjit/DistPasses.h>
#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "tests/TestUtil.h"
#include "tests/mpi/TrainingBatches.h"
#include "tools/Cli.h"

namespace rcjit {
namespace {

using test::errorOf;

using test::kMpiGlobalBatch;
using test::kMpiSeq;
using test::kMpiSteps;
using test::mpiGlobalBatch;

struct Curve {
  std::vector<double> losses;
  std::vector<Tensor> params;
  int buckets = 0;
  int graphAllReduces = 0; // all_reduce nodes in the compiled backward (the graph pass)
};

// How a ddp run averages its gradients: after backward() (all_reduce_gradients), or inside
// the compiled backward (dist::ddp_gradient_pass, scheduled from step 0).
enum class Averaging { afterBackward, graphPass };

// 20 AdamW steps of the 2-layer gpt2 (hidden 64, 4 heads, vocab 256). With `ddp`, this rank
// trains on its rows of each global batch and averages the gradients over the ranks (its
// weights start from another seed on ranks other than 0: broadcast_parameters fixes them);
// without, it trains alone on the whole batch. The losses are the global batch's means.
// The all_reduce nodes test_count_all_reduces saw in the last backward graph compiled.
int &backwardAllReduces() {
  static int n = 0;
  return n;
}

Curve train(bool ddp, Mode mode, bool adamw, Averaging how = Averaging::afterBackward) {
  const int world = ddp ? dist::world_size() : 1, rank = ddp ? dist::rank() : 0;
  tools::ModelConfig c;
  c.batch = kMpiGlobalBatch / world;
  c.seq = kMpiSeq;
  c.seed = rank == 0 ? 0 : 1000 + static_cast<uint64_t>(rank);
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  Curve out;
  out.params = m->module().parameters();
  if (ddp) dist::broadcast_parameters(out.params);
  std::unique_ptr<optim::Optimizer> opt;
  if (adamw) {
    opt = std::make_unique<optim::AdamW>(out.params, optim::AdamWOptions{.lr = 3e-3});
  } else {
    opt = std::make_unique<optim::SGD>(out.params, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  }
  CompileOptions opts{.mode = mode};
  const bool graphPass = ddp && how == Averaging::graphPass;
  if (graphPass) {
    // 64 KiB buckets, as below; the second pass counts the all_reduce nodes the first placed
    if (!has_scheduled_pass("test_ddp_gradients"))
      register_scheduled_pass("test_ddp_gradients", dist::ddp_gradient_pass(64 << 10));
    if (!has_scheduled_pass("test_count_all_reduces")) {
      register_scheduled_pass("test_count_all_reduces", [](const Graph &g, const PassContext &ctx) {
        if (ctx.backward) {
          int n = 0;
          for (const Node &node : g.nodes) n += node.op == OpKind::all_reduce;
          backwardAllReduces() = n;
        }
        return g;
      });
    }
    opts.schedule = {{0, {"test_ddp_gradients", "test_count_all_reduces"}}};
    backwardAllReduces() = 0;
  }
  auto loss = compile(
      [&](const std::vector<Tensor> &in) { return cross_entropy(m->forward({in[0]}), in[1]); },
      opts);
  for (int step = 0; step < kMpiSteps; ++step) {
    auto [ids, next] = mpiGlobalBatch(step);
    const int64_t rows = kMpiGlobalBatch / world;
    ids = slice(ids, 0, rank * rows, (rank + 1) * rows).contiguous();
    next = slice(next, 0, rank * rows, (rank + 1) * rows).contiguous();
    opt->zero_grad();
    Tensor l = loss(std::vector<Tensor>{ids, next});
    l.backward();
    // small buckets: several all_reduces in flight at once
    if (ddp && !graphPass) out.buckets = dist::all_reduce_gradients(out.params, 64 << 10).buckets;
    opt->step();
    Tensor mean = Tensor::full({}, l.item(), DType::f64);
    if (ddp) dist::all_reduce(mean, dist::ReduceOp::mean);
    out.losses.push_back(mean.item());
  }
  if (graphPass) out.graphAllReduces = backwardAllReduces();
  return out;
}

// Averaging equal slices' gradients is the full batch's gradient up to rounding (f32 sums in
// another order). Tolerance: every step's loss within 1e-5 relative (measured: at most
// 1.7e-7 on 2 and 4 ranks); with SGD the final parameters within rtol 1e-5, atol 1e-6
// (measured: at most 1.3e-7 apart). AdamW divides each gradient by its own running scale,
// so where a gradient is near zero (a sum that cancels) a rounding difference moves the
// parameter by up to a fraction of the learning rate: there atol 2e-4 (lr 3e-3; measured:
// at most 4e-5 apart).
void expectSameTraining(Mode mode, bool adamw, double paramRtol, double paramAtol,
                        Averaging how = Averaging::afterBackward) {
  Curve one = train(false, mode, adamw), ddp = train(true, mode, adamw, how);
  ASSERT_EQ(ddp.losses.size(), one.losses.size());
  double worstLoss = 0;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    const double rel = std::abs(ddp.losses[i] - one.losses[i]) / std::abs(one.losses[i]);
    worstLoss = std::max(worstLoss, rel);
    EXPECT_LE(rel, 1e-5) << "step " << i << ": ddp " << ddp.losses[i] << ", one process "
                         << one.losses[i];
  }
  if (adamw) { // measured: 5.58 -> 4.92 (SGD at a stable rate barely moves in 20 steps)
    EXPECT_LT(one.losses.back(), one.losses.front() - 0.4) << "the loss falls";
  }
  ASSERT_EQ(ddp.params.size(), one.params.size());
  double worstParam = 0;
  for (size_t i = 0; i < one.params.size(); ++i) {
    EXPECT_TRUE(allclose(ddp.params[i], one.params[i], paramRtol, paramAtol)) << "parameter " << i;
    Tensor diff = abs(ddp.params[i] - one.params[i]);
    worstParam = std::max(worstParam, amax(diff, {}, false).item());
  }
  if (how == Averaging::graphPass) {
    EXPECT_GT(ddp.graphAllReduces, 1) << "the backward graph holds the buckets' all_reduces";
    ddp.buckets = ddp.graphAllReduces;
  } else if (dist::world_size() > 1) {
    EXPECT_GT(ddp.buckets, 1);
  }
  if (dist::rank() == 0) {
    std::printf("ddp on %d ranks (%s, %s): losses %.3f -> %.3f, largest loss difference %.3g "
                "(relative), largest parameter difference %.3g; %d gradient buckets\n",
                dist::world_size(),
                mode == Mode::eager           ? "eager"
                : how == Averaging::graphPass ? "compiled, all_reduce nodes in the backward"
                                              : "compiled",
                adamw ? "AdamW" : "SGD", one.losses.front(), one.losses.back(), worstLoss,
                worstParam, ddp.buckets);
  }
}

TEST(DataParallel, Gpt2EagerEqualsOneProcessOnTheFullBatch) {
  expectSameTraining(Mode::eager, false, 1e-5, 1e-6);
}
TEST(DataParallel, Gpt2CompiledEqualsOneProcessOnTheFullBatch) {
  expectSameTraining(Mode::full, false, 1e-5, 1e-6);
}
// Compiled ddp as a graph pass: the backward graph all-reduces the gradients in buckets, each
// started as soon as its gradients exist (dist::ddp_gradient_pass).
TEST(DataParallel, Gpt2CompiledGraphPassEqualsOneProcessOnTheFullBatch) {
  expectSameTraining(Mode::full, false, 1e-5, 1e-6, Averaging::graphPass);
}
TEST(DataParallel, Gpt2AdamWEqualsOneProcessOnTheFullBatch) {
  expectSameTraining(Mode::eager, true, 1e-4, 2e-4);
}

TEST(DataParallel, GradientsAreAveragedInBuckets) {
  const int w = dist::world_size(), r = dist::rank();
  std::vector<Tensor> params = {
      Tensor::zeros({3, 4}).requires_grad_(), Tensor::zeros({5}, DType::f64).requires_grad_(),
      Tensor::zeros({2}).requires_grad_(), Tensor::zeros({6}).requires_grad_()};
  // gradients r + 1 (+ the element index), and none for params[2]
  Tensor l = sum(params[0] * (r + 1.0)) + sum(params[1] * (r + 1.0)) +
             sum(params[3] * (Tensor::arange(6, DType::f32) + (r + 1.0)));
  l.backward();
  dist::GradSyncStats st = dist::all_reduce_gradients(params, 16); // 4 f32 per bucket
  const double mean = (w + 1) / 2.0;
  EXPECT_TRUE(allclose(params[0].grad(), Tensor::full({3, 4}, mean), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(params[1].grad(), Tensor::full({5}, mean, DType::f64), 1e-12, 1e-12));
  EXPECT_FALSE(params[2].grad().defined());
  EXPECT_TRUE(allclose(params[3].grad(), Tensor::arange(6, DType::f32) + mean, 1e-6, 1e-6));
  EXPECT_EQ(st.buckets, 3); // [3, 4] alone (larger than a bucket), the f64, then [6] alone
  EXPECT_EQ(st.bytes, 12 * 4 + 5 * 8 + 6 * 4);
  EXPECT_GE(st.waitSeconds, 0);
  std::string msg = errorOf([&] { dist::all_reduce_gradients(params, 0); });
  EXPECT_NE(msg.find("bucket_bytes is not positive"), std::string::npos) << msg;
}

// Inside a compiled whole step (backward() and the averaging in one graph) the same buckets
// are nodes: cat, one all_reduce(mean), slices written back into grad().
TEST(DataParallel, GradientsAreAveragedInBucketsInsideACompiledStep) {
  const int w = dist::world_size(), r = dist::rank();
  std::vector<Tensor> params = {
      Tensor::zeros({3, 4}).requires_grad_(), Tensor::zeros({5}, DType::f64).requires_grad_(),
      Tensor::zeros({2}).requires_grad_(), Tensor::zeros({6}).requires_grad_()};
  dist::GradSyncStats st;
  auto step = compile([&](const Tensor &k) { // k = r + 1
    Tensor l = sum(params[0] * k) + sum(params[1] * k.to(DType::f64)) +
               sum(params[3] * (Tensor::arange(6, DType::f32) + k));
    l.backward();
    st = dist::all_reduce_gradients(params, 16); // 4 f32 per bucket
    return l.detach();
  });
  step(Tensor::full({}, r + 1.0));
  const double mean = (w + 1) / 2.0;
  EXPECT_TRUE(allclose(params[0].grad(), Tensor::full({3, 4}, mean), 1e-6, 1e-6));
  EXPECT_TRUE(allclose(params[1].grad(), Tensor::full({5}, mean, DType::f64), 1e-12, 1e-12));
  EXPECT_FALSE(params[2].grad().defined());
  EXPECT_TRUE(allclose(params[3].grad(), Tensor::arange(6, DType::f32) + mean, 1e-6, 1e-6));
  EXPECT_EQ(st.buckets, 3);
  EXPECT_EQ(st.bytes, 12 * 4 + 5 * 8 + 6 * 4);
  // what cannot be averaged is an Error at the compile
  auto bad = [](int64_t bucket, DType dt) {
    Tensor p = Tensor::zeros({4}, dt).requires_grad_();
    auto f = compile([&, bucket](const Tensor &x) {
      Tensor l = sum((p.to(DType::f32) * x));
      l.backward();
      dist::all_reduce_gradients({p}, bucket);
      return l.detach();
    });
    return errorOf([&] { f(Tensor::ones({4})); });
  };
  std::string msg = bad(0, DType::f32);
  EXPECT_NE(msg.find("inside a compiled function: bucket_bytes must be positive, got 0"),
            std::string::npos)
      << msg;
  msg = bad(64, DType::bf16);
  EXPECT_NE(msg.find("gradient 0 is bf16 (the mean takes f32 and f64 gradients"), std::string::npos)
      << msg;
}

TEST(DataParallel, RanksWithDifferentGradientsAreAnErrorOnEveryRank) {
  if (dist::world_size() == 1) GTEST_SKIP() << "needs 2 ranks or more";
  std::vector<Tensor> params = {Tensor::zeros({4}).requires_grad_(),
                                Tensor::zeros({2}).requires_grad_()};
  Tensor l = sum(params[0]);
  if (dist::rank() == 1) l = l + sum(params[1]); // rank 1 has a gradient the others lack
  l.backward();
  std::string msg = errorOf([&] { dist::all_reduce_gradients(params); });
  EXPECT_NE(msg.find("the ranks' tensors disagree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: 2 gradients of 6 elements"), std::string::npos) << msg;
  std::vector<Tensor> fewer(params.begin(), params.begin() + (dist::rank() == 0 ? 1 : 2));
  msg = errorOf([&] { dist::broadcast_parameters(fewer); });
  EXPECT_NE(msg.find("dist::broadcast_parameters (rank "), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0: 1 parameters of 4 elements"), std::string::npos) << msg;
}

// `rcjit train --dist ddp` on toy64: the global batch split over the ranks trains as
// `--dist none` does on one process, eagerly, in full mode and as a compiled whole step;
// rank 0 writes the table and the JSON.
TEST(DataParallel, TrainCommandDdpEqualsOneProcess) {
  auto run = [](const std::string &distMode, const std::string &json) {
    std::vector<std::string> args = {
        "rcjit",  "train",  "--model", "toy64",   "--layers",    "2",       "--batch",
        "8",      "--seq",  "4",       "--steps", "5",           "--modes", "eager,full,whole",
        "--dist", distMode, "--json",  json,      "--bucket-mb", "0.001"};
    std::vector<const char *> argv;
    for (const std::string &a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    int code = tools::runCli(static_cast<int>(argv.size()), argv.data(), out, err);
    EXPECT_EQ(code, 0) << err.str();
    return out.str();
  };
  // a name per process: the mpi CTest entries (1, 2 and 4 ranks) may run at the same time
  const std::string dir = testing::TempDir(), rank = std::to_string(getpid());
  const std::string oneJson = dir + "ddp_none_" + rank + ".json",
                    ddpJson = dir + "ddp_ddp_" + rank + ".json";
  // a file of an earlier run's rank 0 whose pid this rank now has would pass for this run's
  std::remove(oneJson.c_str());
  std::remove(ddpJson.c_str());
  struct Cleanup { // each rank's own files (without --dist every rank writes its JSON)
    const std::string &a, &b;
    ~Cleanup() {
      std::remove(a.c_str());
      std::remove(b.c_str());
    }
  } cleanup{oneJson, ddpJson};
  run("none", oneJson);
  std::string table = run("ddp", ddpJson);
  if (dist::rank() != 0) {
    EXPECT_EQ(table, "") << "only rank 0 prints";
    EXPECT_FALSE(std::ifstream(ddpJson).good()) << "only rank 0 writes the JSON";
    return;
  }
  EXPECT_NE(table.find("ddp on " + std::to_string(dist::world_size()) + " rank"), std::string::npos)
      << table;
  EXPECT_NE(table.find("waiting on the gradients' all_reduce"), std::string::npos) << table;
  nlohmann::json one = nlohmann::json::parse(std::ifstream(oneJson));
  nlohmann::json ddp = nlohmann::json::parse(std::ifstream(ddpJson));
  EXPECT_EQ(ddp["world_size"], dist::world_size());
  EXPECT_EQ(ddp["batch"], 8);
  EXPECT_NE(table.find("averaged inside the compiled step"), std::string::npos) << table;
  ASSERT_EQ(ddp["results"].size(), 3u);
  for (size_t m = 0; m < 3; ++m) {
    for (int i = 0; i < 5; ++i) {
      double a = one["results"][m]["losses"][i], b = ddp["results"][m]["losses"][i];
      EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << "mode " << m << " step " << i;
    }
    EXPECT_GT(ddp["results"][m]["tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(ddp["results"][m]["comm_wait_ms_steps"].size(), 5u);
    // between steps every mode holds what eager ddp holds (parameters, gradients, AdamW's
    // state), up to the tail of a bucket an eighth of its first gradient's size, kept
    // rather than copying that gradient: no gradient keeps its bucket's whole buffer alive
    const double held = ddp["results"][m]["model_state_mib"],
                 eagerHeld = ddp["results"][0]["model_state_mib"];
    EXPECT_NEAR(held, eagerHeld, 0.03 * eagerHeld) << "mode " << m;
  }
}

TEST(DataParallel, TrainCommandRefusesWhatIsNotBuilt) {
  auto run = [](std::vector<const char *> args) {
    args.insert(args.begin(), {"rcjit", "train", "--model", "toy64"});
    std::ostringstream out, err;
    int code = tools::runCli(static_cast<int>(args.size()), args.data(), out, err);
    return std::make_pair(code, err.str());
  };
  auto [code, err] = run({"--dist", "fsdp"});
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.find("--dist: unknown mode 'fsdp' (expected none, ddp, zero1, zero2 or zero3)"),
            std::string::npos)
      << err;
  auto [cw, ew] = run({"--dist", "zero2", "--modes", "whole"});
  EXPECT_EQ(cw, 2);
  EXPECT_NE(ew.find("--modes whole with --dist zero2 is not built yet"), std::string::npos) << ew;
  if (dist::world_size() > 1) { // 7 rows do not split over 2 or 4 ranks
    auto [c7, e7] = run({"--dist", "ddp", "--batch", "7"});
    EXPECT_EQ(c7, 2);
    EXPECT_NE(e7.find("--batch 7 is the global batch: it must be divisible by the"),
              std::string::npos)
        << e7;
  }
}

} // namespace
} // namespace rcjit
