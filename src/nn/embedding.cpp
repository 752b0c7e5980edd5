// Embedding: rows of weight [num_embeddings, embedding_dim] looked up by i32 indices.
#include <meganeura/nn.h>

#include "nn/input_checks.h"

namespace mn::nn {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : Module("Embedding"), num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  require_positive(*this, num_embeddings, "num_embeddings");
  require_positive(*this, embedding_dim, "embedding_dim");
  register_parameter("weight", {num_embeddings, embedding_dim}, Init::normal(0.0, 1.0, 0));
}

Tensor Embedding::forward(Tensor indices) {
  require_input(*this, indices, "indices");
  if (indices.dtype() != DType::i32) {
    throw ShapeError(where() + ": expected i32 indices, got " + indices.type().str());
  }
  return take(tensor(indices.graph(), "weight"), indices, 0);
}

}  // namespace mn::nn
