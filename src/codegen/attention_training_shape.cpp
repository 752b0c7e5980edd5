#include "codegen/attention_training_shape.h"

#include <algorithm>
#include <cmath>

#include "codegen/attention_shape.h"
#include "codegen/glsl.h"
#include "codegen/kernel_template.h"
#include "ir/ops/common.h"

namespace mn::codegen::attention_training {

using glsl::ulit;

TrainingShape::TrainingShape(const LowerContext& ctx, Form f)
    : form(f), attrs(ctx.node.attrs.as<AttentionAttrs>()) {
  const std::span<const TensorType> in = ctx.inputs;
  size_t rank = 3;
  // q, k and (but for lse) v or dout: operands 0, 1, 2, all of rank R or [L, *].
  for (size_t i = 0; i < std::min<size_t>(3, in.size()); ++i) {
    if (f != Form::lse || i < 2) rank = std::max(rank, in[i].shape.size());
  }
  const auto padded = [rank](const Shape& s) {
    Shape p(rank - s.size(), 1);
    p.insert(p.end(), s.begin(), s.end());
    return p;
  };
  const Shape q = padded(in[0].shape), k = padded(in[1].shape);
  const size_t R = rank;
  hq = q[R - 3], lq = q[R - 2], d = q[R - 1];
  hkv = k[R - 3], lk = k[R - 2];
  // Dv from operand 2: v (grad_q, grad_k) or dout (grad_v, which takes no v); lse needs none.
  dv = f == Form::lse ? d : static_cast<uint64_t>(in[2].shape.back());
  batch = Shape(q.begin(), q.end() - 3);
  if (attrs.has_mask) {
    Shape scores = batch;
    scores.insert(scores.end(),
                  {static_cast<int64_t>(hq), static_cast<int64_t>(lq), static_cast<int64_t>(lk)});
    const Shape m = padded(in.back().shape);
    mask_strides.assign(R, 0);
    uint64_t stride = 1;
    for (size_t a = R; a-- > 0;) {
      if (m[a] != 1) mask_strides[a] = stride;
      stride *= static_cast<uint64_t>(m[a]);
    }
  }
}

std::string declarations(const LowerContext& ctx, const TrainingShape& g,
                         std::vector<KernelBinding>& bindings) {
  // The op's operands (src/ir/ops/attention_training.cpp), the mask after them.
  static const std::vector<const char*> lse_names{"q", "k"}, grad_v_names{"q", "k", "dout", "lse"},
      grad_names{"q", "k", "v", "dout", "lse", "delta"};
  const std::vector<const char*>& names = g.form == Form::lse      ? lse_names
                                          : g.form == Form::grad_v ? grad_v_names
                                                                   : grad_names;
  std::string s = glsl::header();
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const char* name = i < names.size() ? names[i] : "mask";
    s += glsl::buffer(static_cast<uint32_t>(i), ctx.inputs[i].dtype, name, true);
    bindings.push_back({ArgRef::input(static_cast<int>(i)), false});
  }
  s += glsl::buffer(static_cast<uint32_t>(ctx.inputs.size()), ctx.node.type.dtype, "out", false);
  bindings.push_back({ArgRef::output(), true});
  s += "const uint HQ = " + ulit(g.hq) + ", HKV = " + ulit(g.hkv) + ", LQ = " + ulit(g.lq) +
       ", LK = " + ulit(g.lk) + ", D = " + ulit(g.d) + ", DV = " + ulit(g.dv) +
       ", GROUP = " + ulit(g.hq / g.hkv) + ", L = " + ulit(kScalarLanes) + ";\n";
  s += "float mn_inf() { return uintBitsToFloat(0x7f800000u); }\n";
  return s + attention_lowering::scale_function(ctx, g.attrs, g.d);
}

std::string mask_batch(const TrainingShape& g) {
  if (!g.attrs.has_mask) return "";
  std::string s = glsl::unravel(g.batch, "b", "c") + "  uint mbatch = 0u";
  for (size_t a = 0; a < g.batch.size(); ++a) {
    if (g.mask_strides[a]) s += " + c" + std::to_string(a) + " * " + ulit(g.mask_strides[a]);
  }
  return s + ";\n";
}

std::string mask_function(const TrainingShape& g) {
  if (!g.attrs.has_mask) return "";
  const size_t R = g.mask_strides.size();
  return "uint mask_at(uint mbatch, uint h, uint i, uint j) { return mbatch + h * " +
         ulit(g.mask_strides[R - 3]) + " + i * " + ulit(g.mask_strides[R - 2]) + " + j * " +
         ulit(g.mask_strides[R - 1]) + "; }";
}

TemplateFields role_fields(const TrainingShape& g, const std::string& suffix) {
  const Form f = g.form;
  const bool own_queries = query_own(f);
  const auto name = [&](const char* operand) { return std::string(operand) + suffix; };
  return {
      {"OWN_A", name(own_queries ? "q" : "k")},
      {"OTHER_A", name(own_queries ? "k" : "q")},
      {"OWN_B", f == Form::grad_q   ? name("dout")
                : f == Form::grad_k ? name("v")
                                    : "no_operand"},
      {"OTHER_B", f == Form::grad_q ? name("v")
                  : has_other_b(f)  ? name("dout")
                                    : "no_operand"},
      {"MASK_FUNCTION", mask_function(g)},
      {"MASK_BATCH", mask_batch(g)},
      {"BLOCKS", other_side_blocks()},
  };
}

std::string other_side_blocks() {
  return fill_kernel_template("attention_training_blocks.comp", {});
}

}  // namespace mn::codegen::attention_training
