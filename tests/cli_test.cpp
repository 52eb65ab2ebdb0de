// The rcjit tool through its library entry point: commands, exit codes, errors on stderr.
#include <gtest/gtest.h>

#include <cstdlib>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include <rcjit/Cuda.h>

#include "models/Models.h"
#include "models/Safetensors.h"
#include "support/Regex.h"
#include "targets/cuda/CudaDriver.h"
#include "tests/Ptxas.h"
#include "tools/BenchStats.h"
#include "tools/CaptionTraining.h"
#include "tools/Cli.h"
#include "tools/Process.h"

namespace {

struct Result {
  int code;
  std::string out, err;
};

// A scratch file of this process: other checkouts may run these tests at the same time, and
// testing::TempDir() is the one /tmp they share.
std::string tempFile(const std::string &name) {
  return testing::TempDir() + "rcjit_cli_" + std::to_string(::getpid()) + "_" + name;
}

Result run(std::vector<const char *> args) {
  args.insert(args.begin(), "rcjit");
  std::ostringstream out, err;
  int code = rcjit::tools::runCli(static_cast<int>(args.size()), args.data(), out, err);
  return {code, out.str(), err.str()};
}

TEST(Cli, HelpAndUsage) {
  Result r = run({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("bench"), std::string::npos);
  EXPECT_EQ(run({}).code, 2);
  Result bad = run({"frobnicate"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown command"), std::string::npos);
  EXPECT_EQ(run({"bench", "--help"}).code, 0);
  EXPECT_EQ(run({"bench", "--no-such-flag"}).code, 2);
}

TEST(Cli, VersionLayersAndOutputPathsAreCheckedFirst) {
  Result v = run({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("rcjit ", 0), 0u) << v.out;
  Result zero = run({"bench", "--model", "toy64", "--layers", "0"});
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("--layers: 0 is not a positive number of layers"), std::string::npos)
      << zero.err;
  // a bad --json path fails before any benchmark runs (no progress line printed)
  Result json = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1", "--seq", "4",
                     "--reps", "1", "--json", "/no/such/dir/x.json"});
  EXPECT_EQ(json.code, 1);
  EXPECT_NE(json.err.find("--json: cannot write /no/such/dir/x.json"), std::string::npos)
      << json.err;
  EXPECT_EQ(json.err.find("bench: toy64"), std::string::npos) << "it ran before failing";
  EXPECT_EQ(run({"trace", "--model", "nope"}).code, 2);
  Result traceZero = run({"trace", "--model", "toy64", "--layers", "0"});
  EXPECT_EQ(traceZero.code, 2);
  EXPECT_NE(traceZero.err.find("--layers: 0 is not a positive number"), std::string::npos);
}

TEST(Cli, ModelsListsToy64) {
  Result r = run({"models"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("toy64"), std::string::npos);
  EXPECT_NE(r.out.find("parameters"), std::string::npos);
  EXPECT_NE(r.out.find("llama-3.2-1b"), std::string::npos);
}

TEST(Cli, BenchEagerPrintsATable) {
  Result r = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1,2", "--seq", "8",
                  "--reps", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("inference"), std::string::npos);
  EXPECT_NE(r.out.find("Baseline (eager)"), std::string::npos);
  Result unknown = run({"bench", "--model", "nope"});
  EXPECT_EQ(unknown.code, 2) << "a model name the user typed is a usage error";
  EXPECT_NE(unknown.err.find("unknown model 'nope'"), std::string::npos);
  EXPECT_EQ(run({"bench", "--batch", "0"}).code, 2);
}

// The table reports median, IQR, min and the sample count per row and splits the first call
// into compile and first run; --json has every sample and the options as run (it had neither
// samples nor the true depth: "layers": -1).
TEST(Cli, BenchReportsSpreadAndSplitsTheFirstCall) {
  const std::string file = tempFile("cli_bench.json");
  Result r = run({"bench", "--model", "toy64", "--layers", "2", "--modes", "eager,full", "--batch",
                  "1", "--seq", "4", "--reps", "5", "--json", file.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char *what : {"| median    IQR       min       n     vs eager | compile   first run\n",
                           "vs eager: eager's median over the row's at the same batch",
                           "toy64 - cpu, f32, seq 4, 2 layers; 5 timed calls per row",
                           "compile: tracing + compiling inside the first call",
                           "Full compilation        | 1x4    | ", "  full b=1x4: 1 compile, "}) {
    EXPECT_NE(r.out.find(what), std::string::npos) << what << " in\n" << r.out;
  }
  EXPECT_NE(r.err.find("bench: toy64 full b=1x4: compile "), std::string::npos) << r.err;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(file));
  EXPECT_EQ(j["layers"], 2);
  EXPECT_EQ(j["modes"], (std::vector<std::string>{"eager", "full"}));
  EXPECT_EQ(j["batches"], std::vector<int>{1});
  EXPECT_EQ(j["reps"], 5);
  EXPECT_TRUE(j["weights"].is_null());
  EXPECT_TRUE(j["cache_dir"].is_null());
  ASSERT_EQ(j["results"].size(), 2u);
  for (const nlohmann::json &res : j["results"]) {
    std::vector<double> s = res["samples_ms"];
    ASSERT_EQ(s.size(), 5u);
    std::sort(s.begin(), s.end());
    const nlohmann::json &inf = res["inference_ms"];
    EXPECT_EQ(inf["n"], 5);
    EXPECT_DOUBLE_EQ(inf["median"].get<double>(), s[2]);
    EXPECT_DOUBLE_EQ(inf["min"].get<double>(), s[0]);
    EXPECT_DOUBLE_EQ(inf["max"].get<double>(), s[4]);
    EXPECT_DOUBLE_EQ(inf["q1"].get<double>(), s[1]);
    EXPECT_DOUBLE_EQ(inf["q3"].get<double>(), s[3]);
    const double compile = res["compile_ms"], firstRun = res["first_run_ms"];
    EXPECT_NEAR(compile + firstRun, res["first_call_ms"].get<double>(), 1e-9);
    // the work pool's jobs in the timed calls, and those run packed (a busy machine)
    EXPECT_GE(res["pool_jobs"].get<int64_t>(), res["pool_packed_jobs"].get<int64_t>());
    EXPECT_GE(res["pool_packed_jobs"].get<int64_t>(), 0);
    if (res["mode"] == "full") {
      EXPECT_GT(compile, 0);
      EXPECT_DOUBLE_EQ(compile, res["compile_seconds"].get<double>() * 1e3);
      // eager's median over full's: the table's "vs eager" column
      const double eagerMedian = j["results"][0]["inference_ms"]["median"];
      EXPECT_DOUBLE_EQ(res["speedup_vs_eager"].get<double>(),
                       eagerMedian / inf["median"].get<double>());
    } else {
      EXPECT_TRUE(res["speedup_vs_eager"].is_null());
      EXPECT_EQ(compile, 0);
    }
  }
  // without --layers: the model's own depth
  Result d = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1", "--seq", "2",
                  "--reps", "1", "--json", file.c_str()});
  ASSERT_EQ(d.code, 0) << d.err;
  j = nlohmann::json::parse(std::ifstream(file));
  EXPECT_EQ(j["layers"], 64);
  EXPECT_EQ(j["layers_from"], "the model's own depth");
  std::remove(file.c_str());
}

TEST(BenchStats, QuartilesAndSpreadWarnings) {
  using rcjit::tools::spreadProblem;
  using rcjit::tools::summarize;
  rcjit::tools::Spread s = summarize({5, 1, 4, 2, 3});
  EXPECT_EQ(s.n, 5);
  EXPECT_EQ(s.median, 3);
  EXPECT_EQ(s.q1, 2);
  EXPECT_EQ(s.q3, 4);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 5);
  s = summarize({4, 1, 3, 2}); // interpolated between order statistics
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.q1, 1.75);
  EXPECT_DOUBLE_EQ(s.q3, 3.25);
  EXPECT_EQ(spreadProblem(summarize({10, 10, 10, 10.5})), "");
  EXPECT_EQ(spreadProblem(summarize({10, 10, 12, 13})), "IQR 20 % of the median");
  EXPECT_EQ(spreadProblem(summarize({10, 10, 10, 10, 10, 10, 10, 657})), "max 65.7x the median");
  EXPECT_EQ(spreadProblem(summarize({1, 1, 2, 2, 7})),
            "IQR 50 % of the median, max 3.5x the median");
  EXPECT_THROW(summarize({}), rcjit::Error);
  EXPECT_EQ(rcjit::tools::spreadWarning("Full compilation b=1x128", summarize({1, 1, 1, 4})),
            "warning: Full compilation b=1x128: the calls' times spread widely (IQR 75 % of the "
            "median, max 4.0x the median): the median may not be typical; a busy machine? rerun "
            "with more --reps\n");
  EXPECT_EQ(rcjit::tools::spreadWarning("Baseline (eager) b=1x4", summarize({1, 1, 1})), "");
  // the work pool's packing, as bench and train say it
  EXPECT_EQ(rcjit::tools::packedWarning("Whole step training step", 3, 40,
                                        "in the steps after the first"),
            "warning: Whole step training step: the work pool packed its threads onto fewer "
            "CPUs for 3 of its 40 jobs in the steps after the first (other tasks kept every CPU "
            "busy): a busy machine's times (RCJIT_LOGS=perf_hints says when)\n");
  EXPECT_EQ(rcjit::tools::packedWarning("Full compilation b=1x4", 0, 40, "in the timed calls"), "");
}

TEST(Cli, NumbersAndCountsReadWell) {
  using rcjit::tools::formatMeasured;
  EXPECT_EQ(formatMeasured(12.9991), "13.00");
  EXPECT_EQ(formatMeasured(482.63), "482.6");
  EXPECT_EQ(formatMeasured(2.5449), "2.545");
  EXPECT_EQ(formatMeasured(0.686), "0.686");
  EXPECT_EQ(formatMeasured(0.012345), "0.0123");
  EXPECT_EQ(formatMeasured(0), "0");
  EXPECT_EQ(rcjit::tools::plural(1, "compile"), "1 compile");
  EXPECT_EQ(rcjit::tools::plural(3, "compile"), "3 compiles");
  EXPECT_EQ(rcjit::tools::plural(2, "entry", "entries"), "2 entries");
}

// --plot writes an SVG bar chart (it was four unlabelled dots drawn by gnuplot, which had to
// be installed): title naming the model, dtype, batch and machine, a bar per mode, eager as
// the baseline, a legend; every text inside the picture.
TEST(Cli, BenchPlotIsAReadableSvgChart) {
  const std::string file = tempFile("cli_bench.svg");
  Result r = run({"bench", "--model", "toy64", "--layers", "1", "--modes", "eager,full,regional",
                  "--batch", "1,2", "--seq", "4", "--reps", "3", "--plot", file.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(file);
  const std::string svg((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  for (const std::string &what :
       {std::string("toy64 inference - f32, batch 1,2 x seq 4, 1 layer, cpu"),
        "machine: " + rcjit::tools::hostCpuName(), std::string("Full compilation"),
        std::string("Regional compilation"), std::string(">eager "), std::string(">b=1x4<"),
        std::string(">b=2x4<"), std::string("inference: ms per call"),
        std::string("first call: compile + first run"), std::string("stroke-dasharray")}) {
    EXPECT_NE(svg.find(what), std::string::npos) << what;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(svg, m, std::regex(R"re(width="([0-9.]+)" height="([0-9.]+)")re")));
  const double width = std::stod(m[1]), height = std::stod(m[2]);
  const std::regex text(
      R"re(<text x="([-0-9.]+)" y="([-0-9.]+)" font-size="([0-9.]+)" text-anchor="(\w+)"[^>]*>([^<]*)</text>)re");
  size_t texts = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), text); it != std::sregex_iterator();
       ++it, ++texts) {
    const std::smatch &t = *it;
    const double x = std::stod(t[1]), y = std::stod(t[2]), size = std::stod(t[3]);
    const double w = static_cast<double>(t[5].length()) * size * 0.55; // sans-serif, at least
    const double left = t[4] == "start" ? x : t[4] == "middle" ? x - w / 2 : x - w;
    EXPECT_GE(left, 0) << t[0];
    EXPECT_LE(left + w, width) << t[0];
    EXPECT_GT(y - size, 0) << t[0];
    EXPECT_LE(y, height) << t[0];
  }
  size_t opened = 0;
  for (size_t at = svg.find("<text"); at != std::string::npos; at = svg.find("<text", at + 1)) {
    ++opened;
  }
  EXPECT_EQ(texts, opened) << "every text element parsed";
  EXPECT_GT(texts, 20u);
  std::remove(file.c_str());
}

// --plot p.png used to write SVG into the .png, after the whole benchmark ran.
TEST(Cli, BenchPlotPathIsCheckedBeforeRunning) {
  const std::string png = tempFile("cli_bench.png");
  Result r = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1", "--seq", "4",
                  "--reps", "1", "--plot", png.c_str()});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--plot: '" + png + "' does not end in .svg"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("bench: toy64"), std::string::npos) << "it ran before failing";
  EXPECT_FALSE(std::filesystem::exists(png));
  Result dir = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1", "--seq", "4",
                    "--reps", "1", "--plot", "/no/such/dir/p.svg"});
  EXPECT_EQ(dir.code, 1);
  EXPECT_NE(dir.err.find("--plot: cannot write /no/such/dir/p.svg"), std::string::npos) << dir.err;
  EXPECT_EQ(dir.err.find("bench: toy64"), std::string::npos) << "it ran before failing";
}

TEST(Cli, BenchLoadsSafetensorsWeights) {
  rcjit::tools::ModelConfig c;
  c.seed = 5;
  auto m = rcjit::tools::findModel("toy64").build(c);
  std::string file = tempFile("cli_toy64.safetensors");
  rcjit::tools::saveWeights(m->module(), file, rcjit::tools::WeightNaming::exact());
  Result ok = run({"bench", "--model", "toy64", "--modes", "full", "--batch", "1", "--seq", "4",
                   "--reps", "1", "--weights", file.c_str()});
  EXPECT_EQ(ok.code, 0) << ok.err;
  std::string bad = tempFile("cli_bad.safetensors");
  rcjit::writeSafetensors(bad, {{"linear.weight", rcjit::Tensor::ones({3, 3})}});
  Result wrong = run({"bench", "--model", "toy64", "--modes", "eager", "--batch", "1", "--seq", "4",
                      "--reps", "1", "--weights", bad.c_str()});
  EXPECT_EQ(wrong.code, 1);
  EXPECT_NE(wrong.err.find("linear.weight"), std::string::npos) << wrong.err;
  std::remove(file.c_str());
  std::remove(bad.c_str());
}

// --warm starts a fresh rcjit process; its paths used to be pasted into a shell command in
// single quotes, so a quote in --cache-dir or --weights ran the rest as shell code.
TEST(Cli, BenchWarmRunsNoShellOnItsPaths) {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("rcjit-inject-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path marker = root / "INJECTED";
  const std::string inject = "';touch " + marker.string() + ";'";
  rcjit::tools::ModelConfig c;
  c.seed = 5;
  c.layers = 1;
  auto m = rcjit::tools::findModel("toy64").build(c);
  // The marker's absolute path puts slashes into the names: they become nested folders.
  const std::string weights = (root / ("w" + inject + ".safetensors")).string();
  fs::create_directories(fs::path(weights).parent_path());
  rcjit::tools::saveWeights(m->module(), weights, rcjit::tools::WeightNaming::exact());
  const std::string dir = (root / ("cache" + inject)).string();
  int rc = rcjit::tools::runProgram({RCJIT_CLI, "bench", "--model", "toy64", "--modes", "full",
                                     "--batch", "1", "--seq", "4", "--layers", "1", "--reps", "1",
                                     "--warm", "--cache-dir", dir, "--weights", weights});
  EXPECT_EQ(rc, 0);
  EXPECT_FALSE(fs::exists(marker)) << "a path's contents ran as a shell command";
  EXPECT_TRUE(fs::is_directory(dir)); // the odd name was used as the directory it names
  fs::remove_all(root);
}

TEST(Cli, TraceDumpsEveryStage) {
  for (const char *what : {"optimized", "program", "llvm", "asm"}) {
    Result r = run({"trace", "--model", "toy64", "--dump", what, "--seq", "4", "--layers", "1"});
    ASSERT_EQ(r.code, 0) << what << ": " << r.err;
    EXPECT_FALSE(r.out.empty()) << what;
  }
  // toy64's 10 x 10 linears are generated kernels with their bias and activations...
  Result p = run({"trace", "--model", "toy64", "--dump", "program", "--layers", "1"});
  EXPECT_NE(p.out.find("{mul %10, sum %11, add %12, relu %13, sigmoid %14}"), std::string::npos)
      << p.out;
  EXPECT_EQ(p.out.find("library linear"), std::string::npos) << p.out;
  // ... or, with generated matmul kernels off, oneDNN calls with fused post-ops
  setenv("RCJIT_MATMUL_KERNELS", "never", 1);
  Result lib = run({"trace", "--model", "toy64", "--dump", "program", "--layers", "1"});
  unsetenv("RCJIT_MATMUL_KERNELS");
  EXPECT_NE(lib.out.find("library linear"), std::string::npos) << lib.out;
  EXPECT_NE(lib.out.find("+relu +sigmoid"), std::string::npos) << lib.out;
  Result ir = run({"trace", "--model", "gpt2", "--layers", "1", "--seq", "8", "--dump", "llvm"});
  ASSERT_EQ(ir.code, 0) << ir.err;
  EXPECT_NE(ir.out.find("define void @k0"), std::string::npos); // layer_norm etc. are kernels
  Result as = run({"trace", "--model", "gpt2", "--layers", "1", "--seq", "8", "--dump", "asm"});
  ASSERT_EQ(as.code, 0) << as.err;
  EXPECT_NE(as.out.find("k0:"), std::string::npos);
  Result bad = run({"trace", "--dump", "sass"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("ptx"), std::string::npos) << "the choices are listed";
}

// PTX needs no GPU; what it prints must assemble.
// --mode regional: the stages rcjit::compile's regional mode builds, and their LLVM IR.
TEST(Cli, TraceRegionalDumpsTheStagesAndTheirCode) {
  Result p = run({"trace", "--model", "toy64", "--mode", "regional", "--dump", "program",
                  "--layers", "3", "--seq", "4"});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_NE(p.out.find("regional: 4 stages, 2 compiled, 2 reused"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("layers.2 (reused)"), std::string::npos) << p.out;
  Result ir = run({"trace", "--model", "gpt2", "--mode", "regional", "--dump", "llvm", "--layers",
                   "2", "--seq", "8"});
  ASSERT_EQ(ir.code, 0) << ir.err;
  EXPECT_NE(ir.out.find("; stage transformer.h.0\n"), std::string::npos) << ir.out.substr(0, 2000);
  EXPECT_EQ(ir.out.find("; stage transformer.h.1"), std::string::npos) << "a reused stage";
  EXPECT_NE(ir.out.find("define void @k0"), std::string::npos);
  Result bad = run({"trace", "--model", "toy64", "--mode", "regional", "--dump", "asm"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--mode regional dumps graph, program or llvm"), std::string::npos);
  Result badMode = run({"trace", "--model", "toy64", "--mode", "whole"});
  EXPECT_EQ(badMode.code, 2);
  EXPECT_NE(badMode.err.find("--mode: 'whole' is not full or regional"), std::string::npos);
}

TEST(Cli, TraceDumpsPtx) {
  for (const char *arch : {"sm_80", "sm_90"}) {
    std::vector<const char *> args = {"trace", "--model", "toy64",  "--layers", "2",
                                      "--seq", "4",       "--dump", "ptx"};
    if (std::string(arch) != "sm_80") args.insert(args.end(), {"--arch", arch});
    Result r = run(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find(".version"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(".entry"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(std::string(".target ") + arch), std::string::npos);
    if (!rcjit::test::havePtxas()) continue; // the content checks above still ran
    EXPECT_TRUE(rcjit::test::assembles(r.out, arch));
  }
  Result gpt2 = run({"trace", "--model", "gpt2", "--layers", "1", "--seq", "8", "--dump", "ptx"});
  ASSERT_EQ(gpt2.code, 0) << gpt2.err;
  EXPECT_NE(gpt2.out.find(".entry k0("), std::string::npos); // layer_norm, softmax, gelu, ...
  if (rcjit::test::havePtxas()) {
    EXPECT_TRUE(rcjit::test::assembles(gpt2.out, "sm_80"));
  }
  Result badArch = run({"trace", "--dump", "ptx", "--arch", "sm_13"});
  EXPECT_EQ(badArch.code, 2);
  EXPECT_NE(badArch.err.find("sm_13"), std::string::npos);
}

TEST(Cli, TraceDumpsGraph) {
  Result r = run({"trace", "--model", "toy64", "--dump", "graph", "--seq", "4", "--layers", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("linear"), std::string::npos);
  EXPECT_NE(r.out.find("layers.1"), std::string::npos);
}

// Every mode trains a fresh copy of the same model on the same batches: the losses agree
// step by step, and the table, the progress lines and the JSON say so.
// `rcjit devices` names every piece and why a missing one is missing; a GPU run without a GPU
// is an Error with the driver's reason, before any work (the GPU check reads both).
TEST(Cli, DevicesAndCudaTargetSayWhyWithoutAGpu) {
  Result d = run({"devices"});
  EXPECT_EQ(d.code, 0) << d.err;
  for (const char *line : {"cpu: ", "cublas: ", "libdevice: "}) {
    EXPECT_NE(("\n" + d.out).find(std::string("\n") + line), std::string::npos) << d.out;
  }
  if (rcjit::cuda_available()) {
    EXPECT_NE(d.out.find("cuda: available: driver "), std::string::npos) << d.out;
    EXPECT_NE(d.out.find("gpu 0: "), std::string::npos) << d.out;
    EXPECT_EQ(run({"devices", "--require-cuda"}).code, 0);
    GTEST_SKIP() << "a GPU is present: the no-GPU errors cannot be seen";
  }
  EXPECT_NE(d.out.find("cuda: unavailable: " + rcjit::cuda::unavailableReason()), std::string::npos)
      << d.out;
  EXPECT_EQ(run({"devices", "--require-cuda"}).code, 1);
  Result t = run({"train", "--model", "toy64", "--layers", "1", "--target", "cuda"});
  EXPECT_EQ(t.code, 1) << t.err;
  EXPECT_NE(t.err.find("CUDA is not available"), std::string::npos) << t.err;
  EXPECT_EQ(t.err.find("train: toy64"), std::string::npos) << "it trained before failing";
  Result bad = run({"train", "--model", "toy64", "--target", "tpu"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--target: 'tpu' is not cpu or cuda"), std::string::npos) << bad.err;
  Result dist = run({"train", "--model", "toy64", "--target", "cuda", "--dist", "ddp"});
  EXPECT_EQ(dist.code, 2);
  EXPECT_NE(dist.err.find("--target cuda trains in one process"), std::string::npos) << dist.err;
}

TEST(Cli, TrainPrintsTheTableAndEveryModeTrainsAlike) {
  std::string json = tempFile("cli_train.json");
  Result r = run({"train", "--model", "toy64", "--layers", "3", "--batch", "2", "--seq", "8",
                  "--steps", "4", "--modes", "eager,full,regional", "--optimizer", "sgd", "--lr",
                  "0.01", "--json", json.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char *want : {"Baseline (eager)", "Full compilation", "Regional compilation",
                           "initial step", "initial peak", "training step", "inference",
                           "first loss", "last loss", "SGD (momentum 0.9) lr 0.01"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("note:"), std::string::npos) << "losses disagree:\n" << r.out;
  EXPECT_NE(r.err.find("train: toy64 regional step 4/4: loss "), std::string::npos) << r.err;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  EXPECT_EQ(j["layers"], 3);
  EXPECT_EQ(j["steps"], 4);
  ASSERT_EQ(j["results"].size(), 3u);
  const nlohmann::json &eager = j["results"][0];
  for (const nlohmann::json &row : j["results"]) {
    ASSERT_EQ(row["losses"].size(), 4u);
    ASSERT_EQ(row["step_ms"].size(), 4u);
    for (int i = 0; i < 4; ++i) {
      double a = eager["losses"][i], b = row["losses"][i];
      EXPECT_NEAR(b, a, 1e-4 * std::abs(a)) << row["mode"] << " step " << i;
    }
    EXPECT_GT(row["initial_step_peak_mib"].get<double>(), 0);
    // the statistics behind the median: the 3 steps after the first, and the inference calls
    const nlohmann::json &st = row["train_step_ms_stats"];
    std::vector<double> later(row["step_ms"].begin() + 1, row["step_ms"].end());
    std::sort(later.begin(), later.end());
    EXPECT_EQ(st["n"], 3);
    EXPECT_DOUBLE_EQ(st["median"].get<double>(), later[1]);
    EXPECT_DOUBLE_EQ(st["min"].get<double>(), later[0]);
    EXPECT_DOUBLE_EQ(st["max"].get<double>(), later[2]);
    EXPECT_DOUBLE_EQ(st["iqr"].get<double>(), st["q3"].get<double>() - st["q1"].get<double>());
    EXPECT_LE(st["q1"].get<double>(), st["median"].get<double>());
    EXPECT_LE(st["median"].get<double>(), st["q3"].get<double>());
    EXPECT_DOUBLE_EQ(row["train_step_ms"].get<double>(), later[1]);
    EXPECT_EQ(row["inference_ms_stats"]["n"], row["inference_ms_samples"].size());
    EXPECT_GE(row["inference_ms_samples"].size(), 1u);
    EXPECT_TRUE(row.contains("spread_warning"));
    EXPECT_LE(row["pool_packed_jobs"].get<int64_t>(), row["pool_jobs"].get<int64_t>());
    EXPECT_NE(r.out.find("  " + row["mode"].get<std::string>() + ": training step median "),
              std::string::npos)
        << r.out;
    if (row["mode"] != "eager") {
      EXPECT_GT(row["compiles"].get<int>(), 0) << row["mode"];
    }
  }
  EXPECT_EQ(eager["compiles"], 0);
}

// --warmup and --lr-schedule: every mode steps at the same rates (the whole step computes
// them in its graph from the step count: set_lr(Tensor)), so every mode's losses agree, and
// they differ from a constant rate's; the rates in the JSON follow the formula.
TEST(Cli, TrainLearningRateScheduleIsTheSameInEveryMode) {
  std::string json = tempFile("cli_train_schedule.json"), plain = tempFile("cli_train_plain.json");
  for (const char *opt : {"adamw", "sgd"}) {
    SCOPED_TRACE(opt);
    Result r = run(
        {"train",  "--model",   "toy64",   "--layers", "2",       "--batch",          "2",
         "--seq",  "8",         "--steps", "8",        "--modes", "eager,full,whole", "--optimizer",
         opt,      "--lr",      "0.05",    "--warmup", "3",       "--lr-schedule",    "cosine",
         "--json", json.c_str()});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("rate warmed up over 3 steps then cosine decay"), std::string::npos)
        << r.out;
    Result c =
        run({"train", "--model", "toy64", "--layers", "2", "--batch", "2", "--seq", "8", "--steps",
             "8", "--modes", "eager", "--optimizer", opt, "--lr", "0.05", "--json", plain.c_str()});
    ASSERT_EQ(c.code, 0) << c.err;
    std::ifstream in(json), inPlain(plain);
    nlohmann::json j = nlohmann::json::parse(in), jc = nlohmann::json::parse(inPlain);
    EXPECT_EQ(j["warmup"], 3);
    EXPECT_EQ(j["lr_schedule"], "cosine");
    const std::vector<double> want = {0.05 / 3,
                                      0.1 / 3,
                                      0.05,
                                      0.05 * (1 + std::cos(M_PI * 1 / 5)) / 2,
                                      0.05 * (1 + std::cos(M_PI * 2 / 5)) / 2,
                                      0.05 * (1 + std::cos(M_PI * 3 / 5)) / 2,
                                      0.05 * (1 + std::cos(M_PI * 4 / 5)) / 2};
    const nlohmann::json &eager = j["results"][0];
    for (const nlohmann::json &row : j["results"]) {
      ASSERT_EQ(row["lrs"].size(), 8u) << row["mode"];
      for (int i = 0; i < 8; ++i) {
        const double lr = row["lrs"][i];
        EXPECT_NEAR(lr, i < 3 ? want[i] : want[i - 1], 1e-7) << row["mode"] << " step " << i;
        double a = eager["losses"][i], b = row["losses"][i];
        EXPECT_NEAR(b, a, 1e-4 * std::abs(a)) << row["mode"] << " step " << i;
      }
    }
    EXPECT_EQ(jc["results"][0]["lrs"][7], 0.05);
    EXPECT_NE(jc["results"][0]["losses"][2], eager["losses"][2]) << "the schedule changed nothing";
  }
}

// --save / --resume: a checkpoint per mode after step 2 (--save-every 2, {step} in the name,
// in a run of 3) and 2 more steps resumed from it train as steps 3 and 4 of one run do
// (losses, rates of the warm-up and cosine schedule over the run's 4 steps), in eager, full
// and whole mode; bad uses are errors before any training.
TEST(Cli, TrainSaveAndResumeEqualsOneRun) {
  const std::string one = tempFile("cli_resume_one.json"), half = tempFile("cli_resume_half.json");
  const std::string ckpt = tempFile("cli_resume.{mode}.{step}.safetensors");
  auto train = [](std::vector<std::string> extra) {
    std::vector<std::string> args = {"train", "--model", "gpt2", "--layers", "1", "--batch",
                                     "2",     "--seq",   "8",    "--warmup", "1", "--lr-schedule",
                                     "cosine"};
    args.insert(args.end(), extra.begin(), extra.end());
    if (std::find(args.begin(), args.end(), "--steps") == args.end()) {
      args.insert(args.end(), {"--steps", "2"});
    }
    std::vector<const char *> argv;
    for (const std::string &a : args) argv.push_back(a.c_str());
    return run(argv);
  };
  Result r = train({"--steps", "4", "--modes", "eager,full,whole", "--json", one});
  ASSERT_EQ(r.code, 0) << r.err;
  // the first part stops after 3 steps, keeping a checkpoint of each mode after step 2
  r = train({"--modes", "eager,full,whole", "--steps", "3", "--schedule-steps", "4", "--save-every",
             "2", "--save", ckpt});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(one);
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const nlohmann::json &row : j["results"]) {
    const std::string mode = row["mode"];
    std::string file = ckpt, last = ckpt;
    file.replace(file.find("{mode}"), 6, mode).replace(file.find("{step}"), 6, "2");
    last.replace(last.find("{mode}"), 6, mode).replace(last.find("{step}"), 6, "3");
    EXPECT_TRUE(std::filesystem::exists(last)) << "the last step's checkpoint";
    std::remove(last.c_str());
    Result resumed = train({"--modes", mode, "--resume", file, "--json", half});
    ASSERT_EQ(resumed.code, 0) << resumed.err;
    std::ifstream inHalf(half);
    const nlohmann::json h = nlohmann::json::parse(inHalf);
    EXPECT_EQ(h["first_step"], 2);
    EXPECT_EQ(h["schedule_steps"], 4);
    for (int i = 0; i < 2; ++i) {
      const double want = row["losses"][2 + i], got = h["results"][0]["losses"][i];
      EXPECT_NEAR(got, want, 1e-5 * std::abs(want)) << mode << " step " << 2 + i;
      EXPECT_NEAR(double(h["results"][0]["lrs"][i]), double(row["lrs"][2 + i]), 1e-9) << mode;
    }
    EXPECT_NE(row["losses"][2], row["losses"][0]) << "the steps differ";
    std::remove(file.c_str());
  }
  auto errorOfTrain = [&](std::vector<std::string> extra) {
    Result bad = train(extra);
    EXPECT_NE(bad.code, 0);
    return bad.err;
  };
  EXPECT_NE(errorOfTrain({"--modes", "eager,full", "--save", "x.safetensors"})
                .find("put {mode} in the name"),
            std::string::npos);
  EXPECT_NE(errorOfTrain({"--modes", "eager", "--resume", "/nonexistent.safetensors"})
                .find("'/nonexistent.safetensors': cannot open for reading"),
            std::string::npos);
  EXPECT_NE(errorOfTrain({"--modes", "eager", "--save-every", "2"}).find("with --save FILE"),
            std::string::npos);
  EXPECT_NE(errorOfTrain({"--modes", "eager", "--weights", "w.safetensors", "--resume", "x"})
                .find("--weights and --resume both give the starting parameters"),
            std::string::npos);
  const std::string other = tempFile("cli_resume_toy.safetensors");
  ASSERT_EQ(run({"train", "--model", "toy64", "--layers", "1", "--batch", "2", "--seq", "8",
                 "--steps", "2", "--modes", "eager", "--save", other.c_str()})
                .code,
            0);
  EXPECT_NE(errorOfTrain({"--modes", "eager", "--resume", other})
                .find("a checkpoint of model 'toy64', not of --model gpt2"),
            std::string::npos);
  std::remove(other.c_str());
}

// --clip-grad-norm: eager, full and regional clip with clip_grad_norm_ after backward(), a
// whole step inside its graph (get_total_norm, clip_grads_with_norm_): the same losses in
// every mode, and not those of unclipped training.
TEST(Cli, TrainClipGradNormIsTheSameInEveryMode) {
  std::string json = tempFile("cli_train_clip.json"), plain = tempFile("cli_train_noclip.json");
  auto train = [](const std::string &file, const char *modes, const char *clip) {
    return run({"train", "--model", "gpt2", "--layers", "1", "--batch", "2", "--seq", "8",
                "--steps", "4", "--modes", modes, "--clip-grad-norm", clip, "--json",
                file.c_str()});
  };
  Result r = train(json, "eager,full,regional,whole", "0.5");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("gradients clipped to norm 0.5"), std::string::npos) << r.out;
  ASSERT_EQ(train(plain, "eager", "0").code, 0);
  std::ifstream in(json), inPlain(plain);
  nlohmann::json j = nlohmann::json::parse(in), jp = nlohmann::json::parse(inPlain);
  EXPECT_EQ(j["clip_grad_norm"], 0.5);
  const nlohmann::json &eager = j["results"][0];
  for (const nlohmann::json &row : j["results"]) {
    ASSERT_EQ(row["grad_norms"].size(), 4u) << row["mode"];
    for (int i = 0; i < 4; ++i) {
      double a = eager["losses"][i], b = row["losses"][i];
      EXPECT_NEAR(b, a, 1e-5 * std::abs(a)) << row["mode"] << " step " << i;
      double na = eager["grad_norms"][i], nb = row["grad_norms"][i];
      EXPECT_GT(na, 0.5) << "step " << i << " clips";
      EXPECT_NEAR(nb, na, 1e-4 * na) << row["mode"] << " step " << i;
    }
  }
  EXPECT_EQ(jp["results"][0]["grad_norms"].size(), 0u) << "no norms without clipping";
  double clipped = eager["losses"][3], unclipped = jp["results"][0]["losses"][3];
  EXPECT_GT(std::abs(clipped - unclipped), 1e-4) << "clipping changed nothing";
}

// On a token model the synthetic stream is learnable: the loss falls within a few steps.
TEST(Cli, TrainGpt2LossFalls) {
  std::string json = tempFile("cli_train_gpt2.json");
  Result r = run({"train", "--model", "gpt2", "--layers", "1", "--batch", "2", "--seq", "32",
                  "--steps", "8", "--modes", "eager", "--json", json.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  double first = j["results"][0]["first_loss"], last = j["results"][0]["last_loss"];
  EXPECT_NEAR(first, std::log(50257.0), 1.0) << "a random GPT-2 starts near uniform";
  EXPECT_LT(last, first - 1.5) << r.out; // measured: 11.05 -> 8.53
}

// The captioning workflow: every strategy trains the same batches to eager's loss; the
// dynamic strategies stay within the recompile limit; the warm start hits the artifacts.
TEST(Cli, TrainCaptioningStrategiesAgreeWithEager) {
  std::string json = tempFile("rcjit_caption.json");
  Result r = run({"train", "--model", "vit-gpt2", "--strategy",
                  "pad-longest,mark-dynamic,buckets,modular,regional,warm", "--steps", "6",
                  "--json", json.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("pad to longest, mark_dynamic"), std::string::npos) << r.out;
  std::ifstream in(json);
  nlohmann::json j = nlohmann::json::parse(in);
  ASSERT_EQ(j["results"].size(), 7u) << "eager first, then the six";
  EXPECT_EQ(j["results"][0]["strategy"], "eager");
  for (const auto &row : j["results"]) {
    const std::string name = row["strategy"];
    EXPECT_LT(row["last_loss_rel_diff_vs_eager"].get<double>(), 1e-3) << name;
    EXPECT_EQ(row["fallbacks"], 0) << name << ": within the recompile limit";
    if (name == "mark-dynamic" || name == "regional" || name == "warm") {
      EXPECT_EQ(row["recompiles"], 0) << name << ": one symbolic entry serves every length";
    }
    if (name == "warm") {
      EXPECT_GT(row["cache_hits"].get<int>(), 0) << "the artifacts served the compiles";
    }
  }
  Result bad = run({"train", "--model", "vit-gpt2", "--strategy", "pad-min"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("unknown strategy 'pad-min'"), std::string::npos) << bad.err;
  Result wrongModel = run({"train", "--model", "gpt2", "--strategy", "buckets"});
  EXPECT_EQ(wrongModel.code, 2);
  EXPECT_NE(wrongModel.err.find("trains vit-gpt2"), std::string::npos) << wrongModel.err;
}

// The --json of train and of the captioning workflow reaches the file or fails with the path
// and the reason (a full disk here), never exit 0 with nothing written.
TEST(Cli, TrainJsonThatCannotBeWrittenIsAFailure) {
  Result r = run({"train", "--model", "toy64", "--modes", "eager", "--steps", "2", "--batch", "1",
                  "--seq", "4", "--json", "/dev/full"});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("--json: cannot write /dev/full (No space left on device)"),
            std::string::npos)
      << r.err;
  Result caption = run({"train", "--model", "vit-gpt2", "--strategy", "eager", "--steps", "2",
                        "--batch", "2", "--json", "/dev/full"});
  EXPECT_EQ(caption.code, 1) << caption.err;
  EXPECT_NE(caption.err.find("--json: cannot write /dev/full (No space left on device)"),
            std::string::npos)
      << caption.err;
}

// The captioning table measures steps/s after a warm-up that leaves steps to time, with the
// default flags and with few --steps; a run with none left says so instead of printing 0.
TEST(Cli, TrainCaptioningMeasuresStepsPerSecond) {
  std::string json = tempFile("caption_rate.json");
  Result r = run({"train", "--model", "vit-gpt2", "--strategy", "eager", "--json", json.c_str()});
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["steps"], 60);
  EXPECT_EQ(j["warmup_steps"], 20);
  EXPECT_GT(j["results"][0]["steps_per_s"].get<double>(), 0) << r.out;
  Result few = run({"train", "--model", "vit-gpt2", "--strategy", "eager", "--steps", "8", "--json",
                    json.c_str()});
  ASSERT_EQ(few.code, 0) << few.err;
  j = nlohmann::json::parse(std::ifstream(json));
  EXPECT_EQ(j["warmup_steps"], 4);
  EXPECT_GT(j["results"][0]["steps_per_s"].get<double>(), 0) << few.out;
  EXPECT_EQ(few.out.find("| 0.00 "), std::string::npos) << few.out;
  std::ostringstream out, err;
  rcjit::tools::CaptionSettings all;
  all.strategies = {"eager"};
  all.steps = 2;
  all.warmupSteps = 2;
  all.batch = 2;
  rcjit::tools::captionTrain(all, out, err);
  EXPECT_NE(out.str().find("| too short"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("steps/s too short: 2 steps are all warm-up"), std::string::npos)
      << out.str();
  EXPECT_EQ(out.str().find("| 0.00 "), std::string::npos) << out.str();
}

// A NaN or infinite loss: a warning, once per mode (PyTorch says nothing), or with
// --check-finite an error at the first one.
TEST(Cli, TrainSaysOnceThatTheLossIsNotFinite) {
  std::vector<const char *> args = {"train",   "--model",     "toy64",   "--modes", "eager",
                                    "--steps", "4",           "--batch", "1",       "--seq",
                                    "4",       "--optimizer", "sgd",     "--lr",    "1e300"};
  Result r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  size_t said = 0;
  for (size_t at = r.err.find("train: warning: toy64 eager step"); at != std::string::npos;
       at = r.err.find("train: warning:", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << r.err;
  EXPECT_NE(r.err.find("training goes on"), std::string::npos) << r.err;
  args.push_back("--check-finite");
  Result checked = run(args);
  EXPECT_EQ(checked.code, 1) << checked.err;
  EXPECT_NE(checked.err.find("--check-finite: toy64 eager step"), std::string::npos) << checked.err;
}

// A FIFO given as --weights would block the open forever: refused as not a regular file.
TEST(Cli, TrainRefusesAFifoAsWeights) {
  const std::string fifo = tempFile("weights.fifo");
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  Result r = run({"train", "--model", "toy64", "--modes", "eager", "--steps", "2", "--batch", "1",
                  "--seq", "4", "--weights", fifo.c_str()});
  std::remove(fifo.c_str());
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("not a regular file (a FIFO)"), std::string::npos) << r.err;
}

TEST(Cli, TrainRejectsBadFlagsBeforeTraining) {
  struct Case {
    std::vector<const char *> args;
    const char *message;
  };
  std::vector<Case> cases = {
      {{"--steps", "1"}, "--steps: 1 is fewer than 2"},
      {{"--modes", "fast"}, "unknown mode 'fast'"},
      {{"--optimizer", "adam"}, "--optimizer: 'adam' is not adamw or sgd"},
      {{"--lr", "-1"}, "--lr: '-1' is not a positive number"},
      {{"--lr", "1e-3x"}, "--lr: '1e-3x' is not a positive number"},
      {{"--dtype", "f16"}, "--dtype: 'f16' is not f32 or bf16"},
      {{"--layers", "0"}, "--layers: 0 is not a positive number of layers"},
      {{"--batch", "0"}, "--batch and --seq must be positive"},
      {{"--model", "nope"}, "unknown model 'nope'"},
      {{"--dist", "zero3", "--modes", "eager,full", "--schedule", "none"},
       "--dist zero3 --schedule none runs no passes"},
      {{"--dist", "zero3", "--schedule", "fast"},
       "--schedule: 'fast' is not default, zero3 or none"},
      {{"--dist", "zero3", "--modes", "regional", "--schedule", "none"},
       "--dist zero3 --schedule none runs no passes"},
      {{"--dist", "fsdp"}, "--dist: unknown mode 'fsdp'"},
      {{"--bucket-mb", "0"}, "--bucket-mb: 0 is not a positive number of MiB"},
      {{"--warmup", "-1"}, "--warmup: -1 is not a number of steps (0 or more)"},
      {{"--clip-grad-norm", "-1"}, "--clip-grad-norm: -1 is not a finite number >= 0"},
      {{"--model", "vit-gpt2", "--strategy", "eager", "--clip-grad-norm", "1"},
       "--clip-grad-norm: the captioning workflow (--strategy) does not clip"},
      {{"--lr-schedule", "step"}, "--lr-schedule: 'step' is not constant or cosine"},
      {{"--modes", "whole", "--target", "cuda", "--warmup", "2"},
       "--warmup / --lr-schedule with --modes whole on cuda"},
      {{"--model", "gpt2", "--layers", "1", "--seq", "2000"},
       "--seq: 2000 exceeds gpt2's context of 1024 positions"},
  };
  for (const Case &c : cases) {
    std::vector<const char *> args = {"train"};
    if (std::string(c.args[0]) != "--model") args = {"train", "--model", "toy64"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    Result r = run(args);
    EXPECT_EQ(r.code, 2) << c.message << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("train: toy64"), std::string::npos) << "it trained before failing";
  }
  Result json = run({"train", "--model", "toy64", "--json", "/no/such/dir/x.json"});
  EXPECT_EQ(json.code, 1);
  EXPECT_NE(json.err.find("--json: cannot write /no/such/dir/x.json"), std::string::npos);
  EXPECT_EQ(json.err.find("train: toy64"), std::string::npos) << "it trained before failing";
}

} // namespace
