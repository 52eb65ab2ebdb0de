// The mpi tests' synthetic global batches: arithmetic progressions modulo the vocabulary,
// with each next token as the target (a stream a small gpt2 learns).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include <rcjit/rcjit.h>

namespace rcjit::test {

/// Step `step`'s global batch of `batch` rows of `seq` tokens: (ids, next tokens).
inline std::pair<Tensor, Tensor> progressionBatch(int step, int64_t batch, int64_t seq,
                                                  int64_t vocab) {
  std::vector<int64_t> ids, next;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t start = (step * 31 + r * 17) % vocab, stride = 1 + (r + step) % 5;
    for (int64_t s = 0; s < seq; ++s) {
      ids.push_back((start + s * stride) % vocab);
      next.push_back((start + (s + 1) * stride) % vocab);
    }
  }
  return {Tensor::from_vector(ids, {batch, seq}), Tensor::from_vector(next, {batch, seq})};
}

/// The workload the data-parallel and ZeRO tests train: 20 steps of global batches of 8
/// rows of 16 tokens from a vocabulary of 256, the same on every rank.
constexpr int64_t kMpiGlobalBatch = 8, kMpiSeq = 16, kMpiVocab = 256;
constexpr int kMpiSteps = 20;
inline std::pair<Tensor, Tensor> mpiGlobalBatch(int step) {
  return progressionBatch(step, kMpiGlobalBatch, kMpiSeq, kMpiVocab);
}

} // namespace rcjit::test
