#include "support/attention_problem.h"

#include <utility>
#include <vector>

#include <meganeura/autodiff.h>
#include <meganeura/ops.h>

#include "support/random_fill.h"

namespace mn::testing {

AttentionProblem attention_problem(const AttentionCase& c, const std::string& seed_prefix) {
  AttentionProblem p;
  Graph& g = p.graph;
  Tensor q = g.input("q", {c.batch, c.hq, c.lq, c.d}, c.dtype);
  Tensor k = g.input("k", {c.batch, c.hkv, c.lk, c.d}, c.dtype);
  Tensor v = g.input("v", {c.batch, c.hkv, c.lk, c.dv}, c.dtype);
  Tensor dout = g.input("dout", {c.batch, c.hq, c.lq, c.dv}, c.dtype);
  Tensor mask = c.mask ? g.input("mask", {c.lq, c.lk}, c.dtype) : Tensor{};
  Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  const std::vector<Tensor> grads = gradients(out, {q, k, v}, dout);
  g.output("out", out);
  g.output("dq", grads[0]);
  g.output("dk", grads[1]);
  g.output("dv", grads[2]);
  for (const Node& n : g.nodes()) p.grad_ops += n.op_name().starts_with("attention_grad_");

  auto rng = rng_for(seed_prefix + c.label);
  const std::pair<const char*, Tensor> operands[] = {{"q", q}, {"k", k}, {"v", v}, {"dout", dout}};
  for (const auto& [name, t] : operands) p.feeds[name] = random_array(rng, t.type(), -1.0, 1.0);
  if (c.mask) p.feeds["mask"] = random_array(rng, mask.type(), -2.0, 0.0);
  return p;
}

}  // namespace mn::testing
