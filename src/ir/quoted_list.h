#pragma once
// Names listed in an error message, as shape_str writes shapes: 'a', 'b', 'c'.
#include <string>
#include <vector>

namespace mn {

inline std::string quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

}  // namespace mn
