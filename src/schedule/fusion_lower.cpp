// Kernels of fused groups: pointwise DAGs through codegen/fused_pointwise.h, matmul epilogues
// through codegen/matmul_epilogue.h, single nodes through their op's lowering.
#include <algorithm>
#include <map>
#include <optional>

#include "codegen/fused_pointwise.h"
#include "codegen/fused_reduce.h"
#include "codegen/glsl.h"
#include "codegen/lower_attention.h"
#include "codegen/lower_conv.h"
#include "codegen/lower_matmul.h"
#include "codegen/rope_load.h"
#include "codegen/store_rewrites.h"
#include "ir/op_def.h"
#include "ir/ops/attention.h"
#include "ir/ops/nn.h"
#include "schedule/fusion.h"
#include "schedule/narrowed_stores.h"

namespace mn::schedule {

namespace {

// The segment's steps, operands referring to earlier steps or to `inputs` (by position).
codegen::FusedSegment fused_segment(const Graph& g, const KernelSegment& seg,
                                    const std::vector<NodeId>& inputs,
                                    const std::vector<NodeId>& outputs) {
  codegen::FusedSegment f;
  f.domain = seg.domain;
  std::map<NodeId, int> step_of;
  for (NodeId v : seg.nodes) {
    codegen::FusedStep step;
    step.node = &g.node(v);
    for (NodeId in : step.node->inputs) {
      if (auto it = step_of.find(in); it != step_of.end()) {
        step.operands.push_back(codegen::FusedOperand::of_step(it->second));
        continue;
      }
      if (is_scalar_constant(g.node(in))) {
        const Array& value = *g.node(in).attrs.as<ConstantAttrs>().value.array;
        step.operands.push_back(
            codegen::FusedOperand::of_literal(codegen::glsl::float_literal(value.data.at(0))));
        continue;
      }
      const auto k = std::find(inputs.begin(), inputs.end(), in) - inputs.begin();
      if (k == static_cast<std::ptrdiff_t>(inputs.size())) {
        throw Error("fusion: node %" + std::to_string(in) + " read by %" + std::to_string(v) +
                    " is neither in its kernel nor one of the kernel's inputs");
      }
      step.operands.push_back(codegen::FusedOperand::of_input(static_cast<int>(k)));
    }
    step_of[v] = static_cast<int>(f.steps.size());
    f.steps.push_back(std::move(step));
  }
  for (NodeId o : seg.outputs) {
    const auto j = std::find(outputs.begin(), outputs.end(), o) - outputs.begin();
    f.stores.emplace_back(static_cast<int>(j), step_of.at(o));
  }
  return f;
}

std::string op_list(const Graph& g, const std::vector<NodeId>& nodes) {
  constexpr size_t kShown = 4;
  std::string s;
  size_t shown = 0;
  for (NodeId v : nodes) {
    if (shown == kShown) {
      s += ",+" + std::to_string(nodes.size() - kShown);
      break;
    }
    s += (shown++ ? "," : "") + std::string(g.node(v).op_name());
  }
  return s;
}

// What a GEMV group's kernel does beside its product (KernelGroup::gemv).
std::optional<codegen::GemvExtras> gemv_extras(const Graph& g, const KernelGroup& group) {
  const KernelGroup::Gemv& v = group.gemv;
  if (v.norm < 0 && v.sibling < 0 && v.stacked.empty() && v.then < 0 && v.combine_splits == 0) {
    return std::nullopt;
  }
  codegen::GemvExtras x;
  if (v.norm >= 0) {
    x.norm = true;
    x.eps = g.node(v.norm).attrs.as<RmsNormAttrs>().eps;
    x.gamma_input = v.gamma_input;
    if (v.gamma_input >= 0) x.gamma_dtype = g.node(group.inputs[v.gamma_input]).type.dtype;
  }
  x.sibling_input = v.sibling_input;
  if (v.sibling_input >= 0) {
    x.sibling_dtype = g.node(group.inputs[v.sibling_input]).type.dtype;
    x.sibling_product_dtype = g.node(v.sibling).type.dtype;
  }
  for (size_t j = 0; j < v.stacked.size(); ++j) {
    const TensorType& matrix = g.node(group.inputs[v.stacked_input[j]]).type;
    x.stacked.push_back({v.stacked_input[j], matrix.dtype, g.node(v.stacked[j]).type.shape.back(),
                         g.node(v.stacked[j]).type.dtype});
  }
  if (v.then >= 0) {
    codegen::GemvExtras::Chain c;
    c.matrix_input = v.then_input;
    c.matrix_dtype = g.node(group.inputs[v.then_input]).type.dtype;
    c.outs = g.node(v.then).type.numel();
    c.residual_input = v.then_residual;
    c.out_dtype = g.node(v.then_add >= 0 ? v.then_add : v.then).type.dtype;
    x.chain = c;
  }
  if (v.combine_splits > 0)
    x.combine = codegen::GemvExtras::Combine{v.combine_splits, v.combine_dv};
  return x;
}

// A group stored permuted (permuted_stores.h) has the permute as its output: its result has the
// shape of the permute's operand (a reshape of the computed value, or that value itself).
Shape unpermuted_shape(const Graph& g, const KernelGroup& group) {
  return g.node(g.node(group.outputs.at(0)).inputs.front()).type.shape;
}

// A product stored permuted lowers with the stored shape and permutation in its context (its
// kernel stores through them); `shape` holds the shape the context points at.
void store_product_permuted(const Graph& g, const KernelGroup& group, Shape& shape,
                            codegen::LowerContext& ctx) {
  if (group.stored_permuted.empty()) return;
  shape = unpermuted_shape(g, group);
  ctx.stored_shape = &shape;
  ctx.stored_perm = &group.stored_permuted;
}

codegen::Lowering lower_epilogue(const Graph& g, const KernelGroup& group,
                                 const codegen::DeviceTraits& device) {
  const NodeId m = group.nodes.front();
  const Node& mm = g.node(m);
  const KernelSegment& seg = group.segments.front();
  // The matmul's value is the accumulator; every other operand is an extra binding (even A or
  // B themselves: the split GEMV's combine kernel has no A and B).
  std::vector<NodeId> inputs = group.inputs;
  inputs.push_back(m);
  std::vector<TensorType> types;
  std::vector<std::string> exprs;
  codegen::MatmulEpilogue e;
  // A 16-bit product's value is its accumulator rounded to that dtype, as its store would round
  // it; the kernel then stores the epilogue's f32 value.
  const bool narrow_product = is_half_float(mm.type.dtype);
  if (narrow_product) {
    const std::string narrow = mm.type.dtype == DType::bf16 ? "bf16" : "f16";
    e.declarations += codegen::glsl::half_conversions();
    e.declarations += "float mn_product_value(float v) { return mn_" + narrow +
                      "_to_f32(mn_f32_to_" + narrow + "(v)); }\n";
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    types.push_back(g.node(inputs[i]).type);
    if (inputs[i] == m) {
      exprs.emplace_back(narrow_product ? "mn_product_value(acc)" : "acc");
      continue;
    }
    if (inputs[i] == group.gemv.sibling) {  // computed beside the product, not bound
      exprs.emplace_back("mm_sibling");
      continue;
    }
    const bool read = std::any_of(seg.nodes.begin(), seg.nodes.end(), [&](NodeId v) {
      const auto& ins = g.node(v).inputs;
      return std::find(ins.begin(), ins.end(), inputs[i]) != ins.end();
    });
    if (!read) {
      exprs.emplace_back("0.0");
      continue;
    }
    const std::string name = "ep" + std::to_string(e.extra.size());
    e.declarations += codegen::glsl::buffer(static_cast<uint32_t>(3 + e.extra.size()),
                                            types.back().dtype, name, true);
    e.extra.push_back(codegen::ArgRef::input(static_cast<int>(i)));
    exprs.push_back(name + "_ld($)");
  }
  // Outputs past the first are stored by the epilogue itself, at the same element, but for a
  // chained product's value (the kernel stores it, codegen::GemvExtras::chain).
  const size_t epilogue_outputs = group.gemv.then >= 0 ? 1 : group.outputs.size();
  for (size_t j = 1; j < epilogue_outputs; ++j) {
    e.declarations +=
        codegen::glsl::buffer(static_cast<uint32_t>(3 + e.extra.size()),
                              g.node(group.outputs[j]).type.dtype, "eo" + std::to_string(j), false);
    e.extra.push_back(codegen::ArgRef::output(static_cast<int>(j)));
  }
  e.declarations += codegen::pointwise_math_library();
  // A conv's own value may be an output too (fusion.h): the accumulator, stored as it is.
  KernelSegment steps = seg;
  std::erase(steps.outputs, m);
  // Stored permuted (permuted_stores.h), the group's output is the permute of (a reshape of) the
  // value the segment computes: the segment stores that value, the kernel moves it.
  std::vector<NodeId> outputs = group.outputs;
  if (!group.stored_permuted.empty()) {
    NodeId value = g.node(outputs.front()).inputs.front();
    if (g.node(value).op_name() == "reshape") value = g.node(value).inputs.front();
    outputs.front() = value;
  }
  codegen::FusedSegment f = fused_segment(g, steps, inputs, outputs);
  std::vector<std::pair<int, std::string>> stores;
  for (const auto& [out, step] : f.stores) stores.emplace_back(out, "ep_" + std::to_string(step));
  const auto own = std::find(outputs.begin(), outputs.end(), m);
  if (own != outputs.end()) stores.emplace_back(own - outputs.begin(), "acc");
  // The group's own operands: a 16-bit tensor where the matmul reads it widened
  // (schedule/widened_loads.h).
  std::vector<TensorType> in_types;
  for (size_t i = 0; i < mm.inputs.size(); ++i) in_types.push_back(g.node(group.inputs[i]).type);
  // Typed as the kernel stores: the epilogue's first value (f32, fusion.cpp).
  Node stored = mm;
  stored.type.dtype = g.node(group.outputs.front()).type.dtype;
  codegen::LowerContext ctx{stored, in_types, device};
  Shape permuted_shape;
  store_product_permuted(g, group, permuted_shape, ctx);
  const bool conv = mm.op_name() == "conv2d";
  // Element (b, m, n) of the product is element b·M·N + m·N + n of its (row-major) shape; a
  // conv's output [N, O, OH, OW] is the product [N, O, OH·OW] (codegen/matmul_epilogue.h).
  int64_t rows = 0, cols = 0;
  if (conv) {
    const Shape& y = mm.type.shape;
    rows = y[y.size() - 3];
    cols = y[y.size() - 2] * y[y.size() - 1];
  } else {
    const codegen::MatmulGeometry geo = codegen::geometry(ctx);
    rows = geo.m;
    cols = geo.n;
  }
  e.body = "  uint ep_i = b * " + std::to_string(rows * cols) + "u + m * " + std::to_string(cols) +
           "u + n;\n";
  e.body += codegen::fused_statements(f, types, exprs, "ep_i", "ep_");
  std::string primary;
  for (const auto& [out, value] : stores) {
    if (out == 0) {
      primary = value;
    } else {
      e.body += "  eo" + std::to_string(out) + "_st(ep_i, " + value + ");\n";
    }
  }
  e.body += "  return " + primary + ";\n";
  // The conv's bias is bound after the epilogue's operands.
  const std::optional<codegen::GemvExtras> x = gemv_extras(g, group);
  size_t extra_bindings = x ? (x->gamma_input >= 0) + (x->sibling_input >= 0) : 0;
  if (x && x->chain) extra_bindings += 4 + (x->chain->residual_input >= 0);
  if (mm.inputs.size() + 1 + e.extra.size() + extra_bindings > device.max_storage_buffers) {
    throw Error("fusion: " + std::string(mm.op_name()) +
                " epilogue binds more buffers than the device allows");
  }
  codegen::Lowering l = conv ? codegen::lower_conv2d_fused(ctx, &e)
                             : codegen::lower_matmul_fused(ctx, &e, x ? &*x : nullptr);
  l.launches.back().name += "+epilogue[" + op_list(g, seg.nodes) + "]";
  return l;
}

codegen::Lowering lower_reduction(const Graph& g, const KernelGroup& group,
                                  const codegen::DeviceTraits& device) {
  const NodeId r = group.anchor;
  const KernelSegment& pro = group.segments.at(0);
  const KernelSegment& epi = group.segments.at(1);
  // Every operand of the group is an extra binding; the reduced value is `v` in the epilogue.
  std::vector<NodeId> inputs = group.inputs;
  inputs.push_back(r);
  std::vector<TensorType> types;
  std::vector<std::string> exprs;
  codegen::ReduceFusion f;
  for (size_t i = 0; i < group.inputs.size(); ++i) {
    types.push_back(g.node(group.inputs[i]).type);
    const std::string name = "pr" + std::to_string(i);
    f.declarations +=
        codegen::glsl::buffer(static_cast<uint32_t>(2 + i), types.back().dtype, name, true);
    f.extra.push_back(codegen::ArgRef::input(static_cast<int>(i)));
    exprs.push_back(name + "_ld($)");
  }
  types.push_back(g.node(r).type);
  exprs.emplace_back("v");
  // The reduction's helpers define mn_isnan already.
  std::string library = codegen::pointwise_math_library();
  const std::string isnan_line =
      "bool mn_isnan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }\n";
  const size_t at = library.find(isnan_line);
  if (at == std::string::npos) throw Error("fusion: unexpected pointwise math library");
  library.erase(at, isnan_line.size());
  f.declarations += library;
  // A segment as a GLSL function returning its one stored value, at index `index`.
  auto segment_function = [&](const KernelSegment& seg, const std::vector<NodeId>& outputs,
                              const std::string& signature, const char* index,
                              const std::string& prefix) {
    const codegen::FusedSegment s = fused_segment(g, seg, inputs, outputs);
    return signature + " {\n" + codegen::fused_statements(s, types, exprs, index, prefix) +
           "  return " + prefix + std::to_string(s.stores.front().second) + ";\n}\n";
  };
  if (!pro.nodes.empty()) {
    f.prologue = true;
    f.declarations += segment_function(pro, pro.outputs, "float in_ld(uint i)", "i", "pr_");
  }
  if (!epi.nodes.empty()) {
    f.epilogue = true;
    f.stored = g.node(group.outputs.at(0)).type.dtype;
    f.declarations +=
        segment_function(epi, epi.outputs, "float mn_reduce_epilogue(float v, uint o)", "o", "re_");
  }
  const KernelSegment* tail = group.segments.size() > 2 ? &group.segments[2] : nullptr;
  if (tail) {
    // The row's value as stored (output 0) is `v`; the tail's values are outputs 1, 2, ...
    f.tail = true;
    std::vector<NodeId> tail_inputs = group.inputs;
    std::vector<TensorType> tail_types(types.begin(), types.end() - 1);
    std::vector<std::string> tail_exprs(exprs.begin(), exprs.end() - 1);
    tail_inputs.push_back(group.outputs.at(0));
    tail_types.push_back(g.node(group.outputs[0]).type);
    tail_exprs.emplace_back("v");
    const std::vector<NodeId> tail_outputs(group.outputs.begin() + 1, group.outputs.end());
    const codegen::FusedSegment s = fused_segment(g, *tail, tail_inputs, tail_outputs);
    const auto first = static_cast<uint32_t>(2 + group.inputs.size());
    for (size_t j = 0; j < tail_outputs.size(); ++j) {
      f.declarations += codegen::glsl::buffer(first + static_cast<uint32_t>(j),
                                              g.node(tail_outputs[j]).type.dtype,
                                              "tout" + std::to_string(j), false);
      f.tail_outputs.push_back(codegen::ArgRef::output(static_cast<int>(j + 1)));
    }
    f.declarations += "void mn_row_tail(uint e, float v) {\n" +
                      codegen::fused_statements(s, tail_types, tail_exprs, "e", "rt_");
    for (const auto& [out, step] : s.stores) {
      f.declarations +=
          "  tout" + std::to_string(out) + "_st(e, rt_" + std::to_string(step) + ");\n";
    }
    f.declarations += "}\n";
  }
  const Node& red = g.node(r);
  const std::vector<TensorType> in_types{g.node(red.inputs.front()).type};
  codegen::Lowering l =
      codegen::lower_reduce_fused(codegen::LowerContext{red, in_types, device}, &f);
  if (f.prologue) l.launches.front().name += "+prologue[" + op_list(g, pro.nodes) + "]";
  if (f.epilogue) l.launches.back().name += "+epilogue[" + op_list(g, epi.nodes) + "]";
  if (tail) l.launches.back().name += "+tail[" + op_list(g, tail->nodes) + "]";
  return l;
}

}  // namespace

std::string group_name(const Graph& g, const KernelGroup& group) {
  switch (group.kind) {
    case KernelGroup::Kind::single:
      return std::string(g.node(group.nodes.front()).op_name()) +
             (group.gemv.norm >= 0 ? "+prologue[rms_norm]" : "") +
             (group.rope.node >= 0 ? "+prologue[rope_positions]" : "") +
             (group.append.k_write >= 0 ? "+reads_new_slots" : "");
    case KernelGroup::Kind::matmul_epilogue:
      return std::string(g.node(group.anchor).op_name()) + "+epilogue[" +
             op_list(g, group.segments.front().nodes) + "]";
    case KernelGroup::Kind::reduction: {
      std::string s(g.node(group.anchor).op_name());
      if (!group.segments.at(0).nodes.empty()) {
        s += "+prologue[" + op_list(g, group.segments[0].nodes) + "]";
      }
      if (!group.segments.at(1).nodes.empty()) {
        s += "+epilogue[" + op_list(g, group.segments[1].nodes) + "]";
      }
      return s;
    }
    case KernelGroup::Kind::pointwise:
      break;
  }
  if (group.segments.size() == 1) return "fused_pointwise[" + op_list(g, group.nodes) + "]";
  bool updates = false;
  for (const auto& [target, value] : g.assignments()) {
    updates = updates ||
              std::find(group.outputs.begin(), group.outputs.end(), value) != group.outputs.end();
  }
  return std::string(updates ? "optimizer_update[" : "fused_pointwise[") +
         std::to_string(group.segments.size()) + " segments]";
}

namespace {

// A group whose result a permute alone read stores it in the permute's layout
// (schedule/permuted_stores.h): its output is the permute's value.
void store_permuted(const Graph& g, const KernelGroup& group, codegen::Lowering& l) {
  if (group.stored_permuted.empty()) return;
  codegen::add_permuted_store(l, unpermuted_shape(g, group), group.stored_permuted);
}

}  // namespace

codegen::Lowering lower_group(const Graph& g, const KernelGroup& group,
                              const codegen::DeviceTraits& device,
                              std::span<const int> in_place, bool check_indices) {
  if (group.kind == KernelGroup::Kind::matmul_epilogue) return lower_epilogue(g, group, device);
  if (group.kind == KernelGroup::Kind::reduction) {
    codegen::Lowering l = lower_reduction(g, group, device);
    store_permuted(g, group, l);
    return l;
  }
  if (group.kind == KernelGroup::Kind::pointwise) {
    codegen::FusedPointwise f;
    f.name = group_name(g, group);
    for (NodeId in : group.inputs) f.inputs.push_back(g.node(in).type);
    for (NodeId out : group.outputs) f.outputs.push_back(g.node(out).type);
    for (const KernelSegment& seg : group.segments) {
      f.segments.push_back(fused_segment(g, seg, group.inputs, group.outputs));
    }
    f.in_place.assign(in_place.begin(), in_place.end());
    return codegen::lower_fused_pointwise(f, device);
  }
  for (size_t j = 1; j < in_place.size(); ++j) {
    if (in_place[j] >= 0) throw Error("plan: only output 0 of a single kernel updates in place");
  }
  if (group.kind != KernelGroup::Kind::single && !in_place.empty() && in_place[0] >= 0) {
    throw Error("plan: kernel '" + group_name(g, group) + "' cannot update its input in place");
  }
  const bool single_in_place = !in_place.empty() && in_place[0] == 0;
  // Typed as it is stored: a narrowed store (schedule/narrowed_stores.h) writes its cast's dtype.
  const Node node = stored_node(g, group);
  const codegen::LowerFn* lower = codegen::find_lowering(node.op_name());
  if (!lower) throw Error("plan: op '" + std::string(node.op_name()) + "' has no GPU lowering");
  std::vector<TensorType> in_types;
  for (NodeId in : group.inputs) in_types.push_back(g.node(in).type);
  if (const std::optional<codegen::GemvExtras> x = gemv_extras(g, group)) {
    in_types.resize(node.inputs.size());  // gamma and a sibling are bound by the extras
    codegen::LowerContext ctx{node, in_types, device, false, check_indices};
    // A product taking its rows' norm may store itself permuted too (permuted_stores.h).
    Shape stored_shape;
    store_product_permuted(g, group, stored_shape, ctx);
    return codegen::lower_matmul_fused(ctx, nullptr, &*x);
  }
  std::optional<codegen::RopeLoad> rope, k_rope;
  if (group.rope.node >= 0) {
    rope = codegen::RopeLoad{g.node(group.rope.node).attrs.as<RopePositionsAttrs>(),
                             group.rope.operand, group.rope.positions_input};
  }
  std::optional<codegen::CacheAppendLoad> append;
  if (group.append.k_write >= 0) {
    const KernelGroup::CacheAppend& a = group.append;
    if (a.k_rope >= 0) {
      k_rope = codegen::RopeLoad{g.node(a.k_rope).attrs.as<RopePositionsAttrs>(), a.k_update,
                                 a.k_rope_positions};
    }
    append = codegen::CacheAppendLoad{a.k_update, a.v_update, a.positions,
                                      k_rope ? &*k_rope : nullptr};
  }
  std::optional<codegen::StackedRotation> stacked;
  if (const KernelGroup::StackedRotation& st = group.stacked_rotation; st.node >= 0) {
    const Node& u = g.node(st.node);
    stacked = codegen::StackedRotation{
        st.input, u.type.shape, st.load_perm.empty() ? nullptr : &st.load_perm,
        st.store_perm.empty() ? nullptr : &st.store_perm, g.node(group.outputs.at(1)).type.dtype};
  }
  codegen::LowerContext ctx{node,
                            in_types,
                            device,
                            single_in_place,
                            check_indices,
                            rope ? &*rope : nullptr,
                            append ? &*append : nullptr,
                            group.load_perm.empty() ? nullptr : &group.load_perm,
                            group.store_perm.empty() ? nullptr : &group.store_perm};
  ctx.stacked_rotation = stacked ? &*stacked : nullptr;
  if (group.saves_lse) ctx.saved_lse = g.node(group.outputs.at(1)).type.dtype;
  ctx.attention_partials = group.attention_partials;
  if (group.computes_grad_v) ctx.grad_v_output = g.node(group.outputs.at(1)).type.dtype;
  // A product stores itself permuted through its kernel's tile layouts (permuted_stores.h);
  // other kernels' stores are rewritten after lowering.
  const bool product_permuted = !group.stored_permuted.empty() && node.op_name() == "matmul";
  Shape stored_shape;
  if (product_permuted) store_product_permuted(g, group, stored_shape, ctx);
  codegen::Lowering l = (*lower)(ctx);
  // A second output: the cast the kernel stores beside its value (schedule/narrowed_stores.h).
  for (const auto& [own, twin] : twin_outputs(g, group)) {
    // Output 1 of a stacked rotation is stored through out1_st (codegen::StackedRotation).
    const codegen::KernelOutput of{own, own == 0 ? "out" : "out" + std::to_string(own)};
    codegen::add_twin_store(l, g.node(group.outputs[static_cast<size_t>(own)]).type.dtype,
                            g.node(group.outputs[static_cast<size_t>(twin)]).type.dtype, twin, of);
  }
  if (!product_permuted) store_permuted(g, group, l);
  if (const KernelGroup::PermutedTwin& t = group.permuted_twin; t.output >= 0) {
    codegen::add_permuted_twin_store(
        l, g.node(group.outputs[static_cast<size_t>(t.output)]).type.dtype,
        g.node(group.outputs.front()).type.shape, t.perm, t.output);
  }
  return l;
}

}  // namespace mn::schedule
