// ZeRO as compiler passes under mpirun: 20 steps of the 2-layer gpt2 (global batch 8,
// TrainingBatches.h) compiled with dist::ZeroOptimizer stage 3 and the pass schedule zero3
// (+ prefetch, + selective_unshard) give one process's loss curve and final parameters; the
// compiled code gathers and reduce-scatters (no eager gather hook runs), and each rank holds a
// fraction of one process's model state.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unistd.h>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"
#include "tests/TestUtil.h"
#include "tests/mpi/TrainingBatches.h"
#include "tests/mpi/ZeroTraining.h"
#include "tools/Cli.h"

namespace rcjit {
namespace {

using test::errorOf;
using test::kMpiGlobalBatch;
using test::kMpiSeq;
using test::kMpiSteps;
using test::mpiGlobalBatch;

using PassRun = test::ZeroTrainRun;

// 20 compiled steps (full mode): ZeroOptimizer stage 3 with `schedule` when sharded, else one
// process with AdamW on the whole batch.
PassRun passTrain(bool sharded, std::vector<ScheduleStep> schedule = {}, int64_t memoryBudget = 0,
                  Mode mode = Mode::full) {
  return test::zeroTrain({.stage = sharded ? 3 : -1,
                          .mode = mode,
                          .bucketBytes = int64_t{25} << 20,
                          .schedule = std::move(schedule),
                          .memoryBudget = memoryBudget});
}

// The all_gathers of the compiled training entry's forward or backward program, as explain()
// prints them ("step 7: start all_gather %51" ... "step 9: wait all_gather %51 (started at
// step 7)"): per gather, how many steps after its start it is waited for.
std::vector<int> gatherGaps(const std::string &explain, const std::string &half) {
  const size_t from = explain.find(half + " program:");
  if (from == std::string::npos) return {};
  size_t to = explain.find(" program:", from + half.size() + 10);
  const std::string text =
      explain.substr(from, to == std::string::npos ? std::string::npos : to - from);
  std::vector<int> gaps;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const size_t w = line.find(": wait all_gather ");
    const size_t at = line.find("(started at step ");
    if (w == std::string::npos || at == std::string::npos) continue;
    const int waitStep = std::stoi(line.substr(line.find("step ") + 5));
    const int startStep = std::stoi(line.substr(at + 17));
    gaps.push_back(waitStep - startStep);
  }
  return gaps;
}
size_t programGathers(const std::string &explain, const std::string &half) {
  return gatherGaps(explain, half).size();
}

const PassRun &oneProcess() {
  static std::optional<PassRun> one;
  if (!one) one = passTrain(false);
  return *one;
}

// Tolerance as zero_test.cpp's (the gradients are the same f32 sums in another order): every
// step's loss within 1e-5 relative; AdamW's final parameters within rtol 1e-4, atol 2e-4.
void expectPassesMatch(const std::vector<ScheduleStep> &schedule, const std::string &what,
                       int64_t budget = 0, Mode mode = Mode::full, PassRun *out = nullptr) {
  const PassRun &one = oneProcess();
  PassRun run = passTrain(true, schedule, budget, mode);
  if (out) *out = run;
  ASSERT_EQ(run.losses.size(), one.losses.size());
  double worstLoss = 0, worstParam = 0;
  for (size_t i = 0; i < one.losses.size(); ++i) {
    const double rel = std::abs(run.losses[i] - one.losses[i]) / std::abs(one.losses[i]);
    worstLoss = std::max(worstLoss, rel);
    EXPECT_LE(rel, 1e-5) << what << " step " << i << ": " << run.losses[i] << " vs one process "
                         << one.losses[i];
  }
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.4) << "the loss falls";
  ASSERT_EQ(run.params.size(), one.params.size());
  for (size_t i = 0; i < one.params.size(); ++i) {
    ASSERT_TRUE(run.params[i].defined()) << "parameter " << i;
    EXPECT_TRUE(allclose(run.params[i], one.params[i], 1e-4, 2e-4)) << what << " parameter " << i;
    worstParam = std::max(worstParam, amax(abs(run.params[i] - one.params[i]), {}, false).item());
  }
  // the compiled code gathered: the optimizer's eager hooks never did
  EXPECT_EQ(run.gathers, 0) << what;
  EXPECT_EQ(run.stats.fallbacks, 0) << what;
  if (dist::rank() == 0) {
    std::printf("%s on %d ranks (compiled, AdamW): losses %.3f -> %.3f, largest loss difference "
                "%.3g (relative), largest parameter difference %.3g; model state %.0f KiB (one "
                "process %.0f KiB), step peak %.0f KiB (one process %.0f KiB)\n",
                what.c_str(), dist::world_size(), one.losses.front(), one.losses.back(), worstLoss,
                worstParam, run.stateBytes / 1024.0, one.stateBytes / 1024.0,
                run.peakBytes / 1024.0, one.peakBytes / 1024.0);
  }
}

TEST(ZeroPasses, Zero3CompiledEqualsOneProcess) { expectPassesMatch({{0, {"zero3"}}}, "zero3"); }

TEST(ZeroPasses, Zero3PrefetchCompiledEqualsOneProcess) {
  expectPassesMatch({{0, {"zero3", "prefetch"}}}, "zero3 + prefetch");
  // without prefetch each gather is waited for at the next step; with it, the gathers after
  // the first start a unit earlier, with compute steps between start and wait
  PassRun z3 = passTrain(true, {{0, {"zero3"}}});
  PassRun pf = passTrain(true, {{0, {"zero3", "prefetch"}}});
  for (const char *half : {"forward", "backward"}) {
    const std::vector<int> plain = gatherGaps(z3.explain, half),
                           ahead = gatherGaps(pf.explain, half);
    ASSERT_EQ(plain.size(), ahead.size()) << half;
    ASSERT_GE(ahead.size(), 2u) << half;
    for (int g : plain) EXPECT_EQ(g, 1) << half << ": no prefetch, no overlap";
    // the first gather has nothing before it to overlap (the second one starts beside it)
    EXPECT_LE(ahead.front(), 2) << half;
    for (size_t k = 1; k < ahead.size(); ++k) EXPECT_GT(ahead[k], 2) << half << " gather " << k;
  }
}

TEST(ZeroPasses, Zero3PrefetchWithinABudgetEqualsOneProcess) {
  expectPassesMatch({{0, {"zero3", "prefetch"}}}, "zero3 + prefetch (1 MiB budget)", 1 << 20);
}

TEST(ZeroPasses, Zero3SelectiveUnshardEqualsOneProcess) {
  expectPassesMatch({{0, {"zero3", "selective_unshard", "prefetch"}}},
                    "zero3 + selective_unshard + prefetch");
  // the backward gathers one unit fewer: the smallest (the embeddings and final norm, 1/2.4
  // of a block) crosses from the forward gathered
  PassRun z3 = passTrain(true, {{0, {"zero3"}}});
  PassRun sel = passTrain(true, {{0, {"zero3", "selective_unshard"}}});
  EXPECT_EQ(programGathers(z3.explain, "forward"), 3u);
  EXPECT_EQ(programGathers(z3.explain, "backward"), 3u);
  EXPECT_EQ(programGathers(sel.explain, "forward"), 3u);
  EXPECT_EQ(programGathers(sel.explain, "backward"), 2u);
}

// ZeRO stages 1 and 2 as a pass: the compiled backward reduce-scatters each unit's gradient
// (64 KiB buckets: several units) right after its last part; opt.step() only updates the
// slices and all-gathers them. One process's losses and parameters; the optimizer reduced
// nothing itself, and the backward program holds the reduce-scatters.
TEST(ZeroPasses, Zero1AndZero2PassesEqualOneProcess) {
  const PassRun &one = oneProcess();
  for (int stage : {1, 2}) {
    const std::string pass = "zero" + std::to_string(stage);
    PassRun run = test::zeroTrain({.stage = stage, .mode = Mode::full, .schedule = {{0, {pass}}}});
    ASSERT_EQ(run.losses.size(), one.losses.size());
    double worst = 0;
    for (size_t i = 0; i < one.losses.size(); ++i) {
      const double rel = std::abs(run.losses[i] - one.losses[i]) / std::abs(one.losses[i]);
      worst = std::max(worst, rel);
      EXPECT_LE(rel, 1e-5) << pass << " step " << i;
    }
    ASSERT_EQ(run.params.size(), one.params.size());
    double worstParam = 0;
    for (size_t i = 0; i < one.params.size(); ++i) {
      EXPECT_TRUE(allclose(run.params[i], one.params[i], 1e-4, 2e-4)) << pass << " parameter " << i;
      worstParam = std::max(worstParam, amax(abs(run.params[i] - one.params[i]), {}, false).item());
    }
    EXPECT_EQ(run.reductions, 0) << pass << ": the compiled backward reduced the gradients";
    EXPECT_GE(run.units, 2) << pass;
    const size_t bwd = run.explain.find("backward program:");
    ASSERT_NE(bwd, std::string::npos) << run.explain;
    EXPECT_NE(run.explain.find("start reduce_scatter", bwd), std::string::npos) << run.explain;
    if (dist::rank() == 0) {
      std::printf("%s pass on %d ranks: %d units, largest loss difference %.3g (relative), "
                  "largest parameter difference %.3g\n",
                  pass.c_str(), dist::world_size(), run.units, worst, worstParam);
    }
  }
}

// Regional mode: each stage (a block, the glue before and after) gathers its own unit inside
// the stage and reduce-scatters its gradient in the stage's backward; the two blocks share one
// compiled stage (its shards bound per layer), and the result is one process's.
TEST(ZeroPasses, Zero3RegionalEqualsOneProcess) {
  const std::vector<ScheduleStep> schedule = {{0, {"zero3"}},
                                              {2, {"zero3", "selective_unshard", "prefetch"}}};
  PassRun run;
  expectPassesMatch(schedule, "zero3 regional", 0, Mode::regional, &run);
  // glue, h.0, h.1 (h.0's stage again), glue: 3 training stages compiled (a forward and a
  // backward each) per pass list, the second block's reused
  EXPECT_EQ(run.stats.recompiles, 1);
  EXPECT_NE(run.explain.find("stage 2: transformer.h.1 (reused)"), std::string::npos)
      << run.explain;
  EXPECT_NE(run.explain.find("stage 1: transformer.h.0 (compiled)"), std::string::npos)
      << run.explain;
  const PassRun &one = oneProcess();
  const int w = dist::world_size();
  if (w >= 2) {
    EXPECT_LE(static_cast<double>(run.stateBytes) / static_cast<double>(one.stateBytes),
              1.0 / w + 0.03)
        << "each rank holds its slice of everything";
  }
}

// DeepCompile's schedule: zero3 from the first step, then prefetch and selective_unshard:
// one recompile, which the recompiles log names.
TEST(ZeroPasses, DefaultScheduleRecompilesOnceAndSaysWhy) {
  const std::vector<ScheduleStep> schedule = {{0, {"zero3"}},
                                              {3, {"zero3", "selective_unshard", "prefetch"}}};
  expectPassesMatch(schedule, "the default schedule");
  PassRun run = passTrain(true, schedule);
  EXPECT_EQ(run.stats.recompiles, 1);
  EXPECT_NE(run.explain.find("the pass schedule reached step 3: passes [zero3] -> [zero3, "
                             "selective_unshard, prefetch]"),
            std::string::npos)
      << run.explain;
}

// One process holds parameters, gradients and AdamW's two moments; zero3 on W ranks a 1/W
// slice of each; the gathered blocks live only inside the compiled programs.
TEST(ZeroPasses, Zero3CompiledHoldsAFractionOfOneProcesssModelState) {
  const PassRun &one = oneProcess();
  PassRun z3 = passTrain(true, {{0, {"zero3", "prefetch"}}});
  const int w = dist::world_size();
  const double ratio = static_cast<double>(z3.stateBytes) / static_cast<double>(one.stateBytes);
  if (dist::rank() == 0) {
    std::printf("zero3 compiled on %d ranks: %lld bytes of model state per rank after a step, one "
                "process %lld (ratio %.3f); step peak %lld vs %lld\n",
                w, static_cast<long long>(z3.stateBytes), static_cast<long long>(one.stateBytes),
                ratio, static_cast<long long>(z3.peakBytes), static_cast<long long>(one.peakBytes));
  }
  EXPECT_GT(one.stateBytes, 0);
  EXPECT_NEAR(static_cast<double>(z3.stateBytes), static_cast<double>(z3.ledger.total()),
              0.02 * static_cast<double>(one.stateBytes));
  EXPECT_LE(ratio, 1.0 / w + 0.03) << "each rank holds its slice of everything";
  if (w == 4) {
    EXPECT_LE(ratio, 1.0 / 3);
  }
  if (w >= 2) { // the gathered blocks are freed after their last use: the peak is lower too
    EXPECT_LT(z3.peakBytes, one.peakBytes);
  }
}

TEST(ZeroPasses, Zero3CompiledWithoutThePassIsAnError) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 4;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.stage = 3});
  auto compiled = compile([&](const std::vector<Tensor> &in) { return m->forward(in); });
  const std::string msg = errorOf([&] { compiled(std::vector<Tensor>{mpiGlobalBatch(0).first}); });
  EXPECT_NE(msg.find("a parameter sharded over " + std::to_string(dist::world_size()) +
                     " ranks (ZeRO stage 3: this rank holds only its shard): compile it with a "
                     "pass schedule that runs the zero3 pass"),
            std::string::npos)
      << msg;
}

// Inference through the same passes: a no-grad forward compiled with zero3 gives the eager
// model's logits.
TEST(ZeroPasses, Zero3CompiledForwardEqualsTheFullModel) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 8;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  dist::broadcast_parameters(m->module().parameters());
  const Tensor ids = slice(mpiGlobalBatch(0).first, 0, 0, 2).contiguous();
  Tensor want;
  {
    NoGradGuard ng;
    want = m->forward({ids}).contiguous();
  }
  dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.stage = 3});
  auto compiled = compile([&](const std::vector<Tensor> &in) { return m->forward(in); },
                          CompileOptions{.schedule = {{0, {"zero3", "prefetch"}}}});
  NoGradGuard ng;
  Tensor got = compiled(std::vector<Tensor>{ids});
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5));
  got = compiled(std::vector<Tensor>{ids}); // the entry reused
  EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5));
  EXPECT_EQ(compiled.stats().compiles, 1);
}

// `rcjit train --dist zero3` with the default modes (eager, full, regional; the default
// schedule for the compiled ones) trains as one process does.
TEST(ZeroPasses, TrainCommandZero3CompiledEqualsOneProcess) {
  auto run = [](const std::string &distMode, const std::string &json) {
    std::vector<std::string> args = {"rcjit",   "train",  "--model", "toy64", "--layers", "2",
                                     "--batch", "8",      "--seq",   "4",     "--steps",  "5",
                                     "--dist",  distMode, "--json",  json};
    std::vector<const char *> argv;
    for (const std::string &a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    int code = tools::runCli(static_cast<int>(argv.size()), argv.data(), out, err);
    EXPECT_EQ(code, 0) << err.str();
    return out.str();
  };
  // this process's own files (rank 0 writes and reads them): runs at once do not share them
  const std::string dir = testing::TempDir(),
                    rank = std::to_string(dist::rank()) + "_" + std::to_string(::getpid());
  const std::string oneJson = dir + "zp_none_" + rank + ".json",
                    json = dir + "zp_z3_" + rank + ".json";
  run("none", oneJson);
  const std::string table = run("zero3", json);
  if (dist::rank() != 0) { // only rank 0 prints and writes the JSON file
    EXPECT_EQ(table, "");
    return;
  }
  nlohmann::json one = nlohmann::json::parse(std::ifstream(oneJson));
  nlohmann::json z = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(z["dist"], "zero3");
  EXPECT_EQ(z["schedule"], "default");
  ASSERT_EQ(z["results"].size(), 3u);
  for (size_t mi = 0; mi < 3; ++mi) {
    // inference after the training stays sharded (gathers per unit): no full weight copies
    // are packed (one process's compiled modes pack its weights)
    if (dist::world_size() > 1) {
      EXPECT_EQ(z["results"][mi]["packed_weight_mib"].get<double>(), 0.0) << mi;
    }
    for (int i = 0; i < 5; ++i) {
      double a = one["results"][mi]["losses"][i], b = z["results"][mi]["losses"][i];
      EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << "mode " << mi << " step " << i;
    }
  }
}

} // namespace
} // namespace rcjit
