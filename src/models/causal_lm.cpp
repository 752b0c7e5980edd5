// Llama, Qwen2 and Qwen3 decoders with the library's composite ops: rms_norm, grouped-query
// causal scaled_dot_product_attention, silu; RoPE from host-computed inverse frequencies (so
// Llama 3's rescaling needs no op of its own).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include <meganeura/causal_lm.h>
#include <meganeura/ops.h>

#include "models/causal_lm_blocks.h"

namespace mn {

std::vector<double> rope_inv_freq(const LmConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv[static_cast<size_t>(i)] =
        1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(c.head_dim));
  }
  if (!c.rope_scaling) return inv;
  // Llama 3: long wavelengths slowed by `factor`, short ones kept, a smooth blend between.
  const Llama3RopeScaling& s = *c.rope_scaling;
  const double old_len = static_cast<double>(s.original_max_position);
  const double low_wavelen = old_len / s.low_freq_factor;
  const double high_wavelen = old_len / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      f /= s.factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth =
          (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1.0 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

bool is_lora_parameter(const std::string& name) {
  auto ends_with = [&name](const std::string& tail) {
    return name.size() >= tail.size() &&
           name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends_with(".lora_A.weight") || ends_with(".lora_B.weight");
}

namespace models {

CausalLmBlocks::CausalLmBlocks(Graph& g, const LmConfig& config, const CausalLmOptions& options)
    : g_(g), c_(config), o_(options) {}

Tensor CausalLmBlocks::stored(const std::string& name, Shape shape, Init init) {
  return g_.parameter(name, std::move(shape), init, o_.dtype);
}

Tensor CausalLmBlocks::param(const std::string& name, Shape shape, Init init) {
  return cast(stored(name, std::move(shape), init), DType::f32);
}

Tensor CausalLmBlocks::linear(Tensor x, int64_t out, const std::string& name, bool bias) {
  Tensor w = param(name + ".weight", {out, x.dim(-1)}, Init::normal(0.0, 0.02, o_.seed + seed_++));
  Tensor y = matmul(x, w, false, true);
  if (bias) y = y + param(name + ".bias", {out}, Init::zeros());
  if (has_adapter(name)) y = y + adapter(x, out, name);
  return y;
}

bool CausalLmBlocks::has_adapter(const std::string& name) const {
  if (!o_.lora.enabled() || name.rfind(o_.prefix + "layers.", 0) != 0) return false;
  const std::string module = name.substr(name.rfind('.') + 1);
  const auto& t = o_.lora.targets;
  return std::find(t.begin(), t.end(), module) != t.end();
}

Tensor CausalLmBlocks::adapter(Tensor x, int64_t out, const std::string& name) {
  const int64_t in = x.dim(-1), r = o_.lora.rank;
  // PEFT: kaiming_uniform_(a=sqrt(5)) over fan_in = in gives the bound 1/sqrt(in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  const uint64_t seed = o_.lora.seed * 1000003 + lora_count_++;
  Tensor a = g_.parameter(name + ".lora_A.weight", {r, in}, Init::uniform(-bound, bound, seed));
  Tensor b = g_.parameter(name + ".lora_B.weight", {out, r}, Init::zeros());
  Tensor low = matmul(matmul(x, a, false, true), b, false, true);
  return low * g_.scalar(o_.lora.scale());
}

Tensor CausalLmBlocks::norm(Tensor x, const std::string& name) {
  return rms_norm(x, param(name + ".weight", {x.dim(-1)}, Init::ones()), c_.rms_norm_eps);
}

Tensor CausalLmBlocks::embed(Tensor input_ids) {
  embedding_ = stored(o_.prefix + "embed_tokens.weight", {c_.vocab_size, c_.hidden_size},
                      Init::normal(0.0, 0.02, o_.seed + seed_++));
  // Gathered after widening, so that the gradient scatter accumulates in f32 even when the
  // table is stored in bf16 or f16.
  return take(cast(embedding_, DType::f32), input_ids, 0);
}

Rotary CausalLmBlocks::rotary(Tensor positions) {
  if (positions.valid()) return rotary_op(positions);
  // Positions 0..L-1 for every sequence, broadcast over the batch.
  Array iota({1, o_.sequence}, DType::i32);
  for (int64_t l = 0; l < o_.sequence; ++l) iota.data[static_cast<size_t>(l)] = static_cast<double>(l);
  return rotary_op(g_.constant(std::move(iota)));
}

Rotary CausalLmBlocks::rotary_op(Tensor positions) { return {unsqueeze(positions, 1)}; }

Tensor CausalLmBlocks::apply_rotary(Tensor x, const Rotary& r) const {
  return c_.rope_scaling ? rope_positions(x, r.positions, c_.rope_theta, *c_.rope_scaling)
                         : rope_positions(x, r.positions, c_.rope_theta);
}

Tensor CausalLmBlocks::heads(Tensor t, int64_t n) {
  return permute(reshape(t, {o_.batch, o_.sequence, n, c_.head_dim}), {0, 2, 1, 3});
}

Tensor CausalLmBlocks::attend(Tensor q, Tensor k, Tensor v) {
  return scaled_dot_product_attention(q, k, v, {}, /*causal=*/true);
}

Tensor CausalLmBlocks::attention_block(Tensor x, const std::string& p, const Rotary& r) {
  const int64_t H = c_.num_attention_heads, Hkv = c_.num_key_value_heads, D = c_.head_dim;
  Tensor q = heads(linear(x, H * D, p + "q_proj", c_.qkv_bias()), H);
  Tensor k = heads(linear(x, Hkv * D, p + "k_proj", c_.qkv_bias()), Hkv);
  Tensor v = heads(linear(x, Hkv * D, p + "v_proj", c_.qkv_bias()), Hkv);
  if (c_.qk_norm()) {  // Qwen3: RMSNorm over each head's vector, before the rotation
    q = norm(q, p + "q_norm");
    k = norm(k, p + "k_norm");
  }
  q = apply_rotary(q, r);
  k = apply_rotary(k, r);
  Tensor o = attend_ ? attend_(q, k, v, p) : attend(q, k, v);
  o = reshape(permute(o, {0, 2, 1, 3}), {o_.batch, o_.sequence, H * D});
  return linear(o, c_.hidden_size, p + "o_proj", c_.o_bias());
}

Tensor CausalLmBlocks::mlp_block(Tensor x, const std::string& p) {
  const int64_t F = c_.intermediate_size;
  Tensor gate = linear(x, F, p + "gate_proj", c_.mlp_bias);
  Tensor up = linear(x, F, p + "up_proj", c_.mlp_bias);
  return linear(silu(gate) * up, c_.hidden_size, p + "down_proj", c_.mlp_bias);
}

Tensor CausalLmBlocks::decoder_layer(Tensor h, int64_t layer, const Rotary& r) {
  const std::string p = o_.prefix + "layers." + std::to_string(layer) + ".";
  h = h + attention_block(norm(h, p + "input_layernorm"), p + "self_attn.", r);
  return h + mlp_block(norm(h, p + "post_attention_layernorm"), p + "mlp.");
}

Tensor CausalLmBlocks::final_logits(Tensor h) {
  h = norm(h, o_.prefix + "norm");
  if (c_.tie_word_embeddings) return matmul(h, cast(embedding_, DType::f32), false, true);
  return linear(h, c_.vocab_size, "lm_head", false);
}

}  // namespace models

namespace {

void check_lora(const LoraOptions& l) {
  if (l.rank < 0)
    throw Error("build_causal_lm: the LoRA rank must be positive, got " + std::to_string(l.rank));
  if (!l.enabled()) return;
  if (!(l.alpha > 0) || !std::isfinite(l.alpha))
    throw Error("build_causal_lm: the LoRA alpha must be positive, got " + std::to_string(l.alpha));
  if (l.targets.empty()) throw Error("build_causal_lm: LoRA without target projections");
  const auto known = LoraOptions::default_targets();
  for (const std::string& t : l.targets) {
    if (std::find(known.begin(), known.end(), t) == known.end()) {
      std::string list;
      for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
      throw Error("build_causal_lm: unknown LoRA target '" + t + "' (known: " + list + ")");
    }
  }
}

void check_options(const LmConfig& c, const CausalLmOptions& o) {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0)
      throw Error(std::string("build_causal_lm: ") + what + " must be positive, got " +
                  std::to_string(v));
  };
  positive(o.batch, "batch");
  positive(o.sequence, "sequence");
  positive(c.vocab_size, "vocab_size");
  positive(c.hidden_size, "hidden_size");
  positive(c.intermediate_size, "intermediate_size");
  positive(c.num_hidden_layers, "num_hidden_layers");
  positive(c.num_attention_heads, "num_attention_heads");
  positive(c.num_key_value_heads, "num_key_value_heads");
  positive(c.head_dim, "head_dim");
  if (c.num_attention_heads % c.num_key_value_heads != 0 || c.head_dim % 2 != 0) {
    throw Error("build_causal_lm: num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
                ") must divide num_attention_heads (" + std::to_string(c.num_attention_heads) +
                ") and head_dim (" + std::to_string(c.head_dim) + ") must be even");
  }
  if (!is_float(o.dtype))
    throw Error(std::string("build_causal_lm: the parameter dtype must be f32, f16 or bf16, got ") +
                dtype_name(o.dtype));
  check_lora(o.lora);
  if (!o.logits_output && !o.with_loss)
    throw Error("build_causal_lm: logits_output is off and with_loss too: the graph would have "
                "no output");
  if (o.with_loss && o.sequence < 2)
    throw Error("build_causal_lm: the loss needs a sequence of at least 2 tokens");
}

// Mean cross-entropy of logits [B, L, V] at positions 0..L-2 against labels at 1..L-1. The
// labels move, not the logits: position i is scored against labels[i + 1] and the last position
// against -100 (ignored), so the logits are read as they are and their gradient is the loss's own
// (slicing them copied [B, L-1, V] and padding the gradient back made a second one: 768 MiB each
// for SmolLM2 at 8 × 512 tokens).
Tensor shifted_loss(Tensor logits, Tensor labels) {
  const int64_t B = logits.dim(0), L = logits.dim(1), V = logits.dim(2);
  Tensor next = pad(slice(labels, 1, 1, L), {{0, 0}, {0, 1}}, -100.0);
  return cross_entropy(reshape(logits, {B * L, V}), reshape(next, {B * L}));
}

}  // namespace

LmConfig llama_config(const TransformerSpec& spec) {
  LmConfig c;
  c.vocab_size = spec.vocab;
  c.hidden_size = spec.hidden;
  c.intermediate_size = spec.ffn;
  c.num_hidden_layers = spec.layers;
  c.num_attention_heads = spec.heads;
  c.num_key_value_heads = spec.kv_heads;
  c.head_dim = spec.hidden / spec.heads;
  c.rms_norm_eps = spec.rms_eps;
  c.rope_theta = spec.rope_theta;
  c.tie_word_embeddings = true;
  return c;
}

CausalLm build_causal_lm(const LmConfig& config, const CausalLmOptions& options) {
  return models::build_causal_lm_in(std::make_unique<Graph>(), config, options);
}

CausalLm models::build_causal_lm_in(std::unique_ptr<Graph> graph, const LmConfig& config,
                                    const CausalLmOptions& options) {
  check_options(config, options);
  CausalLm m;
  m.graph = std::move(graph);
  Graph& g = *m.graph;
  models::CausalLmBlocks b(g, config, options);
  const Shape ids_shape{options.batch, options.sequence};
  m.input_ids = g.input("input_ids", ids_shape, DType::i32);
  if (options.with_positions) m.positions = g.input("positions", ids_shape, DType::i32);
  Tensor h = b.embed(m.input_ids);
  if (options.splice) h = options.splice(g, m.input_ids, h);
  const models::Rotary r = b.rotary(m.positions);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) h = b.decoder_layer(h, l, r);
  m.logits = b.final_logits(h);
  if (options.logits_output) g.output("logits", m.logits);
  if (options.with_loss) {
    m.labels = g.input("labels", ids_shape, DType::i32);
    m.loss = shifted_loss(m.logits, m.labels);
    g.output("loss", m.loss);
  }
  return m;
}

}  // namespace mn
