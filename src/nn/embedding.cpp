// Embedding: rows of weight [num_embeddings, embedding_dim] looked up by i32 indices.
#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding)
    : Module("Embedding"), num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  require_positive(*this, num_embeddings, "num_embeddings");
  require_positive(*this, embedding_dim, "embedding_dim");
  if (padding) {
    if (*padding < -num_embeddings || *padding >= num_embeddings) {
      throw Error(where() + ": padding_idx " + std::to_string(*padding) + " is outside [" +
                  std::to_string(-num_embeddings) + ", " + std::to_string(num_embeddings) + ")");
    }
    padding_idx = *padding < 0 ? *padding + num_embeddings : *padding;
  }
  register_parameter("weight", {num_embeddings, embedding_dim},
                     padding_idx ? Init::normal_zero_row(1.0, *padding_idx, 0)
                                 : Init::normal(0.0, 1.0, 0));
}

Tensor Embedding::forward(Tensor indices) {
  require_input(*this, indices, "indices");
  if (indices.dtype() != DType::i32) {
    throw ShapeError(where() + ": expected i32 indices, got " + indices.type().str());
  }
  Graph& g = indices.graph();
  Tensor weight = tensor(g, "weight");
  Tensor rows = take(weight, indices, 0);
  if (!padding_idx) return rows;
  // The padding row is read as it is, but through stop_gradient: it gets no gradient.
  Tensor is_padding = unsqueeze(eq(indices, g.scalar(static_cast<double>(*padding_idx), DType::i32)), -1);
  return mn::where(is_padding, take(stop_gradient(weight), indices, 0), rows);
}

}  // namespace mn::nn
