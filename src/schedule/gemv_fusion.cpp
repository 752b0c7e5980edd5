#include "schedule/gemv_fusion.h"

#include <algorithm>
#include <map>
#include <set>

#include "codegen/lower_matmul.h"
#include "codegen/lower_matmul_tensor.h"
#include "ir/ops/nn.h"
#include "schedule/widened_loads.h"

namespace mn::schedule {

namespace {

// The rms_norm over the last axis of one row, or nullptr.
const Node* row_norm(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op_name() != "rms_norm" || n.type.dtype != DType::f32) return nullptr;
  const auto& a = n.attrs.as<RmsNormAttrs>();
  if (a.normalized_dims != 1 || n.type.numel() != n.type.shape.back()) return nullptr;
  return &n;
}

// The rms_norm over the last axis (of any number of rows), or nullptr.
const Node* rows_norm(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  if (n.op_name() != "rms_norm" || n.type.dtype != DType::f32) return nullptr;
  return n.attrs.as<RmsNormAttrs>().normalized_dims == 1 ? &n : nullptr;
}

// The matmul of a single or epilogue group, or -1.
NodeId product_of(const Graph& g, const KernelGroup& group) {
  NodeId m = -1;
  if (group.kind == KernelGroup::Kind::single) m = group.nodes.front();
  if (group.kind == KernelGroup::Kind::matmul_epilogue) m = group.anchor;
  return m >= 0 && g.node(m).op_name() == "matmul" ? m : -1;
}

bool epilogue_reads(const Graph& g, const KernelGroup& group, NodeId v) {
  if (group.kind != KernelGroup::Kind::matmul_epilogue) return false;
  for (NodeId s : group.segments.front().nodes) {
    const auto& in = g.node(s).inputs;
    if (std::find(in.begin(), in.end(), v) != in.end()) return true;
  }
  return false;
}

// The kernel of the group's product takes codegen::GemvExtras.
bool takes_extras(const Graph& g, const KernelGroup& group, NodeId m,
                  const codegen::DeviceTraits& device) {
  const Node& mm = g.node(m);
  std::vector<TensorType> types;
  for (size_t i = 0; i < mm.inputs.size(); ++i) types.push_back(g.node(group.inputs[i]).type);
  return codegen::gemv_takes_extras(codegen::LowerContext{mm, types, device});
}

// Whether the group's product reads norm `v` as its A and can read the norm's input instead:
// the epilogue would read the normalized value under input 0's binding.
bool reads_norm_as_a(const Graph& g, const KernelGroup& group, NodeId v) {
  const NodeId m = product_of(g, group);
  return m >= 0 && group.gemv.norm < 0 && group.inputs[0] == v && group.inputs[1] != v &&
         !epilogue_reads(g, group, v);
}

void take_norm(const Graph& g, KernelGroup& group, const codegen::DeviceTraits& device) {
  const NodeId m = product_of(g, group);
  if (m < 0 || group.gemv.norm >= 0) return;
  const NodeId v = group.inputs[0];
  const Node* norm = row_norm(g, v);
  if (!norm || !reads_norm_as_a(g, group, v)) return;
  if (!takes_extras(g, group, m, device)) return;
  group.gemv.norm = v;
  group.inputs[0] = norm->inputs[0];
  if (norm->attrs.as<RmsNormAttrs>().has_gamma) {
    // gamma is loaded through a dtype-generic loader: a stored 16-bit gamma is read as it is.
    const NodeId gamma = norm->inputs[1], narrow = widened_source(g, gamma);
    group.gemv.gamma_input = static_cast<int>(group.inputs.size());
    group.inputs.push_back(narrow >= 0 && device.storage_16bit ? narrow : gamma);
  }
}

// The scalar tiled kernel of the group's product takes norm `v` of A's rows
// (codegen::tiled_takes_extras), typed as the group will be lowered.
bool tiled_takes_norm(const Graph& g, const KernelGroup& group, NodeId v,
                      const codegen::DeviceTraits& device) {
  const Node& mm = g.node(product_of(g, group));
  Node stored = mm;
  stored.type.dtype = g.node(group.outputs.front()).type.dtype;
  std::vector<TensorType> types;
  for (size_t i = 0; i < mm.inputs.size(); ++i) types.push_back(g.node(group.inputs[i]).type);
  codegen::GemvExtras x;
  x.norm = true;
  x.eps = g.node(v).attrs.as<RmsNormAttrs>().eps;
  return codegen::tiled_takes_extras(codegen::LowerContext{stored, types, device}, x);
}

// Norms of many rows whose every reader is a product on the tiled kernel reading it as its A:
// each product takes the norm (its kernel finds the rows' scale itself) and the norm's kernel
// and barrier go. A norm read by anything else stays whole for all of its readers: a product
// taking it would pass over its rows again for nothing.
void take_norms_of_rows(const Graph& g, std::vector<KernelGroup>& groups,
                        const codegen::DeviceTraits& device) {
  std::map<NodeId, std::vector<size_t>> readers;
  for (size_t i = 0; i < groups.size(); ++i) {
    std::set<NodeId> seen;
    for (NodeId in : groups[i].inputs) {
      if (rows_norm(g, in) && seen.insert(in).second) readers[in].push_back(i);
    }
  }
  const std::set<NodeId> sinks = kept_values(g);
  for (const auto& [norm_id, readers_of] : readers) {
    const NodeId v = norm_id;  // named: lambdas capture no structured bindings before C++20's
    const std::vector<size_t>& of = readers_of;
    if (sinks.count(v) || row_norm(g, v)) continue;  // one row: the GEMV's (take_norm)
    const bool all = std::all_of(of.begin(), of.end(), [&](size_t i) {
      return reads_norm_as_a(g, groups[i], v) && tiled_takes_norm(g, groups[i], v, device);
    });
    if (!all) continue;
    const Node& norm = g.node(v);
    for (size_t i : of) {
      KernelGroup& group = groups[i];
      group.gemv.norm = v;
      group.inputs[0] = norm.inputs[0];
      if (norm.attrs.as<RmsNormAttrs>().has_gamma) {
        // As take_norm: a stored 16-bit gamma is read as it is.
        const NodeId gamma = norm.inputs[1], narrow = widened_source(g, gamma);
        group.gemv.gamma_input = static_cast<int>(group.inputs.size());
        group.inputs.push_back(narrow >= 0 && device.storage_16bit ? narrow : gamma);
      }
    }
  }
}

// Epilogue group `group` takes the single product `other` as its sibling when both read the
// same vector (through the same norm) with the same matrix shape and layout.
bool take_sibling(const Graph& g, KernelGroup& group, const KernelGroup& other) {
  const NodeId m = product_of(g, group), u = other.nodes.front();
  const Node &mm = g.node(m), &um = g.node(u);
  if (group.kind != KernelGroup::Kind::matmul_epilogue || group.gemv.sibling >= 0) return false;
  if (other.kind != KernelGroup::Kind::single || um.op_name() != "matmul") return false;
  if (other.inputs[0] != group.inputs[0] || other.gemv.norm != group.gemv.norm) return false;
  if (um.attrs != mm.attrs || um.type != mm.type) return false;
  const TensorType &w = g.node(group.inputs[1]).type, &uw = g.node(other.inputs[1]).type;
  if (w.shape != uw.shape || w.dtype != uw.dtype) return false;
  group.gemv.sibling = u;
  group.gemv.sibling_input = static_cast<int>(group.inputs.size());
  group.inputs.push_back(other.inputs[1]);
  return true;
}

// The sibling extras of the epilogue group's product with the single product `other`, and the
// product's context typed as lower_epilogue will lower it (it stores the epilogue's first value).
struct SiblingTrial {
  Node stored;
  std::vector<TensorType> types;
  codegen::GemvExtras x;
  codegen::LowerContext context(const codegen::DeviceTraits& device) const {
    return codegen::LowerContext{stored, types, device};
  }
};

SiblingTrial sibling_trial(const Graph& g, const KernelGroup& group, NodeId m,
                           const KernelGroup& other) {
  const Node& mm = g.node(m);
  SiblingTrial t{mm, {}, {}};
  t.stored.type.dtype = g.node(group.outputs.front()).type.dtype;
  for (size_t i = 0; i < mm.inputs.size(); ++i) t.types.push_back(g.node(group.inputs[i]).type);
  t.x.norm = group.gemv.norm >= 0;
  t.x.sibling_input = static_cast<int>(group.inputs.size());
  t.x.sibling_dtype = g.node(other.inputs[1]).type.dtype;
  t.x.sibling_product_dtype = g.node(other.nodes.front()).type.dtype;
  return t;
}

// The tensor-addressed kernel (codegen::tensor_takes_extras: no norm) or the scalar tiled one
// (codegen::tiled_takes_extras, with the norm of their rows both took, if any) of the epilogue
// group's product takes `other` as its sibling.
bool kernel_takes_sibling(const Graph& g, const KernelGroup& group, NodeId m,
                          const KernelGroup& other, const codegen::DeviceTraits& device) {
  const SiblingTrial t = sibling_trial(g, group, m, other);
  if (codegen::tiled_takes_extras(t.context(device), t.x)) return true;
  if (t.x.norm) return false;
  return codegen::tensor_takes_extras(t.context(device), t.x);
}

void take_siblings(const Graph& g, std::vector<KernelGroup>& groups,
                   const codegen::DeviceTraits& device) {
  std::map<NodeId, size_t> single_product;  // matmul node -> its single group
  for (size_t i = 0; i < groups.size(); ++i) {
    const KernelGroup& k = groups[i];
    if (k.kind == KernelGroup::Kind::single && product_of(g, k) >= 0) {
      single_product[k.nodes.front()] = i;
    }
  }
  std::map<NodeId, int> readers = group_readers(groups);  // groups reading each node
  const std::set<NodeId> sinks = kept_values(g);
  for (KernelGroup& group : groups) {
    const NodeId m = product_of(g, group);
    if (m < 0 || group.kind != KernelGroup::Kind::matmul_epilogue) continue;
    const bool gemv = takes_extras(g, group, m, device);
    for (size_t i = g.node(m).inputs.size(); i < group.inputs.size(); ++i) {
      const NodeId u = group.inputs[i];
      const auto it = single_product.find(u);
      if (it == single_product.end() || readers[u] != 1 || sinks.count(u)) continue;
      const KernelGroup& other = groups[it->second];
      if (!gemv && !kernel_takes_sibling(g, group, m, other, device)) continue;
      if (take_sibling(g, group, other)) break;
    }
  }
}

// Single products of one vector (through one norm) with matrices of one K and layout, each
// stored: the later ones join the first as stacked products (one launch, the vector and its
// norm read once per output row as before). A later product's matrix must exist by then.
void stack_products(const Graph& g, std::vector<KernelGroup>& groups,
                    const codegen::DeviceTraits& device) {
  const std::map<NodeId, int> producer = group_producers(groups);
  auto stackable = [&](const KernelGroup& k) {
    const NodeId m = product_of(g, k);
    return k.kind == KernelGroup::Kind::single && m >= 0 && k.gemv.sibling < 0 &&
           k.gemv.stacked.empty() && k.outputs.size() == 1 && takes_extras(g, k, m, device);
  };
  auto gamma_of = [](const KernelGroup& k) {
    return k.gemv.gamma_input >= 0 ? k.inputs[static_cast<size_t>(k.gemv.gamma_input)] : -1;
  };
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& first = groups[i];
    if (dropped[i] || !stackable(first)) continue;
    const Node& mm = g.node(first.nodes.front());
    const TensorType& w = g.node(first.inputs[1]).type;
    for (size_t j = i + 1; j < groups.size(); ++j) {
      const KernelGroup& other = groups[j];
      if (dropped[j] || !stackable(other) || other.inputs[0] != first.inputs[0] ||
          other.gemv.norm != first.gemv.norm || gamma_of(other) != gamma_of(first)) {
        continue;
      }
      const Node& um = g.node(other.nodes.front());
      const TensorType& uw = g.node(other.inputs[1]).type;
      if (um.attrs != mm.attrs || uw.rank() != w.rank() || uw.shape.back() != w.shape.back())
        continue;
      const auto made = producer.find(other.inputs[1]);
      if (made != producer.end() && made->second >= static_cast<int>(i)) continue;
      const size_t bindings =
          3 + (first.gemv.gamma_input >= 0) + 2 * (first.gemv.stacked.size() + 1);
      if (bindings > device.max_storage_buffers) break;
      first.gemv.stacked.push_back(other.nodes.front());
      first.gemv.stacked_input.push_back(static_cast<int>(first.inputs.size()));
      first.inputs.push_back(other.inputs[1]);
      first.nodes.push_back(other.nodes.front());
      first.outputs.push_back(other.outputs.front());
      dropped[j] = 1;
    }
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

// `group`'s epilogue when it is exactly product `m` + a residual (either order), the residual an
// f32 tensor of the product's shape: the add and the residual; -1 and -1 otherwise.
struct ResidualAdd {
  NodeId add = -1, residual = -1;
};
ResidualAdd residual_add(const Graph& g, const KernelGroup& group, NodeId m) {
  if (group.kind != KernelGroup::Kind::matmul_epilogue) return {};
  const std::vector<NodeId>& epi = group.segments.front().nodes;
  if (epi.size() != 1 || group.outputs.size() != 1 || group.outputs.front() != epi.front()) {
    return {};
  }
  const Node& add = g.node(epi.front());
  if (add.op_name() != "add" || add.inputs.size() != 2 || add.type != g.node(m).type) return {};
  const auto& in = add.inputs;
  if ((in[0] == m) == (in[1] == m)) return {};  // m exactly once
  const NodeId residual = in[0] == m ? in[1] : in[0];
  const TensorType& r = g.node(residual).type;
  if (r.dtype != DType::f32 || r.shape != add.type.shape) return {};
  return {epi.front(), residual};
}

// A GEMV whose one stored value only a second GEMV reads, as its vector (maybe plus a
// residual): the second joins the first's kernel (codegen::GemvExtras::chain), whose
// workgroups each multiply their outputs by their columns of the second's matrix, the last one
// adding the partials. The second's operands must exist when the first launches.
void chain_products(const Graph& g, std::vector<KernelGroup>& groups,
                    const codegen::DeviceTraits& device) {
  if (!device.gemv_chain) return;  // off by default (MN_GEMV_CHAIN=1)
  const std::map<NodeId, int> producer = group_producers(groups);
  const std::map<NodeId, int> readers = group_readers(groups);
  const std::set<NodeId> sinks = kept_values(g);
  std::map<NodeId, size_t> reader_of;  // a product's vector -> its single or epilogue group
  for (size_t i = 0; i < groups.size(); ++i) {
    const NodeId m = product_of(g, groups[i]);
    if (m >= 0) reader_of.emplace(groups[i].inputs[0], i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& first = groups[i];
    const NodeId m = product_of(g, first);
    if (dropped[i] || m < 0 || first.outputs.size() != 1 || !first.gemv.stacked.empty() ||
        first.gemv.then >= 0 || !takes_extras(g, first, m, device)) {
      continue;
    }
    const NodeId h = first.outputs.front();
    const TensorType& ht = g.node(h).type;
    const auto it = reader_of.find(h);
    if (ht.dtype != DType::f32 || sinks.count(h) || readers.at(h) != 1 || it == reader_of.end() ||
        it->second <= i || dropped[it->second]) {
      continue;
    }
    KernelGroup& second = groups[it->second];
    const NodeId down = product_of(g, second);
    const Node& dm = g.node(down);
    if (second.gemv.norm >= 0 || second.gemv.sibling >= 0 || !second.gemv.stacked.empty() ||
        dm.inputs[0] != h || dm.type.dtype != DType::f32 ||
        !takes_extras(g, second, down, device)) {
      continue;
    }
    const auto [add, residual] = residual_add(g, second, down);
    if (second.kind != KernelGroup::Kind::single && add < 0) continue;
    const NodeId matrix = second.inputs[1];
    const bool ready = std::all_of(second.inputs.begin(), second.inputs.end(), [&](NodeId v) {
      const auto made = producer.find(v);
      return v == h || made == producer.end() || made->second < static_cast<int>(i);
    });
    if (!ready || codegen::gemv_chain_threads(device, ht.numel(), dm.type.numel()) == 0) continue;
    KernelGroup::Gemv& v = first.gemv;
    v.then = down;
    v.then_add = add;
    v.then_input = static_cast<int>(first.inputs.size());
    first.inputs.push_back(matrix);
    if (residual >= 0) {
      v.then_residual = static_cast<int>(first.inputs.size());
      first.inputs.push_back(residual);
    }
    first.nodes.insert(first.nodes.end(), second.nodes.begin(), second.nodes.end());
    first.outputs.push_back(second.outputs.front());
    dropped[it->second] = 1;
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

}  // namespace

void fuse_gemv_neighbours(const Graph& g, std::vector<KernelGroup>& groups,
                          const codegen::DeviceTraits& device) {
  for (KernelGroup& group : groups) take_norm(g, group, device);
  take_norms_of_rows(g, groups, device);
  drop_unread_groups(g, groups, [&](NodeId v) { return rows_norm(g, v) != nullptr; });
  take_siblings(g, groups, device);
  drop_unread_groups(g, groups, [&](NodeId v) { return g.node(v).op_name() == "matmul"; });
  stack_products(g, groups, device);
  chain_products(g, groups, device);
}

}  // namespace mn::schedule
