// The captioning training workflow: batches of synthetic images and variable-length
// captions, padded per strategy, trained with AdamW through rcjit::compile.
#include "tools/CaptionTraining.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include <rcjit/rcjit.h>

#include "models/ModelCommon.h"
#include "models/ModelVitGpt2.h"
#include "tools/Cli.h"

namespace rcjit::tools {

namespace {

constexpr int64_t kContext = 256; // the decoder's positions: the longest caption
constexpr int64_t kVocab = 512;
constexpr int64_t kAlign = 8;   // pad-to-longest rounds up to a multiple of this
constexpr int64_t kBucket = 32; // buckets: multiples of this

// The guide's model at CPU sizes: ViT on 32x32 images (16 patches of 8x8) and a GPT-2
// decoder with cross-attention, hidden 64, 2 layers each.
VitGpt2Config captionModelConfig() {
  VitGpt2Config c;
  c.name = "vit-gpt2";
  c.encoder.image = 32;
  c.encoder.patch = 8;
  c.encoder.hidden = 64;
  c.encoder.layers = 2;
  c.encoder.heads = 4;
  c.encoder.intermediate = 256;
  c.decoder.hidden = 64;
  c.decoder.layers = 2;
  c.decoder.heads = 4;
  c.decoder.vocab = kVocab;
  c.decoder.context = kContext;
  c.decoder.crossAttention = true;
  return c;
}

// One step's data: images and, per caption, the tokens it predicts (ids = tokens[0..L-1],
// labels = tokens[1..L]).
struct CaptionBatch {
  Tensor pixels;
  std::vector<std::vector<int64_t>> captions; // L + 1 tokens each
  int64_t longest = 0;                        // the largest L
};

// Caption lengths as the guide draws them: 90 % 5-32 tokens, 9 % 33-64, 1 % 65-256.
int64_t captionLength(uint64_t r) {
  const uint64_t u = r % 1000, v = mix64(r) % 1000;
  if (u < 900) return 5 + static_cast<int64_t>(v % 28);
  if (u < 990) return 33 + static_cast<int64_t>(v % 32);
  return 65 + static_cast<int64_t>(v % 192);
}

// Learnable captions: arithmetic progressions (a start and a stride per caption).
CaptionBatch captionBatchAt(const CaptionSettings &s, int step) {
  CaptionBatch b;
  const uint64_t base = mix64(s.seed * 1000003 + static_cast<uint64_t>(step));
  b.pixels = Tensor::randn({s.batch, 3, 32, 32}, base);
  for (int64_t i = 0; i < s.batch; ++i) {
    const uint64_t r = mix64(base + 17 * static_cast<uint64_t>(i) + 1);
    const int64_t len = captionLength(r);
    const int64_t start = static_cast<int64_t>(mix64(r + 1) % (kVocab - 1));
    const int64_t stride = 1 + static_cast<int64_t>(mix64(r + 2) % 7);
    std::vector<int64_t> t;
    for (int64_t k = 0; k <= len; ++k) t.push_back(1 + (start + k * stride) % (kVocab - 1));
    b.longest = std::max(b.longest, len);
    b.captions.push_back(std::move(t));
  }
  return b;
}

int64_t roundUpTo(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

// The padded length a strategy trains this batch at.
int64_t captionPaddedLength(const std::string &strategy, int64_t longest) {
  if (strategy == "pad-max") return kContext;
  if (strategy == "buckets") return roundUpTo(longest, kBucket);
  return roundUpTo(longest, kAlign);
}

struct CaptionRun {
  std::string strategy;
  double warmupS = 0, stepsPerS = 0, totalS = 0;
  bool measured = false; // steps ran after the warm-up: stepsPerS is their rate
  std::vector<double> losses, stepMs;
  std::vector<int64_t> lengths;
  int compiles = 0, recompiles = 0, fallbacks = 0, cacheHits = 0;
  double compileS = 0;
  int distinctLengths = 0;
};

void addCaptionStats(CaptionRun &r, const CompileStats &st) {
  r.compiles += st.compiles;
  r.recompiles += st.recompiles;
  r.fallbacks += st.fallbacks;
  r.cacheHits += st.cache_hits;
  r.compileS += st.compile_seconds;
}

CaptionRun runCaptionStrategy(const std::string &strategy, const CaptionSettings &s,
                              const std::vector<uint8_t> *artifacts, std::ostream &err) {
  cache::clear(); // cold: memory and disk
  if (artifacts) cache::load_artifacts(*artifacts);
  ModelConfig mc;
  mc.batch = s.batch;
  mc.seed = s.seed;
  std::unique_ptr<EncoderDecoderModel> model = buildVitGpt2Parts(captionModelConfig(), mc);
  optim::AdamW opt(model->module().parameters(), {.lr = s.lr});
  const bool mark = strategy == "mark-dynamic" || strategy == "modular" || strategy == "regional" ||
                    strategy == "warm";
  CompileOptions o;
  o.dynamic = strategy == "pad-max" || strategy == "buckets" ? Dynamic::never : Dynamic::automatic;
  o.mode = strategy == "regional" ? Mode::regional : Mode::full;
  o.name = "caption " + strategy;
  auto lossOf = [&](const Tensor &px, const Tensor &ids, const Tensor &labels) {
    return cross_entropy(model->forward({px, ids}), labels);
  };
  auto whole = compile(lossOf, o);
  CompileOptions half = o;
  half.name = "caption encoder";
  auto encoder = compile([&](const Tensor &px) { return model->encode(px); }, half);
  half.name = "caption decoder";
  auto decoder =
      compile([&](const Tensor &ids, const Tensor &enc,
                  const Tensor &labels) { return cross_entropy(model->decode(ids, enc), labels); },
              half);
  CaptionRun r;
  r.strategy = strategy;
  std::vector<int64_t> seen;
  bool warned = false; // of a loss that is not finite
  for (int step = 0; step < s.steps; ++step) {
    CaptionBatch b = captionBatchAt(s, step);
    const int64_t len = captionPaddedLength(strategy, b.longest);
    std::vector<int64_t> ids(static_cast<size_t>(s.batch * len), 0);
    std::vector<int64_t> labels(ids.size(), -100);
    for (int64_t i = 0; i < s.batch; ++i) {
      const std::vector<int64_t> &c = b.captions[static_cast<size_t>(i)];
      for (size_t k = 0; k + 1 < c.size(); ++k) {
        ids[static_cast<size_t>(i * len) + k] = c[k];
        labels[static_cast<size_t>(i * len) + k] = c[k + 1];
      }
    }
    Tensor idT = Tensor::from_vector(ids, {s.batch, len});
    Tensor labelT = Tensor::from_vector(labels, {s.batch, len});
    if (mark) {
      mark_dynamic(idT, 1, kAlign, kContext);
      mark_dynamic(labelT, 1, kAlign, kContext);
    }
    if (std::find(seen.begin(), seen.end(), len) == seen.end()) seen.push_back(len);
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    Tensor loss = strategy == "eager"     ? lossOf(b.pixels, idT, labelT)
                  : strategy == "modular" ? decoder(idT, encoder(b.pixels), labelT)
                                          : whole(b.pixels, idT, labelT);
    loss.backward();
    opt.step();
    r.losses.push_back(loss.item());
    const double ms = msSince(t0);
    if (!std::isfinite(r.losses.back()) && !warned) {
      warned = true;
      err << "train: warning: vit-gpt2 " << strategy << " step " << step + 1 << ": the loss is "
          << r.losses.back() << "; training goes on (as PyTorch's would), every later step "
          << "from non-finite weights\n";
    }
    r.stepMs.push_back(ms);
    r.lengths.push_back(len);
    char line[160];
    std::snprintf(
        line, sizeof line, "train: vit-gpt2 %s step %d/%d: padded to %lld, loss %.4f, %.1f ms\n",
        strategy.c_str(), step + 1, s.steps, static_cast<long long>(len), r.losses.back(), ms);
    err << line << std::flush;
  }
  const size_t warm = std::min<size_t>(static_cast<size_t>(s.warmupSteps), r.stepMs.size());
  for (size_t i = 0; i < r.stepMs.size(); ++i)
    (i < warm ? r.warmupS : r.totalS) += r.stepMs[i] / 1e3;
  const size_t after = r.stepMs.size() - warm;
  r.measured = after > 0 && r.totalS > 0;
  r.stepsPerS = r.measured ? static_cast<double>(after) / r.totalS : 0;
  r.totalS += r.warmupS;
  r.distinctLengths = static_cast<int>(seen.size());
  for (const CompileStats &st : {whole.stats(), encoder.stats(), decoder.stats()})
    addCaptionStats(r, st);
  return r;
}

std::string strategyTitle(const std::string &strategy) {
  if (strategy == "eager") return "eager (pad to longest)";
  if (strategy == "pad-max") return "pad to max (256)";
  if (strategy == "pad-longest") return "pad to longest, automatic";
  if (strategy == "mark-dynamic") return "pad to longest, mark_dynamic";
  if (strategy == "buckets") return "buckets of 32, never";
  if (strategy == "modular") return "modular (enc + dec apart)";
  if (strategy == "regional") return "regional, mark_dynamic";
  return "warm start (artifacts)";
}

} // namespace

int captionWarmupSteps(int steps) { return std::min(20, steps / 2); }

const std::vector<std::string> &captionStrategies() {
  static const std::vector<std::string> all = {"eager",   "pad-max", "pad-longest", "mark-dynamic",
                                               "buckets", "modular", "regional",    "warm"};
  return all;
}

void captionTrain(const CaptionSettings &s, std::ostream &out, std::ostream &err) {
  std::ofstream jsonFile = openJsonOutput(s.json);
  TempCacheDir tmp("caption"); // a fresh disk cache: cold compiles
  // eager first (every strategy's loss is compared with it), warm after mark-dynamic (whose
  // artifacts it loads)
  std::vector<std::string> order = {"eager"};
  for (const std::string &name : captionStrategies()) {
    const bool wanted =
        std::find(s.strategies.begin(), s.strategies.end(), name) != s.strategies.end();
    if (name == "mark-dynamic" && !wanted &&
        std::find(s.strategies.begin(), s.strategies.end(), "warm") != s.strategies.end()) {
      order.push_back(name); // the warm start needs its artifacts
    } else if (wanted && name != "eager") {
      order.push_back(name);
    }
  }
  std::vector<CaptionRun> rows;
  std::optional<std::vector<uint8_t>> artifacts;
  for (const std::string &name : order) {
    err << "train: vit-gpt2 strategy " << name << ", " << s.steps << " steps ...\n";
    rows.push_back(runCaptionStrategy(name, s, name == "warm" ? &*artifacts : nullptr, err));
    if (name == "mark-dynamic") artifacts = cache::save_artifacts();
  }
  const CaptionRun &eager = rows.front();
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "vit-gpt2 captioning (CPU size: ViT 32x32/8 + GPT-2 decoder, hidden 64, 2+2 "
                "layers, vocab %lld) - cpu, f32, batch %lld, %d steps, AdamW lr %g; captions "
                "90%% 5-32, 9%% 33-64, 1%% 65-256 tokens\n",
                static_cast<long long>(kVocab), static_cast<long long>(s.batch), s.steps, s.lr);
  out << buf;
  std::snprintf(buf, sizeof buf, "%-30s| %-9s| %-10s| %-8s| %-9s| %-10s| %-8s| %-10s| %-10s\n",
                "strategy", "steps/s", "warm-up", "compiles", "recompile", "fallbacks", "lengths",
                "last loss", "vs eager");
  out << buf;
  std::snprintf(buf, sizeof buf, "%-30s| %-9s| %-10s| %-8s| %-9s| %-10s| %-8s| %-10s| %-10s\n", "",
                "(after)", "(s, first)", "", "s", "", "(padded)", "", "(rel.)");
  out << buf;
  nlohmann::json j;
  j["model"] = "vit-gpt2 (CPU size)";
  j["batch"] = s.batch;
  j["steps"] = s.steps;
  j["warmup_steps"] = s.warmupSteps;
  j["lr"] = s.lr;
  j["seed"] = s.seed;
  j["machine"] = {{"cpu", hostCpuName()}, {"threads", std::thread::hardware_concurrency()}};
  bool unmeasured = false;
  for (const CaptionRun &r : rows) {
    const double rel = std::abs(r.losses.back() - eager.losses.back()) /
                       std::max(std::abs(eager.losses.back()), 1e-12);
    char rate[32] = "too short";
    if (r.measured) std::snprintf(rate, sizeof rate, "%.2f", r.stepsPerS);
    unmeasured = unmeasured || !r.measured;
    std::snprintf(buf, sizeof buf,
                  "%-30s| %-9s| %-10.2f| %-8d| %-9d| %-10d| %-8d| %-10.4f| %-10.1e\n",
                  strategyTitle(r.strategy).c_str(), rate, r.warmupS, r.compiles, r.recompiles,
                  r.fallbacks, r.distinctLengths, r.losses.back(), rel);
    out << buf;
    j["results"].push_back({{"strategy", r.strategy},
                            {"steps_per_s", r.measured ? nlohmann::json(r.stepsPerS) : nullptr},
                            {"warmup_s", r.warmupS},
                            {"total_s", r.totalS},
                            {"compiles", r.compiles},
                            {"recompiles", r.recompiles},
                            {"fallbacks", r.fallbacks},
                            {"cache_hits", r.cacheHits},
                            {"compile_seconds", r.compileS},
                            {"padded_lengths", r.lengths},
                            {"losses", r.losses},
                            {"step_ms", r.stepMs},
                            {"last_loss_rel_diff_vs_eager", rel}});
  }
  std::snprintf(buf, sizeof buf,
                "  warm-up: the first %d steps, compiles included; steps/s: the %d steps after "
                "them; lengths: distinct padded lengths trained; vs eager: |last loss - "
                "eager's| / eager's (the same batches and weights)\n",
                s.warmupSteps, std::max(0, s.steps - s.warmupSteps));
  out << buf;
  if (unmeasured) {
    std::snprintf(buf, sizeof buf,
                  "  steps/s too short: %d steps are all warm-up, none is left to time (run more "
                  "--steps)\n",
                  s.steps);
    out << buf;
  }
  if (!s.json.empty()) {
    jsonFile << j.dump(2) << "\n";
    closeOutput(jsonFile, "--json", s.json);
  }
}

} // namespace rcjit::tools
