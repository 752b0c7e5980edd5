#pragma once
// The matches of one search: a root class per match and its substitution, stored flat (one
// array of class ids, one of attribute words) so collecting a match allocates nothing once the
// buffers have grown. The runner reuses one SearchMatches per rule across iterations.
#include <vector>

#include "egraph/pattern.h"

namespace mn::egraph {

class SearchMatches {
 public:
  void reset(uint32_t num_vars, uint32_t num_attr_vars) {
    num_vars_ = num_vars;
    num_attr_vars_ = num_attr_vars;
    clear();
  }
  void clear() {
    classes_.clear();
    ids_.clear();
    attrs_.clear();
  }
  size_t size() const { return classes_.size(); }
  bool empty() const { return classes_.empty(); }
  uint32_t num_vars() const { return num_vars_; }
  uint32_t num_attr_vars() const { return num_attr_vars_; }

  Id eclass(size_t i) const { return classes_[i]; }
  Subst subst(size_t i) const {
    return Subst(ids_.data() + i * num_vars_, attrs_.data() + i * num_attr_vars_);
  }
  void push(Id eclass, const Id* ids, const Attr* attrs) {
    classes_.push_back(eclass);
    ids_.insert(ids_.end(), ids, ids + num_vars_);
    attrs_.insert(attrs_.end(), attrs, attrs + num_attr_vars_);
  }

 private:
  uint32_t num_vars_ = 0;
  uint32_t num_attr_vars_ = 0;
  std::vector<Id> classes_;
  std::vector<Id> ids_;
  std::vector<Attr> attrs_;
};

}  // namespace mn::egraph
