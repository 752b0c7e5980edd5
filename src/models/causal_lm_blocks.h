#pragma once
// The blocks of the Llama-family decoder, one function each, so that other graph builders
// (a prefill or decode step over a KV cache) can assemble the same layers differently: the
// attention block ends in attend(q, k, v), which a cached variant replaces.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <meganeura/causal_lm.h>

namespace mn::models {

// The rotary embedding of a graph: the positions (i32 [batch or 1, 1, sequence]) that the
// rope_positions op rotates q and k by (one kernel each, and one for each gradient, where the
// rotate-half form in graph ops took a slice, negation, concatenation and products).
struct Rotary {
  Tensor positions;
};

class CausalLmBlocks {
 public:
  CausalLmBlocks(Graph& g, const LmConfig& config, const CausalLmOptions& options);

  // A parameter of the storage dtype, as stored and read as f32.
  Tensor stored(const std::string& name, Shape shape, Init init);
  Tensor param(const std::string& name, Shape shape, Init init);
  // y = x·wᵀ (+ b) with w [out, in] as Hugging Face's Linear stores it.
  Tensor linear(Tensor x, int64_t out, const std::string& name, bool bias);
  // RMSNorm over the last axis with weight "<name>.weight".
  Tensor norm(Tensor x, const std::string& name);

  Tensor embed(Tensor input_ids);  // [B, L] -> [B, L, hidden]
  // Positions 0..L-1 (a constant) or a positions input (i32 [B, L]).
  Rotary rotary(Tensor positions = {});
  // The rope_positions op at a positions input (one kernel per rotation).
  static Rotary rotary_op(Tensor positions);
  Tensor apply_rotary(Tensor x, const Rotary& r) const;  // rotate-half convention

  Tensor decoder_layer(Tensor h, int64_t layer, const Rotary& r);
  // Projections, Qwen3's per-head q/k norms, RoPE, attend, output projection.
  Tensor attention_block(Tensor x, const std::string& prefix, const Rotary& r);
  // Causal grouped-query attention: q [B, H, L, D], k and v [B, Hkv, L, D] -> [B, H, L, D].
  static Tensor attend(Tensor q, Tensor k, Tensor v);
  // Replaces attend(q, k, v) in every layer (a KV-cache step attends over its cache); `prefix`
  // is the layer's "model.layers.N.self_attn.".
  using AttendFn = std::function<Tensor(Tensor q, Tensor k, Tensor v, const std::string& prefix)>;
  void set_attend(AttendFn f) { attend_ = std::move(f); }
  Tensor mlp_block(Tensor x, const std::string& prefix);  // SwiGLU
  Tensor final_logits(Tensor h);                          // final norm and (tied) head

 private:
  Tensor heads(Tensor t, int64_t n);  // [B, L, n*D] -> [B, n, L, D]
  // Whether the projection `name` carries a LoRA adapter, and the adapter's term.
  bool has_adapter(const std::string& name) const;
  Tensor adapter(Tensor x, int64_t out, const std::string& name);

  Graph& g_;
  const LmConfig& c_;
  const CausalLmOptions& o_;
  uint64_t seed_ = 0;
  uint64_t lora_count_ = 0;
  Tensor embedding_;
  AttendFn attend_;  // the stored embedding, shared with a tied head
};

// build_causal_lm into a graph that may already hold other parts (a vision tower whose
// features the options' splice reads).
CausalLm build_causal_lm_in(std::unique_ptr<Graph> graph, const LmConfig& config,
                            const CausalLmOptions& options);

}  // namespace mn::models
