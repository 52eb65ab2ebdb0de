// Variable-length captioning: a small decoder serves a stream of requests, mostly short
// (8-32 tokens) with a few long ones (up to 200), under three strategies, each with its own
// compiled function:
//   pad-to-max   every request padded to the context (256): one compile, wasted work
//   mark_dynamic the sequence dim marked dynamic in [2, 256], no padding: one symbolic entry
//                serves every length; where rcjit keeps the dim static, each new length is
//                a new entry (past recompile_limit the calls run eagerly: fallbacks)
//   buckets      padded to 32/64/128/256 with Dynamic::never: one compile per bucket used
// Each strategy runs the stream twice: pass 1 includes compiling (cold: the disk cache is off
// and the memory cache is cleared before each strategy), pass 2 is warm. Every request's rows
// for its real tokens must match an eager run of the unpadded request (causal attention:
// padding after a request does not change its rows); a mismatch exits 1.
//
//   example_captioning [--requests N] [--seed S]
#include "caption_decoder.h"

#include <rcjit/rcjit.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

using namespace rcjit;

namespace {

uint64_t splitmix(uint64_t &s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Token ids of each request: about one in eight is long (33-200 tokens), the rest 8-32.
std::vector<std::vector<int64_t>> makeRequests(int n, uint64_t seed) {
  std::vector<std::vector<int64_t>> out;
  for (int i = 0; i < n; ++i) {
    bool isLong = splitmix(seed) % 8 == 0;
    int64_t len = isLong ? 33 + static_cast<int64_t>(splitmix(seed) % 168)
                         : 8 + static_cast<int64_t>(splitmix(seed) % 25);
    std::vector<int64_t> ids(static_cast<size_t>(len));
    for (int64_t &t : ids) t = 1 + static_cast<int64_t>(splitmix(seed) % (caption::kVocab - 1));
    out.push_back(std::move(ids));
  }
  return out;
}

// The request as ids [1, padded] (pad token 0 after the real tokens).
Tensor padded(const std::vector<int64_t> &ids, int64_t to) {
  std::vector<int64_t> v = ids;
  v.resize(static_cast<size_t>(to), 0);
  return Tensor::from_vector(v, {1, to});
}

int64_t bucketOf(int64_t len) {
  for (int64_t b : {32, 64, 128, 256}) {
    if (len <= b) return b;
  }
  return caption::kContext;
}

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Stream {
  std::vector<std::vector<int64_t>> requests;
  std::vector<Tensor> reference; // eager logits of each unpadded request
  int64_t realTokens = 0;
};

enum class Strategy { padMax, markDynamic, buckets };

const char *nameOf(Strategy s) {
  switch (s) {
  case Strategy::padMax:
    return "pad-to-max";
  case Strategy::markDynamic:
    return "mark_dynamic";
  case Strategy::buckets:
    return "buckets";
  }
  return "?";
}

// Runs the stream twice through a fresh compiled function; prints one row; returns the
// number of requests whose real rows differ from the eager reference.
int run(caption::Decoder &model, const Stream &stream, Strategy strategy) {
  cache::clear(); // no compiled code shared with the strategy before
  CompileOptions opts;
  if (strategy != Strategy::markDynamic) opts.dynamic = Dynamic::never;
  auto fast = compile(model, opts);
  int64_t computed = 0; // tokens the model ran on, padding included (pass 1)
  int mismatches = 0;
  double seconds[2] = {0, 0};
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<Tensor> outputs;
    auto t0 = std::chrono::steady_clock::now();
    for (const std::vector<int64_t> &ids : stream.requests) {
      int64_t len = static_cast<int64_t>(ids.size());
      Tensor in;
      switch (strategy) {
      case Strategy::padMax:
        in = padded(ids, caption::kContext);
        break;
      case Strategy::buckets:
        in = padded(ids, bucketOf(len));
        break;
      case Strategy::markDynamic:
        in = padded(ids, len);
        mark_dynamic(in, 1, 2, caption::kContext);
        break;
      }
      if (pass == 0) computed += in.size(1);
      outputs.push_back(fast(in));
    }
    seconds[pass] = secondsSince(t0);
    for (size_t i = 0; i < outputs.size(); ++i) {
      int64_t len = static_cast<int64_t>(stream.requests[i].size());
      Tensor real = slice(outputs[i], 1, 0, len);
      if (!allclose(real, stream.reference[i], 1e-4, 1e-5)) {
        std::fprintf(stderr, "%s pass %d: request %zu (%lld tokens) differs from eager\n",
                     nameOf(strategy), pass + 1, i, static_cast<long long>(len));
        ++mismatches;
      }
    }
  }
  CompileStats s = fast.stats();
  double tokens = static_cast<double>(stream.realTokens);
  std::printf("%-13s %8d %10d %9d %9.2f %9.1f %11.0f %9.1f %11.0f %8.2fx %8s\n", nameOf(strategy),
              s.compiles, s.recompiles, s.fallbacks, s.compile_seconds, 1e3 * seconds[0],
              tokens / seconds[0], 1e3 * seconds[1], tokens / seconds[1],
              static_cast<double>(computed) / tokens, mismatches == 0 ? "yes" : "NO");
  return mismatches;
}

int usage(const char *argv0) {
  std::fprintf(stderr, "usage: %s [--requests N] [--seed S]\n", argv0);
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  rcjit::NoGradGuard noGrad; // inference: parameters require grad, record nothing
  int requests = 24;
  uint64_t seed = 20;
  for (int i = 1; i < argc; ++i) {
    bool hasValue = i + 1 < argc;
    if (std::strcmp(argv[i], "--requests") == 0 && hasValue) {
      requests = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--seed") == 0 && hasValue) {
      seed = std::strtoull(argv[++i], nullptr, 10);
    } else {
      return usage(argv[0]);
    }
  }
  if (requests < 1) return usage(argv[0]);

  try {
    cache::set_dir("off"); // every run compiles cold: compile counts and seconds comparable
    caption::Decoder model;
    Stream stream;
    stream.requests = makeRequests(requests, seed);
    std::set<size_t> lengths;
    size_t longest = 0;
    for (const auto &ids : stream.requests) {
      stream.realTokens += static_cast<int64_t>(ids.size());
      lengths.insert(ids.size());
      longest = std::max(longest, ids.size());
    }
    double eager[2] = {0, 0}; // pass 1 keeps each result as the reference
    for (int pass = 0; pass < 2; ++pass) {
      auto t0 = std::chrono::steady_clock::now();
      for (const auto &ids : stream.requests) {
        Tensor y = model(padded(ids, static_cast<int64_t>(ids.size())));
        if (pass == 0) stream.reference.push_back(y);
      }
      eager[pass] = secondsSince(t0);
    }
    double tokens = static_cast<double>(stream.realTokens);
    std::printf("%d requests, %lld real tokens, %zu distinct lengths, longest %zu\n", requests,
                static_cast<long long>(stream.realTokens), lengths.size(), longest);
    std::printf("%-13s %8s %10s %9s %9s %9s %11s %9s %11s %9s %8s\n", "strategy", "compiles",
                "recompiles", "fallbacks", "compile s", "pass1 ms", "pass1 tok/s", "pass2 ms",
                "pass2 tok/s", "computed", "matches");
    std::printf("%-13s %8s %10s %9s %9s %9.1f %11.0f %9.1f %11.0f %8.2fx %8s\n", "eager", "-", "-",
                "-", "-", 1e3 * eager[0], tokens / eager[0], 1e3 * eager[1], tokens / eager[1], 1.0,
                "-");
    int mismatches = 0;
    for (Strategy s : {Strategy::padMax, Strategy::markDynamic, Strategy::buckets}) {
      mismatches += run(model, stream, s);
    }
    std::printf("(computed = tokens run, padding included, per real token; tok/s counts real "
                "tokens)\n");
    return mismatches == 0 ? 0 : 1;
  } catch (const Error &e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
