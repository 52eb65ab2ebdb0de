// NumPy's .npy format (versions 1.0, 2.0 and 3.0): reading a file into a Tensor, writing one.
#pragma once
#include <string>
#include <string_view>

#include <rcjit/Tensor.h>

namespace rcjit::tools {

/// What a .npy header says: numpy's dtype string ("<f4"), the shape (C order) and the byte
/// offset of the data, which is exactly numel * itemsize bytes long.
struct NpyHeader {
  int major = 1, minor = 0;
  std::string descr;
  Shape shape;
  size_t dataOffset = 0;    // magic + version + length field + the dict text
  size_t itemSize = 0;      // bytes per stored element
  DType dtype = DType::f32; // the tensor's dtype (i1, u1: i32, widened)
  size_t dataBytes() const;
};

/// Parses the header at the start of `bytes` (the whole file, or at least its header);
/// `what` names the file in errors. Checks the magic, the version (1.0, 2.0, 3.0), the
/// header length, every dict key ('descr', 'fortran_order', 'shape'; each once, no other),
/// the dtype (little-endian '<f4' '<f8' '<f2' '<i8' '<i4' '|i1' '|u1' '|b1'; big-endian,
/// structured and other dtypes are errors naming them), C order (Fortran order is an
/// error), and that numel * itemsize does not overflow. Throws rcjit::Error.
NpyHeader parseNpyHeader(std::string_view bytes, const std::string &what);

/// A whole .npy file's bytes as a new contiguous CPU tensor: the header checked as
/// parseNpyHeader does, then the data length (exactly numel * itemsize bytes, no more, no
/// less) and every bool byte (0 or 1). int8 and uint8 arrays become i32 tensors (rcjit has no
/// 8-bit integer dtype; the values are kept). Throws rcjit::Error naming `what`.
Tensor decodeNpy(std::string_view bytes, const std::string &what);

/// Reads the .npy file at `path` (a regular file; the data read straight into the tensor).
/// Throws rcjit::Error naming the path and what is wrong.
Tensor readNpy(const std::string &path);

/// `t` (any device, any strides) as .npy bytes: version 1.0 (2.0 when the header needs it),
/// C order, little-endian, the header padded to a multiple of 64 bytes as numpy writes it.
/// bf16 (which numpy lacks) is written as float32, exactly.
std::string encodeNpy(const Tensor &t);

/// Writes encodeNpy(t) to `path`; an rcjit::Error naming the path and the reason when it
/// cannot be written completely.
void writeNpy(const std::string &path, const Tensor &t);

} // namespace rcjit::tools
