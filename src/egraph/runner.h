#pragma once
// The equality-saturation loop: each iteration searches every rule (through the scheduler),
// applies all matches, and rebuilds, until the e-graph stops changing or a budget runs out.
// Budgets are checked between rules and every few matches while applying, so one explosive
// rule cannot carry the e-graph far past the node limit or the run far past its time limit.
// The e-graph is always left rebuilt.
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "egraph/egraph.h"
#include "egraph/rewrite.h"
#include "egraph/scheduler.h"

namespace mn::egraph {

struct RunnerLimits {
  size_t iterations = 30;
  size_t nodes = 10000;
  double seconds = 5.0;
};

enum class StopReason : uint8_t {
  saturated,  // an iteration changed nothing and no rule was banned
  iteration_limit,
  node_limit,
  time_limit,
  goal,  // the stop_when predicate held
};
const char* stop_reason_name(StopReason reason);

struct RuleStats {
  std::string name;
  size_t matches = 0;  // matches found over the run (banned searches not counted)
  size_t applied = 0;  // changes the rule's applications made
  size_t times_banned = 0;
  size_t iterations_skipped = 0;  // iterations the rule sat out while banned
  double search_seconds = 0;
  double apply_seconds = 0;
};

struct IterationStats {
  size_t nodes = 0;  // after rebuild
  size_t classes = 0;
  size_t matches = 0;
  size_t applied = 0;
  size_t rebuild_merges = 0;
  double search_seconds = 0;
  double apply_seconds = 0;
  double rebuild_seconds = 0;
};

struct RunReport {
  StopReason stop_reason = StopReason::saturated;
  size_t iterations = 0;
  size_t nodes = 0;
  size_t classes = 0;
  double seconds = 0;
  std::vector<RuleStats> rules;
  std::vector<IterationStats> per_iteration;
  // A few lines: stop reason, sizes, time, and the busiest rules.
  std::string summary() const;
};

class Runner {
 public:
  explicit Runner(EGraph& egraph);
  Runner& limits(const RunnerLimits& limits) {
    limits_ = limits;
    return *this;
  }
  // Default: BackoffScheduler with egg's limits.
  Runner& scheduler(std::unique_ptr<Scheduler> scheduler);
  // Stops (reason `goal`) as soon as the predicate holds at the start of an iteration.
  Runner& stop_when(std::function<bool(const EGraph&)> goal) {
    goal_ = std::move(goal);
    return *this;
  }
  RunReport run(std::span<const Rewrite> rules);
  Scheduler& current_scheduler() { return *scheduler_; }

 private:
  using Clock = std::chrono::steady_clock;
  bool out_of_time() const;
  double seconds_since(Clock::time_point t) const;

  EGraph& egraph_;
  RunnerLimits limits_;
  std::unique_ptr<Scheduler> scheduler_;
  std::function<bool(const EGraph&)> goal_;
  Clock::time_point start_;
  std::vector<SearchMatches> matches_;
};

}  // namespace mn::egraph
