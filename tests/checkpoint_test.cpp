// Checkpoints: save_tensors / load_tensors, an optimizer's state_dict / load_state_dict, and
// save_checkpoint / load_checkpoint resuming training eagerly, with a compiled loss and in a
// compiled whole step as if it had not stopped; every bad file or state an Error that changes
// nothing.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

// A fresh path under the temp dir, removed at scope exit.
struct TempPath : test::TempFile {
  explicit TempPath(const std::string &name) : test::TempFile("ckpt", name) {}
};

struct Mlp : nn::Module<Mlp> {
  nn::Linear a, b;
  Mlp(uint64_t seed, int64_t hidden = 16) : a(8, hidden, true, seed), b(hidden, 4, true, seed + 1) {
    register_module("a", a);
    register_module("b", b);
  }
  Tensor forward(const Tensor &x) { return b(tanh(a(x))); }
};

Tensor batchX(int step) { return Tensor::randn({6, 8}, 100 + step); }
Tensor batchY(int step) { return Tensor::randn({6, 4}, 200 + step); }

enum class Way { eager, compiledLoss, wholeStep };

std::unique_ptr<optim::Optimizer> makeOptimizer(Mlp &m, bool adamw) {
  if (adamw) return std::make_unique<optim::AdamW>(m.parameters(), optim::AdamWOptions{.lr = 1e-2});
  return std::make_unique<optim::SGD>(m.parameters(),
                                      optim::SGDOptions{.lr = 5e-2, .momentum = 0.9});
}

// Trains `m` with `opt` over steps [first, first + n) of the batch stream, the way `run` says,
// at a rate warmed up over the first 4 steps (set_lr, or in the whole step's graph).
class Trainer {
public:
  Trainer(Mlp &m, optim::Optimizer &opt, Way run) : m_(m), opt_(opt), run_(run) {
    loss_.emplace(
        compile(LossFn([this](const Tensor &x, const Tensor &y) { return mse_loss(m_(x), y); })));
    whole_.emplace(compile(StepFn([this](const Tensor &x, const Tensor &y, const Tensor &step) {
      opt_.set_lr(minimum((step + 1.0) / 4.0, 1.0) * 5e-2);
      opt_.zero_grad();
      Tensor l = mse_loss(m_(x), y);
      l.backward();
      opt_.step();
      return l.detach();
    })));
  }
  std::vector<double> train(int first, int n) {
    std::vector<double> losses;
    for (int i = first; i < first + n; ++i) {
      if (run_ == Way::wholeStep) {
        losses.push_back((*whole_)(batchX(i), batchY(i), Tensor::full({}, i)).item());
        continue;
      }
      opt_.set_lr(std::min((i + 1.0) / 4.0, 1.0) * 5e-2);
      opt_.zero_grad();
      Tensor l =
          run_ == Way::eager ? mse_loss(m_(batchX(i)), batchY(i)) : (*loss_)(batchX(i), batchY(i));
      l.backward();
      opt_.step();
      losses.push_back(l.item());
    }
    return losses;
  }

private:
  Mlp &m_;
  optim::Optimizer &opt_;
  Way run_;
  using LossFn = std::function<Tensor(const Tensor &, const Tensor &)>;
  using StepFn = std::function<Tensor(const Tensor &, const Tensor &, const Tensor &)>;
  std::optional<CompiledFunction<LossFn>> loss_;
  std::optional<CompiledFunction<StepFn>> whole_;
};

std::vector<Tensor> copies(const std::vector<Tensor> &ts) {
  std::vector<Tensor> out;
  for (const Tensor &t : ts) out.push_back(t.detach().clone());
  return out;
}

void expectEqual(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double tol,
                 const std::string &what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(allclose(got[i], want[i], tol, tol))
        << what << " " << i << ": largest difference " << amax(abs(got[i] - want[i]), {}).item();
  }
}

TEST(Checkpoint, TensorsRoundTripWithMetadataAndReplaceAFileWhole) {
  TempPath f("tensors.safetensors");
  Tensor x = Tensor::randn({3, 5}, 1);
  const NamedTensors ts = {{"x", x},
                           {"xt", transpose(x, 0, 1)}, // a view: written contiguous
                           {"bf16", x.to(DType::bf16)},
                           {"ids", Tensor::arange(4)},
                           {"scalar", Tensor::full({}, 2.5, DType::f64)}};
  save_tensors(f.path, ts, {{"note", "first"}});
  save_tensors(f.path, ts, {{"note", "second"}}); // over the first: replaced whole
  const TensorFile back = load_tensors(f.path);
  EXPECT_EQ(back.metadata.at("note"), "second");
  ASSERT_EQ(back.tensors.size(), ts.size());
  std::map<std::string, Tensor> byName(back.tensors.begin(), back.tensors.end());
  for (size_t i = 0; i < ts.size(); ++i) { // sorted by name, as the header's JSON object is
    if (i > 0) {
      EXPECT_LT(back.tensors[i - 1].first, back.tensors[i].first);
    }
    const Tensor &t = byName[ts[i].first];
    ASSERT_TRUE(t.defined()) << ts[i].first;
    EXPECT_EQ(t.dtype(), ts[i].second.dtype()) << ts[i].first;
    EXPECT_TRUE(allclose(t.to(DType::f64), ts[i].second.to(DType::f64), 0, 0)) << ts[i].first;
  }
  // nothing was left beside the file
  int beside = 0;
  for (const auto &e :
       std::filesystem::directory_iterator(std::filesystem::temp_directory_path())) {
    beside += e.path().filename().string().rfind(
                  std::filesystem::path(f.path).filename().string() + ".tmp", 0) == 0;
  }
  EXPECT_EQ(beside, 0);
  // a failed write (a duplicate name) leaves the earlier file as it was
  EXPECT_NE(errorOf([&] {
              save_tensors(f.path, {{"a", x}, {"a", x}});
            }).find("duplicate tensor name 'a'"),
            std::string::npos);
  EXPECT_EQ(load_tensors(f.path).metadata.at("note"), "second");
}

TEST(Checkpoint, StateDictNamesItsHyperparametersAndEachParametersState) {
  Mlp m(1);
  optim::AdamW adamw(m.parameters(), {.lr = 1e-2, .beta2 = 0.99});
  std::vector<std::string> names;
  for (const auto &[name, t] : adamw.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"lr", "beta1", "beta2", "eps", "weight_decay"}));
  Trainer(m, adamw, Way::eager).train(0, 1);
  const NamedTensors state = adamw.state_dict();
  ASSERT_EQ(state.size(), 5u + 4 * 3);
  EXPECT_EQ(state[5].first, "state.0.exp_avg");
  EXPECT_EQ(state[6].first, "state.0.exp_avg_sq");
  EXPECT_EQ(state[7].first, "state.0.step");
  EXPECT_EQ(state[7].second.item(), 1.0);
  EXPECT_EQ(state[2].second.item(), 0.99);
  EXPECT_EQ(state[5].second.shape(), m.a.weight.shape());
  optim::SGD plain(m.parameters(), {.lr = 0.1});
  Trainer(m, plain, Way::eager).train(0, 1);
  EXPECT_EQ(plain.state_dict().size(), 3u); // no momentum: no buffers
}

// Training 7 steps equals training 3, saving, and resuming 4 more in a model and an optimizer
// made afresh (another initialization): eagerly (exactly), with a compiled loss and in a
// compiled whole step (whose rate is computed in its graph from the step count), for AdamW
// and SGD with momentum. The whole step of the resumed run also ran 2 steps of its own
// before the load: the state it holds is overwritten in place.
TEST(Checkpoint, ResumingTrainsAsOneRun) {
  test::IsolatedCache cache;
  for (bool adamw : {true, false}) {
    for (Way run : {Way::eager, Way::compiledLoss, Way::wholeStep}) {
      const std::string what =
          std::string(adamw ? "AdamW" : "SGD") + " run " + std::to_string(static_cast<int>(run));
      Mlp straight(3);
      auto straightOpt = makeOptimizer(straight, adamw);
      const std::vector<double> want = Trainer(straight, *straightOpt, run).train(0, 7);

      TempPath f("resume.safetensors");
      {
        Mlp first(3);
        auto firstOpt = makeOptimizer(first, adamw);
        Trainer(first, *firstOpt, run).train(0, 3);
        save_checkpoint(f.path, first, *firstOpt, {{"step", "3"}});
      }
      Mlp resumed(99); // other weights: all of them come from the file
      auto resumedOpt = makeOptimizer(resumed, adamw);
      Trainer trainer(resumed, *resumedOpt, run);
      if (run == Way::wholeStep) trainer.train(10, 2); // compiled, with state of its own
      EXPECT_EQ(load_checkpoint(f.path, resumed, *resumedOpt).at("step"), "3");
      const std::vector<double> got = trainer.train(3, 4);
      const double tol = run == Way::eager ? 0 : 1e-5;
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(got[i], want[3 + i], tol * std::abs(want[3 + i])) << what << " step " << 3 + i;
      }
      expectEqual(resumed.parameters(), straight.parameters(), tol, what + " parameter");
      const NamedTensors a = resumedOpt->state_dict(), b = straightOpt->state_dict();
      ASSERT_EQ(a.size(), b.size()) << what;
      for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(a[i].first, b[i].first);
        EXPECT_TRUE(allclose(a[i].second, b[i].second, tol, tol)) << what << " " << a[i].first;
      }
    }
  }
}

// Every bad checkpoint or state is an Error naming what is wrong, and leaves the model and
// the optimizer as they were.
TEST(Checkpoint, ABadCheckpointIsAnErrorThatChangesNothing) {
  Mlp saved(5);
  optim::AdamW savedOpt(saved.parameters(), {.lr = 1e-2});
  Trainer(saved, savedOpt, Way::eager).train(0, 2);
  TempPath good("good.safetensors"), paramsOnly("params.safetensors"), plain("plain.safetensors"),
      cut("cut.safetensors");
  save_checkpoint(good.path, saved, savedOpt);
  save_checkpoint(paramsOnly.path, saved);
  save_tensors(plain.path, saved.named_parameters());
  {
    std::ifstream in(good.path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut.path, std::ios::binary) << bytes.substr(0, bytes.size() - 100);
  }

  Mlp m(7);
  optim::AdamW opt(m.parameters(), {.lr = 1e-2});
  Trainer(m, opt, Way::eager).train(0, 1);
  const std::vector<Tensor> params = copies(m.parameters());
  std::vector<Tensor> state;
  for (const auto &[name, t] : opt.state_dict()) state.push_back(t.clone());
  auto unchanged = [&](const std::string &what) {
    expectEqual(m.parameters(), params, 0, what + ": parameter");
    const NamedTensors now = opt.state_dict();
    ASSERT_EQ(now.size(), state.size()) << what;
    for (size_t i = 0; i < now.size(); ++i) {
      EXPECT_TRUE(allclose(now[i].second, state[i], 0, 0)) << what << ": " << now[i].first;
    }
  };
  auto expectError = [&](const std::function<void()> &f, const std::string &part) {
    const std::string e = errorOf(f);
    EXPECT_NE(e.find(part), std::string::npos) << e;
    unchanged(part);
  };

  optim::AdamW otherBeta(m.parameters(), {.lr = 1e-2, .beta2 = 0.95});
  expectError([&] { load_checkpoint(good.path, m, otherBeta); },
              "beta2 is 0.95 here but 0.999 in the state");
  optim::SGD sgd(m.parameters(), {.lr = 1e-2, .momentum = 0.9});
  expectError([&] { load_checkpoint(good.path, m, sgd); }, "the state has no 'momentum'");
  Mlp wider(7, 24);
  optim::AdamW widerOpt(wider.parameters());
  EXPECT_NE(errorOf([&] {
              load_checkpoint(good.path, wider, widerOpt);
            }).find("parameter 'a.weight' is f32[16, 8] in the file but f32[24, 8] in the model"),
            std::string::npos);
  expectError([&] { load_checkpoint(plain.path, m, opt); }, "not an rcjit checkpoint");
  expectError([&] { load_checkpoint(paramsOnly.path, m, opt); }, "holds no optimizer state");
  expectError([&] { load_checkpoint(cut.path, m, opt); }, "cut.safetensors");
  expectError([&] { load_checkpoint(good.path + ".none", m, opt); }, "cannot open for reading");
  NamedTensors bad = savedOpt.state_dict();
  bad.emplace_back("state.9.exp_avg", Tensor::zeros({4}));
  expectError([&] { opt.load_state_dict(bad); },
              "'state.9.exp_avg' but this optimizer has 4 parameters");
  bad = savedOpt.state_dict();
  bad.erase(bad.begin() + 6); // state.0.exp_avg_sq
  expectError([&] { opt.load_state_dict(bad); }, "parameter 0's exp_avg but not its exp_avg_sq");
  bad = savedOpt.state_dict();
  bad[5].second = Tensor::zeros({16, 8}, DType::f64);
  expectError([&] { opt.load_state_dict(bad); },
              "'state.0.exp_avg' is f64[16, 8] but parameter 0's exp_avg is f32[16, 8]");
  auto inside = compile([&](const Tensor &x) {
    load_checkpoint(good.path, m, opt);
    return x + 1.0;
  });
  expectError([&] { inside(Tensor::ones({2})); }, "load_checkpoint inside a compiled function");
  EXPECT_NE(errorOf([&] {
              save_checkpoint(good.path, m, opt, {{"rcjit.step", "1"}});
            }).find("metadata key 'rcjit.step' is reserved"),
            std::string::npos);

  struct Custom : optim::Optimizer {
    std::vector<Tensor> ps;
    void step() override {}
    void zero_grad() override {}
    double lr() const override { return 0; }
    void set_lr(double) override {}
    const std::vector<Tensor> &parameters() const override { return ps; }
  } custom;
  EXPECT_NE(errorOf([&] {
              save_checkpoint(good.path, m, custom);
            }).find("Optimizer::state_dict: this optimizer does not define it"),
            std::string::npos);

  // the parameters alone load from either kind of file; the good one still loads whole
  load_checkpoint(paramsOnly.path, m);
  expectEqual(m.parameters(), saved.parameters(), 0, "parameters only");
  load_checkpoint(good.path, m, opt);
  EXPECT_EQ(opt.state_dict().size(), savedOpt.state_dict().size());
}

} // namespace
