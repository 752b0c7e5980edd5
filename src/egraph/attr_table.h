#pragma once
// Interns attribute values of any hashable type to dense Attr words. E-nodes compare attributes
// by word, so a client stores its op attributes here (equal values get the same word) and keeps
// the table; pattern predicates and appliers look the value up again with get().
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include <meganeura/error.h>

#include "egraph/id.h"

namespace mn::egraph {

template <class T, class Hash = std::hash<T>, class Eq = std::equal_to<T>>
class AttrTable {
 public:
  Attr intern(const T& value) {
    auto [it, inserted] = index_.try_emplace(value, static_cast<Attr>(values_.size()));
    // Map nodes never move, so the key doubles as the stored value.
    if (inserted) values_.push_back(&it->first);
    return it->second;
  }
  const T& get(Attr attr) const {
    if (attr >= values_.size())
      throw Error("attribute table: word " + std::to_string(attr) + " was never interned");
    return *values_[attr];
  }
  size_t size() const { return values_.size(); }

 private:
  std::unordered_map<T, Attr, Hash, Eq> index_;
  std::vector<const T*> values_;
};

}  // namespace mn::egraph
