// Eager layer_norm, rms_norm, embedding and sdpa against naive double-precision loops.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/TestUtil.h"

#include <rcjit/rcjit.h>

namespace {

using rcjit::test::expectClose;
using rcjit::test::Ref;
using rcjit::test::refOf;

using rcjit::DType;
using rcjit::Shape;
using rcjit::Tensor;

using rcjit::test::errorOf;

/// layer_norm (b may be null) or, with rms, rms_norm over the trailing w.numel() elements.
Ref refNorm(const Ref &x, const Ref &w, const Ref *b, double eps, bool rms) {
  size_t width = w.data.size(), rows = x.data.size() / width;
  Ref r{std::vector<double>(x.data.size()), x.shape};
  for (size_t i = 0; i < rows; ++i) {
    const double *row = x.data.data() + i * width;
    double mean = 0, sq = 0;
    if (!rms) {
      for (size_t j = 0; j < width; ++j) mean += row[j];
      mean /= static_cast<double>(width);
    }
    for (size_t j = 0; j < width; ++j) sq += (row[j] - mean) * (row[j] - mean);
    double rstd = 1 / std::sqrt(sq / static_cast<double>(width) + eps);
    for (size_t j = 0; j < width; ++j) {
      r.data[i * width + j] = (row[j] - mean) * rstd * w.data[j] + (b ? b->data[j] : 0);
    }
  }
  return r;
}

/// softmax(q k^T / sqrt(D) [causal: key j <= query i]) v over flattened batches.
Ref refSdpa(const Ref &q, const Ref &k, const Ref &v, bool causal) {
  size_t r = q.shape.size();
  int64_t lq = q.shape[r - 2], d = q.shape[r - 1], lk = k.shape[r - 2], dv = v.shape[r - 1];
  int64_t batches = static_cast<int64_t>(q.data.size()) / (lq * d);
  Shape shape = q.shape;
  shape.back() = dv;
  Ref out{std::vector<double>(static_cast<size_t>(batches * lq * dv)), shape};
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < lq; ++i) {
      std::vector<double> s(static_cast<size_t>(lk), -std::numeric_limits<double>::infinity());
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j < lk && (!causal || j <= i); ++j) {
        double dot = 0;
        for (int64_t t = 0; t < d; ++t) {
          dot += q.data[(b * lq + i) * d + t] * k.data[(b * lk + j) * d + t];
        }
        s[j] = dot / std::sqrt(static_cast<double>(d));
        mx = std::max(mx, s[j]);
      }
      for (double &e : s) sum += (e = std::exp(e - mx));
      for (int64_t t = 0; t < dv; ++t) {
        double o = 0;
        for (int64_t j = 0; j < lk; ++j) o += s[j] / sum * v.data[(b * lk + j) * dv + t];
        out.data[(b * lq + i) * dv + t] = o;
      }
    }
  }
  return out;
}

TEST(EagerLayerNorm, F32WithAndWithoutBias) {
  Tensor x = Tensor::randn({4, 7, 32}, 1), w = Tensor::randn({32}, 2), b = Tensor::randn({32}, 3);
  Ref rx = refOf(x), rw = refOf(w), rb = refOf(b);
  expectClose(rcjit::layer_norm(x, w, b, 1e-5), refNorm(rx, rw, &rb, 1e-5, false), 1e-4, 1e-5);
  expectClose(rcjit::layer_norm(x, w, Tensor(), 1e-3), refNorm(rx, rw, nullptr, 1e-3, false), 1e-4,
              1e-5);
}

TEST(EagerLayerNorm, OverSeveralTrailingDims) {
  Tensor x = Tensor::randn({3, 5, 6}, 1) * 3.0 + 2.0;
  Tensor w = Tensor::randn({5, 6}, 2), b = Tensor::randn({5, 6}, 3);
  Ref rb = refOf(b);
  expectClose(rcjit::layer_norm(x, w, b, 1e-5), refNorm(refOf(x), refOf(w), &rb, 1e-5, false), 1e-4,
              1e-5);
}

TEST(EagerLayerNorm, NonContiguousAndOtherDtypes) {
  Tensor x = rcjit::transpose(Tensor::randn({16, 6}, 1), 0, 1); // [6, 16]
  Tensor w = Tensor::randn({16}, 2), b = Tensor::randn({16}, 3);
  Ref rb = refOf(b);
  expectClose(rcjit::layer_norm(x, w, b, 1e-5),
              refNorm(refOf(x.contiguous()), refOf(w), &rb, 1e-5, false), 1e-4, 1e-5);
  Tensor xd = x.to(DType::f64), wd = w.to(DType::f64), bd = b.to(DType::f64);
  expectClose(rcjit::layer_norm(xd, wd, bd, 1e-5),
              refNorm(refOf(xd.contiguous()), refOf(wd), &rb, 1e-5, false), 1e-12, 1e-12);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor xh = x.to(t), wh = w.to(t), bh = b.to(t);
    Ref rbh = refOf(bh);
    Tensor y = rcjit::layer_norm(xh, wh, bh, 1e-5);
    EXPECT_EQ(y.dtype(), t);
    double tol = t == DType::bf16 ? 1e-2 : 2e-3; // one rounding of the output
    expectClose(y, refNorm(refOf(xh.contiguous()), refOf(wh), &rbh, 1e-5, false), tol, tol);
  }
}

TEST(EagerLayerNorm, Module) {
  rcjit::nn::LayerNorm ln(24);
  Tensor x = Tensor::randn({5, 24}, 1);
  Ref rb = refOf(ln.bias);
  expectClose(ln(x), refNorm(refOf(x), refOf(ln.weight), &rb, 1e-5, false), 1e-4, 1e-5);
}

TEST(EagerRmsNorm, MatchesReference) {
  Tensor x = Tensor::randn({3, 4, 40}, 1), w = Tensor::randn({40}, 2);
  expectClose(rcjit::rms_norm(x, w, 1e-6), refNorm(refOf(x), refOf(w), nullptr, 1e-6, true), 1e-4,
              1e-5);
  Tensor xd = x.to(DType::f64), wd = w.to(DType::f64);
  expectClose(rcjit::rms_norm(xd, wd, 1e-6), refNorm(refOf(xd), refOf(wd), nullptr, 1e-6, true),
              1e-12, 1e-12);
  Tensor xh = x.to(DType::f16), wh = w.to(DType::f16);
  expectClose(rcjit::rms_norm(xh, wh, 1e-6), refNorm(refOf(xh), refOf(wh), nullptr, 1e-6, true),
              2e-3, 2e-3);
  rcjit::nn::RMSNorm norm(40);
  expectClose(norm(x), refNorm(refOf(x), refOf(norm.weight), nullptr, 1e-6, true), 1e-4, 1e-5);
}

TEST(EagerEmbedding, PicksRows) {
  Tensor weight = Tensor::randn({10, 6}, 1);
  std::vector<int64_t> ids{3, 0, 9, 3, 7, 1};
  Ref rw = refOf(weight);
  Ref want{{}, {2, 3, 6}};
  for (int64_t id : ids) {
    want.data.insert(want.data.end(), rw.data.begin() + id * 6, rw.data.begin() + id * 6 + 6);
  }
  Tensor ids64 = Tensor::from_vector(ids, {2, 3});
  expectClose(rcjit::embedding(weight, ids64), want, 0, 0);
  expectClose(rcjit::embedding(weight, ids64.to(DType::i32)), want, 0, 0);
  Tensor wt = rcjit::transpose(rcjit::transpose(weight, 0, 1).contiguous(), 0, 1);
  ASSERT_FALSE(wt.is_contiguous());
  expectClose(rcjit::embedding(wt, ids64), want, 0, 0);
  Tensor idsT = rcjit::transpose(Tensor::from_vector(ids, {3, 2}), 0, 1);
  Tensor y = rcjit::embedding(weight, idsT);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_EQ(y.to_vector<float>()[6], weight.to_vector<float>()[static_cast<size_t>(ids[2] * 6)]);
}

TEST(EagerEmbedding, ModuleAndDtypes) {
  rcjit::nn::Embedding emb(12, 4, 3);
  Tensor ids = Tensor::from_vector(std::vector<int64_t>{11, 0, 5}, {3});
  Tensor y = emb(ids);
  EXPECT_EQ(y.shape(), (Shape{3, 4}));
  std::vector<float> w = emb.weight.to_vector<float>(), got = y.to_vector<float>();
  for (int j = 0; j < 4; ++j) EXPECT_EQ(got[j], w[11 * 4 + j]);
  Tensor wd = emb.weight.to(DType::f64);
  EXPECT_EQ(rcjit::embedding(wd, ids).dtype(), DType::f64);
}

TEST(EagerEmbedding, IdOutOfRangeIsAnError) {
  Tensor weight = Tensor::randn({10, 6}, 1);
  std::string msg = errorOf([&] {
    rcjit::embedding(weight, Tensor::from_vector(std::vector<int64_t>{1, 12}, {2}));
  });
  EXPECT_NE(msg.find("embedding"), std::string::npos) << msg;
  EXPECT_NE(msg.find("12"), std::string::npos) << msg;
  EXPECT_NE(msg.find("10"), std::string::npos) << msg;
  msg = errorOf([&] {
    rcjit::embedding(weight, Tensor::from_vector(std::vector<int64_t>{-1}, {1}).to(DType::i32));
  });
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
}

TEST(EagerSdpa, CausalAndNot) {
  Tensor q = Tensor::randn({2, 3, 5, 8}, 1), k = Tensor::randn({2, 3, 7, 8}, 2);
  Tensor v = Tensor::randn({2, 3, 7, 4}, 3);
  for (bool causal : {false, true}) {
    expectClose(rcjit::scaled_dot_product_attention(q, k, v, causal),
                refSdpa(refOf(q), refOf(k), refOf(v), causal), 1e-4, 1e-5);
  }
  Tensor q2 = Tensor::randn({9, 16}, 4), k2 = Tensor::randn({9, 16}, 5);
  Tensor v2 = Tensor::randn({9, 16}, 6);
  expectClose(rcjit::scaled_dot_product_attention(q2, k2, v2, true),
              refSdpa(refOf(q2), refOf(k2), refOf(v2), true), 1e-4, 1e-5);
}

TEST(EagerSdpa, NonContiguousHeads) {
  // [batch, seq, heads, dim] storage viewed as [batch, heads, seq, dim]
  auto heads = [](uint64_t seed) {
    return rcjit::permute(Tensor::randn({2, 6, 3, 8}, seed), {0, 2, 1, 3});
  };
  Tensor q = heads(1), k = heads(2), v = heads(3);
  ASSERT_FALSE(q.is_contiguous());
  expectClose(rcjit::scaled_dot_product_attention(q, k, v, true),
              refSdpa(refOf(q.contiguous()), refOf(k.contiguous()), refOf(v.contiguous()), true),
              1e-4, 1e-5);
}

TEST(EagerSdpa, OtherDtypes) {
  Tensor q = Tensor::randn({2, 5, 8}, 1, DType::f64), k = Tensor::randn({2, 6, 8}, 2, DType::f64);
  Tensor v = Tensor::randn({2, 6, 3}, 3, DType::f64);
  expectClose(rcjit::scaled_dot_product_attention(q, k, v, true),
              refSdpa(refOf(q), refOf(k), refOf(v), true), 1e-12, 1e-12);
  for (DType t : {DType::bf16, DType::f16}) {
    Tensor qh = q.to(t), kh = k.to(t), vh = v.to(t);
    Tensor y = rcjit::scaled_dot_product_attention(qh, kh, vh, false);
    EXPECT_EQ(y.dtype(), t);
    double tol = t == DType::bf16 ? 1e-2 : 2e-3;
    expectClose(y, refSdpa(refOf(qh), refOf(kh), refOf(vh), false), tol, tol);
  }
}

} // namespace
