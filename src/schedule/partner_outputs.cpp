#include "schedule/partner_outputs.h"

#include <algorithm>
#include <optional>
#include <set>

namespace mn::schedule {
namespace {

// A kernel of its own for one node of `op` with one output.
bool lone(const Graph& g, const KernelGroup& k, std::string_view op) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k) && g.node(k.nodes.front()).op_name() == op;
}

// Groups before `host` that read `value`, and those after them (before the host) that read
// what they write: the groups that must run after the host once it computes the value. Empty
// when none reads it early; nullopt when the host itself needs one of them.
std::optional<std::vector<size_t>> readers_to_move(const std::vector<KernelGroup>& groups,
                                                   size_t host, NodeId value) {
  std::vector<size_t> moving;
  std::set<NodeId> written;
  auto reads_any = [](const KernelGroup& k, const std::set<NodeId>& values) {
    for (NodeId in : k.inputs) {
      if (values.count(in)) return true;
    }
    return false;
  };
  for (size_t r = 0; r < host; ++r) {
    const KernelGroup& k = groups[r];
    const bool early = std::find(k.inputs.begin(), k.inputs.end(), value) != k.inputs.end();
    if (!early && !reads_any(k, written)) continue;
    moving.push_back(r);
    written.insert(k.outputs.begin(), k.outputs.end());
  }
  written.insert(value);
  if (reads_any(groups[host], written)) return std::nullopt;
  return moving;
}

}  // namespace

void absorb_partners(const Graph& g, std::vector<KernelGroup>& groups, const PartnerRule& rule) {
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!lone(g, groups[i], rule.host_op)) continue;
    const Node& h = g.node(groups[i].nodes.front());
    for (size_t j = 0; j < groups.size(); ++j) {
      const KernelGroup& partner = groups[j];
      if (j == i || !lone(g, partner, rule.partner_op) || !partner.stored_permuted.empty() ||
          !rule.computes(h, g.node(partner.nodes.front()))) {
        continue;
      }
      // The value is computed at the host's place: its readers before the host (which, in a
      // step whose backward starts from a given gradient, need not wait for the forward) move
      // to after it, unless the host needs what they compute.
      const std::optional<std::vector<size_t>> moving =
          readers_to_move(groups, i, partner.outputs.front());
      if (!moving || std::find(moving->begin(), moving->end(), j) != moving->end()) continue;
      KernelGroup& host = groups[i];
      host.nodes.push_back(partner.nodes.front());
      host.outputs.push_back(partner.outputs.front());
      host.*rule.flag = true;
      std::vector<char> moved(groups.size(), 0);
      for (size_t m : *moving) moved[m] = 1;
      std::vector<KernelGroup> order;
      order.reserve(groups.size() - 1);
      size_t host_at = 0;
      for (size_t k = 0; k < groups.size(); ++k) {
        if (k == j || moved[k]) continue;
        order.push_back(std::move(groups[k]));
        if (k != i) continue;
        host_at = order.size() - 1;
        for (size_t m : *moving) order.push_back(std::move(groups[m]));
      }
      groups = std::move(order);
      i = host_at;
      break;
    }
  }
}

}  // namespace mn::schedule
