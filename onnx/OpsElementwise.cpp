// ONNX elementwise ops (math, activations, comparisons, logic, Where, Cast, Clip) through
// rcjit's elementwise ops; a one-element constant operand becomes a Scalar so it fuses.
#include <cmath>

#include "onnx/Program.h"
#include "tracer/Tracer.h"

namespace rcjit::onnx {

namespace {

using TT = Tensor (*)(const Tensor &, const Tensor &);
using TS = Tensor (*)(const Tensor &, Scalar);
using ST = Tensor (*)(Scalar, const Tensor &);

// c is a host constant (OpContext::isScalarConst): read it with the tracer paused, since a
// conversion of it would otherwise be a traced op and its read a graph break
Scalar scalarOf(const Tensor &c) {
  TracerPause pause;
  if (isFloating(c.dtype())) return Scalar(c.to(DType::f64).item());
  return Scalar(static_cast<int64_t>(c.to(DType::i64).to_vector<int64_t>().at(0)));
}

// a op b with ONNX's (equal-type) operands; a one-element host constant on either side is
// passed as a Scalar when that does not change the result's rank or dtype
Tensor binary(OpContext &c, TT tt, TS ts, ST st) {
  Tensor a = c.in(0), b = c.in(1);
  if (!c.hostPass && a.dtype() == b.dtype() && a.dtype() != DType::boolean) {
    if (c.isScalarConst(1) && b.dim() <= a.dim()) return ts(a, scalarOf(b));
    if (c.isScalarConst(0) && a.dim() <= b.dim()) return st(scalarOf(a), b);
  }
  return tt(a, b);
}

#define RCJIT_BIN(name)                                                                            \
  static_cast<TT>(&rcjit::name), static_cast<TS>(&rcjit::name), static_cast<ST>(&rcjit::name)

Tensor divide(OpContext &c) {
  Tensor q = binary(c, RCJIT_BIN(div));
  DType t = c.in(0).dtype();
  return isIntegral(t) ? q.to(t) : q; // integer division truncates, like C
}

// Pow(a, b): the result has a's type; an integer base with a floating exponent is computed
// in f64 and truncated, as onnxruntime does (3 ** 2.5 is 15, not 3 ** 2)
Tensor power(OpContext &c) {
  Tensor a = c.in(0), b = c.in(1);
  if (isIntegral(a.dtype()) && isFloating(b.dtype())) {
    return pow(a.to(DType::f64), b.to(DType::f64)).to(a.dtype());
  }
  if (c.isScalarConst(1) && !c.hostPass && b.dim() <= a.dim()) { // the result's rank is a's
    double e = c.scalar(1);
    if (e == 2.0) return a * a;
    if (e == 0.5 && isFloating(a.dtype())) return sqrt(a);
    return pow(a, isFloating(a.dtype()) ? Scalar(e) : Scalar(static_cast<int64_t>(e)));
  }
  return pow(a, b.to(a.dtype()));
}

Tensor boolInts(const Tensor &x) { return x.to(DType::i32); }

Tensor variadic(OpContext &c, TT f) {
  Tensor acc = c.in(0);
  for (size_t i = 1; i < c.size(); ++i) acc = f(acc, c.in(i));
  return acc;
}

Tensor geluTanh(const Tensor &x) {
  Tensor inner = (x + x * x * x * 0.044715) * 0.7978845608028654;
  return x * 0.5 * (tanh(inner) + 1.0);
}

Tensor softplus(const Tensor &x) { return log(exp(x) + 1.0); }

Tensor clip(OpContext &c) {
  Tensor x = c.in(0);
  bool hasMin, hasMax;
  double lo = -INFINITY, hi = INFINITY;
  if (c.opset() < 11) {
    hasMin = c.hasAttr("min");
    hasMax = c.hasAttr("max");
    lo = c.attrFloat("min", lo);
    hi = c.attrFloat("max", hi);
  } else {
    hasMin = c.has(1);
    hasMax = c.has(2);
    if (hasMin) lo = c.scalar(1);
    if (hasMax) hi = c.scalar(2);
  }
  auto s = [&](double v) {
    return isFloating(x.dtype()) ? Scalar(v) : Scalar(static_cast<int64_t>(v));
  };
  if (hasMin) x = maximum(x, s(lo));
  if (hasMax) x = minimum(x, s(hi));
  return x;
}

DType castTarget(OpContext &c) {
  return dtypeFromOnnx(static_cast<int32_t>(c.attrInt("to", 1)), "Cast");
}

} // namespace

void addElementwiseOps(OpTable &t) {
  auto unary = [&](const char *name, Tensor (*f)(const Tensor &)) {
    t.push_back({std::string(":") + name, {[f](OpContext &c) { return one(f(c.in(0))); }}});
  };
  auto op = [&](const char *name, OpFn f) {
    t.push_back({std::string(":") + name, {std::move(f)}});
  };
  unary("Neg", &rcjit::neg);
  unary("Abs", &rcjit::abs);
  unary("Exp", &rcjit::exp);
  unary("Log", &rcjit::log);
  unary("Sqrt", &rcjit::sqrt);
  unary("Reciprocal", &rcjit::reciprocal);
  unary("Tanh", &rcjit::tanh);
  unary("Sigmoid", &rcjit::sigmoid);
  unary("Relu", &rcjit::relu);
  unary("Erf", &rcjit::erf);
  unary("Sin", &rcjit::sin);
  unary("Cos", &rcjit::cos);
  op("Tan", [](OpContext &c) { return one(sin(c.in(0)) / cos(c.in(0))); });
  op("Identity", [](OpContext &c) { return one(c.in(0)); });
  op("Sinh", [](OpContext &c) { return one((exp(c.in(0)) - exp(neg(c.in(0)))) * 0.5); });
  op("Cosh", [](OpContext &c) { return one((exp(c.in(0)) + exp(neg(c.in(0)))) * 0.5); });
  op("Asinh", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(log(x + sqrt(x * x + 1.0)));
  });
  op("Acosh", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(log(x + sqrt(x * x - 1.0)));
  });
  op("Atanh", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(log((x + 1.0) / (1.0 - x)) * 0.5);
  });
  op("IsNaN", [](OpContext &c) { return one(ne(c.in(0), c.in(0))); });
  op("IsInf", [](OpContext &c) {
    Tensor x = c.in(0);
    bool pos = c.attrInt("detect_positive", 1) != 0, negv = c.attrInt("detect_negative", 1) != 0;
    Tensor p = eq(x, INFINITY).to(DType::i32), n = eq(x, -INFINITY).to(DType::i32);
    Tensor hit = pos && negv ? p + n : (pos ? p : n);
    return one(gt(hit, 0));
  });
  // floor and ceil through truncation (a cast to i64), exact for |x| < 2^63
  op("Floor", [](OpContext &c) {
    Tensor x = c.in(0), t = x.to(DType::i64).to(x.dtype());
    return one(t - gt(t, x).to(x.dtype()));
  });
  op("Ceil", [](OpContext &c) {
    Tensor x = c.in(0), t = x.to(DType::i64).to(x.dtype());
    return one(t + lt(t, x).to(x.dtype()));
  });
  op("Softplus", [](OpContext &c) { return one(softplus(c.in(0))); });
  op("Softsign", [](OpContext &c) { return one(c.in(0) / (abs(c.in(0)) + 1.0)); });
  op("Mish", [](OpContext &c) { return one(c.in(0) * tanh(softplus(c.in(0)))); });
  op("Sign", [](OpContext &c) {
    Tensor x = c.in(0);
    return one((gt(x, 0).to(x.dtype()) - lt(x, 0).to(x.dtype())));
  });
  op("Gelu", [](OpContext &c) {
    std::string approx = c.attrString("approximate", "none");
    if (approx == "tanh") return one(geluTanh(c.in(0)));
    if (approx != "none") c.fail("approximate '" + approx + "' is not 'none' or 'tanh'");
    return one(gelu(c.in(0)));
  });
  op("LeakyRelu", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(where(lt(x, 0), x * c.attrFloat("alpha", 0.01), x));
  });
  op("PRelu", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(where(lt(x, 0), x * c.in(1), x));
  });
  op("Elu", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(where(gt(x, 0), x, (exp(x) - 1.0) * c.attrFloat("alpha", 1.0)));
  });
  op("Celu", [](OpContext &c) {
    Tensor x = c.in(0);
    double a = c.attrFloat("alpha", 1.0);
    return one(maximum(x, 0.0) + minimum((exp(x / a) - 1.0) * a, 0.0));
  });
  op("Selu", [](OpContext &c) {
    Tensor x = c.in(0);
    double a = c.attrFloat("alpha", 1.67326319217681884765625);
    double g = c.attrFloat("gamma", 1.05070102214813232421875);
    return one(where(gt(x, 0), x * g, (exp(x) - 1.0) * (a * g)));
  });
  op("ThresholdedRelu", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(where(gt(x, c.attrFloat("alpha", 1.0)), x, 0.0));
  });
  op("HardSigmoid", [](OpContext &c) {
    Tensor x = c.in(0);
    Tensor y = x * c.attrFloat("alpha", 0.2) + c.attrFloat("beta", 0.5);
    return one(minimum(maximum(y, 0.0), 1.0));
  });
  op("HardSwish", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(x * minimum(maximum(x * (1.0 / 6) + 0.5, 0.0), 1.0));
  });
}

void addBinaryOps(OpTable &t) {
  auto op = [&](const char *name, OpFn f) {
    t.push_back({std::string(":") + name, {std::move(f)}});
  };
  op("Clip", [](OpContext &c) { return one(clip(c)); });
  op("Add", [](OpContext &c) { return one(binary(c, RCJIT_BIN(add))); });
  op("Sub", [](OpContext &c) { return one(binary(c, RCJIT_BIN(sub))); });
  op("Mul", [](OpContext &c) { return one(binary(c, RCJIT_BIN(mul))); });
  op("Div", [](OpContext &c) { return one(divide(c)); });
  op("Pow", [](OpContext &c) { return one(power(c)); });
  op("Equal", [](OpContext &c) { return one(binary(c, RCJIT_BIN(eq))); });
  op("Less", [](OpContext &c) { return one(binary(c, RCJIT_BIN(lt))); });
  op("LessOrEqual", [](OpContext &c) { return one(binary(c, RCJIT_BIN(le))); });
  op("Greater", [](OpContext &c) { return one(binary(c, RCJIT_BIN(gt))); });
  op("GreaterOrEqual", [](OpContext &c) { return one(binary(c, RCJIT_BIN(ge))); });
  op("Max", [](OpContext &c) { return one(variadic(c, &rcjit::maximum)); });
  op("Min", [](OpContext &c) { return one(variadic(c, &rcjit::minimum)); });
  op("Sum", [](OpContext &c) { return one(variadic(c, &rcjit::add)); });
  op("Mean",
     [](OpContext &c) { return one(variadic(c, &rcjit::add) / static_cast<double>(c.size())); });
  op("Not", [](OpContext &c) { return one(eq(boolInts(c.in(0)), 0)); });
  op("And", [](OpContext &c) { return one(eq(boolInts(c.in(0)) + boolInts(c.in(1)), 2)); });
  op("Or", [](OpContext &c) { return one(gt(boolInts(c.in(0)) + boolInts(c.in(1)), 0)); });
  op("Xor", [](OpContext &c) { return one(ne(boolInts(c.in(0)), boolInts(c.in(1)))); });
  op("Where", [](OpContext &c) {
    Tensor a = c.in(1), b = c.in(2);
    if (!c.hostPass && a.dtype() == b.dtype() && a.dtype() != DType::boolean) {
      if (c.isScalarConst(2) && b.dim() <= a.dim()) return one(where(c.in(0), a, scalarOf(b)));
      if (c.isScalarConst(1) && a.dim() <= b.dim()) return one(where(c.in(0), scalarOf(a), b));
    }
    return one(where(c.in(0), a, b));
  });
  op("Cast", [](OpContext &c) { return one(c.in(0).to(castTarget(c))); });
  op("CastLike", [](OpContext &c) { return one(c.in(0).to(c.in(1).dtype())); });
  op("Dropout", [](OpContext &c) {
    if (c.attrInt("training_mode", 0) != 0 || (c.has(2) && c.scalar(2) != 0)) {
      c.fail("training mode dropout is not supported (inference only)");
    }
    Tensor x = c.in(0);
    return std::vector<Tensor>{x, Tensor::full(x.shape(), 1, DType::boolean)};
  });
}

} // namespace rcjit::onnx
