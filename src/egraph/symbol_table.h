#pragma once
// Interns names to dense small integers: operator ids for patterns written as text, and symbol
// attributes for clients that want them.
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "egraph/id.h"

namespace mn::egraph {

class SymbolTable {
 public:
  uint32_t intern(std::string_view name);
  std::optional<uint32_t> find(std::string_view name) const;
  // Throws mn::Error for an id this table never handed out.
  std::string_view name(uint32_t id) const;
  size_t size() const { return names_.size(); }

 private:
  std::deque<std::string> names_;  // a deque keeps the strings (and the views on them) in place
  std::unordered_map<std::string_view, uint32_t> ids_;
};

}  // namespace mn::egraph
