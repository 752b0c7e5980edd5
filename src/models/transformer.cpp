// The built-in decoder-only language model (SmolLM2's architecture), written in primitive ops.
#include <cmath>
#include <limits>
#include <string>

#include <meganeura/models.h>
#include <meganeura/ops.h>

namespace mn {

TransformerSpec smollm2_135m() { return TransformerSpec{}; }

namespace {

void check_spec(const TransformerSpec& s) {
  auto positive = [](int64_t v, const char* what) {
    if (v <= 0) throw Error(std::string("build_transformer: ") + what + " must be positive");
  };
  positive(s.layers, "layers");
  positive(s.hidden, "hidden");
  positive(s.heads, "heads");
  positive(s.kv_heads, "kv_heads");
  positive(s.ffn, "ffn");
  positive(s.vocab, "vocab");
  positive(s.sequence, "sequence");
  positive(s.batch, "batch");
  if (s.hidden % s.heads != 0)
    throw Error("build_transformer: hidden (" + std::to_string(s.hidden) +
                ") must be a multiple of heads (" + std::to_string(s.heads) + ")");
  if (s.heads % s.kv_heads != 0)
    throw Error("build_transformer: heads (" + std::to_string(s.heads) +
                ") must be a multiple of kv_heads (" + std::to_string(s.kv_heads) + ")");
  if ((s.hidden / s.heads) % 2 != 0)
    throw Error("build_transformer: the head size (" + std::to_string(s.hidden / s.heads) +
                ") must be even for the rotary embedding");
  if (!(s.rms_eps > 0.0)) throw Error("build_transformer: rms_eps must be positive");
}

class Builder {
 public:
  Builder(Graph& g, const TransformerSpec& s) : g_(g), s_(s), head_(s.hidden / s.heads) {}

  Tensor weight(const std::string& name, Shape shape) {
    return g_.parameter(name, std::move(shape), Init::normal(0.0, 0.02, s_.seed + seed_++));
  }

  // y = x·wᵀ with w [out, in], as Hugging Face's Linear stores it.
  Tensor linear(Tensor x, int64_t out, const std::string& name) {
    return matmul(x, weight(name + ".weight", {out, x.dim(-1)}), false, true);
  }

  Tensor rms_norm(Tensor x, const std::string& name) {
    Tensor gamma = g_.parameter(name + ".weight", {x.dim(-1)}, Init::ones());
    return x * rsqrt(mean(x * x, {-1}, true) + s_.rms_eps) * gamma;
  }

  // Rotate-half rotary embedding over [..., L, D], angles from integer positions and 2i/D.
  Tensor rope(Tensor x) {
    const int64_t length = x.dim(-2), dim = x.dim(-1), half = dim / 2;
    Array positions({length, 1}, DType::f32), two_i({1, half}, DType::f32);
    for (int64_t l = 0; l < length; ++l) positions.data[l] = static_cast<double>(l);
    for (int64_t i = 0; i < half; ++i) two_i.data[i] = static_cast<double>(2 * i);
    Tensor exponent = g_.constant(std::move(two_i)) / g_.scalar(static_cast<double>(dim));
    Tensor inv_freq = 1.0 / pow(g_.scalar(s_.rope_theta), exponent);
    Tensor angle = g_.constant(std::move(positions)) * inv_freq;
    Tensor c = cos(angle), s = sin(angle);
    Tensor rotated = concat({-slice(x, -1, half, dim), slice(x, -1, 0, half)}, -1);
    return x * concat({c, c}, -1) + rotated * concat({s, s}, -1);
  }

  // Grouped-query causal attention over x [B, L, hidden]: query heads of one group share a
  // key/value head through a broadcast batch axis ([B, Hkv, G, L, D] against [B, Hkv, 1, L, D]).
  Tensor attention(Tensor x, const std::string& name) {
    const int64_t B = s_.batch, L = s_.sequence, H = s_.heads, Hkv = s_.kv_heads, D = head_;
    const int64_t G = H / Hkv;
    auto heads = [&](Tensor t, int64_t n) {
      return permute(reshape(t, {B, L, n, D}), {0, 2, 1, 3});
    };
    Tensor q = rope(heads(linear(x, H * D, name + ".q_proj"), H));
    Tensor k = rope(heads(linear(x, Hkv * D, name + ".k_proj"), Hkv));
    Tensor v = heads(linear(x, Hkv * D, name + ".v_proj"), Hkv);
    q = reshape(q, {B, Hkv, G, L, D});
    k = reshape(k, {B, Hkv, 1, L, D});
    v = reshape(v, {B, Hkv, 1, L, D});
    Tensor scores = matmul(q, k, false, true) / sqrt(g_.scalar(static_cast<double>(D)));
    scores = where(causal_keep(), scores, g_.scalar(-std::numeric_limits<double>::infinity()));
    Tensor e = exp(scores - max(scores, {-1}, true));
    Tensor p = e / sum(e, {-1}, true);
    Tensor o = reshape(matmul(p, v), {B, H, L, D});
    o = reshape(permute(o, {0, 2, 1, 3}), {B, L, H * D});
    return linear(o, s_.hidden, name + ".o_proj");
  }

  Tensor mlp(Tensor x, const std::string& name) {
    Tensor gate = linear(x, s_.ffn, name + ".gate_proj");
    Tensor up = linear(x, s_.ffn, name + ".up_proj");
    return linear(gate * sigmoid(gate) * up, s_.hidden, name + ".down_proj");
  }

 private:
  // 1 where key position j <= query position i; one constant shared by every layer.
  Tensor causal_keep() {
    if (!keep_.valid()) {
      const int64_t L = s_.sequence;
      Array keep({L, L}, DType::f32);
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j <= i; ++j) keep.data[i * L + j] = 1.0;
      keep_ = g_.constant(std::move(keep));
    }
    return keep_;
  }

  Graph& g_;
  const TransformerSpec& s_;
  int64_t head_;
  uint64_t seed_ = 0;
  Tensor keep_;
};

}  // namespace

LanguageModel build_transformer(const TransformerSpec& spec) {
  check_spec(spec);
  LanguageModel m;
  m.graph = std::make_unique<Graph>();
  Graph& g = *m.graph;
  Builder b(g, spec);
  m.tokens = g.input("tokens", {spec.batch, spec.sequence}, DType::i32);
  Tensor embed = b.weight("model.embed_tokens.weight", {spec.vocab, spec.hidden});
  Tensor h = take(embed, m.tokens, 0);
  for (int64_t l = 0; l < spec.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    h = h + b.attention(b.rms_norm(h, p + ".input_layernorm"), p + ".self_attn");
    h = h + b.mlp(b.rms_norm(h, p + ".post_attention_layernorm"), p + ".mlp");
  }
  h = b.rms_norm(h, "model.norm");
  m.logits = matmul(h, embed, false, true);  // tied output projection
  g.output("logits", m.logits);
  if (spec.with_loss) {
    m.targets = g.input("targets", {spec.batch, spec.sequence}, DType::i32);
    Tensor flat = reshape(m.logits, {spec.batch * spec.sequence, spec.vocab});
    Tensor shifted = flat - max(flat, {-1}, true);
    Tensor log_probs = shifted - log(sum(exp(shifted), {-1}, true));
    m.loss = nll_loss(log_probs, reshape(m.targets, {spec.batch * spec.sequence}));
    g.output("loss", m.loss);
  }
  return m;
}

}  // namespace mn
