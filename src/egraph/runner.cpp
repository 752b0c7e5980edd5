#include "egraph/runner.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace mn::egraph {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::saturated:
      return "saturated";
    case StopReason::iteration_limit:
      return "iteration limit";
    case StopReason::node_limit:
      return "node limit";
    case StopReason::time_limit:
      return "time limit";
    case StopReason::goal:
      return "goal reached";
  }
  return "?";
}

Runner::Runner(EGraph& egraph)
    : egraph_(egraph), scheduler_(std::make_unique<BackoffScheduler>()) {}

Runner& Runner::scheduler(std::unique_ptr<Scheduler> scheduler) {
  scheduler_ = std::move(scheduler);
  return *this;
}

double Runner::seconds_since(Clock::time_point t) const {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool Runner::out_of_time() const { return seconds_since(start_) >= limits_.seconds; }

RunReport Runner::run(std::span<const Rewrite> rules) {
  start_ = Clock::now();
  RunReport report;
  report.rules.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r) report.rules[r].name = rules[r].name();
  matches_.resize(rules.size());
  scheduler_->start(rules.size());
  egraph_.rebuild();

  std::optional<StopReason> stop;
  for (size_t iter = 0; !stop; ++iter) {
    if (goal_ && goal_(egraph_))
      stop = StopReason::goal;
    else if (iter >= limits_.iterations)
      stop = StopReason::iteration_limit;
    else if (egraph_.num_nodes() > limits_.nodes)
      stop = StopReason::node_limit;
    else if (out_of_time())
      stop = StopReason::time_limit;
    if (stop) break;

    IterationStats it;
    uint64_t version = egraph_.version();
    auto t0 = Clock::now();
    for (size_t r = 0; r < rules.size() && !stop; ++r) {
      auto ts = Clock::now();
      SearchOutcome outcome = scheduler_->search(iter, r, rules[r], egraph_, matches_[r]);
      RuleStats& rs = report.rules[r];
      rs.search_seconds += seconds_since(ts);
      if (outcome == SearchOutcome::banned_now) ++rs.times_banned;
      if (outcome == SearchOutcome::skipped) ++rs.iterations_skipped;
      rs.matches += matches_[r].size();
      it.matches += matches_[r].size();
      if (out_of_time()) stop = StopReason::time_limit;
    }
    it.search_seconds = seconds_since(t0);

    auto t1 = Clock::now();
    for (size_t r = 0; r < rules.size() && !stop; ++r) {
      auto ta = Clock::now();
      const SearchMatches& ms = matches_[r];
      size_t applied = 0;
      for (size_t m = 0; m < ms.size(); ++m) {
        applied += rules[r].apply_one(egraph_, ms.eclass(m), ms.subst(m));
        if (egraph_.num_nodes() > limits_.nodes) {
          stop = StopReason::node_limit;
          break;
        }
        // The clock is not free; a few hundred matches between looks is still prompt.
        if ((m & 255) == 255 && out_of_time()) {
          stop = StopReason::time_limit;
          break;
        }
      }
      report.rules[r].applied += applied;
      report.rules[r].apply_seconds += seconds_since(ta);
      it.applied += applied;
      if (!stop && out_of_time()) stop = StopReason::time_limit;
    }
    it.apply_seconds = seconds_since(t1);

    auto t2 = Clock::now();
    it.rebuild_merges = egraph_.rebuild();
    it.rebuild_seconds = seconds_since(t2);
    it.nodes = egraph_.num_nodes();
    it.classes = egraph_.num_classes();
    report.per_iteration.push_back(it);
    report.iterations = iter + 1;

    if (!stop && egraph_.version() == version && scheduler_->can_stop(iter))
      stop = StopReason::saturated;
  }
  for (SearchMatches& m : matches_) m.clear();
  report.stop_reason = *stop;
  report.nodes = egraph_.num_nodes();
  report.classes = egraph_.num_classes();
  report.seconds = seconds_since(start_);
  return report;
}

std::string RunReport::summary() const {
  char line[256];
  std::snprintf(line, sizeof line,
                "stop: %s after %zu iterations, %zu e-nodes, %zu e-classes, %.3f s\n",
                stop_reason_name(stop_reason), iterations, nodes, classes, seconds);
  std::string s = line;
  std::vector<const RuleStats*> order;
  for (const RuleStats& r : rules) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const RuleStats* a, const RuleStats* b) {
    return a->search_seconds + a->apply_seconds > b->search_seconds + b->apply_seconds;
  });
  for (const RuleStats* r : order) {
    std::snprintf(line, sizeof line,
                  "  %-24s matches %8zu applied %8zu banned %3zu search %.4f s apply %.4f s\n",
                  r->name.c_str(), r->matches, r->applied, r->times_banned, r->search_seconds,
                  r->apply_seconds);
    s += line;
  }
  return s;
}

}  // namespace mn::egraph
