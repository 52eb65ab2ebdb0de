// oneDNN engine, streams and primitive cache, and matmul / conv2d on strided views.
#include "targets/eager/DnnlContext.h"

#include <algorithm>
#include <cassert>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <rcjit/Error.h>

#include "support/Env.h"
#include "support/Threads.h"
#include "targets/eager/Eager.h"
#include "tracer/TensorImpl.h"

namespace rcjit::eager {

using dnnl::memory;
using Dt = memory::data_type;

// ---- the context -------------------------------------------------------------------------

DnnlContext::DnnlContext() : engine_(dnnl::engine::kind::cpu, 0) {}

DnnlContext &DnnlContext::instance() {
  static DnnlContext ctx;
  return ctx;
}

dnnl::stream &DnnlContext::stream() {
  thread_local dnnl::stream s(engine_);
  return s;
}

size_t DnnlContext::KeyHash::operator()(const Key &k) const {
  uint64_t h = 1469598103934665603ull;
  for (int64_t v : k) {
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  }
  return static_cast<size_t>(h);
}

DnnlContext::Entry DnnlContext::lookup(const Key &key,
                                       const std::function<DnnlPrimitive()> &create) {
  {
    std::lock_guard lock(mutex_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
  }
  auto made = std::make_shared<const DnnlPrimitive>(create());
  std::lock_guard lock(mutex_);
  ++created_;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;
  lru_.emplace_front(key, made);
  index_.emplace(key, lru_.begin());
  if (lru_.size() > kCapacity) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return made;
}

void *threadBuffer(ThreadBuffer which, size_t bytes) {
  struct Buffer {
    void *data = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(data); }
  };
  thread_local Buffer bufs[2];
  Buffer &buf = bufs[static_cast<int>(which)];
  if (bytes > buf.size) {
    std::free(buf.data);
    buf.size = (bytes + 63) / 64 * 64;
    buf.data = std::aligned_alloc(64, buf.size);
    if (!buf.data) {
      buf.size = 0;
      throw Error(std::string("oneDNN: cannot allocate ") +
                  (which == ThreadBuffer::scratchpad ? "a scratchpad" : "a reordered weight") +
                  " of " + std::to_string(bytes) + " bytes");
    }
  }
  return buf.data;
}

void DnnlContext::execute(const DnnlPrimitive &p, std::unordered_map<int, memory> args) {
  size_t bytes = p.scratchpad.get_size();
  if (bytes > 0) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 memory(p.scratchpad, engine_, threadBuffer(ThreadBuffer::scratchpad, bytes)));
  }
  dnnl::stream &s = stream();
  p.prim.execute(s, args);
  s.wait();
}

size_t DnnlContext::size() const {
  std::lock_guard lock(mutex_);
  return lru_.size();
}

uint64_t DnnlContext::created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

void DnnlContext::clear() {
  std::lock_guard lock(mutex_);
  lru_.clear();
  index_.clear();
}

// ---- helpers ----------------------------------------------------------------------------

Dt dnnlType(DType t) {
  switch (t) {
  case DType::f32:
    return Dt::f32;
  case DType::bf16:
    return Dt::bf16;
  case DType::f16:
    return Dt::f16;
  case DType::f64:
  case DType::i32:
  case DType::i64:
  case DType::boolean:
    return Dt::undef;
  }
  return Dt::undef;
}

namespace {

enum KeyTag : int64_t { kMatmulKey = 1, kConvKey = 2, kReorderKey = 3 };


/// Dims and strides of a tensor padded with leading size-1 dims to a rank.
struct Geometry {
  memory::dims dims;
  memory::dims strides;
};

/// Gives size-1 dims the stride a row-major layout would: their stride is meaningless,
/// and oneDNN reads layouts (transposed or not) from it.
void canonicalizeUnitStrides(Geometry &g) {
  for (int i = static_cast<int>(g.dims.size()) - 1; i >= 0; --i) {
    if (g.dims[i] != 1) continue;
    size_t next = static_cast<size_t>(i) + 1;
    g.strides[i] = next == g.dims.size() ? 1 : g.strides[next] * std::max<int64_t>(g.dims[next], 1);
  }
}

Geometry geometry(const Tensor &t, size_t rank) {
  const auto &impl = *t.impl();
  assert(impl.shape.size() <= rank);
  size_t pad = rank - impl.shape.size();
  Geometry g{memory::dims(pad, 1), memory::dims(pad, 0)};
  g.dims.insert(g.dims.end(), impl.shape.begin(), impl.shape.end());
  g.strides.insert(g.strides.end(), impl.strides.begin(), impl.strides.end());
  canonicalizeUnitStrides(g);
  return g;
}

/// Turns stride-0 (expanded) batch dims of one operand into size-1 dims that oneDNN
/// broadcasts, where the other operand supplies the full size.
void collapseExpandedBatch(Geometry &x, const Geometry &other, const memory::dims &outDims) {
  for (size_t i = 0; i + 2 < x.dims.size(); ++i) {
    bool expanded = x.dims[i] > 1 && x.strides[i] == 0;
    bool otherFull = other.dims[i] == outDims[i] && other.strides[i] != 0;
    if (expanded && otherFull) x.dims[i] = 1;
  }
  canonicalizeUnitStrides(x);
}

void appendKey(DnnlContext::Key &k, const Geometry &g) {
  k.push_back(static_cast<int64_t>(g.dims.size()));
  k.insert(k.end(), g.dims.begin(), g.dims.end());
  k.insert(k.end(), g.strides.begin(), g.strides.end());
}

memory::desc descOf(const Geometry &g, Dt dt) { return memory::desc(g.dims, dt, g.strides); }

memory userMemory(const memory::desc &d, const Tensor &t) {
  return memory(d, DnnlContext::instance().engine(), t.impl()->ptr());
}

dnnl::primitive_attr userScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

/// Wraps a created primitive descriptor. Unless `allowRef`, reference kernels count as
/// unusable: they are orders of magnitude slower than a copy to a supported layout.
template <class Pd, class Prim> DnnlPrimitive finish(const Pd &pd, bool allowRef) {
  DnnlPrimitive p;
  bool isRef = std::string(pd.impl_info_str()).find("ref") != std::string::npos;
  if (isRef && !allowRef) return p;
  p.prim = Prim(pd);
  p.scratchpad = pd.scratchpad_desc();
  return p;
}

/// A view of t broadcast to `shape` (stride 0 on new and size-1 dims).
Tensor broadcastView(const Tensor &t, const Shape &shape) {
  const auto &impl = *t.impl();
  Shape strides(shape.size(), 0);
  size_t pad = shape.size() - impl.shape.size();
  for (size_t i = 0; i < impl.shape.size(); ++i) {
    if (impl.shape[i] != 1) strides[pad + i] = impl.strides[i];
  }
  return detail::makeView(t, shape, strides, impl.offset);
}

/// out = broadcast(bias), or zeros without one: a product over an empty dim.
void fillEmptyProduct(const Tensor *bias, const Tensor &out, const Tensor &biasView) {
  if (bias) {
    copyInto(out, biasView);
    return;
  }
  Tensor z = detail::makeTensor(out.shape(), out.dtype());
  std::memset(z.impl()->ptr(), 0, static_cast<size_t>(z.numel()) * dtypeSize(z.dtype()));
  copyInto(out, z);
}

} // namespace

// ---- matmul -----------------------------------------------------------------------------

namespace {

struct MatmulGeometry {
  Geometry a, b, out, bias;
  bool hasBias = false;
};

/// Whether g's dims [0, last) and its dim `last` are one run of rows: each dim's stride is
/// the next one's times its size (a size-1 dim always is).
bool rowsMerge(const Geometry &g, size_t last) {
  for (size_t i = 0; i < last; ++i) {
    if (g.dims[i] != 1 && g.strides[i] != g.strides[i + 1] * g.dims[i + 1]) return false;
  }
  return true;
}

/// A batched product whose b is one matrix for every batch ([..., M, K] @ [K, N], the
/// backward of a linear over [B, T, C] activations) as one [B * ... * M, K] @ [K, N] GEMM,
/// when a's and out's batch dims step over their rows evenly: oneDNN 2.6 ran the batched
/// form of gpt2's LM head gradient (4 x 128 x 50257 @ 50257 x 768, bf16, AMX) in 39-45 ms
/// against 24-30 ms for one GEMM.
void foldBatchIntoRows(MatmulGeometry &g) {
  const size_t rank = g.out.dims.size();
  if (rank < 3) return;
  for (size_t i = 0; i + 2 < rank; ++i) {
    if (g.b.dims[i] != 1) return;
    if (g.hasBias && g.bias.dims[i] != 1) return;
  }
  if (g.hasBias && g.bias.dims[rank - 2] != 1) return; // a bias per row
  if (!rowsMerge(g.a, rank - 2) || !rowsMerge(g.out, rank - 2)) return;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < rank; ++i) rows *= g.out.dims[i];
  auto two = [&](const Geometry &x, int64_t r) {
    Geometry y{{r, x.dims[rank - 1]}, {x.strides[rank - 2], x.strides[rank - 1]}};
    canonicalizeUnitStrides(y);
    return y;
  };
  g.a = two(g.a, rows);
  g.out = two(g.out, rows);
  g.b = two(g.b, g.b.dims[rank - 2]);
  if (g.hasBias) g.bias = two(g.bias, 1);
}

MatmulGeometry matmulGeometry(const Tensor &a, const Tensor &b, const Tensor *bias,
                              const Tensor &out) {
  size_t rank = static_cast<size_t>(out.dim());
  MatmulGeometry g{geometry(a, rank), geometry(b, rank), geometry(out, rank), {}, false};
  collapseExpandedBatch(g.a, g.b, g.out.dims);
  collapseExpandedBatch(g.b, g.a, g.out.dims);
  if (bias) {
    g.bias = geometry(*bias, rank);
    g.hasBias = true;
  }
  foldBatchIntoRows(g);
  return g;
}

DnnlPrimitive createMatmul(const MatmulGeometry &g, Dt dt) {
  memory::desc ad = descOf(g.a, dt), bd = descOf(g.b, dt), od = descOf(g.out, dt);
  try {
    auto desc = g.hasBias ? dnnl::matmul::desc(ad, bd, descOf(g.bias, dt), od)
                          : dnnl::matmul::desc(ad, bd, od);
    dnnl::matmul::primitive_desc pd(desc, userScratchpadAttr(), DnnlContext::instance().engine());
    return finish<dnnl::matmul::primitive_desc, dnnl::matmul>(pd, false);
  } catch (const dnnl::error &) {
    return {}; // no kernel for this dtype or layout: the caller falls back
  }
}

/// Runs the matmul on these exact views; false when oneDNN has no fast kernel for them.
bool tryMatmul(const Tensor &a, const Tensor &b, const Tensor *bias, const Tensor &out) {
  Dt dt = dnnlType(out.dtype());
  MatmulGeometry g = matmulGeometry(a, b, bias, out);
  // a small product runs on this thread, with a primitive made for one thread
  const bool serial =
      static_cast<double>(out.numel()) * static_cast<double>(a.size(-1)) < kParallelMacs &&
      omp_get_max_threads() > 1;
  std::optional<OmpThreads> one;
  if (serial) one.emplace(1);
  DnnlContext::Key key{kMatmulKey, static_cast<int64_t>(dt), g.hasBias, serial};
  appendKey(key, g.a);
  appendKey(key, g.b);
  appendKey(key, g.out);
  if (g.hasBias) appendKey(key, g.bias);
  auto &ctx = DnnlContext::instance();
  auto entry = ctx.lookup(key, [&] { return createMatmul(g, dt); });
  if (!entry->usable()) return false;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, userMemory(descOf(g.a, dt), a)},
                                       {DNNL_ARG_WEIGHTS, userMemory(descOf(g.b, dt), b)},
                                       {DNNL_ARG_DST, userMemory(descOf(g.out, dt), out)}};
  if (g.hasBias) args.emplace(DNNL_ARG_BIAS, userMemory(descOf(g.bias, dt), *bias));
  ctx.execute(*entry, std::move(args));
  return true;
}

/// Runs the matmul on contiguous copies in dtype dt; false when even those have no kernel.
bool tryPackedMatmul(const Tensor &a, const Tensor &b, const Tensor *bias, const Tensor &out,
                     DType dt) {
  Tensor ac = contiguousAs(a, dt), bc = contiguousAs(b, dt);
  Tensor biasc = bias ? contiguousAs(*bias, dt) : Tensor();
  bool direct = out.dtype() == dt && out.is_contiguous();
  Tensor oc = direct ? out : detail::makeTensor(out.shape(), dt);
  if (!tryMatmul(ac, bc, bias ? &biasc : nullptr, oc)) return false;
  if (!direct) copyInto(out, oc);
  return true;
}

// bf16 products on a CPU without native bf16 (oneDNN's ISA below avx512_core_bf16) run in
// f32, with each weight converted once per storage version rather than on every call;
// RCJIT_BF16_MATMUL=f32 or native overrides the choice (tests).
bool bf16MatmulsInF32() {
  const int forced = envChoice("RCJIT_BF16_MATMUL", {"f32", "native"}, -1,
                               "or unset: f32 where the CPU has no native bf16");
  if (forced >= 0) return forced == 0;
  static const bool native = (static_cast<unsigned>(dnnl_get_effective_cpu_isa()) &
                              dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
  return !native;
}

// f32 copies of bf16 operands that are read again unchanged (weights): a copy is made the
// second time a storage is seen at the same version, at the same view, and kept while that
// storage lives and keeps its version (an in-place write, copy_ or an optimizer step,
// bumps it; a write through data_ptr() does not, like autograd's saved-value check).
// Bounded: past kBf16CopyBytes every copy is dropped. Thread-safe.
class Bf16WeightCopies {
public:
  static Bf16WeightCopies &instance() {
    static auto *c = new Bf16WeightCopies();
    return *c;
  }
  // t as contiguous f32: the cached copy, or a fresh conversion
  Tensor f32Of(const Tensor &t) {
    const auto &impl = *t.impl();
    const uint32_t version = impl.storage->version.load(std::memory_order_relaxed);
    std::string key = std::to_string(reinterpret_cast<uintptr_t>(impl.storage.get())) + "@" +
                      std::to_string(impl.offset) + shapeStr(impl.shape) + shapeStr(impl.strides);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = copies_.find(key);
      if (it != copies_.end() && !it->second.storage.expired() &&
          it->second.storage.lock() == impl.storage && it->second.version == version) {
        if (it->second.copy.defined()) return it->second.copy;
        Tensor c = contiguousAs(t, DType::f32);
        it->second.copy = c;
        bytes_ += c.numel() * 4;
        if (bytes_ > kBf16CopyBytes) {
          copies_.clear();
          bytes_ = 0;
        }
        return c;
      }
      if (it != copies_.end() && it->second.copy.defined()) bytes_ -= it->second.copy.numel() * 4;
      copies_[key] = {impl.storage, version, Tensor()}; // seen once: no copy yet
      if (copies_.size() > 65536) {
        copies_.clear();
        bytes_ = 0;
      }
    }
    return contiguousAs(t, DType::f32);
  }

private:
  static constexpr int64_t kBf16CopyBytes = int64_t{16} << 30;
  struct Entry {
    std::weak_ptr<detail::Storage> storage;
    uint32_t version = 0;
    Tensor copy;
  };
  std::mutex mu_;
  std::unordered_map<std::string, Entry> copies_;
  int64_t bytes_ = 0;
};

/// bf16 out = a @ b (+ bias) computed in f32, b and bias through Bf16WeightCopies.
void bf16MatmulViaF32(const Tensor &a, const Tensor &b, const Tensor *bias, Tensor &out) {
  Tensor af = contiguousAs(a, DType::f32);
  Tensor bf = Bf16WeightCopies::instance().f32Of(b);
  Tensor biasf = bias ? Bf16WeightCopies::instance().f32Of(*bias) : Tensor();
  Tensor of = detail::makeTensor(out.shape(), DType::f32);
  if (!tryMatmul(af, bf, bias ? &biasf : nullptr, of) &&
      !tryPackedMatmul(af, bf, bias ? &biasf : nullptr, of, DType::f32)) {
    throw Error("matmul: oneDNN has no f32 kernel for " + shapeStr(a.shape()) + " @ " +
                shapeStr(b.shape()));
  }
  copyInto(out, of);
}

} // namespace

bool bf16MatmulsNative() { return !bf16MatmulsInF32(); }

void dnnlMatmul(const Tensor &a, const Tensor &b, const Tensor *bias, Tensor &out) {
  assert(dnnlType(out.dtype()) != Dt::undef && a.dtype() == out.dtype() &&
         b.dtype() == out.dtype());
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {
    fillEmptyProduct(bias, out, bias ? broadcastView(*bias, out.shape()) : Tensor());
    return;
  }
  if (out.dtype() == DType::bf16 && bf16MatmulsInF32()) return bf16MatmulViaF32(a, b, bias, out);
  if (tryMatmul(a, b, bias, out)) return;
  if (tryPackedMatmul(a, b, bias, out, out.dtype())) return;
  if (tryPackedMatmul(a, b, bias, out, DType::f32)) return;
  throw Error("matmul: oneDNN has no kernel for " + shapeStr(a.shape()) + " @ " +
              shapeStr(b.shape()) + " in " + std::string(dtypeName(out.dtype())));
}

// ---- conv2d -----------------------------------------------------------------------------

namespace {

struct ConvGeometry {
  Geometry x, w, out;
  bool hasBias = false;
  int64_t stride = 1, padding = 0;
};

/// The primitive of `pass` over `g`, its descs the layouts it picked for the x-, w- and
/// out-shaped operands (src or diff_src, weights or diff_weights, dst or diff_dst). A
/// backward primitive is made from the forward_training one it is the gradient of.
DnnlPrimitive createConv(const ConvGeometry &g, ConvPass pass) {
  auto any = [](const memory::dims &d) {
    return memory::desc(d, Dt::f32, memory::format_tag::any);
  };
  memory::desc bd({g.out.dims[1]}, Dt::f32, memory::format_tag::a);
  memory::dims strides{g.stride, g.stride}, pad{g.padding, g.padding};
  const auto &eng = DnnlContext::instance().engine();
  try {
    auto alg = dnnl::algorithm::convolution_direct;
    auto prop = pass == ConvPass::forward ? dnnl::prop_kind::forward_inference
                                          : dnnl::prop_kind::forward_training;
    auto desc = g.hasBias ? dnnl::convolution_forward::desc(prop, alg, any(g.x.dims), any(g.w.dims),
                                                            bd, any(g.out.dims), strides, pad, pad)
                          : dnnl::convolution_forward::desc(prop, alg, any(g.x.dims), any(g.w.dims),
                                                            any(g.out.dims), strides, pad, pad);
    dnnl::convolution_forward::primitive_desc pd(desc, userScratchpadAttr(), eng);
    // operands are reordered to the layouts it picks, so a reference kernel is the last resort
    if (pass == ConvPass::forward) {
      DnnlPrimitive p =
          finish<dnnl::convolution_forward::primitive_desc, dnnl::convolution_forward>(pd, true);
      p.descs = {pd.src_desc(), pd.weights_desc(), pd.dst_desc()};
      return p;
    }
    if (pass == ConvPass::backwardData) {
      dnnl::convolution_backward_data::desc bdesc(alg, any(g.x.dims), any(g.w.dims),
                                                  any(g.out.dims), strides, pad, pad);
      dnnl::convolution_backward_data::primitive_desc bpd(bdesc, userScratchpadAttr(), eng, pd);
      DnnlPrimitive p =
          finish<dnnl::convolution_backward_data::primitive_desc, dnnl::convolution_backward_data>(
              bpd, true);
      p.descs = {bpd.diff_src_desc(), bpd.weights_desc(), bpd.diff_dst_desc()};
      return p;
    }
    dnnl::convolution_backward_weights::desc wdesc(alg, any(g.x.dims), any(g.w.dims),
                                                   any(g.out.dims), strides, pad, pad);
    dnnl::convolution_backward_weights::primitive_desc wpd(wdesc, userScratchpadAttr(), eng, pd);
    DnnlPrimitive p = finish<dnnl::convolution_backward_weights::primitive_desc,
                             dnnl::convolution_backward_weights>(wpd, true);
    p.descs = {wpd.src_desc(), wpd.diff_weights_desc(), wpd.diff_dst_desc()};
    return p;
  } catch (const dnnl::error &) {
    return {};
  }
}

DnnlPrimitive createReorder(const memory::desc &from, const memory::desc &to) {
  const auto &eng = DnnlContext::instance().engine();
  dnnl::reorder::primitive_desc pd(eng, from, eng, to, userScratchpadAttr());
  DnnlPrimitive p;
  p.prim = dnnl::reorder(pd);
  p.scratchpad = pd.scratchpad_desc();
  return p;
}

/// Copies `from` into `to` (different layouts), with the reorder cached under the conv's
/// key plus `slot`.
void reorderInto(const memory &from, const memory &to, DnnlContext::Key key, int64_t slot) {
  auto &ctx = DnnlContext::instance();
  key.insert(key.end(), {kReorderKey, slot});
  auto r = ctx.lookup(key, [&] { return createReorder(from.get_desc(), to.get_desc()); });
  ctx.execute(*r, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
}

/// `user` in the layout `want`: itself when they match, else a reordered copy.
memory toLayout(const memory &user, const memory::desc &want, const DnnlContext::Key &key,
                int64_t slot) {
  if (user.get_desc() == want) return user;
  memory m(want, DnnlContext::instance().engine());
  reorderInto(user, m, key, slot);
  return m;
}

/// One pass of conv2d on f32 views x [N, C, H, W], w [O, C, KH, KW], y [N, O, OH, OW]: the
/// forward writes y (+ bias), backwardData writes x from y (its gradient) and w,
/// backwardWeights writes w from x and y. oneDNN has a kernel for every f32 conv; where it
/// had none for one this is an Error naming the shapes.
void runConvF32(ConvPass pass, const Tensor &x, const Tensor &w, const Tensor *bias, int64_t stride,
                int64_t padding, const Tensor &y) {
  ConvGeometry g{geometry(x, 4), geometry(w, 4), geometry(y, 4), bias != nullptr, stride, padding};
  DnnlContext::Key key{kConvKey, static_cast<int64_t>(pass), g.hasBias, stride, padding};
  appendKey(key, g.x);
  appendKey(key, g.w);
  appendKey(key, g.out);
  auto &ctx = DnnlContext::instance();
  auto conv = ctx.lookup(key, [&] { return createConv(g, pass); });
  if (!conv->usable()) {
    throw Error("conv2d: oneDNN has no kernel for input " + shapeStr(x.shape()) + " and weight " +
                shapeStr(w.shape()));
  }
  const int written = pass == ConvPass::forward ? 2 : pass == ConvPass::backwardData ? 0 : 1;
  const Tensor *user[3] = {&x, &w, &y};
  const Geometry *geo[3] = {&g.x, &g.w, &g.out};
  static const int kArgs[3][3] = {{DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
                                  {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
                                  {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST}};
  std::unordered_map<int, memory> args;
  memory out, userOut;
  for (int i = 0; i < 3; ++i) {
    memory m = userMemory(descOf(*geo[i], Dt::f32), *user[i]);
    if (i == written) {
      userOut = m;
      out = m.get_desc() == conv->descs[i] ? m : memory(conv->descs[i], ctx.engine());
      m = out;
    } else {
      m = toLayout(m, conv->descs[i], key, i);
    }
    args.emplace(kArgs[static_cast<int>(pass)][i], m);
  }
  if (bias) {
    memory::desc bd({bias->numel()}, Dt::f32, {bias->impl()->strides[0]});
    args.emplace(DNNL_ARG_BIAS, userMemory(bd, *bias));
  }
  ctx.execute(*conv, std::move(args));
  if (out != userOut) reorderInto(out, userOut, key, 3);
}

} // namespace

void dnnlConv2d(const Tensor &x, const Tensor &w, const Tensor *bias, int64_t stride,
                int64_t padding, Tensor &out) {
  if (out.numel() == 0) return;
  if (x.size(1) == 0) {
    const auto &o = out.shape();
    Tensor bv =
        bias ? detail::makeView(*bias, o, {0, bias->impl()->strides[0], 0, 0}, bias->impl()->offset)
             : Tensor();
    fillEmptyProduct(bias, out, bv);
    return;
  }
  if (x.dtype() == DType::f32 && out.dtype() == DType::f32) {
    runConvF32(ConvPass::forward, x, w, bias, stride, padding, out);
    return;
  }
  Tensor xc = contiguousAs(x, DType::f32), wc = contiguousAs(w, DType::f32);
  Tensor bc = bias ? contiguousAs(*bias, DType::f32) : Tensor();
  Tensor oc = detail::makeTensor(out.shape(), DType::f32);
  runConvF32(ConvPass::forward, xc, wc, bias ? &bc : nullptr, stride, padding, oc);
  copyInto(out, oc);
}

void dnnlConv2dBackward(ConvPass pass, const Tensor &x, const Tensor &w, const Tensor &g,
                        int64_t stride, int64_t padding) {
  assert(pass != ConvPass::forward && x.dtype() == DType::f32 && w.dtype() == DType::f32 &&
         g.dtype() == DType::f32);
  runConvF32(pass, x, w, nullptr, stride, padding, g);
}

} // namespace rcjit::eager
