// ZeRO over rcjit::dist: 20 steps of the built-in 2-layer gpt2 on a global batch of 8 under
// ddp, zero1, zero2 and zero3 give one process's loss curve and final parameters on the full
// batch; zero3 holds a fraction of one process's model state; `rcjit train --dist zeroN`
// does the same; bad uses are clear errors on every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

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

using ZeroRun = test::ZeroTrainRun;

ZeroRun zeroTrain(int stage, bool adamw, Mode mode = Mode::eager, bool prefetch = false) {
  return test::zeroTrain({.stage = stage, .adamw = adamw, .mode = mode, .prefetch = prefetch});
}

// Tolerance, as for ddp (data_parallel_test): the gradients are the same sums of f32 terms in
// another order. Every step's loss within 1e-5 relative; SGD's final parameters within
// rtol 1e-5, atol 1e-6; AdamW's within atol 2e-4 (AdamW divides each gradient by its own
// running scale, so rounding in a gradient near zero moves a parameter by a fraction of the
// learning rate 3e-3).
void expectZeroMatches(int stage, bool adamw, Mode mode = Mode::eager, bool prefetch = false) {
  static std::optional<ZeroRun> oneAdam, oneSgd; // eager, shared by the tests
  std::optional<ZeroRun> fresh, &one = mode != Mode::eager ? fresh : adamw ? oneAdam : oneSgd;
  if (!one) one = zeroTrain(-1, adamw, mode);
  ZeroRun run = zeroTrain(stage, adamw, mode, prefetch);
  ASSERT_EQ(run.losses.size(), one->losses.size());
  double worstLoss = 0, worstParam = 0;
  for (size_t i = 0; i < one->losses.size(); ++i) {
    const double rel = std::abs(run.losses[i] - one->losses[i]) / std::abs(one->losses[i]);
    worstLoss = std::max(worstLoss, rel);
    EXPECT_LE(rel, 1e-5) << "step " << i << ": " << run.losses[i] << " vs one process "
                         << one->losses[i];
  }
  if (adamw) {
    EXPECT_LT(one->losses.back(), one->losses.front() - 0.4) << "the loss falls";
  }
  ASSERT_EQ(run.params.size(), one->params.size());
  for (size_t i = 0; i < one->params.size(); ++i) {
    ASSERT_TRUE(run.params[i].defined()) << "parameter " << i;
    EXPECT_TRUE(allclose(run.params[i], one->params[i], adamw ? 1e-4 : 1e-5, adamw ? 2e-4 : 1e-6))
        << "parameter " << i;
    worstParam = std::max(worstParam, amax(abs(run.params[i] - one->params[i]), {}, false).item());
  }
  if (stage >= 1) {
    EXPECT_GT(run.units, 1);
  }
  if (stage == 3) { // units h.0, h.1 and the rest
    EXPECT_EQ(run.units, 3);
    // per step: the rest, h.0 and h.1 in the forward (h.0 released when h.1 is called), and
    // h.0 again for its backward: the blocks really are released and gathered back (with
    // prefetch, h.1's gather starts while h.0 runs: the same number)
    EXPECT_EQ(run.gathers, 4 * kMpiSteps);
  }
  if (dist::rank() == 0) {
    std::printf("%s%s on %d ranks (%s, %s): losses %.3f -> %.3f, largest loss difference %.3g "
                "(relative), largest parameter difference %.3g; model state %.0f KiB (one "
                "process %.0f KiB), step peak %.0f KiB (one process %.0f KiB)\n",
                stage == 0 ? "ddp" : ("zero" + std::to_string(stage)).c_str(),
                prefetch ? " + prefetch" : "", dist::world_size(),
                mode == Mode::eager ? "eager" : "compiled", adamw ? "AdamW" : "SGD",
                one->losses.front(), one->losses.back(), worstLoss, worstParam,
                run.stateBytes / 1024.0, one->stateBytes / 1024.0, run.peakBytes / 1024.0,
                one->peakBytes / 1024.0);
  }
}

TEST(Zero, DdpEqualsOneProcess) { expectZeroMatches(0, true); }
TEST(Zero, Stage1EqualsOneProcess) { expectZeroMatches(1, true); }
TEST(Zero, Stage2EqualsOneProcess) { expectZeroMatches(2, true); }
TEST(Zero, Stage3EqualsOneProcess) { expectZeroMatches(3, true); }
TEST(Zero, Stage3SgdEqualsOneProcess) { expectZeroMatches(3, false); }
TEST(Zero, Stage3PrefetchEqualsOneProcess) { expectZeroMatches(3, true, Mode::eager, true); }
TEST(Zero, Stage2CompiledEqualsOneProcess) { expectZeroMatches(2, true, Mode::full); }

// Checkpoints hold every parameter and the optimizer's state whole: 10 steps, a checkpoint,
// and 10 more resumed from it give the 20 steps of one run, whichever stage (or one process)
// saved it and whichever resumes it; ZeroOptimizer's state_dict() is optim::AdamW's.
TEST(Zero, CheckpointsResumeOnAnyStageOrInOneProcess) {
  const std::string path = testing::TempDir() + "rcjit_zero_ckpt_" + std::to_string(::getppid()) +
                           ".safetensors"; // mpirun's: shared
  for (bool adamw : {true, false}) {
    const ZeroRun one = zeroTrain(-1, adamw);
    // saved by, resumed by: stages 3 -> 1, 1 -> one process, one process -> 2, 2 -> 3
    const std::vector<std::pair<int, int>> pairs = {{3, 1}, {1, -1}, {-1, 2}, {2, 3}};
    for (const auto &[saver, resumer] : pairs) {
      SCOPED_TRACE(std::string(adamw ? "AdamW" : "SGD") + ": saved at stage " +
                   std::to_string(saver) + ", resumed at stage " + std::to_string(resumer));
      test::zeroTrain({.stage = saver, .adamw = adamw, .endStep = 10, .saveTo = path});
      const ZeroRun run =
          test::zeroTrain({.stage = resumer, .adamw = adamw, .firstStep = 10, .resumeFrom = path});
      ASSERT_EQ(run.losses.size(), 10u);
      for (size_t i = 0; i < 10; ++i) {
        EXPECT_NEAR(run.losses[i], one.losses[10 + i], 1e-5 * std::abs(one.losses[10 + i]))
            << "step " << 10 + i;
      }
      ASSERT_EQ(run.params.size(), one.params.size());
      for (size_t i = 0; i < one.params.size(); ++i) {
        EXPECT_TRUE(
            allclose(run.params[i], one.params[i], adamw ? 1e-4 : 1e-5, adamw ? 2e-4 : 1e-6))
            << "parameter " << i;
      }
      dist::barrier();
      if (dist::rank() == 0) std::remove(path.c_str());
    }
  }
}

// A checkpoint of another model, or of other options, is an Error on every rank and changes
// nothing; state_dict() names the state as optim::AdamW does.
TEST(Zero, ABadCheckpointIsAnErrorOnEveryRank) {
  const std::string path =
      testing::TempDir() + "rcjit_zero_badckpt_" + std::to_string(::getppid()) + ".safetensors";
  test::zeroTrain({.stage = 2, .endStep = 2, .saveTo = path});
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 8;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  dist::ZeroOptimizer zero(m->module(), optim::AdamWOptions{.lr = 3e-3, .beta1 = 0.8},
                           {.stage = 3});
  const std::vector<Tensor> before = zero.full_parameters();
  EXPECT_NE(errorOf([&] {
              dist::load_checkpoint(path, m->module(), zero);
            }).find("beta1 is 0.8 here but 0.9 in the state"),
            std::string::npos);
  const std::vector<Tensor> after = zero.full_parameters();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(allclose(after[i], before[i], 0, 0));
  EXPECT_NE(errorOf([&] {
              dist::load_checkpoint(path + ".none", m->module(), zero);
            }).find("cannot open for reading"),
            std::string::npos);
  EXPECT_EQ(zero.state_dict().size(), 5u); // no step taken: the hyperparameters alone
  dist::barrier();
  if (dist::rank() == 0) std::remove(path.c_str());
}

// A learning-rate change half-way (set_lr on the ZeroOptimizer, on the one process's
// optimizer) gives one process's curve and parameters; the rate is checked and read back.
TEST(Zero, SetLrEqualsOneProcess) {
  for (int stage : {1, 3}) {
    for (bool adamw : {true, false}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (adamw ? " AdamW" : " SGD"));
      ZeroRun one = test::zeroTrain({.adamw = adamw, .halveLrAt = 10});
      ZeroRun z = test::zeroTrain({.stage = stage, .adamw = adamw, .halveLrAt = 10});
      ZeroRun plain = test::zeroTrain({.stage = stage, .adamw = adamw});
      ASSERT_EQ(z.losses.size(), one.losses.size());
      for (size_t i = 0; i < one.losses.size(); ++i) {
        EXPECT_NEAR(z.losses[i], one.losses[i], 1e-5 * std::abs(one.losses[i])) << "step " << i;
      }
      EXPECT_NE(z.losses.back(), plain.losses.back()) << "the new rate was used";
      for (size_t i = 0; i < one.params.size(); ++i) {
        EXPECT_TRUE(allclose(z.params[i], one.params[i], adamw ? 1e-4 : 1e-5, adamw ? 2e-4 : 1e-6))
            << "parameter " << i;
      }
    }
  }
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 4;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{.lr = 0.5}, {.stage = 1});
  EXPECT_EQ(z.lr(), 0.5);
  z.set_lr(0.125);
  EXPECT_EQ(z.lr(), 0.125);
  std::string msg = errorOf([&] { z.set_lr(-2); });
  EXPECT_NE(msg.find("dist::ZeroOptimizer::set_lr: invalid lr -2"), std::string::npos) << msg;
  EXPECT_EQ(z.lr(), 0.125);
}

// ZeroOptions::max_grad_norm clips the averaged gradient as clip_grad_norm_ does on one
// process (the norm from every rank's slices): the same norms, losses and parameters,
// stages 1-3 (and ddp with clip_grad_norm_ after the average); a bound that clips every step.
TEST(Zero, MaxGradNormEqualsOneProcessClipping) {
  const double bound = 0.5;
  ZeroRun one = test::zeroTrain({.stage = -1, .maxGradNorm = bound});
  ZeroRun plain = test::zeroTrain({.stage = -1});
  ASSERT_EQ(one.gradNorms.size(), one.losses.size());
  for (double n : one.gradNorms) EXPECT_GT(n, bound) << "every step clips";
  EXPECT_NE(one.losses.back(), plain.losses.back()) << "clipping changed the run";
  for (int stage : {0, 1, 2, 3}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    ZeroRun z = test::zeroTrain({.stage = stage, .maxGradNorm = bound});
    ASSERT_EQ(z.gradNorms.size(), one.gradNorms.size());
    for (size_t i = 0; i < one.losses.size(); ++i) {
      EXPECT_NEAR(z.gradNorms[i], one.gradNorms[i], 1e-5 * one.gradNorms[i]) << "step " << i;
      EXPECT_NEAR(z.losses[i], one.losses[i], 1e-5 * std::abs(one.losses[i])) << "step " << i;
    }
    for (size_t i = 0; i < one.params.size(); ++i) {
      EXPECT_TRUE(allclose(z.params[i], one.params[i], 1e-4, 2e-4)) << "parameter " << i;
    }
  }
  tools::ModelConfig c;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  std::string msg = errorOf(
      [&] { dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.max_grad_norm = -1}); });
  EXPECT_NE(msg.find("max_grad_norm is not a finite number >= 0"), std::string::npos) << msg;
  dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{});
  EXPECT_EQ(z.last_grad_norm(), -1);
}

// Model state after a step: one process holds parameters, gradients and AdamW's two moments
// (4 copies of the parameters); zero3 on W ranks holds a 1/W slice of each (plus padding).
TEST(Zero, Stage3HoldsAFractionOfOneProcesssModelState) {
  ZeroRun one = zeroTrain(-1, true), z3 = zeroTrain(3, true);
  const int w = dist::world_size();
  const double ratio = static_cast<double>(z3.stateBytes) / static_cast<double>(one.stateBytes);
  if (dist::rank() == 0) {
    std::printf(
        "zero3 on %d ranks: %lld bytes of model state held per rank after a step, one "
        "process %lld (ratio %.3f); the optimizer counts %lld (params %lld, grads %lld, "
        "optimizer %lld)\n",
        w, static_cast<long long>(z3.stateBytes), static_cast<long long>(one.stateBytes), ratio,
        static_cast<long long>(z3.ledger.total()), static_cast<long long>(z3.ledger.parameters),
        static_cast<long long>(z3.ledger.gradients), static_cast<long long>(z3.ledger.optimizer));
  }
  EXPECT_GT(one.stateBytes, 0);
  // memory_stats and the optimizer's own count agree within a few small tensors
  EXPECT_NEAR(static_cast<double>(z3.stateBytes), static_cast<double>(z3.ledger.total()),
              0.02 * static_cast<double>(one.stateBytes));
  EXPECT_LE(ratio, 1.0 / w + 0.03) << "each rank holds its slice of everything";
  if (w == 4) {
    EXPECT_LE(ratio, 1.0 / 3);
  }
}

TEST(Zero, BadUsesAreErrors) {
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 4;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  std::string msg =
      errorOf([&] { dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.stage = 4}); });
  EXPECT_NE(msg.find("dist::ZeroOptimizer: stage 4 is not 1, 2 or 3"), std::string::npos) << msg;
  msg = errorOf([&] { dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{.beta2 = 1}); });
  EXPECT_NE(msg.find("dist::ZeroOptimizer (AdamW): invalid beta2 1 (must be in [0, 1))"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { dist::ZeroOptimizer z(m->module(), optim::SGDOptions{.lr = -1}); });
  EXPECT_NE(msg.find("dist::ZeroOptimizer (SGD): invalid lr -1"), std::string::npos) << msg;
  {
    dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.stage = 3});
    auto compiled = compile([&](const std::vector<Tensor> &in) { return m->forward(in); });
    msg = errorOf([&] { compiled(std::vector<Tensor>{mpiGlobalBatch(0).first}); });
    // compiled without the zero3 pass (zero_passes_test.cpp compiles it with the pass)
    EXPECT_NE(msg.find("(ZeRO stage 3: this rank holds only its shard): compile it with a pass "
                       "schedule that runs the zero3 pass"),
              std::string::npos)
        << msg;
    z.unshard(); // the parameters back in the model; the module can be used as before
    EXPECT_EQ(m->forward({mpiGlobalBatch(0).first}).size(-1), test::kMpiVocab);
    msg = errorOf([&] { z.step(); });
    EXPECT_NE(msg.find("step() after unshard()"), std::string::npos) << msg;
  }
  nn::Linear lin(3, 2);
  lin.to(DType::f64);
  msg = errorOf([&] { dist::ZeroOptimizer z(lin, optim::SGDOptions{}); });
  EXPECT_NE(msg.find("is f64 on cpu; ZeRO shards contiguous f32 CPU parameters"), std::string::npos)
      << msg;
}

// Ranks whose models differ (rank 1 one layer more) are an Error on every rank, not a hang.
TEST(Zero, RanksWithDifferentModelsAreAnErrorOnEveryRank) {
  if (dist::world_size() == 1) GTEST_SKIP() << "needs 2 ranks or more";
  tools::Gpt2Config g;
  g.layers = dist::rank() == 1 ? 3 : 2;
  tools::ModelConfig c;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(g, c);
  std::string msg =
      errorOf([&] { dist::ZeroOptimizer z(m->module(), optim::AdamWOptions{}, {.stage = 3}); });
  EXPECT_NE(msg.find("dist::broadcast_parameters (rank "), std::string::npos) << msg;
  EXPECT_NE(msg.find("the ranks' tensors disagree"), std::string::npos) << msg;
}

// `rcjit train --dist zeroN` on toy64 trains as `--dist none` does on one process; rank 0
// prints the communication wait and the per-rank memory.
TEST(Zero, TrainCommandZeroEqualsOneProcess) {
  auto run = [](const std::string &distMode, const std::string &modes, const std::string &json) {
    std::vector<std::string> args = {"rcjit",   "train",   "--model", "toy64",       "--layers",
                                     "2",       "--batch", "8",       "--seq",       "4",
                                     "--steps", "5",       "--modes", modes,         "--dist",
                                     distMode,  "--json",  json,      "--bucket-mb", "0.001"};
    if (distMode == "zero3") args.push_back("--prefetch");
    std::vector<const char *> argv;
    for (const std::string &a : args) argv.push_back(a.c_str());
    std::ostringstream out, err;
    int code = tools::runCli(static_cast<int>(argv.size()), argv.data(), out, err);
    EXPECT_EQ(code, 0) << err.str();
    return out.str();
  };
  // a name per process: the mpi CTest entries (1, 2 and 4 ranks) may run at the same time
  const std::string dir = testing::TempDir(), rank = std::to_string(getpid());
  const std::string oneJson = dir + "zero_none_" + rank + ".json";
  run("none", "eager,full", oneJson);
  for (const std::string stage : {"zero1", "zero2", "zero3"}) {
    const std::string modes = stage == "zero3" ? "eager" : "eager,full";
    const std::string json = dir + "zero_" + stage + "_" + rank + ".json";
    std::string table = run(stage, modes, json);
    if (dist::rank() != 0) {
      EXPECT_EQ(table, "") << "only rank 0 prints";
      continue;
    }
    const std::string shown = stage == "zero3" ? "zero3 + prefetch" : stage;
    EXPECT_NE(table.find(shown + " on " + std::to_string(dist::world_size()) + " rank"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("waiting on communication (reduce-scatters, all-gathers)"),
              std::string::npos)
        << table;
    EXPECT_NE(table.find("per rank (the largest over ranks):"), std::string::npos) << table;
    nlohmann::json one = nlohmann::json::parse(std::ifstream(oneJson));
    nlohmann::json z = nlohmann::json::parse(std::ifstream(json));
    EXPECT_EQ(z["dist"], stage);
    const size_t nModes = stage == "zero3" ? 1 : 2;
    ASSERT_EQ(z["results"].size(), nModes);
    for (size_t mi = 0; mi < nModes; ++mi) {
      for (int i = 0; i < 5; ++i) {
        double a = one["results"][mi]["losses"][i], b = z["results"][mi]["losses"][i];
        EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << stage << " mode " << mi << " step " << i;
      }
      EXPECT_GT(z["results"][mi]["model_state_mib"].get<double>(), 0);
      EXPECT_EQ(z["results"][mi]["comm_wait_ms_steps"].size(), 5u);
    }
  }
}

TEST(Zero, TrainCommandRefusesZero3CompiledWithoutPasses) {
  std::vector<const char *> args = {"rcjit", "train",   "--model",    "toy64",      "--dist",
                                    "zero3", "--modes", "eager,full", "--schedule", "none"};
  std::ostringstream out, err;
  int code = tools::runCli(static_cast<int>(args.size()), args.data(), out, err);
  EXPECT_EQ(code, 2);
  EXPECT_NE(err.str().find("--dist zero3 --schedule none runs no passes, so the eager hooks "
                           "gather each block as it is called and the model runs eagerly: use "
                           "--modes eager"),
            std::string::npos)
      << err.str();
}

} // namespace
} // namespace rcjit
