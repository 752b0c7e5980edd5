#include "egraph/symbol_table.h"

#include <meganeura/error.h>

namespace mn::egraph {

uint32_t SymbolTable::intern(std::string_view name) {
  auto it = ids_.find(name);
  if (it != ids_.end()) return it->second;
  uint32_t id = static_cast<uint32_t>(names_.size());
  names_.emplace_back(name);
  ids_.emplace(names_.back(), id);
  return id;
}

std::optional<uint32_t> SymbolTable::find(std::string_view name) const {
  auto it = ids_.find(name);
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

std::string_view SymbolTable::name(uint32_t id) const {
  if (id >= names_.size())
    throw Error("symbol table: id " + std::to_string(id) + " out of range (" +
                std::to_string(names_.size()) + " symbols)");
  return names_[id];
}

}  // namespace mn::egraph
