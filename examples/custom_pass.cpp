// A custom graph pass: rewrite x * 2 into x + x before compilation, and count the rewrites.
#include <rcjit/rcjit.h>

#include <cstdio>

using namespace rcjit;

int main() {
  int rewritten = 0;
  register_graph_pass("mul2_to_add", [&](const Graph &g) {
    Graph out = g;
    for (Node &n : out.nodes) {
      if (n.op != OpKind::mul || n.inputs.size() != 2) continue;
      const Node &c = out.nodes[n.inputs[1]];
      if (c.op == OpKind::full && c.shape.empty() && c.attrs.value == 2.0) {
        n.op = OpKind::add; // x * 2 -> x + x
        n.inputs[1] = n.inputs[0];
        ++rewritten;
      }
    }
    return rewritten ? out : g; // unchanged when it did nothing
  });
  CompileOptions opts;
  opts.tiered = false; // a tiered compile would run the pass again, on its background thread
  auto f = compile([](const Tensor &x) { return relu(x * 2.0) - 1.0; }, opts);
  Tensor x = Tensor::randn({1000}, 7);
  Tensor y = f(x);
  y = f(x);
  bool same = allclose(y, relu(x * 2.0) - 1.0);
  std::printf("rewrites=%d same_as_eager=%s\n", rewritten, same ? "yes" : "no");
  clear_graph_passes();
  return same && rewritten == 1 ? 0 : 1;
}
