// Pass schedules (CompileOptions::schedule): scheduled passes registered by name, applied from
// the listed training steps on with a context, recompiles logged with the reason.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

using namespace rcjit;

namespace {

// Rewrites every `x * 2` into `x * 3`: not a legal optimization, but it makes which pass
// list compiled the running code visible in the result.
Graph scheduleTestTimes3(const Graph &g) {
  Graph out = g;
  bool changed = false;
  for (Node &n : out.nodes) {
    if (n.op != OpKind::mul || n.inputs.size() != 2) continue;
    Node &c = out.nodes[static_cast<size_t>(n.inputs[1])];
    if (c.op == OpKind::full && c.attrs.value == 2.0) {
      c.attrs.value = 3.0;
      changed = true;
    }
  }
  return changed ? out : g;
}

// The contexts the passes saw, in order.
struct ScheduleTestSeen {
  std::mutex mu;
  std::vector<PassContext> contexts;
};
ScheduleTestSeen &scheduleTestSeen() {
  static ScheduleTestSeen seen;
  return seen;
}

void scheduleTestRegister() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_scheduled_pass("test_times3", [](const Graph &g, const PassContext &ctx) {
      std::lock_guard<std::mutex> lock(scheduleTestSeen().mu);
      scheduleTestSeen().contexts.push_back(ctx);
      return scheduleTestTimes3(g);
    });
    register_scheduled_pass("test_observe", [](const Graph &g, const PassContext &ctx) {
      std::lock_guard<std::mutex> lock(scheduleTestSeen().mu);
      scheduleTestSeen().contexts.push_back(ctx);
      return g;
    });
  });
  std::lock_guard<std::mutex> lock(scheduleTestSeen().mu);
  scheduleTestSeen().contexts.clear();
}

std::vector<PassContext> scheduleTestContexts() {
  std::lock_guard<std::mutex> lock(scheduleTestSeen().mu);
  return scheduleTestSeen().contexts;
}

} // namespace

TEST(PassSchedule, RecompilesAtTheListedStepsWithTheirPasses) {
  scheduleTestRegister();
  cache::clear();
  CompileOptions o;
  o.name = "scheduled";
  o.schedule = {{2, {"test_times3"}}, {4, {}}};
  o.memory_budget = 1 << 20;
  auto f = compile([](const Tensor &x) { return relu(x * 2.0) + 1.0; }, o);
  Tensor x = Tensor::randn({64}, 3);
  const Tensor by2 = relu(x * 2.0) + 1.0, by3 = relu(x * 3.0) + 1.0;
  set_logs("recompiles");
  testing::internal::CaptureStderr();
  std::vector<Tensor> ys;
  for (int step = 0; step < 6; ++step) ys.push_back(f(x));
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  // steps 0-1: no scheduled pass; 2-3: test_times3; 4-5: the empty list again
  for (int step : {0, 1, 4, 5}) EXPECT_TRUE(allclose(ys[step], by2)) << "step " << step;
  for (int step : {2, 3}) EXPECT_TRUE(allclose(ys[step], by3)) << "step " << step;
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 3);
  EXPECT_EQ(st.recompiles, 2);
  EXPECT_NE(log.find("recompiling because the pass schedule reached step 2: passes none -> "
                     "[test_times3]"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("the pass schedule reached step 4: passes [test_times3] -> []"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("scheduled"), std::string::npos) << "the function's name: " << log;
  EXPECT_NE(f.explain().find("the pass schedule reached step 4"), std::string::npos)
      << f.explain();
  // the pass ran once, at step 2, told where it runs
  std::vector<PassContext> seen = scheduleTestContexts();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].step, 2);
  EXPECT_EQ(seen[0].passes, std::vector<std::string>{"test_times3"});
  EXPECT_EQ(seen[0].memory_budget, 1 << 20);
  EXPECT_FALSE(seen[0].backward);
  EXPECT_NE(seen[0].function.find("scheduled"), std::string::npos) << seen[0].function;
  EXPECT_NE(seen[0].graph.find("entry 0"), std::string::npos) << seen[0].graph;
}

// A training entry: the scheduled passes see the forward and the backward graph, each told
// which it is, and the gradients stay eager's.
TEST(PassSchedule, TrainingEntriesRunThePassesOnForwardAndBackward) {
  scheduleTestRegister();
  cache::clear();
  nn::Linear fc(8, 4, true, 5);
  CompileOptions o;
  o.schedule = {{1, {"test_observe"}}};
  auto loss = compile([&](const Tensor &x) { return sum(relu(fc(x))); }, o);
  Tensor x = Tensor::randn({6, 8}, 6);
  for (int step = 0; step < 3; ++step) {
    fc.zero_grad();
    loss(x).backward();
  }
  Tensor compiledGrad = fc.weight.grad().clone();
  fc.zero_grad();
  sum(relu(fc(x))).backward();
  EXPECT_TRUE(allclose(compiledGrad, fc.weight.grad(), 1e-4, 1e-5));
  std::vector<PassContext> seen = scheduleTestContexts();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].step, 1);
  EXPECT_NE(seen[0].backward, seen[1].backward) << "one forward, one backward graph";
  for (const PassContext &c : seen) {
    EXPECT_EQ(c.graph.find(" backward") != std::string::npos, c.backward) << c.graph;
    // the forward takes the call's inputs, so it can be profiled; the backward cannot
    EXPECT_EQ(static_cast<bool>(c.profile), !c.backward) << c.graph;
  }
  EXPECT_EQ(loss.stats().recompiles, 1);
}

// Regional stages are shared across functions by their graph: a scheduled pass must not be
// served a stage compiled without it.
struct ScheduleTestLayer : nn::Module<ScheduleTestLayer> {
  nn::Linear fc;
  explicit ScheduleTestLayer(uint64_t seed) : fc(16, 16, true, seed) { register_module("fc", fc); }
  Tensor forward(const Tensor &x) { return relu(fc(x)) * 2.0; }
};
struct ScheduleTestStack : nn::Module<ScheduleTestStack> {
  nn::ModuleList<ScheduleTestLayer> layers;
  ScheduleTestStack() {
    for (uint64_t i = 0; i < 3; ++i) layers.emplace_back(10 + i);
    register_module("layers", layers);
  }
  Tensor forward(const Tensor &x) {
    Tensor h = x;
    for (size_t i = 0; i < layers.size(); ++i) h = layers[i](h);
    return h;
  }
};

TEST(PassSchedule, RegionalStagesAreKeyedByTheScheduledPasses) {
  scheduleTestRegister();
  cache::clear();
  ScheduleTestStack net;
  CompileOptions plain;
  plain.mode = Mode::regional;
  CompileOptions scheduled = plain;
  scheduled.schedule = {{0, {"test_times3"}}};
  Tensor x = Tensor::randn({4, 16}, 7);
  NoGradGuard noGrad;
  Tensor want = net.forward(x);
  auto a = compile([&](const Tensor &v) { return net(v); }, plain);
  EXPECT_TRUE(allclose(a(x), want, 1e-4, 1e-5));
  auto b = compile([&](const Tensor &v) { return net(v); }, scheduled);
  Tensor got = b(x);
  EXPECT_FALSE(allclose(got, want, 1e-4, 1e-5)) << "served the stage compiled without the pass";
  // by 3 instead of 2 in each of the 3 layers: relu(fc(.)) is positive-homogeneous only
  // in its input, so compare with the eager stack scaled the same way
  Tensor h = x;
  for (size_t i = 0; i < net.layers.size(); ++i) h = relu(net.layers[i].fc(h)) * 3.0;
  EXPECT_TRUE(allclose(got, h, 1e-4, 1e-5));
  EXPECT_GE(b.stats().cache_hits + a.stats().cache_hits, 2) << "identical layers still shared";
}

TEST(PassSchedule, BadSchedulesAreErrors) {
  scheduleTestRegister();
  auto fn = [](const Tensor &x) { return x + 1.0; };
  auto expectError = [&](const CompileOptions &o, const std::string &what) {
    try {
      compile(fn, o);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  CompileOptions unknown;
  unknown.schedule = {{3, {"test_observe", "no_such_pass"}}};
  expectError(unknown, "schedule step at 3: no scheduled pass named 'no_such_pass' is registered");
  CompileOptions order;
  order.schedule = {{5, {}}, {5, {"test_observe"}}};
  expectError(order, "schedule steps must be >= 0 and increasing; step 1 is at 5 after 5");
  CompileOptions negative;
  negative.schedule = {{-1, {}}};
  expectError(negative, "step 0 is at -1");
  CompileOptions budget;
  budget.memory_budget = -8;
  expectError(budget, "memory_budget must be >= 0 bytes, got -8");
  try {
    register_scheduled_pass("test_observe", [](const Graph &g, const PassContext &) { return g; });
    ADD_FAILURE() << "registered a name twice";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("'test_observe' is already registered"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(has_scheduled_pass("test_observe"));
  EXPECT_FALSE(has_scheduled_pass("no_such_pass"));
}

// PassContext::profile runs the graph the pass holds on the compiling call's inputs: a
// value per node, the memory of each materialized value and of what is held after it.
TEST(PassSchedule, PassesCanProfileTheGraphOnTheCallsInputs) {
  static std::vector<NodeProfile> profile;
  static Graph profiled;
  static std::once_flag once;
  std::call_once(once, [] {
    register_scheduled_pass("test_profile", [](const Graph &g, const PassContext &ctx) {
      if (!ctx.profile) throw Error("no profile for " + ctx.graph);
      profile = ctx.profile(g);
      profiled = g;
      return g;
    });
  });
  cache::clear();
  CompileOptions o;
  o.schedule = {{0, {"test_profile"}}};
  auto f = compile([](const Tensor &x) { return sum(exp(x) * 2.0 + x, {1}); }, o);
  Tensor x = Tensor::randn({64, 32}, 9);
  EXPECT_TRUE(allclose(f(x), sum(exp(x) * 2.0 + x, {1}), 1e-4, 1e-5));
  ASSERT_EQ(profile.size(), profiled.nodes.size()) << print_graph(profiled);
  int64_t held = 0;
  int exps = 0;
  for (size_t i = 0; i < profiled.nodes.size(); ++i) {
    const Node &n = profiled.nodes[i];
    const NodeProfile &p = profile[i];
    EXPECT_GE(p.ms, 0.0);
    if (n.op == OpKind::input) {
      EXPECT_EQ(p.bytes, 0);
      continue;
    }
    int64_t numel = 1;
    for (const Dim &d : n.shape) numel *= d.value;
    if (n.op == OpKind::exp) {
      ++exps;
      EXPECT_EQ(p.bytes, numel * 4) << "a [64, 32] f32 value";
    }
    held = std::max(held, p.live_bytes);
  }
  EXPECT_EQ(exps, 1) << print_graph(profiled);
  EXPECT_GE(held, 64 * 32 * 4) << "exp(x) was held while its users ran";
  EXPECT_EQ(profile.back().live_bytes, 64 * 4) << "only the [64] output is held at the end";
}
