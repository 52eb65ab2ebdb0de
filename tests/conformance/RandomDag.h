// Random programs for the conformance suites: a seeded generator builds a DAG of elementwise,
// broadcast, reduction and shape ops over 1-3 inputs (random_dag_test.cpp runs them compiled
// vs eager; autograd_gradcheck_test.cpp checks their gradients by finite differences).
#pragma once
#include <rcjit/rcjit.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "tests/conformance/Conformance.h"

namespace rcjit::conformance {

enum class Op {
  // unary (log/sqrt/rsqrt/reciprocal take |x|+1, exp takes min(x, 4): safe domains)
  neg,
  abs,
  exp,
  log,
  sqrt,
  rsqrt,
  reciprocal,
  tanh,
  sigmoid,
  relu,
  gelu,
  silu,
  erf,
  sin,
  cos,
  squash, // 4x/(|x|+1): keeps magnitudes small
  // tensor op tensor (div by |b|+1; pow of |a|+0.5 to tanh(b)*2)
  add,
  sub,
  mul,
  div,
  pow,
  maximum,
  minimum,
  // tensor op scalar, scalar op tensor
  addS,
  subS,
  mulS,
  divS,
  powS,
  maximumS,
  minimumS,
  sAdd,
  sSub,
  sMul,
  sDiv,
  sPow,
  whereCmp,  // where(cmp(a, b), a, b)
  whereCmpS, // where(cmp(a, s), a * 2, s)
  sum,
  mean,
  amax,
  softmax,
  logSoftmax,
  reshape,
  permute,
  transpose,
  unsqueeze,
  expand,
};

inline const char *const kOpNames[] = {"neg",
                                       "abs",
                                       "exp(min(x,4))",
                                       "log(|x|+1)",
                                       "sqrt(|x|+1)",
                                       "rsqrt(|x|+1)",
                                       "reciprocal(|x|+1)",
                                       "tanh",
                                       "sigmoid",
                                       "relu",
                                       "gelu",
                                       "silu",
                                       "erf",
                                       "sin",
                                       "cos",
                                       "squash",
                                       "add",
                                       "sub",
                                       "mul",
                                       "div(a,|b|+1)",
                                       "pow(|a|+.5,tanh(b)*2)",
                                       "maximum",
                                       "minimum",
                                       "add",
                                       "sub",
                                       "mul",
                                       "div",
                                       "pow(|a|+.5,s)",
                                       "maximum",
                                       "minimum",
                                       "add",
                                       "sub",
                                       "mul",
                                       "div(s,|a|+1)",
                                       "pow(s,tanh(a)*2)",
                                       "where",
                                       "where",
                                       "sum",
                                       "mean",
                                       "amax",
                                       "softmax",
                                       "log_softmax",
                                       "reshape",
                                       "permute",
                                       "transpose",
                                       "unsqueeze",
                                       "expand"};
inline const char *const kCmpNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};

/// One op of a DAG: operands are indices into the value list (inputs first).
struct Step {
  Op op;
  int a = -1, b = -1;
  double s = 0; // scalar operand
  int cmp = 0;  // comparison of where steps
  Dims dims;    // reduction dims, shape, permutation or (d0, d1)
  bool keepdim = false;
};

struct Dag {
  uint64_t seed = 0;
  std::vector<Shape> inputs;
  std::vector<Step> steps;
  std::vector<int> outputs;
  std::vector<Shape> shapes; // of every value (from the f32 generation run)

  std::string str() const {
    std::string s = "DAG seed " + std::to_string(seed) + ":\n";
    for (size_t i = 0; i < inputs.size(); ++i) {
      s += "  v" + std::to_string(i) + " = input " + shapeStr(inputs[i]) + "\n";
    }
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step &st = steps[i];
      const int out = static_cast<int>(inputs.size() + i);
      auto v = [](int k) { return "v" + std::to_string(k); };
      std::string body = kOpNames[static_cast<int>(st.op)];
      const std::string sc = std::to_string(st.s);
      if (st.op == Op::whereCmp) {
        body += "(" + std::string(kCmpNames[st.cmp]) + "(" + v(st.a) + ", " + v(st.b) + "), " +
                v(st.a) + ", " + v(st.b) + ")";
      } else if (st.op == Op::whereCmpS) {
        body += "(" + std::string(kCmpNames[st.cmp]) + "(" + v(st.a) + ", " + sc + "), " + v(st.a) +
                "*2, " + sc + ")";
      } else if (st.op >= Op::sAdd && st.op <= Op::sPow) {
        body += "(" + sc + ", " + v(st.a) + ")";
      } else if (st.op >= Op::addS && st.op <= Op::minimumS) {
        body += "(" + v(st.a) + ", " + sc + ")";
      } else if (st.b >= 0) {
        body += "(" + v(st.a) + ", " + v(st.b) + ")";
      } else {
        body += "(" + v(st.a);
        if (!st.dims.empty() || st.op == Op::sum || st.op == Op::mean || st.op == Op::amax) {
          body += ", " + shapeStr(st.dims);
        }
        if (st.op == Op::sum || st.op == Op::mean || st.op == Op::amax) {
          body += st.keepdim ? ", keepdim" : "";
        }
        body += ")";
      }
      s += "  " + v(out) + " = " + body + "  -> " + shapeStr(shapes[static_cast<size_t>(out)]) +
           "\n";
    }
    s += "  outputs:";
    for (int o : outputs) s += " v" + std::to_string(o);
    return s + "\n";
  }
};

inline Tensor cmpOf(int k, const Tensor &a, const Tensor &b) {
  switch (k) {
  case 0:
    return eq(a, b);
  case 1:
    return ne(a, b);
  case 2:
    return lt(a, b);
  case 3:
    return le(a, b);
  case 4:
    return gt(a, b);
  default:
    return ge(a, b);
  }
}
inline Tensor cmpOf(int k, const Tensor &a, double s) {
  switch (k) {
  case 0:
    return eq(a, s);
  case 1:
    return ne(a, s);
  case 2:
    return lt(a, s);
  case 3:
    return le(a, s);
  case 4:
    return gt(a, s);
  default:
    return ge(a, s);
  }
}

inline Tensor applyStep(const Step &st, const std::vector<Tensor> &v) {
  const Tensor &a = v[static_cast<size_t>(st.a)];
  const Tensor &b = st.b >= 0 ? v[static_cast<size_t>(st.b)] : a;
  const double s = st.s;
  switch (st.op) {
  case Op::neg:
    return neg(a);
  case Op::abs:
    return rcjit::abs(a);
  case Op::exp:
    return rcjit::exp(minimum(a, 4.0));
  case Op::log:
    return rcjit::log(rcjit::abs(a) + 1.0);
  case Op::sqrt:
    return rcjit::sqrt(rcjit::abs(a) + 1.0);
  case Op::rsqrt:
    return rsqrt(rcjit::abs(a) + 1.0);
  case Op::reciprocal:
    return reciprocal(rcjit::abs(a) + 1.0);
  case Op::tanh:
    return rcjit::tanh(a);
  case Op::sigmoid:
    return sigmoid(a);
  case Op::relu:
    return relu(a);
  case Op::gelu:
    return gelu(a);
  case Op::silu:
    return silu(a);
  case Op::erf:
    return rcjit::erf(a);
  case Op::sin:
    return rcjit::sin(a);
  case Op::cos:
    return rcjit::cos(a);
  case Op::squash:
    return a * 4.0 / (rcjit::abs(a) + 1.0);
  case Op::add:
    return a + b;
  case Op::sub:
    return a - b;
  case Op::mul:
    return a * b;
  case Op::div:
    return a / (rcjit::abs(b) + 1.0);
  case Op::pow:
    return rcjit::pow(rcjit::abs(a) + 0.5, rcjit::tanh(b) * 2.0);
  case Op::maximum:
    return maximum(a, b);
  case Op::minimum:
    return minimum(a, b);
  case Op::addS:
    return add(a, s);
  case Op::subS:
    return sub(a, s);
  case Op::mulS:
    return mul(a, s);
  case Op::divS:
    return div(a, s);
  case Op::powS:
    return rcjit::pow(rcjit::abs(a) + 0.5, s);
  case Op::maximumS:
    return maximum(a, s);
  case Op::minimumS:
    return minimum(a, s);
  case Op::sAdd:
    return add(s, a);
  case Op::sSub:
    return sub(s, a);
  case Op::sMul:
    return mul(s, a);
  case Op::sDiv:
    return div(s, rcjit::abs(a) + 1.0);
  case Op::sPow:
    return rcjit::pow(s, rcjit::tanh(a) * 2.0);
  case Op::whereCmp:
    return where(cmpOf(st.cmp, a, b), a, b);
  case Op::whereCmpS:
    return where(cmpOf(st.cmp, a, s), a * 2.0, s);
  case Op::sum:
    return rcjit::sum(a, st.dims, st.keepdim);
  case Op::mean:
    return rcjit::mean(a, st.dims, st.keepdim);
  case Op::amax:
    return rcjit::amax(a, st.dims, st.keepdim);
  case Op::softmax:
    return rcjit::softmax(a, st.dims[0]);
  case Op::logSoftmax:
    return log_softmax(a, st.dims[0]);
  case Op::reshape:
    return rcjit::reshape(a, st.dims);
  case Op::permute:
    return rcjit::permute(a, st.dims);
  case Op::transpose:
    return rcjit::transpose(a, st.dims[0], st.dims[1]);
  case Op::unsqueeze:
    return rcjit::unsqueeze(a, st.dims[0]);
  case Op::expand:
    return rcjit::expand(a, st.dims);
  }
  return a;
}

inline std::vector<Tensor> run(const Dag &d, const std::vector<Tensor> &in) {
  std::vector<Tensor> v = in;
  for (const Step &st : d.steps) v.push_back(applyStep(st, v));
  std::vector<Tensor> out;
  for (int o : d.outputs) out.push_back(v[static_cast<size_t>(o)]);
  return out;
}

inline bool broadcastable(const Shape &a, const Shape &b) {
  for (size_t i = 1; i <= std::min(a.size(), b.size()); ++i) {
    const int64_t x = a[a.size() - i], y = b[b.size() - i];
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

inline Shape broadcastShape(const Shape &a, const Shape &b) {
  Shape r(std::max(a.size(), b.size()), 1);
  for (size_t i = 1; i <= r.size(); ++i) {
    const int64_t x = i <= a.size() ? a[a.size() - i] : 1, y = i <= b.size() ? b[b.size() - i] : 1;
    r[r.size() - i] = std::max(x, y);
  }
  return r;
}

inline std::vector<Tensor> makeInputs(const Dag &d, DType dt, uint64_t salt) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    in.push_back(makeInput(In{d.inputs[i]}, dt, d.seed * 131 + i + salt));
  }
  return in;
}

/// Builds a DAG from `seed`, choosing each op from the shapes and values of an eager f32
/// run so far (values too large for the next op are squashed first).
inline Dag generate(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  auto chance = [&rng](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  const std::vector<Shape> families = {{4, 6}, {2, 3, 5}, {3, 4, 2, 2}, {8}, {2, 1, 6}, {5, 3}};
  const Shape base = families[static_cast<size_t>(pick(static_cast<int64_t>(families.size())))];

  Dag d;
  d.seed = seed;
  const int nIn = 1 + static_cast<int>(pick(3));
  for (int i = 0; i < nIn; ++i) {
    Shape s = base;
    if (i > 0) {
      for (int64_t &x : s) {
        if (chance(0.3)) x = 1;
      }
      if (s.size() > 1 && chance(0.3))
        s.erase(s.begin(), s.begin() + 1 + pick(static_cast<int64_t>(s.size()) - 1));
    }
    d.inputs.push_back(s);
  }
  std::vector<Tensor> vals = makeInputs(d, DType::f32, 0);
  for (const Tensor &t : vals) d.shapes.push_back(t.shape());

  auto addStep = [&](Step st) {
    vals.push_back(applyStep(st, vals));
    d.shapes.push_back(vals.back().shape());
    d.steps.push_back(std::move(st));
    return static_cast<int>(vals.size()) - 1;
  };
  // an operand: recent values more often; squashed first when large
  auto operand = [&]() {
    const int n = static_cast<int>(vals.size());
    int k =
        chance(0.6) ? std::max(0, n - 1 - static_cast<int>(pick(3))) : static_cast<int>(pick(n));
    if (vals[static_cast<size_t>(k)].numel() > 0 &&
        rcjit::amax(rcjit::abs(vals[static_cast<size_t>(k)])).item() > 6) {
      k = addStep({Op::squash, k});
    }
    return k;
  };
  const double scalars[] = {0.5, -1.5, 2.0, 3.0, -0.25};
  const double exponents[] = {0.5, 2.0, 3.0, -1.0, 1.5};

  const int nSteps = 5 + static_cast<int>(pick(16));
  while (static_cast<int>(d.steps.size()) < nSteps) {
    const int a = operand();
    const Shape sa = d.shapes[static_cast<size_t>(a)];
    const int rank = static_cast<int>(sa.size());
    const int64_t cat = pick(10);
    Step st{Op::neg, a};
    if (cat <= 1) { // unary
      st.op = static_cast<Op>(pick(static_cast<int64_t>(Op::squash) + 1));
    } else if (cat <= 3) { // tensor op tensor
      std::vector<int> partners;
      for (int k = 0; k < static_cast<int>(vals.size()); ++k) {
        if (broadcastable(sa, d.shapes[static_cast<size_t>(k)]) &&
            numelOf(broadcastShape(sa, d.shapes[static_cast<size_t>(k)])) <= 256) {
          partners.push_back(k);
        }
      }
      int b = partners[static_cast<size_t>(pick(static_cast<int64_t>(partners.size())))];
      if (vals[static_cast<size_t>(b)].numel() > 0 &&
          rcjit::amax(rcjit::abs(vals[static_cast<size_t>(b)])).item() > 6) {
        b = addStep({Op::squash, b});
      }
      st.b = b;
      st.op = static_cast<Op>(static_cast<int64_t>(Op::add) + pick(7));
    } else if (cat == 4) { // scalar on either side
      st.op = static_cast<Op>(static_cast<int64_t>(Op::addS) + pick(12));
      st.s = st.op == Op::powS ? exponents[pick(5)] : scalars[pick(5)];
      if (st.op == Op::sPow) st.s = 1.5;
    } else if (cat == 5) { // compare + where
      std::vector<int> partners;
      for (int k = 0; k < static_cast<int>(vals.size()); ++k) {
        if (broadcastable(sa, d.shapes[static_cast<size_t>(k)]) &&
            numelOf(broadcastShape(sa, d.shapes[static_cast<size_t>(k)])) <= 256) {
          partners.push_back(k);
        }
      }
      st.cmp = static_cast<int>(pick(6));
      if (chance(0.5)) {
        st.op = Op::whereCmp;
        st.b = partners[static_cast<size_t>(pick(static_cast<int64_t>(partners.size())))];
      } else {
        st.op = Op::whereCmpS;
        st.s = scalars[pick(5)];
      }
    } else if (cat <= 7) { // reductions
      if (rank == 0) continue;
      st.op = static_cast<Op>(static_cast<int64_t>(Op::sum) + pick(5));
      if (st.op == Op::softmax || st.op == Op::logSoftmax) {
        st.dims = {pick(rank) - (chance(0.5) ? rank : 0)};
      } else {
        st.keepdim = chance(0.5);
        const int64_t how = pick(4);
        if (how == 0) {
          st.dims = {}; // all dims
        } else if (how == 1 || rank == 1) {
          st.dims = {pick(rank) - (chance(0.5) ? rank : 0)};
        } else {
          const int64_t x = pick(rank), y = (x + 1 + pick(rank - 1)) % rank;
          st.dims = {x, y - rank};
        }
      }
    } else { // shape ops
      const int64_t which = pick(5);
      if (which == 0 && rank >= 2) { // merge two adjacent dims, or split the last one
        const int64_t k = pick(rank - 1);
        Shape s = sa;
        s[static_cast<size_t>(k)] *= s[static_cast<size_t>(k) + 1];
        s.erase(s.begin() + k + 1);
        if (chance(0.3)) s[static_cast<size_t>(k)] = -1;
        st.op = Op::reshape;
        st.dims = s;
      } else if (which == 0 && rank == 1 && sa[0] % 2 == 0) {
        st.op = Op::reshape;
        st.dims = {2, sa[0] / 2};
      } else if (which == 1 && rank >= 2) {
        Dims p(static_cast<size_t>(rank));
        std::iota(p.begin(), p.end(), 0);
        std::shuffle(p.begin(), p.end(), rng);
        st.op = Op::permute;
        st.dims = p;
      } else if (which == 2 && rank >= 2) {
        st.op = Op::transpose;
        st.dims = {pick(rank), pick(rank) - rank};
      } else if (which == 3 && rank < 4) {
        st.op = Op::unsqueeze;
        st.dims = {pick(rank + 1)};
      } else if (which == 4 && numelOf(sa) * 3 <= 256) {
        // expand a size-1 dim to 3, or a new leading dim
        Shape s = sa;
        auto one = std::find(s.begin(), s.end(), int64_t{1});
        if (one != s.end()) {
          *one = 3;
        } else if (rank < 4) {
          s.insert(s.begin(), 3);
        } else {
          continue;
        }
        st.op = Op::expand;
        st.dims = s;
      } else {
        continue;
      }
    }
    addStep(st);
  }
  const int n = static_cast<int>(vals.size());
  d.outputs.push_back(n - 1);
  if (chance(0.5)) {
    const int other = nIn + static_cast<int>(pick(n - nIn));
    if (other != n - 1) d.outputs.push_back(other);
  }
  return d;
}

} // namespace rcjit::conformance
