// ONNX's backend node tests (Debian's libonnx-testdata) through the importer, eager and
// compiled: every case rcjit supports must match; the rest are listed with the reason in
// tests/data/onnx_backend/unsupported.txt, and a listed case that passes fails the test too
// (so the list can only shrink). RCJIT_ONNX_BACKEND_WRITE=FILE writes the current list.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <rcjit/rcjit.h>

namespace rcjit::onnx {
namespace {

namespace fs = std::filesystem;

const char *kNodeDir = "/usr/share/libonnx-testdata/data/node";
constexpr int kShards = 4;

std::vector<fs::path> cases() {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(kNodeDir)) {
    if (fs::exists(e.path() / "model.onnx")) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, std::string> listed() {
  std::map<std::string, std::string> out;
  std::ifstream in(std::string(RCJIT_SOURCE_DIR) + "/tests/data/onnx_backend/unsupported.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t tab = line.find('\t');
    out[line.substr(0, tab)] = tab == std::string::npos ? "" : line.substr(tab + 1);
  }
  return out;
}

std::vector<Tensor> pbFiles(const fs::path &dir, const std::string &prefix) {
  std::vector<Tensor> out;
  for (int i = 0;; ++i) {
    fs::path p = dir / (prefix + "_" + std::to_string(i) + ".pb");
    if (!fs::exists(p)) return out;
    out.push_back(load_tensor_proto(p.string()));
  }
}

// "" when the outputs match, else why not
std::string compare(const std::vector<Tensor> &got, const std::vector<Tensor> &want,
                    const char *mode) {
  if (got.size() < want.size()) return std::string(mode) + ": fewer outputs than expected";
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i].shape() != want[i].shape()) {
      return std::string(mode) + ": output " + std::to_string(i) + " has shape " +
             shapeStr(got[i].shape()) + ", expected " + shapeStr(want[i].shape());
    }
    bool fl = isFloating(want[i].dtype());
    if (!allclose(got[i].to(DType::f64), want[i].to(DType::f64), fl ? 1e-3 : 0, fl ? 1e-4 : 0)) {
      return std::string(mode) + ": output " + std::to_string(i) + " differs";
    }
  }
  return "";
}

// Runs one case eager and compiled (full); "" when both match
std::string runCase(const fs::path &dir) {
  try {
    Model m = load((dir / "model.onnx").string());
    fs::path data = dir / "test_data_set_0";
    std::vector<Tensor> in = pbFiles(data, "input"), want = pbFiles(data, "output");
    if (in.size() != m.input_names().size()) return "optional inputs left out";
    std::string bad = compare(m(in), want, "eager");
    if (!bad.empty()) return bad;
    CompileOptions o;
    o.mode = Mode::full;
    auto cm = compile(m, o);
    return compare(cm(in), want, "compiled");
  } catch (const Error &e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::string at = dir.string() + "/"; // the path varies; the reason does not
    for (size_t cut; (cut = msg.find(at)) != std::string::npos;) msg.erase(cut, at.size());
    return msg.substr(0, 300);
  }
}

void runShard(int shard) {
  if (!fs::exists(kNodeDir)) GTEST_SKIP() << kNodeDir << " missing: bash scripts/deps.sh";
  std::map<std::string, std::string> known = listed();
  std::vector<fs::path> all = cases();
  ASSERT_GT(all.size(), 500u);
  int passed = 0;
  std::vector<std::pair<std::string, std::string>> failing;
  for (size_t i = shard; i < all.size(); i += kShards) {
    std::string name = all[i].filename().string();
    std::string why = runCase(all[i]);
    if (why.empty()) {
      ++passed;
      EXPECT_FALSE(known.count(name)) << name << " passes now: remove it from unsupported.txt";
    } else {
      failing.emplace_back(name, why);
      EXPECT_TRUE(known.count(name)) << name << " fails and is not listed: " << why;
    }
  }
  if (const char *w = std::getenv("RCJIT_ONNX_BACKEND_WRITE")) {
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    std::ofstream out(std::string(w) + "." + std::to_string(shard));
    for (const auto &[n, why] : failing) out << n << '\t' << why << '\n';
  }
  std::cout << "shard " << shard << ": " << passed << " cases pass, " << failing.size()
            << " listed as unsupported\n";
}

TEST(OnnxBackend, Shard0) { runShard(0); }
TEST(OnnxBackend, Shard1) { runShard(1); }
TEST(OnnxBackend, Shard2) { runShard(2); }
TEST(OnnxBackend, Shard3) { runShard(3); }

} // namespace
} // namespace rcjit::onnx
