#pragma once
// A kernel that computes another op's value on the way to its own takes that op's node as its
// second output: a forward attention's log-sum-exp (saved_lse.h), dK's kernel's dV (grad_kv.h).
// The rule says which pairs of single-node groups qualify; the partner's node and value join the
// host group as output 1, and the partner's group is dropped. Groups ordered before the host that
// read the value (and those before the host reading what they write) move to just after it,
// unless the host needs one of them: then the pair stays apart.
#include <functional>
#include <string_view>
#include <vector>

#include <meganeura/graph.h>

#include "schedule/fusion.h"

namespace mn::schedule {

struct PartnerRule {
  std::string_view host_op, partner_op;
  // The host's kernel computes the partner's value (both groups single-node, single-output).
  std::function<bool(const Node& host, const Node& partner)> computes;
  bool KernelGroup::*flag = nullptr;  // set on the host that takes a partner
};

void absorb_partners(const Graph& g, std::vector<KernelGroup>& groups, const PartnerRule& rule);

}  // namespace mn::schedule
