// Writes small ONNX models in protobuf wire format for the importer's tests and fuzz seeds.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace rcjit::onnx::testing {

/// One protobuf message being written: fields appended in order.
class Msg {
public:
  Msg &varint(uint32_t field, uint64_t v) {
    key(field, 0);
    raw(v);
    return *this;
  }
  Msg &bytes(uint32_t field, const std::string &b) {
    key(field, 2);
    raw(b.size());
    out_ += b;
    return *this;
  }
  Msg &msg(uint32_t field, const Msg &m) { return bytes(field, m.str()); }
  Msg &f32(uint32_t field, float f) {
    key(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);
    out_.append(b, 4);
    return *this;
  }
  const std::string &str() const { return out_; }

private:
  void key(uint32_t field, int wire) { raw((static_cast<uint64_t>(field) << 3) | wire); }
  void raw(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  std::string out_;
};

enum : int { kFloat = 1, kInt64 = 7, kBool = 9 };

/// TensorProto with raw little-endian data.
inline Msg tensor(const std::string &name, int type, const std::vector<int64_t> &dims,
                  const std::string &rawData) {
  Msg t;
  for (int64_t d : dims) t.varint(1, static_cast<uint64_t>(d));
  t.varint(2, type).bytes(8, name).bytes(9, rawData);
  return t;
}
template <class T> std::string rawOf(const std::vector<T> &v) {
  return std::string(reinterpret_cast<const char *>(v.data()), v.size() * sizeof(T));
}
inline Msg floats(const std::string &name, const std::vector<int64_t> &dims,
                  const std::vector<float> &v) {
  return tensor(name, kFloat, dims, rawOf(v));
}
inline Msg int64s(const std::string &name, const std::vector<int64_t> &dims,
                  const std::vector<int64_t> &v) {
  return tensor(name, kInt64, dims, rawOf(v));
}

inline Msg attrInt(const std::string &name, int64_t v) {
  return Msg().bytes(1, name).varint(3, static_cast<uint64_t>(v)).varint(20, 2);
}
inline Msg attrFloat(const std::string &name, float v) {
  return Msg().bytes(1, name).f32(2, v).varint(20, 1);
}
inline Msg attrInts(const std::string &name, const std::vector<int64_t> &v) {
  Msg m;
  m.bytes(1, name);
  for (int64_t x : v) m.varint(8, static_cast<uint64_t>(x));
  return m.varint(20, 7);
}
inline Msg attrString(const std::string &name, const std::string &v) {
  return Msg().bytes(1, name).bytes(4, v).varint(20, 3);
}
inline Msg attrTensor(const std::string &name, const Msg &t) {
  return Msg().bytes(1, name).msg(5, t).varint(20, 4);
}

inline Msg node(const std::string &op, const std::vector<std::string> &in,
                const std::vector<std::string> &out, const std::string &name = "",
                const std::vector<Msg> &attrs = {}) {
  Msg n;
  for (const auto &i : in) n.bytes(1, i);
  for (const auto &o : out) n.bytes(2, o);
  if (!name.empty()) n.bytes(3, name);
  n.bytes(4, op);
  for (const auto &a : attrs) n.msg(5, a);
  return n;
}

/// ValueInfoProto of a tensor; a dim < 0 is written as the dim_param "d<index>".
inline Msg valueInfo(const std::string &name, int type, const std::vector<int64_t> &dims,
                     const std::vector<std::string> &params = {}) {
  Msg shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    Msg d;
    if (dims[i] >= 0)
      d.varint(1, static_cast<uint64_t>(dims[i]));
    else
      d.bytes(2, i < params.size() ? params[i] : "d" + std::to_string(i));
    shape.msg(1, d);
  }
  Msg tt;
  tt.varint(1, type).msg(2, shape);
  return Msg().bytes(1, name).msg(2, Msg().msg(1, tt));
}

struct GraphSpec {
  std::vector<Msg> nodes, initializers, inputs, outputs;
};

inline std::string model(const GraphSpec &g, int64_t opset = 18) {
  Msg graph;
  for (const auto &n : g.nodes) graph.msg(1, n);
  graph.bytes(2, "g");
  for (const auto &t : g.initializers) graph.msg(5, t);
  for (const auto &i : g.inputs) graph.msg(11, i);
  for (const auto &o : g.outputs) graph.msg(12, o);
  Msg m;
  m.varint(1, 9).bytes(2, "rcjit-test").msg(7, graph).msg(8, Msg().bytes(1, "").varint(2, opset));
  return m.str();
}

} // namespace rcjit::onnx::testing
