// Shared pieces of the built-in model families: seeded weights, memory checks, inputs.
#include "models/ModelCommon.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include "models/Models.h"

namespace rcjit::tools {

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

namespace {

// Approximately standard normal: four 16-bit uniforms of one splitmix64 output (stream
// `seed`, counter i), summed and rescaled.
float unitNormal(uint64_t seed, uint64_t i) {
  uint64_t h = mix64(seed + i * 0xD1B54A32D192ED03ull);
  float sum = 0;
  for (int k = 0; k < 4; ++k) sum += (static_cast<float>((h >> (16 * k)) & 0xffff) + 0.5f);
  return (sum / 65536.0f - 2.0f) * 1.7320508f; // variance of the sum is 4/12
}

uint16_t toBf16Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  b += 0x7fffu + ((b >> 16) & 1u); // round to nearest even; values here are finite
  return static_cast<uint16_t>(b >> 16);
}

// Runs body(begin, end) over [0, n) on up to 8 threads.
template <class F> void parallelFor(int64_t n, F body) {
  int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  threads = std::min<int64_t>(threads, std::max<int64_t>(1, n / (1 << 16)));
  std::vector<std::thread> pool;
  int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    pool.emplace_back(body, std::min(n, t * chunk), std::min(n, (t + 1) * chunk));
  }
  body(0, std::min(n, chunk));
  for (std::thread &th : pool) th.join();
}

} // namespace

ParamInit::ParamInit(uint64_t seed, DType dtype) : seed_(seed), dtype_(dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error("model dtype must be f32 or bf16, got " + std::string(dtypeName(dtype)));
  }
}

Tensor ParamInit::normal(const Shape &shape, double stdev) {
  uint64_t seed = mix64(seed_ * 0x100000001B3ull + counter_++);
  Tensor t = Tensor::empty(shape, dtype_);
  float s = static_cast<float>(stdev);
  if (dtype_ == DType::f32) {
    float *p = t.data<float>();
    parallelFor(t.numel(), [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = unitNormal(seed, i) * s;
    });
  } else {
    uint16_t *p = static_cast<uint16_t *>(t.data_ptr());
    parallelFor(t.numel(), [=](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = toBf16Bits(unitNormal(seed, i) * s);
    });
  }
  return t;
}

namespace {
// Puts `value` in a registered parameter's slot as a leaf that requires grad (like the
// parameter it replaces).
void setParameter(Tensor &slot, const Tensor &value) {
  slot = value.detach();
  slot.requires_grad_();
}
} // namespace

void ParamInit::linear(nn::Linear &l, int64_t in, int64_t out, double stdev) {
  setParameter(l.weight, normal({out, in}, stdev));
  if (l.bias.defined()) setParameter(l.bias, zeros({out}));
}

void ParamInit::embedding(nn::Embedding &e, int64_t num, int64_t dim, double stdev) {
  setParameter(e.weight, normal({num, dim}, stdev));
}

void ParamInit::norm(nn::RMSNorm &n) const { n.to(dtype_); }

void ParamInit::norm(nn::LayerNorm &n) const { n.to(dtype_); }

int64_t availableMemoryBytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  return std::numeric_limits<int64_t>::max();
}

std::string formatBytes(int64_t bytes) {
  char buf[32];
  double b = static_cast<double>(bytes);
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f MB", b / 1e6);
  }
  return buf;
}

void checkMemory(const std::string &model, int64_t parameters, const ModelConfig &c) {
  int64_t need = parameters * static_cast<int64_t>(dtypeSize(c.dtype));
  int64_t avail = c.memoryLimit >= 0 ? c.memoryLimit : availableMemoryBytes();
  if (need <= avail) return;
  throw Error("model '" + model + "' does not fit in memory: its " + std::to_string(parameters) +
              " parameters in " + std::string(dtypeName(c.dtype)) + " need " +
              std::to_string(need) + " bytes (" + formatBytes(need) + ") but only " +
              std::to_string(avail) + " bytes (" + formatBytes(avail) +
              ") are available; try bf16, fewer layers, or a smaller model");
}

Tensor randomTokens(int64_t batch, int64_t seq, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> ids(static_cast<size_t>(batch * seq));
  uint64_t s = mix64(seed ^ 0x746F6B656E73ull);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(mix64(s + i) % static_cast<uint64_t>(vocab));
  }
  return Tensor::from_vector(ids, {batch, seq});
}

Tensor splitHeads(const Tensor &x, int64_t heads) {
  return transpose(reshape(x, {x.size(0), x.size(1), heads, -1}), 1, 2);
}

Tensor mergeHeads(const Tensor &x) {
  return reshape(transpose(x, 1, 2), {x.size(0), x.size(2), -1});
}

std::pair<Tensor, Tensor> ropeTables(const std::vector<double> &invFreq, int64_t seq, DType dtype) {
  int64_t half = static_cast<int64_t>(invFreq.size());
  std::vector<float> cosv(static_cast<size_t>(seq * 2 * half));
  std::vector<float> sinv(cosv.size());
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t j = 0; j < 2 * half; ++j) {
      double angle = static_cast<double>(p) * invFreq[static_cast<size_t>(j % half)];
      cosv[static_cast<size_t>(p * 2 * half + j)] = static_cast<float>(std::cos(angle));
      sinv[static_cast<size_t>(p * 2 * half + j)] = static_cast<float>(std::sin(angle));
    }
  }
  return {Tensor::from_vector(cosv, {seq, 2 * half}).to(dtype),
          Tensor::from_vector(sinv, {seq, 2 * half}).to(dtype)};
}

} // namespace rcjit::tools
