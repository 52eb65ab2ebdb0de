// The work pool (support/WorkPool.h): every chunk runs once, concurrent and nested callers,
// errors, inline runs, packing onto fewer CPUs on a busy machine; and the compiled program's
// block-split oneDNN GEMMs (LibraryStep::create) against the same GEMM unsplit.
#include <gtest/gtest.h>

#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <rcjit/Error.h>
#include <rcjit/Optim.h>
#include <rcjit/rcjit.h>

#include "support/ParallelFor.h"
#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/Program.h"
#include "targets/cpu/LibraryStep.h"
#include "targets/eager/DnnlContext.h"
#include "tracer/TensorImpl.h"

using namespace rcjit;

namespace {

// Runs a job of `chunks` on `pool` and checks every chunk ran exactly once.
void expectEachChunkOnce(WorkPool &pool, int64_t chunks) {
  std::vector<std::atomic<int>> ran(static_cast<size_t>(chunks));
  for (auto &r : ran) r.store(0);
  pool.run(chunks, [&](int64_t c) {
    ASSERT_GE(c, 0);
    ASSERT_LT(c, chunks);
    ran[static_cast<size_t>(c)].fetch_add(1);
  });
  for (int64_t c = 0; c < chunks; ++c) EXPECT_EQ(ran[static_cast<size_t>(c)].load(), 1) << c;
}

} // namespace

// Each test below runs the pool's own workers and, as the process's pool does, OpenMP's team
// (`ompTeam`); under TSan the own workers alone: libgomp is not instrumented, so TSan cannot
// see its barrier order a chunk's writes before the caller's reads.
#if defined(__SANITIZE_THREAD__)
constexpr bool kTeams[] = {false};
#else
constexpr bool kTeams[] = {false, true};
#endif

TEST(WorkPool, EveryChunkRunsExactlyOnce) {
  for (bool ompTeam : kTeams) {
    WorkPool pool(3, WorkPool::kDefaultSpinMicros, true, ompTeam);
    OmpThreads many(3); // the caller's own OpenMP count allows parallel jobs
    for (int64_t chunks : {0, 1, 2, 3, 7, 64, 1000, 5000}) expectEachChunkOnce(pool, chunks);
    for (int rep = 0; rep < 200; ++rep) expectEachChunkOnce(pool, 1 + rep % 13);
  }
}

TEST(WorkPool, WorkersTakeChunks) {
  // each chunk waits until some chunk has run on another thread than the caller (a worker
  // took part), giving up after 30 s so that a pool whose workers never run fails
  for (bool ompTeam : kTeams) {
    WorkPool pool(2, /*spinMicros=*/0, true, ompTeam);
    OmpThreads many(2);
    const auto caller = std::this_thread::get_id();
    std::atomic<bool> workerRan{false};
    pool.run(64, [&](int64_t) {
      if (std::this_thread::get_id() != caller) {
        workerRan.store(true);
        return;
      }
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!workerRan.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    EXPECT_TRUE(workerRan.load()) << "ompTeam " << ompTeam;
    EXPECT_GE(pool.parallelJobs(), 1);
    EXPECT_GE(pool.workerChunks(), 1);
  }
}

TEST(WorkPool, ConcurrentCallers) {
  for (bool ompTeam : kTeams) {
    WorkPool pool(3, WorkPool::kDefaultSpinMicros, true, ompTeam);
    std::vector<std::thread> callers;
    std::atomic<int> bad{0};
    for (int t = 0; t < 4; ++t) {
      callers.emplace_back([&, t] {
        omp_set_num_threads(3);
        for (int rep = 0; rep < 100; ++rep) {
          const int64_t chunks = 1 + (rep * 7 + t) % 50;
          std::vector<std::atomic<int>> ran(static_cast<size_t>(chunks));
          for (auto &r : ran) r.store(0);
          pool.run(chunks, [&](int64_t c) { ran[static_cast<size_t>(c)].fetch_add(1); });
          for (auto &r : ran) bad += r.load() != 1;
        }
      });
    }
    for (std::thread &t : callers) t.join();
    EXPECT_EQ(bad.load(), 0);
  }
}

TEST(WorkPool, ErrorsReachTheCallerAsRcjitError) {
  for (bool ompTeam : kTeams) {
    WorkPool pool(3, WorkPool::kDefaultSpinMicros, true, ompTeam);
    OmpThreads many(3);
    // a foreign exception becomes an rcjit::Error naming it
    try {
      pool.run(100, [](int64_t c) {
        if (c == 37) throw std::runtime_error("chunk 37 broke");
      });
      FAIL() << "no exception";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("chunk 37 broke"), std::string::npos) << e.what();
    }
    // an rcjit::Error passes through as it is
    try {
      pool.run(100, [](int64_t c) {
        if (c % 10 == 3) throw Error("bad chunk");
      });
      FAIL() << "no exception";
    } catch (const Error &e) {
      EXPECT_EQ(std::string(e.what()), "bad chunk");
    }
    // also on the inline path
    WorkPool one(1);
    EXPECT_THROW(one.run(4,
                         [](int64_t c) {
                           if (c == 2) throw std::logic_error("x");
                         }),
                 Error);
    // the pool still works afterwards
    expectEachChunkOnce(pool, 500);
  }
}

TEST(WorkPool, NestedUseRunsInline) {
  for (bool ompTeam : kTeams) {
    WorkPool pool(3, WorkPool::kDefaultSpinMicros, true, ompTeam);
    OmpThreads many(3);
    std::atomic<int> inner{0}, offThread{0};
    pool.run(32, [&](int64_t) {
      const auto self = std::this_thread::get_id();
      int64_t last = -1;
      pool.run(8, [&](int64_t c) {
        offThread += std::this_thread::get_id() != self;
        offThread += c != last + 1; // in order
        last = c;
        ++inner;
      });
    });
    EXPECT_EQ(inner.load(), 32 * 8);
    EXPECT_EQ(offThread.load(), 0);
  }
}

TEST(WorkPool, OneThreadRunsInlineInOrder) {
  auto inOrderOnCaller = [](WorkPool &pool) {
    const auto caller = std::this_thread::get_id();
    std::vector<int64_t> order;
    pool.run(20, [&](int64_t c) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      order.push_back(c);
    });
    ASSERT_EQ(order.size(), 20u);
    for (int64_t c = 0; c < 20; ++c) EXPECT_EQ(order[static_cast<size_t>(c)], c);
  };
  WorkPool single(1);
  inOrderOnCaller(single);
  // a caller whose OpenMP thread count is 1 (OMP_NUM_THREADS=1, or omp_set_num_threads)
  WorkPool pool(3);
  {
    OmpThreads one(1);
    inOrderOnCaller(pool);
  }
  EXPECT_EQ(pool.parallelJobs(), 0);
}

TEST(WorkPool, ChunksRunWithOneOpenMPThread) {
  for (bool ompTeam : kTeams) {
    WorkPool pool(2, WorkPool::kDefaultSpinMicros, true, ompTeam);
    OmpThreads many(2);
    std::atomic<int> notOne{0};
    pool.run(64, [&](int64_t) { notOne += omp_get_max_threads() != 1; });
    EXPECT_EQ(notOne.load(), 0) << "ompTeam " << ompTeam;
    EXPECT_EQ(omp_get_max_threads(), 2); // the caller's count is back
  }
}

// A thread that asked for the pool's own workers never opens an OpenMP parallel region; one
// that did not runs its jobs on OpenMP's team (where OpenMP is in use: not under TSan).
TEST(WorkPool, AThreadCanKeepItsJobsOffOpenMPsTeam) {
  WorkPool pool(2, /*spinMicros=*/0, true, /*ompTeam=*/true);
  auto chunksInARegion = [&pool](bool own) {
    std::atomic<int> inRegion{0}, ran{0};
    std::thread([&] {
      if (own) WorkPool::useOwnWorkersOnThisThread();
      OmpThreads many(2);
      for (int rep = 0; rep < 20; ++rep)
        pool.run(64, [&](int64_t) {
          inRegion += omp_in_parallel() != 0;
          ++ran;
        });
    }).join();
    EXPECT_EQ(ran.load(), 20 * 64);
    return inRegion.load();
  };
  EXPECT_EQ(chunksInARegion(true), 0);
  if (kTeams[std::size(kTeams) - 1]) {
    EXPECT_GT(chunksInARegion(false), 0);
  }
}

TEST(WorkPool, PackToFollowsTheFairShare) {
  // two threads on two CPUs: spread unless two others are runnable (then each thread would
  // share its CPU at random phases: packed, they take turns on one)
  EXPECT_EQ(WorkPool::packTo(2, 2, 0), 0);
  EXPECT_EQ(WorkPool::packTo(2, 2, 1), 0);
  EXPECT_EQ(WorkPool::packTo(2, 2, 1.5), 1);
  EXPECT_EQ(WorkPool::packTo(2, 2, 2), 1);
  EXPECT_EQ(WorkPool::packTo(2, 2, 8), 1);
  // one thread, one CPU, or a team no smaller than its CPUs: nothing to pack
  EXPECT_EQ(WorkPool::packTo(2, 1, 8), 0);
  EXPECT_EQ(WorkPool::packTo(1, 2, 8), 0);
  EXPECT_EQ(WorkPool::packTo(2, 4, 2), 0);
  // many CPUs: the team's fair share of them, rounded up past a quarter
  EXPECT_EQ(WorkPool::packTo(16, 4, 0), 0);
  EXPECT_EQ(WorkPool::packTo(16, 4, 12), 0); // 4 CPUs' worth: one each
  EXPECT_EQ(WorkPool::packTo(16, 4, 20), 0); // 2.67: more than half a CPU per thread
  EXPECT_EQ(WorkPool::packTo(16, 4, 40), 2); // 1.45
  EXPECT_EQ(WorkPool::packTo(16, 2, 40), 1); // 0.76
  EXPECT_EQ(WorkPool::packTo(64, 64, 1), 0); // 63: one CPU short of the team
  EXPECT_EQ(WorkPool::packTo(64, 64, 64), 32);
}

namespace {

// The process may run on every online CPU (the pool packs only then).
bool mayRunEverywhere() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 &&
         CPU_COUNT(&set) == static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

// Threads that keep every CPU busy (twice as many as CPUs) until destroyed.
struct BusyThreads {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  explicit BusyThreads(int n) {
    for (int i = 0; i < n; ++i)
      threads.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~BusyThreads() {
    stop = true;
    for (auto &t : threads) t.join();
  }
};

// Runs a parallel job of `chunks` chunks of ~20 us each and returns the CPUs they ran on.
std::set<int> jobCpus(WorkPool &pool, int64_t chunks) {
  std::mutex mu;
  std::set<int> cpus;
  pool.run(chunks, [&](int64_t) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    while (std::chrono::steady_clock::now() < until) {
    }
    const int cpu = sched_getcpu();
    std::lock_guard<std::mutex> lock(mu);
    cpus.insert(cpu);
  });
  return cpus;
}

} // namespace

TEST(WorkPool, PacksOntoOneCpuWhileTheMachineIsBusy) {
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (online < 2 || online > 16 || !mayRunEverywhere())
    GTEST_SKIP() << "needs 2-16 online CPUs, all of them allowed to this process";
  WorkPool pool(2);
  OmpThreads many(2);
  EXPECT_EQ(pool.packedCpus(), 0);
  set_logs("perf_hints");
  testing::internal::CaptureStderr();
  {
    BusyThreads busy(2 * online); // the pool's two threads would get one CPU between them
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // a sample per 10 ms at most, at a job's start, into an average that starts at 0
    for (int i = 0; i < 200 && pool.packedCpus() == 0; ++i) {
      jobCpus(pool, 8);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_EQ(pool.packedCpus(), 1) << "others runnable: " << pool.othersRunnable();
    EXPECT_GT(WorkPool::packTo(online, 2, pool.othersRunnable()), 0) << pool.othersRunnable();
    // packed: the caller and the worker run the job's chunks on one CPU (jobs of ~1.3 ms,
    // the worker woken after the first 200 us, until it has taken some chunks)
    const int64_t before = pool.workerChunks();
    for (int i = 0; i < 200 && pool.packedCpus() == 1 && pool.workerChunks() == before; ++i) {
      const std::set<int> cpus = jobCpus(pool, 64);
      if (pool.packedCpus() == 1) {
        EXPECT_EQ(cpus.size(), 1u);
      }
    }
    EXPECT_GT(pool.workerChunks(), before);
  }
  // after each job the caller's CPUs are its own again
  EXPECT_TRUE(mayRunEverywhere());
  // the load gone, the pool spreads again once its average of the others falls (unless the
  // machine stays busy with other work: then that average must still call for packing)
  for (int i = 0; i < 500 && pool.packedCpus() != 0; ++i) {
    jobCpus(pool, 8);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (pool.packedCpus() != 0) {
    EXPECT_GT(WorkPool::packTo(online, 2, pool.othersRunnable() + 0.5), 0)
        << "still packed with " << pool.othersRunnable() << " others runnable";
  }
  const std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  // the perf_hints log says when and why the pool packed, and when it spread again
  EXPECT_NE(log.find("[rcjit:perf_hints] work pool: "), std::string::npos) << log;
  EXPECT_NE(log.find("other tasks runnable on average beside its 2 threads on " +
                     std::to_string(online) + " CPUs: its threads now share CPU "),
            std::string::npos)
      << log;
  if (pool.packedCpus() == 0) {
    EXPECT_NE(log.find("spread over the " + std::to_string(online) + " CPUs again"),
              std::string::npos)
        << log;
  }
  expectEachChunkOnce(pool, 500);
}

TEST(WorkPool, PackingOffNeverPacks) {
  const int online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (online < 2 || online > 16) GTEST_SKIP() << "needs 2-16 online CPUs";
  WorkPool pool(2, WorkPool::kDefaultSpinMicros, /*pack=*/false);
  OmpThreads many(2);
  BusyThreads busy(2 * online);
  for (int i = 0; i < 20; ++i) {
    jobCpus(pool, 8);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(pool.packedCpus(), 0);
  EXPECT_EQ(pool.othersRunnable(), -1.0);
}

namespace {

// A program of one library step (matmul or linear) over input buffers holding the
// operands, contiguous, and a contiguous output.
struct GemmProgram {
  Program p;
  Step step;
  std::vector<std::vector<float>> data; // per operand
  std::vector<float> out;

  int value(const Shape &shape, Buffer::Kind kind, int index) {
    Buffer b;
    b.kind = kind;
    b.index = index;
    b.shape = shape;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    b.bytes = n * 4;
    p.buffers.push_back(b);
    Value v;
    v.buffer = static_cast<int>(p.buffers.size()) - 1;
    v.shape = shape;
    v.strides = detail::contiguousStrides(shape);
    p.values.push_back(v);
    return static_cast<int>(p.values.size()) - 1;
  }

  GemmProgram(OpKind op, const std::vector<Shape> &operands, const Shape &result,
              std::vector<PostOp> post = {}) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    step.kind = Step::Kind::library;
    step.op = op;
    step.postOps = std::move(post);
    for (size_t i = 0; i < operands.size(); ++i) {
      step.operands.push_back(value(operands[i], Buffer::Kind::input, static_cast<int>(i)));
      int64_t n = 1;
      for (int64_t d : operands[i]) n *= d;
      data.emplace_back(static_cast<size_t>(n));
      for (float &x : data.back()) x = u(rng);
    }
    step.result = value(result, Buffer::Kind::output, 0);
    p.numInputs = static_cast<int>(operands.size());
    p.steps.push_back(step);
    int64_t n = 1;
    for (int64_t d : result) n *= d;
    out.assign(static_cast<size_t>(n), 0.f);
  }

  // `withStorage`: the weight (operand 1) from a storage of its own, as a parameter's, so
  // a step packing its weight packs it; without, such a step runs over the plain weight
  std::vector<float> run(const cpu::LibraryStep &s, bool withStorage = true) {
    if (!weight) {
      weight = detail::allocateStorage(data[1].size() * 4, Device::cpu());
      std::copy(data[1].begin(), data[1].end(), static_cast<float *>(weight->data));
    }
    std::vector<char *> ops;
    for (auto &d : data) ops.push_back(reinterpret_cast<char *>(d.data()));
    if (withStorage) ops[1] = static_cast<char *>(weight->data);
    std::fill(out.begin(), out.end(), -7.f);
    s.runWith(ops.data(), reinterpret_cast<char *>(out.data()), withStorage ? &weight : nullptr);
    return out;
  }
  std::shared_ptr<detail::Storage> weight;
};

// The cost model's splits and packs while alive, whatever the host (an AVX2 host runs
// [N, K]-ordered weights on oneDNN's own threads instead: LibraryStep::setNkWeights; an
// AVX-512 or AMX host one call over a packed weight: LibraryStep::setWholePackedGemms).
// The host's GEMM choices forced while alive (LibraryStep::setNkWeights and
// setWholePackedGemms), given back to the host after.
struct GemmChoices {
  GemmChoices(int nkWeights, int wholePacked) {
    cpu::LibraryStep::setNkWeights(nkWeights);
    cpu::LibraryStep::setWholePackedGemms(wholePacked);
  }
  ~GemmChoices() {
    cpu::LibraryStep::setNkWeights(-1);
    cpu::LibraryStep::setWholePackedGemms(-1);
  }
};
struct CostModelGemms : GemmChoices {
  CostModelGemms() : GemmChoices(0, 0) {}
};

// One call over a packed weight while alive, as on an AVX-512 or AMX host, whatever the host.
struct WholePackedGemms : GemmChoices {
  WholePackedGemms() : GemmChoices(0, 1) {}
};

// The step split into blocks (with this process's pool) and unsplit (made on one OpenMP
// thread: no split) give the same result.
void expectSplitMatchesWhole(GemmProgram &g) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  CostModelGemms costModel;
  OmpThreads many(WorkPool::instance().threads());
  auto split = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(split);
  EXPECT_GT(split->blocks(), 1) << "expected the GEMM to be cut into blocks";
  std::unique_ptr<cpu::LibraryStep> whole;
  {
    OmpThreads one(1);
    whole = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  }
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->blocks(), 1);
  g.run(*split); // a weight is packed the second time it is seen at its version
  g.run(*whole);
  const std::vector<float> a = g.run(*split), b = g.run(*whole);
  // a step packing its weight, run without the weight's storage: over the plain weight
  const std::vector<float> c = g.run(*split, false);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-4f * (1.f + std::fabs(b[i]))) << "element " << i;
    ASSERT_NEAR(c[i], b[i], 1e-4f * (1.f + std::fabs(b[i]))) << "element " << i;
  }
  // the pool again, with a job of its own in between
  std::vector<float> again = g.run(*split);
  EXPECT_EQ(again, a);
}

} // namespace

TEST(BlockedGemm, RowsNotDivisibleByTheBlock) {
  GemmProgram g(OpKind::matmul, {{37, 129}, {129, 301}}, {37, 301});
  expectSplitMatchesWhole(g);
}

TEST(BlockedGemm, OneRowSplitsColumns) {
  GemmProgram g(OpKind::matmul, {{1, 1537}, {1537, 1029}}, {1, 1029});
  expectSplitMatchesWhole(g);
}

TEST(BlockedGemm, LinearWithBiasAndPostOpOddSizes) {
  GemmProgram g(OpKind::linear, {{3, 41, 257}, {131, 257}, {131}}, {3, 41, 131},
                {PostOp{OpKind::gelu}});
  expectSplitMatchesWhole(g);
}

TEST(BlockedGemm, OneRowLinearWithBias) {
  GemmProgram g(OpKind::linear, {{1, 1025}, {1031, 1025}, {1031}}, {1, 1031});
  expectSplitMatchesWhole(g);
}

TEST(BlockedGemm, BatchedMatmul) {
  GemmProgram g(OpKind::matmul, {{5, 67, 33}, {5, 33, 129}}, {5, 67, 129}, {PostOp{OpKind::relu}});
  expectSplitMatchesWhole(g);
}

// A symbolic program's product through the shared runtime-dims primitive: cut into blocks
// (of rows, or of batches) when large, one call when small; the same results as one call.
void expectRuntimeDimsSplitMatchesWhole(GemmProgram &g, bool split) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  CostModelGemms costModel;
  OmpThreads many(WorkPool::instance().threads());
  auto step = cpu::LibraryStep::create(g.p, g.p.steps[0], /*sizeFree=*/true);
  ASSERT_TRUE(step);
  EXPECT_EQ(step->blocks() > 1, split);
  std::unique_ptr<cpu::LibraryStep> whole;
  {
    OmpThreads one(1);
    whole = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  }
  ASSERT_TRUE(whole);
  const std::vector<float> a = g.run(*step), b = g.run(*whole);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-4f * (1.f + std::fabs(b[i]))) << "element " << i;
}

// Weights in [N, K] order (the choice below AVX-512, forced here on any host): a matmul over
// a [K, N] parameter packs it into that order once per version and runs one oneDNN call; a
// linear's [N, K] weight runs as it is. Both equal the plain call.
// `step` (which packs its weight) gives `plain`'s values on its second call (over the
// packed copy) and on a call without the weight's storage (never packed).
void expectPackedAndUnpackedMatch(GemmProgram &g, const cpu::LibraryStep &step,
                                  const cpu::LibraryStep &plain, std::string_view what) {
  const std::vector<float> want = g.run(plain);
  g.run(step); // the second call at the weight's version runs over the packed copy
  const std::vector<float> got = g.run(step), unpacked = g.run(step, false);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << what << " " << i;
    ASSERT_NEAR(unpacked[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << what;
  }
}

TEST(BlockedGemm, NkWeightsPackAKnParameterAndKeepALinearsWeight) {
  for (OpKind op : {OpKind::matmul, OpKind::linear}) {
    // per op: the plain step's CostModelGemms below gives the host back its choice
    // (on an AVX-512 host: no [N, K] weights) when it ends
    GemmChoices nk(1, -1);
    GemmProgram g = op == OpKind::matmul
                        ? GemmProgram(op, {{64, 300}, {300, 200}}, {64, 200})
                        : GemmProgram(op, {{64, 300}, {200, 300}, {200}}, {64, 200});
    auto step = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    ASSERT_TRUE(step);
    EXPECT_EQ(step->blocks(), 1) << opName(op);
    EXPECT_EQ(step->packsWeights(), op == OpKind::matmul) << opName(op);
    std::unique_ptr<cpu::LibraryStep> plain;
    {
      CostModelGemms costModel;
      OmpThreads one(1); // one plain call
      plain = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    }
    ASSERT_TRUE(plain);
    expectPackedAndUnpackedMatch(g, *step, *plain, opName(op));
  }
}

// AVX-512 and AMX hosts: a product over a parameter with rows enough is one call on
// oneDNN's threads over the weight packed into oneDNN's layout (forced here on any host).
TEST(BlockedGemm, WholePackedGemmIsOneCallOverThePackedWeight) {
  for (OpKind op : {OpKind::matmul, OpKind::linear}) {
    GemmProgram g = op == OpKind::matmul
                        ? GemmProgram(op, {{64, 300}, {300, 200}}, {64, 200})
                        : GemmProgram(op, {{64, 300}, {200, 300}, {200}}, {64, 200});
    std::unique_ptr<cpu::LibraryStep> step, plain;
    {
      WholePackedGemms whole;
      OmpThreads many(std::max(2, WorkPool::instance().threads()));
      step = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    }
    ASSERT_TRUE(step);
    EXPECT_EQ(step->blocks(), 1) << opName(op);
    EXPECT_TRUE(step->packsWeights()) << opName(op);
    EXPECT_EQ(step->describe().rfind("one oneDNN matmul made for ", 0), 0u) << step->describe();
    {
      OmpThreads one(1); // one plain call
      plain = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    }
    ASSERT_TRUE(plain);
    expectPackedAndUnpackedMatch(g, *step, *plain, opName(op));
  }
}

// The same hosts, f32: a row-major [K, N] weight not yet packed (new every call, as a
// parameter in training) is reordered into the blocked layout on each call, where the rows
// pay for it (4M >= K); a linear's [N, K] weight is not.
TEST(BlockedGemm, RowMajorWeightIsReorderedOnEachCallUntilPacked) {
  for (int64_t rows : {96, 64}) { // 4 * 96 >= 300: reordered; 4 * 64 < 300: plain
    GemmProgram g(OpKind::matmul, {{rows, 300}, {300, 200}}, {rows, 200}, {PostOp{OpKind::relu}});
    std::unique_ptr<cpu::LibraryStep> step, plain;
    {
      WholePackedGemms whole;
      OmpThreads many(std::max(2, WorkPool::instance().threads()));
      step = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    }
    ASSERT_TRUE(step);
    const bool reordered =
        step->describe().find("reordered into its blocked layout on each call") !=
        std::string::npos;
    EXPECT_EQ(reordered, rows == 96) << step->describe();
    {
      OmpThreads one(1);
      plain = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    }
    const std::vector<float> want = g.run(*plain);
    for (int call = 0; call < 3; ++call) { // unpacked (no storage), reordered per call
      const std::vector<float> got = g.run(*step, false);
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << rows << " " << i;
    }
  }
}

TEST(BlockedGemm, RuntimeDimsProductSplitsByRows) {
  GemmProgram g(OpKind::linear, {{72, 256}, {128, 256}, {128}}, {72, 128});
  expectRuntimeDimsSplitMatchesWhole(g, true);
}

TEST(BlockedGemm, RuntimeDimsBatchedProductSplitsByBatches) {
  GemmProgram g(OpKind::matmul, {{6, 33, 128}, {6, 128, 72}}, {6, 33, 72}, {PostOp{OpKind::relu}});
  expectRuntimeDimsSplitMatchesWhole(g, true);
}

TEST(BlockedGemm, SmallRuntimeDimsProductIsOneCall) {
  GemmProgram g(OpKind::matmul, {{16, 64}, {64, 48}}, {16, 48});
  expectRuntimeDimsSplitMatchesWhole(g, false);
}

TEST(BlockedGemm, ConcurrentCallsAgree) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  GemmProgram g(OpKind::linear, {{64, 200}, {300, 200}, {300}}, {64, 300});
  OmpThreads many(WorkPool::instance().threads());
  auto split = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(split);
  g.run(*split); // seen once; packed from the second run on
  const std::vector<float> want = g.run(*split);
  std::vector<std::thread> ts;
  std::atomic<int> bad{0};
  for (int t = 0; t < 3; ++t) {
    ts.emplace_back([&] {
      std::vector<float> out(want.size());
      std::vector<char *> ops;
      for (auto &d : g.data) ops.push_back(reinterpret_cast<char *>(d.data()));
      ops[1] = static_cast<char *>(g.weight->data); // the packed copy, shared
      for (int rep = 0; rep < 20; ++rep) {
        split->runWith(ops.data(), reinterpret_cast<char *>(out.data()), &g.weight);
        bad += out != want;
      }
    });
  }
  for (auto &t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(BlockedGemm, BatchDimsThatDoNotCollapseSplitByTheFirst) {
  // a [B, H, M, K] view of a [B, M, H, K] tensor (attention's heads) times a dense
  // [B, H, K, N]: no single batch stride, so one block per index of the first dim
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  const int64_t B = 3, H = 4, M = 33, K = 40, N = 81; // 2^20 multiply-adds or more
  GemmProgram g(OpKind::matmul, {{B, M, H, K}, {B, H, K, N}}, {B, H, M, N});
  Value &a = g.p.values[static_cast<size_t>(g.p.steps[0].operands[0])];
  a.shape = {B, H, M, K};
  a.strides = {M * H * K, K, H * K, 1};
  OmpThreads many(WorkPool::instance().threads());
  auto split = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(split) << "expected a blocked step, not the eager path";
  EXPECT_EQ(split->blocks(), B);
  const std::vector<float> got = g.run(*split);
  const std::vector<float> &x = g.data[0], &y = g.data[1];
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double want = 0;
          for (int64_t k = 0; k < K; ++k)
            want +=
                static_cast<double>(x[static_cast<size_t>(b * M * H * K + i * H * K + h * K + k)]) *
                y[static_cast<size_t>(((b * H + h) * K + k) * N + j)];
          const float v = got[static_cast<size_t>(((b * H + h) * M + i) * N + j)];
          ASSERT_NEAR(v, want, 1e-4 * (1 + std::fabs(want)))
              << b << " " << h << " " << i << " " << j;
        }
}

namespace {
// The inner-dim split and row blocks over plain operands forced on (whatever the host: an
// AVX-512 host without AMX chooses them) and weights not packed while alive.
struct PlainOperandSplits {
  PlainOperandSplits() {
    cpu::LibraryStep::setPlainOperandSplits(1);
    cpu::LibraryStep::setPackWeights(false);
  }
  ~PlainOperandSplits() { cpu::LibraryStep::setPlainOperandSplits(-1); }
  CostModelGemms costModel;
};

// C = A @ B in double, A [M, K] at strides (sa0, sa1), B [K, N] and C [M, N] row-major;
// `got` within f32 rounding of it.
void expectProduct(const std::vector<float> &got, const std::vector<float> &a, int64_t sa0,
                   int64_t sa1, const std::vector<float> &b, int64_t M, int64_t K, int64_t N) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double t = static_cast<double>(a[static_cast<size_t>(i * sa0 + k * sa1)]) *
                         b[static_cast<size_t>(k * N + j)];
        want += t;
        mag += std::fabs(t);
      }
      ASSERT_NEAR(got[static_cast<size_t>(i * N + j)], want, 1e-5 * (1 + mag)) << i << " " << j;
    }
}
} // namespace

// A product with a long inner dim (gpt2's LM head gradient dx is 512 x 50257 x 768) runs as
// one block of the inner dim per thread, the f32 slices summed after: the product's values,
// a block length not a multiple of the inner dim, and the same again on a second call
// (the step's slice buffer reused).
TEST(BlockedGemm, ALongInnerDimRunsInBlocksSummedAfter) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  PlainOperandSplits on;
  const int64_t M = 19, K = 4099, N = 27; // K >= 4096 and >= 8 x max(M, N)
  GemmProgram g(OpKind::matmul, {{M, K}, {K, N}}, {M, N});
  OmpThreads many(WorkPool::instance().threads());
  auto step = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(step);
  EXPECT_GT(step->blocks(), 1);
  EXPECT_NE(step->describe().find("inner dim"), std::string::npos) << step->describe();
  const std::vector<float> got = g.run(*step);
  expectProduct(got, g.data[0], K, 1, g.data[1], M, K, N);
  EXPECT_EQ(g.run(*step), got);
  // off: the host's other choices (no inner blocks)
  cpu::LibraryStep::setPlainOperandSplits(0);
  auto other = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->describe().find("inner dim"), std::string::npos) << other->describe();
  // a short inner dim is not cut
  cpu::LibraryStep::setPlainOperandSplits(1);
  GemmProgram shortK(OpKind::matmul, {{64, 1024}, {1024, 64}}, {64, 64});
  auto whole = cpu::LibraryStep::create(shortK.p, shortK.p.steps[0]);
  if (whole) {
    EXPECT_EQ(whole->describe().find("inner dim"), std::string::npos);
  }
}

// A weight gradient's product (A the transposed output gradient, B a row-major activation
// that is not a program's parameter) runs as one block of rows per thread over the plain
// operands; the product's values.
TEST(BlockedGemm, AWeightGradientRunsInRowBlocksOverItsPlainOperands) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  PlainOperandSplits on;
  const int64_t M = 301, K = 67, N = 129;
  GemmProgram g(OpKind::matmul, {{M, K}, {K, N}}, {M, N});
  Value &a = g.p.values[static_cast<size_t>(g.p.steps[0].operands[0])];
  a.strides = {1, M}; // A = (a [K, M] row-major) transposed
  OmpThreads many(WorkPool::instance().threads());
  auto step = cpu::LibraryStep::create(g.p, g.p.steps[0]);
  ASSERT_TRUE(step);
  EXPECT_GT(step->blocks(), 1);
  EXPECT_NE(step->describe().find("blocks of rows on the work pool"), std::string::npos)
      << step->describe();
  expectProduct(g.run(*step), g.data[0], 1, M, g.data[1], M, K, N);
}

// The same through rcjit::compile, f32 and bf16 (where oneDNN runs bf16 natively the
// blocks read bf16 and write f32 slices, rounded to bf16 once after the sum; elsewhere
// bf16 products are not library steps): the compiled product equals eager's.
TEST(BlockedGemm, ACompiledLongInnerDimMatchesEager) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  PlainOperandSplits on;
  OmpThreads many(WorkPool::instance().threads());
  NoGradGuard noGrad;
  for (DType t : {DType::f32, DType::bf16}) {
    Tensor a = Tensor::randn({19, 4099}, 1).to(t), b = Tensor::randn({4099, 27}, 2).to(t);
    auto f = compile([](const Tensor &x, const Tensor &y) { return matmul(x, y); },
                     CompileOptions{.tiered = false}); // the compiled program from the start
    Tensor want = matmul(a, b);
    for (int call = 0; call < 3; ++call) {
      Tensor got = f(a, b);
      ASSERT_EQ(got.dtype(), t);
      // bf16: the sums' order differs from one call's, then one rounding of ~64 (|sum| of
      // 4099 N(0, 1) products) at 8 bits
      EXPECT_TRUE(allclose(got.to(DType::f32), want.to(DType::f32), t == DType::f32 ? 1e-4 : 2e-2,
                           t == DType::f32 ? 1e-3 : 1.0))
          << dtypeName(t) << " call " << call;
    }
    if (t == DType::f32 || eager::bf16MatmulsNative()) {
      EXPECT_NE(f.explain().find("inner dim"), std::string::npos) << f.explain();
    }
  }
}

namespace {
struct PackWeightsOn {
  PackWeightsOn() { cpu::LibraryStep::setPackWeights(true); }
  ~PackWeightsOn() { cpu::LibraryStep::setPackWeights(false); }
  CostModelGemms costModel; // the packs these tests count are the cost model's
};
} // namespace

// parallelForRanges: every index once, in disjoint ranges of at least the grain; one call
// below twice the grain.
TEST(ParallelFor, RangesCoverEveryIndexOnceAndKeepTheGrain) {
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{999}, int64_t{1000}, int64_t{12345}}) {
    std::vector<int> seen(static_cast<size_t>(n), 0);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    parallelForRanges(n, 500, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) ++seen[static_cast<size_t>(i)];
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(begin, end);
    });
    for (int x : seen) {
      ASSERT_EQ(x, 1) << "n = " << n;
    }
    if (n == 0) {
      EXPECT_TRUE(ranges.empty());
    } else if (n < 1000) {
      EXPECT_EQ(ranges.size(), 1u) << "n = " << n;
    } else {
      for (const auto &[begin, end] : ranges) EXPECT_GE(end - begin, 500) << "n = " << n;
    }
  }
}

TEST(PackedWeights, RepackedWhenTheStorageVersionChanges) {
  PackWeightsOn on;
  GemmProgram g(OpKind::linear, {{64, 300}, {200, 300}, {200}}, {64, 200});
  std::unique_ptr<cpu::LibraryStep> packed, plain;
  {
    OmpThreads one(1); // not split: one call over the packed weight
    packed = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    cpu::LibraryStep::setPackWeights(false);
    plain = cpu::LibraryStep::create(g.p, g.p.steps[0]);
    cpu::LibraryStep::setPackWeights(true);
  }
  ASSERT_TRUE(packed && plain);
  EXPECT_TRUE(packed->packsWeights());
  EXPECT_FALSE(plain->packsWeights());
  // the weight in a storage of its own, as a parameter is
  const size_t nw = g.data[1].size();
  auto storage = detail::allocateStorage(nw * 4, Device::cpu());
  float *w = static_cast<float *>(storage->data);
  std::copy(g.data[1].begin(), g.data[1].end(), w);
  std::vector<float> out(g.out.size()), want(g.out.size());
  auto check = [&](float *weight, const std::shared_ptr<detail::Storage> &owner) {
    char *ops[3] = {reinterpret_cast<char *>(g.data[0].data()), reinterpret_cast<char *>(weight),
                    reinterpret_cast<char *>(g.data[2].data())};
    packed->runWith(ops, reinterpret_cast<char *>(out.data()), &owner);
    plain->runWith(ops, reinterpret_cast<char *>(want.data()), nullptr);
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_NEAR(out[i], want[i], 1e-4f * (1.f + std::fabs(want[i]))) << i;
  };
  check(w, storage); // seen once: unpacked
  check(w, storage); // packed
  check(w, storage); // the packed copy reused
  // an in-place update bumps the version (as copy_ and the optimizers do)
  for (size_t i = 0; i < nw; ++i) w[i] = -2.f * w[i] + 0.5f;
  storage->version.fetch_add(1);
  check(w, storage);
  check(w, storage);
  // another storage (another parameter passed in its place) at version 0
  auto other = detail::allocateStorage(nw * 4, Device::cpu());
  float *w2 = static_cast<float *>(other->data);
  for (size_t i = 0; i < nw; ++i) w2[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  check(w2, other);
  check(w2, other);
  check(w, storage);
  check(w, storage);
  // the packed copy of w is stale after this write
  for (size_t i = 0; i < nw; ++i) w[i] = 1.f - w[i];
  storage->version.fetch_add(1);
  check(w, storage);
  check(w, storage);
}

TEST(PackedWeights, CompiledLinearFollowsParameterUpdates) {
  PackWeightsOn on;
  Tensor w = Tensor::randn({256, 512}, 3);
  Tensor b = Tensor::randn({256}, 4);
  Tensor x = Tensor::randn({64, 512}, 5);
  auto cf = compile([&](const Tensor &in) { return relu(linear(in, w, b)); });
  auto check = [&] { EXPECT_TRUE(allclose(cf(x), relu(linear(x, w, b)), 1e-4, 1e-4)); };
  {
    OmpThreads one(1); // compiled and run on one thread: the GEMM is not split, so packed
    check();
    check(); // packed from here on
    check();
    w.copy_(Tensor::randn({256, 512}, 6)); // in place: a new version
    check();
    check();
    // an optimizer step
    w.requires_grad_(true);
    Tensor loss = sum(linear(x, w, b));
    loss.backward();
    optim::SGD opt({w}, {.lr = 0.5});
    opt.step();
    check();
    check();
  }
  check(); // and at the default thread count (split, or packed when the pool has one thread)
}

TEST(PackedWeights, CountedInMemoryStatsApartFromTensorBytes) {
  PackWeightsOn on;
  const int64_t weightBytes = 256 * 512 * 4;
  Tensor w = Tensor::randn({256, 512}, 13);
  Tensor b = Tensor::randn({256}, 14);
  Tensor x = Tensor::randn({64, 512}, 15);
  const int64_t base = memory_stats().packed_weight_bytes;
  {
    CompileOptions untiered;
    untiered.tiered = false; // one program: a tier switch would pack the weight afresh
    auto cf = compile([&](const Tensor &in) { return relu(linear(in, w, b)); }, untiered);
    OmpThreads one(1); // not split: the weight is packed on its second sighting
    cf(x);
    EXPECT_EQ(memory_stats().packed_weight_bytes, base) << "seen once: not packed yet";
    const int64_t tensorBytes = memory_stats().current_bytes;
    cf(x);
    const int64_t packed = memory_stats().packed_weight_bytes - base;
    EXPECT_GE(packed, weightBytes);
    EXPECT_LT(packed, 2 * weightBytes); // one copy (oneDNN's blocked layout pads a little)
    EXPECT_EQ(memory_stats().current_bytes, tensorBytes) << "packed copies are not tensors";
    cf(x);
    EXPECT_EQ(memory_stats().packed_weight_bytes - base, packed) << "reused, not counted again";
    w.copy_(Tensor::randn({256, 512}, 16)); // a new version: the stale copy is dropped...
    cf(x);
    EXPECT_EQ(memory_stats().packed_weight_bytes, base);
    cf(x); // ... and the weight packed again, counted once
    EXPECT_EQ(memory_stats().packed_weight_bytes - base, packed);
    EXPECT_EQ(memory_stats(Device::cuda(0)).packed_weight_bytes, 0);
  }
  EXPECT_EQ(memory_stats().packed_weight_bytes, base) << "freed with the compiled function";
  // packing off (RCJIT_PACK_WEIGHTS=0): nothing is counted
  cpu::LibraryStep::setPackWeights(false);
  auto plain = compile([&](const Tensor &in) { return relu(linear(in, w, b)); });
  OmpThreads one(1);
  for (int i = 0; i < 3; ++i) plain(x);
  EXPECT_EQ(memory_stats().packed_weight_bytes, base);
}
