// Writes the seed corpora of the harnesses that read binary formats (fuzz/corpus/*/).
//
//   make_fuzz_seeds <fuzz/corpus>
//
// safetensors/: small files of every dtype and a checkpoint (fuzz/CheckpointModel.h); artifacts/: a
// blob saved after two compiles and its decompressed records; cache_entry/: those compiled objects
// and an entry signed with the harness's secret. The graph_parser seeds are `rcjit trace --dump
// graph` outputs.
#include <zstd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <rcjit/rcjit.h>

#include "cache/Artifacts.h"
#include "cache/EntryFormat.h"
#include "fuzz/CheckpointModel.h"
#include "fuzz/FuzzSecret.h"
#include "models/Safetensors.h"

namespace fs = std::filesystem;
using namespace rcjit;

namespace {

void writeFile(const fs::path &p, const std::vector<uint8_t> &b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw Error("cannot write " + p.string());
}

std::vector<uint8_t> decompress(const std::vector<uint8_t> &blob) {
  std::vector<uint8_t> raw(ZSTD_getFrameContentSize(blob.data(), blob.size()));
  size_t n = ZSTD_decompress(raw.data(), raw.size(), blob.data(), blob.size());
  if (ZSTD_isError(n)) throw Error("zstd");
  raw.resize(n);
  return raw;
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    std::cerr << "usage: make_fuzz_seeds <fuzz/corpus>\n";
    return 2;
  }
  const fs::path out = argv[1];
  for (const char *d : {"safetensors", "artifacts", "cache_entry"}) fs::create_directories(out / d);
  const fs::path tmp = fs::temp_directory_path() / "rcjit_fuzz_seeds";
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  cache::set_dir("off");

  rcjit::writeSafetensors(
      (out / "safetensors/f32_i64.safetensors").string(),
      {{"w", Tensor::arange(6).to(DType::f32).reshape({2, 3})}, {"ids", Tensor::arange(4)}},
      {{"format", "pt"}});
  rcjit::writeSafetensors((out / "safetensors/half_bool.safetensors").string(),
                          {{"h", Tensor::ones({3}).to(DType::f16)},
                           {"b", Tensor::ones({2, 2}).to(DType::bf16)},
                           {"m", Tensor::ones({2}).to(DType::boolean)},
                           {"d", Tensor::full({}, 2.0).to(DType::f64)},
                           {"i", Tensor::arange(3).to(DType::i32)}});

  {
    rcjit::fuzz::CheckpointModel m;
    optim::AdamW opt(m.parameters());
    rcjit::fuzz::stepOnce(m, opt);
    save_checkpoint((out / "safetensors/checkpoint.safetensors").string(), m, opt, {{"step", "1"}});
  }

  auto f = compile([](const Tensor &x) { return x * 2.0 + 1.0; });
  auto g = compile([](const Tensor &x) { return softmax(x, -1); });
  f(Tensor::ones({4}));
  g(Tensor::ones({2, 8}));
  std::vector<uint8_t> blob = cache::save_artifacts();
  writeFile(out / "artifacts/two_kernels.blob", blob);
  writeFile(out / "artifacts/two_kernels.raw", decompress(blob));
  cache::Objects objects = cache::unpackArtifacts(blob);
  for (size_t i = 0; i < objects.size(); ++i) {
    writeFile(out / ("cache_entry/object" + std::to_string(i) + ".o"), *objects[i].second);
  }
  cache::EntryFields e;
  e.key = objects.at(0).first;
  e.payload = *objects.at(0).second;
  writeFile(out / "cache_entry/entry.bin", cache::encodeEntry(e, fuzz::fuzzSecret()));
  fs::remove_all(tmp);
  std::cout << "wrote seeds under " << out << " (" << objects.size() << " objects)\n";
  return 0;
}
