#include "optimize/rules_composite.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "egraph/matcher.h"
#include "optimize/rules_composite_attrs.h"
#include "optimize/rules_composite_template.h"

namespace mn::optimize {

using egraph::Attr;
using egraph::AttrVar;
using egraph::EGraph;
using egraph::SearchMatches;
using egraph::Subst;
using egraph::Var;

namespace {

using composite::Expansion;
using composite::ExpansionPattern;

std::vector<TensorType> types_of(const TensorEGraph& teg, std::span<const Id> classes) {
  std::vector<TensorType> t;
  t.reserve(classes.size());
  for (Id c : classes) t.push_back(teg.type(c));
  return t;
}

// ---- composite -> primitives ----

// Matches every not yet decomposed node of one composite op; the match's only variable is the
// node id (not its class), so the applier sees the node's attributes and operands.
class DecomposeSearcher final : public egraph::Searcher {
 public:
  DecomposeSearcher(OpId op, std::shared_ptr<std::vector<bool>> done)
      : op_(op), done_(std::move(done)) {}
  void search(const EGraph& egraph, SearchMatches& out, size_t limit) const override {
    for (Id n : egraph.nodes_with_op(op_)) {
      if (out.size() >= limit) return;
      if (n < done_->size() && (*done_)[n]) continue;
      out.push(egraph.find(n), &n, nullptr);
    }
  }
  uint32_t num_vars() const override { return 1; }
  uint32_t num_attr_vars() const override { return 0; }
  std::optional<Var> find_var(std::string_view) const override { return std::nullopt; }
  std::optional<AttrVar> find_attr_var(std::string_view) const override { return std::nullopt; }

 private:
  OpId op_;
  std::shared_ptr<std::vector<bool>> done_;
};

class DecomposeApplier final : public egraph::Applier {
 public:
  DecomposeApplier(TensorEGraph& teg, const OpDef& def, std::shared_ptr<std::vector<bool>> done,
                   std::shared_ptr<composite::ExpansionCache> cache)
      : teg_(teg), def_(def), done_(std::move(done)), cache_(std::move(cache)) {}
  size_t apply(EGraph& egraph, Id eclass, const Subst& subst) const override {
    const Id n = subst[Var{0}];
    if (n >= done_->size()) done_->resize(egraph.num_ids() + 1, false);
    if ((*done_)[n]) return 0;
    (*done_)[n] = true;
    // Copied: adding nodes below may move the e-graph's node storage.
    const egraph::ENode node = egraph.node(n);
    std::vector<Id> operands(node.children().begin(), node.children().end());
    for (Id& c : operands) c = egraph.find(c);
    const std::vector<TensorType> types = types_of(teg_, operands);
    const Expansion* e = cache_->get(teg_, def_, node.attr(), types);
    if (!e) return 0;
    auto cls = composite::instantiate(teg_, *e, operands, /*add=*/true);
    if (!cls || !teg_.same_type(*cls, eclass)) return 0;
    return egraph.merge(eclass, *cls) ? 1 : 0;
  }

 private:
  TensorEGraph& teg_;
  const OpDef& def_;
  std::shared_ptr<std::vector<bool>> done_;
  std::shared_ptr<composite::ExpansionCache> cache_;
};

// ---- primitives -> composite ----

// One distinct structure of a composite's decomposition.
struct Template {
  Expansion expansion;
  ExpansionPattern pattern;
  // The pattern and its variants (rules_composite_template.h: swapped root, constants right),
  // all with the same variables.
  std::vector<std::unique_ptr<egraph::CompiledPattern>> programs;
  std::vector<Attrs> sample_attrs;  // distinct attributes of the samples with this structure
};

// Matches of the structural patterns, each turned into at most one verified recognition: the
// match's variables are the composite's operands (padded with no_id), its attribute variables
// the composite's attribute word and operand count.
class RecognizeSearcher final : public egraph::Searcher {
 public:
  RecognizeSearcher(TensorEGraph& teg, const OpDef& def,
                    std::shared_ptr<const std::vector<Template>> templates,
                    std::shared_ptr<composite::ExpansionCache> cache)
      : teg_(teg),
        def_(def),
        op_(teg.op(def.name)),
        cache_(std::move(cache)),
        keep_(std::move(templates)),
        templates_(*keep_),
        recover_(composite::attribute_recovery(def.name)) {
    for (const Template& t : templates_) {
      max_operands_ = std::max(max_operands_, static_cast<uint32_t>(t.expansion.inputs.size()));
    }
  }

  void search(const EGraph& egraph, SearchMatches& out, size_t limit) const override {
    for (size_t ti = 0; ti < templates_.size() && out.size() < limit; ++ti) {
      const Template& t = templates_[ti];
      for (const auto& program : t.programs) {
        found_.reset(program->num_vars(), program->num_attr_vars());
        program->search(egraph, found_);
        for (size_t m = 0; m < found_.size() && out.size() < limit; ++m) {
          try_match(egraph, ti, found_.eclass(m), found_.subst(m), out);
        }
      }
    }
  }
  uint32_t num_vars() const override { return std::max<uint32_t>(max_operands_, 1); }
  uint32_t num_attr_vars() const override { return 2; }
  std::optional<Var> find_var(std::string_view) const override { return std::nullopt; }
  std::optional<AttrVar> find_attr_var(std::string_view) const override { return std::nullopt; }

 private:
  void try_match(const EGraph& egraph, size_t ti, Id root, const Subst& subst,
                 SearchMatches& out) const {
    const Template& t = templates_[ti];
    operands_.clear();
    for (Var v : t.pattern.operand_vars) operands_.push_back(egraph.find(subst[v]));
    const std::vector<TensorType> types = types_of(teg_, operands_);
    root = egraph.find(root);
    // A match whose candidates all failed is tried again only once something that blocked one
    // of them changed (the missing node appeared, or the classes merged).
    uint64_t key = egraph::mix64(ti * 0x9e3779b97f4a7c15ULL + root);
    for (Id o : operands_) key = egraph::mix64(key ^ o);
    for (uint32_t a = 0; a < t.pattern.pattern.num_attr_vars(); ++a) {
      key = egraph::mix64(key ^ subst[AttrVar{a}]);
    }
    if (auto it = failed_.find(key); it != failed_.end()) {
      const auto& blockers = it->second;
      if (std::none_of(blockers.begin(), blockers.end(),
                       [&](const composite::Blocker& b) { return b.resolved(teg_); })) {
        return;
      }
      failed_.erase(it);
    }
    std::vector<composite::Blocker> blockers;
    std::vector<Attrs> candidates;
    if (recover_) {
      composite::MatchView view(teg_, t.expansion, t.sample_attrs.front(), t.pattern.attr_var,
                                subst, types);
      try {
        candidates = recover_(view);
      } catch (const Error&) {  // attributes of an unexpected kind where the template has them
        candidates.clear();
      }
    } else {
      candidates = t.sample_attrs;
    }
    const TensorType& root_type = teg_.type(root);
    for (const Attrs& a : candidates) {
      try {
        if (def_.infer(a, types) != root_type) continue;
      } catch (const Error&) {
        continue;
      }
      const Attr word = teg_.intern(a);
      const Id existing = egraph.lookup(op_, word, operands_);
      if (existing != egraph::no_id && egraph.find(existing) == root) return;  // already known
      // The decomposition with these attributes, looked up node by node: it is the matched
      // computation exactly when it lands in the matched class.
      const Expansion* e = cache_->get(teg_, def_, word, types);
      if (!e) continue;
      composite::Blocker blocker;
      std::optional<Id> cls = composite::instantiate(teg_, *e, operands_, /*add=*/false, &blocker);
      if (!cls || *cls != root) {
        if (cls) blocker = composite::Blocker{0, 0, {}, *cls, root};
        blockers.push_back(std::move(blocker));
        continue;
      }
      ids_.assign(num_vars(), egraph::no_id);
      std::copy(operands_.begin(), operands_.end(), ids_.begin());
      const Attr attrs[2] = {word, static_cast<Attr>(operands_.size())};
      out.push(root, ids_.data(), attrs);
      return;
    }
    failed_.emplace(key, std::move(blockers));
  }

  TensorEGraph& teg_;
  const OpDef& def_;
  OpId op_;
  std::shared_ptr<composite::ExpansionCache> cache_;
  std::shared_ptr<const std::vector<Template>> keep_;
  const std::vector<Template>& templates_;
  composite::RecoverFn recover_;
  uint32_t max_operands_ = 0;
  mutable SearchMatches found_;
  mutable std::vector<Id> operands_;
  mutable std::vector<Id> ids_;
  // Matches none of whose candidates verified, with what stopped each candidate (none: no
  // candidate can ever verify).
  mutable std::unordered_map<uint64_t, std::vector<composite::Blocker>> failed_;
};

class RecognizeApplier final : public egraph::Applier {
 public:
  RecognizeApplier(TensorEGraph& teg, const OpDef& def) : teg_(teg), def_(def) {}
  size_t apply(EGraph& egraph, Id eclass, const Subst& subst) const override {
    const Attr word = subst[AttrVar{0}];
    const auto n = static_cast<uint32_t>(subst[AttrVar{1}]);
    std::vector<Id> operands;
    for (uint32_t i = 0; i < n; ++i) operands.push_back(egraph.find(subst[Var{i}]));
    auto id = teg_.try_add_typed(def_, teg_.attrs(word), operands, teg_.type(eclass));
    if (!id) return 0;
    return egraph.merge(eclass, *id) ? 1 : 0;
  }

 private:
  TensorEGraph& teg_;
  const OpDef& def_;
};

// The distinct structures of `def`'s decomposition over its samples.
std::vector<Template> build_templates(const TensorEGraph& teg, const OpDef& def) {
  std::vector<Template> out;
  if (!def.samples) return out;
  std::unordered_map<std::string, size_t> by_key;
  for (const OpSample& s : def.samples()) {
    std::vector<Attrs> variants{s.attrs};
    for (Attrs& v : composite::template_variants(def.name, s.attrs))
      variants.push_back(std::move(v));
    for (const Attrs& attrs : variants) {
      auto e = composite::expand(def, attrs, s.inputs);
      if (!e) continue;
      auto p = composite::pattern_of(teg, *e);
      if (!p) continue;
      auto it = by_key.find(p->key);
      if (it != by_key.end()) {
        auto& known = out[it->second].sample_attrs;
        if (std::find(known.begin(), known.end(), attrs) == known.end()) known.push_back(attrs);
        continue;
      }
      by_key.emplace(p->key, out.size());
      Template t;
      // The variants the e-graph may hold instead (a swapped root; constants on the right, as
      // people write them and the algebra rules move them), each once.
      std::vector<std::string> keys{p->key};
      t.programs.push_back(std::make_unique<egraph::CompiledPattern>(p->pattern));
      for (composite::PatternVariant v :
           {composite::PatternVariant{true, false}, composite::PatternVariant{false, true},
            composite::PatternVariant{true, true}}) {
        auto q = composite::pattern_of(teg, *e, v);
        if (!q || std::find(keys.begin(), keys.end(), q->key) != keys.end()) continue;
        keys.push_back(q->key);
        t.programs.push_back(std::make_unique<egraph::CompiledPattern>(q->pattern));
      }
      t.pattern = std::move(*p);
      t.expansion = std::move(*e);
      t.sample_attrs.push_back(attrs);
      out.push_back(std::move(t));
    }
  }
  return out;
}

// Templates depend only on the op table (operator ids follow its order in every TensorEGraph)
// and are immutable once built, so they are built once per process and shared by every rule set.
using TemplateSet = std::vector<std::shared_ptr<const std::vector<Template>>>;
std::shared_ptr<const TemplateSet> shared_templates(const TensorEGraph& teg) {
  static std::mutex mutex;
  static std::shared_ptr<const TemplateSet> cached;
  std::lock_guard<std::mutex> lock(mutex);
  if (!cached) {
    auto set = std::make_shared<TemplateSet>();
    for (const OpDef* def : all_op_defs()) {
      set->push_back(def->decompose
                         ? std::make_shared<const std::vector<Template>>(build_templates(teg, *def))
                         : nullptr);
    }
    cached = std::move(set);
  }
  return cached;
}

}  // namespace

std::vector<egraph::Rewrite> composite_rules(TensorEGraph& teg,
                                             const CompositeRuleOptions& options) {
  std::vector<egraph::Rewrite> rules;
  auto cache = std::make_shared<composite::ExpansionCache>();
  std::shared_ptr<const TemplateSet> templates;
  if (options.recognize) templates = shared_templates(teg);
  const auto& defs = all_op_defs();
  for (size_t d = 0; d < defs.size(); ++d) {
    const OpDef* def = defs[d];
    if (!def->decompose) continue;
    if (options.decompose) {
      auto done = std::make_shared<std::vector<bool>>();
      rules.emplace_back("decompose-" + def->name,
                         std::make_unique<DecomposeSearcher>(teg.op(def->name), done),
                         std::make_unique<DecomposeApplier>(teg, *def, done, cache));
    }
    if (options.recognize) {
      const auto& op_templates = (*templates)[d];
      if (!op_templates || op_templates->empty()) continue;
      rules.emplace_back("recognize-" + def->name,
                         std::make_unique<RecognizeSearcher>(teg, *def, op_templates, cache),
                         std::make_unique<RecognizeApplier>(teg, *def));
    }
  }
  return rules;
}

}  // namespace mn::optimize
