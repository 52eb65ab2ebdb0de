// Tests of the graph IR's value semantics, text form, parser, canonical hash and regions.
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include <rcjit/Error.h>

#include <rcjit/ir/GraphIO.h>

#include "tracer/GraphIO.h"

namespace rcjit {
namespace {

SymShape dims(std::initializer_list<int64_t> v) { return staticShape(Shape(v)); }

Node inputNode(InputKind kind, int index, DType dtype, SymShape shape, std::string name = "") {
  Node n;
  n.op = OpKind::input;
  n.inputKind = kind;
  n.inputIndex = index;
  n.dtype = dtype;
  n.shape = std::move(shape);
  n.name = std::move(name);
  return n;
}

Node opNode(OpKind op, std::vector<int> inputs, SymShape shape, DType dtype = DType::f32) {
  Node n;
  n.op = op;
  n.inputs = std::move(inputs);
  n.shape = std::move(shape);
  n.dtype = dtype;
  return n;
}

// Non-default values in every Attrs field, so a field lost in printing shows.
Attrs busyAttrs() {
  Attrs a;
  a.dims = {1, 0, -1, INT64_MAX};
  a.dim = 2;
  a.start = -3;
  a.end = INT64_MAX;
  a.stride = 2;
  a.padding = 1;
  a.value = 0.1;
  a.eps = 1e-5;
  a.keepdim = true;
  a.causal = true;
  return a;
}

int inputCount(OpKind op) {
  const int arity = opInfo(op).arity;
  return arity >= 0 ? arity : 3;
}

// A graph with one node of every op, symbolic dims, regions and awkward names.
Graph everyOpGraph() {
  Graph g;
  g.symbols = {{2, 256}, {1, INT64_MAX}, {INT64_MIN, -5}};
  g.regions = {{"layers.0", "Layer", -1, 3, 20, true},
               {"layers.0.attn", "Attention", 0, 5, 9, false},
               {"we\"ird \\ name\n\t\x01\x7f", "région", -1, 20, 20, false}};
  g.add(inputNode(InputKind::arg, 0, DType::f32, {{4, -1}, {7, 0}, {10, -1}}));
  g.add(inputNode(InputKind::captured, 0, DType::bf16, dims({10, 10}),
                  "layers.0.linear \"1\"\\weight\n"));
  g.add(inputNode(InputKind::arg, 1, DType::i64, {{3, 1}}, "ids"));
  const SymShape shapes[] = {dims({}), dims({4, 10}), {{4, -1}, {7, 0}}, {{-2, 2}}};
  int k = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const auto op = static_cast<OpKind>(i);
    if (op == OpKind::input) continue;
    std::vector<int> ins;
    const int have = static_cast<int>(g.nodes.size());
    for (int j = 0; j < inputCount(op); ++j) ins.push_back((k + j) % have);
    Node n = opNode(op, ins, shapes[k % 4], static_cast<DType>(k % 7));
    n.attrs = busyAttrs();
    n.region = g.nodes.size() >= 5 && g.nodes.size() < 9 ? 1 : (g.nodes.size() < 20 ? 0 : -1);
    g.add(std::move(n));
    ++k;
  }
  g.nodes[1].region = 2;
  g.outputs = {static_cast<int>(g.nodes.size()) - 1, 3, 3, 0};
  return g;
}

TEST(GraphText, RoundTripsEveryOp) {
  const Graph g = everyOpGraph();
  const std::string text = printGraph(g);
  for (int i = 0; i < kNumOps; ++i) {
    EXPECT_NE(text.find(std::string(opName(static_cast<OpKind>(i)))), std::string::npos);
  }
  const Graph back = parseGraphText(text); // the graph is no trace's: syntax only
  EXPECT_EQ(back, g) << text;
  EXPECT_EQ(printGraph(back), text);
  EXPECT_THROW(parseGraph(text), Error); // symbol range [INT64_MIN, -5], dim -2, ...
}

TEST(GraphText, RoundTripsEmptyGraph) {
  const Graph g;
  EXPECT_EQ(parseGraph(printGraph(g)), g);
}

TEST(GraphText, RoundTripsExactDoubles) {
  const double values[] = {0.1,      -0.0,     0.0,       1e-300, 5e-324,  DBL_MAX,
                           -DBL_MIN, INFINITY, -INFINITY, NAN,    1.0 / 3, 123456789012345678.0};
  for (double v : values) {
    Graph g;
    Node full = opNode(OpKind::full, {}, dims({2}));
    full.attrs.value = v;
    const int f = g.add(full);
    g.add(inputNode(InputKind::arg, 0, DType::f32, dims({2})));
    Node ln = opNode(OpKind::layer_norm, {1, f}, dims({2}));
    ln.attrs.eps = v;
    g.outputs = {g.add(ln)};
    const Graph back = parseGraph(printGraph(g));
    EXPECT_EQ(back, g) << printGraph(g);
    EXPECT_EQ(std::signbit(back.nodes[0].attrs.value), std::signbit(v));
  }
}

TEST(GraphText, ZeroSignMatters) {
  Attrs a, b;
  a.value = 0.0;
  b.value = -0.0;
  EXPECT_FALSE(attrsEqual(OpKind::full, a, b));
  EXPECT_TRUE(attrsEqual(OpKind::exp, a, b)); // exp does not use value
}

TEST(GraphText, ReadsHandWrittenText) {
  const Graph g = parseGraph(R"(# a comment line
graph(symbols: s0 in [2, 256]) {   # trailing comment
  region 0 "layers.0" type "Layer" parent -1 nodes [2, 4) list
  %0 = input arg 0 : f32[4, s0=7, 10]
  %1 = input captured 0 "layers.0.linear1.weight" : f32[10, 10]
  %2 = linear(%0, %1) : f32[4, s0=7, 10] @0
  %3 = sum(%2) keepdim=false dims=[1] : f32[4, 10] @0
  return %3, %0
})");
  ASSERT_EQ(g.nodes.size(), 4u);
  EXPECT_EQ(g.symbols, (std::vector<Symbol>{{2, 256}}));
  EXPECT_EQ(g.nodes[0].shape[1], (Dim{7, 0}));
  EXPECT_EQ(g.nodes[1].inputKind, InputKind::captured);
  EXPECT_EQ(g.nodes[1].name, "layers.0.linear1.weight");
  EXPECT_EQ(g.nodes[2].op, OpKind::linear);
  EXPECT_EQ(g.nodes[2].inputs, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.nodes[3].attrs.dims, (Dims{1}));
  EXPECT_EQ(g.nodes[3].region, 0);
  EXPECT_EQ(g.outputs, (std::vector<int>{3, 0}));
  EXPECT_EQ(g.regions[0], (Region{"layers.0", "Layer", -1, 2, 4, true}));
  EXPECT_EQ(g.inputNodes(), (std::vector<int>{0, 1}));
}

struct BadText {
  std::string body; // lines after "graph() {", which is line 1
  int line;
  int col;
  std::string says;
};

TEST(GraphText, ErrorsNameLineAndColumn) {
  const std::string in0 = "  %0 = input arg 0 : f32[2]\n";
  const BadText cases[] = {
      {in0 + "  return %1\n", 3, 10, "an output must name one of %0..%0, found '%1'"},
      {"  %0 = input arg 0 : f33[2]\n", 2, 22, "expected a dtype"},
      {in0 + "  %1 = frob(%0) : f32[2]\n", 3, 8, "expected an op name, found 'frob'"},
      {in0 + "  %5 = exp(%0) : f32[2]\n", 3, 3, "expected node %1, found '%5'"},
      {in0 + "  %1 = exp(%1) : f32[2]\n", 3, 12, "an earlier node must name one of %0..%0"},
      {in0 + "  %1 = add(%0) : f32[2]\n", 3, 8, "op 'add' takes 2 inputs, not 1"},
      {in0 + "  %1 = sum(%0) keepdim=true : f32[]\n", 3, 29, "expected attribute 'dims'"},
      {in0 + "  %1 = sum(%0) dims=[0] dims=[0] : f32[]\n", 3, 25, "duplicate attribute"},
      {in0 + "  %1 = exp(%0) dim=1 : f32[2]\n", 3, 16, "expected an attribute of this op"},
      {"  %0 = input captured 0 \"abc\n", 2, 25, "unterminated string"},
      {"  %0 = input captured 0 \"a\\q\" : f32[2]\n", 2, 28, "unknown escape '\\q'"},
      {"  %0 = input arg 0 : f32[s0=2]\n", 2, 26, "the graph declares no symbols"},
      {"  %0 = input arg 0 : f32[99999999999999999999]\n", 2, 26, "out of the 64-bit range"},
      {"  %0 = input arg 0 : f32[2.5]\n", 2, 26, "expected a dim size (an integer)"},
      {"  region 0 \"r\" type \"T\" parent -1 nodes [0, 5)\n" + in0 + "  return\n}", 2, 41,
       "region 0 ends at node 5 but the graph has 1 nodes"},
      {"  region 0 \"r\" type \"T\" parent 0 nodes [0, 0)\n", 2, 32, "parent region 0 out of"},
      {in0 + "  %1 = exp(%0) : f32[2] @0\n", 3, 26, "region 0 out of range [0, -1]"},
      {in0 + "  $\n", 3, 3, "unexpected character '$'"},
      {in0 + "  return\n", 4, 1, "expected '}', found end of input"},
  };
  for (const BadText &c : cases) {
    const std::string text = "graph() {\n" + c.body;
    try {
      parseGraph(text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const Error &e) {
      const std::string msg = e.what();
      const std::string where =
          "line " + std::to_string(c.line) + ", column " + std::to_string(c.col) + ":";
      EXPECT_NE(msg.find(where), std::string::npos) << msg << "\nwanted " << where;
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg << "\nwanted " << c.says;
    }
  }
}

// The parser used to accept what no graph can be: negative dims, empty symbol ranges, and
// nodes whose shape or dtype contradicts their op.
TEST(GraphText, RejectsInvalidGraphs) {
  const std::string in0 = "  %0 = input arg 0 : f32[2, 3]\n";
  const BadText cases[] = {
      {"  %0 = input arg 0 : f32[-5]\n", 2, 26, "dim size -5 is negative"},
      {in0 + "  %1 = exp(%0) : f32[2, 4]\n", 3, 3,
       "node %1 (exp) is declared f32[2, 4] but its op gives f32[2, 3] for its inputs"},
      {in0 + "  %1 = exp(%0) : f64[2, 3]\n", 3, 3, "is declared f64[2, 3] but its op gives f32"},
      {in0 + "  %1 = sum(%0) keepdim=false dims=[5] : f32[2]\n", 3, 3,
       "node %1 (sum): sum: bad reduction dims [5] for f32[2, 3]"},
      {in0 + "  %1 = matmul(%0, %0) : f32[2, 3]\n", 3, 3, "inner dims do not match"},
      {"  %0 = input arg 0 : f32[4294967296, 4294967296]\n", 2, 3, "more than int64 can count"},
      {in0 + "  %1 = cast(%0) : i64[2, 3]\n  %2 = add(%1, %0) : i64[2, 3]\n", 4, 3,
       "expected operands of one dtype"},
  };
  for (const BadText &c : cases) {
    const std::string text = "graph() {\n" + c.body + "  return\n}";
    try {
      parseGraph(text);
      ADD_FAILURE() << "parsed: " << text;
    } catch (const Error &e) {
      const std::string msg = e.what();
      const std::string where =
          "line " + std::to_string(c.line) + ", column " + std::to_string(c.col) + ":";
      EXPECT_NE(msg.find(where), std::string::npos) << msg << "\nwanted " << where;
      EXPECT_NE(msg.find(c.says), std::string::npos) << msg << "\nwanted " << c.says;
    }
  }
  auto messageOf = [](std::string_view text) {
    try {
      parseGraph(text);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(messageOf("graph(symbols: s0 in [10, 2]) {\n  return\n}"),
            "graph text: line 1, column 23: symbol s0 has the empty or negative range [10, 2] "
            "(expected 0 <= min <= max)");
  EXPECT_NE(messageOf("graph(symbols: s0 in [10, 20]) {\n  %0 = input arg 0 : f32[s0=7]\n  "
                      "return\n}")
                .find("line 2, column 29: dim s0=7 is outside the symbol's range [10, 20]"),
            std::string::npos);
  // A consistent hand-written graph still parses (and through the public header).
  EXPECT_NO_THROW(parseGraph("graph() {\n" + in0 + "  %1 = exp(%0) : f32[2, 3]\n  return %1\n}"));
}

// Found by fuzz/graph_parser_fuzzer: input indices with a gap (arg 0, arg 2) parsed, and the
// IR verifier then refused the graph.
TEST(GraphText, RejectsInputIndicesThatAreNotDense) {
  try {
    parseGraph("graph() {\n  %0 = input arg 0 : f32[2]\n  %1 = input arg 2 : f32[2]\n"
               "  %2 = add(%0, %1) : f32[2]\n  return %2\n}");
    ADD_FAILURE() << "parsed";
  } catch (const Error &e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("graph text: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("has index 2, but its kind's indices must be 0..1, each once"),
              std::string::npos)
        << msg;
  }
}

TEST(GraphText, ErrorsOutsideTheBody) {
  auto messageOf = [](std::string_view text) {
    try {
      parseGraph(text);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(messageOf(""), "graph text: line 1, column 1: expected 'graph', found end of input");
  EXPECT_EQ(messageOf("graph(symbols: s1 in [2, 3]) {"),
            "graph text: line 1, column 16: expected symbol s0, found 's1'");
  EXPECT_EQ(messageOf("graph() {\n  return\n} x"),
            "graph text: line 3, column 3: expected end of input after '}', found 'x'");
}

// Byte-wise mutation of printed text: the parser either succeeds or throws rcjit::Error,
// and whatever it accepts prints, re-parses to itself and hashes.
TEST(GraphText, FuzzedTextNeverCrashes) {
  const std::string base = printGraph(everyOpGraph());
  const std::string alphabet = "%=:,()[]{}@\"\\#-.0123456789s \nabcdefx";
  std::mt19937 rng(12345);
  int parsed = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      switch (rng() % 5) {
      case 0:
        text[at] = static_cast<char>(rng() % 256);
        break;
      case 1:
        text[at] = alphabet[rng() % alphabet.size()];
        break;
      case 2:
        text.erase(at, 1 + rng() % 8);
        break;
      case 3:
        text.insert(at, text.substr(rng() % text.size(), rng() % 40));
        break;
      default:
        text.resize(at);
        break;
      }
    }
    try {
      const Graph g = parseGraphText(text);
      ++parsed;
      EXPECT_EQ(parseGraphText(printGraph(g)), g);
      (void)hashGraph(g);
    } catch (const Error &) {
    }
    try {
      parseGraph(text); // the checked parser never crashes either
    } catch (const Error &) {
    }
  }
  EXPECT_GT(parsed, 0);
}

// A small DAG with independent branches, two captured weights and two symbols.
Graph branchyGraph() {
  Graph g;
  g.symbols = {{2, 64}, {1, 512}};
  const SymShape xs = {{4, 0}, {8, 1}};
  const int x = g.add(inputNode(InputKind::arg, 0, DType::f32, xs, "x"));
  const int w1 = g.add(inputNode(InputKind::captured, 0, DType::f32, dims({8, 8}), "w1"));
  const int a = g.add(opNode(OpKind::exp, {x}, xs));
  const int w2 = g.add(inputNode(InputKind::captured, 1, DType::f32, dims({8, 8}), "w2"));
  const int b = g.add(opNode(OpKind::matmul, {x, w1}, xs));
  const int c = g.add(opNode(OpKind::matmul, {a, w2}, xs));
  const int y = g.add(inputNode(InputKind::arg, 1, DType::f32, xs, "y"));
  const int d = g.add(opNode(OpKind::sub, {b, c}, xs));
  Node s = opNode(OpKind::sum, {d}, {{4, 0}});
  s.attrs.dims = {1};
  const int sum = g.add(s);
  const int e = g.add(opNode(OpKind::mul, {d, y}, xs));
  g.regions = {{"block", "Block", -1, 2, 6, false}};
  g.outputs = {sum, e};
  return g;
}

// The same DAG in the topological order that always takes the highest ready id first.
Graph reordered(const Graph &g) {
  const size_t n = g.nodes.size();
  std::vector<int> pending(n, 0), newId(n, -1);
  std::vector<std::vector<int>> users(n);
  for (size_t i = 0; i < n; ++i) {
    pending[i] = static_cast<int>(g.nodes[i].inputs.size());
    for (int in : g.nodes[i].inputs) users[static_cast<size_t>(in)].push_back(int(i));
  }
  std::set<int> ready;
  for (size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.insert(static_cast<int>(i));
  }
  Graph out;
  out.symbols = g.symbols;
  while (!ready.empty()) {
    const int id = *ready.rbegin();
    ready.erase(id);
    Node node = g.nodes[static_cast<size_t>(id)];
    for (int &in : node.inputs) in = newId[static_cast<size_t>(in)];
    node.region = -1;
    newId[static_cast<size_t>(id)] = out.add(node);
    for (int u : users[static_cast<size_t>(id)]) {
      if (--pending[static_cast<size_t>(u)] == 0) ready.insert(u);
    }
  }
  for (int o : g.outputs) out.outputs.push_back(newId[static_cast<size_t>(o)]);
  return out;
}

TEST(GraphHash, IgnoresNodeNumbering) {
  const Graph g = branchyGraph();
  const Graph r = reordered(g);
  ASSERT_NE(r.nodes[0], g.nodes[0]);
  EXPECT_EQ(hashGraph(r), hashGraph(g));
  EXPECT_EQ(hashGraph(g).hex().size(), 32u);
  EXPECT_EQ(hashGraph(g).hex(), hashGraph(r).hex());
  const Graph all = everyOpGraph();
  EXPECT_EQ(hashGraph(reordered(all)), hashGraph(all));
}

TEST(GraphHash, IgnoresSymbolNumberingAndTracedValues) {
  const Graph g = branchyGraph();
  Graph h = g;
  std::swap(h.symbols[0], h.symbols[1]);
  for (Node &n : h.nodes) {
    for (Dim &d : n.shape) {
      if (d.isSymbolic()) {
        d.sym = 1 - d.sym;
        d.value += 3;
      }
    }
  }
  EXPECT_EQ(hashGraph(h), hashGraph(g));
}

TEST(GraphHash, IgnoresNamesBindingsAndRegions) {
  const Graph g = branchyGraph();
  Graph h = g;
  for (Node &n : h.nodes) n.name = "renamed." + n.name;
  h.nodes[1].inputIndex = 1; // the two weights bound the other way round
  h.nodes[3].inputIndex = 0;
  h.regions = {{"other", "Other", -1, 0, 9, true}, {"inner", "region", 0, 1, 2, false}};
  h.nodes[4].region = 1;
  EXPECT_EQ(hashGraph(h), hashGraph(g));
}

// Equal hashes with the weights bound in the other order: binding by the canonical order
// hands each graph's matmul the same weight.
TEST(GraphHash, CanonicalCapturedOrderMatchesAcrossNumberings) {
  const Graph g = branchyGraph();
  Graph h = reordered(g);
  for (Node &n : h.nodes) {
    if (n.op == OpKind::input && n.inputKind == InputKind::captured) n.inputIndex ^= 1;
  }
  ASSERT_EQ(hashGraph(h), hashGraph(g));
  auto names = [](const Graph &x) {
    std::vector<std::string> out;
    for (int id : canonicalCaptured(x)) out.push_back(x.nodes[static_cast<size_t>(id)].name);
    return out;
  };
  EXPECT_EQ(names(g), (std::vector<std::string>{"w1", "w2"}));
  EXPECT_EQ(names(h), names(g));
}

TEST(GraphHash, ChangesWithEachProperty) {
  const Graph g = branchyGraph();
  using Edit = void (*)(Graph &);
  const std::pair<const char *, Edit> edits[] = {
      {"op", [](Graph &h) { h.nodes[2].op = OpKind::log; }},
      {"attr dims", [](Graph &h) { h.nodes[8].attrs.dims = {0}; }},
      {"attr keepdim", [](Graph &h) { h.nodes[8].attrs.keepdim = true; }},
      {"dtype", [](Graph &h) { h.nodes[2].dtype = DType::f16; }},
      {"input dtype", [](Graph &h) { h.nodes[1].dtype = DType::f64; }},
      {"constant dim", [](Graph &h) { h.nodes[1].shape[0].value = 9; }},
      {"symbolic dim",
       [](Graph &h) {
         h.nodes[2].shape[1] = {8, -1};
       }},
      {"symbol min", [](Graph &h) { h.symbols[0].min = 3; }},
      {"symbol max", [](Graph &h) { h.symbols[1].max = INT64_MAX; }},
      {"which symbol", [](Graph &h) { h.nodes[2].shape[1].sym = 0; }},
      {"arg order", [](Graph &h) { std::swap(h.nodes[0].inputIndex, h.nodes[6].inputIndex); }},
      {"input kind", [](Graph &h) { h.nodes[6].inputKind = InputKind::captured; }},
      {"input order", [](Graph &h) { std::swap(h.nodes[7].inputs[0], h.nodes[7].inputs[1]); }},
      {"shared weight", [](Graph &h) { h.nodes[5].inputs[1] = 1; }},
      {"output", [](Graph &h) { h.outputs[1] = 7; }},
      {"output order", [](Graph &h) { std::swap(h.outputs[0], h.outputs[1]); }},
      {"extra output", [](Graph &h) { h.outputs.push_back(2); }},
      {"dead node", [](Graph &h) { h.add(opNode(OpKind::neg, {0}, h.nodes[0].shape)); }},
      {"unused symbol",
       [](Graph &h) {
         h.symbols.push_back({2, 8});
       }},
  };
  const GraphHash base = hashGraph(g);
  for (const auto &[what, edit] : edits) {
    Graph h = g;
    edit(h);
    EXPECT_NE(hashGraph(h), base) << what;
  }
}

TEST(GraphHash, DoubleAttrsHashByValue) {
  Graph a;
  Node full = opNode(OpKind::full, {}, dims({2}));
  full.attrs.value = 0.5;
  a.outputs = {a.add(full)};
  Graph b = a;
  b.nodes[0].attrs.value = 0.25;
  Graph c = a;
  c.nodes[0].attrs.eps = 7; // full does not use eps
  EXPECT_NE(hashGraph(a), hashGraph(b));
  EXPECT_EQ(hashGraph(a), hashGraph(c));
}

TEST(GraphHash, RejectsOutOfOrderInputs) {
  Graph g;
  g.add(opNode(OpKind::exp, {0}, dims({})));
  EXPECT_THROW(hashGraph(g), Error);
}

// x -> three layers of [w, b captured; linear; act; residual add] -> sum; layer 2 of
// `differentLast` uses gelu instead of relu.
Graph threeLayers(bool differentLast = false) {
  Graph g;
  g.symbols = {{2, 256}};
  const SymShape hs = {{4, -1}, {7, 0}, {16, -1}};
  int h = g.add(inputNode(InputKind::arg, 0, DType::f32, hs, "x"));
  const int scale = g.add(inputNode(InputKind::captured, 0, DType::f32, dims({16}), "scale"));
  int captured = 1;
  for (int l = 0; l < 3; ++l) {
    const std::string path = "layers." + std::to_string(l);
    const int region = static_cast<int>(g.regions.size());
    const int begin = static_cast<int>(g.nodes.size());
    auto in = [&](Node n) {
      n.region = region;
      return g.add(std::move(n));
    };
    const int w = in(inputNode(InputKind::captured, captured++, DType::f32, dims({16, 16}),
                               path + ".linear.weight"));
    const int b = in(
        inputNode(InputKind::captured, captured++, DType::f32, dims({16}), path + ".linear.bias"));
    const int lin = in(opNode(OpKind::linear, {h, w, b}, hs));
    g.regions.push_back({path, "Layer", -1, begin, 0, true});
    g.regions.push_back({path + ".act", "Act", region, lin + 1, lin + 2, false});
    Node act = opNode(differentLast && l == 2 ? OpKind::gelu : OpKind::relu, {lin}, hs);
    act.region = region + 1;
    g.add(std::move(act));
    const int scaled = in(opNode(OpKind::mul, {lin + 1, scale}, hs));
    h = in(opNode(OpKind::add, {h, scaled}, hs));
    g.regions[static_cast<size_t>(region)].end = h + 1;
  }
  Node s = opNode(OpKind::sum, {h}, {{4, -1}, {16, -1}});
  s.attrs.dims = {1};
  g.outputs = {g.add(s)};
  return g;
}

Graph withoutNames(Graph g) {
  for (Node &n : g.nodes) n.name.clear();
  for (Region &r : g.regions) r.name.clear();
  return g;
}

TEST(RegionExtract, IdenticalLayersHashEqual) {
  const Graph g = threeLayers();
  std::vector<Graph> layers;
  for (int l = 0; l < 3; ++l) layers.push_back(extractRegion(g, 2 * l));
  EXPECT_EQ(hashGraph(layers[0]), hashGraph(layers[1]));
  EXPECT_EQ(hashGraph(layers[1]), hashGraph(layers[2]));
  EXPECT_EQ(withoutNames(layers[0]), withoutNames(layers[2])) << printGraph(layers[0]);
  EXPECT_NE(hashGraph(layers[0]), hashGraph(g));
  const Graph other = extractRegion(threeLayers(true), 4);
  EXPECT_NE(hashGraph(other), hashGraph(layers[0]));
}

TEST(RegionExtract, BindsBoundaryAndOutputs) {
  const Graph g = threeLayers();
  std::vector<int> boundary, outs;
  const Graph sub = extractRegion(g, 2, &boundary, &outs);
  // layer 1 = nodes [8, 14): w, b, linear, relu, mul, add; it reads %7 and the scale %1.
  const Region &r = g.regions[2];
  ASSERT_EQ(r.begin, 8);
  ASSERT_EQ(r.end, 14);
  EXPECT_EQ(boundary, (std::vector<int>{7, 1, 8, 9}));
  EXPECT_EQ(outs, (std::vector<int>{13}));
  ASSERT_EQ(sub.nodes.size(), 8u);
  EXPECT_EQ(sub.outputs, (std::vector<int>{7}));
  const Node &h = sub.nodes[0];
  EXPECT_EQ(h.op, OpKind::input);
  EXPECT_EQ(h.inputKind, InputKind::arg);
  EXPECT_EQ(h.inputIndex, 0);
  EXPECT_EQ(sub.nodes[1].inputKind, InputKind::captured);
  EXPECT_EQ(sub.nodes[1].name, "scale");
  // first use: linear reads h, w, b; mul reads the scale.
  EXPECT_EQ(sub.nodes[2].inputIndex, 0);
  EXPECT_EQ(sub.nodes[3].inputIndex, 1);
  EXPECT_EQ(sub.nodes[1].inputIndex, 2);
  EXPECT_EQ(sub.nodes[4].inputs, (std::vector<int>{0, 2, 3}));
  ASSERT_EQ(sub.regions.size(), 1u);
  EXPECT_EQ(sub.regions[0], (Region{"layers.1.act", "Act", -1, 5, 6, false}));
  EXPECT_EQ(sub.nodes[5].region, 0);
  EXPECT_EQ(sub.nodes[4].region, -1);
  EXPECT_EQ(sub.symbols, g.symbols);
  EXPECT_EQ(parseGraph(printGraph(sub)), sub);
}

TEST(RegionExtract, RejectsBadRegion) {
  const Graph g = threeLayers();
  EXPECT_THROW(extractRegion(g, 6), Error);
  EXPECT_THROW(extractRegion(g, -1), Error);
}

} // namespace
} // namespace rcjit
