// The KV-cache step of the Llama-family decoder: the layers of build_causal_lm with attention
// over per-layer key/value caches kept as graph states.

#include <meganeura/causal_lm.h>
#include <meganeura/ops.h>

#include "models/causal_lm_blocks.h"

namespace mn {

namespace {

void check_step_options(const LmConfig& c, const LmStepOptions& o) {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) {
      throw Error(std::string("build_lm_step: ") + what + " must be positive, got " +
                  std::to_string(v));
    }
  };
  positive(o.batch, "batch");
  positive(o.block, "block");
  positive(o.max_context, "max_context");
  if (!is_float(o.cache_dtype)) {
    throw Error(std::string("build_lm_step: cache_dtype must be f32, f16 or bf16, got ") +
                dtype_name(o.cache_dtype));
  }
  if (o.block > o.max_context) {
    throw Error("build_lm_step: a block of " + std::to_string(o.block) +
                " tokens does not fit a context of " + std::to_string(o.max_context));
  }
}

// The caches of every layer: the block's keys and values written at `positions` (in place: the
// state is assigned the cache_write of itself), attended up to each query's position.
class LayerCache {
 public:
  LayerCache(Graph& g, const LmConfig& c, const LmStepOptions& o, Tensor positions)
      : g_(g), c_(c), o_(o), positions_(positions), query_positions_(unsqueeze(positions, 1)) {}

  // Writes `x` ([B, Hkv, L, D]) into the cache state `name` (rounded to the cache's dtype);
  // returns the updated cache.
  Tensor append(const std::string& name, Tensor x) {
    Tensor state = g_.state(name, {o_.batch, c_.num_key_value_heads, o_.max_context, c_.head_dim},
                            Init::zeros(), o_.cache_dtype);
    Tensor updated = cache_write(state, x, positions_);
    g_.assign(state, updated);
    return updated;
  }

  // The caches may be 16-bit: the writes round the keys and values, the attention reads them
  // beside an f32 query.
  Tensor attend(Tensor q, Tensor k, Tensor v, const std::string& prefix) {
    Tensor keys = append(prefix + "k_cache", k);
    Tensor values = append(prefix + "v_cache", v);
    return cached_attention(q, keys, values, query_positions_);
  }

 private:
  Graph& g_;
  const LmConfig& c_;
  const LmStepOptions& o_;
  Tensor positions_;        // [B, L]
  Tensor query_positions_;  // [B, 1, L]
};

// Rows `last[b]` of h [B, L, hidden] -> [B, hidden].
Tensor rows_at(Graph& g, Tensor h, Tensor last) {
  const int64_t B = h.dim(0), L = h.dim(1);
  Array base({B}, DType::i32);
  for (int64_t b = 0; b < B; ++b) base.data[static_cast<size_t>(b)] = static_cast<double>(b * L);
  Tensor flat = reshape(h, {B * L, h.dim(2)});
  return take(flat, last + g.constant(std::move(base)), 0);
}

}  // namespace

CausalLm build_lm_step(const LmConfig& config, const LmStepOptions& options) {
  check_step_options(config, options);
  CausalLmOptions lm;
  lm.batch = options.batch;
  lm.sequence = options.block;
  lm.dtype = options.dtype;
  lm.with_positions = true;
  lm.prefix = options.prefix;
  CausalLm m;
  m.graph = std::make_unique<Graph>();
  Graph& g = *m.graph;
  models::CausalLmBlocks b(g, config, lm);
  const Shape ids_shape{options.batch, options.block};
  m.input_ids = g.input("input_ids", ids_shape, DType::i32);
  m.positions = g.input("positions", ids_shape, DType::i32);
  Tensor last = g.input("last", {options.batch}, DType::i32);
  LayerCache cache(g, config, options, m.positions);
  b.set_attend([&cache](Tensor q, Tensor k, Tensor v, const std::string& prefix) {
    return cache.attend(q, k, v, prefix);
  });
  Tensor h = b.embed(m.input_ids);
  if (options.splice) h = options.splice(g, m.input_ids, h);
  const models::Rotary r = models::CausalLmBlocks::rotary_op(m.positions);
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) h = b.decoder_layer(h, l, r);
  m.logits = b.final_logits(rows_at(g, h, last));
  g.output("logits", m.logits);
  // Sampling parameters are inputs, so one recorded step serves every token and setting.
  Tensor next = sample_tokens(m.logits, g.input("temperature", {}), g.input("top_k", {}, DType::i32),
                              g.input("top_p", {}), g.input("seed", {}, DType::u32),
                              g.input("step", {}, DType::u32));
  g.output("next", next);
  return m;
}

}  // namespace mn
