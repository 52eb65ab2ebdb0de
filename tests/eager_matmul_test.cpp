// Eager matmul, linear and conv2d against naive double-precision loops, across dtypes.
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

#include "targets/eager/DnnlContext.h"

namespace {

using rcjit::test::expectClose;
using rcjit::test::numelOf;
using rcjit::test::Ref;
using rcjit::test::refOf;

using rcjit::DType;
using rcjit::Shape;
using rcjit::Tensor;

/// Row-major offset of the broadcast batch index `i` (of `outBatch`) inside `batch`.
int64_t batchOffset(int64_t i, const Shape &outBatch, const Shape &batch) {
  int64_t off = 0, mul = 1;
  for (int d = static_cast<int>(outBatch.size()) - 1; d >= 0; --d) {
    int64_t idx = i % outBatch[d];
    i /= outBatch[d];
    int bd = d - static_cast<int>(outBatch.size() - batch.size());
    if (bd < 0) continue;
    off += (batch[bd] == 1 ? 0 : idx) * mul;
    mul *= batch[bd];
  }
  return off;
}

/// NumPy matmul in double: 1-D operands promoted, batch dims broadcast.
Ref refMatmul(const Ref &a, const Ref &b) {
  Shape as = a.shape, bs = b.shape;
  if (as.size() == 1) as.insert(as.begin(), 1);
  if (bs.size() == 1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape ob(std::max(ab.size(), bb.size()), 1);
  for (size_t i = 0; i < ob.size(); ++i) {
    auto pick = [&](const Shape &s) {
      size_t pad = ob.size() - s.size();
      return i < pad ? 1 : s[i - pad];
    };
    ob[i] = std::max(pick(ab), pick(bb));
  }
  Ref r{std::vector<double>(static_cast<size_t>(numelOf(ob) * M * N)), ob};
  for (int64_t bi = 0; bi < numelOf(ob); ++bi) {
    int64_t ao = batchOffset(bi, ob, ab) * M * K, bo = batchOffset(bi, ob, bb) * K * N;
    for (int64_t m = 0; m < M; ++m) {
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a.data[ao + m * K + k] * b.data[bo + k * N + n];
        r.data[bi * M * N + m * N + n] = s;
      }
    }
  }
  if (a.shape.size() > 1) r.shape.push_back(M);
  if (b.shape.size() > 1) r.shape.push_back(N);
  return r;
}

/// x [..., in] @ w[out, in]^T + b, in double.
Ref refLinear(const Ref &x, const Ref &w, const Ref *b) {
  int64_t in = w.shape[1], out = w.shape[0], rows = numelOf(x.shape) / in;
  Shape shape = x.shape;
  shape.back() = out;
  Ref r{std::vector<double>(static_cast<size_t>(rows * out)), shape};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b->data[o] : 0;
      for (int64_t k = 0; k < in; ++k) s += x.data[i * in + k] * w.data[o * in + k];
      r.data[i * out + o] = s;
    }
  }
  return r;
}

/// NCHW conv2d with symmetric zero padding, in double.
Ref refConv(const Ref &x, const Ref &w, const Ref *b, int64_t stride, int64_t pad) {
  int64_t N = x.shape[0], C = x.shape[1], H = x.shape[2], W = x.shape[3];
  int64_t O = w.shape[0], KH = w.shape[2], KW = w.shape[3];
  int64_t OH = (H + 2 * pad - KH) / stride + 1, OW = (W + 2 * pad - KW) / stride + 1;
  Ref r{std::vector<double>(static_cast<size_t>(N * O * OH * OW)), {N, O, OH, OW}};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double s = b ? b->data[o] : 0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * stride - pad + kh, iw = ow * stride - pad + kw;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                s += x.data[((n * C + c) * H + ih) * W + iw] *
                     w.data[((o * C + c) * KH + kh) * KW + kw];
              }
          r.data[((n * O + o) * OH + oh) * OW + ow] = s;
        }
  return r;
}

using rcjit::test::errorOf;

void checkMatmul(const Tensor &a, const Tensor &b, double rtol = 1e-5, double atol = 1e-5) {
  expectClose(rcjit::matmul(a, b), refMatmul(refOf(a), refOf(b)), rtol, atol);
}

TEST(EagerMatmul, F32Matrices) {
  checkMatmul(Tensor::randn({33, 47}, 1), Tensor::randn({47, 29}, 2));
  checkMatmul(Tensor::randn({1, 1}, 3), Tensor::randn({1, 1}, 4));
  checkMatmul(Tensor::randn({128, 256}, 5), Tensor::randn({256, 96}, 6), 1e-4, 1e-4);
}

TEST(EagerMatmul, OneDimensionalOperands) {
  checkMatmul(Tensor::randn({17}, 1), Tensor::randn({17}, 2));        // -> []
  checkMatmul(Tensor::randn({17}, 3), Tensor::randn({17, 5}, 4));     // -> [5]
  checkMatmul(Tensor::randn({6, 17}, 5), Tensor::randn({17}, 6));     // -> [6]
  checkMatmul(Tensor::randn({17}, 7), Tensor::randn({3, 17, 5}, 8));  // -> [3, 5]
  checkMatmul(Tensor::randn({2, 6, 17}, 9), Tensor::randn({17}, 10)); // -> [2, 6]
  EXPECT_EQ(rcjit::matmul(Tensor::randn({4}, 1), Tensor::randn({4}, 2)).dim(), 0);
}

TEST(EagerMatmul, BatchedAndBroadcast) {
  checkMatmul(Tensor::randn({4, 5, 6}, 1), Tensor::randn({4, 6, 3}, 2));
  checkMatmul(Tensor::randn({4, 5, 6}, 3), Tensor::randn({6, 3}, 4));
  checkMatmul(Tensor::randn({5, 6}, 5), Tensor::randn({4, 6, 3}, 6));
  checkMatmul(Tensor::randn({2, 1, 5, 7}, 7), Tensor::randn({3, 7, 4}, 8));
  checkMatmul(Tensor::randn({2, 3, 1, 5, 7}, 9), Tensor::randn({1, 3, 4, 7, 2}, 10));
}

TEST(EagerMatmul, NonContiguousOperands) {
  Tensor bt = rcjit::transpose(Tensor::randn({9, 12}, 1), 0, 1); // [12, 9], column-major
  Tensor at = rcjit::transpose(Tensor::randn({12, 7}, 2), 0, 1); // [7, 12]
  ASSERT_FALSE(bt.is_contiguous());
  checkMatmul(at, bt);
  checkMatmul(rcjit::slice(Tensor::randn({10, 12}, 3), 1, 2, 9), Tensor::randn({7, 4}, 4));
  // stride-0 batch dims and a stride-2 inner dim
  Tensor ex = rcjit::expand(Tensor::randn({1, 5, 6}, 5), {3, 5, 6});
  checkMatmul(ex, Tensor::randn({3, 6, 2}, 6));
  checkMatmul(ex, rcjit::expand(Tensor::randn({1, 6, 2}, 7), {3, 6, 2}));
  Tensor strided = rcjit::permute(Tensor::randn({5, 12, 2}, 8), {2, 0, 1}); // inner stride 2
  checkMatmul(strided, Tensor::randn({12, 3}, 9));
  Tensor batchPermuted = rcjit::permute(Tensor::randn({5, 3, 6}, 10), {1, 0, 2}); // [3, 5, 6]
  checkMatmul(batchPermuted, rcjit::transpose(Tensor::randn({3, 2, 6}, 11), 1, 2));
}

TEST(EagerMatmul, F64) {
  checkMatmul(Tensor::randn({37, 70}, 1, DType::f64), Tensor::randn({70, 45}, 2, DType::f64), 1e-12,
              1e-12);
  checkMatmul(Tensor::randn({2, 3, 70}, 3, DType::f64),
              rcjit::transpose(Tensor::randn({45, 70}, 4, DType::f64), 0, 1), 1e-12, 1e-12);
  checkMatmul(Tensor::randn({70}, 5, DType::f64), Tensor::randn({70}, 6, DType::f64), 1e-12, 1e-12);
  // crosses the loops' row, K and N blocks
  checkMatmul(Tensor::randn({70, 300}, 7, DType::f64), Tensor::randn({300, 270}, 8, DType::f64),
              1e-12, 1e-12);
}

TEST(EagerMatmul, Integers) {
  std::vector<int64_t> av, bv;
  for (int64_t i = 0; i < 3 * 4 * 5; ++i) av.push_back((i * 7) % 11 - 5);
  for (int64_t i = 0; i < 5 * 6; ++i) bv.push_back((i * 5) % 13 - 6);
  Tensor a = Tensor::from_vector(av, {3, 4, 5}), b = Tensor::from_vector(bv, {5, 6});
  Tensor c = rcjit::matmul(a, b);
  EXPECT_EQ(c.dtype(), DType::i64);
  checkMatmul(a, b, 0, 0);
  checkMatmul(a.to(DType::i32), b.to(DType::i32), 0, 0);
  checkMatmul(a, rcjit::transpose(Tensor::from_vector(bv, {6, 5}), 0, 1), 0, 0);
}

TEST(EagerMatmul, ReducedPrecision) {
  for (DType t : {DType::bf16, DType::f16}) {
    double tol = t == DType::bf16 ? 2e-2 : 4e-3; // output rounding plus f32 accumulation
    checkMatmul(Tensor::randn({19, 64}, 1, t), Tensor::randn({64, 23}, 2, t), tol, 8 * tol);
    checkMatmul(Tensor::randn({2, 19, 64}, 3, t),
                rcjit::transpose(Tensor::randn({23, 64}, 4, t), 0, 1), tol, 8 * tol);
    EXPECT_EQ(rcjit::matmul(Tensor::randn({2, 3}, 5, t), Tensor::randn({3, 2}, 6, t)).dtype(), t);
  }
}

TEST(EagerMatmul, EmptyInnerDimGivesZeros) {
  Tensor c = rcjit::matmul(Tensor::zeros({3, 0}), Tensor::zeros({0, 4}));
  expectClose(c, Ref{std::vector<double>(12, 0.0), {3, 4}}, 0, 0);
  Tensor d = rcjit::matmul(Tensor::zeros({3, 0}, DType::f64), Tensor::zeros({0, 4}, DType::f64));
  expectClose(d, Ref{std::vector<double>(12, 0.0), {3, 4}}, 0, 0);
}

TEST(EagerMatmul, RepeatedCallsReuseCachedPrimitives) {
  Tensor a = Tensor::randn({31, 17}, 1), b = Tensor::randn({17, 13}, 2);
  rcjit::matmul(a, b);
  auto &ctx = rcjit::eager::DnnlContext::instance();
  uint64_t before = ctx.created();
  for (int i = 0; i < 5; ++i) rcjit::matmul(a, b);
  EXPECT_EQ(ctx.created(), before);
  EXPECT_LE(ctx.size(), ctx.capacity());
}

// A batched product over one matrix ([B, M, K] @ [K, N], a linear's backward over [B, T, C]
// activations) runs as the [B * M, K] @ [K, N] GEMM: the same cached primitive serves both
// forms; layouts whose batch does not step evenly over the rows keep the batched form, and
// every form computes the product.
TEST(EagerMatmul, BatchedTimesOneMatrixRunsAsOneGemm) {
  auto &ctx = rcjit::eager::DnnlContext::instance();
  Tensor w = Tensor::randn({6, 3}, 2);
  checkMatmul(Tensor::randn({20, 6}, 1), w);
  const uint64_t made = ctx.created();
  checkMatmul(Tensor::randn({4, 5, 6}, 3), w);    // folded: the [20, 6] primitive
  checkMatmul(Tensor::randn({2, 2, 5, 6}, 4), w); // two batch dims: the same
  EXPECT_EQ(ctx.created(), made) << "the batched products ran as the one [20, 6] @ [6, 3] GEMM";
  // not foldable: batch dims permuted (rows do not step evenly), a expanded over its batch,
  // b batched
  checkMatmul(rcjit::permute(Tensor::randn({5, 4, 6}, 5), {1, 0, 2}), w);
  checkMatmul(rcjit::expand(Tensor::randn({1, 5, 6}, 6), {4, 5, 6}), w);
  checkMatmul(Tensor::randn({4, 5, 6}, 7), Tensor::randn({4, 6, 3}, 8));
  // a linear with its bias over [B, T, C], and one whose rows are a slice of wider rows
  Tensor x = Tensor::randn({3, 7, 6}, 9), lw = Tensor::randn({5, 6}, 10),
         lb = Tensor::randn({5}, 11);
  const Ref rw = refOf(lw), rb = refOf(lb);
  expectClose(rcjit::linear(x, lw, lb), refLinear(refOf(x), rw, &rb), 1e-5, 1e-5);
  Tensor wide = rcjit::slice(Tensor::randn({3, 7, 10}, 12), 2, 2, 8); // row stride 10
  checkMatmul(wide, w);
}

TEST(EagerMatmul, ConcurrentCallsAgree) {
  std::vector<Tensor> as, bs, want;
  for (int t = 0; t < 4; ++t) {
    as.push_back(Tensor::randn({8 + t, 24}, 10 + t));
    bs.push_back(Tensor::randn({24, 5 + t}, 20 + t));
    want.push_back(rcjit::matmul(as.back(), bs.back()));
  }
  rcjit::eager::DnnlContext::instance().clear();
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        Tensor c = rcjit::matmul(as[(t + i) % 4], bs[(t + i) % 4]);
        if (!rcjit::allclose(c, want[(t + i) % 4], 0, 0)) ++mismatches[t];
      }
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST(EagerMatmul, ErrorsNameOpAndShapes) {
  std::string msg = errorOf([] {
    rcjit::matmul(Tensor::randn({2, 3}, 1), Tensor::randn({4, 5}, 2));
  });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 5]"), std::string::npos) << msg;
  msg = errorOf([] { rcjit::matmul(Tensor::randn({2, 3, 4}, 1), Tensor::randn({5, 4, 2}, 2)); });
  EXPECT_NE(msg.find("matmul"), std::string::npos) << msg;
}

TEST(EagerLinear, MatchesReference) {
  Tensor x = Tensor::randn({2, 3, 16}, 1), w = Tensor::randn({8, 16}, 2);
  Tensor b = Tensor::randn({8}, 3);
  Ref rb = refOf(b);
  expectClose(rcjit::linear(x, w, b), refLinear(refOf(x), refOf(w), &rb), 1e-5, 1e-5);
  expectClose(rcjit::linear(x, w), refLinear(refOf(x), refOf(w), nullptr), 1e-5, 1e-5);
  Tensor v = Tensor::randn({16}, 4);
  expectClose(rcjit::linear(v, w, b), refLinear(refOf(v), refOf(w), &rb), 1e-5, 1e-5);
}

TEST(EagerLinear, NonContiguousInputAndWeight) {
  Tensor x = rcjit::transpose(Tensor::randn({3, 2, 16}, 1), 0, 1); // leading dims don't fold
  Tensor w = rcjit::transpose(Tensor::randn({16, 8}, 2), 0, 1);    // [8, 16] column-major
  Tensor b = rcjit::slice(Tensor::randn({16}, 3), 0, 0, 8);
  Ref rb = refOf(b);
  expectClose(rcjit::linear(x, w, b), refLinear(refOf(x.contiguous()), refOf(w.contiguous()), &rb),
              1e-5, 1e-5);
}

TEST(EagerLinear, OtherDtypes) {
  Tensor x = Tensor::randn({5, 16}, 1, DType::f64), w = Tensor::randn({8, 16}, 2, DType::f64);
  Tensor b = Tensor::randn({8}, 3, DType::f64);
  Ref rb = refOf(b);
  expectClose(rcjit::linear(x, w, b), refLinear(refOf(x), refOf(w), &rb), 1e-12, 1e-12);
  Tensor xh = x.to(DType::bf16), wh = w.to(DType::bf16), bh = b.to(DType::bf16);
  Ref rbh = refOf(bh);
  expectClose(rcjit::linear(xh, wh, bh), refLinear(refOf(xh), refOf(wh), &rbh), 2e-2, 0.1);
}

TEST(EagerLinear, Module) {
  rcjit::nn::Linear fc(16, 8, true, 7);
  Tensor x = Tensor::randn({4, 16}, 1);
  Ref rb = refOf(fc.bias);
  expectClose(fc(x), refLinear(refOf(x), refOf(fc.weight), &rb), 1e-5, 1e-5);
  rcjit::nn::Linear noBias(16, 8, false, 7);
  EXPECT_FALSE(noBias.bias.defined());
  expectClose(noBias(x), refLinear(refOf(x), refOf(noBias.weight), nullptr), 1e-5, 1e-5);
}

TEST(EagerLinear, WrongWeightShapeIsAnError) {
  std::string msg = errorOf([] {
    rcjit::linear(Tensor::randn({2, 16}, 1), Tensor::randn({8, 15}, 2));
  });
  EXPECT_NE(msg.find("linear"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[8, 15]"), std::string::npos) << msg;
}

TEST(EagerConv2d, MatchesReference) {
  Tensor x = Tensor::randn({2, 3, 9, 8}, 1), w = Tensor::randn({4, 3, 3, 3}, 2);
  Tensor b = Tensor::randn({4}, 3);
  Ref rx = refOf(x), rw = refOf(w), rb = refOf(b);
  expectClose(rcjit::conv2d(x, w, b, 2, 1), refConv(rx, rw, &rb, 2, 1), 1e-4, 1e-4);
  expectClose(rcjit::conv2d(x, w, Tensor()), refConv(rx, rw, nullptr, 1, 0), 1e-4, 1e-4);
  Tensor w1 = Tensor::randn({16, 3, 1, 1}, 4);
  expectClose(rcjit::conv2d(x, w1, Tensor()), refConv(rx, refOf(w1), nullptr, 1, 0), 1e-4, 1e-4);
}

TEST(EagerConv2d, NonContiguousAndOtherDtypes) {
  Tensor x = rcjit::permute(Tensor::randn({2, 9, 8, 3}, 1), {0, 3, 1, 2}); // NHWC storage
  Tensor w = Tensor::randn({4, 3, 3, 3}, 2), b = Tensor::randn({4}, 3);
  Ref rb = refOf(b);
  expectClose(rcjit::conv2d(x, w, b, 1, 1), refConv(refOf(x.contiguous()), refOf(w), &rb, 1, 1),
              1e-4, 1e-4);
  Tensor xd = x.to(DType::f64), wd = w.to(DType::f64), bd = b.to(DType::f64);
  Tensor yd = rcjit::conv2d(xd, wd, bd, 2, 0);
  EXPECT_EQ(yd.dtype(), DType::f64);
  expectClose(yd, refConv(refOf(xd.contiguous()), refOf(wd), &rb, 2, 0), 1e-5, 1e-5);
  Tensor xh = x.to(DType::bf16), wh = w.to(DType::bf16), bh = b.to(DType::bf16);
  Ref rbh = refOf(bh);
  expectClose(rcjit::conv2d(xh, wh, bh, 1, 0),
              refConv(refOf(xh.contiguous()), refOf(wh), &rbh, 1, 0), 2e-2, 0.1);
}

TEST(EagerConv2d, GradientsMatchTheF64Loops) {
  // f32 (and bf16) gradients run on oneDNN's backward primitives, f64 on loops: the same
  // sums; strides, padding, a non-square kernel, patches (stride = kernel), 1x1, and rows
  // and columns no window covers (their input gradient is 0)
  struct Case {
    Shape x, w;
    int64_t stride, pad;
  };
  for (const Case &c :
       {Case{{2, 3, 9, 8}, {4, 3, 3, 3}, 2, 1}, Case{{2, 3, 16, 16}, {5, 3, 4, 4}, 4, 0},
        Case{{2, 3, 7, 6}, {2, 3, 3, 2}, 1, 1}, Case{{1, 2, 7, 7}, {3, 2, 1, 1}, 1, 0},
        Case{{2, 3, 10, 11}, {4, 3, 3, 3}, 4, 0}}) {
    Tensor x = Tensor::randn(c.x, 1), w = Tensor::randn(c.w, 2);
    Shape ys = rcjit::conv2d(x, w, Tensor(), c.stride, c.pad).shape();
    Tensor g = rcjit::transpose(Tensor::randn({ys[0], ys[1], ys[3], ys[2]}, 3), 2, 3); // strided
    Tensor xd = x.to(DType::f64), wd = w.to(DType::f64), gd = g.to(DType::f64);
    Tensor gx = rcjit::conv2d_backward_input(g, w, x.shape(), c.stride, c.pad);
    Tensor gw = rcjit::conv2d_backward_weight(g, x, w.shape(), c.stride, c.pad);
    EXPECT_EQ(gx.dtype(), DType::f32);
    EXPECT_TRUE(allclose(gx.to(DType::f64),
                         rcjit::conv2d_backward_input(gd, wd, x.shape(), c.stride, c.pad), 1e-4,
                         1e-4))
        << rcjit::shapeStr(c.x) << " " << rcjit::shapeStr(c.w);
    EXPECT_TRUE(allclose(gw.to(DType::f64),
                         rcjit::conv2d_backward_weight(gd, xd, w.shape(), c.stride, c.pad), 1e-4,
                         1e-4))
        << rcjit::shapeStr(c.x) << " " << rcjit::shapeStr(c.w);
    Tensor gh = g.to(DType::bf16), wh = w.to(DType::bf16), xh = x.to(DType::bf16);
    Tensor gxh = rcjit::conv2d_backward_input(gh, wh, x.shape(), c.stride, c.pad);
    EXPECT_EQ(gxh.dtype(), DType::bf16);
    EXPECT_TRUE(allclose(gxh.to(DType::f64),
                         rcjit::conv2d_backward_input(gh.to(DType::f64), wh.to(DType::f64),
                                                      x.shape(), c.stride, c.pad),
                         2e-2, 5e-2));
  }
  // an empty batch: the weight's gradient is zeros
  Tensor x0 = Tensor::randn({0, 3, 8, 8}, 4), w0 = Tensor::randn({4, 3, 3, 3}, 5);
  Tensor g0 = Tensor::randn({0, 4, 6, 6}, 6);
  Tensor gw0 = rcjit::conv2d_backward_weight(g0, x0, w0.shape(), 1, 0);
  EXPECT_TRUE(allclose(gw0, Tensor::zeros({4, 3, 3, 3}), 0, 0));
  EXPECT_EQ(rcjit::conv2d_backward_input(g0, w0, x0.shape(), 1, 0).numel(), 0);
}

TEST(EagerConv2d, WrongRankIsAnError) {
  std::string msg = errorOf([] {
    rcjit::conv2d(Tensor::randn({3, 9, 8}, 1), Tensor::randn({4, 3, 3, 3}, 2), Tensor());
  });
  EXPECT_NE(msg.find("conv2d"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 9, 8]"), std::string::npos) << msg;
}

} // namespace
