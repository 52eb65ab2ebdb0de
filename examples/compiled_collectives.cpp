// Collectives inside a compiled function: an all_reduce started before independent compute
// (the compiled program waits for it only where its result is read) against the same
// function with the all_reduce placed after the compute. Prints both times and the ratio.
// Alone it is a world of 1; under mpirun every rank runs it:
//   mpirun -np 2 build/examples/example_compiled_collectives [elements] [reps]
#include <rcjit/rcjit.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace rcjit;

namespace {

// A chain of matmuls that does not read the reduced tensor.
Tensor compute(const Tensor &a, const Tensor &w) {
  Tensor h = a;
  for (int i = 0; i < 6; ++i) h = tanh(matmul(h, w));
  return sum(h);
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

} // namespace

int main(int argc, char **argv) {
  const int64_t elements = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 16;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  dist::init();
  auto early = compile([](const Tensor &g0, const Tensor &a, const Tensor &w) {
    Tensor g = g0;
    dist::all_reduce(g, dist::ReduceOp::mean); // started first, waited for at the add
    Tensor c = compute(a, w);
    return g + c;
  });
  auto late = compile([](const Tensor &g0, const Tensor &a, const Tensor &w) {
    Tensor c = compute(a, w);
    Tensor g = g0;
    dist::all_reduce(g, dist::ReduceOp::mean); // started after the compute
    return g + c;
  });
  Tensor g = Tensor::randn({elements}, 1 + static_cast<uint64_t>(dist::rank()));
  Tensor a = Tensor::randn({256, 256}, 2) * 0.05;
  Tensor w = Tensor::randn({256, 256}, 3) * 0.05;
  Tensor x = early(g, a, w), y = late(g, a, w); // trace and compile both
  std::vector<double> te, tl;
  for (int i = 0; i < reps; ++i) { // interleaved: both see the same machine load
    auto t0 = std::chrono::steady_clock::now();
    x = early(g, a, w);
    auto t1 = std::chrono::steady_clock::now();
    y = late(g, a, w);
    auto t2 = std::chrono::steady_clock::now();
    te.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    tl.push_back(std::chrono::duration<double, std::milli>(t2 - t1).count());
  }
  const bool same = allclose(x, y, 1e-5, 1e-6);
  if (dist::rank() == 0) {
    std::printf("ranks=%d elements=%lld reps=%d: all_reduce before compute %.2f ms, after "
                "compute %.2f ms (median), ratio %.3f, same result: %s\n",
                dist::world_size(), static_cast<long long>(elements), reps, medianOf(te),
                medianOf(tl), medianOf(te) / medianOf(tl), same ? "yes" : "no");
  }
  return same ? 0 : 1;
}
