#include "schedule/permuted_stores.h"

#include <map>
#include <set>

#include "codegen/fused_reduce.h"
#include "codegen/lower_matmul_tensor.h"
#include "codegen/store_rewrites.h"
#include "codegen/widened_operands.h"
#include "ir/op_def.h"
#include "ir/ops/shape.h"
#include "schedule/narrowed_stores.h"

namespace mn::schedule {
namespace {

// A single group whose kernel stores its one result through the generic store alone.
bool stores_through_out_st(const Graph& g, const KernelGroup& k) {
  if (k.outputs.size() != 1 || !k.stored_permuted.empty() || !k.store_perm.empty()) return false;
  if (k.kind == KernelGroup::Kind::reduction) return k.segments.size() == 2;
  if (k.kind != KernelGroup::Kind::single || k.nodes.size() != 1 || !without_extras(k)) {
    return false;
  }
  const Node& node = g.node(k.nodes.front());
  if (k.inputs.size() == 1 &&
      codegen::reduce_accepts_fusion(node, std::vector{g.node(k.inputs.front()).type})) {
    return true;  // a float reduction of its own: the same kernels, without prologue or epilogue
  }
  return codegen::stores_only_through_out_st(node) && !codegen::converting_copy(node);
}

// Lone permutes by the value they read: as it is, or through a narrowing cast they round as
// they store (schedule/widened_loads.h), which the folding kernel's store then rounds so too.
std::map<NodeId, size_t> lone_permutes(const Graph& g, const std::vector<KernelGroup>& groups) {
  std::map<NodeId, size_t> permute_of;
  for (size_t i = 0; i < groups.size(); ++i) {
    const KernelGroup& k = groups[i];
    if (k.kind != KernelGroup::Kind::single || k.nodes.size() != 1 || k.outputs.size() != 1)
      continue;
    const Node& p = g.node(k.nodes.front());
    if (p.op_name() != "permute") continue;
    const NodeId read = k.inputs.at(0);
    const Node& operand = g.node(p.inputs.front());
    const bool narrowed = operand.op_name() == "cast" && operand.inputs.front() == read &&
                          g.node(read).type.dtype == DType::f32 &&
                          is_half_float(operand.type.dtype);
    if (read == p.inputs.front() || narrowed) permute_of.emplace(read, i);
  }
  return permute_of;
}

// A product with nothing beside it but, maybe, an epilogue storing one value, whose kernel may
// store it permuted.
bool lone_product(const Graph& g, const KernelGroup& k) {
  const bool single = k.kind == KernelGroup::Kind::single && k.nodes.size() == 1;
  const bool epilogue = k.kind == KernelGroup::Kind::matmul_epilogue;
  // A norm of its rows (gemv_fusion.h) goes with the tiled kernel's element-wise stores.
  return (single || epilogue) && k.outputs.size() == 1 && k.stored_permuted.empty() &&
         without_extras_but_a_norm(k) && g.node(k.nodes.front()).op_name() == "matmul";
}

// Whether the product's kernel stores it reshaped to `shape` and permuted by `perm`: any kernel
// of a lone product; with an epilogue, the kernels that store element by element (not the
// tensor-addressed tiles, whose strided stores take no epilogue).
bool product_stores_permuted(const Graph& g, const KernelGroup& k, const Shape& shape,
                             const std::vector<int64_t>& perm,
                             const codegen::DeviceTraits& device) {
  // The product's operands as its kernel reads them (a widened 16-bit tensor as it is stored):
  // the group's first inputs.
  const size_t operands = g.node(k.nodes.front()).inputs.size();
  std::vector<TensorType> types;
  for (size_t i = 0; i < operands && i < k.inputs.size(); ++i) {
    types.push_back(g.node(k.inputs[i]).type);
  }
  codegen::LowerContext ctx{stored_node(g, k), types, device};
  ctx.stored_shape = &shape;
  ctx.stored_perm = &perm;
  if (k.gemv.norm >= 0) {
    codegen::GemvExtras x;
    x.norm = true;
    if (!codegen::tiled_takes_extras(ctx, x)) return false;  // the GEMV's stores stay whole
  }
  if (k.kind == KernelGroup::Kind::matmul_epilogue) {
    const codegen::MatmulGeometry geo = codegen::geometry(ctx);
    if (codegen::tensor_matmul_rejection(ctx, geo, numel(geo.out_batch)).empty()) return false;
  }
  return codegen::matmul_stores_permuted(ctx);
}

}  // namespace

void fold_permutes_into_stores(const Graph& g, std::vector<KernelGroup>& groups,
                               const codegen::DeviceTraits& device) {
  std::map<NodeId, int> readers = group_readers(groups);
  const std::set<NodeId> sinks = kept_values(g);
  const std::map<NodeId, size_t> permute_of = lone_permutes(g, groups);
  // Reshapes (views of their operand, no launch) by the value they read.
  std::map<NodeId, size_t> reshape_of;
  for (size_t i = 0; i < groups.size(); ++i) {
    const KernelGroup& k = groups[i];
    if (k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 &&
        g.node(k.nodes.front()).op_name() == "reshape" && k.inputs.size() == 1) {
      reshape_of.emplace(k.inputs.front(), i);
    }
  }
  auto only_reader = [&](NodeId v) { return readers[v] == 1 && !sinks.count(v); };
  std::vector<char> dropped(groups.size(), 0);
  for (KernelGroup& k : groups) {
    const bool product = lone_product(g, k);
    if (!product && !stores_through_out_st(g, k)) continue;
    // The result, or a reshape of it, read by a lone permute alone.
    NodeId out = k.outputs.front();
    if (!only_reader(out)) continue;
    std::vector<size_t> folded;
    if (const auto r = reshape_of.find(out); r != reshape_of.end() && !dropped[r->second]) {
      folded.push_back(r->second);
      out = groups[r->second].nodes.front();
      if (!only_reader(out)) continue;
    }
    const auto it = permute_of.find(out);
    if (it == permute_of.end() || dropped[it->second]) continue;
    folded.push_back(it->second);
    const NodeId permute = groups[it->second].nodes.front();
    const TensorType in = g.node(g.node(permute).inputs.front()).type;
    std::vector<int64_t> perm =
        ops::shape_detail::resolve_perm("permute", std::span<const TensorType>(&in, 1),
                                        g.node(permute).attrs.as<PermuteAttrs>().perm);
    if (perm.size() != in.shape.size()) continue;
    if (product && !product_stores_permuted(g, k, in.shape, perm, device)) continue;
    for (size_t f : folded) {
      k.nodes.push_back(groups[f].nodes.front());
      dropped[f] = 1;
    }
    k.outputs = {permute};
    k.stored_permuted = std::move(perm);
  }
  size_t i = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[i++] != 0; });
}

void fold_permutes_into_twin_stores(const Graph& g, std::vector<KernelGroup>& groups) {
  std::map<NodeId, int> readers = group_readers(groups);
  const std::map<NodeId, size_t> permute_of = lone_permutes(g, groups);
  std::vector<char> dropped(groups.size(), 0);
  for (KernelGroup& k : groups) {
    if (k.kind != KernelGroup::Kind::single || k.outputs.empty() || !k.stored_permuted.empty() ||
        k.permuted_twin.output >= 0 || !k.store_perm.empty() || !without_extras(k) ||
        k.stacked_rotation.node >= 0 || !twin_outputs(g, k).empty()) {
      continue;  // twins of casts wrap the same store
    }
    const Node& node = g.node(k.nodes.front());
    if (!codegen::stores_only_through_out_st(node) ||
        (node.op && node.op->updates_input0_in_place)) {
      continue;
    }
    const NodeId out = k.outputs.front();
    if (readers[out] < 2) continue;  // a lone permute reader: fold_permutes_into_stores' case
    const auto it = permute_of.find(out);
    if (it == permute_of.end() || dropped[it->second]) continue;
    const NodeId permute = groups[it->second].nodes.front();
    const TensorType& in = g.node(out).type;
    std::vector<int64_t> perm =
        ops::shape_detail::resolve_perm("permute", std::span<const TensorType>(&in, 1),
                                        g.node(permute).attrs.as<PermuteAttrs>().perm);
    if (perm.size() != in.shape.size()) continue;
    k.nodes.push_back(permute);
    k.outputs.push_back(permute);
    k.permuted_twin = {static_cast<int>(k.outputs.size() - 1), std::move(perm)};
    dropped[it->second] = 1;
  }
  size_t i = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[i++] != 0; });
}

}  // namespace mn::schedule
