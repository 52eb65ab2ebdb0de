// ONNX linear algebra, normalization, reduction and convolution ops through rcjit's ops.
#include <algorithm>
#include <cmath>

#include "onnx/Program.h"

namespace rcjit::onnx {

namespace {

Tensor gemmOp(OpContext &c) {
  Tensor a = c.in(0), b = c.in(1);
  double alpha = c.attrFloat("alpha", 1.0), beta = c.attrFloat("beta", 1.0);
  bool ta = c.attrInt("transA", 0) != 0, tb = c.attrInt("transB", 0) != 0;
  if (a.dim() != 2 || b.dim() != 2) c.fail("A and B must be 2-D");
  if (ta) a = transpose(a, 0, 1);
  Tensor bias = c.has(2) ? c.in(2) : Tensor();
  Tensor y;
  if (tb && alpha == 1.0 && bias.defined() && beta == 1.0 && bias.dim() == 1 &&
      bias.size(0) == b.size(0)) {
    return linear(a, b, bias); // x w^T + b: one library call with its bias
  }
  y = tb ? linear(a, b) : matmul(a, b);
  if (alpha != 1.0) y = y * alpha;
  if (bias.defined()) y = y + (beta == 1.0 ? bias : bias * beta);
  return y;
}

std::vector<Tensor> softmaxOp(OpContext &c, bool logarithm) {
  Tensor x = c.in(0);
  int64_t r = x.dim();
  int64_t a = c.axis(c.attrInt("axis", c.opset() < 13 ? 1 : -1), r);
  auto f = [&](const Tensor &v, int64_t d) {
    return logarithm ? log_softmax(v, d) : softmax(v, d);
  };
  if (c.opset() >= 13 || a == r - 1) return one(f(x, a));
  int64_t outer = 1; // before 13: softmax of the 2-D [outer, inner] coercion
  for (int64_t d = 0; d < a; ++d) outer *= x.size(static_cast<int>(d));
  return one(reshape(f(reshape(x, {outer, -1}), 1), x.shape()));
}

std::vector<Tensor> layerNormOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t r = x.dim(), a = c.axis(c.attrInt("axis", -1), r);
  double eps = c.attrFloat("epsilon", 1e-5);
  Shape normShape(x.shape().begin() + a, x.shape().end());
  Tensor w = c.in(1), b = c.has(2) ? c.in(2) : Tensor();
  if (w.shape() != normShape) w = expand(reshape(w, w.shape()), normShape);
  if (b.defined() && b.shape() != normShape) b = expand(b, normShape);
  std::vector<Tensor> out{layer_norm(x, w, b, eps)};
  bool stats = false;
  for (size_t i = 1; i < c.node.out.size(); ++i) stats = stats || c.node.out[i] >= 0;
  if (stats) {
    Dims dims;
    for (int64_t d = a; d < r; ++d) dims.push_back(d);
    Tensor mu = mean(x, dims, true);
    Tensor var = mean((x - mu) * (x - mu), dims, true);
    out.push_back(mu);
    out.push_back(rsqrt(var + eps));
  }
  return out;
}

Tensor rmsNormOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t r = x.dim(), a = c.axis(c.attrInt("axis", -1), r);
  double eps = c.attrFloat("epsilon", 1e-5);
  Shape normShape(x.shape().begin() + a, x.shape().end());
  Tensor w = c.in(1);
  if (w.shape() != normShape) w = expand(w, normShape);
  return rms_norm(x, w, eps);
}

// the axes of a reduction: an attribute before opset `inputFrom`, the second input after
std::vector<Tensor> reduceOp(OpContext &c, int inputFrom, const std::string &kind) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes;
  if (c.opset() >= inputFrom) {
    if (c.has(1)) axes = c.ints(1);
  } else {
    axes = c.attrInts("axes");
  }
  bool keep = c.attrInt("keepdims", 1) != 0;
  if (axes.empty() && c.attrInt("noop_with_empty_axes", 0) != 0) return one(x);
  if (axes.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) axes.push_back(d);
  }
  for (int64_t &a : axes) a = c.axis(a, x.dim());
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  DType t = x.dtype();
  auto back = [&](const Tensor &y) { return y.to(t); };
  if (kind == "sum") return one(back(sum(x, axes, keep)));
  if (kind == "mean") return one(mean(x, axes, keep));
  if (kind == "max") return one(amax(x, axes, keep));
  if (kind == "min") return one(neg(amax(neg(x), axes, keep)));
  if (kind == "l1") return one(back(sum(abs(x), axes, keep)));
  if (kind == "l2") return one(sqrt(sum(x * x, axes, keep)));
  if (kind == "sumsquare") return one(back(sum(x * x, axes, keep)));
  if (kind == "logsum") return one(log(sum(x, axes, keep)));
  // logsumexp, shifted by the max for range
  Tensor m = amax(x, axes, true);
  Tensor s = log(sum(exp(x - m), axes, true)) + m;
  if (!keep) {
    for (auto it = axes.rbegin(); it != axes.rend(); ++it) s = squeeze(s, *it);
  }
  return one(s);
}

Tensor argOp(OpContext &c, bool isMin) {
  Tensor x = c.in(0);
  if (c.attrInt("select_last_index", 0) != 0) c.fail("select_last_index=1 is not supported");
  int64_t a = c.axis(c.attrInt("axis", 0), x.dim());
  return argmax(isMin ? neg(x) : x, a, c.attrInt("keepdims", 1) != 0);
}

Tensor batchNormOp(OpContext &c) {
  Tensor x = c.in(0);
  if (c.attrInt("training_mode", 0) != 0) c.fail("training_mode=1 is not supported");
  if (c.node.out.size() > 1) c.fail("only the inference form (one output) is supported");
  double eps = c.attrFloat("epsilon", 1e-5);
  Shape s(static_cast<size_t>(std::max(x.dim() - 1, 1)), 1);
  s[0] = -1;
  auto shaped = [&](const Tensor &v) { return reshape(v, s); };
  Tensor scale = shaped(c.in(1)) * rsqrt(shaped(c.in(4)) + eps);
  return (x - shaped(c.in(3))) * scale + shaped(c.in(2));
}

bool allEqual(const std::vector<int64_t> &v, int64_t want) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == want; });
}

Tensor convOp(OpContext &c) {
  Tensor x = c.in(0), w = c.in(1);
  if (x.dim() != 4) c.fail("only 2-D convolution (NCHW input) is supported");
  if (c.attrInt("group", 1) != 1) c.fail("group != 1 is not supported");
  std::string pad = c.attrString("auto_pad", "NOTSET");
  std::vector<int64_t> strides = c.attrInts("strides"), pads = c.attrInts("pads");
  if (!allEqual(c.attrInts("dilations"), 1)) c.fail("dilations other than 1 are not supported");
  int64_t stride = strides.empty() ? 1 : strides[0];
  if (!allEqual(strides, stride)) c.fail("unequal strides are not supported");
  int64_t p = pads.empty() ? 0 : pads[0];
  if (pad == "VALID")
    p = 0;
  else if (pad != "NOTSET") {
    if (stride != 1 || w.size(2) != w.size(3) || w.size(2) % 2 == 0) {
      c.fail("auto_pad " + pad + " is supported for stride 1 and odd square kernels only");
    }
    p = (w.size(2) - 1) / 2;
  }
  if (!allEqual(pads, p)) c.fail("unequal pads are not supported");
  return conv2d(x, w, c.has(2) ? c.in(2) : Tensor(), stride, p);
}

} // namespace

void addNnOps(OpTable &t) {
  auto op = [&](const char *name, OpFn f) {
    t.push_back({std::string(":") + name, {std::move(f)}});
  };
  op("MatMul", [](OpContext &c) { return one(matmul(c.in(0), c.in(1))); });
  op("Gemm", [](OpContext &c) { return one(gemmOp(c)); });
  op("Softmax", [](OpContext &c) { return softmaxOp(c, false); });
  op("LogSoftmax", [](OpContext &c) { return softmaxOp(c, true); });
  op("LayerNormalization", [](OpContext &c) { return layerNormOp(c); });
  op("RMSNormalization", [](OpContext &c) { return one(rmsNormOp(c)); });
  op("ReduceSum", [](OpContext &c) { return reduceOp(c, 13, "sum"); });
  op("ReduceMean", [](OpContext &c) { return reduceOp(c, 18, "mean"); });
  op("ReduceMax", [](OpContext &c) { return reduceOp(c, 18, "max"); });
  op("ReduceMin", [](OpContext &c) { return reduceOp(c, 18, "min"); });
  op("ReduceL1", [](OpContext &c) { return reduceOp(c, 18, "l1"); });
  op("ReduceL2", [](OpContext &c) { return reduceOp(c, 18, "l2"); });
  op("ReduceSumSquare", [](OpContext &c) { return reduceOp(c, 18, "sumsquare"); });
  op("ReduceLogSum", [](OpContext &c) { return reduceOp(c, 18, "logsum"); });
  op("ReduceLogSumExp", [](OpContext &c) { return reduceOp(c, 18, "logsumexp"); });
  op("ArgMax", [](OpContext &c) { return one(argOp(c, false)); });
  op("ArgMin", [](OpContext &c) { return one(argOp(c, true)); });
  op("BatchNormalization", [](OpContext &c) { return one(batchNormOp(c)); });
  op("Conv", [](OpContext &c) { return one(convOp(c)); });
  op("GlobalMaxPool", [](OpContext &c) {
    Tensor x = c.in(0);
    Dims dims;
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    return one(amax(x, dims, true));
  });
  op("GlobalAveragePool", [](OpContext &c) {
    Tensor x = c.in(0);
    Dims dims;
    for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
    return one(mean(x, dims, true));
  });
}

} // namespace rcjit::onnx
