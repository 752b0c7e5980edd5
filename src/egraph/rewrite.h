#pragma once
// Rewrites: a searcher (usually a pattern) finds matches, an optional condition filters them,
// and an applier acts on each: instantiate a pattern and merge it with the matched class, or
// run a callback that builds whatever nodes it likes (dynamic appliers: attribute arithmetic,
// constant folding, anything a pattern cannot say).
//
// Searchers and appliers keep scratch buffers so applying a match does not allocate; a rewrite
// must therefore not be applied from two threads at once.
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "egraph/egraph.h"
#include "egraph/matcher.h"
#include "egraph/matches.h"
#include "egraph/pattern.h"

namespace mn::egraph {

class Searcher {
 public:
  virtual ~Searcher() = default;
  // Appends matches to `out` (reset for this searcher's variables) until it holds `limit`.
  virtual void search(const EGraph& egraph, SearchMatches& out, size_t limit) const = 0;
  virtual uint32_t num_vars() const = 0;
  virtual uint32_t num_attr_vars() const = 0;
  virtual std::optional<Var> find_var(std::string_view name) const = 0;
  virtual std::optional<AttrVar> find_attr_var(std::string_view name) const = 0;
};

class PatternSearcher : public Searcher {
 public:
  explicit PatternSearcher(Pattern pattern) : pattern_(std::move(pattern)), program_(pattern_) {}
  void search(const EGraph& egraph, SearchMatches& out, size_t limit) const override {
    program_.search(egraph, out, limit);
  }
  uint32_t num_vars() const override { return program_.num_vars(); }
  uint32_t num_attr_vars() const override { return program_.num_attr_vars(); }
  std::optional<Var> find_var(std::string_view name) const override {
    return pattern_.find_var(name);
  }
  std::optional<AttrVar> find_attr_var(std::string_view name) const override {
    return pattern_.find_attr_var(name);
  }
  const Pattern& pattern() const { return pattern_; }
  const CompiledPattern& program() const { return program_; }

 private:
  Pattern pattern_;
  CompiledPattern program_;
};

class Applier {
 public:
  virtual ~Applier() = default;
  // Called once by Rewrite with its searcher, to resolve variable names; throws mn::Error
  // naming a variable the searcher does not bind.
  virtual void bind(const Searcher& searcher) {}
  // Acts on one match rooted at `eclass`; returns how many changes it made (merges that joined
  // two classes). The runner sums these into "applied".
  virtual size_t apply(EGraph& egraph, Id eclass, const Subst& subst) const = 0;
};

// Adds the pattern's term under the substitution and merges it with the matched class.
class PatternApplier : public Applier {
 public:
  explicit PatternApplier(Pattern pattern) : pattern_(std::move(pattern)) {}
  void bind(const Searcher& searcher) override;
  size_t apply(EGraph& egraph, Id eclass, const Subst& subst) const override;
  // The class of the instantiated term, without merging it.
  Id instantiate(EGraph& egraph, const Subst& subst) const;
  const Pattern& pattern() const { return pattern_; }

 private:
  Pattern pattern_;
  std::vector<Var> var_map_;         // applier var -> searcher var
  std::vector<AttrVar> attr_map_;    // applier attr var -> searcher attr var
  std::vector<Pattern::Ref> order_;  // nodes reachable from the root, children first
  mutable std::vector<Id> ids_;
  mutable std::vector<Id> children_;
};

// A callback with full control; it returns the number of changes it made.
using ApplyFn = std::function<size_t(EGraph& egraph, Id eclass, const Subst& subst)>;
// A callback that builds a term and returns its class (no_id: nothing this time); the applier
// merges it with the matched class.
using BuildFn = std::function<Id(EGraph& egraph, Id eclass, const Subst& subst)>;

class CallbackApplier : public Applier {
 public:
  explicit CallbackApplier(ApplyFn fn) : fn_(std::move(fn)) {}
  static std::unique_ptr<CallbackApplier> building(BuildFn fn);
  size_t apply(EGraph& egraph, Id eclass, const Subst& subst) const override {
    return fn_(egraph, eclass, subst);
  }

 private:
  ApplyFn fn_;
};

using Condition = std::function<bool(const EGraph& egraph, Id eclass, const Subst& subst)>;

class Rewrite {
 public:
  Rewrite(std::string name, std::unique_ptr<Searcher> searcher, std::unique_ptr<Applier> applier,
          Condition condition = {});
  // lhs => rhs, optionally only where `condition` holds.
  Rewrite(std::string name, Pattern lhs, Pattern rhs, Condition condition = {});
  // lhs => the term `build` returns (a dynamic applier).
  static Rewrite dynamic(std::string name, Pattern lhs, BuildFn build, Condition condition = {});
  // lhs => whatever `fn` does.
  static Rewrite callback(std::string name, Pattern lhs, ApplyFn fn, Condition condition = {});

  const std::string& name() const { return name_; }
  const Searcher& searcher() const { return *searcher_; }
  const Applier& applier() const { return *applier_; }
  Var var(std::string_view name) const;
  AttrVar attr_var(std::string_view name) const;

  // Replaces `out` with the matches (at most `limit`).
  void search(const EGraph& egraph, SearchMatches& out,
              size_t limit = std::numeric_limits<size_t>::max()) const;
  // Applies one match unless the condition rejects it; returns the changes made.
  size_t apply_one(EGraph& egraph, Id eclass, const Subst& subst) const;
  size_t apply(EGraph& egraph, const SearchMatches& matches) const;

 private:
  void bind_applier();

  std::string name_;
  std::unique_ptr<Searcher> searcher_;
  std::unique_ptr<Applier> applier_;
  Condition condition_;
};

}  // namespace mn::egraph
