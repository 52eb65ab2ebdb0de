// rcjit::dist's collectives against references computed locally: every rank builds every
// rank's input from a seed, so each knows the expected result. Run by ctest under mpirun
// with 2 and 4 ranks, and alone (a world of 1).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <rcjit/rcjit.h>

#include "tests/TestUtil.h"

namespace rcjit {
namespace {

using dist::ReduceOp;
using test::errorOf;

int world() { return dist::world_size(); }
int me() { return dist::rank(); }

// Rank r's input for test `seed`: values in about [-24, 24] (whole numbers for integer
// dtypes), the same on every rank that builds it.
Tensor inputOf(int r, const Shape &shape, DType dt, uint64_t seed) {
  return (Tensor::randn(shape, seed * 1000 + static_cast<uint64_t>(r), DType::f64) * 8.0).to(dt);
}

// The reference of a reduction over every rank's input, in f64.
Tensor reduced(const Shape &shape, DType dt, uint64_t seed, ReduceOp op) {
  Tensor acc = inputOf(0, shape, dt, seed).to(DType::f64);
  for (int r = 1; r < world(); ++r) {
    Tensor x = inputOf(r, shape, dt, seed).to(DType::f64);
    acc = op == ReduceOp::max ? maximum(acc, x) : acc + x;
  }
  return op == ReduceOp::mean ? acc * (1.0 / world()) : acc;
}

void expectEqualValues(const Tensor &got, const Tensor &want, DType dt) {
  ASSERT_EQ(got.shape(), want.shape());
  // f32 sums in another order than the f64 reference: a few ulps
  const double tol = dt == DType::f32 ? 1e-5 : dt == DType::bf16 ? 1e-2 : 1e-12;
  EXPECT_TRUE(allclose(got.to(DType::f64), want.to(DType::f64), tol, tol))
      << "got " << got.to(DType::f64).to_vector<double>()[0] << ", want "
      << want.to(DType::f64).to_vector<double>()[0];
}

TEST(DistWorld, RankAndSizeFromTheLauncher) {
  const char *size = std::getenv("OMPI_COMM_WORLD_SIZE");
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(world(), size ? std::atoi(size) : 1);
  EXPECT_EQ(me(), rank ? std::atoi(rank) : 0);
  dist::init(); // idempotent
  EXPECT_GE(me(), 0);
  EXPECT_LT(me(), world());
}

TEST(DistCollectives, AllReduceEveryOpAndDtype) {
  uint64_t seed = 1;
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::mean, ReduceOp::max}) {
      if (op == ReduceOp::mean && !isFloating(dt)) continue;
      ++seed;
      Tensor t = inputOf(me(), {3, 5}, dt, seed);
      dist::all_reduce(t, op);
      EXPECT_EQ(t.dtype(), dt);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " op " + std::to_string(static_cast<int>(op)));
      expectEqualValues(t, reduced({3, 5}, dt, seed, op), dt);
    }
  }
  Tensor scalar = Tensor::full({}, me() + 1.0, DType::f64); // 0-dim: the loss in training
  dist::all_reduce(scalar, ReduceOp::mean);
  EXPECT_DOUBLE_EQ(scalar.item(), (world() + 1) / 2.0);
  Tensor empty = Tensor::zeros({0, 3});
  dist::all_reduce(empty);
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
}

// A strided view is reduced in place: the view's elements of the base change, the others not.
TEST(DistCollectives, AllReduceNonContiguousWritesThroughTheView) {
  Tensor base = inputOf(me(), {4, 6}, DType::f32, 40);
  Tensor mine = base.clone();
  Tensor view = slice(transpose(base, 0, 1), 0, 1, 4); // [3, 4], strides (1, 6)
  ASSERT_FALSE(view.is_contiguous());
  dist::all_reduce(view);
  Tensor want = slice(transpose(reduced({4, 6}, DType::f32, 40, ReduceOp::sum), 0, 1), 0, 1, 4);
  expectEqualValues(view, want, DType::f32);
  expectEqualValues(slice(base, 1, 1, 4), transpose(want, 0, 1), DType::f32);
  EXPECT_TRUE(allclose(slice(base, 1, 0, 1), slice(mine, 1, 0, 1), 0, 0)) << "column 0 changed";
  EXPECT_TRUE(allclose(slice(base, 1, 4, 6), slice(mine, 1, 4, 6), 0, 0)) << "columns 4-5";
}

TEST(DistCollectives, AllGatherAlongEveryDim) {
  const Shape shape = {2, 3, 4};
  uint64_t seed = 50;
  for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
    for (int64_t dim : {0, 1, 2, -1}) {
      ++seed;
      std::vector<Tensor> all;
      for (int r = 0; r < world(); ++r) all.push_back(inputOf(r, shape, dt, seed));
      Tensor got = dist::all_gather(inputOf(me(), shape, dt, seed), dim);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " dim " + std::to_string(dim));
      EXPECT_EQ(got.dtype(), dt);
      expectEqualValues(got, cat(all, dim), dt);
    }
  }
  // a non-contiguous input: gathered as its values, not its storage
  std::vector<Tensor> all;
  for (int r = 0; r < world(); ++r)
    all.push_back(transpose(inputOf(r, shape, DType::f32, 60), 0, 2));
  Tensor got = dist::all_gather(transpose(inputOf(me(), shape, DType::f32, 60), 0, 2), 1);
  expectEqualValues(got, cat(all, 1), DType::f32);
}

TEST(DistCollectives, ReduceScatterAlongEveryDim) {
  const int64_t w = world();
  uint64_t seed = 70;
  for (DType dt : {DType::f32, DType::f64, DType::i32, DType::i64}) {
    for (int64_t dim : {0, 1, 2, -2}) {
      ++seed;
      Shape shape = {2, 3, 4};
      const int64_t d = dim < 0 ? dim + 3 : dim;
      shape[static_cast<size_t>(d)] *= w;
      const int64_t n = shape[static_cast<size_t>(d)] / w;
      Tensor got = dist::reduce_scatter(inputOf(me(), shape, dt, seed), dim);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " dim " + std::to_string(dim));
      EXPECT_EQ(got.dtype(), dt);
      Tensor want = slice(reduced(shape, dt, seed, ReduceOp::sum), d, me() * n, (me() + 1) * n);
      expectEqualValues(got, want, dt);
    }
  }
  Tensor x = transpose(inputOf(me(), {3, 2 * w}, DType::f32, 80), 0, 1); // [2w, 3], strided
  Tensor want = slice(transpose(reduced({3, 2 * w}, DType::f32, 80, ReduceOp::sum), 0, 1), 0,
                      me() * 2, me() * 2 + 2);
  expectEqualValues(dist::reduce_scatter(x, 0), want, DType::f32);
}

TEST(DistCollectives, BroadcastFromEveryRoot) {
  for (int root : {0, world() - 1}) {
    for (DType dt : {DType::f32, DType::i64, DType::bf16}) {
      Tensor t = inputOf(me(), {5, 3}, dt, 90 + static_cast<uint64_t>(root));
      dist::broadcast(t, root);
      SCOPED_TRACE(std::string(dtypeName(dt)) + " root " + std::to_string(root));
      expectEqualValues(t, inputOf(root, {5, 3}, dt, 90 + static_cast<uint64_t>(root)), dt);
    }
  }
  Tensor base = inputOf(me(), {3, 4}, DType::f64, 99);
  Tensor view = transpose(base, 0, 1);
  dist::broadcast(view, 0);
  expectEqualValues(base, inputOf(0, {3, 4}, DType::f64, 99), DType::f64);
}

// The non-blocking forms: started together, waited for after other work, in another order.
TEST(DistCollectives, NonBlockingFormsOverlapLocalWork) {
  const int64_t w = world();
  Tensor a = inputOf(me(), {64, 32}, DType::f32, 101);
  Tensor b = inputOf(me(), {4, 5}, DType::i64, 102);
  Tensor c = inputOf(me(), {2 * w, 7}, DType::f64, 103);
  Tensor d = inputOf(me(), {6}, DType::f32, 104);
  dist::Work wa = dist::all_reduce_async(a, ReduceOp::mean);
  dist::Work wb = dist::all_gather_async(b, 1);
  dist::Work wc = dist::reduce_scatter_async(c);
  dist::Work wd = dist::broadcast_async(d, static_cast<int>(w - 1));
  Tensor local = matmul(Tensor::randn({128, 128}, 7), Tensor::randn({128, 128}, 8)); // overlap
  EXPECT_EQ(local.shape(), (Shape{128, 128}));
  expectEqualValues(wd.wait(), inputOf(static_cast<int>(w - 1), {6}, DType::f32, 104), DType::f32);
  Tensor scattered = wc.wait();
  expectEqualValues(
      scattered,
      slice(reduced({2 * w, 7}, DType::f64, 103, ReduceOp::sum), 0, me() * 2, me() * 2 + 2),
      DType::f64);
  std::vector<Tensor> all;
  for (int r = 0; r < w; ++r) all.push_back(inputOf(r, {4, 5}, DType::i64, 102));
  expectEqualValues(wb.wait(), cat(all, 1), DType::i64);
  Tensor reducedA = wa.wait();
  EXPECT_TRUE(reducedA.sharesStorage(a)) << "all_reduce_async's result is the tensor itself";
  expectEqualValues(a, reduced({64, 32}, DType::f32, 101, ReduceOp::mean), DType::f32);
  EXPECT_TRUE(wa.test());
  expectEqualValues(wa.wait(), a, DType::f32); // a second wait returns the same result
  EXPECT_GE(wa.waitSeconds(), 0);
  EXPECT_FALSE(dist::Work().wait().defined()); // an empty Work is done
  // dropping a pending Work waits for it
  Tensor e = inputOf(me(), {3}, DType::f64, 105);
  { dist::Work dropped = dist::all_reduce_async(e); }
  expectEqualValues(e, reduced({3}, DType::f64, 105, ReduceOp::sum), DType::f64);
}

TEST(DistCollectives, Barrier) {
  for (int i = 0; i < 3; ++i) dist::barrier();
}

// Errors every rank sees alike (they depend only on what every rank passes).
TEST(DistErrors, BadArgumentsAreErrorsOnEveryRank) {
  Tensor ints = Tensor::zeros({4}, DType::i64);
  std::string msg = errorOf([&] { dist::all_reduce(ints, ReduceOp::mean); });
  EXPECT_NE(msg.find("dist::all_reduce (rank " + std::to_string(me()) + " of " +
                     std::to_string(world()) + ", i64 [4])"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("the mean of i64 (mean takes f32 and f64; use sum)"), std::string::npos)
      << msg;
  Tensor half = Tensor::zeros({4}, DType::f16);
  msg = errorOf([&] { dist::all_reduce(half); });
  EXPECT_NE(msg.find("f16 cannot be reduced (all_reduce takes f32, f64, i32, i64"),
            std::string::npos)
      << msg;
  Tensor x = Tensor::zeros({2, 3});
  msg = errorOf([&] { dist::broadcast(x, world()); });
  EXPECT_NE(msg.find("root " + std::to_string(world()) + " is not a rank"), std::string::npos)
      << msg;
  msg = errorOf([&] { dist::all_gather(x, 2); });
  EXPECT_NE(msg.find("dim 2 is out of range for f32 [2, 3]"), std::string::npos) << msg;
  Tensor undefined;
  msg = errorOf([&] { dist::all_reduce(undefined); });
  EXPECT_NE(msg.find("its tensor is undefined"), std::string::npos) << msg;
  if (world() > 1) {
    Tensor odd = Tensor::zeros({2 * world() + 1, 3});
    msg = errorOf([&] { dist::reduce_scatter(odd); });
    EXPECT_NE(msg.find("dim 0 has size " + std::to_string(2 * world() + 1) + ", which " +
                       std::to_string(world()) + " ranks cannot split evenly"),
              std::string::npos)
        << msg;
  }
  // a non-blocking collective inside a compiled function: not an op of the IR
  // (compiled_collectives_test.cpp runs the blocking ones compiled)
  auto f = compile([](const Tensor &t) {
    Tensor y = t * 2.0;
    return dist::all_gather_async(y).wait();
  });
  msg = errorOf([&] { f(Tensor::ones({4})); });
  EXPECT_NE(msg.find("inside a traced or compiled function"), std::string::npos) << msg;
  dist::barrier(); // nothing is left half-done
  Tensor ok = Tensor::ones({2});
  dist::all_reduce(ok);
  EXPECT_DOUBLE_EQ(ok.to_vector<double>()[0], world());
}

// Ranks that disagree: an rcjit::Error on every rank naming who passed what, never a hang.
TEST(DistErrors, MismatchesAcrossRanksAreErrorsOnEveryRank) {
  if (world() == 1) GTEST_SKIP() << "needs 2 ranks or more (ctest runs it under mpirun)";
  const std::string last = std::to_string(world() - 1);
  Tensor t = Tensor::zeros({4, 5 + (me() == 1 ? 1 : 0)});
  std::string msg = errorOf([&] { dist::all_reduce(t); });
  EXPECT_NE(msg.find("dist::all_reduce (rank " + std::to_string(me())), std::string::npos) << msg;
  EXPECT_NE(msg.find("the ranks' tensors disagree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 1: f32 [4, 6]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(world() == 2 ? "rank 0: f32 [4, 5]" : "ranks 0, 2"), std::string::npos) << msg;

  Tensor typed = Tensor::zeros({3}, me() == world() - 1 ? DType::bf16 : DType::f32);
  msg = errorOf([&] { dist::all_reduce(typed); });
  EXPECT_NE(msg.find("rank " + last + ": bf16 cannot be reduced"), std::string::npos) << msg;

  Tensor u = Tensor::zeros({4});
  msg = errorOf([&] {
    if (me() == 0) {
      dist::all_reduce(u);
    } else {
      dist::broadcast(u);
    }
  });
  EXPECT_NE(msg.find("the ranks called different collectives: rank 0: all_reduce of f32 [4]"),
            std::string::npos)
      << msg;
  msg = errorOf([&] { dist::broadcast(u, me()); });
  EXPECT_NE(msg.find("the ranks passed different roots: rank 0: root 0; rank 1: root 1"),
            std::string::npos)
      << msg;
  Tensor g = Tensor::zeros({2, 2});
  msg = errorOf([&] { dist::all_gather(g, me() == 0 ? 0 : 1); });
  EXPECT_NE(msg.find("the ranks passed different dims"), std::string::npos) << msg;
  msg = errorOf([&] {
    if (me() == 0) {
      dist::barrier();
    } else {
      dist::all_reduce(u);
    }
  });
  EXPECT_NE(msg.find("rank 0: barrier of no tensor"), std::string::npos) << msg;
  dist::barrier(); // the job goes on after the errors
  Tensor ok = Tensor::ones({2});
  dist::all_reduce(ok);
  EXPECT_DOUBLE_EQ(ok.to_vector<double>()[1], world());
}

} // namespace
} // namespace rcjit
