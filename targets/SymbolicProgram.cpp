// Fitting concrete lowerings into one symbolic program, and specializing it per call.
#include "targets/SymbolicProgram.h"

#include <algorithm>
#include <sstream>

#include "targets/Lower.h"

namespace rcjit {

namespace {

// The parts of a program that must be equal in every sample: everything but sizes.
std::string structureOf(const Program &p) {
  std::ostringstream os;
  os << p.numInputs << " in; outputs";
  for (int o : p.outputs) os << " " << o;
  os << "\n";
  for (const Buffer &b : p.buffers) {
    os << "b " << static_cast<int>(b.kind) << " " << b.index << " " << dtypeName(b.dtype) << " "
       << b.shape.size() << "\n";
  }
  for (const Value &v : p.values) {
    os << "v " << v.buffer << " " << dtypeName(v.dtype) << " " << v.shape.size() << "\n";
  }
  for (const Step &s : p.steps) {
    os << "s " << static_cast<int>(s.kind) << " " << s.kernel << " " << opName(s.op) << " "
       << s.result << " [";
    for (int o : s.operands) os << o << " ";
    os << "] " << s.attrs.dim << " " << s.attrs.stride << " " << s.attrs.padding << " "
       << s.attrs.value << " " << s.attrs.eps << " " << s.attrs.keepdim << s.attrs.causal << " "
       << s.attrs.dims.size();
    for (const PostOp &po : s.postOps) os << " +" << opName(po.op);
    os << "\n";
  }
  for (const LoopKernel &k : p.kernels) {
    LoopKernel shapeless = k; // sizes zeroed: only the statements and ranks remain
    for (SizeExpr &e : shapeless.domain) e = SizeExpr::constant(0);
    for (KernelTensor &t : shapeless.tensors) {
      for (SizeExpr &e : t.strides) e = SizeExpr::constant(0);
      t.rowStride = t.rows = SizeExpr::constant(0);
    }
    os << printKernel(shapeless);
  }
  return os.str();
}

// Addresses of p's size fields (forEachSizeField order); P is Program or const Program.
template <class P> auto sizeFields(P &p) {
  std::vector<decltype(&p.arenaBytes)> out;
  forEachSizeField(p, [&](auto &x) { out.push_back(&x); });
  return out;
}

// Addresses of a kernel's domain sizes, then each tensor's strides (a table's row stride
// and rows after them).
template <class K> auto kernelSizes(K &k) {
  std::vector<decltype(&k.domain[0])> out;
  for (auto &e : k.domain) out.push_back(&e);
  for (auto &t : k.tensors) {
    for (auto &e : t.strides) out.push_back(&e);
    if (t.indexed) {
      out.push_back(&t.rowStride);
      out.push_back(&t.rows);
    }
  }
  return out;
}

std::string symsStr(const std::vector<int64_t> &v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i ? ", s" : "s") + std::to_string(i) + "=" + std::to_string(v[i]);
  }
  return s;
}

bool isPrime(int64_t n) {
  if (n < 2) return false;
  for (int64_t d = 2; d * d <= n; ++d) {
    if (n % d == 0) return false;
  }
  return true;
}

} // namespace

namespace {

// Exponent vectors over n symbols, lowest total degree first: each symbol appears up to
// twice (s * s: attention scores over a symbolic sequence), once with many symbols.
std::vector<std::vector<int>> exponentVectors(size_t n) {
  int maxExp = n <= 4 ? 2 : 1;
  std::vector<std::vector<int>> exps(1, std::vector<int>(n, 0));
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::vector<int>> next;
    for (const std::vector<int> &e : exps) {
      for (int x = 0; x <= maxExp; ++x) {
        next.push_back(e);
        next.back()[i] = x;
      }
    }
    exps = std::move(next);
  }
  auto degree = [](const std::vector<int> &e) {
    int d = 0;
    for (int x : e) d += x;
    return d;
  };
  // by degree; ties keep their order
  std::vector<std::pair<int, size_t>> order;
  for (size_t i = 0; i < exps.size(); ++i) order.emplace_back(degree(exps[i]), i);
  std::sort(order.begin(), order.end());
  std::vector<std::vector<int>> sorted;
  for (const auto &[d, i] : order) sorted.push_back(std::move(exps[i]));
  return sorted;
}

int64_t monomial(const std::vector<int> &e, const std::vector<int64_t> &syms) {
  int64_t p = 1;
  for (size_t i = 0; i < e.size(); ++i) {
    for (int x = 0; x < e[i]; ++x) p *= syms[i];
  }
  return p;
}

SizeExpr exprOf(int64_t c, const std::vector<int> &e) {
  SizeExpr out;
  out.c = c;
  for (size_t i = 0; i < e.size() && c != 0; ++i) {
    for (int x = 0; x < e[i]; ++x) out.syms.push_back(static_cast<int32_t>(i));
  }
  return out;
}

} // namespace

bool fitSize(const std::vector<int64_t> &values, const std::vector<std::vector<int64_t>> &syms,
             SizeExpr &out) {
  for (const std::vector<int> &e : exponentVectors(syms.empty() ? 0 : syms[0].size())) {
    int64_t p0 = monomial(e, syms[0]);
    if (p0 == 0 || values[0] % p0 != 0) continue;
    int64_t c = values[0] / p0;
    bool ok = true;
    for (size_t s = 1; s < values.size() && ok; ++s) ok = c * monomial(e, syms[s]) == values[s];
    if (!ok) continue;
    out = exprOf(c, e);
    return true;
  }
  return false;
}

bool fitSizePlus(const std::vector<int64_t> &values, const std::vector<std::vector<int64_t>> &syms,
                 SizeExpr &out) {
  if (fitSize(values, syms, out)) return true;
  if (values.size() < 3) return false; // two unknowns: a third sample must confirm them
  for (const std::vector<int> &e : exponentVectors(syms[0].size())) {
    int64_t p0 = monomial(e, syms[0]), p1 = monomial(e, syms[1]);
    if (p0 == p1 || (values[0] - values[1]) % (p0 - p1) != 0) continue;
    int64_t c = (values[0] - values[1]) / (p0 - p1);
    int64_t b = values[0] - c * p0;
    bool ok = c != 0;
    for (size_t s = 2; s < values.size() && ok; ++s) ok = c * monomial(e, syms[s]) + b == values[s];
    if (!ok) continue;
    out = exprOf(c, e);
    out.add = b;
    return true;
  }
  return false;
}

bool fitSymbolicProgram(const std::vector<ProgramSample> &samples, Program &out, std::string &why) {
  if (samples.size() < 3) {
    why = "fewer than three samples";
    return false;
  }
  std::string shape = structureOf(samples[0].program);
  for (size_t s = 1; s < samples.size(); ++s) {
    if (structureOf(samples[s].program) != shape) {
      why = "the lowered program at " + symsStr(samples[s].syms) + " differs from the one at " +
            symsStr(samples[0].syms) + " (the function or a fusion depends on the size)";
      return false;
    }
  }
  std::vector<std::vector<int64_t>> syms;
  for (const ProgramSample &s : samples) syms.push_back(s.syms);
  out = samples[0].program;
  std::vector<std::vector<const int64_t *>> fields;
  for (const ProgramSample &s : samples) fields.push_back(sizeFields(s.program));
  std::vector<int64_t> values(samples.size());
  auto fail = [&](const std::string &what, const std::string &form) {
    std::string seen;
    for (size_t s = 0; s < values.size(); ++s) {
      seen += (s ? ", " : "") + std::to_string(values[s]) + " at " + symsStr(syms[s]);
    }
    why = what + " is not " + form + " (" + seen + ")";
    return false;
  };
  out.symbols.fields.clear();
  for (size_t f = 0; f < fields[0].size(); ++f) {
    bool varies = false;
    for (size_t s = 0; s < samples.size(); ++s) {
      values[s] = *fields[s][f];
      varies = varies || values[s] != values[0];
    }
    if (!varies) continue;
    SymField field;
    field.field = static_cast<int32_t>(f);
    if (!fitSizePlus(values, syms, field.expr)) {
      return fail("a size of the program", "a constant plus a constant times a product of sizes");
    }
    out.symbols.fields.push_back(field);
  }
  for (size_t k = 0; k < out.kernels.size(); ++k) {
    std::vector<std::vector<const SizeExpr *>> sizes;
    for (const ProgramSample &s : samples) sizes.push_back(kernelSizes(s.program.kernels[k]));
    std::vector<SizeExpr *> target = kernelSizes(out.kernels[k]);
    for (size_t f = 0; f < target.size(); ++f) {
      for (size_t s = 0; s < samples.size(); ++s) values[s] = sizes[s][f]->c;
      if (!fitSizePlus(values, syms, *target[f])) {
        return fail("a size of kernel " + out.kernels[k].name,
                    "a constant plus a constant times a product of sizes");
      }
    }
  }
  return true;
}

Program specializeProgram(const Program &p, const int64_t *syms) {
  Program out;
  out.buffers = p.buffers;
  out.values = p.values;
  out.steps = p.steps;
  out.outputs = p.outputs;
  out.numInputs = p.numInputs;
  std::vector<int64_t *> fields = sizeFields(out);
  for (const SymField &f : p.symbols.fields) *fields[f.field] = evalSize(f.expr, syms);
  planArena(out);
  return out;
}

bool chooseProbes(const std::vector<int64_t> &traced, const std::vector<Symbol> &ranges, int count,
                  std::vector<std::vector<int64_t>> &out) {
  out.assign(static_cast<size_t>(count), std::vector<int64_t>(traced.size()));
  std::vector<int64_t> used;
  auto ok = [&](int64_t q) {
    if (std::find(used.begin(), used.end(), q) != used.end()) return false;
    for (int64_t t : traced) {
      if (t == q || (t != 0 && t % q == 0)) return false;
    }
    return true;
  };
  for (int c = 0; c < count; ++c) {
    for (size_t i = 0; i < traced.size(); ++i) {
      int64_t q = std::max<int64_t>(ranges[i].min, 5);
      while (q <= ranges[i].max && q < (int64_t{1} << 20) && !(isPrime(q) && ok(q))) ++q;
      if (q > ranges[i].max || q >= (int64_t{1} << 20)) return false;
      used.push_back(q);
      out[static_cast<size_t>(c)][i] = q;
    }
  }
  return true;
}

} // namespace rcjit
