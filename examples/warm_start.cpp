// Warm start: compile once, save the artifacts, and warm a fresh process from them.
// Run without arguments: it compiles, saves the blob, then starts itself again with the
// blob's path; the child loads it into an empty cache directory and compiles from it.
#include <rcjit/rcjit.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <unistd.h>

using namespace rcjit;

Tensor block(const Tensor &x, const Tensor &w, const Tensor &g) {
  Tensor h = layer_norm(x, g, Tensor(), 1e-5);
  return softmax(gelu(h * 1.702) + sigmoid(h) * w, -1);
}

double firstCallMs() {
  Tensor w = Tensor::randn({512}, 1), g = Tensor::ones({512});
  auto f = compile([&](const Tensor &x) { return block(x, w, g); });
  Tensor x = Tensor::randn({64, 512}, 2);
  auto t0 = std::chrono::steady_clock::now();
  Tensor y = f(x);
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!allclose(y, block(x, w, g), 1e-4, 1e-5)) std::exit(1);
  return ms;
}

int main(int argc, char **argv) {
  std::string dir = "/tmp/rcjit-warm-start-" + std::to_string(getpid());
  if (argc > 1) { // the fresh process: load the blob into an empty cache, then compile
    cache::set_dir(dir);
    std::ifstream in(argv[1], std::ios::binary);
    std::vector<uint8_t> blob((std::istreambuf_iterator<char>(in)), {});
    size_t n = cache::load_artifacts(blob);
    double ms = firstCallMs();
    std::printf("warm process: loaded %zu objects, first call %.1f ms\n", n, ms);
    cache::clear();
    return 0;
  }
  cache::set_dir(dir);
  cache::clear(); // start cold
  double ms = firstCallMs();
  std::vector<uint8_t> blob = cache::save_artifacts();
  std::string file = dir + ".blob";
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char *>(blob.data()),
             static_cast<std::streamsize>(blob.size()));
  std::printf("cold process: first call %.1f ms, artifacts %zu bytes\n", ms, blob.size());
  std::fflush(stdout);
  cache::clear();
  int rc = std::system(("'" + std::string(argv[0]) + "' '" + file + "'").c_str());
  std::remove(file.c_str());
  return rc == 0 ? 0 : 1;
}
