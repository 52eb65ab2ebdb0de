// Dynamic shapes: automatic, always, never and marked dims; symbolic programs serve every
// size of their range with one compile; what the function specializes stays static.
#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

#include "models/Models.h"
#include "targets/SymbolicProgram.h"

using namespace rcjit;

namespace {

using rcjit::test::errorOf;

// A small "layer": linear, softmax over the last dim, layer norm, residual.
struct Block : nn::Module<Block> {
  nn::Linear fc{32, 32, true, 7};
  nn::LayerNorm ln{32};
  Block() {
    register_module("fc", fc);
    register_module("ln", ln);
  }
  Tensor forward(const Tensor &x) { return ln(softmax(fc(x), -1) + x); }
};

Tensor blockEager(Block &b, const Tensor &x) { return b.forward(x); }

TEST(Dynamic, AutomaticRecompilesOnceWithTheChangedDimSymbolic) {
  int traced = 0;
  auto f = [&](const Tensor &x) {
    ++traced;
    return sum(relu(x * 2.0 + 1.0), {-1});
  };
  auto cf = compile(f);
  auto ref = [](const Tensor &x) { return sum(relu(x * 2.0 + 1.0), {-1}); };
  std::vector<int64_t> sizes = {8, 9, 10, 33, 100, 9, 8};
  for (int64_t n : sizes) {
    Tensor x = Tensor::randn({4, n}, static_cast<uint64_t>(n));
    EXPECT_TRUE(allclose(cf(x), ref(x), 1e-4, 1e-5)) << "size " << n;
  }
  // one trace for the static entry; the recompile traces once for real and twice on
  // shapes only (the probes that find the symbolic sizes); later sizes run compiled code
  EXPECT_EQ(traced, 4);
  CompileStats st = cf.stats();
  EXPECT_EQ(st.compiles, 2);
  EXPECT_EQ(st.recompiles, 1);
  EXPECT_EQ(st.fallbacks, 0);
  std::string ex = cf.explain();
  EXPECT_NE(ex.find("arg 0 dim 1: expected 8, got 9"), std::string::npos) << ex;
  EXPECT_NE(ex.find("s0 in [2, inf]"), std::string::npos) << ex;
  // a changed batch dim is another change: one more entry, symbolic in both
  Tensor y = Tensor::randn({3, 17}, 5);
  EXPECT_TRUE(allclose(cf(y), ref(y), 1e-4, 1e-5));
  Tensor z = Tensor::randn({6, 21}, 6);
  EXPECT_TRUE(allclose(cf(z), ref(z), 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().compiles, 3);
}

TEST(Dynamic, NeverWithLimitThreeCompilesThreeThenFallsBack) {
  CompileOptions o;
  o.dynamic = Dynamic::never;
  o.recompile_limit = 3;
  auto cf = compile([](const Tensor &x) { return softmax(x, -1) * 3.0; }, o);
  for (int64_t n = 5; n <= 10; ++n) {
    Tensor x = Tensor::randn({2, n}, static_cast<uint64_t>(n));
    EXPECT_TRUE(allclose(cf(x), softmax(x, -1) * 3.0, 1e-4, 1e-5));
  }
  EXPECT_EQ(cf.stats().compiles, 3);
  EXPECT_EQ(cf.stats().fallbacks, 3);
  EXPECT_EQ(cf.explain().find("s0"), std::string::npos);
}

TEST(Dynamic, AlwaysMakesEveryDimSymbolicFromTheStart) {
  CompileOptions o;
  o.dynamic = Dynamic::always;
  auto f = [](const Tensor &a, const Tensor &b) { return mean(softmax(a + b, -1), {0}); };
  auto cf = compile(f, o);
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {4, 7}, {9, 2}, {2, 64}}) {
    Tensor a = Tensor::randn({r, c}, 1), b = Tensor::randn({r, c}, 2);
    EXPECT_TRUE(allclose(cf(a, b), f(a, b), 1e-4, 1e-5)) << r << "x" << c;
  }
  EXPECT_EQ(cf.stats().compiles, 1);
  std::string ex = cf.explain();
  EXPECT_NE(ex.find("s1 = size of arg 0 dim 1"), std::string::npos) << ex;
  // b's dims are the same symbols as a's: a mismatch is a guard failure that says so
  Tensor a = Tensor::randn({4, 6}, 1), b = Tensor::randn({4, 1}, 2);
  EXPECT_TRUE(allclose(cf(a, b), f(a, b), 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().recompiles, 1);
  EXPECT_NE(cf.explain().find("arg 1 dim 1: expected"), std::string::npos) << cf.explain();
}

TEST(Dynamic, MarkedSequenceDimCompilesOnceOverItsRange) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  Block blk;
  CompileOptions o;
  o.dynamic = Dynamic::never; // the mark alone makes the dim symbolic
  auto cm = compile(blk, o);
  for (int64_t s : {5, 6, 17, 64, 128, 255, 256}) {
    Tensor x = Tensor::randn({2, s, 32}, static_cast<uint64_t>(s));
    mark_dynamic(x, 1, 5, 256);
    EXPECT_TRUE(allclose(cm(x), blockEager(blk, x), 1e-4, 1e-5)) << "seq " << s;
  }
  EXPECT_EQ(cm.stats().compiles, 1);
  EXPECT_EQ(cm.stats().recompiles, 0);
  Tensor x = Tensor::randn({2, 300, 32}, 3);
  mark_dynamic(x, 1, 5, 256);
  EXPECT_NE(errorOf([&] { cm(x); }).find("outside its mark_dynamic range [5, 256]"),
            std::string::npos);
  // without the mark, an unmarked size outside the entry's range fails its guard
  Tensor y = Tensor::randn({2, 300, 32}, 4);
  EXPECT_TRUE(allclose(cm(y), blockEager(blk, y), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().recompiles, 1);
  EXPECT_NE(cm.explain().find("arg 0 dim 1: expected a size in [5, 256] (symbol s0), got 300"),
            std::string::npos)
      << cm.explain();
}

TEST(Dynamic, MarkStaticKeepsADimStaticUnderAlways) {
  CompileOptions o;
  o.dynamic = Dynamic::always;
  auto cf = compile([](const Tensor &x) { return sum(x, {0}) * 2.0; }, o);
  Tensor x = Tensor::randn({3, 4}, 1);
  mark_static(x, 1);
  EXPECT_TRUE(allclose(cf(x), sum(x, {0}) * 2.0, 1e-4, 1e-5));
  Tensor y = Tensor::randn({7, 4}, 2);
  EXPECT_TRUE(allclose(cf(y), sum(y, {0}) * 2.0, 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().compiles, 1);
  Tensor z = Tensor::randn({7, 5}, 3);
  mark_static(z, 1);
  EXPECT_TRUE(allclose(cf(z), sum(z, {0}) * 2.0, 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().recompiles, 1);
  EXPECT_NE(cf.explain().find("arg 0 dim 1: expected 4, got 5"), std::string::npos);
}

TEST(Dynamic, SpecializedDimsStayStaticAndTheLogSaysWhy) {
  // the function reshapes by a constant: dim 1 must stay 12, so it cannot be symbolic
  CompileOptions o;
  o.dynamic = Dynamic::always;
  set_logs("dynamic");
  testing::internal::CaptureStderr();
  auto cf = compile([](const Tensor &x) { return sum(reshape(x, {-1, 3, 4}), {2}); }, o);
  Tensor x = Tensor::randn({5, 12}, 1);
  EXPECT_TRUE(allclose(cf(x), sum(reshape(x, {-1, 3, 4}), {2}), 1e-4, 1e-5));
  Tensor y = Tensor::randn({9, 12}, 2);
  EXPECT_TRUE(allclose(cf(y), sum(reshape(y, {-1, 3, 4}), {2}), 1e-4, 1e-5));
  EXPECT_EQ(cf.stats().compiles, 1); // dim 0 symbolic, dim 1 static
  std::string log = testing::internal::GetCapturedStderr();
  set_logs("");
  EXPECT_NE(log.find("[rcjit:dynamic] function"), std::string::npos) << log;
  EXPECT_NE(log.find("arg 0 dim 0 -> symbol s0 in [2, inf] (Dynamic::always)"), std::string::npos)
      << log;
  EXPECT_NE(log.find("arg 0 dim 1 stays static: the function fails at s0=5: reshape"),
            std::string::npos)
      << log;
  std::string ex = cf.explain();
  EXPECT_NE(ex.find("s0 in [2, inf]"), std::string::npos) << ex;
  EXPECT_NE(ex.find(", 12]"), std::string::npos) << ex;
}

TEST(Dynamic, ReplacedParameterOfAnotherShapeRecompiles) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  nn::Linear fc(16, 8, true, 3);
  auto cm = compile(fc);
  Tensor a = Tensor::randn({2, 16}, 1);
  EXPECT_TRUE(allclose(cm(a), fc(a), 1e-4, 1e-5));
  Tensor b = Tensor::randn({5, 16}, 2); // automatic: batch becomes symbolic
  EXPECT_TRUE(allclose(cm(b), fc(b), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 2);
  EXPECT_TRUE(allclose(cm(Tensor::randn({11, 16}, 3)), fc(Tensor::randn({11, 16}, 3)), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 2);
  // a parameter replaced by one of another shape: a captured guard fails, and says which
  fc.weight = Tensor::randn({8, 16}, 4);
  fc.bias = Tensor::randn({8}, 5);
  EXPECT_TRUE(allclose(cm(b), fc(b), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 2); // same shape: still passes
  nn::Linear wide(16, 12, true, 6);
  fc.weight = wide.weight;
  fc.bias = wide.bias;
  EXPECT_TRUE(allclose(cm(b), fc(b), 1e-4, 1e-5));
  EXPECT_EQ(cm.stats().compiles, 3);
  EXPECT_NE(cm.explain().find("weight) dim 0: expected 8, got 12"), std::string::npos)
      << cm.explain();
}

TEST(Dynamic, FitSizeFindsProductsAndRejectsSums) {
  std::vector<std::vector<int64_t>> syms = {{8, 4}, {11, 5}, {13, 7}};
  SizeExpr e;
  ASSERT_TRUE(fitSize({64, 88, 104}, syms, e));
  EXPECT_EQ(e.c, 8);
  EXPECT_EQ(e.syms, std::vector<int32_t>{0});
  ASSERT_TRUE(fitSize({32 * 3, 55 * 3, 91 * 3}, syms, e));
  EXPECT_EQ(e.c, 3);
  EXPECT_EQ(e.syms, (std::vector<int32_t>{0, 1}));
  ASSERT_TRUE(fitSize({7, 7, 7}, syms, e));
  EXPECT_TRUE(e.syms.empty());
  EXPECT_FALSE(fitSize({9, 12, 14}, syms, e));               // s0 + 1
  ASSERT_TRUE(fitSize({64 * 2, 121 * 2, 169 * 2}, syms, e)); // attention scores [s, s]
  EXPECT_EQ(e.c, 2);
  EXPECT_EQ(e.syms, (std::vector<int32_t>{0, 0}));
  EXPECT_FALSE(fitSize({512, 1331, 2197}, syms, e)); // s0 ^ 3
  ASSERT_TRUE(fitSizePlus({9, 12, 14}, syms, e));    // s0 + 1
  EXPECT_EQ(e.c, 1);
  EXPECT_EQ(e.syms, std::vector<int32_t>{0});
  EXPECT_EQ(e.add, 1);
  ASSERT_TRUE(fitSizePlus({7 * 64, 10 * 64, 12 * 64}, syms, e)); // (s0 - 1) * 64
  EXPECT_EQ(e.c, 64);
  EXPECT_EQ(e.add, -64);
  EXPECT_EQ(evalSize(e, std::vector<int64_t>{8, 1}.data()), 7 * 64);
  ASSERT_TRUE(fitSizePlus({64, 88, 104}, syms, e)); // products need no constant
  EXPECT_EQ(e.add, 0);
  EXPECT_FALSE(fitSizePlus({9, 12, 15}, syms, e)); // the third sample disagrees
}

// The built-in decoders with a marked sequence dim: one compile serves every length
// (RoPE tables, position slices and [seq, seq] attention scores included).
TEST(Dynamic, ModelsWithAMarkedSequenceCompileOnce) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  for (const char *name : {"toy64", "gpt2", "llama-3.2-1b"}) {
    tools::ModelConfig c;
    c.batch = 2;
    c.seq = 48; // RoPE tables for up to 48 positions
    c.layers = 1;
    auto m = tools::findModel(name).build(c);
    auto cf = compile([&](const Tensor &x) { return m->forward({x}); });
    for (int64_t s : {16, 23, 48}) {
      c.seq = s;
      std::vector<Tensor> in = m->makeInputs(c);
      mark_dynamic(in[0], 1, 2, 48);
      Tensor ref = m->forward(in);
      EXPECT_TRUE(allclose(cf(in[0]), ref, 1e-4, 1e-4)) << name << " seq " << s;
    }
    EXPECT_EQ(cf.stats().compiles, 1) << name << "\n" << cf.explain();
  }
}

// Regional mode: each region's program is symbolic too, so a new length reuses every region.
TEST(Dynamic, RegionalModeServesEveryLengthWithOneCompilePerRegion) {
  rcjit::NoGradGuard noGrad; // inference: the parameters require grad
  for (const char *name : {"toy64", "gpt2"}) {
    tools::ModelConfig c;
    c.batch = 2;
    c.seq = 40;
    c.layers = 3;
    auto m = tools::findModel(name).build(c);
    CompileOptions o;
    o.mode = Mode::regional;
    auto cf = compile([&](const Tensor &x) { return m->forward({x}); }, o);
    int compiles = 0;
    for (int64_t s : {12, 29, 40}) {
      c.seq = s;
      std::vector<Tensor> in = m->makeInputs(c);
      mark_dynamic(in[0], 1, 2, 40);
      Tensor ref = m->forward(in);
      EXPECT_TRUE(allclose(cf(in[0]), ref, 1e-4, 1e-4)) << name << " seq " << s;
      if (s == 12) compiles = cf.stats().compiles;
    }
    EXPECT_EQ(cf.stats().compiles, compiles) << name << "\n" << cf.explain();
    EXPECT_EQ(cf.stats().recompiles, 0) << name;
    EXPECT_NE(cf.explain().find("s0 in [2, 40]"), std::string::npos) << cf.explain();
  }
}

// The last position of a symbolic sequence (an offset s - 1) and a cat with a fixed prefix
// (a length s + 4) are sizes with a constant term: still one entry for every length.
TEST(Dynamic, LastTokenSliceServesEveryLength) {
  auto f = [](const Tensor &x) {
    int64_t n = x.size(1);
    return slice(relu(x) * 2.0, 1, n - 1, n) + 1.0;
  };
  auto cf = compile(f);
  for (int64_t n : {6, 7, 12, 31}) {
    Tensor x = Tensor::randn({3, n, 8}, static_cast<uint64_t>(n));
    EXPECT_TRUE(allclose(cf(x), f(x), 1e-5, 1e-6)) << n;
  }
  EXPECT_EQ(cf.stats().compiles, 2) << cf.explain(); // static first, then symbolic
}

// What an imported ONNX graph does with sizes, in plain ops, under Dynamic::always: a size
// used as a value (the sum of n ones: a reduction of a value that is the same at every
// point, whose count must follow the symbol, not be a literal), a shifted slice whose loop
// runs over s - 1 (a row: a product of a symbol and s - 1 is not a fitted size yet), and two small
// independent elementwise groups that a first call of 2x5 (10 elements) would join into one tiny
// kernel where larger sizes do not. Each compiles once for every size, equal to eager.
TEST(Dynamic, SizeValuesShiftedSlicesAndTinyFirstShapesCompileOnce) {
  CompileOptions o;
  o.dynamic = Dynamic::always;
  auto sizes = [](const Tensor &x) {
    Tensor n = sum(Tensor::ones({x.size(0)}, DType::i64)); // x.size(0) as a traced value
    return x * n.to(DType::f32) + sum(x, {0}, true);
  };
  auto shifted = [](const Tensor &x) {
    int64_t n = x.size(1);
    return slice(x, 1, 1, n) - slice(x, 1, 0, n - 1) * 0.5;
  };
  auto tiny = [](const Tensor &ids, const Tensor &mask) {
    Tensor wrapped = where(lt(ids, 0), ids + 100, ids); // one group over [b, s]
    Tensor m = mask.to(DType::boolean);                 // another, independent of it
    return std::vector<Tensor>{wrapped, m.to(DType::f32) * 2.0};
  };
  auto cs = compile(sizes, o);
  auto ch = compile(shifted, o);
  auto ct = compile(tiny, o);
  for (auto [r, c] : std::vector<std::pair<int64_t, int64_t>>{{2, 5}, {3, 12}, {4, 7}}) {
    Tensor x = Tensor::randn({r, c}, static_cast<uint64_t>(r * c));
    EXPECT_TRUE(allclose(cs(x), sizes(x), 1e-5, 1e-6)) << r << "x" << c;
    Tensor row = slice(x, 0, 0, 1); // [1, c]: s1 - 1 alone (s0 * (s1 - 1) does not fit yet)
    EXPECT_TRUE(allclose(ch(row), shifted(row), 1e-5, 1e-6)) << r << "x" << c;
    Tensor ids = (x * 50.0).to(DType::i64), mask = gt(x, 0.0).to(DType::i64);
    std::vector<Tensor> got = ct(ids, mask), want = tiny(ids, mask);
    EXPECT_TRUE(allclose(got[0].to(DType::f32), want[0].to(DType::f32), 0, 0)) << r << "x" << c;
    EXPECT_TRUE(allclose(got[1], want[1], 0, 0)) << r << "x" << c;
  }
  EXPECT_EQ(cs.stats().compiles, 1) << cs.explain();
  EXPECT_EQ(ch.stats().compiles, 1) << ch.explain();
  EXPECT_EQ(ct.stats().compiles, 1) << ct.explain();
}

} // namespace

namespace {

// Small GEMMs of a symbolic program share one oneDNN primitive with runtime dims (no
// primitive per size): linear with bias and a fused post-op, a transposed operand and a
// batched matmul, at more sizes than a program keeps specializations for, against eager.
TEST(DynamicMatmul, SmallGemmsAtManySizesMatchEager) {
  const Tensor w = Tensor::randn({24, 16}, 3), b = Tensor::randn({24}, 4);
  const Tensor v = Tensor::randn({16, 12}, 5);
  auto fn = [&](const Tensor &x, const Tensor &y) {
    Tensor h = relu(linear(x, w, b));           // [s, 24], bias + relu post-op
    Tensor t = matmul(x, v);                    // [s, 12]
    Tensor u = matmul(transpose(h, 0, 1), x);   // [24, 16]: K = s, A transposed
    Tensor att = matmul(y, transpose(y, 1, 2)); // [2, s, s], batched
    return std::vector<Tensor>{h, t, u, sum(att, {-1})};
  };
  auto cf = compile(fn);
  int checked = 0;
  for (int64_t s = 3; s < 3 + 40; ++s) {
    Tensor x = Tensor::randn({s, 16}, static_cast<uint64_t>(s));
    Tensor y = Tensor::randn({2, s, 8}, static_cast<uint64_t>(100 + s));
    mark_dynamic(x, 0, 2, 1024);
    mark_dynamic(y, 1, 2, 1024);
    std::vector<Tensor> got = cf(x, y), want = fn(x, y);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-4)) << "size " << s << " output " << i;
    }
    ++checked;
  }
  EXPECT_EQ(checked, 40);
  EXPECT_EQ(cf.stats().compiles, 1) << cf.explain();
}

} // namespace
