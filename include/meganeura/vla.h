#pragma once
// Vision-language-action models: SmolVLA's action expert (lerobot's VLAFlowMatching without its
// vision-language model), in lerobot's layout so that weights load by name. The expert is a
// Llama-style decoder of its own width that denoises a chunk of actions by flow matching; its
// layers alternate self-attention over [the prefix the VLM encoded, the action tokens] and
// cross-attention to the VLM's keys and values projected again. The VLM (images, language,
// robot state) is not here: what the expert reads of it, each VLM layer's keys and values over
// the prefix and the prefix's padding, are inputs.
//
// Parameter names are the state_dict keys of lerobot's VLAFlowMatching (`model.` inside a
// SmolVLAPolicy checkpoint) that the expert uses: vlm_with_expert.lm_expert.layers.N.
// {input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj},
// vlm_with_expert.lm_expert.norm, action_in_proj, action_out_proj, action_time_mlp_in,
// action_time_mlp_out. (state_proj and the VLM's own weights belong to the prefix.)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <meganeura/graph.h>
#include <meganeura/nn.h>

namespace mn::vla {

struct SmolVlaConfig {
  int64_t hidden = 720;  // the expert's width (0.75 × the VLM's 960)
  int64_t heads = 15;    // query heads (the VLM's)
  int64_t kv_heads = 5;  // key/value heads of the expert and of the VLM
  int64_t head_dim = 64;
  int64_t intermediate = 2048;                 // the MLP's width
  int64_t layers = 16;                         // the VLM layers kept, one expert layer each
  int64_t self_attn_every_n_layers = 2;        // layer i self-attends when i % n == 0, else cross
  int64_t chunk = 50;                          // actions denoised together
  int64_t max_action_dim = 32;                 // actions are padded to this many values
  int64_t num_steps = 10;                      // Euler steps from noise (t = 1) to actions (t = 0)
  double min_period = 4e-3, max_period = 4.0;  // of the sinusoidal time embedding
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
};

// lerobot/smolvla_base.
SmolVlaConfig smolvla_base_config();

// What the expert reads of the VLM: per layer, the prefix's keys and values as the VLM's cache
// holds them ([B, P, kv_heads, head_dim], keys rotated at the prefix positions) and which prefix
// tokens are real (`mask` [B, P]: 1, or 0 for padding).
struct VlmPrefix {
  std::vector<Tensor> keys, values;
  Tensor mask;
};

class SmolVlaActionExpert : public nn::Module {
 public:
  // mn::Error naming the field for sizes that do not fit together.
  explicit SmolVlaActionExpert(const SmolVlaConfig& config);
  const SmolVlaConfig& config() const { return config_; }

  // Declares the prefix as graph inputs "prefix_keys.N", "prefix_values.N" and "prefix_mask".
  VlmPrefix prefix_inputs(Graph& g, int64_t batch, int64_t prefix_length) const;

  // The velocity field v_t [B, chunk, max_action_dim] at x_t [B, chunk, max_action_dim] and
  // time [B] (1 is noise, 0 the actions): lerobot's denoise_step. The action tokens see every
  // real prefix token and the action tokens before them (causal), at positions that continue the
  // prefix's; cross-attention layers see the real prefix tokens.
  Tensor velocity(const VlmPrefix& prefix, Tensor x_t, Tensor time);
  // lerobot's sample_actions after the prefix: num_steps Euler steps x += -1/num_steps · v_t(x,
  // t) from `noise` at t = 1, unrolled into the graph (one submission runs all of them).
  Tensor sample(const VlmPrefix& prefix, Tensor noise);
  // The flow-matching loss of lerobot's forward, averaged over every element:
  // x_t = t·noise + (1 - t)·actions, mean((noise - actions - v_t(x_t, t))²).
  Tensor flow_matching_loss(const VlmPrefix& prefix, Tensor actions, Tensor noise, Tensor time);

  Tensor forward(Tensor x) override;  // an error: the expert takes several inputs

 private:
  struct PrefixAttention;
  PrefixAttention attention_inputs(const VlmPrefix& prefix, int64_t batch);
  Tensor velocity_at(const PrefixAttention& a, Tensor x_t, Tensor time_embedding);
  Tensor embed_suffix(Tensor x_t, Tensor time_embedding);
  Tensor time_embedding(Tensor time) const;
  void check_prefix(const VlmPrefix& prefix, int64_t batch) const;
  void check_actions(Tensor x, const char* what) const;
  void check_time(Tensor time, int64_t batch) const;

  SmolVlaConfig config_;
  std::shared_ptr<nn::Module> lm_expert_;
  std::shared_ptr<nn::Linear> action_in_, action_out_, time_mlp_in_, time_mlp_out_;
};

}  // namespace mn::vla
