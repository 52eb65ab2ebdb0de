// What a trace records and `rcjit logs --html` shows: a GPT-2-like decoder
// (caption_decoder.h) compiled in full and in regional mode, called at a second length (a
// recompile), a function that reads the logits on the host (a graph break), and the same
// function compiled with fullgraph = true (a failed compile, whose Error is caught here).
//
//   RCJIT_TRACE_FILE=trace.jsonl example_trace_report
//   rcjit logs trace.jsonl --html report.html
//
// scripts/report_screenshot.sh runs both and takes the picture of the report in
// docs/logs-and-reports.md.
#include "caption_decoder.h"

#include <rcjit/rcjit.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

using namespace rcjit;

namespace {

Tensor tokens(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((7 * i + 3) % caption::kVocab);
  return Tensor::from_vector(v, {1, n});
}

} // namespace

int main() {
  if (!std::getenv("RCJIT_TRACE_FILE"))
    std::printf("(set RCJIT_TRACE_FILE=FILE to record the trace this example is for)\n");
  caption::Decoder decoder;
  NoGradGuard noGrad;
  Tensor shorter = tokens(16), longer = tokens(24);

  auto full = compile(decoder, CompileOptions{.name = "decoder full"});
  Tensor expected = decoder(shorter);
  full(shorter);
  full(shorter);
  full(longer); // a recompile: dim 1 is 24, not 16
  auto regional =
      compile(decoder, CompileOptions{.mode = Mode::regional, .name = "decoder regional"});
  regional(shorter);
  regional(shorter);

  auto scaled = [&decoder](const Tensor &ids) {
    Tensor logits = decoder(ids);
    const float first = logits.to_vector<float>()[0]; // a host read: a graph break
    return logits * static_cast<double>(first);
  };
  auto breaking = compile(scaled, CompileOptions{.name = "decoder with a host read"});
  breaking(shorter);
  auto strict = compile(scaled, CompileOptions{.fullgraph = true, .name = "fullgraph"});
  try {
    strict(shorter);
    std::printf("error: a fullgraph compile with a host read compiled\n");
    return 1;
  } catch (const Error &e) {
    std::printf("the fullgraph compile failed, as it should: %.80s...\n", e.what());
  }
  if (!allclose(full(shorter), expected, 1e-4, 1e-4) ||
      !allclose(regional(shorter), expected, 1e-4, 1e-4)) {
    std::printf("error: compiled logits differ from eager's\n");
    return 1;
  }
  std::printf("full and regional logits match eager's\n");
  return 0;
}
