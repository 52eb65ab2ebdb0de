// The eager target's conv2d gradients: conv2d_backward_input and conv2d_backward_weight
// through oneDNN's backward primitives in f32 (f16 and bf16 over f32 copies), and as OpenMP
// loops for f64, which oneDNN does not convolve.
#include <algorithm>
#include <string>

#include "targets/eager/DnnlContext.h"
#include "targets/eager/Eager.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

namespace {

constexpr int64_t kConvParallelWork = 1 << 15;

// The geometry of conv2d(x [N, C, H, W], w [O, C, KH, KW]) -> g [N, O, OH, OW].
struct ConvGeom {
  int64_t n, c, h, w, o, kh, kw, oh, ow, stride, pad;
};

ConvGeom geomOf(const Shape &x, const Shape &w, const Shape &g, const Attrs &a) {
  return {x[0], x[1], x[2], x[3], w[0], w[2], w[3], g[2], g[3], a.stride, a.padding};
}

template <class C> const C *cptr(const Tensor &t) {
  return reinterpret_cast<const C *>(t.impl()->ptr());
}
template <class C> C *mptr(const Tensor &t) { return reinterpret_cast<C *>(t.impl()->ptr()); }

// gx[n, c] = sum over o, output positions and taps of g[n, o] * w[o, c]; one (n, c) plane
// per iteration, so threads never write the same element.
template <class C> void backwardInput(const C *g, const C *w, C *gx, const ConvGeom &s) {
  const int64_t planes = s.n * s.c;
#pragma omp parallel for schedule(static) if (planes * s.o * s.oh * s.ow * s.kh * s.kw >           \
                                              kConvParallelWork)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t n = p / s.c, c = p % s.c;
    C *out = gx + p * s.h * s.w;
    std::fill(out, out + s.h * s.w, C(0));
    for (int64_t o = 0; o < s.o; ++o) {
      const C *gp = g + (n * s.o + o) * s.oh * s.ow;
      const C *wp = w + (o * s.c + c) * s.kh * s.kw;
      for (int64_t i = 0; i < s.oh; ++i) {
        for (int64_t j = 0; j < s.ow; ++j) {
          const C gv = gp[i * s.ow + j];
          for (int64_t ki = 0; ki < s.kh; ++ki) {
            const int64_t y = i * s.stride - s.pad + ki;
            if (y < 0 || y >= s.h) continue;
            for (int64_t kj = 0; kj < s.kw; ++kj) {
              const int64_t x = j * s.stride - s.pad + kj;
              if (x >= 0 && x < s.w) out[y * s.w + x] += gv * wp[ki * s.kw + kj];
            }
          }
        }
      }
    }
  }
}

// gw[o, c] = sum over n and output positions of g[n, o] * x[n, c] at the tap's offset.
template <class C> void backwardWeight(const C *g, const C *x, C *gw, const ConvGeom &s) {
  const int64_t planes = s.o * s.c;
#pragma omp parallel for schedule(static) if (planes * s.n * s.oh * s.ow * s.kh * s.kw >           \
                                              kConvParallelWork)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t o = p / s.c, c = p % s.c;
    C *out = gw + p * s.kh * s.kw;
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        C acc = 0;
        for (int64_t n = 0; n < s.n; ++n) {
          const C *gp = g + (n * s.o + o) * s.oh * s.ow;
          const C *xp = x + (n * s.c + c) * s.h * s.w;
          for (int64_t i = 0; i < s.oh; ++i) {
            const int64_t y = i * s.stride - s.pad + ki;
            if (y < 0 || y >= s.h) continue;
            for (int64_t j = 0; j < s.ow; ++j) {
              const int64_t xx = j * s.stride - s.pad + kj;
              if (xx >= 0 && xx < s.w) acc += gp[i * s.ow + j] * xp[y * s.w + xx];
            }
          }
        }
        out[ki * s.kw + kj] = acc;
      }
    }
  }
}

} // namespace

Tensor runConv2dBackward(OpKind op, const std::vector<Tensor> &in, const Attrs &a,
                         const TensorMeta &meta) {
  const DType ct = meta.dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor g = contiguousAs(in[0], ct), other = contiguousAs(in[1], ct);
  const bool input = op == OpKind::conv2d_backward_input;
  // backward_input: other is w and the result x-shaped; backward_weight: other is x.
  const ConvGeom s = input ? geomOf(meta.shape, other.shape(), g.shape(), a)
                           : geomOf(other.shape(), meta.shape, g.shape(), a);
  Tensor acc = detail::makeTensor(meta.shape, ct);
  if (ct == DType::f64) { // oneDNN has no f64 convolution
    if (input) {
      backwardInput(cptr<double>(g), cptr<double>(other), mptr<double>(acc), s);
    } else {
      backwardWeight(cptr<double>(g), cptr<double>(other), mptr<double>(acc), s);
    }
  } else if (acc.numel() > 0 && g.numel() > 0) {
    if (input) {
      dnnlConv2dBackward(ConvPass::backwardData, acc, other, g, a.stride, a.padding);
    } else {
      dnnlConv2dBackward(ConvPass::backwardWeights, other, acc, g, a.stride, a.padding);
    }
  } else {
    std::fill(mptr<float>(acc), mptr<float>(acc) + acc.numel(), 0.0f); // an empty conv
  }
  if (meta.dtype == ct) return acc;
  Tensor y = detail::makeTensor(meta.shape, meta.dtype);
  copyInto(y, acc);
  return y;
}

} // namespace rcjit::eager
