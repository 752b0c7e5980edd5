#pragma once
// A small causal LM's training step (Llama layout: 4 heads over 2 key/value heads of 16, 16
// tokens, batch 2), AdamW, returning only its loss: the schedule tests' transformer.
#include <cstdint>

#include <meganeura/causal_lm.h>
#include <meganeura/models.h>
#include <meganeura/optimizer.h>

namespace mn::testing {

inline CausalLm tiny_causal_lm_step(int64_t layers) {
  TransformerSpec spec;
  spec.layers = layers, spec.hidden = 64, spec.heads = 4, spec.kv_heads = 2, spec.ffn = 96;
  spec.vocab = 96, spec.sequence = 16, spec.batch = 2;
  CausalLmOptions o;
  o.batch = spec.batch;
  o.sequence = spec.sequence;
  o.with_loss = true;
  o.logits_output = false;
  CausalLm m = build_causal_lm(llama_config(spec), o);
  add_training_step(m.loss, Optimizer::adamw());
  return m;
}

}  // namespace mn::testing
