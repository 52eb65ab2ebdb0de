// A bf16 product's cast to f32 folded into its library step (Lowering::foldCast, CPU): the
// step writes oneDNN's f32 accumulator, so the compiled result is the product of the bf16
// operands in f32 (not rounded to bf16 first, then widened) and no kernel runs the cast.
// Through each way the CPU target runs a GEMM: one call, over a packed weight with a bias,
// blocks of rows, blocks of the inner dim summed in f32, blocks of a first batch dim, and
// the eager path for a layout no primitive takes.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include <rcjit/rcjit.h>

#include "support/Threads.h"
#include "support/WorkPool.h"
#include "targets/cpu/LibraryStep.h"
#include "targets/eager/DnnlContext.h"

using namespace rcjit;

namespace {

// The host's GEMM choices with the inner-dim split and row blocks forced on while alive
// (an AVX-512 host without AMX chooses them; others may not), given back after.
struct PlainSplits {
  explicit PlainSplits(bool on) {
    cpu::LibraryStep::setPlainOperandSplits(on ? 1 : 0);
    cpu::LibraryStep::setNkWeights(0);
    cpu::LibraryStep::setWholePackedGemms(0);
  }
  ~PlainSplits() {
    cpu::LibraryStep::setPlainOperandSplits(-1);
    cpu::LibraryStep::setNkWeights(-1);
    cpu::LibraryStep::setWholePackedGemms(-1);
  }
};

using CastProduct = std::function<Tensor(const Tensor &, const Tensor &)>;

// `fn` (a bf16 product cast to f32) compiled: every call's result is f32 and within f32
// rounding of `exact`, the product of the same bf16 values computed in f32 (eager's bf16
// product is rounded to 8 bits before its cast, which the check tells apart), whether
// oneDNN runs bf16 natively (a library step) or not (the eager path over f32 copies). The
// program has no kernel, and its step ran as `how` says (where oneDNN runs bf16 natively
// and the pool has two threads or more; "eager": no primitive took it).
void expectWidened(const CastProduct &fn, const Tensor &a, const Tensor &b, const Tensor &exact,
                   const std::string &how) {
  NoGradGuard noGrad;
  auto f = compile(fn, CompileOptions{.tiered = false}); // the compiled program from the start
  const Tensor rounded = fn(a, b);                       // eager: bf16 product, then the cast
  ASSERT_EQ(rounded.dtype(), DType::f32);
  ASSERT_FALSE(allclose(rounded, exact, 1e-4, 1e-3)) << how << ": the check could not fail";
  for (int call = 0; call < 3; ++call) { // the second call at a weight's version packs it
    Tensor got = f(a, b);
    ASSERT_EQ(got.dtype(), DType::f32) << how;
    EXPECT_TRUE(allclose(got, exact, 1e-4, 1e-3)) << how << " call " << call;
  }
  const std::string ex = f.explain();
  EXPECT_NE(ex.find(" 0 kernels"), std::string::npos) << how << ":\n" << ex;
  if (eager::bf16MatmulsNative() && WorkPool::instance().threads() >= 2) {
    const bool eagerPath = ex.find("library steps run as") == std::string::npos;
    EXPECT_EQ(eagerPath, how == "eager") << how << ":\n" << ex;
    if (!eagerPath) {
      EXPECT_NE(ex.find(how), std::string::npos) << ex;
    }
  }
}

// fn over the f32 values of a and b
Tensor productInF32(const CastProduct &fn, const Tensor &a, const Tensor &b) {
  return fn(a.to(DType::f32), b.to(DType::f32));
}

Tensor randnBf16(Shape s, uint64_t seed) {
  return Tensor::randn(std::move(s), seed).to(DType::bf16);
}

} // namespace

TEST(LibraryCast, OneCallWritesTheProductInF32) {
  PlainSplits host(false);
  const CastProduct fn = [](const Tensor &x, const Tensor &w) {
    return matmul(x, transpose(w, 0, 1)).to(DType::f32);
  };
  const Tensor x = randnBf16({64, 256}, 1), w = randnBf16({128, 256}, 2);
  OmpThreads one(1);
  expectWidened(fn, x, w, productInF32(fn, x, w), "step 0: one oneDNN matmul");
}

TEST(LibraryCast, ALinearOverACapturedWeightWithABias) {
  PlainSplits host(false);
  // the weight and bias are captured (program inputs): the weight is packed once per version
  const Tensor w = randnBf16({96, 320}, 3), bias = randnBf16({96}, 4);
  const Tensor x = randnBf16({2, 40, 320}, 5);
  const Tensor exact = linear(x.to(DType::f32), w.to(DType::f32), bias.to(DType::f32));
  expectWidened(
      [&w, &bias](const Tensor &x, const Tensor &) { return linear(x, w, bias).to(DType::f32); }, x,
      Tensor::zeros({1}), exact, "over a copy of the weight packed once per version");
}

TEST(LibraryCast, BlocksOfRowsAndOfTheInnerDim) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  PlainSplits host(true);
  cpu::LibraryStep::setPackWeights(false);
  OmpThreads many(WorkPool::instance().threads());
  // a weight gradient's shape: A transposed, rows split
  const CastProduct rows = [](const Tensor &x, const Tensor &y) {
    return matmul(transpose(x, 0, 1), y).to(DType::f32);
  };
  const Tensor a = randnBf16({64, 2048}, 6), b = randnBf16({64, 128}, 7);
  expectWidened(rows, a, b, productInF32(rows, a, b), "blocks of rows");
  // a long inner dim: f32 slices summed, then written as f32
  const CastProduct inner = [](const Tensor &x, const Tensor &y) { return matmul(x, y).to(DType::f32); };
  const Tensor c = randnBf16({19, 4099}, 8), d = randnBf16({4099, 27}, 9);
  expectWidened(inner, c, d, productInF32(inner, c, d), "blocks of the inner dim");
  cpu::LibraryStep::setPackWeights(true);
}

TEST(LibraryCast, BlocksOfAFirstBatchDimAndTheEagerPath) {
  if (WorkPool::instance().threads() < 2) GTEST_SKIP() << "one pool thread: nothing is split";
  PlainSplits host(false);
  OmpThreads many(WorkPool::instance().threads());
  // attention's heads: a [B, H, M, K] view of a [B, M, H, K] tensor (no single batch stride)
  const CastProduct heads = [](const Tensor &x, const Tensor &y) {
    return matmul(permute(x, {0, 2, 1, 3}), y).to(DType::f32);
  };
  const Tensor a = randnBf16({3, 33, 4, 40}, 10), b = randnBf16({3, 4, 40, 81}, 11);
  expectWidened(heads, a, b, productInF32(heads, a, b), "blocks of the first batch dim");
  // too small to split into blocks, and no primitive takes it whole: the eager path
  const Tensor c = randnBf16({2, 33, 4, 40}, 12), d = randnBf16({2, 4, 40, 81}, 13);
  expectWidened(heads, c, d, productInF32(heads, c, d), "eager");
}
