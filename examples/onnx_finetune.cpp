// Fine-tuning an imported ONNX encoder: a new linear head on its first token, AdamW on both
// (exit 0 when the loss falls). Usage: example_onnx_finetune [MODEL.onnx]
#include <cstdio>
#include <string>
#include <vector>

#include <rcjit/Onnx.h>
#include <rcjit/rcjit.h>

using namespace rcjit;

// The exported encoder (inputs input_ids, attention_mask; output 0 last_hidden_state) and a
// classifier head: one module, so parameters() holds the file's weights and the head's.
struct Classifier : nn::Module<Classifier> {
  onnx::Model encoder;
  nn::Linear head;
  Classifier(const std::string &path, int64_t hidden, int64_t classes)
      : encoder(onnx::load(path)), head(hidden, classes, true, 3) {
    register_module("encoder", encoder);
    register_module("head", head);
  }
  Tensor forward(const Tensor &ids, const Tensor &mask) {
    Tensor h = encoder({ids, mask})[0]; // [batch, seq, hidden]
    Tensor first = slice(h, 1, 0, 1).reshape({h.size(0), h.size(2)});
    return head(first); // [batch, classes]
  }
};

int main(int argc, char **argv) {
  const std::string path = argc > 1 ? argv[1] : "tests/data/onnx/bert/model.onnx";
  Classifier net(path, 64, 2); // the fixture encoder: hidden 64, vocabulary 100
  std::printf("%s: inputs", path.c_str());
  for (const std::string &n : net.encoder.input_names()) std::printf(" %s", n.c_str());
  std::printf(", %zu parameter tensors\n", net.parameters().size());

  // The task: is the first token id below 50? 16 sequences of 12 tokens.
  const int64_t batch = 16, seq = 12;
  std::vector<int64_t> ids(batch * seq), labels(batch);
  uint64_t state = 1;
  for (int64_t &id : ids)
    id = static_cast<int64_t>((state = state * 6364136223846793005ull + 1) >> 58) + 36;
  for (int64_t b = 0; b < batch; ++b) {
    ids[b * seq] = b % 2 ? 10 + b : 60 + b;
    labels[b] = ids[b * seq] < 50;
  }
  Tensor x = Tensor::from_vector(ids, {batch, seq});
  Tensor mask = Tensor::ones({batch, seq}, DType::i64);
  Tensor y = Tensor::from_vector(labels, {batch});

  optim::AdamW opt(net.parameters(), {.lr = 3e-3});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    Tensor loss = cross_entropy(net(x, mask), y);
    loss.backward(); // through the head and every imported layer
    opt.step();
    (step == 0 ? first : last) = loss.item();
    if (step % 5 == 0 || step == 29) std::printf("step %2d  loss %.4f\n", step, loss.item());
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < 0.5 * first ? 0 : 1;
}
