// printGraph: the graph IR's readable text form (grammar at the top of GraphParser.cpp).
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "tracer/GraphIO.h"

namespace rcjit {

namespace {

constexpr std::string_view kHeaderComment =
    "# rcjit graph: %id = op(inputs) attrs : dtype[dims] @region; "
    "dim sK=V is symbol K traced as V\n";

void appendInt(std::string &out, int64_t v) { out += std::to_string(v); }

// Appends text pieces and integers in order (no temporaries joined with `+`).
template <class... Parts> void put(std::string &out, const Parts &...parts) {
  auto one = [&out](const auto &p) {
    if constexpr (std::is_integral_v<std::decay_t<decltype(p)>>) {
      appendInt(out, static_cast<int64_t>(p));
    } else {
      out += p;
    }
  };
  (one(parts), ...);
}

// Shortest text that reads back to the same double; all NaNs print as "nan".
void appendDouble(std::string &out, double v) {
  if (std::isnan(v)) {
    out += "nan";
    return;
  }
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, res.ptr);
}

void appendQuoted(std::string &out, std::string_view s) {
  out += '"';
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
}

void appendBound(std::string &out, int64_t v) {
  if (v == INT64_MAX) {
    out += "max";
  } else {
    appendInt(out, v);
  }
}

void appendSymbols(std::string &out, const std::vector<Symbol> &symbols) {
  out += "graph(";
  if (!symbols.empty()) out += "symbols: ";
  for (size_t i = 0; i < symbols.size(); ++i) {
    if (i) out += ", ";
    put(out, "s", i, " in [");
    appendBound(out, symbols[i].min);
    out += ", ";
    appendBound(out, symbols[i].max);
    out += "]";
  }
  out += ") {\n";
}

void appendRegion(std::string &out, size_t index, const Region &r) {
  put(out, "  region ", index, " ");
  appendQuoted(out, r.name);
  out += " type ";
  appendQuoted(out, r.type);
  put(out, " parent ", r.parent, " nodes [", r.begin, ", ", r.end, ")");
  if (r.inList) out += " list";
  out += "\n";
}

void appendDims(std::string &out, const Dims &dims) {
  out += "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    appendInt(out, dims[i]);
  }
  out += "]";
}

void appendAttr(std::string &out, AttrBit bit, const Attrs &a) {
  out += " ";
  out += attrName(bit);
  out += "=";
  switch (bit) {
  case kDims:
    appendDims(out, a.dims);
    break;
  case kDim:
    appendInt(out, a.dim);
    break;
  case kStart:
    appendInt(out, a.start);
    break;
  case kEnd:
    appendInt(out, a.end);
    break;
  case kStride:
    appendInt(out, a.stride);
    break;
  case kPadding:
    appendInt(out, a.padding);
    break;
  case kValue:
    appendDouble(out, a.value);
    break;
  case kEps:
    appendDouble(out, a.eps);
    break;
  case kKeepdim:
    out += a.keepdim ? "true" : "false";
    break;
  case kCausal:
    out += a.causal ? "true" : "false";
    break;
  case kReduce:
    out += collectiveReduceName(a.reduce);
    break;
  case kRoot:
    appendInt(out, a.root);
    break;
  case kWorld:
    appendInt(out, a.world);
    break;
  }
}

void appendAttrs(std::string &out, OpKind op, const Attrs &a) {
  const uint32_t used = opInfo(op).attrs;
  for (uint32_t bit = 1; bit <= kLastAttrBit; bit <<= 1) {
    if (used & bit) appendAttr(out, static_cast<AttrBit>(bit), a);
  }
}

void appendType(std::string &out, DType dtype, const SymShape &shape) {
  out += dtypeName(dtype);
  out += "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    if (shape[i].isSymbolic()) put(out, "s", shape[i].sym, "=");
    appendInt(out, shape[i].value);
  }
  out += "]";
}

void appendInputOp(std::string &out, const Node &n) {
  out += n.inputKind == InputKind::arg ? "input arg " : "input captured ";
  appendInt(out, n.inputIndex);
  if (!n.name.empty()) {
    out += " ";
    appendQuoted(out, n.name);
  }
}

void appendComputeOp(std::string &out, const Node &n) {
  out += opName(n.op);
  out += "(";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (i) out += ", ";
    put(out, "%", n.inputs[i]);
  }
  out += ")";
  appendAttrs(out, n.op, n.attrs);
}

void appendNode(std::string &out, size_t id, const Node &n) {
  put(out, "  %", id, " = ");
  if (n.op == OpKind::input) {
    appendInputOp(out, n);
  } else {
    appendComputeOp(out, n);
  }
  out += " : ";
  appendType(out, n.dtype, n.shape);
  if (n.region >= 0) put(out, " @", n.region);
  out += "\n";
}

void appendReturn(std::string &out, const std::vector<int> &outputs) {
  out += "  return";
  for (size_t i = 0; i < outputs.size(); ++i) {
    put(out, i ? ", %" : " %", outputs[i]);
  }
  out += "\n}\n";
}

} // namespace

std::string_view attrName(AttrBit bit) {
  switch (bit) {
  case kDims:
    return "dims";
  case kDim:
    return "dim";
  case kStart:
    return "start";
  case kEnd:
    return "end";
  case kStride:
    return "stride";
  case kPadding:
    return "padding";
  case kValue:
    return "value";
  case kEps:
    return "eps";
  case kKeepdim:
    return "keepdim";
  case kCausal:
    return "causal";
  case kReduce:
    return "reduce";
  case kRoot:
    return "root";
  case kWorld:
    return "world";
  }
  return {};
}

std::string_view collectiveReduceName(int64_t reduce) {
  switch (reduce) {
  case 0:
    return "sum";
  case 1:
    return "mean";
  case 2:
    return "max";
  default:
    return "?";
  }
}

std::string printGraph(const Graph &g) {
  std::string out(kHeaderComment);
  appendSymbols(out, g.symbols);
  for (size_t i = 0; i < g.regions.size(); ++i) appendRegion(out, i, g.regions[i]);
  for (size_t i = 0; i < g.nodes.size(); ++i) appendNode(out, i, g.nodes[i]);
  appendReturn(out, g.outputs);
  return out;
}

} // namespace rcjit
