#pragma once
// Attention nodes the attention kernels' lowering tests build: a forward (scaled dot-product
// attention, or cached attention at per-row positions) as a one-node graph, and the training
// ops of an attention's gradients, each lowered on given traits.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <meganeura/autodiff.h>
#include <meganeura/graph.h>
#include <meganeura/ops.h>

#include "codegen/coop_fixture.h"
#include "codegen/kernel.h"
#include "support/scoped_env.h"

namespace mn::codegen::testing {

struct AttentionCase {
  std::string tag;
  Shape q, k, v, mask;
  bool causal = false;
  bool positions = false;  // cached_attention with per-row positions [B, 1, Lq]
  DType dtype = DType::f32;
};

inline std::unique_ptr<OneNode> attention_node(const AttentionCase& c) {
  auto n = std::make_unique<OneNode>();
  Graph& g = n->g;
  Tensor q = g.input("q", c.q, c.dtype), k = g.input("k", c.k, c.dtype),
         v = g.input("v", c.v, c.dtype);
  Tensor out;
  std::vector<Tensor> operands{q, k, v};
  if (c.positions) {
    Tensor pos = g.input("pos", {c.q[0], 1, c.q[2]}, DType::i32);
    operands.push_back(pos);
    out = cached_attention(q, k, v, pos);
  } else {
    Tensor mask = c.mask.empty() ? Tensor{} : g.input("mask", c.mask);
    if (!c.mask.empty()) operands.push_back(mask);
    out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  }
  g.output("out", out);
  n->id = out.id();
  for (const Tensor& t : operands) n->types.push_back(g.node(t.id()).type);
  return n;
}

// The name of the one kernel `c`'s attention lowers to on `t`, or "(n)" for n launches.
inline std::string kernel_name(const AttentionCase& c, const DeviceTraits& t) {
  const Lowering l = attention_node(c)->lower(t);
  return l.launches.size() == 1 ? l.launches[0].name
                                : "(" + std::to_string(l.launches.size()) + ")";
}

// An attention of batch 2 over [H, L, D] heads for the training ops.
struct TrainingCase {
  std::string tag;
  int64_t hq, hkv, lq, lk, d, dv;
  bool causal, mask;
  DType dtype;
};

// Every form the training kernels meet: grouped-query heads of 16 to 128, values of other widths,
// causal and masked scores, Lq against Lk, f32, f16 and bf16 operands.
inline const TrainingCase kTrainingCases[] = {
    {"d64-causal-gqa", 9, 3, 200, 200, 64, 64, true, false, DType::bf16},
    {"d128-causal", 3, 1, 80, 80, 128, 128, true, false, DType::bf16},
    {"d64-mask-long-key", 2, 1, 40, 100, 64, 64, false, true, DType::f16},
    {"d64-dv128-causal-mask", 2, 2, 90, 40, 64, 128, true, true, DType::bf16},
    {"d96-dv32-mask", 2, 2, 20, 130, 96, 32, false, true, DType::f32},
    {"d16-dv48-causal", 2, 1, 90, 40, 16, 48, true, false, DType::f32},
};

// Each attention training node of the gradients of `c`'s attention (built from the training
// ops, MN_ATTENTION_BACKWARD=kernels) lowered with `t`, by op name; with `grad_kv`, after
// attention_grad_k the same node lowered storing attention_grad_v beside dK
// (schedule/grad_kv.h), as "attention_grad_kv".
inline std::vector<std::pair<std::string, Lowering>> lower_training_nodes(const TrainingCase& c,
                                                                          const DeviceTraits& t,
                                                                          bool grad_kv = false) {
  mn::testing::ScopedEnv kernels("MN_ATTENTION_BACKWARD", "kernels");
  Graph g;
  Tensor q = g.input("q", {2, c.hq, c.lq, c.d}, c.dtype);
  Tensor k = g.input("k", {2, c.hkv, c.lk, c.d}, c.dtype);
  Tensor v = g.input("v", {2, c.hkv, c.lk, c.dv}, c.dtype);
  Tensor dout = g.input("dout", {2, c.hq, c.lq, c.dv}, c.dtype);
  Tensor mask = c.mask ? g.input("mask", {c.lq, c.lk}, c.dtype) : Tensor{};
  Tensor out = scaled_dot_product_attention(q, k, v, mask, c.causal);
  const std::vector<Tensor> grads = gradients(out, {q, k, v}, dout);
  for (size_t i = 0; i < grads.size(); ++i) g.output("d" + std::to_string(i), grads[i]);
  std::vector<std::pair<std::string, Lowering>> lowered;
  for (const Node& n : g.nodes()) {
    const std::string op(n.op_name());
    if (op != "attention_lse" && !op.starts_with("attention_grad_")) continue;
    std::vector<TensorType> types;
    for (NodeId in : n.inputs) types.push_back(g.node(in).type);
    LowerContext ctx{n, types, t};
    lowered.emplace_back(op, (*find_lowering(op))(ctx));
    if (grad_kv && op == "attention_grad_k") {
      ctx.grad_v_output = n.type.dtype;
      lowered.emplace_back("attention_grad_kv", (*find_lowering(op))(ctx));
    }
  }
  return lowered;
}

}  // namespace mn::codegen::testing
