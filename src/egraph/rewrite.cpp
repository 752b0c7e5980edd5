#include "egraph/rewrite.h"

#include <meganeura/error.h>

namespace mn::egraph {

void PatternApplier::bind(const Searcher& searcher) {
  var_map_.clear();
  attr_map_.clear();
  for (const std::string& name : pattern_.var_names()) {
    auto v = searcher.find_var(name);
    if (!v) throw Error("applier variable ?" + name + " is not bound by the searcher");
    var_map_.push_back(*v);
  }
  for (const std::string& name : pattern_.attr_var_names()) {
    auto v = searcher.find_attr_var(name);
    if (!v) throw Error("applier attribute variable " + name + " is not bound by the searcher");
    attr_map_.push_back(*v);
  }
  // Pattern nodes are stored children first, so the reachable ones in storage order are a
  // valid instantiation order.
  std::vector<bool> reachable(pattern_.size(), false);
  reachable[pattern_.root()] = true;
  for (size_t r = pattern_.size(); r-- > 0;) {
    if (!reachable[r]) continue;
    const PatternNode& n = pattern_.node(static_cast<Pattern::Ref>(r));
    if (!n.is_var && !n.attr.is_exact())
      throw Error("applier pattern node " + std::to_string(r) +
                  " has no exact attribute (use an exact word or a bound attribute variable)");
    for (Pattern::Ref c : n.children) reachable[c] = true;
  }
  order_.clear();
  for (size_t r = 0; r < pattern_.size(); ++r)
    if (reachable[r]) order_.push_back(static_cast<Pattern::Ref>(r));
  ids_.assign(pattern_.size(), no_id);
}

Id PatternApplier::instantiate(EGraph& egraph, const Subst& subst) const {
  for (Pattern::Ref r : order_) {
    const PatternNode& n = pattern_.node(r);
    if (n.is_var) {
      ids_[r] = subst[var_map_[n.var]];
      continue;
    }
    children_.clear();
    for (Pattern::Ref c : n.children) children_.push_back(ids_[c]);
    Attr attr = n.attr.kind == AttrMatch::Kind::bind ? subst[attr_map_[n.attr.var]] : n.attr.value;
    ids_[r] = egraph.add(n.op, attr, children_);
  }
  return ids_[pattern_.root()];
}

size_t PatternApplier::apply(EGraph& egraph, Id eclass, const Subst& subst) const {
  return egraph.merge(eclass, instantiate(egraph, subst)) ? 1 : 0;
}

std::unique_ptr<CallbackApplier> CallbackApplier::building(BuildFn fn) {
  return std::make_unique<CallbackApplier>(
      [fn = std::move(fn)](EGraph& egraph, Id eclass, const Subst& subst) -> size_t {
        Id id = fn(egraph, eclass, subst);
        return id != no_id && egraph.merge(eclass, id) ? 1 : 0;
      });
}

Rewrite::Rewrite(std::string name, std::unique_ptr<Searcher> searcher,
                 std::unique_ptr<Applier> applier, Condition condition)
    : name_(std::move(name)),
      searcher_(std::move(searcher)),
      applier_(std::move(applier)),
      condition_(std::move(condition)) {
  bind_applier();
}

void Rewrite::bind_applier() {
  if (!searcher_ || !applier_) throw Error("rewrite '" + name_ + "': missing searcher or applier");
  try {
    applier_->bind(*searcher_);
  } catch (const Error& e) {
    throw Error("rewrite '" + name_ + "': " + e.what());
  }
}

namespace {
std::unique_ptr<Searcher> make_searcher(const std::string& name, Pattern lhs) {
  try {
    return std::make_unique<PatternSearcher>(std::move(lhs));
  } catch (const Error& e) {
    throw Error("rewrite '" + name + "': " + e.what());
  }
}
}  // namespace

Rewrite::Rewrite(std::string name, Pattern lhs, Pattern rhs, Condition condition)
    : name_(std::move(name)),
      searcher_(make_searcher(name_, std::move(lhs))),
      applier_(std::make_unique<PatternApplier>(std::move(rhs))),
      condition_(std::move(condition)) {
  bind_applier();
}

Rewrite Rewrite::dynamic(std::string name, Pattern lhs, BuildFn build, Condition condition) {
  auto searcher = make_searcher(name, std::move(lhs));
  return Rewrite(std::move(name), std::move(searcher), CallbackApplier::building(std::move(build)),
                 std::move(condition));
}

Rewrite Rewrite::callback(std::string name, Pattern lhs, ApplyFn fn, Condition condition) {
  auto searcher = make_searcher(name, std::move(lhs));
  return Rewrite(std::move(name), std::move(searcher),
                 std::make_unique<CallbackApplier>(std::move(fn)), std::move(condition));
}

Var Rewrite::var(std::string_view name) const {
  if (auto v = searcher_->find_var(name)) return *v;
  throw Error("rewrite '" + name_ + "': no variable ?" + std::string(name));
}

AttrVar Rewrite::attr_var(std::string_view name) const {
  if (auto v = searcher_->find_attr_var(name)) return *v;
  throw Error("rewrite '" + name_ + "': no attribute variable " + std::string(name));
}

void Rewrite::search(const EGraph& egraph, SearchMatches& out, size_t limit) const {
  out.reset(searcher_->num_vars(), searcher_->num_attr_vars());
  searcher_->search(egraph, out, limit);
}

size_t Rewrite::apply_one(EGraph& egraph, Id eclass, const Subst& subst) const {
  if (condition_ && !condition_(egraph, eclass, subst)) return 0;
  return applier_->apply(egraph, eclass, subst);
}

size_t Rewrite::apply(EGraph& egraph, const SearchMatches& matches) const {
  size_t changed = 0;
  for (size_t i = 0; i < matches.size(); ++i)
    changed += apply_one(egraph, matches.eclass(i), matches.subst(i));
  return changed;
}

}  // namespace mn::egraph
