#pragma once
// Causal LMs' training steps as the tests build them: the model of a TransformerSpec's shape
// (Llama layout), its loss only, with an optimizer's update appended. tiny_causal_lm_step is the
// schedule tests' transformer: 4 heads over 2 key/value heads of 16, 16 tokens, batch 2, AdamW.
#include <cstdint>

#include <meganeura/causal_lm.h>
#include <meganeura/models.h>
#include <meganeura/optimizer.h>

namespace mn::testing {

inline CausalLm causal_lm_step(const TransformerSpec& spec, const Optimizer& opt,
                               uint64_t seed = 0) {
  CausalLmOptions o;
  o.batch = spec.batch;
  o.sequence = spec.sequence;
  o.with_loss = true;
  o.logits_output = false;
  o.seed = seed;
  CausalLm m = build_causal_lm(llama_config(spec), o);
  add_training_step(m.loss, opt);
  return m;
}

inline CausalLm tiny_causal_lm_step(int64_t layers) {
  TransformerSpec spec;
  spec.layers = layers, spec.hidden = 64, spec.heads = 4, spec.kv_heads = 2, spec.ffn = 96;
  spec.vocab = 96, spec.sequence = 16, spec.batch = 2;
  return causal_lm_step(spec, Optimizer::adamw());
}

}  // namespace mn::testing
