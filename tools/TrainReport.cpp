// `rcjit train`'s report: the table of the modes' figures and the --json record.
#include "tools/TrainReport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "tools/Cli.h"

namespace rcjit::tools::train {

double scheduledLr(const Settings &s, int i) {
  if (i < s.warmup) return s.lr * (i + 1.0) / s.warmup;
  if (!s.cosine) return s.lr;
  const double done = (i - s.warmup) / static_cast<double>(std::max(1, s.scheduleSteps - s.warmup));
  return s.lr * (1 + std::cos(M_PI * done)) / 2;
}

Tensor scheduledLr(const Settings &s, const Tensor &i) {
  Tensor f = Tensor::full({}, 1.0);
  if (s.cosine) {
    Tensor done = (i - s.warmup) / static_cast<double>(std::max(1, s.scheduleSteps - s.warmup));
    f = (1.0 + cos(M_PI * done)) / 2.0;
  }
  if (s.warmup > 0) f = where(lt(i, s.warmup), (i + 1.0) / s.warmup, f);
  return s.lr * f;
}

namespace {

// The table's first line: model, target, dtype, sizes, optimizer and rate, ranks.
void printTrainHeader(std::ostream &out, const std::string &model, const ModelConfig &c,
                      const Settings &s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s - %s, %s, batch %lld, seq %lld, %d steps, %s lr %g%s%s",
                model.c_str(), s.targetLabel.c_str(),
                s.autocast ? "bf16 autocast (f32 parameters)"
                           : std::string(dtypeName(c.dtype)).c_str(),
                static_cast<long long>(c.batch * s.world), static_cast<long long>(c.seq), s.steps,
                s.optimizer == "adamw" ? "AdamW" : "SGD (momentum 0.9)", s.lr,
                s.maxAutotune ? ", max-autotune" : "", s.reduceOverhead ? ", reduce-overhead" : "");
  out << buf;
  if (s.clipGradNorm > 0) {
    std::snprintf(buf, sizeof buf, ", gradients clipped to norm %g", s.clipGradNorm);
    out << buf;
  }
  if (s.scheduled()) {
    out << ", rate " << (s.warmup ? "warmed up over " + std::to_string(s.warmup) + " steps" : "")
        << (s.warmup && s.cosine ? " then " : "") << (s.cosine ? "cosine decay" : "");
  }
  if (s.ddp) {
    std::snprintf(buf, sizeof buf, ", %s%s on %d rank%s (%lld rows each)",
                  s.zeroStage ? ("zero" + std::to_string(s.zeroStage)).c_str() : "ddp",
                  s.prefetch ? " + prefetch" : "", s.world, s.world == 1 ? "" : "s",
                  static_cast<long long>(c.batch));
    out << buf;
    if (s.zeroStage == 3) out << ", --schedule " << s.schedule << " for compiled modes";
  }
  out << "\n";
}

} // namespace

void printTrainTable(std::ostream &out, const std::string &model, const ModelConfig &c,
                     const Settings &s, const std::vector<TrainRow> &rows) {
  printTrainHeader(out, model, c, s);
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-22s| %-13s| %-13s| %-14s| %-12s| %-9s| %-10s| %-10s\n", "mode",
                "initial step", "initial peak", "training step", "inference", "vs eager",
                "first loss", "last loss");
  out << buf;
  std::snprintf(buf, sizeof buf, "%-22s| %-13s| %-13s| %-14s| %-12s| %-9s| %-10s| %-10s\n", "",
                "(s)", "(MiB)", "(ms, median)", "(ms)", "(train)", "", "");
  out << buf;
  const TrainRow *eager = nullptr;
  for (const TrainRow &r : rows) {
    if (r.mode == "eager") eager = &r;
  }
  for (const TrainRow &r : rows) {
    std::string ratio = eager ? "" : "-";
    if (eager) {
      char x[32];
      std::snprintf(x, sizeof x, "%.2fx", eager->stepMs / r.stepMs);
      ratio = x;
    }
    std::snprintf(buf, sizeof buf,
                  "%-22s| %-13.3f| %-13.1f| %-14.1f| %-12.1f| %-9s| %-10.4f| %-10.4f\n",
                  modeTitle(r.mode).c_str(), r.firstStepS, r.firstPeakMiB, r.stepMs, r.inferMs,
                  ratio.c_str(), r.losses.front(), r.losses.back());
    out << buf;
  }
  for (const TrainRow &r : rows) {
    std::snprintf(buf, sizeof buf,
                  "  %s: %.0f tokens/s (median step), peak %.1f MiB in later steps", r.mode.c_str(),
                  r.tokensPerS, r.laterPeakMiB);
    out << buf;
    if (r.graphDdp && r.mode == "whole") {
      out << "; the gradients averaged inside the compiled step (bucketed all_reduce nodes "
             "traced by dist::all_reduce_gradients)";
    } else if (r.graphDdp) {
      out << "; the gradients averaged inside the compiled backward (bucketed all_reduce nodes "
             "of a graph pass)";
    } else if (s.ddp && s.zeroStage == 0) {
      std::snprintf(buf, sizeof buf,
                    "; waiting on the gradients' all_reduce %.1f ms per step (median, %.0f %% of "
                    "the step)",
                    r.commMs, 100 * r.commMs / r.stepMs);
      out << buf;
    } else if (s.ddp) {
      std::snprintf(buf, sizeof buf,
                    "; waiting on communication (reduce-scatters, all-gathers) %.1f ms per step "
                    "(median, %.0f %% of the step)",
                    r.commMs, 100 * r.commMs / r.stepMs);
      out << buf;
    }
    std::snprintf(buf, sizeof buf,
                  "\n  %s: %s %.1f MiB held after the last step (parameters, gradients, "
                  "optimizer state), peak %.1f MiB in later steps",
                  r.mode.c_str(),
                  s.ddp ? "per rank (the largest over ranks):" : "memory:", r.stateMiB,
                  r.maxPeakMiB);
    out << buf;
    if (r.packedMiB > 0) {
      std::snprintf(buf, sizeof buf, "; packed weight copies %.1f MiB after inference",
                    r.packedMiB);
      out << buf;
    }
    out << "\n";
  }
  for (const TrainRow &r : rows) { // the spread behind each median
    const Spread &st = r.stepSpread, &in = r.inferSpread;
    out << "  " << r.mode << ": training step median " << formatMeasured(st.median) << " ms, IQR "
        << formatMeasured(st.iqr()) << ", min " << formatMeasured(st.min) << ", n " << st.n
        << "; inference median " << formatMeasured(in.median) << " ms, IQR "
        << formatMeasured(in.iqr()) << ", min " << formatMeasured(in.min) << ", n " << in.n << "\n";
  }
  for (const TrainRow &r : rows) {
    out << spreadWarning(modeTitle(r.mode) + " training step", r.stepSpread)
        << spreadWarning(modeTitle(r.mode) + " inference", r.inferSpread)
        << packedWarning(modeTitle(r.mode) + " training step", r.packedJobs, r.poolJobs,
                         "in the steps after the first");
  }
  for (const TrainRow &r : rows) {
    if (r.mode == "eager") continue;
    std::snprintf(buf, sizeof buf,
                  "  %s: training %d compile%s, %d cache hit%s, %.1f ms tracing+compiling "
                  "(inside the initial step); inference %d compile%s",
                  r.mode.c_str(), r.train.compiles, r.train.compiles == 1 ? "" : "s",
                  r.train.cache_hits, r.train.cache_hits == 1 ? "" : "s",
                  r.train.compile_seconds * 1e3, r.infer.compiles,
                  r.infer.compiles == 1 ? "" : "s");
    out << buf << tierReadyNote(r.tierWaitMs) << "\n";
    if (eager) { // the modes train the same model on the same batches: their losses agree
      double a = eager->losses.back(), b = r.losses.back();
      double rel = std::abs(a - b) / std::max(std::abs(a), 1e-12);
      if (!(rel <= 1e-2)) {
        std::snprintf(buf, sizeof buf,
                      "  note: %s's last loss differs from eager's by %.2f %% (%.6g vs %.6g)\n",
                      r.mode.c_str(), rel * 100, b, a);
        out << buf;
      }
    }
  }
}

namespace {
// Why a row's medians should not be trusted (null when both spreads are small).
nlohmann::json spreadWarnings(const TrainRow &r) {
  std::string step = spreadProblem(r.stepSpread), infer = spreadProblem(r.inferSpread);
  if (step.empty() && infer.empty()) return nullptr;
  return (step.empty() ? "" : "training step: " + step) +
         (!step.empty() && !infer.empty() ? "; " : "") +
         (infer.empty() ? "" : "inference: " + infer);
}
} // namespace

nlohmann::json trainJson(const std::string &model, const ModelConfig &c, const Settings &s,
                         int64_t parameters, const std::vector<TrainRow> &rows) {
  nlohmann::json j;
  j["model"] = model;
  j["batch"] = c.batch * s.world;
  j["dist"] = !s.ddp ? "none" : s.zeroStage ? "zero" + std::to_string(s.zeroStage) : "ddp";
  j["world_size"] = s.world;
  j["prefetch"] = s.prefetch;
  j["schedule"] = s.schedule;
  j["seq"] = c.seq;
  j["layers"] = c.layers > 0 ? nlohmann::json(c.layers) : nlohmann::json(nullptr);
  j["parameters"] = parameters;
  j["dtype"] = s.autocast ? "bf16" : std::string(dtypeName(c.dtype));
  j["autocast"] = s.autocast;
  j["parameter_dtype"] = std::string(dtypeName(c.dtype));
  j["steps"] = s.steps;
  j["max_autotune"] = s.maxAutotune;
  j["reduce_overhead"] = s.reduceOverhead;
  j["optimizer"] = s.optimizer;
  j["lr"] = s.lr;
  j["clip_grad_norm"] = s.clipGradNorm;
  j["warmup"] = s.warmup;
  j["lr_schedule"] = s.cosine ? "cosine" : "constant";
  j["schedule_steps"] = s.scheduleSteps;
  j["first_step"] = s.firstStep; // the --resume checkpoint's step count (0: from the start)
  j["resume"] = s.resumeFrom;
  j["save"] = s.saveTo;
  j["seed"] = s.seed;
  j["machine"] = {{"cpu", hostCpuName()},
                  {"threads", std::thread::hardware_concurrency()},
                  {"target", s.targetLabel},
                  {"rcjit", RCJIT_VERSION_STRING_TOOL}};
  for (const TrainRow &r : rows) {
    j["results"].push_back({{"mode", r.mode},
                            {"initial_step_s", r.firstStepS},
                            {"tier_wait_ms", r.tierWaitMs},
                            {"pool_jobs", r.poolJobs},
                            {"pool_packed_jobs", r.packedJobs},
                            {"initial_step_peak_mib", r.firstPeakMiB},
                            {"later_steps_peak_mib", r.laterPeakMiB},
                            {"train_step_ms", r.stepMs},
                            {"train_step_ms_stats", spreadJson(r.stepSpread)},
                            {"inference_ms", r.inferMs},
                            {"inference_ms_stats", spreadJson(r.inferSpread)},
                            {"inference_ms_samples", r.inferMsAll},
                            {"spread_warning", spreadWarnings(r)},
                            {"first_loss", r.losses.front()},
                            {"last_loss", r.losses.back()},
                            {"step_ms", r.stepMsAll},
                            {"losses", r.losses},
                            {"lrs", r.lrs},
                            {"grad_norms", r.gradNorms},
                            {"compiles", r.train.compiles},
                            {"cache_hits", r.train.cache_hits},
                            {"compile_seconds", r.train.compile_seconds},
                            {"inference_compiles", r.infer.compiles},
                            {"tokens_per_s", r.tokensPerS},
                            {"comm_wait_ms", r.commMs},
                            {"model_state_mib", r.stateMiB},
                            {"peak_mib_largest_rank", r.maxPeakMiB},
                            {"packed_weight_mib", r.packedMiB},
                            {"comm_wait_ms_steps", r.commMsAll}});
  }
  return j;
}

} // namespace rcjit::tools::train
