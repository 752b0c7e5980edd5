#include "schedule/cache_append.h"

#include <map>
#include <optional>

#include "codegen/lower_attention.h"
#include "codegen/rope_load.h"
#include "ir/ops/cache.h"

namespace mn::schedule {

namespace {

// The single cache_write group computing `v` with one update slot per cache row, or nullptr.
const KernelGroup* one_slot_write(const Graph& g, const std::map<NodeId, const KernelGroup*>& single,
                                  NodeId v) {
  const auto it = single.find(v);
  if (it == single.end() || g.node(v).op_name() != "cache_write") return nullptr;
  const Node& w = g.node(v);
  return ops::cache_detail::cache_write_view(node_input_types(g, w)).l == 1 ? it->second : nullptr;
}

std::optional<codegen::RopeLoad> rope_of(const Graph& g, NodeId rope, int operand, int positions) {
  if (rope < 0) return std::nullopt;
  return codegen::RopeLoad{g.node(rope).attrs.as<RopePositionsAttrs>(), operand, positions};
}

// The attention group reading past the writes kw and kv, if its lowering can.
std::optional<KernelGroup> reading_past(const Graph& g, const KernelGroup& attention,
                                        const KernelGroup& kw, const KernelGroup& vw,
                                        const codegen::DeviceTraits& device) {
  // One positions tensor for both writes; values are stored as they are.
  if (kw.inputs[2] != vw.inputs[2] || vw.rope.node >= 0) return std::nullopt;
  KernelGroup c = attention;
  c.inputs[1] = kw.inputs[0];
  c.inputs[2] = vw.inputs[0];
  auto add = [&](NodeId v) {
    c.inputs.push_back(v);
    return static_cast<int>(c.inputs.size() - 1);
  };
  c.append.k_write = kw.nodes.front();
  c.append.v_write = vw.nodes.front();
  c.append.k_update = add(kw.inputs[1]);
  c.append.v_update = add(vw.inputs[1]);
  c.append.positions = add(kw.inputs[2]);
  if (kw.rope.node >= 0) {
    c.append.k_rope = kw.rope.node;
    c.append.k_rope_positions = add(kw.inputs[static_cast<size_t>(kw.rope.positions_input)]);
  }
  std::vector<TensorType> types;
  for (NodeId in : c.inputs) types.push_back(g.node(in).type);
  const auto q_rope = rope_of(g, c.rope.node, c.rope.operand, c.rope.positions_input);
  const auto k_rope = rope_of(g, c.append.k_rope, c.append.k_update, c.append.k_rope_positions);
  const codegen::CacheAppendLoad load{c.append.k_update, c.append.v_update, c.append.positions,
                                      k_rope ? &*k_rope : nullptr};
  const codegen::LowerContext ctx{g.node(c.nodes.front()), types, device, false, true,
                                  q_rope ? &*q_rope : nullptr, &load};
  if (!codegen::attention_lowering::takes_cache_append(ctx)) return std::nullopt;
  return c;
}

}  // namespace

void read_past_cache_writes(const Graph& g, std::vector<KernelGroup>& groups,
                            const codegen::DeviceTraits& device) {
  std::map<NodeId, const KernelGroup*> single;
  for (const KernelGroup& k : groups) {
    if (k.kind == KernelGroup::Kind::single) single[k.nodes.front()] = &k;
  }
  std::map<size_t, KernelGroup> fused;
  for (size_t i = 0; i < groups.size(); ++i) {
    const KernelGroup& a = groups[i];
    if (a.kind != KernelGroup::Kind::single || a.append.k_write >= 0) continue;
    if (g.node(a.nodes.front()).op_name() != "cached_attention") continue;
    const KernelGroup* kw = one_slot_write(g, single, a.inputs[1]);
    const KernelGroup* vw = one_slot_write(g, single, a.inputs[2]);
    if (!kw || !vw || kw == vw) continue;
    if (std::optional<KernelGroup> c = reading_past(g, a, *kw, *vw, device)) {
      fused.emplace(i, std::move(*c));
    }
  }
  for (auto& [i, c] : fused) groups[i] = std::move(c);
}

}  // namespace mn::schedule
