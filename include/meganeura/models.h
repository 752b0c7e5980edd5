#pragma once
// Built-in models: graph builders for the command line, the benchmarks and the tests.
#include <cstdint>
#include <memory>
#include <string>

#include <meganeura/graph.h>

namespace mn {

namespace nn {
class Module;  // <meganeura/nn.h>
}

enum class ModelKind : uint8_t { mlp, cnn, resnet18, resnet34, resnet50 };
const char* model_name(ModelKind k);
// "mlp", "cnn", "resnet18", "resnet34", "resnet50"; mn::Error naming them for anything else.
ModelKind model_from_name(const std::string& name);

// An image classifier over inputs "x" ([batch, 784] for the MLP, [batch, 1, 28, 28] for the CNN)
// with logits [batch, classes]; with labels, "y" (i32 [batch], ignore_index -100 for padding)
// and the mean cross-entropy `loss`.
//
// Built of nn modules, so its parameters are PyTorch's state_dict of the same network:
//   mlp: fc1 (Linear 784 -> hidden[0]), ReLU, fc2, ..., fcN (Linear -> classes)
//   cnn: conv1 (Conv2d 1 -> 16, 3×3, padding 1), ReLU, max_pool 2, conv2 (16 -> 32), ReLU,
//        max_pool 2, flatten, then fc1 ... fcN as the MLP over 32·7·7 features
//   resnet18/34/50: torchvision's ResNet (vision::resnet, its state_dict keys) with the small
//        input stem for the 28×28 single-channel images: conv1 a 3×3 stride-1 convolution of
//        1 channel, no max pool, so layer1 runs at 28², layer4 at 4² (`hidden` is unused)
// Linear weights are [out, in] (PyTorch's layout; checkpoints of format 1 held them [in, out]
// and are transposed when resumed).
struct Classifier {
  std::unique_ptr<Graph> graph;        // owned here: the tensors below point into it
  std::shared_ptr<nn::Module> module;  // the network, for nn::state_dict / load_state_dict
  Tensor input, labels, logits, loss;
  Shape sample_shape;
};

struct ClassifierSpec {
  ModelKind kind = ModelKind::mlp;
  int64_t batch = 64;
  int64_t classes = 10;
  std::vector<int64_t> hidden = {128};  // widths of the hidden fully connected layers
  uint64_t seed = 0;                    // parameter initialization (nn::Module::seed)
  bool with_loss = true;
  // The module's mode when the graph is built: batch norm (the ResNets) normalizes with batch
  // statistics and updates its running ones in training, reads them in evaluation.
  bool training = true;
};

// PyTorch's default initialization for Linear and Conv2d (uniform ±1/sqrt(fan_in)).
Classifier build_classifier(const ClassifierSpec& spec);

// The classifier's network alone, to build other graphs from (nn::Module::forward).
std::shared_ptr<nn::Module> classifier_module(const ClassifierSpec& spec);

// A fully connected layer y = x·w + b with w [in, out] named "<name>.weight", b "<name>.bias"
// (the matmul benchmarks' layer; nn::Linear is PyTorch's [out, in] layer).
Tensor linear(Tensor x, int64_t out_features, const std::string& name, uint64_t seed,
              bool bias = true);

// A decoder-only language model written with primitive ops only, as an exporter would emit
// it: embedding lookup (take), RMSNorm as x·rsqrt(mean(x²) + eps)·γ, rotary embedding as
// rotate-half with angles computed in the graph, grouped-query attention as
// matmul / scale / causal where / exp(x − max) / sum / matmul, SwiGLU as (g·sigmoid(g))·up,
// and log-softmax + nll for the loss. The optimizer is expected to recognize the composites.
// Weights use Hugging Face's [out, in] layout (matmul with transpose_b) and names, and the
// output projection is tied to the embedding, so SmolLM2 checkpoints map one to one.
struct TransformerSpec {
  int64_t layers = 30;
  int64_t hidden = 576;
  int64_t heads = 9;
  int64_t kv_heads = 3;
  int64_t ffn = 1536;
  int64_t vocab = 49152;
  int64_t sequence = 256;
  int64_t batch = 1;
  double rms_eps = 1e-5;
  double rope_theta = 100000.0;
  uint64_t seed = 0;
  bool with_loss = true;
};

// SmolLM2-135M's shape (the defaults above).
TransformerSpec smollm2_135m();

// Inputs "tokens" (i32 [batch, sequence]) and, with the loss, "targets" (i32 [batch, sequence],
// -100 ignored); logits [batch, sequence, vocab]; `loss` is the mean next-token cross-entropy.
struct LanguageModel {
  std::unique_ptr<Graph> graph;
  Tensor tokens, targets, logits, loss;
};

LanguageModel build_transformer(const TransformerSpec& spec);

}  // namespace mn
