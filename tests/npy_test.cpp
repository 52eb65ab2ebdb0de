// NumPy .npy read and write (tools/Npy.h): round trips, numpy's own files, malformed files.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include <rcjit/rcjit.h>

#include "tools/Npy.h"

namespace {

using rcjit::DType;
using rcjit::Tensor;
using rcjit::tools::decodeNpy;
using rcjit::tools::encodeNpy;
using rcjit::tools::readNpy;
using rcjit::tools::writeNpy;

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "rcjit_npy_" + std::to_string(::getpid()) + "_" + name;
}

// A .npy file of format version `major`.0 with header dict `dict` and raw `data`.
std::string npy(int major, const std::string &dict, const std::string &data) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const std::string text = dict + "\n";
  const size_t n = text.size();
  for (int k = 0; k < (major == 1 ? 2 : 4); ++k) out += static_cast<char>((n >> (8 * k)) & 0xff);
  return out + text + data;
}

std::string bytesOf(const void *p, size_t n) {
  return std::string(static_cast<const char *>(p), n);
}

// The message of the rcjit::Error that decoding `bytes` throws ("" when it throws none).
std::string decodeError(const std::string &bytes) {
  try {
    decodeNpy(bytes, "x.npy");
  } catch (const rcjit::Error &e) {
    return e.what();
  }
  return "";
}

TEST(Npy, RoundTripsEveryDtype) {
  const Tensor f =
      Tensor::from_vector(std::vector<float>{1.5f, -2.f, 3.25f, 0.f, 7.f, -0.5f}, {2, 3});
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::i32, DType::i64, DType::boolean}) {
    const Tensor t = d == DType::boolean ? f.to(DType::i64).to(DType::boolean) : f.to(d);
    const Tensor back = decodeNpy(encodeNpy(t), "round trip");
    EXPECT_EQ(back.dtype(), d) << rcjit::dtypeName(d);
    EXPECT_EQ(back.shape(), t.shape());
    EXPECT_EQ(back.to(DType::f64).to_vector<double>(), t.to(DType::f64).to_vector<double>())
        << rcjit::dtypeName(d);
  }
  // bf16, which numpy lacks, is written as float32 with the same values
  const Tensor b = decodeNpy(encodeNpy(f.to(DType::bf16)), "bf16");
  EXPECT_EQ(b.dtype(), DType::f32);
  EXPECT_EQ(b.to_vector<float>(), f.to(DType::bf16).to(DType::f32).to_vector<float>());
  // 0-d, 1-d, an empty dimension, and a non-contiguous view written in C order
  for (const rcjit::Shape &s : {rcjit::Shape{}, rcjit::Shape{5}, rcjit::Shape{3, 0, 2}}) {
    const Tensor back = decodeNpy(encodeNpy(Tensor::ones(s)), "shape");
    EXPECT_EQ(back.shape(), s);
  }
  const Tensor tr = rcjit::transpose(f, 0, 1);
  EXPECT_EQ(decodeNpy(encodeNpy(tr), "view").to_vector<float>(),
            tr.contiguous().to_vector<float>());
}

TEST(Npy, HeaderIsWhatNumpyWrites) {
  const std::string b = encodeNpy(Tensor::zeros({2, 3}));
  EXPECT_EQ(b.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t len = static_cast<uint8_t>(b[8]) | static_cast<uint8_t>(b[9]) << 8;
  EXPECT_EQ((10 + len) % 64, 0u);
  EXPECT_EQ(b.substr(10, 60), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), } ");
  EXPECT_EQ(b[10 + len - 1], '\n');
  EXPECT_EQ(b.size(), 10 + len + 24);
  EXPECT_NE(encodeNpy(Tensor::zeros({7})).find("'shape': (7,), }"), std::string::npos);
}

TEST(Npy, ReadsNumpysFilesAndWritesFiles) {
  // written by numpy (scripts/onnx_fixtures.py): int64 token ids [1, 8]
  const Tensor ids = readNpy(RCJIT_SOURCE_DIR "/tests/data/onnx/bert/case0/input_ids.npy");
  EXPECT_EQ(ids.dtype(), DType::i64);
  EXPECT_EQ(ids.shape(), (rcjit::Shape{1, 8}));
  for (int64_t v : ids.to_vector<int64_t>()) EXPECT_TRUE(v >= 0 && v < 100) << v;
  const Tensor out =
      readNpy(RCJIT_SOURCE_DIR "/tests/data/onnx/bert/case2/expected/last_hidden_state.npy");
  EXPECT_EQ(out.dtype(), DType::f32);
  EXPECT_EQ(out.shape(), (rcjit::Shape{3, 12, 64}));
  const std::string p = tempPath("w.npy");
  writeNpy(p, out);
  EXPECT_EQ(readNpy(p).to_vector<float>(), out.to_vector<float>());
  std::filesystem::remove(p);
  try {
    writeNpy("/no/such/dir/x.npy", out);
    ADD_FAILURE() << "no error";
  } catch (const rcjit::Error &e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/dir/x.npy"), std::string::npos) << e.what();
  }
}

TEST(Npy, Versions2And3AndEightBitIntegers) {
  const int32_t v[3] = {1, -2, 3};
  const std::string d = "{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }";
  for (int major : {1, 2, 3}) {
    const Tensor t = decodeNpy(npy(major, d, bytesOf(v, sizeof v)), "v");
    EXPECT_EQ(t.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 3})) << major;
  }
  const std::string raw("\xff\x01\x80", 3);
  const Tensor i8 =
      decodeNpy(npy(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (3,)}", raw), "i1");
  EXPECT_EQ(i8.dtype(), DType::i32);
  EXPECT_EQ(i8.to_vector<int32_t>(), (std::vector<int32_t>{-1, 1, -128}));
  const Tensor u8 = decodeNpy(
      npy(1, "{\"shape\": (3,), \"descr\": \"|u1\", \"fortran_order\": False}", raw), "u1");
  EXPECT_EQ(u8.to_vector<int32_t>(), (std::vector<int32_t>{255, 1, 128}));
}

TEST(Npy, MalformedFilesAreErrorsNamingTheProblem) {
  const float one = 1.f;
  const std::string f1 = bytesOf(&one, 4);
  auto hdr = [](const std::string &descr, const std::string &order, const std::string &shape) {
    return "{'descr': '" + descr + "', 'fortran_order': " + order + ", 'shape': " + shape + ", }";
  };
  const std::string good = hdr("<f4", "False", "(1,)");
  ASSERT_EQ(decodeError(npy(1, good, f1)), "");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"PK\x03\x04 a zip file", "not a .npy file"},
      {"", "not a .npy file"},
      {std::string("\x93NUMPY\x01", 7), "ends inside the header"},
      {npy(4, good, f1), "format version 4.0"},
      {npy(1, good, f1).substr(0, 30), "ends inside the header (58 bytes claimed, 20 present)"},
      {std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12), "over the 1 MiB limit"},
      {npy(1, good, ""), "the data is 0 bytes; <f4 [1] needs 4 (truncated)"},
      {npy(1, good, f1 + "x"), "needs 4 (trailing bytes)"},
      {npy(1, hdr("<f4", "True", "(1,)"), f1), "Fortran order"},
      {npy(1, hdr(">f4", "False", "(1,)"), f1), "big-endian"},
      {npy(1, hdr("<c8", "False", "(1,)"), f1), "dtype '<c8' is not supported"},
      {npy(1, hdr("<U3", "False", "(1,)"), f1), "dtype '<U3' is not supported"},
      {npy(1, hdr("<f4", "False", "(-1,)"), f1), "not a non-negative integer"},
      {npy(1, hdr("<f4", "False", "(99999999999999999999,)"), f1), "overflows 64 bits"},
      {npy(1, hdr("<f8", "False", "(4611686018427387904, 8)"), f1), "overflows"},
      {npy(1, hdr("<f4", "Maybe", "(1,)"), f1), "fortran_order is not True or False"},
      {npy(1, "{'descr': '<f4', 'shape': (1,)}", f1), "lacks the key 'fortran_order'"},
      {npy(1, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", f1),
       "'descr' appears twice"},
      {npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}", f1),
       "unexpected header key 'x'"},
      {npy(1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}", f1),
       "structured dtype"},
      {npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} junk", f1),
       "unexpected text after the header dict"},
      {npy(1, "{'descr' '<f4', 'fortran_order': False, 'shape': (1,)}", f1), "expected ':'"},
      {npy(1, "{'descr': '<f4 'fortran_order': False, 'shape': (1,)}", f1), "expected ',' or '}'"},
      {npy(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)", f1), "expected ','"},
      {npy(1, "{'descr': '\xe2\x82\xac', 'fortran_order': False, 'shape': (1,)}", f1),
       "not printable ASCII"},
      {npy(1, hdr("|b1", "False", "(2,)"), std::string("\x01\x02", 2)), "bool element 1 is 2"},
  };
  for (const auto &[bytes, want] : cases) {
    const std::string got = decodeError(bytes);
    EXPECT_NE(got.find(want), std::string::npos) << "want '" << want << "', got '" << got << "'";
    if (!got.empty()) {
      EXPECT_EQ(got.rfind("npy x.npy: ", 0), 0u) << got;
    }
  }
}

TEST(Npy, FileErrorsNameThePath) {
  auto readError = [](const std::string &path) -> std::string {
    try {
      readNpy(path);
    } catch (const rcjit::Error &e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(readError("/no/such/file.npy").find("/no/such/file.npy"), std::string::npos);
  EXPECT_NE(readError("/tmp").find("a directory"), std::string::npos);
  // a truncated file on disk: the header checked before the data is read
  const std::string p = tempPath("trunc.npy");
  const std::string full = encodeNpy(Tensor::ones({4, 4}));
  for (size_t cut : {size_t(5), size_t(9), size_t(40), full.size() - 1}) {
    std::ofstream(p, std::ios::binary).write(full.data(), static_cast<std::streamsize>(cut));
    const std::string e = readError(p);
    EXPECT_EQ(e.rfind("npy " + p + ": ", 0), 0u) << cut << ": " << e;
  }
  std::ofstream(p, std::ios::binary).write(full.data(), static_cast<std::streamsize>(full.size()));
  EXPECT_EQ(readError(p), "");
  std::filesystem::remove(p);
}

} // namespace
