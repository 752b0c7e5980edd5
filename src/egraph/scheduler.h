#pragma once
// Rule scheduling. The runner asks the scheduler to search each rule every iteration; the
// scheduler may skip a rule or cap its matches. BackoffScheduler is egg's: a rule whose match
// count exceeds its limit is banned for some iterations, and each ban doubles both the limit
// and the next ban's length, so rules like associativity cannot flood the e-graph.
#include <cstddef>
#include <vector>

#include "egraph/rewrite.h"

namespace mn::egraph {

// What happened to a rule in one iteration's search.
enum class SearchOutcome : uint8_t {
  searched,    // matches (possibly none) are to be applied
  banned_now,  // too many matches: banned from this iteration on, nothing applied
  skipped,     // still banned from an earlier iteration
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Called once per run with the number of rules.
  virtual void start(size_t num_rules) {}
  // Searches rule `index` into `out` (or leaves it empty).
  virtual SearchOutcome search(size_t iteration, size_t index, const Rewrite& rule,
                               const EGraph& egraph, SearchMatches& out) = 0;
  // The e-graph did not change this iteration; may the run stop? A scheduler holding banned
  // rules says no and lets them run again.
  virtual bool can_stop(size_t iteration) { return true; }
};

// Every rule, every iteration, every match.
class SimpleScheduler : public Scheduler {
 public:
  SearchOutcome search(size_t iteration, size_t index, const Rewrite& rule, const EGraph& egraph,
                       SearchMatches& out) override;
};

class BackoffScheduler : public Scheduler {
 public:
  explicit BackoffScheduler(size_t match_limit = 1000, size_t ban_length = 5)
      : match_limit_(match_limit), ban_length_(ban_length) {}
  // Overrides the limits of one rule (by index in the rule list).
  BackoffScheduler& rule_limits(size_t index, size_t match_limit, size_t ban_length);

  void start(size_t num_rules) override;
  SearchOutcome search(size_t iteration, size_t index, const Rewrite& rule, const EGraph& egraph,
                       SearchMatches& out) override;
  bool can_stop(size_t iteration) override;

  size_t times_banned(size_t index) const { return stats_[index].times_banned; }
  size_t banned_until(size_t index) const { return stats_[index].banned_until; }

 private:
  struct RuleState {
    size_t match_limit = 0;
    size_t ban_length = 0;
    size_t times_banned = 0;
    size_t banned_until = 0;
    bool custom = false;
  };
  size_t match_limit_;
  size_t ban_length_;
  std::vector<RuleState> stats_;
};

}  // namespace mn::egraph
