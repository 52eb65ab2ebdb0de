// The subset of onnx.proto the importer reads, decoded by a bounded protobuf wire reader.
//
// No protobuf dependency: every length, count and offset is checked against the bytes that
// remain, so a truncated, oversized or malformed file is an rcjit::Error naming the message
// and field, never a crash (fuzz/onnx_model_fuzzer.cpp runs this on arbitrary bytes).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rcjit::onnx {

using KeyValues = std::vector<std::pair<std::string, std::string>>;

/// ONNX TensorProto.DataType values rcjit reads.
enum class OnnxType : int32_t {
  undefined = 0,
  f32 = 1,
  u8 = 2,
  i8 = 3,
  u16 = 4,
  i16 = 5,
  i32 = 6,
  i64 = 7,
  string = 8,
  boolean = 9,
  f16 = 10,
  f64 = 11,
  u32 = 12,
  u64 = 13,
  bf16 = 16
};
std::string onnxTypeName(int32_t t);

/// A TensorProto: data in raw_data (a view into the file's bytes), a typed field, or an
/// external file (external_data key/value pairs).
struct TensorData {
  std::string name;
  int32_t dataType = 0;
  std::vector<int64_t> dims;
  std::string_view raw; // points into the model's bytes: valid while they live
  bool hasRaw = false;
  std::vector<float> floats;
  std::vector<int32_t> int32s; // int32/int16/int8/uint8/bool/f16/bf16 per the spec
  std::vector<int64_t> int64s;
  std::vector<double> doubles;
  std::vector<uint64_t> uint64s;
  bool external = false;
  KeyValues externalData; // location, offset, length, checksum
  bool hasSegment = false;
  size_t stringCount = 0;
};

struct Attribute {
  std::string name;
  int32_t type = 0; // AttributeProto.AttributeType
  float f = 0;
  int64_t i = 0;
  std::string s;
  std::vector<TensorData> t; // zero or one (tensors for TENSORS)
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  bool hasGraph = false;
  std::string refAttrName;
};

struct NodeData {
  std::string name, opType, domain;
  std::vector<std::string> inputs, outputs;
  std::vector<Attribute> attributes;
  KeyValues metadata;
};

struct ValueInfo {
  std::string name;
  int32_t elemType = 0;
  bool hasShape = false;
  std::vector<int64_t> dims;          // -1 where the dim has no value
  std::vector<std::string> dimParams; // "" where the dim has a value or nothing
  bool isTensor = true;
};

struct GraphData {
  std::string name;
  std::vector<NodeData> nodes;
  std::vector<TensorData> initializers;
  std::vector<ValueInfo> inputs, outputs, valueInfo;
  size_t sparseInitializers = 0;
};

struct ModelData {
  int64_t irVersion = 0;
  std::vector<std::pair<std::string, int64_t>> opsets; // domain ("" = ai.onnx), version
  std::string producerName, producerVersion;
  GraphData graph;
  KeyValues metadata;
  size_t functions = 0;
  bool hasGraph = false;
};

/// Decodes a ModelProto. `what` names the file in errors. Views in the result point into
/// `bytes`, which must outlive them.
ModelData parseModel(std::string_view bytes, const std::string &what);
/// Decodes one TensorProto (the backend tests' input_N.pb / output_N.pb files).
TensorData parseTensor(std::string_view bytes, const std::string &what);

} // namespace rcjit::onnx
