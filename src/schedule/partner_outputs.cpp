#include "schedule/partner_outputs.h"

#include <map>

namespace mn::schedule {
namespace {

// A kernel of its own for one node of `op` with one output.
bool lone(const Graph& g, const KernelGroup& k, std::string_view op) {
  return k.kind == KernelGroup::Kind::single && k.nodes.size() == 1 && k.outputs.size() == 1 &&
         without_extras(k) && g.node(k.nodes.front()).op_name() == op;
}

}  // namespace

void absorb_partners(const Graph& g, std::vector<KernelGroup>& groups, const PartnerRule& rule) {
  // Per value, the first group reading it.
  std::map<NodeId, size_t> first_reader;
  for (size_t i = 0; i < groups.size(); ++i) {
    for (NodeId in : groups[i].inputs) first_reader.try_emplace(in, i);
  }
  std::vector<char> dropped(groups.size(), 0);
  for (size_t i = 0; i < groups.size(); ++i) {
    KernelGroup& host = groups[i];
    if (dropped[i] || !lone(g, host, rule.host_op)) continue;
    const Node& h = g.node(host.nodes.front());
    for (size_t j = 0; j < groups.size(); ++j) {
      const KernelGroup& partner = groups[j];
      if (dropped[j] || j == i || !lone(g, partner, rule.partner_op) ||
          !partner.stored_permuted.empty() || !rule.computes(h, g.node(partner.nodes.front()))) {
        continue;
      }
      // The value is computed at the host's place: nothing before it may read it.
      const auto reader = first_reader.find(partner.outputs.front());
      if (reader != first_reader.end() && reader->second <= i) continue;
      host.nodes.push_back(partner.nodes.front());
      host.outputs.push_back(partner.outputs.front());
      host.*rule.flag = true;
      dropped[j] = 1;
      break;
    }
  }
  size_t k = 0;
  std::erase_if(groups, [&](const KernelGroup&) { return dropped[k++] != 0; });
}

}  // namespace mn::schedule
