// libFuzzer harness: the graph text parser (parseGraph) and what a parsed graph promises.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include <rcjit/Error.h>
#include <rcjit/ir/GraphIO.h>

#include "tracer/GraphIO.h"
#include "tracer/GraphVerify.h"

// Any input may be refused with an rcjit::Error; any other exception or crash is a finding.
// A graph that parses must verify, hash, print, and parse back to the same text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  rcjit::Graph g;
  try {
    g = rcjit::parseGraph(text);
  } catch (const rcjit::Error &) {
    return 0;
  }
  rcjit::verifyGraph(g, "parseGraph"); // throws: a finding (uncaught)
  (void)rcjit::hashGraph(g);
  std::string printed = rcjit::printGraph(g);
  if (rcjit::printGraph(rcjit::parseGraph(printed)) != printed) std::abort();
  return 0;
}
