// rcjit_mpi_fault: a job in which one rank fails, for tests/mpi_fault/run_fault.sh. Every
// rank prints the rcjit::Error it gets ("rank R: error: ...") and exits 1; the script checks
// that the whole job ends, with the errors expected, instead of hanging.
//   die       rank 1 exits (status 3) while rank 0 is in an all_reduce
//   killed    rank 1 is killed (SIGKILL, as the OOM killer does) during ZeRO-3 training
//   stuck     rank 1 stops calling collectives (sleeps) during ZeRO-3 training of a gpt2;
//             rank 0's next collective times out (run with RCJIT_DIST_TIMEOUT set)
//   mismatch  the ranks all_reduce tensors of different shapes
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <rcjit/rcjit.h>

#include "models/ModelGpt2.h"

namespace {

using namespace rcjit;

// ZeRO-3 AdamW steps of the 2-layer gpt2 on each rank's 2 rows; at step 2 rank 1 stops
// calling collectives (sleeps) or is killed.
void zeroTraining(bool killed) {
  const int stopAt = 2;
  tools::ModelConfig c;
  c.batch = 2;
  c.seq = 8;
  std::unique_ptr<tools::Model> m = tools::buildGpt2(tools::Gpt2Config{}, c);
  dist::ZeroOptimizer zero(m->module(), optim::AdamWOptions{}, {.stage = 3});
  for (int step = 0; step < 5; ++step) {
    if (dist::rank() == 1 && step == stopAt && killed) std::raise(SIGKILL);
    if (dist::rank() == 1 && step == stopAt) {
      std::printf("rank 1: stops calling collectives at step %d\n", step);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::seconds(600));
    }
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i < 16; ++i) tokens.push_back((i * 7 + step * 3 + dist::rank()) % 256);
    Tensor ids = Tensor::from_vector(tokens, {2, 8});
    zero.zero_grad();
    Tensor l = cross_entropy(m->forward({ids}), ids);
    l.backward();
    zero.step();
    std::printf("rank %d: step %d loss %.4f\n", dist::rank(), step, l.item());
    std::fflush(stdout);
  }
}

int faultMain(const std::string &mode) {
  dist::init();
  const int rank = dist::rank();
  try {
    if (mode == "die") {
      dist::barrier();
      if (rank == 1) std::_Exit(3);
      Tensor t = Tensor::ones({1000});
      dist::all_reduce(t);
    } else if (mode == "stuck") {
      zeroTraining(false);
    } else if (mode == "killed") {
      zeroTraining(true);
    } else if (mode == "mismatch") {
      Tensor t = Tensor::ones({4 + rank});
      dist::all_reduce(t);
    } else {
      std::fprintf(stderr, "usage: rcjit_mpi_fault die|killed|stuck|mismatch\n");
      return 2;
    }
  } catch (const Error &e) {
    std::printf("rank %d: error: %s\n", rank, e.what());
    std::fflush(stdout);
    return 1;
  }
  std::printf("rank %d: no error\n", rank);
  return 0;
}

} // namespace

int main(int argc, char **argv) { return faultMain(argc > 1 ? argv[1] : ""); }
