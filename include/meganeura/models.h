#pragma once
// Built-in models: graph builders for the command line, the benchmarks and the tests.
#include <cstdint>
#include <memory>
#include <string>

#include <meganeura/graph.h>

namespace mn {

enum class ModelKind : uint8_t { mlp, cnn };
const char* model_name(ModelKind k);
ModelKind model_from_name(const std::string& name);  // "mlp" or "cnn"

// An image classifier over inputs "x" ([batch, 784] for the MLP, [batch, 1, 28, 28] for the CNN)
// with logits [batch, classes]; with labels, "y" (i32 [batch], ignore_index -100 for padding)
// and the mean cross-entropy `loss`.
struct Classifier {
  std::unique_ptr<Graph> graph;  // owned here: the tensors below point into it
  Tensor input, labels, logits, loss;
  Shape sample_shape;
};

struct ClassifierSpec {
  ModelKind kind = ModelKind::mlp;
  int64_t batch = 64;
  int64_t classes = 10;
  std::vector<int64_t> hidden = {128};  // widths of the hidden fully connected layers
  uint64_t seed = 0;                    // parameter initialization
  bool with_loss = true;
};

// PyTorch's default initialization for Linear and Conv2d (uniform ±1/sqrt(fan_in)).
Classifier build_classifier(const ClassifierSpec& spec);

// A fully connected layer y = x·w + b with w [in, out] named "<name>.weight", b "<name>.bias".
Tensor linear(Tensor x, int64_t out_features, const std::string& name, uint64_t seed,
              bool bias = true);

}  // namespace mn
