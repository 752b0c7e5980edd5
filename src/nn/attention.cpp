// MultiheadAttention in PyTorch's layout (batch_first): one packed in_proj_weight [3E, E] whose
// row blocks project the query, key and value, then scaled dot-product attention per head and
// out_proj.
#include <cmath>
#include <limits>

#include <meganeura/nn.h>

#include "nn/dropout_step.h"
#include "nn/input_checks.h"

namespace mn::nn {

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads,
                                       MultiheadAttentionConfig config)
    : Module("MultiheadAttention"), embed_dim(embed_dim), num_heads(num_heads), config(config) {
  require_positive(*this, embed_dim, "embed_dim");
  require_positive(*this, num_heads, "num_heads");
  if (embed_dim % num_heads) {
    throw Error(where() + ": embed_dim " + std::to_string(embed_dim) +
                " is not a multiple of num_heads " + std::to_string(num_heads));
  }
  if (!(config.dropout >= 0 && config.dropout < 1)) {
    throw Error(where() + ": dropout is " + std::to_string(config.dropout) + ", expected [0, 1)");
  }
  register_parameter("in_proj_weight", {3 * embed_dim, embed_dim}, Init::xavier_uniform(0));
  if (config.bias) register_parameter("in_proj_bias", {3 * embed_dim}, Init::zeros());
  out_proj =
      register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, config.bias));
}

// Rows [part·E, (part+1)·E) of the packed projection: part 0 query, 1 key, 2 value.
Tensor MultiheadAttention::project(Tensor x, int64_t part) const {
  Graph& g = x.graph();
  const int64_t E = embed_dim;
  Tensor w = slice(tensor(g, "in_proj_weight"), 0, part * E, (part + 1) * E);
  Tensor y = matmul(x, w, false, true);
  if (config.bias) y = y + slice(tensor(g, "in_proj_bias"), 0, part * E, (part + 1) * E);
  return y;
}

// Softmax(q·kᵀ/√D + mask)·v per head; with dropout in training the probabilities are dropped,
// which the fused attention op does not do, so that case is written out.
Tensor MultiheadAttention::attend(Tensor q, Tensor k, Tensor v, Tensor mask, bool causal) {
  if (!training() || config.dropout == 0.0)
    return scaled_dot_product_attention(q, k, v, mask, causal);
  const int64_t head_dim = embed_dim / num_heads;
  Tensor s = matmul(q, k, false, true) * (1.0 / std::sqrt(static_cast<double>(head_dim)));
  if (mask.valid()) s = s + mask;
  if (causal) {
    const int64_t lq = q.dim(-2), lk = k.dim(-2);
    Array m({lq, lk}, DType::f32);
    for (int64_t i = 0; i < lq; ++i) {
      for (int64_t j = i + 1; j < lk; ++j)
        m.data[static_cast<size_t>(i * lk + j)] = -std::numeric_limits<double>::infinity();
    }
    s = s + q.graph().constant(std::move(m));
  }
  Tensor p = stepped_dropout(softmax(s, -1), config.dropout, op_seed("attention"));
  return matmul(p, v);
}

namespace {

// A [B, Lk] key padding mask as an additive [B, 1, 1, Lk] one: -inf where an integer mask is
// nonzero (PyTorch's True), a float mask as it is.
Tensor padding_as_additive(const Module& m, Tensor padding, int64_t batch, int64_t keys) {
  if (padding.rank() != 2 || padding.dim(0) != batch || padding.dim(1) != keys) {
    throw ShapeError(m.where() + ": key_padding_mask must be [" + std::to_string(batch) + ", " +
                     std::to_string(keys) + "] (batch, key length), got " + padding.type().str());
  }
  Graph& g = padding.graph();
  Tensor additive = padding;
  if (!is_float(padding.dtype())) {
    additive = mn::where(padding, g.scalar(-std::numeric_limits<double>::infinity()), g.scalar(0.0));
  }
  return reshape(additive, {batch, 1, 1, keys});
}

}  // namespace

Tensor MultiheadAttention::forward(Tensor query, Tensor key, Tensor value, Tensor mask,
                                   bool causal, Tensor key_padding_mask) {
  const std::string layout = "[batch, length, " + std::to_string(embed_dim) + "]";
  for (const Tensor* t : {&query, &key, &value}) {
    require_rank(*this, *t, 3, layout);
    require_float(*this, *t);
    if (t->dim(2) != embed_dim)
      throw ShapeError(where() + ": expected " + layout + ", got " + t->type().str());
  }
  const int64_t B = query.dim(0), Lq = query.dim(1), H = num_heads, D = embed_dim / num_heads;
  if (key.dim(0) != B || value.dim(0) != B || key.dim(1) != value.dim(1)) {
    throw ShapeError(where() + ": query " + query.type().str() + ", key " + key.type().str() +
                     " and value " + value.type().str() +
                     " must share the batch, and key and value the length");
  }
  if (key_padding_mask.valid()) {
    Tensor padding = padding_as_additive(*this, key_padding_mask, B, key.dim(1));
    mask = mask.valid() ? mask + padding : padding;
  }
  auto heads = [&](Tensor t) {
    return permute(reshape(t, {B, t.dim(1), H, D}), {0, 2, 1, 3});  // [B, H, L, D]
  };
  Tensor o = attend(heads(project(query, 0)), heads(project(key, 1)), heads(project(value, 2)),
                    mask, causal);
  return out_proj->forward(reshape(permute(o, {0, 2, 1, 3}), {B, Lq, embed_dim}));
}

TransformerBlock::TransformerBlock(int64_t d_model, int64_t nhead, TransformerBlockConfig config)
    : Module("TransformerBlock"), config(config) {
  require_positive(*this, config.dim_feedforward, "dim_feedforward");
  // PyTorch's registration order, which is the state_dict's.
  self_attn = register_module(
      "self_attn", std::make_shared<MultiheadAttention>(
                       d_model, nhead, MultiheadAttentionConfig{config.dropout, config.bias}));
  linear1 = register_module("linear1",
                            std::make_shared<Linear>(d_model, config.dim_feedforward, config.bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(config.dropout));
  linear2 = register_module("linear2",
                            std::make_shared<Linear>(config.dim_feedforward, d_model, config.bias));
  norm1 = register_module("norm1", std::make_shared<LayerNorm>(
                                       Shape{d_model}, config.layer_norm_eps, true, config.bias));
  norm2 = register_module("norm2", std::make_shared<LayerNorm>(
                                       Shape{d_model}, config.layer_norm_eps, true, config.bias));
  dropout1 = register_module("dropout1", std::make_shared<Dropout>(config.dropout));
  dropout2 = register_module("dropout2", std::make_shared<Dropout>(config.dropout));
}

Tensor TransformerBlock::forward(Tensor x, Tensor mask, bool causal, Tensor key_padding_mask) {
  Tensor h = norm1->forward(x);
  x = x + dropout1->forward(self_attn->forward(h, h, h, mask, causal, key_padding_mask));
  Tensor f = linear1->forward(norm2->forward(x));
  f = config.gelu ? gelu(f) : relu(f);
  return x + dropout2->forward(linear2->forward(dropout->forward(f)));
}

}  // namespace mn::nn
