// Horizontal fusion at launch (cpu::launchRuns): which consecutive elementwise kernel steps
// of a CPU program run together in one parallel region; outputs written over dying buffers
// (cpu::outputsOverDying); and the arena planner (planArena, moveLargeBuffersOut). All on
// hand-made programs.
#include <gtest/gtest.h>

#include <vector>

#include "targets/Lower.h"
#include "targets/Program.h"
#include "targets/ProgramRun.h"
#include "targets/cpu/CpuProgram.h"

using namespace rcjit;

namespace {

// A program whose buffers are given, and whose kernel steps each read `reads` and write
// `writes` (buffer ids; one value per buffer, the whole of it), over 1-D domains.
struct Builder {
  Program p;
  std::vector<LoopKernel> kernels;

  int buffer(Buffer::Kind kind, int64_t offset = 0, int64_t bytes = 4096, int index = 0) {
    Buffer b;
    b.kind = kind;
    b.offset = offset;
    b.bytes = bytes;
    b.index = index;
    b.shape = {bytes / 4};
    p.buffers.push_back(b);
    Value v;
    v.buffer = static_cast<int>(p.buffers.size()) - 1;
    v.shape = {bytes / 4};
    v.strides = {1};
    p.values.push_back(v);
    return v.buffer; // value id == buffer id
  }
  void kernel(const std::vector<int> &reads, const std::vector<int> &writes, bool reduce = false) {
    LoopKernel k;
    k.name = "k" + std::to_string(kernels.size());
    k.domain = {SizeExpr::constant(1024)};
    k.numOuter = reduce ? 0 : 1;
    Step s;
    s.kind = Step::Kind::kernel;
    s.kernel = static_cast<int>(kernels.size());
    for (int r : reads) {
      k.tensors.push_back({DType::f32, {SizeExpr::constant(1)}, false});
      s.operands.push_back(r);
    }
    for (int w : writes) {
      k.tensors.push_back({DType::f32, {SizeExpr::constant(1)}, true});
      s.operands.push_back(w);
    }
    // each read loaded, then each write stored (the first load's value, or 0)
    for (size_t t = 0; t < k.tensors.size(); ++t) {
      KernelStmt st;
      st.kind = k.tensors[t].output ? KernelStmt::Kind::store : KernelStmt::Kind::load;
      st.tensor = static_cast<int>(t);
      if (st.kind == KernelStmt::Kind::store) {
        if (reads.empty()) {
          KernelStmt zero;
          zero.kind = KernelStmt::Kind::constant;
          k.stmts.push_back(zero);
        }
        st.args = {reads.empty() ? static_cast<int>(k.stmts.size()) - 1 : 0};
      }
      k.stmts.push_back(st);
    }
    kernels.push_back(k);
    p.steps.push_back(s);
  }
  void library(const std::vector<int> &reads, int result) {
    Step s;
    s.kind = Step::Kind::library;
    s.op = OpKind::matmul;
    s.operands = reads;
    s.result = result;
    p.steps.push_back(s);
  }
  std::vector<int> runs(const std::vector<int> *alias = nullptr, std::vector<int> threads = {},
                        const std::vector<int> *over = nullptr) const {
    if (threads.empty()) threads.assign(p.steps.size(), 0);
    return cpu::launchRuns(p, kernels, threads, alias, over);
  }
};

TEST(LaunchRuns, IndependentUpdatesRunTogether) {
  Builder b;
  int w1 = b.buffer(Buffer::Kind::input, 0, 4096, 0),
      g1 = b.buffer(Buffer::Kind::input, 0, 4096, 1);
  int w2 = b.buffer(Buffer::Kind::input, 0, 4096, 2),
      g2 = b.buffer(Buffer::Kind::input, 0, 4096, 3);
  int o1 = b.buffer(Buffer::Kind::output), o2 = b.buffer(Buffer::Kind::output);
  int o3 = b.buffer(Buffer::Kind::output);
  b.kernel({w1, g1}, {o1});
  b.kernel({w2, g2}, {o2});
  b.kernel({w1, g2}, {o3}); // reads inputs others read: still independent
  EXPECT_EQ(b.runs(), (std::vector<int>{3, 2, 3}));
  // a step told to run on one thread (the cost model, max_autotune) runs alone
  EXPECT_EQ(b.runs(nullptr, {0, 1, 0}), (std::vector<int>{1, 2, 3}));
}

TEST(LaunchRuns, AReadOfAnEarlierMembersWriteEndsTheRun) {
  Builder b;
  int x = b.buffer(Buffer::Kind::input), t = b.buffer(Buffer::Kind::arena, 0, 4096);
  int y = b.buffer(Buffer::Kind::output), z = b.buffer(Buffer::Kind::output);
  b.kernel({x}, {t});
  b.kernel({t}, {y}); // reads what the first wrote
  b.kernel({x}, {z});
  EXPECT_EQ(b.runs(), (std::vector<int>{1, 3, 3}));
}

TEST(LaunchRuns, AWriteOfWhatAnEarlierMemberReadsEndsTheRun) {
  Builder b;
  // the planner put t2 where t1 was (t1's life ended at the first kernel): byte ranges
  // overlap, so the second kernel must not start while the first still reads t1
  int t1 = b.buffer(Buffer::Kind::arena, 0, 4096), t2 = b.buffer(Buffer::Kind::arena, 2048, 4096);
  int x = b.buffer(Buffer::Kind::input), y = b.buffer(Buffer::Kind::output);
  b.kernel({t1}, {y});
  b.kernel({x}, {t2});
  EXPECT_EQ(b.runs(), (std::vector<int>{1, 2}));
  // disjoint byte ranges of the arena are independent
  b.p.buffers[t2].offset = 4096;
  EXPECT_EQ(b.runs(), (std::vector<int>{2, 2}));
}

TEST(LaunchRuns, AnOutputWrittenInPlaceOfAnInputIsThatInput) {
  Builder b;
  int w = b.buffer(Buffer::Kind::input, 0, 4096, 0), x = b.buffer(Buffer::Kind::input, 0, 4096, 1);
  int wNew = b.buffer(Buffer::Kind::output), y = b.buffer(Buffer::Kind::output);
  b.kernel({x}, {wNew});
  b.kernel({w}, {y});
  EXPECT_EQ(b.runs(), (std::vector<int>{2, 2}));
  std::vector<int> alias(b.p.buffers.size(), -1);
  alias[wNew] = 0; // wNew is written into input 0, which the second kernel reads
  EXPECT_EQ(b.runs(&alias), (std::vector<int>{1, 2}));
}

// An output written over a dying dynamic buffer (outputsOverDying) is that buffer: a
// member that writes it must not start while an earlier member still reads the buffer.
TEST(LaunchRuns, AnOutputWrittenOverADyingBufferIsThatBuffer) {
  Builder b;
  int d = b.buffer(Buffer::Kind::dynamic), x = b.buffer(Buffer::Kind::input);
  int y = b.buffer(Buffer::Kind::output), out = b.buffer(Buffer::Kind::output);
  b.kernel({d}, {y});
  b.kernel({d, x}, {out}); // reads d for the last time
  b.p.outputs = {y, out};
  const std::vector<int> over = cpu::outputsOverDying(b.p, b.kernels);
  EXPECT_EQ(over[out], d);
  EXPECT_EQ(over[y], -1); // d is read later
  EXPECT_EQ(b.runs(), (std::vector<int>{2, 2}));
  EXPECT_EQ(b.runs(nullptr, {}, &over), (std::vector<int>{1, 2}));
}

// What outputsOverDying leaves alone: a buffer of another size, one the kernel reads past
// the output's own offsets, a reduction, an arena or input buffer, an output a library
// step writes.
TEST(OutputsOverDying, OnlyAnElementwiseWriterOfTheSameSizeTakesADyingBuffer) {
  Builder b;
  int small = b.buffer(Buffer::Kind::dynamic, 0, 2048), big = b.buffer(Buffer::Kind::dynamic);
  int shifted = b.buffer(Buffer::Kind::dynamic), red = b.buffer(Buffer::Kind::dynamic);
  int arena = b.buffer(Buffer::Kind::arena), in = b.buffer(Buffer::Kind::input);
  int lib = b.buffer(Buffer::Kind::dynamic);
  int o1 = b.buffer(Buffer::Kind::output), o2 = b.buffer(Buffer::Kind::output);
  int o3 = b.buffer(Buffer::Kind::output), o4 = b.buffer(Buffer::Kind::output);
  int o5 = b.buffer(Buffer::Kind::output), o6 = b.buffer(Buffer::Kind::output);
  b.kernel({small}, {o1});
  b.kernel({shifted}, {o2});
  b.p.values[shifted].offset = 16; // read at other offsets than the output's
  b.kernel({red}, {o3}, /*reduce=*/true);
  b.kernel({arena, in}, {o4});
  b.library({lib, lib}, o5);
  b.kernel({big}, {o6});
  b.p.outputs = {o1, o2, o3, o4, o5, o6};
  const std::vector<int> over = cpu::outputsOverDying(b.p, b.kernels);
  for (int o : {o1, o2, o3, o4, o5}) EXPECT_EQ(over[o], -1) << "buffer " << o;
  EXPECT_EQ(over[o6], big);
}

// One kernel writes a parameter over itself (runInto's alias) and a second output, both
// elementwise over a dying dynamic buffer: without the alias the first output in order
// takes the buffer; under it, the parameter is its input's storage, so the buffer goes to
// the other output (a whole step's update that also writes the clipped gradient).
TEST(OutputsOverDying, AnOutputWrittenInPlaceOfAnInputLeavesTheBufferToAnother) {
  Builder b;
  int d = b.buffer(Buffer::Kind::dynamic), p = b.buffer(Buffer::Kind::input, 0, 4096, 0);
  int pNew = b.buffer(Buffer::Kind::output), g = b.buffer(Buffer::Kind::output);
  b.kernel({d, p}, {pNew, g});
  b.p.outputs = {pNew, g};
  EXPECT_EQ(cpu::outputsOverDying(b.p, b.kernels)[pNew], d);
  std::vector<int> alias(b.p.buffers.size(), -1);
  alias[pNew] = 0;
  const std::vector<int> over = cpu::outputsOverDying(b.p, b.kernels, &alias);
  EXPECT_EQ(over[pNew], -1);
  EXPECT_EQ(over[g], d);
}

TEST(LaunchRuns, LibraryStepsReductionsAndSymbolicProgramsRunAlone) {
  Builder b;
  int x = b.buffer(Buffer::Kind::input), y = b.buffer(Buffer::Kind::output);
  int z = b.buffer(Buffer::Kind::output), m = b.buffer(Buffer::Kind::arena, 0, 4096);
  int r = b.buffer(Buffer::Kind::output);
  b.kernel({x}, {y});
  b.library({x, x}, m);
  b.kernel({x}, {z});
  b.kernel({x}, {r}, /*reduce=*/true);
  EXPECT_EQ(b.runs(), (std::vector<int>{1, 2, 3, 4}));
  b.p.symbols.ranges.push_back(Symbol{});
  EXPECT_EQ(b.runs(), (std::vector<int>{1, 2, 3, 4}));
}

} // namespace

namespace {

// The arena planner (planArena) tries several placement orders and keeps the smallest
// arena: here largest-first needs 9 units where the most live at once is 8, and a
// first-use order reaches 8. Every plan keeps buffers live at the same step apart.
TEST(PlanArena, KeepsTheBestOfSeveralOrdersAndNeverOverlapsLiveBuffers) {
  Program p;
  const int64_t unit = 64;
  struct Life {
    int64_t units;
    int first, last;
  };
  const std::vector<Life> lives = {{2, 1, 2}, {5, 2, 2}, {4, 1, 1}, {2, 1, 1}};
  for (const Life &l : lives) {
    Buffer b;
    b.bytes = l.units * unit;
    p.buffers.push_back(b);
    Value v;
    v.buffer = static_cast<int>(p.buffers.size()) - 1;
    v.shape = {l.units * unit / 4};
    v.strides = {1};
    p.values.push_back(v);
  }
  for (int s = 0; s <= 2; ++s) {
    Step st;
    for (size_t b = 0; b < lives.size(); ++b)
      if (lives[b].first <= s && s <= lives[b].last) st.operands.push_back(static_cast<int>(b));
    p.steps.push_back(st);
  }
  planArena(p);
  EXPECT_EQ(p.arenaBytes, 8 * unit);
  for (size_t a = 0; a < lives.size(); ++a) {
    for (size_t b = a + 1; b < lives.size(); ++b) {
      bool together = !(lives[a].last < lives[b].first || lives[b].last < lives[a].first);
      bool apart = p.buffers[a].offset + p.buffers[a].bytes <= p.buffers[b].offset ||
                   p.buffers[b].offset + p.buffers[b].bytes <= p.buffers[a].offset;
      EXPECT_TRUE(!together || apart) << "buffers " << a << " and " << b;
    }
    EXPECT_LE(p.buffers[a].offset + p.buffers[a].bytes, p.arenaBytes);
  }
}

// moveLargeBuffersOut: arena buffers of at least the size given become dynamic buffers,
// opened at their first step and freed after their last; the arena is planned again
// without them, so a call holds a large intermediate only while it is live.
TEST(PlanArena, LargeBuffersLeaveTheArenaForTheirLiveSteps) {
  Builder b;
  const int64_t mib = int64_t{1} << 20;
  int x = b.buffer(Buffer::Kind::input), big1 = b.buffer(Buffer::Kind::arena, 0, 8 * mib);
  int tiny = b.buffer(Buffer::Kind::arena, 0, 4096),
      big2 = b.buffer(Buffer::Kind::arena, 0, 8 * mib);
  int y = b.buffer(Buffer::Kind::output);
  b.kernel({x}, {big1});
  b.kernel({big1}, {tiny});
  b.kernel({tiny}, {big2});
  b.kernel({big2}, {y});
  b.p.outputs = {y};
  Program all = b.p;
  planArena(all);
  EXPECT_EQ(all.arenaBytes, 8 * mib + 4096); // big1 or big2 beside tiny, for the whole call
  const std::vector<std::vector<int>> at = moveLargeBuffersOut(b.p, mib);
  EXPECT_EQ(at, (std::vector<std::vector<int>>{{big1}, {}, {big2}, {}}));
  EXPECT_EQ(b.p.buffers[big1].kind, Buffer::Kind::dynamic);
  EXPECT_EQ(b.p.buffers[big2].kind, Buffer::Kind::dynamic);
  EXPECT_EQ(b.p.buffers[tiny].kind, Buffer::Kind::arena);
  EXPECT_EQ(b.p.arenaBytes, 4096);
  EXPECT_EQ(dynamicDoneAt(b.p), (std::vector<std::vector<int>>{{}, {big1}, {}, {big2}}));
}

} // namespace
