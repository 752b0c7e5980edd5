// SmolVLA's action expert as lerobot writes it (modeling_smolvla.py: VLAFlowMatching's
// embed_suffix, denoise_step and sample_actions; smolvlm_with_expert.py: the expert's Llama
// layers, forward_attn_layer and forward_cross_attn_layer), registered in its order so that the
// state_dict keys are its own.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <meganeura/error.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>
#include <meganeura/vla.h>

namespace mn::vla {

namespace {

// Llama's attention projections without bias. A cross-attention layer's k_proj and v_proj read
// the VLM's keys and values (kv_heads · head_dim wide), not the expert's hidden state.
class ExpertAttention : public nn::Module {
 public:
  ExpertAttention(const SmolVlaConfig& c, bool cross) : Module("LlamaAttention") {
    const int64_t q = c.heads * c.head_dim, kv = c.kv_heads * c.head_dim;
    const int64_t kv_in = cross ? kv : c.hidden;
    q_proj = register_module("q_proj", std::make_shared<nn::Linear>(c.hidden, q, false));
    k_proj = register_module("k_proj", std::make_shared<nn::Linear>(kv_in, kv, false));
    v_proj = register_module("v_proj", std::make_shared<nn::Linear>(kv_in, kv, false));
    o_proj = register_module("o_proj", std::make_shared<nn::Linear>(q, c.hidden, false));
  }
  std::shared_ptr<nn::Linear> q_proj, k_proj, v_proj, o_proj;
};

class ExpertMlp : public nn::Module {
 public:
  explicit ExpertMlp(const SmolVlaConfig& c) : Module("LlamaMLP") {
    gate_ =
        register_module("gate_proj", std::make_shared<nn::Linear>(c.hidden, c.intermediate, false));
    up_ = register_module("up_proj", std::make_shared<nn::Linear>(c.hidden, c.intermediate, false));
    down_ =
        register_module("down_proj", std::make_shared<nn::Linear>(c.intermediate, c.hidden, false));
  }
  Tensor forward(Tensor x) override {
    return down_->forward(silu(gate_->forward(x)) * up_->forward(x));
  }

 private:
  std::shared_ptr<nn::Linear> gate_, up_, down_;
};

class ExpertLayer : public nn::Module {
 public:
  ExpertLayer(const SmolVlaConfig& c, bool cross) : Module("LlamaDecoderLayer"), cross(cross) {
    self_attn = register_module("self_attn", std::make_shared<ExpertAttention>(c, cross));
    mlp = register_module("mlp", std::make_shared<ExpertMlp>(c));
    input_layernorm = register_module(
        "input_layernorm", std::make_shared<nn::RMSNorm>(Shape{c.hidden}, c.rms_norm_eps));
    post_attention_layernorm = register_module(
        "post_attention_layernorm", std::make_shared<nn::RMSNorm>(Shape{c.hidden}, c.rms_norm_eps));
  }
  const bool cross;
  std::shared_ptr<ExpertAttention> self_attn;
  std::shared_ptr<ExpertMlp> mlp;
  std::shared_ptr<nn::RMSNorm> input_layernorm, post_attention_layernorm;
};

// The expert's LlamaModel without embeddings (lerobot sets embed_tokens to None).
class LmExpert : public nn::Module {
 public:
  explicit LmExpert(const SmolVlaConfig& c) : Module("LlamaModel") {
    layers = register_module("layers", std::make_shared<nn::ModuleList>());
    for (int64_t i = 0; i < c.layers; ++i) {
      layers->push_back(std::make_shared<ExpertLayer>(c, i % c.self_attn_every_n_layers != 0));
    }
    norm = register_module("norm", std::make_shared<nn::RMSNorm>(Shape{c.hidden}, c.rms_norm_eps));
  }
  std::shared_ptr<ExpertLayer> layer(size_t i) const { return layers->at<ExpertLayer>(i); }
  std::shared_ptr<nn::ModuleList> layers;
  std::shared_ptr<nn::RMSNorm> norm;
};

// SmolVLMWithExpertModel, of which only the expert is here.
class VlmWithExpert : public nn::Module {
 public:
  explicit VlmWithExpert(const SmolVlaConfig& c) : Module("SmolVLMWithExpertModel") {
    lm_expert = register_module("lm_expert", std::make_shared<LmExpert>(c));
  }
  std::shared_ptr<LmExpert> lm_expert;
};

// [B, L, n·D] → [B, n, L, D] and back.
Tensor split_heads(Tensor t, int64_t n, int64_t d) {
  return permute(reshape(t, {t.dim(0), t.dim(1), n, d}), {0, 2, 1, 3});
}
Tensor merge_heads(Tensor t) {
  return reshape(permute(t, {0, 2, 1, 3}), {t.dim(0), t.dim(2), t.dim(1) * t.dim(3)});
}

// Added to a score a key must not get: softmax gives it no weight, and a row with no visible key
// averages all of them as lerobot's masked_fill with the float minimum does.
constexpr double kHidden = -1e30;

void check_positive(int64_t v, const char* what) {
  if (v < 1) throw Error("SmolVlaActionExpert: " + std::string(what) + " is " + std::to_string(v));
}

// lerobot's create_sinusoidal_pos_embedding: periods min·(max/min)^f for f evenly from 0 to 1;
// the embedding of time t is [sin(2π t / period), cos(2π t / period)].
std::vector<double> time_scales(const SmolVlaConfig& c) {
  const int64_t half = c.hidden / 2;
  std::vector<double> scale(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double f = half == 1 ? 0.0 : static_cast<double>(i) / static_cast<double>(half - 1);
    scale[static_cast<size_t>(i)] =
        2.0 * std::numbers::pi / (c.min_period * std::pow(c.max_period / c.min_period, f));
  }
  return scale;
}

std::vector<double> time_embedding_values(const SmolVlaConfig& c, double t) {
  const std::vector<double> scale = time_scales(c);
  std::vector<double> e(2 * scale.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    e[i] = std::sin(scale[i] * t);
    e[i + scale.size()] = std::cos(scale[i] * t);
  }
  return e;
}

}  // namespace

SmolVlaConfig smolvla_base_config() { return {}; }

// Per layer, the keys and values the action tokens attend to before their own, with the masks
// and positions that say what each row sees.
struct SmolVlaActionExpert::PrefixAttention {
  std::vector<Tensor> keys, values;  // [B, kv_heads, P, D]
  Tensor self_mask;                  // [B, 1, chunk, P + chunk]: real prefix tokens, causal actions
  Tensor cross_mask;                 // [B, 1, 1, P]: real prefix tokens
  Tensor self_positions;             // i32 [B, 1, chunk]: after the prefix's real tokens
  Tensor cross_positions;            // i32 [chunk]: from 0
};

SmolVlaActionExpert::SmolVlaActionExpert(const SmolVlaConfig& c)
    : Module("VLAFlowMatching"), config_(c) {
  for (auto [v, what] : {std::pair{c.hidden, "hidden"},
                         {c.heads, "heads"},
                         {c.kv_heads, "kv_heads"},
                         {c.head_dim, "head_dim"},
                         {c.intermediate, "intermediate"},
                         {c.layers, "layers"},
                         {c.self_attn_every_n_layers, "self_attn_every_n_layers"},
                         {c.chunk, "chunk"},
                         {c.max_action_dim, "max_action_dim"},
                         {c.num_steps, "num_steps"}}) {
    check_positive(v, what);
  }
  if (c.heads % c.kv_heads != 0) {
    throw Error("SmolVlaActionExpert: heads " + std::to_string(c.heads) +
                " is not a multiple of kv_heads " + std::to_string(c.kv_heads));
  }
  if (c.head_dim % 2 != 0 || c.hidden % 2 != 0) {
    throw Error("SmolVlaActionExpert: head_dim " + std::to_string(c.head_dim) + " and hidden " +
                std::to_string(c.hidden) + " must be even (rotary and time embeddings)");
  }
  if (!(c.min_period > 0) || !(c.max_period > 0) || !(c.rms_norm_eps > 0) || !(c.rope_theta > 0)) {
    throw Error(
        "SmolVlaActionExpert: min_period, max_period, rms_norm_eps and rope_theta must be "
        "positive");
  }
  lm_expert_ = register_module("vlm_with_expert", std::make_shared<VlmWithExpert>(c))->lm_expert;
  action_in_ =
      register_module("action_in_proj", std::make_shared<nn::Linear>(c.max_action_dim, c.hidden));
  action_out_ =
      register_module("action_out_proj", std::make_shared<nn::Linear>(c.hidden, c.max_action_dim));
  time_mlp_in_ =
      register_module("action_time_mlp_in", std::make_shared<nn::Linear>(2 * c.hidden, c.hidden));
  time_mlp_out_ =
      register_module("action_time_mlp_out", std::make_shared<nn::Linear>(c.hidden, c.hidden));
}

Tensor SmolVlaActionExpert::forward(Tensor) {
  throw Error(where() +
              ": the action expert takes a prefix, actions and times: call velocity, "
              "sample or flow_matching_loss");
}

VlmPrefix SmolVlaActionExpert::prefix_inputs(Graph& g, int64_t batch, int64_t prefix_length) const {
  check_positive(batch, "the batch");
  check_positive(prefix_length, "the prefix length");
  VlmPrefix p;
  const Shape kv{batch, prefix_length, config_.kv_heads, config_.head_dim};
  for (int64_t l = 0; l < config_.layers; ++l) {
    p.keys.push_back(g.input("prefix_keys." + std::to_string(l), kv));
    p.values.push_back(g.input("prefix_values." + std::to_string(l), kv));
  }
  p.mask = g.input("prefix_mask", {batch, prefix_length});
  return p;
}

void SmolVlaActionExpert::check_prefix(const VlmPrefix& p, int64_t batch) const {
  const auto n = static_cast<size_t>(config_.layers);
  if (p.keys.size() != n || p.values.size() != n) {
    throw ShapeError(where() + ": the prefix has keys and values of " +
                     std::to_string(p.keys.size()) + " and " + std::to_string(p.values.size()) +
                     " layers, the expert " + std::to_string(n));
  }
  if (!p.mask.valid() || p.mask.rank() != 2 || p.mask.dim(0) != batch) {
    throw ShapeError(where() + ": the prefix mask must be [" + std::to_string(batch) +
                     ", P], got " + (p.mask.valid() ? p.mask.type().str() : "none"));
  }
  const Shape want{batch, p.mask.dim(1), config_.kv_heads, config_.head_dim};
  for (size_t l = 0; l < n; ++l) {
    for (const auto& [t, what] : {std::pair{p.keys[l], "keys"}, {p.values[l], "values"}}) {
      if (!t.valid() || t.shape() != want) {
        throw ShapeError(where() + ": the prefix " + what + " of layer " + std::to_string(l) +
                         " must be " + TensorType{want, DType::f32}.str() + " ([B, P, kv_heads, " +
                         "head_dim]), got " + (t.valid() ? t.type().str() : "none"));
      }
    }
  }
}

SmolVlaActionExpert::PrefixAttention SmolVlaActionExpert::attention_inputs(const VlmPrefix& p,
                                                                           int64_t batch) {
  check_prefix(p, batch);
  const SmolVlaConfig& c = config_;
  Graph& g = p.mask.graph();
  const int64_t P = p.mask.dim(1), C = c.chunk, kv = c.kv_heads, D = c.head_dim;
  PrefixAttention a;
  auto* expert = static_cast<LmExpert*>(lm_expert_.get());
  for (int64_t l = 0; l < c.layers; ++l) {
    auto layer = expert->layer(static_cast<size_t>(l));
    Tensor k = p.keys[static_cast<size_t>(l)], v = p.values[static_cast<size_t>(l)];
    if (layer->cross) {  // forward_cross_attn_layer: the expert projects the VLM's keys and values
      k = layer->self_attn->k_proj->forward(reshape(k, {batch, P, kv * D}));
      v = layer->self_attn->v_proj->forward(reshape(v, {batch, P, kv * D}));
      a.keys.push_back(split_heads(k, kv, D));
      a.values.push_back(split_heads(v, kv, D));
    } else {
      a.keys.push_back(permute(k, {0, 2, 1, 3}));
      a.values.push_back(permute(v, {0, 2, 1, 3}));
    }
  }
  // The prefix's padding as scores added: 0 for real tokens, kHidden for padding.
  Tensor hide_padding = (p.mask - g.scalar(1.0)) * g.scalar(-kHidden);
  a.cross_mask = reshape(hide_padding, {batch, 1, 1, P});
  Array causal({1, 1, C, C}, DType::f32);
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = i + 1; j < C; ++j) causal.data[static_cast<size_t>(i * C + j)] = kHidden;
  }
  a.self_mask = concat({broadcast_to(a.cross_mask, {batch, 1, C, P}),
                        broadcast_to(g.constant(std::move(causal)), {batch, 1, C, C})},
                       3);
  // Positions: the count of real prefix tokens, then one per action (lerobot's prefix_offsets +
  // cumsum(suffix_pad_masks) - 1 without suffix padding); cross-attention queries start at 0.
  Array iota({1, C}, DType::f32), iota_i({C}, DType::i32);
  for (int64_t i = 0; i < C; ++i) {
    iota.data[static_cast<size_t>(i)] = static_cast<double>(i);
    iota_i.data[static_cast<size_t>(i)] = static_cast<double>(i);
  }
  Tensor offsets = sum(p.mask, {1}, true);  // [B, 1]
  a.self_positions =
      reshape(cast(offsets + g.constant(std::move(iota)), DType::i32), {batch, 1, C});
  a.cross_positions = g.constant(std::move(iota_i));
  return a;
}

Tensor SmolVlaActionExpert::time_embedding(Tensor time) const {
  const std::vector<double> scale = time_scales(config_);
  Array s({1, static_cast<int64_t>(scale.size())}, DType::f32, scale);
  Tensor angle = reshape(time, {time.dim(0), 1}) * time.graph().constant(std::move(s));
  return concat({sin(angle), cos(angle)}, 1);  // [B, hidden]
}

Tensor SmolVlaActionExpert::embed_suffix(Tensor x_t, Tensor time_embedding) {
  Tensor actions = action_in_->forward(x_t);  // [B, chunk, hidden]
  Tensor times =
      broadcast_to(reshape(time_embedding, {x_t.dim(0), 1, config_.hidden}), actions.shape());
  Tensor h = time_mlp_in_->forward(concat({actions, times}, 2));
  return time_mlp_out_->forward(silu(h));
}

namespace {

// One decoder layer of the expert over the action tokens h [B, chunk, hidden].
Tensor expert_layer(ExpertLayer& layer, const SmolVlaConfig& c, Tensor h, Tensor prefix_k,
                    Tensor prefix_v, Tensor mask, Tensor positions) {
  ExpertAttention& attn = *layer.self_attn;
  Tensor x = layer.input_layernorm->forward(h);
  Tensor q = rope_positions(split_heads(attn.q_proj->forward(x), c.heads, c.head_dim), positions,
                            c.rope_theta);
  Tensor k = prefix_k, v = prefix_v;
  if (!layer.cross) {  // forward_attn_layer: the prefix's cache, then the action tokens' own
    Tensor own_k = rope_positions(split_heads(attn.k_proj->forward(x), c.kv_heads, c.head_dim),
                                  positions, c.rope_theta);
    Tensor own_v = split_heads(attn.v_proj->forward(x), c.kv_heads, c.head_dim);
    k = concat({prefix_k, own_k}, 2);
    v = concat({prefix_v, own_v}, 2);
  }
  Tensor o = scaled_dot_product_attention(q, k, v, mask);
  h = h + attn.o_proj->forward(merge_heads(o));
  return h + layer.mlp->forward(layer.post_attention_layernorm->forward(h));
}

}  // namespace

void SmolVlaActionExpert::check_actions(Tensor x, const char* what) const {
  const SmolVlaConfig& c = config_;
  if (!x.valid() || x.rank() != 3 || x.dim(1) != c.chunk || x.dim(2) != c.max_action_dim) {
    throw ShapeError(where() + ": " + what + " must be [B, " + std::to_string(c.chunk) + ", " +
                     std::to_string(c.max_action_dim) + "] ([B, chunk, max_action_dim]), got " +
                     (x.valid() ? x.type().str() : "none"));
  }
}

void SmolVlaActionExpert::check_time(Tensor time, int64_t batch) const {
  if (!time.valid() || time.shape() != Shape{batch}) {
    throw ShapeError(where() + ": time must be [" + std::to_string(batch) + "], got " +
                     (time.valid() ? time.type().str() : "none"));
  }
}

Tensor SmolVlaActionExpert::velocity(const VlmPrefix& prefix, Tensor x_t, Tensor time) {
  check_actions(x_t, "x_t");
  check_time(time, x_t.dim(0));
  return velocity_at(attention_inputs(prefix, x_t.dim(0)), x_t, time_embedding(time));
}

Tensor SmolVlaActionExpert::velocity_at(const PrefixAttention& a, Tensor x_t,
                                        Tensor time_embedding) {
  const SmolVlaConfig& c = config_;
  auto& expert = static_cast<LmExpert&>(*lm_expert_);
  Tensor h = embed_suffix(x_t, time_embedding);
  for (int64_t l = 0; l < c.layers; ++l) {
    auto layer = expert.layer(static_cast<size_t>(l));
    const auto i = static_cast<size_t>(l);
    h = expert_layer(*layer, c, h, a.keys[i], a.values[i],
                     layer->cross ? a.cross_mask : a.self_mask,
                     layer->cross ? a.cross_positions : a.self_positions);
  }
  return action_out_->forward(expert.norm->forward(h));
}

Tensor SmolVlaActionExpert::sample(const VlmPrefix& prefix, Tensor noise) {
  check_actions(noise, "noise");
  // sample_actions: dt = -1/num_steps, t from 1 while t >= -dt/2, t advanced by adding dt in
  // float32 as there; the time embedding of each step is a constant computed as lerobot does,
  // in float64.
  const PrefixAttention a = attention_inputs(prefix, noise.dim(0));
  const float dt = -1.0f / static_cast<float>(config_.num_steps);
  float t = 1.0f;
  Tensor x = noise;
  Graph& g = noise.graph();
  for (int64_t s = 0; s < config_.num_steps; ++s) {
    Array embedding({noise.dim(0), config_.hidden}, DType::f32);
    const std::vector<double> row = time_embedding_values(config_, t);
    for (size_t i = 0; i < embedding.data.size(); ++i) embedding.data[i] = row[i % row.size()];
    x = x + g.scalar(dt) * velocity_at(a, x, g.constant(std::move(embedding)));
    t += dt;
  }
  return x;
}

Tensor SmolVlaActionExpert::flow_matching_loss(const VlmPrefix& prefix, Tensor actions,
                                               Tensor noise, Tensor time) {
  if (!actions.valid() || !noise.valid() || actions.shape() != noise.shape()) {
    throw ShapeError(where() + ": actions and noise must have one shape, got " +
                     (actions.valid() ? actions.type().str() : "none") + " and " +
                     (noise.valid() ? noise.type().str() : "none"));
  }
  check_actions(actions, "actions");
  check_time(time, actions.dim(0));
  Graph& g = actions.graph();
  Tensor t = reshape(time, {time.dim(0), 1, 1});
  Tensor x_t = t * noise + (g.scalar(1.0) - t) * actions;
  const Tensor v_t =
      velocity_at(attention_inputs(prefix, actions.dim(0)), x_t, time_embedding(time));
  return mse_loss(v_t, noise - actions);
}

}  // namespace mn::vla
