// The protobuf wire reader and the onnx.proto messages the importer needs (field numbers
// from onnx/onnx.proto); every read is bounded by the bytes left in its message.
#include "onnx/Proto.h"

#include <cstring>

#include <rcjit/Error.h>

namespace rcjit::onnx {

namespace {

enum WireType { kVarint = 0, kFixed64 = 1, kBytes = 2, kFixed32 = 5 };

// One message's bytes: fields are read front to back and never past the end.
class Reader {
public:
  Reader(std::string_view bytes, const std::string &what, const char *msg)
      : p_(reinterpret_cast<const uint8_t *>(bytes.data())), end_(p_ + bytes.size()), what_(what),
        msg_(msg) {}

  bool done() const { return p_ >= end_; }
  // The next field's number and wire type; false at the end of the message.
  bool next(uint32_t &field, int &wire) {
    if (done()) return false;
    uint64_t key = varint();
    field = static_cast<uint32_t>(key >> 3);
    wire = static_cast<int>(key & 7);
    if (field == 0 || (key >> 3) > 0x1fffffff) fail("field number 0 or out of range");
    if (wire != kVarint && wire != kFixed64 && wire != kBytes && wire != kFixed32) {
      fail("unsupported wire type " + std::to_string(wire) + " (field " + std::to_string(field) +
           ")");
    }
    field_ = field;
    return true;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) fail("truncated varint");
      uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  std::string_view bytes() {
    uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) {
      fail("length " + std::to_string(n) + " runs past the end (" + std::to_string(end_ - p_) +
           " bytes left): truncated or corrupt");
    }
    std::string_view v(reinterpret_cast<const char *>(p_), static_cast<size_t>(n));
    p_ += n;
    return v;
  }
  template <class T> T fixed() {
    if (static_cast<size_t>(end_ - p_) < sizeof(T)) fail("truncated fixed-size value");
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  void skip(int wire) {
    switch (wire) {
    case kVarint:
      varint();
      break;
    case kFixed64:
      fixed<uint64_t>();
      break;
    case kFixed32:
      fixed<uint32_t>();
      break;
    default:
      bytes();
      break;
    }
  }
  void expect(int wire, int want) {
    if (wire != want) {
      fail("field " + std::to_string(field_) + " has wire type " + std::to_string(wire) +
           ", expected " + std::to_string(want));
    }
  }
  int64_t int64(int wire) {
    expect(wire, kVarint);
    return static_cast<int64_t>(varint());
  }
  std::string string(int wire) {
    expect(wire, kBytes);
    return std::string(bytes());
  }
  // A repeated scalar field: packed (one length-delimited run) or one value per field.
  template <class T> void repeated(int wire, std::vector<T> &out) {
    if (wire == kBytes) {
      Reader sub(bytes(), what_, msg_);
      while (!sub.done()) out.push_back(sub.scalar<T>(scalarWire<T>()));
    } else {
      out.push_back(scalar<T>(wire));
    }
  }
  template <class T> static int scalarWire() {
    if constexpr (std::is_same_v<T, float>) return kFixed32;
    if constexpr (std::is_same_v<T, double>) return kFixed64;
    return kVarint;
  }
  template <class T> T scalar(int wire) {
    expect(wire, scalarWire<T>());
    if constexpr (std::is_same_v<T, float>) return fixed<float>();
    if constexpr (std::is_same_v<T, double>) return fixed<double>();
    return static_cast<T>(varint());
  }
  [[noreturn]] void fail(const std::string &why) const {
    throw Error("onnx: " + what_ + ": bad protobuf in " + msg_ + ": " + why);
  }
  const std::string &what() const { return what_; }

private:
  const uint8_t *p_;
  const uint8_t *end_;
  const std::string &what_;
  const char *msg_;
  uint32_t field_ = 0;
};

KeyValues::value_type parseEntry(std::string_view b, const std::string &what) {
  Reader r(b, what, "StringStringEntryProto");
  KeyValues::value_type kv;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    if (f == 1)
      kv.first = r.string(w);
    else if (f == 2)
      kv.second = r.string(w);
    else
      r.skip(w);
  }
  return kv;
}

void parseTensorInto(std::string_view b, const std::string &what, TensorData &t) {
  Reader r(b, what, "TensorProto");
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    switch (f) {
    case 1:
      r.repeated(w, t.dims);
      break;
    case 2:
      t.dataType = static_cast<int32_t>(r.int64(w));
      break;
    case 3:
      t.hasSegment = true;
      r.skip(w);
      break;
    case 4:
      r.repeated(w, t.floats);
      break;
    case 5:
      r.repeated(w, t.int32s);
      break;
    case 6:
      t.stringCount++;
      r.skip(w);
      break;
    case 7:
      r.repeated(w, t.int64s);
      break;
    case 8:
      t.name = r.string(w);
      break;
    case 9:
      r.expect(w, kBytes);
      t.raw = r.bytes();
      t.hasRaw = true;
      break;
    case 10:
      r.repeated(w, t.doubles);
      break;
    case 11:
      r.repeated(w, t.uint64s);
      break;
    case 13:
      r.expect(w, kBytes);
      t.externalData.push_back(parseEntry(r.bytes(), what));
      break;
    case 14:
      t.external = r.int64(w) == 1;
      break;
    default:
      r.skip(w);
      break;
    }
  }
}

Attribute parseAttribute(std::string_view b, const std::string &what) {
  Reader r(b, what, "AttributeProto");
  Attribute a;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    switch (f) {
    case 1:
      a.name = r.string(w);
      break;
    case 2:
      a.f = r.scalar<float>(w);
      break;
    case 3:
      a.i = r.int64(w);
      break;
    case 4:
      a.s = r.string(w);
      break;
    case 5:
    case 10:
      r.expect(w, kBytes);
      a.t.emplace_back();
      parseTensorInto(r.bytes(), what, a.t.back());
      break;
    case 6:
    case 11:
      a.hasGraph = true;
      r.skip(w);
      break;
    case 7:
      r.repeated(w, a.floats);
      break;
    case 8:
      r.repeated(w, a.ints);
      break;
    case 9:
      a.strings.push_back(r.string(w));
      break;
    case 20:
      a.type = static_cast<int32_t>(r.int64(w));
      break;
    case 21:
      a.refAttrName = r.string(w);
      break;
    default:
      r.skip(w);
      break;
    }
  }
  return a;
}

NodeData parseNode(std::string_view b, const std::string &what) {
  Reader r(b, what, "NodeProto");
  NodeData n;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    switch (f) {
    case 1:
      n.inputs.push_back(r.string(w));
      break;
    case 2:
      n.outputs.push_back(r.string(w));
      break;
    case 3:
      n.name = r.string(w);
      break;
    case 4:
      n.opType = r.string(w);
      break;
    case 5:
      r.expect(w, kBytes);
      n.attributes.push_back(parseAttribute(r.bytes(), what));
      break;
    case 7:
      n.domain = r.string(w);
      break;
    case 9:
      r.expect(w, kBytes);
      n.metadata.push_back(parseEntry(r.bytes(), what));
      break;
    default:
      r.skip(w);
      break;
    }
  }
  return n;
}

void parseShape(std::string_view b, const std::string &what, ValueInfo &v) {
  Reader r(b, what, "TensorShapeProto");
  uint32_t f;
  int w;
  v.hasShape = true;
  while (r.next(f, w)) {
    if (f != 1) {
      r.skip(w);
      continue;
    }
    r.expect(w, kBytes);
    Reader d(r.bytes(), what, "TensorShapeProto.Dimension");
    int64_t value = -1;
    std::string param;
    uint32_t df;
    int dw;
    while (d.next(df, dw)) {
      if (df == 1)
        value = d.int64(dw);
      else if (df == 2)
        param = d.string(dw);
      else
        d.skip(dw);
    }
    v.dims.push_back(value);
    v.dimParams.push_back(param);
  }
}

ValueInfo parseValueInfo(std::string_view b, const std::string &what) {
  Reader r(b, what, "ValueInfoProto");
  ValueInfo v;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    if (f == 1) {
      v.name = r.string(w);
    } else if (f == 2) {
      r.expect(w, kBytes);
      Reader t(r.bytes(), what, "TypeProto");
      uint32_t tf;
      int tw;
      bool tensor = false;
      while (t.next(tf, tw)) {
        if (tf != 1) {
          t.skip(tw);
          continue;
        }
        tensor = true;
        t.expect(tw, kBytes);
        Reader tt(t.bytes(), what, "TypeProto.Tensor");
        uint32_t ff;
        int fw;
        while (tt.next(ff, fw)) {
          if (ff == 1)
            v.elemType = static_cast<int32_t>(tt.int64(fw));
          else if (ff == 2) {
            tt.expect(fw, kBytes);
            parseShape(tt.bytes(), what, v);
          } else
            tt.skip(fw);
        }
      }
      v.isTensor = tensor;
    } else {
      r.skip(w);
    }
  }
  return v;
}

GraphData parseGraph(std::string_view b, const std::string &what) {
  Reader r(b, what, "GraphProto");
  GraphData g;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    switch (f) {
    case 1:
      r.expect(w, kBytes);
      g.nodes.push_back(parseNode(r.bytes(), what));
      break;
    case 2:
      g.name = r.string(w);
      break;
    case 5:
      r.expect(w, kBytes);
      g.initializers.emplace_back();
      parseTensorInto(r.bytes(), what, g.initializers.back());
      break;
    case 11:
      r.expect(w, kBytes);
      g.inputs.push_back(parseValueInfo(r.bytes(), what));
      break;
    case 12:
      r.expect(w, kBytes);
      g.outputs.push_back(parseValueInfo(r.bytes(), what));
      break;
    case 13:
      r.expect(w, kBytes);
      g.valueInfo.push_back(parseValueInfo(r.bytes(), what));
      break;
    case 15:
      g.sparseInitializers++;
      r.skip(w);
      break;
    default:
      r.skip(w);
      break;
    }
  }
  return g;
}

} // namespace

std::string onnxTypeName(int32_t t) {
  static const char *names[] = {"undefined",  "float",   "uint8",  "int8",   "uint16",
                                "int16",      "int32",   "int64",  "string", "bool",
                                "float16",    "double",  "uint32", "uint64", "complex64",
                                "complex128", "bfloat16"};
  if (t >= 0 && t < static_cast<int32_t>(sizeof(names) / sizeof(names[0]))) return names[t];
  return "type " + std::to_string(t);
}

ModelData parseModel(std::string_view bytes, const std::string &what) {
  Reader r(bytes, what, "ModelProto");
  ModelData m;
  uint32_t f;
  int w;
  while (r.next(f, w)) {
    switch (f) {
    case 1:
      m.irVersion = r.int64(w);
      break;
    case 2:
      m.producerName = r.string(w);
      break;
    case 3:
      m.producerVersion = r.string(w);
      break;
    case 7:
      r.expect(w, kBytes);
      m.graph = parseGraph(r.bytes(), what);
      m.hasGraph = true;
      break;
    case 8: {
      r.expect(w, kBytes);
      Reader o(r.bytes(), what, "OperatorSetIdProto");
      std::pair<std::string, int64_t> op;
      uint32_t of;
      int ow;
      while (o.next(of, ow)) {
        if (of == 1)
          op.first = o.string(ow);
        else if (of == 2)
          op.second = o.int64(ow);
        else
          o.skip(ow);
      }
      m.opsets.push_back(op);
      break;
    }
    case 14:
      r.expect(w, kBytes);
      m.metadata.push_back(parseEntry(r.bytes(), what));
      break;
    case 25:
      m.functions++;
      r.skip(w);
      break;
    default:
      r.skip(w);
      break;
    }
  }
  return m;
}

TensorData parseTensor(std::string_view bytes, const std::string &what) {
  TensorData t;
  parseTensorInto(bytes, what, t);
  return t;
}

} // namespace rcjit::onnx
