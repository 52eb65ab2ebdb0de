// The rcjit_mpi_tests main: every rank runs every test; rank 0 prints GoogleTest's usual
// output, the other ranks print only their failures, prefixed with their rank.
#include <cstdio>

#include <gtest/gtest.h>

#include <rcjit/Dist.h>

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult &r) override {
    if (!r.failed()) return;
    std::printf("[rank %d] %s:%d: failure\n%s\n", rank_, r.file_name() ? r.file_name() : "?",
                r.line_number(), r.summary());
    std::fflush(stdout);
  }
  void OnTestEnd(const testing::TestInfo &t) override {
    if (!t.result()->Passed()) {
      std::printf("[rank %d] FAILED %s.%s\n", rank_, t.test_suite_name(), t.name());
      std::fflush(stdout);
    }
  }

private:
  int rank_;
};

} // namespace

int main(int argc, char **argv) {
  testing::InitGoogleTest(&argc, argv);
  rcjit::dist::init(); // mpirun's ranks, or a world of 1
  const int rank = rcjit::dist::rank();
  if (rank != 0) {
    testing::TestEventListeners &listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  return RUN_ALL_TESTS();
}
