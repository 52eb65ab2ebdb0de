// The eager target's library calls: matmul, linear and conv2d (oneDNN; f64/ints by loops).
#include <algorithm>
#include <cassert>
#include <string>

#include <rcjit/Error.h>

#include "targets/eager/DnnlContext.h"
#include "targets/eager/Eager.h"
#include "tracer/OpCases.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {
namespace {

/// A contiguous copy of t (same dtype), or t itself when it already is contiguous.
Tensor contiguousOf(const Tensor &t) {
  if (t.is_contiguous()) return t;
  Tensor c = detail::makeTensor(t.shape(), t.dtype());
  copyInto(c, t);
  return c;
}

// ---- blocked loops for f64 and integer dtypes ---------------------------------------------

/// Integers accumulate unsigned so overflow wraps (as PyTorch's does) instead of being UB.
template <class T> struct Acc { using type = T; };
template <> struct Acc<int32_t> { using type = uint32_t; };
template <> struct Acc<int64_t> { using type = uint64_t; };
template <class T> using AccOf = typename Acc<T>::type;

/// One [M, K] x [K, N] product: A with any strides, B rows contiguous (stride ldb), C
/// contiguous [M, N] (rows [m0, m1) computed), initialised to bias (stride bs) or zero.
template <class T> struct GemmArgs {
  const T *a;
  int64_t ars, acs; // A row and column strides
  const T *b;
  int64_t ldb;
  T *c;
  int64_t m, n, k;
  const T *bias;
  int64_t bs;
};

template <class T> void gemmRows(const GemmArgs<T> &g, int64_t m0, int64_t m1) {
  using U = AccOf<T>;
  constexpr int64_t kBlock = 256, nBlock = 256;
  U *c = reinterpret_cast<U *>(g.c);
  for (int64_t m = m0; m < m1; ++m) {
    for (int64_t j = 0; j < g.n; ++j) c[m * g.n + j] = g.bias ? U(g.bias[j * g.bs]) : U(0);
  }
  for (int64_t k0 = 0; k0 < g.k; k0 += kBlock) {
    int64_t k1 = std::min(g.k, k0 + kBlock);
    for (int64_t n0 = 0; n0 < g.n; n0 += nBlock) {
      int64_t n1 = std::min(g.n, n0 + nBlock);
      for (int64_t m = m0; m < m1; ++m) {
        U *crow = c + m * g.n;
        for (int64_t kk = k0; kk < k1; ++kk) {
          U av = U(g.a[m * g.ars + kk * g.acs]);
          const T *brow = g.b + kk * g.ldb;
          for (int64_t j = n0; j < n1; ++j) crow[j] += av * U(brow[j]);
        }
      }
    }
  }
}

/// Byte offsets of each broadcast batch of a padded operand, for out batch index i.
struct BatchMap {
  Shape outBatch; // out's batch dims
  Shape strides;  // the operand's element strides over them (0 where broadcast)
  int64_t offsetOf(int64_t i) const {
    int64_t off = 0;
    for (int d = static_cast<int>(outBatch.size()) - 1; d >= 0; --d) {
      off += (i % outBatch[d]) * strides[d];
      i /= outBatch[d];
    }
    return off;
  }
};

BatchMap batchMap(const Tensor &t, const Shape &outBatch) {
  const auto &impl = *t.impl();
  BatchMap map{outBatch, Shape(outBatch.size(), 0)};
  int64_t tb = static_cast<int64_t>(impl.shape.size()) - 2;
  int64_t pad = static_cast<int64_t>(outBatch.size()) - tb;
  for (int64_t d = 0; d < tb; ++d) {
    if (impl.shape[d] != 1) map.strides[pad + d] = impl.strides[d];
  }
  return map;
}

/// out [..., M, N] (contiguous) = a [..., M, K] @ b [..., K, N] (+ bias [N]), with
/// broadcast batch dims; parallel over batches and row blocks.
template <class T>
void loopMatmul(const Tensor &a, const Tensor &bIn, const Tensor *bias, const Tensor &out) {
  Tensor b = bIn.impl()->strides.back() == 1 ? bIn : contiguousOf(bIn);
  const Shape &os = out.shape();
  Shape outBatch(os.begin(), os.end() - 2);
  BatchMap am = batchMap(a, outBatch), bm = batchMap(b, outBatch);
  int64_t batches = 1;
  for (int64_t s : outBatch) batches *= s;
  const auto &ai = *a.impl(), &bi = *b.impl();
  int64_t M = os[os.size() - 2], N = os.back(), K = ai.shape.back();
  constexpr int64_t rowBlock = 32;
  int64_t blocks = (M + rowBlock - 1) / rowBlock, tasks = batches * blocks;
  const T *ap = reinterpret_cast<const T *>(ai.ptr());
  const T *bp = reinterpret_cast<const T *>(bi.ptr());
  T *cp = reinterpret_cast<T *>(out.impl()->ptr());
  const T *biasp = bias ? reinterpret_cast<const T *>(bias->impl()->ptr()) : nullptr;
  int64_t bs = bias ? bias->impl()->strides.back() : 0;
  int64_t ars = ai.strides[ai.strides.size() - 2], acs = ai.strides.back();
  int64_t ldb = bi.strides[bi.strides.size() - 2];
#pragma omp parallel for schedule(static) if (M * N * K * batches > (1 << 16))
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t batch = t / blocks, m0 = (t % blocks) * rowBlock;
    GemmArgs<T> g{ap + am.offsetOf(batch),
                  ars,
                  acs,
                  bp + bm.offsetOf(batch),
                  ldb,
                  cp + batch * M * N,
                  M,
                  N,
                  K,
                  biasp,
                  bs};
    gemmRows(g, m0, std::min(M, m0 + rowBlock));
  }
}

/// out = a @ b (+ bias) for any dtype: oneDNN for floats it handles, loops otherwise.
void product(const Tensor &a, const Tensor &b, const Tensor *bias, Tensor &out, const char *op) {
  switch (out.dtype()) {
  case DType::f32:
  case DType::bf16:
  case DType::f16:
    dnnlMatmul(a, b, bias, out);
    return;
  case DType::f64:
    loopMatmul<double>(a, b, bias, out);
    return;
  case DType::i32:
    loopMatmul<int32_t>(a, b, bias, out);
    return;
  case DType::i64:
    loopMatmul<int64_t>(a, b, bias, out);
    return;
  case DType::boolean:
    break;
  }
  throw Error(std::string(op) + ": dtype " + std::string(dtypeName(out.dtype())) +
              " is not supported");
}

// ---- the ops ------------------------------------------------------------------------------

/// A view of t with a size-1 dim inserted at `pos`.
Tensor withUnitDim(const Tensor &t, size_t pos) {
  const auto &impl = *t.impl();
  Shape shape = impl.shape, strides = impl.strides;
  shape.insert(shape.begin() + static_cast<int64_t>(pos), 1);
  strides.insert(strides.begin() + static_cast<int64_t>(pos), 0);
  return detail::makeView(t, shape, strides, impl.offset);
}

Tensor runMatmulOp(const Tensor &a, const Tensor &b, const TensorMeta &meta) {
  Tensor result = detail::makeTensor(meta.shape, meta.dtype);
  Shape full = meta.shape;
  if (b.dim() == 1) full.push_back(1);
  if (a.dim() == 1) full.insert(full.end() - 1, 1);
  Tensor a2 = a.dim() == 1 ? withUnitDim(a, 0) : a;
  Tensor b2 = b.dim() == 1 ? withUnitDim(b, 1) : b;
  Tensor out = detail::makeView(result, full, detail::contiguousStrides(full), 0);
  product(a2, b2, nullptr, out, "matmul");
  return result;
}

/// x [..., in] as a [rows, in] view, or as a contiguous copy when its leading dims do not
/// collapse into one strided dim.
Tensor asRows(const Tensor &x, int64_t rows) {
  const auto &impl = *x.impl();
  int64_t in = impl.shape.back();
  int64_t rowStride = in, extent = -1; // extent: the inner collapsed dims' span
  for (int d = x.dim() - 2; d >= 0; --d) {
    if (impl.shape[d] == 1) continue;
    if (extent >= 0 && impl.strides[d] != extent) return asRows(contiguousOf(x), rows);
    if (extent < 0) rowStride = impl.strides[d];
    extent = impl.strides[d] * impl.shape[d];
  }
  return detail::makeView(x, {rows, in}, {rowStride, impl.strides.back()}, impl.offset);
}

Tensor runLinear(const std::vector<Tensor> &in, const TensorMeta &meta) {
  const Tensor &x = in[0], &w = in[1];
  Tensor result = detail::makeTensor(meta.shape, meta.dtype);
  int64_t inF = w.size(1), outF = w.size(0), rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  const auto &wi = *w.impl();
  Tensor wT = detail::makeView(w, {inF, outF}, {wi.strides[1], wi.strides[0]}, wi.offset);
  Tensor out = detail::makeView(result, {rows, outF}, {outF, 1}, 0);
  const Tensor *bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
  product(asRows(x, rows), wT, bias, out, "linear");
  return result;
}

Tensor runConv2d(const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &meta) {
  if (!isFloating(meta.dtype)) {
    throw Error("conv2d: dtype " + std::string(dtypeName(meta.dtype)) +
                " is not supported (floating dtypes only)");
  }
  Tensor result = detail::makeTensor(meta.shape, meta.dtype);
  const Tensor *bias = in.size() > 2 && in[2].defined() ? &in[2] : nullptr;
  dnnlConv2d(in[0], in[1], bias, a.stride, a.padding, result);
  return result;
}

} // namespace

Tensor runMatmul(OpKind op, const std::vector<Tensor> &in, const Attrs &a, const TensorMeta &out) {
  switch (op) {
  case OpKind::matmul:
    return runMatmulOp(in[0], in[1], out);
  case OpKind::linear:
    return runLinear(in, out);
  case OpKind::conv2d:
    return runConv2d(in, a, out);
    RCJIT_OP_CASES(Source, Unary, Binary, Compare, Where, Reduce, Normalize, Nn, View, Copy,
                   Collective)
    break;
  }
  assert(false && "runMatmul: not a Matmul-category op");
  throw Error("runMatmul: op " + std::string(opName(op)) + " is not a library call");
}

} // namespace rcjit::eager
