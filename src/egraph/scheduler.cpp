#include "egraph/scheduler.h"

#include <algorithm>

namespace mn::egraph {

SearchOutcome SimpleScheduler::search(size_t, size_t, const Rewrite& rule, const EGraph& egraph,
                                      SearchMatches& out) {
  rule.search(egraph, out);
  return SearchOutcome::searched;
}

BackoffScheduler& BackoffScheduler::rule_limits(size_t index, size_t match_limit,
                                                size_t ban_length) {
  if (index >= stats_.size()) stats_.resize(index + 1);
  stats_[index].match_limit = match_limit;
  stats_[index].ban_length = ban_length;
  stats_[index].custom = true;
  return *this;
}

void BackoffScheduler::start(size_t num_rules) {
  if (stats_.size() < num_rules) stats_.resize(num_rules);
  for (RuleState& s : stats_) {
    if (!s.custom) {
      s.match_limit = match_limit_;
      s.ban_length = ban_length_;
    }
    s.times_banned = 0;
    s.banned_until = 0;
  }
}

SearchOutcome BackoffScheduler::search(size_t iteration, size_t index, const Rewrite& rule,
                                       const EGraph& egraph, SearchMatches& out) {
  RuleState& s = stats_[index];
  out.reset(rule.searcher().num_vars(), rule.searcher().num_attr_vars());
  if (iteration < s.banned_until) return SearchOutcome::skipped;
  // Shifts saturate: after many bans a rule is simply unlimited rather than overflowing.
  size_t shift = std::min<size_t>(s.times_banned, 40);
  size_t threshold = s.match_limit << shift;
  // Stop searching one past the threshold: that is enough to know the rule must be banned.
  rule.search(egraph, out, threshold + 1);
  if (out.size() > threshold) {
    size_t length = s.ban_length << shift;
    ++s.times_banned;
    s.banned_until = iteration + length;
    out.clear();
    return SearchOutcome::banned_now;
  }
  return SearchOutcome::searched;
}

bool BackoffScheduler::can_stop(size_t iteration) {
  size_t min_ban = 0;
  bool any = false;
  for (const RuleState& s : stats_) {
    if (s.banned_until > iteration) {
      min_ban = any ? std::min(min_ban, s.banned_until) : s.banned_until;
      any = true;
    }
  }
  if (!any) return true;
  // Nothing else can change the e-graph: bring the soonest-ending bans forward to now.
  size_t delta = min_ban - iteration;
  for (RuleState& s : stats_)
    if (s.banned_until > iteration) s.banned_until -= delta;
  return false;
}

}  // namespace mn::egraph
