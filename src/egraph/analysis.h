#pragma once
// E-class analysis (egg's Analysis): a value per e-class, built from its e-nodes (`make`),
// combined when classes merge (`merge`, a semilattice join that says what changed), and an
// optional `modify` hook that may edit the e-graph (constant folding adds the literal node).
// The tensor side uses it for shape/dtype and constants.
//
// The engine talks to the untyped Analysis interface; TypedAnalysis<D> stores one D per class
// id and is what clients derive from (D must be default-constructible and movable).
#include <string>
#include <utility>
#include <vector>

#include <meganeura/error.h>

#include "egraph/enode.h"

namespace mn::egraph {

class EGraph;

// What a merge changed: `a` when the kept value differs from the old `into`, `b` when it differs
// from the merged-in value. Parents of a changed side must recompute their data.
struct DidMerge {
  bool a = false;
  bool b = false;
};

class Analysis {
 public:
  virtual ~Analysis() = default;
  // Class `id` was just created holding only `node`.
  virtual void on_add(const EGraph& egraph, Id id, const ENode& node) = 0;
  // Class `from` was merged into the root `into`.
  virtual DidMerge on_merge(Id into, Id from) = 0;
  // The data of a child of `node` (in root class `cls`) changed: re-make and merge into `cls`.
  // Returns whether the class's data changed.
  virtual bool on_update(const EGraph& egraph, Id cls, const ENode& node) = 0;
  // Called after a class was created or its data may have changed. May add nodes and merge.
  virtual void modify(EGraph& egraph, Id cls) {}
};

template <class D>
class TypedAnalysis : public Analysis {
 public:
  virtual D make(const EGraph& egraph, const ENode& node) = 0;
  virtual DidMerge merge(D& into, D from) = 0;

  // The data of the class holding `id` (any id of it). Valid until the next add or merge.
  const D& data(Id id) const;
  D& mutable_data(Id id);

  void on_add(const EGraph& egraph, Id id, const ENode& node) override {
    if (egraph_ && egraph_ != &egraph)
      throw Error("analysis: one TypedAnalysis serves one e-graph, and it already has one");
    egraph_ = &egraph;
    if (id >= data_.size()) data_.resize(id + 1);
    data_[id] = make(egraph, node);
  }
  DidMerge on_merge(Id into, Id from) override {
    DidMerge changed = merge(data_[into], std::move(data_[from]));
    data_[from] = D{};
    return changed;
  }
  bool on_update(const EGraph& egraph, Id cls, const ENode& node) override {
    return merge(data_[cls], make(egraph, node)).a;
  }

 private:
  void check_id(Id id) const {
    if (id >= data_.size())
      throw Error("analysis: no data for e-class " + std::to_string(id) +
                  " (it was not added to this analysis' e-graph)");
  }

  const EGraph* egraph_ = nullptr;
  std::vector<D> data_;
};

}  // namespace mn::egraph
