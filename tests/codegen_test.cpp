// LoopKernel → LLVM → machine code: hand-built kernels run on real buffers vs reference loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include <rcjit/Error.h>
#include <rcjit/rcjit.h>

#include "targets/LoopKernel.h"
#include "targets/cpu/CpuKernels.h"
#include "tracer/Half.h"
#include "tracer/OpCases.h"

namespace rcjit {
namespace {

using K = KernelStmt::Kind;

// Builds a LoopKernel statement by statement.
struct KernelBuilder {
  LoopKernel k;
  KernelBuilder(std::string name, const std::vector<int64_t> &domain, int numOuter) {
    k.name = std::move(name);
    k.domain = sizes(domain);
    k.numOuter = numOuter;
  }
  static std::vector<SizeExpr> sizes(const std::vector<int64_t> &v) {
    std::vector<SizeExpr> out;
    for (int64_t x : v) out.push_back(SizeExpr::constant(x));
    return out;
  }
  int symbolicTensor(DType dt, std::vector<SizeExpr> strides, bool output = false) {
    k.tensors.push_back({dt, std::move(strides), output});
    return static_cast<int>(k.tensors.size()) - 1;
  }
  int tensor(DType dt, const std::vector<int64_t> &strides, bool output = false) {
    return symbolicTensor(dt, sizes(strides), output);
  }
  int add(KernelStmt s) {
    k.stmts.push_back(std::move(s));
    return static_cast<int>(k.stmts.size()) - 1;
  }
  int load(int t) { return add({K::load, OpKind::add, {}, t, k.tensors[t].dtype, 0}); }
  int constant(double v, DType dt) { return add({K::constant, OpKind::add, {}, -1, dt, v}); }
  int op(OpKind o, std::vector<int> args, DType dt) {
    return add({K::compute, o, std::move(args), -1, dt, 0});
  }
  int reduce(OpKind o, int arg, DType dt) { return add({K::reduce, o, {arg}, -1, dt, 0}); }
  void store(int t, int v) { add({K::store, OpKind::add, {v}, t, k.tensors[t].dtype, 0}); }
};

// The kernel's function; its code is kept for the rest of the test process.
KernelFn compileOne(const LoopKernel &k) {
  static std::mutex mu;
  static std::vector<std::shared_ptr<const void>> keep;
  cpu::CpuCompiledKernels c = cpu::compileKernels({k}, "test." + k.name);
  std::lock_guard<std::mutex> lock(mu);
  keep.push_back(c.code);
  return c.functions.at(0);
}

void run(KernelFn f, std::vector<void *> ptrs, int64_t begin, int64_t end,
         std::vector<int64_t> syms = {0}) {
  f(reinterpret_cast<char *const *>(ptrs.data()), syms.data(), begin, end);
}

std::vector<float> randomFloats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float &x : v) x = d(gen);
  return v;
}

void expectClose(double got, double want, double rtol, double atol, const std::string &what) {
  if (std::isnan(want) || std::isinf(want)) {
    EXPECT_TRUE(std::isnan(want) ? std::isnan(got) : got == want) << what << ": got " << got;
    return;
  }
  EXPECT_LE(std::fabs(got - want), atol + rtol * std::fabs(want))
      << what << ": got " << got << " want " << want;
}

TEST(CodegenTest, ElementwiseChainOfEightF32) {
  const int64_t r = 37, c = 129;
  KernelBuilder kb("chain8", {r, c}, 2);
  int x = kb.tensor(DType::f32, {c, 1});
  int y = kb.tensor(DType::f32, {c, 1});
  int o = kb.tensor(DType::f32, {c, 1}, true);
  int a = kb.load(x), b = kb.load(y);
  int t = kb.op(OpKind::mul, {a, b}, DType::f32);
  t = kb.op(OpKind::add, {t, kb.constant(0.5, DType::f32)}, DType::f32);
  t = kb.op(OpKind::tanh, {t}, DType::f32);
  t = kb.op(OpKind::mul, {t, a}, DType::f32);
  t = kb.op(OpKind::exp, {t}, DType::f32);
  t = kb.op(OpKind::sub, {t, b}, DType::f32);
  t = kb.op(OpKind::abs, {t}, DType::f32);
  t = kb.op(OpKind::sqrt, {t}, DType::f32);
  kb.store(o, t);
  auto xs = randomFloats(r * c, -2, 2, 1), ys = randomFloats(r * c, -2, 2, 2);
  std::vector<float> out(r * c);
  run(compileOne(kb.k), {xs.data(), ys.data(), out.data()}, 0, r * c);
  for (int64_t i = 0; i < r * c; ++i) {
    double p = std::tanh(double(xs[i]) * ys[i] + 0.5) * xs[i];
    double want = std::sqrt(std::fabs(std::exp(p) - ys[i]));
    expectClose(out[i], want, 1e-5, 1e-6, "chain8[" + std::to_string(i) + "]");
  }
}

TEST(CodegenTest, BroadcastAndTransposedOperands) {
  const int64_t r = 19, c = 53;
  KernelBuilder kb("bcast", {r, c}, 2);
  int xt = kb.tensor(DType::f32, {1, r}); // stored as [c, r], read transposed
  int bias = kb.tensor(DType::f32, {0, 1});
  int scale = kb.tensor(DType::f32, {1, 0});
  int o = kb.tensor(DType::f32, {c, 1}, true);
  int v = kb.op(OpKind::add, {kb.load(xt), kb.load(bias)}, DType::f32);
  kb.store(o, kb.op(OpKind::mul, {v, kb.load(scale)}, DType::f32));
  auto xs = randomFloats(r * c, -1, 1, 3), bs = randomFloats(c, -1, 1, 4);
  auto ss = randomFloats(r, -1, 1, 5);
  std::vector<float> out(r * c);
  run(compileOne(kb.k), {xs.data(), bs.data(), ss.data(), out.data()}, 0, r * c);
  for (int64_t i = 0; i < r; ++i) {
    for (int64_t j = 0; j < c; ++j) {
      float want = (xs[j * r + i] + bs[j]) * ss[i];
      EXPECT_EQ(out[i * c + j], want) << i << "," << j;
    }
  }
}

// a + b in every dtype (bool: logical or), compared bit-exactly with the same math.
TEST(CodegenTest, AddInEveryDtype) {
  const int64_t n = 301;
  for (DType dt :
       {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    KernelBuilder kb(std::string("add_") + std::string(dtypeName(dt)), {n}, 1);
    int a = kb.tensor(dt, {1}), b = kb.tensor(dt, {1}), o = kb.tensor(dt, {1}, true);
    kb.store(o, kb.op(OpKind::add, {kb.load(a), kb.load(b)}, dt));
    size_t es = dtypeSize(dt);
    std::vector<uint8_t> av(n * es), bv(n * es), ov(n * es), want(n * es);
    auto fa = randomFloats(n, -100, 100, 6), fb = randomFloats(n, -100, 100, 7);
    for (int64_t i = 0; i < n; ++i) {
      auto put = [&](std::vector<uint8_t> &v, auto x) { std::memcpy(&v[i * es], &x, es); };
      switch (dt) {
      case DType::f32:
        put(av, fa[i]);
        put(bv, fb[i]);
        put(want, fa[i] + fb[i]);
        break;
      case DType::f64:
        put(av, double(fa[i]));
        put(bv, double(fb[i]));
        put(want, double(fa[i]) + fb[i]);
        break;
      case DType::f16: {
        uint16_t ha = floatToHalf(fa[i]), hb = floatToHalf(fb[i]);
        put(av, ha);
        put(bv, hb);
        put(want, floatToHalf(halfToFloat(ha) + halfToFloat(hb)));
        break;
      }
      case DType::bf16: {
        uint16_t ha = floatToBf16(fa[i]), hb = floatToBf16(fb[i]);
        put(av, ha);
        put(bv, hb);
        put(want, floatToBf16(bf16ToFloat(ha) + bf16ToFloat(hb)));
        break;
      }
      case DType::i32:
        put(av, int32_t(fa[i]));
        put(bv, int32_t(fb[i]));
        put(want, int32_t(fa[i]) + int32_t(fb[i]));
        break;
      case DType::i64:
        put(av, int64_t(fa[i] * 1e6));
        put(bv, int64_t(fb[i] * 1e6));
        put(want, int64_t(fa[i] * 1e6) + int64_t(fb[i] * 1e6));
        break;
      case DType::boolean:
        put(av, uint8_t(fa[i] > 0));
        put(bv, uint8_t(fb[i] > 0));
        put(want, uint8_t(fa[i] > 0 || fb[i] > 0));
        break;
      }
    }
    run(compileOne(kb.k), {av.data(), bv.data(), ov.data()}, 0, n);
    EXPECT_EQ(ov, want) << dtypeName(dt);
  }
}

TEST(CodegenTest, Casts) {
  std::vector<float> xs = {0.f,     -0.f,        1.5f,
                           -2.5f,   3.999f,      1e-3f,
                           65504.f, 1.00390625f, std::numeric_limits<float>::quiet_NaN(),
                           -7.f,    0.1f,        123456.7f};
  const int64_t n = static_cast<int64_t>(xs.size());
  KernelBuilder kb("casts", {n}, 1);
  int x = kb.tensor(DType::f32, {1});
  int oi = kb.tensor(DType::i32, {1}, true), oh = kb.tensor(DType::f16, {1}, true);
  int ob = kb.tensor(DType::bf16, {1}, true), ol = kb.tensor(DType::boolean, {1}, true);
  int of = kb.tensor(DType::f32, {1}, true);
  int v = kb.load(x);
  kb.store(oi, kb.op(OpKind::cast, {kb.op(OpKind::abs, {v}, DType::f32)}, DType::i32));
  kb.store(oh, kb.op(OpKind::cast, {v}, DType::f16));
  kb.store(ob, kb.op(OpKind::cast, {v}, DType::bf16));
  int isTrue = kb.op(OpKind::cast, {v}, DType::boolean);
  kb.store(ol, isTrue);
  int asI64 = kb.op(OpKind::cast, {isTrue}, DType::i64);
  kb.store(of, kb.op(OpKind::cast, {asI64}, DType::f32));
  std::vector<int32_t> ri(n);
  std::vector<uint16_t> rh(n), rb(n);
  std::vector<uint8_t> rl(n);
  std::vector<float> rf(n);
  run(compileOne(kb.k), {xs.data(), ri.data(), rh.data(), rb.data(), rl.data(), rf.data()}, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    bool nan = std::isnan(xs[i]);
    if (!nan) {
      EXPECT_EQ(ri[i], int32_t(std::fabs(xs[i]))) << i;
      EXPECT_EQ(rh[i], floatToHalf(xs[i])) << i;
    }
    EXPECT_EQ(rb[i], floatToBf16(xs[i])) << i;
    EXPECT_EQ(rl[i], xs[i] != 0 ? 1 : 0) << i;
    EXPECT_EQ(rf[i], xs[i] != 0 ? 1.f : 0.f) << i;
  }
}

TEST(CodegenTest, CompareAndWhere) {
  const int64_t n = 200;
  KernelBuilder kb("cmpwhere", {n}, 1);
  int x = kb.tensor(DType::f32, {1}), y = kb.tensor(DType::f32, {1});
  int o = kb.tensor(DType::f32, {1}, true), oc = kb.tensor(DType::boolean, {1}, true);
  int a = kb.load(x), b = kb.load(y);
  int gt = kb.op(OpKind::gt, {a, b}, DType::boolean);
  int twice = kb.op(OpKind::mul, {b, kb.constant(2, DType::f32)}, DType::f32);
  kb.store(o, kb.op(OpKind::where, {gt, a, twice}, DType::f32));
  kb.store(oc, kb.op(OpKind::ne, {a, b}, DType::boolean));
  auto xs = randomFloats(n, -1, 1, 8), ys = randomFloats(n, -1, 1, 9);
  ys[3] = xs[3];
  xs[5] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> out(n);
  std::vector<uint8_t> cmp(n);
  run(compileOne(kb.k), {xs.data(), ys.data(), out.data(), cmp.data()}, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(out[i], xs[i] > ys[i] ? xs[i] : ys[i] * 2) << i;
    EXPECT_EQ(cmp[i], xs[i] != ys[i] ? 1 : 0) << i;
  }
}

double reference(OpKind op, double x) {
  switch (op) {
  case OpKind::neg:
    return -x;
  case OpKind::abs:
    return std::fabs(x);
  case OpKind::exp:
    return std::exp(x);
  case OpKind::log:
    return std::log(x);
  case OpKind::sqrt:
    return std::sqrt(x);
  case OpKind::rsqrt:
    return 1 / std::sqrt(x);
  case OpKind::reciprocal:
    return 1 / x;
  case OpKind::tanh:
    return std::tanh(x);
  case OpKind::sigmoid:
    return 1 / (1 + std::exp(-x));
  case OpKind::relu:
    return x < 0 ? 0 : x;
  case OpKind::gelu:
    return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
  case OpKind::silu:
    return x / (1 + std::exp(-x));
  case OpKind::erf:
    return std::erf(x);
  case OpKind::sin:
    return std::sin(x);
  case OpKind::cos:
    return std::cos(x);
  case OpKind::cast:
    return x;
    RCJIT_OP_CASES(Source, Binary, Compare, Where, Reduce, Normalize, Matmul, Nn, View, Copy,
                   Collective)
    break;
  }
  ADD_FAILURE() << opName(op) << " is not a unary op";
  return 0;
}

// The CPU feature sets to check generated code under: the portable levels (AVX-512 only
// where this CPU has it), then the host's own.
std::vector<std::string> featureSetsHere() {
  std::vector<std::string> sets = {"x86-64-v2", "avx2"};
  try {
    cpu::setCpuFeatures("avx512");
    sets.push_back("avx512");
  } catch (const Error &) { // this CPU has no AVX-512
  }
  sets.push_back("native");
  cpu::setCpuFeatures("native");
  return sets;
}

// Restores the feature set in use when it goes out of scope.
struct FeatureSetScope {
  std::string saved = cpu::cpuFeatures();
  explicit FeatureSetScope(const std::string &set) { cpu::setCpuFeatures(set); }
  ~FeatureSetScope() { cpu::setCpuFeatures(saved); }
};

// Under every feature set: on an AVX2-only host the vectorized gelu was wrong for large
// negative inputs (this test failed there; the set makes any host check AVX2 code).
TEST(CodegenTest, UnaryOpsMatchDoubleReference) {
  for (const std::string &set : featureSetsHere()) {
    SCOPED_TRACE("CPU feature set " + set);
    FeatureSetScope scope(set);
    const int64_t n = 4099;
    for (DType dt : {DType::f32, DType::f64}) {
      for (OpKind op : opsOfCategory(OpCategory::Unary)) {
        bool positive = op == OpKind::log || op == OpKind::sqrt || op == OpKind::rsqrt;
        auto xs = randomFloats(n, positive ? 1e-3f : -9, 9, 10);
        xs[0] = 1e-5f;
        xs[1] = std::numeric_limits<float>::quiet_NaN();
        xs[2] = 100; // exp overflows to inf; tanh, erf, sigmoid saturate
        xs[3] = -100;
        xs[4] = INFINITY;
        KernelBuilder kb(std::string("u_") + std::string(opName(op)), {n}, 1);
        int x = kb.tensor(DType::f32, {1}), o = kb.tensor(dt, {1}, true);
        int v = kb.op(OpKind::cast, {kb.load(x)}, dt);
        kb.store(o, kb.op(op, {v}, dt));
        std::vector<double> out(n);
        std::vector<float> outF(n);
        void *dst = dt == DType::f64 ? static_cast<void *>(out.data()) : outF.data();
        run(compileOne(kb.k), {xs.data(), dst}, 0, n);
        double rtol = dt == DType::f64 ? 1e-12 : 1e-5;
        for (int64_t i = 0; i < n; ++i) {
          double got = dt == DType::f64 ? out[i] : outF[i];
          double want = reference(op, xs[i]);
          if (dt == DType::f32) want = static_cast<float>(want); // overflows like f32
          expectClose(got, want, rtol, rtol * 1e-1,
                      std::string(opName(op)) + " " + std::string(dtypeName(dt)) +
                          " x=" + std::to_string(xs[i]));
        }
      }
    }
  }
}

// sigmoid and silu of a relu's result take a shorter exp (jit codegen: exp(-x) of a value not
// below 0 in one scale factor, x clamped at 87): within 2 ulp of the double reference over
// the whole f32 range above 0, and NaN, 0, -0, +inf and large values at the edges, in the
// vector body and the scalar tail, under every feature set.
TEST(CodegenTest, SigmoidAndSiluOfReluMatchDoubleReference) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> xs = {0.0f,  -0.0f, 1e-30f, 1e-5f, 86.9f, 87.0f, 87.3f, 88.0f,
                           88.8f, 89.0f, 104.0f, 1e6f,  inf,   -inf,  -3.0f, std::nanf("")};
  // dense over [0, 90] (where exp(-x) goes from 1 to below f32's smallest normal)
  for (int i = 0; i <= 200000; ++i) xs.push_back(90.0f * static_cast<float>(i) / 200000.0f);
  xs.push_back(5.0f); // an odd count: a scalar tail too
  const auto n = static_cast<int64_t>(xs.size());
  for (const std::string &set : featureSetsHere()) {
    SCOPED_TRACE("CPU feature set " + set);
    FeatureSetScope scope(set);
    for (OpKind op : {OpKind::sigmoid, OpKind::silu}) {
      KernelBuilder kb(std::string("relu_") + std::string(opName(op)), {n}, 1);
      int x = kb.tensor(DType::f32, {1}), o = kb.tensor(DType::f32, {1}, true);
      kb.store(o, kb.op(op, {kb.op(OpKind::relu, {kb.load(x)}, DType::f32)}, DType::f32));
      std::vector<float> out(n);
      run(compileOne(kb.k), {xs.data(), out.data()}, 0, n);
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        const std::string what = std::string(opName(op)) + " of relu, x=" + std::to_string(xs[i]);
        if (std::isnan(xs[i])) {
          EXPECT_TRUE(std::isnan(out[i])) << what;
          continue;
        }
        const double r = std::max(static_cast<double>(xs[i]), 0.0);
        const auto want = static_cast<float>(reference(op, r));
        if (std::isinf(want)) {
          EXPECT_EQ(out[i], want) << what;
          continue;
        }
        const double ulp = std::nextafter(std::fabs(want), inf) - std::fabs(want);
        worst = std::max(worst, std::fabs(out[i] - want) / ulp);
        EXPECT_LE(std::fabs(out[i] - want), 2 * ulp) << what << ": got " << out[i];
      }
      std::printf("%s of relu under %s: at most %.2f ulp from the double reference\n",
                  std::string(opName(op)).c_str(), set.c_str(), worst);
    }
  }
}

// gelu and erf at the edges, in the vectorized body and the scalar tail alike: the vector
// path gave x * 2.98e-8 for large negative x (-0.0298 at -1e6, -inf at -inf) because the
// erf fit is not exactly -1 at its clamp.
TEST(CodegenTest, GeluAndErfAtLargeInfiniteAndNanInputs) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> edges = {-1e6f, 1e6f, -inf, inf, nan, -100, 100, -6, -5.7f, -4, 4};
  std::vector<float> xs;
  for (int rep = 0; rep < 9; ++rep) xs.insert(xs.end(), edges.begin(), edges.end()); // 99: tail too
  const auto n = static_cast<int64_t>(xs.size());
  for (const std::string &set : featureSetsHere()) {
    SCOPED_TRACE("CPU feature set " + set);
    FeatureSetScope scope(set);
    for (DType dt : {DType::f32, DType::f64}) {
      for (OpKind op : {OpKind::gelu, OpKind::erf}) {
        KernelBuilder kb(std::string("edge_") + std::string(opName(op)), {n}, 1);
        int x = kb.tensor(DType::f32, {1}), o = kb.tensor(dt, {1}, true);
        kb.store(o, kb.op(op, {kb.op(OpKind::cast, {kb.load(x)}, dt)}, dt));
        std::vector<double> out(n);
        std::vector<float> outF(n);
        void *dst = dt == DType::f64 ? static_cast<void *>(out.data()) : outF.data();
        run(compileOne(kb.k), {xs.data(), dst}, 0, n);
        for (int64_t i = 0; i < n; ++i) {
          double got = dt == DType::f64 ? out[i] : outF[i];
          const std::string what = std::string(opName(op)) + " " + std::string(dtypeName(dt)) +
                                   " x=" + std::to_string(xs[i]) + " i=" + std::to_string(i);
          if (std::isnan(xs[i])) {
            EXPECT_TRUE(std::isnan(got)) << what << ": got " << got;
          } else if (op == OpKind::gelu && xs[i] == -inf) {
            EXPECT_EQ(got, 0.0) << what;
          } else {
            expectClose(got, reference(op, xs[i]), 1e-6, 1e-6, what);
          }
        }
      }
    }
  }
  // Eager agrees at the same points.
  Tensor t = Tensor::from_vector(xs, {n});
  for (DType dt : {DType::f32, DType::f64}) {
    std::vector<double> g = gelu(t.to(dt)).to_vector<double>();
    for (int64_t i = 0; i < n; ++i) {
      const std::string what = "eager gelu x=" + std::to_string(xs[i]);
      if (std::isnan(xs[i])) {
        EXPECT_TRUE(std::isnan(g[i])) << what;
      } else if (xs[i] == -inf) {
        EXPECT_EQ(g[i], 0.0) << what;
      } else {
        expectClose(g[i], reference(OpKind::gelu, xs[i]), 1e-6, 1e-6, what);
      }
    }
  }
}

TEST(CodegenTest, BinaryOpsPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {1, -2, nan, 3, 0.5f, 2}, ys = {2, -3, 1, nan, 2, -1};
  const int64_t n = static_cast<int64_t>(xs.size());
  KernelBuilder kb("binops", {n}, 1);
  int x = kb.tensor(DType::f32, {1}), y = kb.tensor(DType::f32, {1});
  int omax = kb.tensor(DType::f32, {1}, true), omin = kb.tensor(DType::f32, {1}, true);
  int opow = kb.tensor(DType::f32, {1}, true);
  int a = kb.load(x), b = kb.load(y);
  kb.store(omax, kb.op(OpKind::maximum, {a, b}, DType::f32));
  kb.store(omin, kb.op(OpKind::minimum, {a, b}, DType::f32));
  kb.store(opow, kb.op(OpKind::pow, {a, b}, DType::f32));
  std::vector<float> mx(n), mn(n), pw(n);
  run(compileOne(kb.k), {xs.data(), ys.data(), mx.data(), mn.data(), pw.data()}, 0, n);
  for (int64_t i = 0; i < n; ++i) {
    bool anyNan = std::isnan(xs[i]) || std::isnan(ys[i]);
    if (anyNan) {
      EXPECT_TRUE(std::isnan(mx[i]) && std::isnan(mn[i])) << i;
    } else {
      EXPECT_EQ(mx[i], std::max(xs[i], ys[i])) << i;
      EXPECT_EQ(mn[i], std::min(xs[i], ys[i])) << i;
    }
    expectClose(pw[i], std::pow(double(xs[i]), double(ys[i])), 1e-6, 0, "pow");
  }
}

// Row softmax: amax, exp(x - m), sum, divide — one kernel, two reduction passes + a store pass.
TEST(CodegenTest, RowSoftmax) {
  const int64_t r = 13, c = 1000;
  KernelBuilder kb("softmax", {r, c}, 1);
  int x = kb.tensor(DType::f32, {c, 1}), o = kb.tensor(DType::f32, {c, 1}, true);
  int v = kb.load(x);
  int m = kb.reduce(OpKind::amax, v, DType::f32);
  int e = kb.op(OpKind::exp, {kb.op(OpKind::sub, {v, m}, DType::f32)}, DType::f32);
  int s = kb.reduce(OpKind::sum, e, DType::f32);
  kb.store(o, kb.op(OpKind::div, {e, s}, DType::f32));
  auto xs = randomFloats(r * c, -10, 10, 11);
  std::vector<float> out(r * c);
  run(compileOne(kb.k), {xs.data(), out.data()}, 0, r);
  for (int64_t i = 0; i < r; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, double(xs[i * c + j]));
    for (int64_t j = 0; j < c; ++j) sum += std::exp(xs[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) {
      expectClose(out[i * c + j], std::exp(xs[i * c + j] - mx) / sum, 1e-4, 1e-9, "softmax");
    }
  }
}

// Layer-norm statistics: mean, variance of (x - mean), normalized output and outer stores.
TEST(CodegenTest, LayerNormMeanVariance) {
  const int64_t r = 7, c = 4999;
  KernelBuilder kb("layernorm", {r, c}, 1);
  int x = kb.tensor(DType::f32, {c, 1}), o = kb.tensor(DType::f32, {c, 1}, true);
  int om = kb.tensor(DType::f32, {1, 0}, true), ors = kb.tensor(DType::f32, {1, 0}, true);
  int v = kb.load(x);
  int mean = kb.reduce(OpKind::mean, v, DType::f32);
  int d = kb.op(OpKind::sub, {v, mean}, DType::f32);
  int var = kb.reduce(OpKind::mean, kb.op(OpKind::mul, {d, d}, DType::f32), DType::f32);
  int eps = kb.constant(1e-5, DType::f32);
  int rstd = kb.op(OpKind::rsqrt, {kb.op(OpKind::add, {var, eps}, DType::f32)}, DType::f32);
  kb.store(o, kb.op(OpKind::mul, {d, rstd}, DType::f32));
  kb.store(om, mean);
  kb.store(ors, rstd);
  auto xs = randomFloats(r * c, 3, 5, 12);
  std::vector<float> out(r * c), means(r), rstds(r);
  run(compileOne(kb.k), {xs.data(), out.data(), means.data(), rstds.data()}, 0, r);
  for (int64_t i = 0; i < r; ++i) {
    double mu = 0, var2 = 0;
    for (int64_t j = 0; j < c; ++j) mu += xs[i * c + j];
    mu /= c;
    for (int64_t j = 0; j < c; ++j) var2 += (xs[i * c + j] - mu) * (xs[i * c + j] - mu);
    double rs = 1 / std::sqrt(var2 / c + 1e-5);
    expectClose(means[i], mu, 1e-5, 0, "mean");
    expectClose(rstds[i], rs, 1e-4, 0, "rstd");
    for (int64_t j = 0; j < c; ++j) {
      expectClose(out[i * c + j], (xs[i * c + j] - mu) * rs, 1e-4, 1e-5, "normalized");
    }
  }
}

TEST(CodegenTest, SumOverNonLastDim) {
  const int64_t r = 300, c = 21; // x[r, c] summed over r
  KernelBuilder kb("colsum", {c, r}, 1);
  int x = kb.tensor(DType::f32, {1, c}), o = kb.tensor(DType::f32, {1, 0}, true);
  kb.store(o, kb.reduce(OpKind::sum, kb.load(x), DType::f32));
  auto xs = randomFloats(r * c, -1, 1, 13);
  std::vector<float> out(c);
  run(compileOne(kb.k), {xs.data(), out.data()}, 0, c);
  for (int64_t j = 0; j < c; ++j) {
    double want = 0;
    for (int64_t i = 0; i < r; ++i) want += xs[i * c + j];
    expectClose(out[j], want, 1e-5, 1e-5, "colsum");
  }
}

TEST(CodegenTest, ReductionOverSizeOneDims) {
  KernelBuilder kb("unitreduce", {5, 1, 1}, 1);
  int x = kb.tensor(DType::f32, {1, 1, 1}), o = kb.tensor(DType::f32, {1, 0, 0}, true);
  int oi = kb.tensor(DType::i64, {1, 0, 0}, true);
  int v = kb.load(x);
  kb.store(o, kb.reduce(OpKind::mean, v, DType::f32));
  kb.store(oi, kb.reduce(OpKind::argmax, v, DType::i64));
  std::vector<float> xs = {1, 2, 3, 4, 5}, out(5);
  std::vector<int64_t> idx(5, 7);
  run(compileOne(kb.k), {xs.data(), out.data(), idx.data()}, 0, 5);
  EXPECT_EQ(out, xs);
  EXPECT_EQ(idx, std::vector<int64_t>(5, 0));
}

TEST(CodegenTest, ReductionsInIntegerAndHalfDtypes) {
  const int64_t r = 3, c = 517;
  KernelBuilder kb("dtreduce", {r, c}, 1);
  int xi = kb.tensor(DType::i32, {c, 1}), xb = kb.tensor(DType::bf16, {c, 1});
  int osum = kb.tensor(DType::i64, {1, 0}, true), omax = kb.tensor(DType::i32, {1, 0}, true);
  int obf = kb.tensor(DType::bf16, {1, 0}, true);
  int vi = kb.load(xi);
  kb.store(osum, kb.reduce(OpKind::sum, kb.op(OpKind::cast, {vi}, DType::i64), DType::i64));
  kb.store(omax, kb.reduce(OpKind::amax, vi, DType::i32));
  kb.store(obf, kb.reduce(OpKind::sum, kb.load(xb), DType::bf16));
  auto fs = randomFloats(r * c, -1000, 1000, 18);
  std::vector<int32_t> is(r * c), mx(r);
  std::vector<uint16_t> bs(r * c), bsum(r);
  std::vector<int64_t> sums(r);
  for (int64_t i = 0; i < r * c; ++i) is[i] = int32_t(fs[i] * 1e6f), bs[i] = floatToBf16(fs[i]);
  run(compileOne(kb.k), {is.data(), bs.data(), sums.data(), mx.data(), bsum.data()}, 0, r);
  for (int64_t i = 0; i < r; ++i) {
    int64_t s = 0;
    int32_t m = INT32_MIN;
    double bsumRef = 0;
    for (int64_t j = 0; j < c; ++j) {
      s += is[i * c + j], m = std::max(m, is[i * c + j]);
      bsumRef += bf16ToFloat(bs[i * c + j]);
    }
    EXPECT_EQ(sums[i], s);
    EXPECT_EQ(mx[i], m);
    expectClose(bf16ToFloat(bsum[i]), bsumRef, 1e-2, 1e-2, "bf16 sum");
  }
}

TEST(CodegenTest, SumOfAMillionIsAccurate) {
  const int64_t n = 1 << 20;
  KernelBuilder kb("bigsum", {n}, 0);
  int x = kb.tensor(DType::f32, {1}), o = kb.tensor(DType::f32, {0}, true);
  int ov = kb.tensor(DType::f32, {0}, true), oa = kb.tensor(DType::f32, {0}, true);
  int v = kb.load(x);
  kb.store(o, kb.reduce(OpKind::sum, v, DType::f32));
  kb.store(ov, kb.reduce(OpKind::mean, v, DType::f32));
  kb.store(oa, kb.reduce(OpKind::amax, v, DType::f32));
  auto xs = randomFloats(n, 0, 1, 14);
  float sum = 0, mean = 0, amax = 0;
  run(compileOne(kb.k), {xs.data(), &sum, &mean, &amax}, 0, 1);
  double want = 0, mx = -1;
  for (float f : xs) want += f, mx = std::max(mx, double(f));
  expectClose(sum, want, 1e-6, 0, "sum");
  expectClose(mean, want / n, 1e-6, 0, "mean");
  EXPECT_EQ(amax, mx);
}

TEST(CodegenTest, ArgmaxFirstMaxAndNaN) {
  const int64_t r = 4, c = 9;
  KernelBuilder kb("argmax", {r, 3, 3}, 1); // two inner dims: flat inner index
  int x = kb.tensor(DType::f32, {c, 3, 1}), o = kb.tensor(DType::i64, {1, 0, 0}, true);
  int om = kb.tensor(DType::f32, {1, 0, 0}, true);
  int v = kb.load(x);
  kb.store(o, kb.reduce(OpKind::argmax, v, DType::i64));
  kb.store(om, kb.reduce(OpKind::amax, v, DType::f32));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> xs = {1,         5,         2,         5,         0,
                           1,         1,         1,         1, // first max at 1
                           -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY,
                           -INFINITY, -INFINITY, -INFINITY, -INFINITY, // all -inf: 0
                           3,         nan,       9,         nan,       1,
                           1,         1,         1,         1, // first NaN at 1
                           0,         0,         0,         0,         0,
                           0,         0,         0,         7}; // last
  std::vector<int64_t> idx(r);
  std::vector<float> mx(r);
  run(compileOne(kb.k), {xs.data(), idx.data(), mx.data()}, 0, r);
  EXPECT_EQ(idx, (std::vector<int64_t>{1, 0, 1, 8}));
  EXPECT_EQ(mx[0], 5);
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(mx[3], 7);
}

TEST(CodegenTest, SymbolicSizeRunsAtTwoSizes) {
  SizeExpr s0{1, {0}};
  KernelBuilder kb("symbolic", {3, 1}, 1);
  kb.k.domain[1] = s0;
  int x = kb.symbolicTensor(DType::f32, {s0, SizeExpr::constant(1)});
  int o = kb.tensor(DType::f32, {1, 0}, true);
  int y = kb.symbolicTensor(DType::f32, {s0, SizeExpr::constant(1)}, true);
  int v = kb.load(x);
  kb.store(o, kb.reduce(OpKind::sum, v, DType::f32));
  kb.store(y, kb.op(OpKind::mul, {v, kb.constant(2, DType::f32)}, DType::f32));
  KernelFn f = compileOne(kb.k);
  for (int64_t n : {5, 77777}) {
    auto xs = randomFloats(3 * n, -1, 1, 15);
    std::vector<float> out(3), ys(3 * n);
    std::vector<int64_t> syms = {n};
    EXPECT_EQ(kb.k.outerSize(syms.data()), 3);
    run(f, {xs.data(), out.data(), ys.data()}, 0, 3, syms);
    for (int64_t i = 0; i < 3; ++i) {
      double want = 0;
      for (int64_t j = 0; j < n; ++j) want += xs[i * n + j];
      expectClose(out[i], want, 1e-5, 1e-5, "symbolic sum n=" + std::to_string(n));
    }
    for (int64_t i = 0; i < 3 * n; ++i) ASSERT_EQ(ys[i], xs[i] * 2) << i;
  }
}

// Splitting [0, outer) in two (mid-row for elementwise kernels) equals one call.
TEST(CodegenTest, SplitRangeEqualsOneCall) {
  const int64_t r = 7, c = 1001;
  KernelBuilder kb("split", {r, c}, 2);
  int x = kb.tensor(DType::f32, {c, 1}), b = kb.tensor(DType::f32, {1, 0});
  int o = kb.tensor(DType::f32, {c, 1}, true);
  kb.store(o, kb.op(OpKind::add, {kb.load(x), kb.load(b)}, DType::f32));
  KernelFn f = compileOne(kb.k);
  auto xs = randomFloats(r * c, -1, 1, 16), bs = randomFloats(r, -1, 1, 17);
  std::vector<float> whole(r * c), halves(r * c, -1);
  run(f, {xs.data(), bs.data(), whole.data()}, 0, r * c);
  const int64_t mid = r * c / 2 + 3;
  run(f, {xs.data(), bs.data(), halves.data()}, 0, mid);
  run(f, {xs.data(), bs.data(), halves.data()}, mid, r * c);
  EXPECT_EQ(whole, halves);
  for (int64_t i = 0; i < r * c; ++i) ASSERT_EQ(whole[i], xs[i] + bs[i / c]);
}

TEST(CodegenTest, ElementwiseAssemblyIsVectorized) {
  FeatureSetScope host("native"); // whatever RCJIT_CPU_FEATURES chose for the rest of the run
  const int64_t n = 1 << 16;
  KernelBuilder kb("vec", {n}, 1);
  int x = kb.tensor(DType::f32, {1}), y = kb.tensor(DType::f32, {1});
  int o = kb.tensor(DType::f32, {1}, true);
  int e = kb.op(OpKind::exp, {kb.load(x)}, DType::f32);
  kb.store(o, kb.op(OpKind::add, {e, kb.load(y)}, DType::f32));
  cpu::CpuCompileOptions opts;
  opts.wantAssembly = true;
  opts.wantLlvmIr = true;
  auto compiled = cpu::compileKernels({kb.k}, "test.vec", opts);
  EXPECT_NE(compiled.llvmIr.find("<8 x float>"), std::string::npos) << compiled.llvmIr;
  bool wide = compiled.assembly.find("%ymm") != std::string::npos ||
              compiled.assembly.find("%zmm") != std::string::npos;
  EXPECT_TRUE(wide) << compiled.assembly;
}

// The fast tier's pipeline (CpuCompileOptions::quick) runs the loop vectorizer on the kernels
// marked for it only, and both forms compute the same values (a reduction included).
TEST(CodegenTest, FastTierVectorizesOnlyTheMarkedKernels) {
  const int64_t rows = 16, n = 4096;
  KernelBuilder kb("quick", {rows, n}, 1);
  int x = kb.tensor(DType::f32, {n, 1}), y = kb.tensor(DType::f32, {0, 1});
  int o = kb.tensor(DType::f32, {n, 1}, true);
  int e = kb.op(OpKind::exp, {kb.load(x)}, DType::f32);
  int s = kb.reduce(OpKind::sum, e, DType::f32);
  kb.store(o, kb.op(OpKind::div, {kb.op(OpKind::add, {e, kb.load(y)}, DType::f32), s}, DType::f32));
  auto xs = randomFloats(rows * n, -3, 3, 21), ys = randomFloats(n, -1, 1, 22);
  std::vector<std::vector<float>> outs;
  for (bool vectorize : {false, true}) {
    SCOPED_TRACE(vectorize ? "vectorized" : "scalar");
    cpu::CpuCompileOptions opts;
    opts.quick = true;
    opts.quickVectorize = {vectorize};
    opts.wantLlvmIr = true;
    auto c = cpu::compileKernels({kb.k}, vectorize ? "test.quick.vec" : "test.quick", opts);
    EXPECT_EQ(c.llvmIr.find("x float>") != std::string::npos, vectorize) << c.llvmIr;
    std::vector<float> out(rows * n, -1);
    run(c.functions.at(0), {xs.data(), ys.data(), out.data()}, 0, rows);
    outs.push_back(out);
  }
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(xs[r * n + j]));
    for (int64_t j = 0; j < n; j += 97) {
      const double want = (std::exp(double(xs[r * n + j])) + ys[j]) / sum;
      for (const auto &out : outs) ASSERT_NEAR(out[r * n + j], want, 1e-5 * std::abs(want) + 1e-9);
    }
  }
}

// A feature set bounds the vector ISA of the code: no 256-bit registers for x86-64-v2, no
// 512-bit ones for avx2, 512-bit ones for avx512 (which prefers them).
TEST(CodegenTest, FeatureSetsBoundTheVectorIsa) {
  const std::vector<std::string> sets = featureSetsHere();
  for (const std::string &set : sets) {
    if (set == "native") continue;
    SCOPED_TRACE("CPU feature set " + set);
    FeatureSetScope scope(set);
    KernelBuilder kb("isa", {1 << 16}, 1);
    int x = kb.tensor(DType::f32, {1}), o = kb.tensor(DType::f32, {1}, true);
    kb.store(o, kb.op(OpKind::exp, {kb.load(x)}, DType::f32));
    cpu::CpuCompileOptions opts;
    opts.wantAssembly = true;
    const std::string a = cpu::compileKernels({kb.k}, "test.isa", opts).assembly;
    const bool ymm = a.find("%ymm") != std::string::npos;
    const bool zmm = a.find("%zmm") != std::string::npos;
    EXPECT_NE(a.find("%xmm"), std::string::npos) << a;
    EXPECT_EQ(ymm, set != "x86-64-v2") << a;
    EXPECT_EQ(zmm, set == "avx512") << a;
  }
}

TEST(CodegenTest, ConcurrentCompilesAndCalls) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &ok] {
      KernelBuilder kb("conc", {100}, 1); // same name in every module
      int x = kb.tensor(DType::f32, {1}), o = kb.tensor(DType::f32, {1}, true);
      kb.store(o, kb.op(OpKind::add, {kb.load(x), kb.constant(t, DType::f32)}, DType::f32));
      std::vector<float> xs(100, 1.f), out(100);
      cpu::CpuCompiledKernels c = cpu::compileKernels({kb.k}, "test.conc" + std::to_string(t));
      run(c.functions[0], {xs.data(), out.data()}, 0, 100);
      ok[t] = out[99] == 1.f + t;
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

void expectRejected(const LoopKernel &k, const std::string &fragment) {
  try {
    verifyKernel(k);
    ADD_FAILURE() << "accepted: " << printKernel(k);
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST(CodegenTest, VerifyRejectsMalformedKernels) {
  auto good = [] {
    KernelBuilder kb("good", {4, 8}, 1);
    int x = kb.tensor(DType::f32, {8, 1}), o = kb.tensor(DType::f32, {1, 0}, true);
    kb.store(o, kb.reduce(OpKind::sum, kb.load(x), DType::f32));
    return kb.k;
  };
  EXPECT_NO_THROW(verifyKernel(good()));
  LoopKernel k = good();
  k.tensors[0].strides.pop_back();
  expectRejected(k, "strides");
  k = good();
  k.stmts[1].args = {2};
  expectRejected(k, "not an earlier statement");
  k = good();
  k.stmts[2].tensor = 0;
  expectRejected(k, "stores to input");
  k = good();
  k.name = "bad name";
  expectRejected(k, "valid symbol");
  k = good();
  k.numOuter = 3;
  expectRejected(k, "numOuter");
  k = good();
  k.tensors[0].strides[1] = SizeExpr::constant(0); // the reduced value is outer-level
  expectRejected(k, "does not depend on an inner dim");
  k = good();
  k.stmts[1].op = OpKind::exp;
  expectRejected(k, "not a reduction");
  EXPECT_THROW(cpu::compileKernels({good(), good()}, "test.dup"), Error);
  EXPECT_NE(printKernel(good()).find("sum %0"), std::string::npos) << printKernel(good());
}

} // namespace
} // namespace rcjit
