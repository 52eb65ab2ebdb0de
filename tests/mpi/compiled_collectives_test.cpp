// Collectives as ops of the IR: dist::all_reduce / all_gather / reduce_scatter / broadcast
// called inside rcjit::compile are graph nodes, compiled (full and regional mode) into a
// non-blocking start step and a wait step, and differentiated by the gradient rules. Every
// result is checked against the eager rcjit::dist result or a reference every rank computes
// locally. Run by ctest under mpirun with 2 and 4 ranks, and alone (a world of 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include <rcjit/rcjit.h>

#include "jit/CompileGraph.h"
#include "support/Log.h"
#include "tests/TestUtil.h"
#include "tools/Cli.h"
#include "tools/LogsCommand.h"
#include "tracer/GraphIO.h"
#include "tracer/Tracer.h"

namespace rcjit {
namespace {

using dist::ReduceOp;
using test::errorOf;

int worldOf() { return dist::world_size(); }
int rankOf() { return dist::rank(); }

// Rank r's input for test `seed`: the same on every rank that builds it.
Tensor rankInput(int r, const Shape &shape, DType dt, uint64_t seed) {
  return (Tensor::randn(shape, seed * 1000 + static_cast<uint64_t>(r), DType::f64) * 4.0).to(dt);
}

// One collective with its arguments, called the same way eagerly and inside a trace.
struct Coll {
  std::string name;
  std::function<Tensor(Tensor)> apply;
};

std::vector<Coll> everyCollective() {
  const int last = worldOf() - 1;
  return {
      {"all_reduce sum",
       [](Tensor t) {
         dist::all_reduce(t, ReduceOp::sum);
         return t;
       }},
      {"all_reduce mean",
       [](Tensor t) {
         dist::all_reduce(t, ReduceOp::mean);
         return t;
       }},
      {"all_reduce max",
       [](Tensor t) {
         dist::all_reduce(t, ReduceOp::max);
         return t;
       }},
      {"all_gather dim 0", [](Tensor t) { return dist::all_gather(t, 0); }},
      {"all_gather dim -1", [](Tensor t) { return dist::all_gather(t, -1); }},
      {"reduce_scatter dim 0", [](Tensor t) { return dist::reduce_scatter(t, 0); }},
      {"reduce_scatter dim 1", [](Tensor t) { return dist::reduce_scatter(t, 1); }},
      {"broadcast root last",
       [last](Tensor t) {
         dist::broadcast(t, last);
         return t;
       }},
  };
}

// x * 2 + 1, the collective, then * 3 - 1: the collective's input is an intermediate of the
// program and its output is read by a later kernel.
Tensor wrapped(const Coll &c, const Tensor &x) { return c.apply(x * 2.0 + 1.0) * 3.0 - 1.0; }

void expectClose(const Tensor &got, const Tensor &want, const std::string &what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const double tol = got.dtype() == DType::f32 ? 1e-4 : 1e-10;
  EXPECT_TRUE(allclose(got.to(DType::f64), want.to(DType::f64), tol, tol)) << what;
}

// Every collective, compiled, against the same function run eagerly through rcjit::dist; the
// first call traces, the later calls run the compiled program.
void checkEveryCollectiveIn(Mode mode) {
  const int w = worldOf();
  uint64_t seed = 100 + static_cast<uint64_t>(mode) * 50;
  for (const Coll &c : everyCollective()) {
    for (DType dt : {DType::f32, DType::f64}) {
      SCOPED_TRACE(c.name + " " + std::string(dtypeName(dt)));
      auto body = [&c, mode](const Tensor &x) {
        if (mode == Mode::regional) return region("comm", [&] { return wrapped(c, x); });
        return wrapped(c, x);
      };
      auto f = compile(body, CompileOptions{.mode = mode});
      for (int call = 0; call < 3; ++call) {
        ++seed;
        Tensor x = rankInput(rankOf(), {2 * w, 3 * w}, dt, seed);
        Tensor got = f(x);
        Tensor want = wrapped(c, x); // eager
        expectClose(got, want, "call " + std::to_string(call));
      }
      if (mode != Mode::eager) {
        EXPECT_GE(f.stats().compiles, 1);
      }
    }
  }
}

TEST(CompiledCollectives, EveryCollectiveFullModeEqualsEager) {
  checkEveryCollectiveIn(Mode::full);
}
TEST(CompiledCollectives, EveryCollectiveRegionalModeEqualsEager) {
  checkEveryCollectiveIn(Mode::regional);
}

// The values are right, not only equal to eager: every rank knows every rank's input.
TEST(CompiledCollectives, ResultsMatchReferencesBuiltFromEveryRanksInput) {
  const int w = worldOf();
  auto f = compile([](const Tensor &x) {
    Tensor s = x;
    dist::all_reduce(s);
    Tensor m = x;
    dist::all_reduce(m, ReduceOp::max);
    return std::vector<Tensor>{s, m, dist::all_gather(x, 1), dist::reduce_scatter(x, 0)};
  });
  for (uint64_t seed : {7u, 8u}) {
    Tensor x = rankInput(rankOf(), {w, 2}, DType::f64, seed);
    std::vector<Tensor> got = f(x);
    Tensor sum = Tensor::zeros({w, 2}, DType::f64);
    Tensor max = rankInput(0, {w, 2}, DType::f64, seed);
    std::vector<Tensor> all;
    for (int r = 0; r < w; ++r) {
      Tensor xr = rankInput(r, {w, 2}, DType::f64, seed);
      sum = sum + xr;
      max = maximum(max, xr);
      all.push_back(xr);
    }
    expectClose(got[0], sum, "all_reduce sum");
    expectClose(got[1], max, "all_reduce max");
    expectClose(got[2], cat(all, 1), "all_gather dim 1");
    expectClose(got[3], slice(sum, 0, rankOf(), rankOf() + 1), "reduce_scatter dim 0");
  }
}

TEST(CompiledCollectives, IntegerAndZeroDimCollectives) {
  auto f = compile([](const Tensor &x, const Tensor &loss) {
    Tensor y = x + x;
    dist::all_reduce(y);
    Tensor l = loss * 1.0;
    dist::all_reduce(l, ReduceOp::mean);
    return std::vector<Tensor>{y, l};
  });
  for (int call = 0; call < 2; ++call) {
    Tensor x = Tensor::full({3}, rankOf() + 1.0 + call, DType::i32);
    Tensor loss = Tensor::full({}, rankOf() + 1.0, DType::f64);
    std::vector<Tensor> got = f(x, loss);
    const int w = worldOf();
    EXPECT_EQ(got[0].dtype(), DType::i32);
    EXPECT_DOUBLE_EQ(got[0].to(DType::f64).to_vector<double>()[2],
                     2.0 * (w * (w + 1) / 2 + call * w));
    EXPECT_EQ(got[1].dim(), 0);
    EXPECT_DOUBLE_EQ(got[1].item(), (w + 1) / 2.0);
  }
}

// ---- the compiled program: a start step, compute, a wait step before the first read ----

// x's gather is started first, a chain of matmuls that does not read it runs while it is in
// flight, and the gathered values are read last.
std::vector<Tensor> overlapping(const std::vector<Tensor> &v) {
  const Tensor &x = v[0], &w = v[1];
  Tensor g = dist::all_gather(x * 0.5, 0);
  Tensor h = x;
  for (int i = 0; i < 4; ++i) h = tanh(matmul(h, w));
  Tensor z = h * 2.0;
  return {sum(g * g, {0}) + sum(z, {0})};
}

CompileResult programOf(const TracedFn &fn, const std::vector<Tensor> &args) {
  CompileRequest r = tools::traceRequest(traceFunction(fn, args), Target::cpu);
  r.stop = CompileStop::program;
  return compileGraph(r);
}

TEST(CompiledCollectives, WaitComesRightBeforeTheFirstReadAndComputeRunsInBetween) {
  Tensor x = rankInput(rankOf(), {16, 16}, DType::f32, 31);
  Tensor wt = rankInput(0, {16, 16}, DType::f32, 32) * 0.1;
  const Program p = programOf(overlapping, {x, wt}).program;
  int start = -1, wait = -1, between = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step &s = p.steps[i];
    if (s.kind == Step::Kind::collective) start = static_cast<int>(i);
    if (s.kind == Step::Kind::wait) {
      wait = static_cast<int>(i);
      EXPECT_EQ(s.kernel, start);
    }
    if (start >= 0 && wait < 0 && s.kind != Step::Kind::collective) ++between;
  }
  ASSERT_GE(start, 0) << printProgram(p);
  ASSERT_GT(wait, start) << printProgram(p);
  EXPECT_GE(between, 4) << "the matmuls run while the gather is in flight\n" << printProgram(p);
  // the wait is right before the first step that reads the gathered buffer
  const int gathered = p.values[p.steps[start].result].buffer;
  ASSERT_LT(wait + 1, static_cast<int>(p.steps.size()));
  bool reads = false;
  for (int v : p.steps[wait + 1].operands) reads = reads || p.values[v].buffer == gathered;
  EXPECT_TRUE(reads) << printProgram(p);
  for (int i = start + 1; i < wait; ++i) {
    for (int v : p.steps[i].operands) EXPECT_NE(p.values[v].buffer, gathered) << i;
  }
  // and the result is right
  auto f = compile(overlapping);
  for (uint64_t seed : {33u, 34u}) {
    Tensor xs = rankInput(rankOf(), {16, 16}, DType::f32, seed);
    std::vector<Tensor> got = f(std::vector<Tensor>{xs, wt});
    expectClose(got[0], overlapping({xs, wt})[0], "overlapped");
  }
}

// While a collective is in flight no step may write the arena bytes of its input: the
// planner keeps the input alive until the wait.
TEST(CompiledCollectives, NoStepWritesTheInputOfACollectiveInFlight) {
  auto fn = [](const std::vector<Tensor> &v) {
    Tensor y = exp(v[0] * 0.1);        // an arena intermediate, read only by the gather
    Tensor g = dist::all_gather(y, 0); // started here
    Tensor a = v[0];
    for (int i = 0; i < 6; ++i) a = sum(a * 1.5 + 1.0, {1}, true) * v[0]; // same-size temps
    return std::vector<Tensor>{sum(g, {0}) + sum(a, {0})};
  };
  Tensor x = rankInput(rankOf(), {8, 8}, DType::f32, 41);
  const Program p = programOf(fn, {x}).program;
  auto arenaRange = [&](int v) {
    const Buffer &b = p.buffers[p.values[v].buffer];
    return std::pair<int64_t, int64_t>{b.offset, b.offset + b.bytes};
  };
  int checked = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    if (p.steps[i].kind != Step::Kind::collective) continue;
    const int in = p.steps[i].operands.at(0);
    if (p.buffers[p.values[in].buffer].kind != Buffer::Kind::arena) continue;
    size_t j = i + 1;
    while (j < p.steps.size() &&
           !(p.steps[j].kind == Step::Kind::wait && p.steps[j].kernel == static_cast<int>(i)))
      ++j;
    ASSERT_LT(j, p.steps.size()) << printProgram(p);
    const auto [lo, hi] = arenaRange(in);
    for (size_t k = i + 1; k < j; ++k) {
      const Step &s = p.steps[k];
      std::vector<int> written;
      if (s.result >= 0) written.push_back(s.result);
      if (s.kind == Step::Kind::kernel) {
        const LoopKernel &kern = p.kernels.at(s.kernel);
        for (size_t t = 0; t < s.operands.size(); ++t) {
          if (kern.tensors[t].output) written.push_back(s.operands[t]);
        }
      }
      for (int v : written) {
        if (p.buffers[p.values[v].buffer].kind != Buffer::Kind::arena) continue;
        const auto [wlo, whi] = arenaRange(v);
        EXPECT_TRUE(whi <= lo || hi <= wlo)
            << "step " << k << " writes [" << wlo << ", " << whi << ") over the gather's input ["
            << lo << ", " << hi << ")\n"
            << printProgram(p);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << printProgram(p);
  auto f = compile(fn);
  for (uint64_t seed : {42u, 43u}) {
    Tensor xs = rankInput(rankOf(), {8, 8}, DType::f32, seed);
    expectClose(f(std::vector<Tensor>{xs})[0], fn({xs})[0], "in flight");
  }
}

TEST(CompiledCollectives, GraphPrintsTheCollectivesWithTheirAttributes) {
  Tensor x = Tensor::ones({2 * worldOf(), 3});
  Trace t = traceFunction(
      [](const std::vector<Tensor> &v) {
        Tensor a = v[0];
        dist::all_reduce(a, ReduceOp::mean);
        Tensor b = v[0];
        dist::broadcast(b, worldOf() - 1);
        return std::vector<Tensor>{a, dist::all_gather(b, 1), dist::reduce_scatter(a, 0)};
      },
      {x});
  const std::string text = printGraph(t.graph);
  const std::string world = " world=" + std::to_string(worldOf());
  EXPECT_NE(text.find("all_reduce(%0) reduce=mean" + world), std::string::npos) << text;
  EXPECT_NE(text.find("broadcast(%0) root=" + std::to_string(worldOf() - 1) + world),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("all_gather(%2) dim=1" + world), std::string::npos) << text;
  EXPECT_NE(text.find("reduce_scatter(%1) dim=0" + world), std::string::npos) << text;
  EXPECT_EQ(parseGraph(text), t.graph);
}

// The `graph` log and `rcjit logs --html` show collectives like any node (each rank writes
// its own trace file).
TEST(CompiledCollectives, LogsAndTheHtmlReportShowThem) {
  const std::string base = testing::TempDir() + "rcjit_coll_" + std::to_string(getpid());
  const std::string trace = base + ".jsonl", html = base + ".html";
  std::remove(trace.c_str());
  logging::setTraceFile(trace);
  set_logs("graph");
  auto f = compile([](const Tensor &x) { return dist::all_gather(exp(x), 0) * 2.0; },
                   CompileOptions{.name = "gathering"});
  f(Tensor::ones({3, 2}));
  set_logs("");
  logging::setTraceFile("");
  std::ostringstream out, err;
  ASSERT_EQ(tools::logsCommand({trace, "--html", html}, out, err), 0) << err.str();
  std::ifstream in(html);
  const std::string report((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string node = "all_gather(%1) dim=0 world=" + std::to_string(worldOf());
  EXPECT_NE(report.find(node), std::string::npos) << "the graph in the report";
  EXPECT_NE(report.find("start all_gather"), std::string::npos) << "the program in the report";
  EXPECT_NE(report.find("wait all_gather"), std::string::npos);
  std::remove(trace.c_str());
  std::remove(html.c_str());
}

// ---- guards ----

TEST(CompiledCollectives, TheWorldSizeIsAGuardAndTheRankIsNot) {
  auto f = compile([](const Tensor &x) { return dist::all_gather(x * 2.0, 0); });
  Tensor x = Tensor::ones({2});
  f(x);
  const std::string ex = f.explain();
  EXPECT_NE(ex.find("world size: " + std::to_string(worldOf()) + " ranks"), std::string::npos)
      << ex;
  EXPECT_EQ(ex.find("rank " + std::to_string(rankOf())), std::string::npos) << ex;
  auto plain = compile([](const Tensor &v) { return v * 2.0; });
  plain(x);
  EXPECT_EQ(plain.explain().find("world size"), std::string::npos);
}

// ---- errors ----

TEST(CompiledCollectives, ShapesThatDisagreeAcrossRanksAreTheSameErrorOnEveryRank) {
  if (worldOf() == 1) GTEST_SKIP() << "needs 2 ranks or more (ctest runs it under mpirun)";
  auto f = compile([](const Tensor &x) { return dist::all_gather(x * 2.0, 0) + 1.0; });
  Tensor good = Tensor::ones({2, 3});
  Tensor first = f(good); // traced and compiled with the same shapes everywhere
  EXPECT_EQ(first.shape(), (Shape{2 * static_cast<int64_t>(worldOf()), 3}));
  f(good); // the compiled program
  // now rank 1 passes another shape: it retraces, the others run the compiled step; both
  // swap their records before moving data
  Tensor odd = Tensor::ones({2, rankOf() == 1 ? 4 : 3});
  std::string msg = errorOf([&] { f(odd); });
  EXPECT_NE(msg.find("dist::all_gather (rank " + std::to_string(rankOf())), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1: f32 [2, 4]"), std::string::npos) << msg;
  // a fresh function with the mismatch on its first call (the trace's eager run)
  auto g = compile([](const Tensor &x) { return dist::reduce_scatter(x + 1.0, 1); });
  Tensor bad = Tensor::ones({2, worldOf() * (rankOf() == 0 ? 2 : 1)});
  msg = errorOf([&] { g(bad); });
  EXPECT_NE(msg.find("the ranks' tensors disagree"), std::string::npos) << msg;
  dist::barrier(); // the job goes on
  Tensor again = f(good);
  EXPECT_DOUBLE_EQ(again.to_vector<double>()[0], 3.0);
}

TEST(CompiledCollectives, WhatIsNotAnOpOfTheIrIsAClearError) {
  auto f = compile([](const Tensor &x) {
    Tensor y = x * 2.0;
    dist::all_reduce_async(y).wait();
    return y;
  });
  std::string msg = errorOf([&] { f(Tensor::ones({4})); });
  EXPECT_NE(msg.find("the *_async forms"), std::string::npos) << msg;
  auto fenced = compile([](const Tensor &x) {
    dist::barrier(); // would run only while tracing
    return x * 2.0;
  });
  msg = errorOf([&] { fenced(Tensor::ones({4})); });
  EXPECT_NE(msg.find("dist::barrier (rank " + std::to_string(rankOf())), std::string::npos) << msg;
  EXPECT_NE(msg.find("inside a traced or compiled function"), std::string::npos) << msg;
  auto g = compile([](const Tensor &x) { return dist::reduce_scatter(x, 0); });
  if (worldOf() > 1) {
    msg = errorOf([&] { g(Tensor::ones({2 * worldOf() + 1})); });
    EXPECT_NE(msg.find("reduce_scatter: dim 0 of f32[" + std::to_string(2 * worldOf() + 1) +
                       "] has size"),
              std::string::npos)
        << msg;
  }
  auto h = compile([](const Tensor &x) {
    Tensor y = x;
    dist::all_reduce(y, ReduceOp::mean);
    return y;
  });
  msg = errorOf([&] { h(Tensor::ones({3}, DType::i64)); });
  EXPECT_NE(msg.find("mean takes f32 and f64"), std::string::npos) << msg;
  dist::barrier();
}

// ---- gradients: the job's objective is the sum of every rank's loss ----

// Rank r's loss is sum(c_r * y) for the collective's output y; c_r differs per rank.
struct GradCase {
  std::string name;
  std::function<Tensor(Tensor)> apply;
  Shape in, out;
  // the reference gradient of this rank's input, from every rank's c and x
  std::function<Tensor(const std::vector<Tensor> &c, const std::vector<Tensor> &x)> want;
};

std::vector<GradCase> gradCases() {
  const int w = worldOf();
  const int64_t n = w;
  auto sumOf = [](const std::vector<Tensor> &ts) {
    Tensor s = ts[0];
    for (size_t i = 1; i < ts.size(); ++i) s = s + ts[i];
    return s;
  };
  return {
      {"all_reduce sum",
       [](Tensor t) {
         dist::all_reduce(t);
         return t;
       },
       {3, 2},
       {3, 2},
       [sumOf](const std::vector<Tensor> &c, const std::vector<Tensor> &) { return sumOf(c); }},
      {"all_reduce mean",
       [](Tensor t) {
         dist::all_reduce(t, ReduceOp::mean);
         return t;
       },
       {3, 2},
       {3, 2},
       [sumOf, w](const std::vector<Tensor> &c, const std::vector<Tensor> &) {
         return sumOf(c) * (1.0 / w);
       }},
      {"all_reduce max",
       [](Tensor t) {
         dist::all_reduce(t, ReduceOp::max);
         return t;
       },
       {3, 2},
       {3, 2},
       [sumOf](const std::vector<Tensor> &c, const std::vector<Tensor> &x) {
         Tensor m = x[0];
         for (const Tensor &xr : x) m = maximum(m, xr);
         return sumOf(c) * eq(x[static_cast<size_t>(rankOf())], m).to(DType::f64);
       }},
      {"all_gather dim 1",
       [](Tensor t) { return dist::all_gather(t, 1); },
       {3, 2},
       {3, 2 * n},
       [sumOf](const std::vector<Tensor> &c, const std::vector<Tensor> &) {
         return slice(sumOf(c), 1, 2 * rankOf(), 2 * rankOf() + 2);
       }},
      {"reduce_scatter dim 0",
       [](Tensor t) { return dist::reduce_scatter(t, 0); },
       {2 * n, 3},
       {2, 3},
       [](const std::vector<Tensor> &c, const std::vector<Tensor> &) { return cat(c, 0); }},
      {"broadcast root last",
       [w](Tensor t) {
         dist::broadcast(t, w - 1);
         return t;
       },
       {3, 2},
       {3, 2},
       [sumOf, w](const std::vector<Tensor> &c, const std::vector<Tensor> &) {
         return rankOf() == w - 1 ? sumOf(c) : sumOf(c) * 0.0;
       }},
  };
}

TEST(CompiledCollectives, GradientRulesMatchTheReference) {
  const int w = worldOf();
  uint64_t seed = 500;
  for (const GradCase &gc : gradCases()) {
    SCOPED_TRACE(gc.name);
    ++seed;
    std::vector<Tensor> cs, xs;
    for (int r = 0; r < w; ++r) {
      cs.push_back(rankInput(r, gc.out, DType::f64, seed));
      xs.push_back(rankInput(r, gc.in, DType::f64, seed + 50));
    }
    Tensor c = cs[static_cast<size_t>(rankOf())];
    auto f = compile([&gc, c](const Tensor &x) { return sum(gc.apply(x) * c); });
    Tensor want = gc.want(cs, xs);
    for (int call = 0; call < 2; ++call) { // the first call traces, the second runs compiled
      Tensor x = xs[static_cast<size_t>(rankOf())].clone().requires_grad_();
      Tensor loss = f(x);
      loss.backward();
      ASSERT_TRUE(x.grad().defined());
      expectClose(x.grad(), want, "call " + std::to_string(call));
    }
    EXPECT_GE(f.stats().compiles, 1);
  }
}

// A whole training step with a collective in the forward: the compiled backward runs the
// rule's collective (all_gather's gradient is a reduce_scatter) and the step updates the
// parameter the same on every rank as the eager math says.
TEST(CompiledCollectives, TrainingThroughAllGatherEqualsTheEagerMath) {
  const int w = worldOf();
  Tensor target = rankInput(rankOf(), {2 * w, 4}, DType::f64, 602);
  auto f = compile([&](const Tensor &x) {
    Tensor full = dist::all_gather(x, 0);
    Tensor d = tanh(full) - target;
    return sum(d * d);
  });
  for (int call = 0; call < 2; ++call) {
    Tensor shard = rankInput(rankOf(), {2, 4}, DType::f64, 601).requires_grad_();
    Tensor loss = f(shard);
    loss.backward();
    // eager: every rank's loss_r = sum((tanh(X) - t_r)^2), X = cat(x_0..x_{w-1});
    // d(sum_r loss_r)/dx_s = sum_r 2 (tanh(X) - t_r) (1 - tanh(X)^2), rows of block s
    std::vector<Tensor> all;
    for (int r = 0; r < w; ++r) {
      all.push_back(r == rankOf() ? shard.detach() : rankInput(r, {2, 4}, DType::f64, 601));
    }
    Tensor X = cat(all, 0);
    Tensor gsum = Tensor::zeros({2 * w, 4}, DType::f64);
    for (int r = 0; r < w; ++r) {
      Tensor tr = rankInput(r, {2 * w, 4}, DType::f64, 602);
      gsum = gsum + (tanh(X) - tr) * 2.0 * (1.0 - tanh(X) * tanh(X));
    }
    expectClose(shard.grad(), slice(gsum, 0, 2 * rankOf(), 2 * rankOf() + 2),
                "call " + std::to_string(call));
  }
}

} // namespace
} // namespace rcjit
