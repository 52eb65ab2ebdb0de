// ONNX shape and data-movement ops: Shape, Reshape, Gather, Slice, Concat, Range, Expand,
// Trilu, CumSum, ...; sizes are read on the host (constants while tracing), data moves
// through rcjit's view ops and embedding (a row gather).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "onnx/Program.h"
#include "tracer/Tracer.h"

namespace rcjit::onnx {

namespace {

int64_t clampIndex(int64_t i, int64_t n) { return std::min(std::max(i, int64_t(0)), n); }

// x gathered along `axis` by integer indices (negative ones count from the end): the
// rows of a [n, rest] view picked by embedding, then the dims put back in ONNX's order,
// x.shape[:axis] + idx.shape + x.shape[axis+1:]
// (indices known to be non-negative skip the wrapping: it would put the size in the graph)
Tensor gatherAxis(const Tensor &x, Tensor idx, int64_t axis, bool nonNegative = false) {
  int64_t n = x.size(static_cast<int>(axis)), r = x.dim();
  if (!isIntegral(idx.dtype())) idx = idx.to(DType::i64);
  if (!nonNegative) idx = where(lt(idx, 0), idx + n, idx);
  Dims perm{axis};
  Shape others;
  for (int64_t d = 0; d < r; ++d) {
    if (d == axis) continue;
    perm.push_back(d);
    others.push_back(x.size(static_cast<int>(d)));
  }
  int64_t rest = 1;
  for (int64_t s : others) rest *= s;
  Tensor rows = reshape(axis == 0 ? x : permute(x, perm), {n, rest});
  Tensor e = embedding(rows, idx); // idx.shape + [rest]
  Shape full = idx.shape();
  full.insert(full.end(), others.begin(), others.end());
  e = reshape(e, full);
  int64_t k = idx.dim();
  if (axis == 0) return e;
  Dims order; // before (k.. k+axis), idx (0..k), after
  for (int64_t d = 0; d < axis; ++d) order.push_back(k + d);
  for (int64_t d = 0; d < k; ++d) order.push_back(d);
  for (int64_t d = axis; d < r - 1; ++d) order.push_back(k + d);
  return permute(e, order);
}

// n as a traced value (the sum of n ones) rather than a number in the graph: under dynamic
// shapes it follows the symbolic size instead of fixing it
Tensor sizeValue(int64_t n) { return sum(Tensor::ones({n}, DType::i64)); }

Tensor fixNegative(Tensor idx, int64_t n, bool nonNegative) {
  if (!isIntegral(idx.dtype())) idx = idx.to(DType::i64);
  if (nonNegative) return idx;
  return where(lt(idx, 0), idx + sizeValue(n), idx);
}

// data[idx[..., 0], ..., idx[..., k-1]] (batch_dims 0): the first k dims flattened, then
// rows gathered by the linear index
Tensor gatherNdOp(OpContext &c) {
  Tensor x = c.in(0), idx = c.in(1);
  if (c.attrInt("batch_dims", 0) != 0) c.fail("batch_dims != 0 is not supported");
  int64_t k = idx.size(-1);
  if (k < 1 || k > x.dim()) c.fail("the last dim of indices must be in [1, rank(data)]");
  Shape rows{1};
  for (int64_t d = 0; d < k; ++d) rows[0] *= x.size(static_cast<int>(d));
  Shape rest(x.shape().begin() + k, x.shape().end());
  Shape flat = rows;
  flat.insert(flat.end(), rest.begin(), rest.end());
  Tensor lin;
  bool nonNeg = c.knownNonNegative(1);
  for (int64_t j = 0; j < k; ++j) {
    int64_t n = x.size(static_cast<int>(j));
    Tensor part = fixNegative(squeeze(slice(idx, -1, j, j + 1), -1), n, nonNeg);
    lin = lin.defined() ? lin * sizeValue(n) + part : part;
  }
  return gatherAxis(reshape(x, flat), lin, 0, true);
}

// out[p] = data[p with dim `axis` replaced by idx[p]]: a linear index into the flat data
Tensor gatherElementsOp(OpContext &c) {
  Tensor x = c.in(0), idx = c.in(1);
  int64_t r = x.dim(), a = c.axis(c.attrInt("axis", 0), r);
  if (idx.dim() != r) c.fail("indices must have the rank of data");
  // the linear index, Horner style over the dims: ((c0 * n1 + c1) * n2 + c2) ...
  Tensor lin;
  for (int64_t d = 0; d < r; ++d) {
    Tensor coord;
    if (d == a) {
      coord = fixNegative(idx, x.size(static_cast<int>(a)), c.knownNonNegative(1));
    } else {
      Shape s(r, 1);
      s[d] = idx.size(static_cast<int>(d));
      coord = reshape(Tensor::arange(s[d]), s);
    }
    lin = lin.defined() ? lin * sizeValue(x.size(static_cast<int>(d))) + coord : coord;
  }
  Tensor e = embedding(reshape(x, {x.numel(), 1}), lin);
  return squeeze(e, -1);
}

Tensor indexTensor(const std::vector<int64_t> &v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
}

// [s, e) along `axis` of a traced Concat's result from the parts it covers, or undefined
// when the input is no such Concat
Tensor sliceOfCat(OpContext &c, int64_t axis, int64_t s, int64_t e) {
  const Value *v = c.ins.at(0);
  if (c.hostPass || !v || v->catAxis != axis || v->catParts.empty() || e <= s) return Tensor();
  std::vector<Tensor> picked;
  int64_t at = 0;
  for (const Tensor &p : v->catParts) {
    int64_t n = p.size(static_cast<int>(axis));
    int64_t lo = std::max(s, at), hi = std::min(e, at + n);
    if (lo < hi) picked.push_back(lo == at && hi == at + n ? p : slice(p, axis, lo - at, hi - at));
    at += n;
  }
  return picked.size() == 1 ? picked[0] : cat(picked, axis);
}

Tensor sliceOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attrInts("starts");
    ends = c.attrInts("ends");
    axes = c.attrInts("axes");
  } else {
    starts = c.ints(1);
    ends = c.ints(2);
    if (c.has(3)) axes = c.ints(3);
    if (c.has(4)) steps = c.ints(4);
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    c.fail("starts, ends, axes and steps differ in length");
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = c.axis(axes[i], x.dim()), n = x.size(static_cast<int>(a)), st = steps[i];
    if (st == 0) c.fail("a step of 0");
    int64_t s = starts[i] < 0 ? starts[i] + n : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + n : ends[i];
    if (st > 0) {
      s = clampIndex(s, n);
      e = clampIndex(e, n);
      if (st == 1) {
        Tensor fromCat = i == 0 ? sliceOfCat(c, a, s, std::max(s, e)) : Tensor();
        x = fromCat.defined() ? fromCat : slice(x, a, s, std::max(s, e));
        continue;
      }
    } else {
      s = std::min(std::max(s, int64_t(-1)), n - 1);
      e = std::min(std::max(e, int64_t(-1)), n - 1);
    }
    std::vector<int64_t> picks;
    for (int64_t j = s; st > 0 ? j < e : j > e; j += st) picks.push_back(j);
    if (picks.empty()) {
      Shape shape = x.shape();
      shape[a] = 0;
      x = reshape(slice(x, a, 0, 0), shape);
    } else {
      x = gatherAxis(x, indexTensor(picks), a);
    }
  }
  return x;
}

std::vector<int64_t> axesOf(OpContext &c, int fromOpset) {
  if (c.opset() >= fromOpset) return c.has(1) ? c.ints(1) : std::vector<int64_t>{};
  return c.attrInts("axes");
}

Tensor unsqueezeOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axesOf(c, 13);
  int64_t r = x.dim() + static_cast<int64_t>(axes.size());
  for (int64_t &a : axes) a = c.axis(a, r);
  std::sort(axes.begin(), axes.end());
  for (int64_t a : axes) x = unsqueeze(x, a);
  return x;
}

Tensor squeezeOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> axes = axesOf(c, 13);
  if (axes.empty()) {
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (x.size(static_cast<int>(d)) == 1) axes.push_back(d);
    }
  }
  for (int64_t &a : axes) a = c.axis(a, x.dim());
  std::sort(axes.rbegin(), axes.rend());
  for (int64_t a : axes) {
    if (x.size(static_cast<int>(a)) != 1)
      c.fail("cannot squeeze dim " + std::to_string(a) + " of shape " + shapeStr(x.shape()));
    x = squeeze(x, a);
  }
  return x;
}

Tensor reshapeOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> shape = c.ints(1);
  bool allowzero = c.attrInt("allowzero", 0) != 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      if (static_cast<int64_t>(i) >= x.dim()) c.fail("a 0 in the shape past the input's rank");
      shape[i] = x.size(static_cast<int>(i));
    }
  }
  return reshape(x, shape);
}

Tensor expandOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> shape = c.ints(1);
  size_t r = std::max(shape.size(), static_cast<size_t>(x.dim()));
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t a = i + x.dim() >= r ? x.size(static_cast<int>(i + x.dim() - r)) : 1;
    int64_t b = i + shape.size() >= r ? shape[i + shape.size() - r] : 1;
    if (a != b && a != 1 && b != 1)
      c.fail("cannot expand " + shapeStr(x.shape()) + " to " + shapeStr(shape));
    out[i] = a == 1 ? b : a;
  }
  return expand(x, out);
}

Tensor rangeOp(OpContext &c) {
  double start = c.scalar(0), limit = c.scalar(1), delta = c.scalar(2);
  if (delta == 0) c.fail("delta is 0");
  int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((limit - start) / delta)), 0);
  DType dt = c.in(0).dtype();
  Tensor r = Tensor::arange(n, isFloating(dt) ? DType::f32 : DType::i64);
  if (delta != 1) r = isFloating(dt) ? r * delta : r * static_cast<int64_t>(delta);
  if (start != 0) r = isFloating(dt) ? r + start : r + static_cast<int64_t>(start);
  return r.to(dt);
}

Tensor constantOp(OpContext &c) {
  Tensor v = c.attrTensor("value");
  if (v.defined()) return v;
  if (c.hasAttr("value_float")) return Tensor::full({}, c.attrFloat("value_float", 0));
  if (c.hasAttr("value_int")) return Tensor::full({}, 0, DType::i64) + c.attrInt("value_int", 0);
  if (c.hasAttr("value_floats")) {
    const auto &f = c.attr("value_floats")->floats;
    return Tensor::from_vector(f, {static_cast<int64_t>(f.size())});
  }
  if (c.hasAttr("value_ints")) return indexTensor(c.attrInts("value_ints"));
  c.fail("no value attribute rcjit can read (value, value_float(s), value_int(s))");
}

// ones in the kept triangle: col - row >= k (upper) or <= k (lower)
Tensor triluOp(OpContext &c) {
  Tensor x = c.in(0);
  if (x.dim() < 2) c.fail("input must have rank >= 2");
  int64_t k = c.has(1) ? c.ints(1).at(0) : 0;
  int64_t n = x.size(-2), m = x.size(-1);
  Tensor rows = unsqueeze(Tensor::arange(n), 1), cols = unsqueeze(Tensor::arange(m), 0);
  Tensor diff = cols - rows;
  Tensor keep = c.attrInt("upper", 1) ? ge(diff, k) : le(diff, k);
  Tensor zero = Tensor::zeros({}, x.dtype());
  return where(keep, x, zero);
}

// a running sum as a product with a triangular matrix of ones; integers (positions from an
// attention mask) as a masked sum instead, exact and with no matmul whose lowering depends
// on the size
Tensor cumsumOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t a = c.axis(c.ints(1).at(0), x.dim());
  int64_t n = x.size(static_cast<int>(a));
  bool exclusive = c.attrInt("exclusive", 0) != 0, reverse = c.attrInt("reverse", 0) != 0;
  Tensor rows = unsqueeze(Tensor::arange(n), 1), cols = unsqueeze(Tensor::arange(n), 0);
  // out[j] = sum_i x[i] * m[i, j]
  Tensor m = reverse ? (exclusive ? gt(rows, cols) : ge(rows, cols))
                     : (exclusive ? lt(rows, cols) : le(rows, cols));
  Tensor moved = transpose(x, a, x.dim() - 1);
  Tensor out;
  if (isFloating(x.dtype())) {
    out = matmul(moved, m.to(x.dtype()));
  } else {
    out = sum(unsqueeze(moved, -1) * m.to(x.dtype()), {moved.dim() - 1}).to(x.dtype());
  }
  return transpose(out, a, x.dim() - 1);
}

std::vector<Tensor> splitOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t a = c.axis(c.attrInt("axis", 0), x.dim()), n = x.size(static_cast<int>(a));
  std::vector<int64_t> sizes =
      c.opset() >= 13 ? (c.has(1) ? c.ints(1) : std::vector<int64_t>{}) : c.attrInts("split");
  if (sizes.empty()) {
    int64_t parts = c.hasAttr("num_outputs") ? c.attrInt("num_outputs", 1)
                                             : static_cast<int64_t>(c.node.out.size());
    if (parts <= 0) c.fail("no outputs");
    int64_t each = (n + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(each, n - i * each)));
  }
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    if (s < 0 || at + s > n) c.fail("split sizes do not fit dim " + std::to_string(n));
    out.push_back(slice(x, a, at, at + s));
    at += s;
  }
  if (at != n)
    c.fail("split sizes sum to " + std::to_string(at) + ", the dim is " + std::to_string(n));
  return out;
}

Tensor shapeOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t r = x.dim();
  int64_t s = c.attrInt("start", 0), e = c.attrInt("end", r);
  s = clampIndex(s < 0 ? s + r : s, r);
  e = clampIndex(e < 0 ? e + r : e, r);
  std::vector<int64_t> dims(x.shape().begin() + s, x.shape().begin() + std::max(s, e));
  if (!c.tracedSizes || dims.empty()) return indexTensor(dims);
  std::vector<Tensor> parts;
  for (int64_t n : dims) parts.push_back(reshape(sizeValue(n), {1}));
  return parts.size() == 1 ? parts[0] : cat(parts, 0);
}

Tensor flattenOp(OpContext &c) {
  Tensor x = c.in(0);
  int64_t r = x.dim(), a = c.attrInt("axis", 1);
  if (a < 0) a += r;
  if (a < 0 || a > r) c.fail("axis out of range");
  int64_t outer = 1;
  for (int64_t d = 0; d < a; ++d) outer *= x.size(static_cast<int>(d));
  return reshape(x, {outer, -1});
}

Tensor tileOp(OpContext &c) {
  Tensor x = c.in(0);
  std::vector<int64_t> reps = c.ints(1);
  if (static_cast<int64_t>(reps.size()) != x.dim()) c.fail("repeats must have one entry per dim");
  for (size_t d = 0; d < reps.size(); ++d) {
    if (reps[d] == 1) continue;
    if (reps[d] < 1) c.fail("repeats must be positive");
    x = cat(std::vector<Tensor>(reps[d], x), static_cast<int64_t>(d));
  }
  return x;
}

} // namespace

void addShapeOps(OpTable &t) {
  auto op = [&](const char *name, OpFn f, bool sizes = false, bool reads = false) {
    t.push_back({std::string(":") + name, {std::move(f), sizes, reads}});
  };
  op(
      "Shape", [](OpContext &c) { return one(shapeOp(c)); }, false, true);
  op(
      "Size",
      [](OpContext &c) {
        int64_t n = c.in(0).numel();
        return one(c.tracedSizes ? sizeValue(n) : Tensor::full({}, 0, DType::i64) + n);
      },
      false, true);
  op("Reshape", [](OpContext &c) { return one(reshapeOp(c)); });
  op("Flatten", [](OpContext &c) { return one(flattenOp(c)); });
  op("Transpose", [](OpContext &c) {
    Tensor x = c.in(0);
    std::vector<int64_t> perm = c.attrInts("perm");
    if (perm.empty()) {
      for (int64_t d = x.dim(); d-- > 0;) perm.push_back(d);
    }
    return one(permute(x, perm));
  });
  op("Unsqueeze", [](OpContext &c) { return one(unsqueezeOp(c)); });
  op("Squeeze", [](OpContext &c) { return one(squeezeOp(c)); });
  op("Expand", [](OpContext &c) { return one(expandOp(c)); });
  op("Slice", [](OpContext &c) { return one(sliceOp(c)); });
  op("Concat", [](OpContext &c) {
    std::vector<Tensor> xs;
    for (size_t i = 0; i < c.size(); ++i) xs.push_back(c.in(i));
    if (xs.empty()) c.fail("no inputs");
    return one(cat(xs, c.axis(c.attrInt("axis", 0), xs[0].dim())));
  });
  op("Split", [](OpContext &c) { return splitOp(c); });
  op("Gather", [](OpContext &c) {
    Tensor x = c.in(0);
    return one(
        gatherAxis(x, c.in(1), c.axis(c.attrInt("axis", 0), x.dim()), c.knownNonNegative(1)));
  });
  op("GatherND", [](OpContext &c) { return one(gatherNdOp(c)); });
  op("GatherElements", [](OpContext &c) { return one(gatherElementsOp(c)); });
  op(
      "Range", [](OpContext &c) { return one(rangeOp(c)); }, true);
  op(
      "ConstantOfShape",
      [](OpContext &c) {
        std::vector<int64_t> shape = c.ints(0);
        Tensor v = c.attrTensor("value");
        if (!v.defined()) return one(Tensor::zeros(shape));
        if (v.numel() != 1) c.fail("value must hold one element");
        double fill = 0;
        {
          TracerPause pause; // the attribute is a host constant: reading it is no graph break
          fill = isFloating(v.dtype())
                     ? v.to(DType::f64).item()
                     : static_cast<double>(v.to(DType::i64).to_vector<int64_t>()[0]);
        }
        return one(Tensor::full(shape, fill, v.dtype()));
      },
      true);
  op("Constant", [](OpContext &c) { return one(constantOp(c)); });
  op("Trilu", [](OpContext &c) { return one(triluOp(c)); });
  op("CumSum", [](OpContext &c) { return one(cumsumOp(c)); });
  op("Tile", [](OpContext &c) { return one(tileOp(c)); });
}

} // namespace rcjit::onnx
