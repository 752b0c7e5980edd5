#pragma once
// Bidirectional multi-head self-attention with separate q/k/v/out projections, registered in the
// order transformers' encoders declare them (k_proj, v_proj, q_proj, out_proj): Whisper's
// encoder (k_proj without a bias) and SmolVLM's vision tower (every projection biased).
#include <memory>
#include <string>

#include <meganeura/nn.h>
#include <meganeura/ops.h>

namespace mn::models {

class ProjectedAttention : public nn::Module {
 public:
  ProjectedAttention(std::string kind, int64_t d, int64_t heads, bool key_bias)
      : Module(std::move(kind)), d_(d), heads_(heads) {
    k_ = register_module("k_proj", std::make_shared<nn::Linear>(d, d, key_bias));
    v_ = register_module("v_proj", std::make_shared<nn::Linear>(d, d));
    q_ = register_module("q_proj", std::make_shared<nn::Linear>(d, d));
    out_ = register_module("out_proj", std::make_shared<nn::Linear>(d, d));
  }
  // [N, L, d] -> [N, L, d], scores scaled by 1/sqrt(d / heads).
  Tensor forward(Tensor x) override {
    const int64_t n = x.dim(0), l = x.dim(1), hd = d_ / heads_;
    auto split = [&](Tensor t) { return permute(reshape(t, {n, l, heads_, hd}), {0, 2, 1, 3}); };
    Tensor a = scaled_dot_product_attention(split(q_->forward(x)), split(k_->forward(x)),
                                            split(v_->forward(x)));
    return out_->forward(reshape(permute(a, {0, 2, 1, 3}), {n, l, d_}));
  }

 private:
  int64_t d_, heads_;
  std::shared_ptr<nn::Linear> k_, v_, q_, out_;
};

}  // namespace mn::models
