// SmolVLM's vision tower and connector as transformers writes them (modeling_smolvlm.py:
// SmolVLMVisionEmbeddings, SmolVLMEncoderLayer, SmolVLMVisionTransformer, SmolVLMConnector), of
// nn modules registered under "model" so that the graph names are its state_dict keys. Frames
// are always whole (the processor makes every frame image_size square), so the patch positions
// are 0 .. patches-1 and no patch mask is needed.
#include <cmath>
#include <string>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/nn.h>
#include <meganeura/ops.h>
#include <meganeura/causal_lm.h>
#include <meganeura/vlm.h>

#include "models/causal_lm_blocks.h"
#include "models/image_splice.h"
#include "models/projected_attention.h"

namespace mn {

namespace {

class VisionMlp : public nn::Module {
 public:
  VisionMlp(const SmolVlmVisionConfig& c) : Module("SmolVLMVisionMLP"), act_(c.hidden_act) {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(c.hidden_size, c.intermediate_size));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(c.intermediate_size, c.hidden_size));
  }
  Tensor forward(Tensor x) override { return fc2_->forward(gelu(fc1_->forward(x), act_)); }

 private:
  GeluApprox act_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

class EncoderLayer : public nn::Module {
 public:
  explicit EncoderLayer(const SmolVlmVisionConfig& c) : Module("SmolVLMEncoderLayer") {
    attn_ = register_module("self_attn", std::make_shared<models::ProjectedAttention>(
                                             "SmolVLMVisionAttention", c.hidden_size,
                                             c.num_attention_heads, true));
    norm1_ = register_module(
        "layer_norm1", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, c.layer_norm_eps));
    mlp_ = register_module("mlp", std::make_shared<VisionMlp>(c));
    norm2_ = register_module(
        "layer_norm2", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, c.layer_norm_eps));
  }
  Tensor forward(Tensor x) override {
    x = x + attn_->forward(norm1_->forward(x));
    return x + mlp_->forward(norm2_->forward(x));
  }

 private:
  std::shared_ptr<models::ProjectedAttention> attn_;
  std::shared_ptr<nn::LayerNorm> norm1_, norm2_;
  std::shared_ptr<VisionMlp> mlp_;
};

// position_embedding: an nn.Embedding read at positions 0 .. patches-1, i.e. added whole.
class PatchPositions : public nn::Module {
 public:
  PatchPositions(int64_t patches, int64_t d) : Module("Embedding") {
    register_parameter("weight", {patches, d}, Init::normal(0.0, 1.0, 0));
  }
  Tensor forward(Tensor x) override { return x + tensor(x.graph(), "weight"); }
};

class VisionEmbeddings : public nn::Module {
 public:
  explicit VisionEmbeddings(const SmolVlmVisionConfig& c) : Module("SmolVLMVisionEmbeddings") {
    const int64_t p = c.patch_size;
    patch_ = register_module(
        "patch_embedding",
        std::make_shared<nn::Conv2d>(c.num_channels, c.hidden_size, std::array<int64_t, 2>{p, p},
                                     nn::Conv2dConfig{.stride = {p, p}}));
    positions_ = register_module(
        "position_embedding",
        std::make_shared<PatchPositions>(c.patches_per_side() * c.patches_per_side(), c.hidden_size));
  }
  // [F, C, S, S] -> [F, patches, d]
  Tensor forward(Tensor x) override {
    Tensor p = patch_->forward(x);  // [F, d, S/p, S/p]
    p = permute(reshape(p, {p.dim(0), p.dim(1), p.dim(2) * p.dim(3)}), {0, 2, 1});
    return positions_->forward(p);
  }

 private:
  std::shared_ptr<nn::Conv2d> patch_;
  std::shared_ptr<PatchPositions> positions_;
};

// A module that only holds children under names (SmolVLMEncoder, SmolVLMModel, the root).
class Holder : public nn::Module {
 public:
  explicit Holder(std::string kind) : Module(std::move(kind)) {}
  template <class M>
  std::shared_ptr<M> hold(const std::string& name, std::shared_ptr<M> m) {
    return register_module(name, std::move(m));
  }
};

class VisionTransformer : public nn::Module {
 public:
  explicit VisionTransformer(const SmolVlmVisionConfig& c) : Module("SmolVLMVisionTransformer") {
    embeddings_ = register_module("embeddings", std::make_shared<VisionEmbeddings>(c));
    auto encoder = register_module("encoder", std::make_shared<Holder>("SmolVLMEncoder"));
    layers_ = encoder->hold("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers_->push_back(std::make_shared<EncoderLayer>(c));
    post_norm_ = register_module(
        "post_layernorm", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, c.layer_norm_eps));
  }
  Tensor forward(Tensor x) override {
    Tensor h = embeddings_->forward(x);
    for (size_t i = 0; i < layers_->size(); ++i) h = (*layers_)[i]->forward(h);
    return post_norm_->forward(h);
  }

 private:
  std::shared_ptr<VisionEmbeddings> embeddings_;
  std::shared_ptr<nn::ModuleList> layers_;
  std::shared_ptr<nn::LayerNorm> post_norm_;
};

// The pixel shuffle (each scale x scale block of patches becomes one token of scale² times the
// channels, rows of the block outer) and the projection into the decoder's width.
class Connector : public nn::Module {
 public:
  explicit Connector(const SmolVlmConfig& c) : Module("SmolVLMConnector"), scale_(c.scale_factor) {
    const int64_t in = c.vision.hidden_size * scale_ * scale_;
    auto mlp = register_module("modality_projection", std::make_shared<Holder>("SmolVLMSimpleMLP"));
    proj_ = mlp->hold("proj", std::make_shared<nn::Linear>(in, c.text.hidden_size, false));
  }
  // [F, n², d] -> [F, (n/s)², hidden]
  Tensor forward(Tensor x) override {
    const int64_t f = x.dim(0), d = x.dim(2), s = scale_;
    const auto n = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(x.dim(1)))));
    const int64_t m = n / s;
    // [F, h', hs, w', ws, d] -> [F, h', w', hs, ws, d]
    Tensor t = permute(reshape(x, {f, m, s, m, s, d}), {0, 1, 3, 2, 4, 5});
    return proj_->forward(reshape(t, {f, m * m, s * s * d}));
  }

 private:
  int64_t scale_;
  std::shared_ptr<nn::Linear> proj_;
};

class ImageEncoder : public nn::Module {
 public:
  explicit ImageEncoder(const SmolVlmConfig& c) : Module("SmolVLMForConditionalGeneration") {
    auto model = register_module("model", std::make_shared<Holder>("SmolVLMModel"));
    vision_ = model->hold("vision_model", std::make_shared<VisionTransformer>(c.vision));
    connector_ = model->hold("connector", std::make_shared<Connector>(c));
  }
  Tensor forward(Tensor pixels) override { return connector_->forward(vision_->forward(pixels)); }

 private:
  std::shared_ptr<VisionTransformer> vision_;
  std::shared_ptr<Connector> connector_;
};

}  // namespace

Tensor smolvlm_image_features(const SmolVlmConfig& config, Tensor pixel_values) {
  const SmolVlmVisionConfig& v = config.vision;
  if (pixel_values.rank() != 4 || pixel_values.dim(1) != v.num_channels ||
      pixel_values.dim(2) != v.image_size || pixel_values.dim(3) != v.image_size) {
    throw ShapeError("smolvlm_image_features: expected frames [F, " + std::to_string(v.num_channels) +
                     ", " + std::to_string(v.image_size) + ", " + std::to_string(v.image_size) +
                     "], got " + pixel_values.type().str());
  }
  ImageEncoder encoder(config);
  encoder.eval();
  return encoder.forward(pixel_values);
}

// The features row of each image token taken from `features` [rows, hidden] in place of its
// embedding.
EmbeddingSplice models::image_splice(Tensor features, Tensor image_rows, int64_t image_token) {
  return [=](Graph& g, Tensor ids, Tensor embeddings) {
    const int64_t b = ids.dim(0), l = ids.dim(1), hidden = embeddings.dim(2);
    Tensor picked = reshape(take(features, reshape(image_rows, {b * l}), 0), {b, l, hidden});
    Tensor is_image = unsqueeze(eq(ids, g.scalar(static_cast<double>(image_token), DType::i32)), 2);
    return where(is_image, picked, embeddings);
  };
}

CausalLm build_smolvlm_training(const SmolVlmConfig& config, const SmolVlmTrainingOptions& o) {
  if (o.frames < 1) throw Error("build_smolvlm_training: frames must be positive, got " + std::to_string(o.frames));
  auto g = std::make_unique<Graph>();
  const SmolVlmVisionConfig& v = config.vision;
  Tensor pixels = g->input("pixel_values", {o.frames, v.num_channels, v.image_size, v.image_size});
  Tensor rows = g->input("image_rows", {o.batch, o.sequence}, DType::i32);
  Tensor features = reshape(smolvlm_image_features(config, pixels),
                            {o.frames * config.image_seq_len(), config.text.hidden_size});
  CausalLmOptions lm;
  lm.batch = o.batch;
  lm.sequence = o.sequence;
  lm.dtype = o.dtype;
  lm.with_loss = true;
  lm.prefix = "model.text_model.";
  lm.splice = models::image_splice(features, rows, config.image_token_id);
  return models::build_causal_lm_in(std::move(g), config.text, lm);
}

Array smolvlm_image_rows(const Array& input_ids, const SmolVlmConfig& config,
                         std::span<const int64_t> frames_per_sequence) {
  if (input_ids.shape.size() != 2) {
    throw ShapeError("smolvlm_image_rows: input_ids must be [batch, sequence], got " +
                     shape_str(input_ids.shape));
  }
  const int64_t batch = input_ids.shape[0], length = input_ids.shape[1];
  if (static_cast<int64_t>(frames_per_sequence.size()) != batch) {
    throw Error("smolvlm_image_rows: " + std::to_string(frames_per_sequence.size()) +
                " frame counts for " + std::to_string(batch) + " sequences");
  }
  const int64_t seq = config.image_seq_len();
  Array rows({batch, length}, DType::i32);
  int64_t first = 0;
  for (int64_t b = 0; b < batch; ++b) {
    int64_t used = 0;
    for (int64_t i = 0; i < length; ++i) {
      const size_t at = static_cast<size_t>(b * length + i);
      const bool image = static_cast<int64_t>(input_ids.data[at]) == config.image_token_id;
      rows.data[at] = image ? static_cast<double>(first + used++) : 0.0;
    }
    const int64_t want = frames_per_sequence[static_cast<size_t>(b)] * seq;
    if (used != want) {
      throw Error("smolvlm_image_rows: sequence " + std::to_string(b) + " has " +
                  std::to_string(used) + " <image> tokens; its " +
                  std::to_string(frames_per_sequence[static_cast<size_t>(b)]) + " frames make " +
                  std::to_string(want));
    }
    first += want;
  }
  return rows;
}

}  // namespace mn
