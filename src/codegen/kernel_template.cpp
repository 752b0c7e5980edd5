#include "codegen/kernel_template.h"

#include <set>

#include <meganeura/error.h>

namespace mn::codegen {
namespace {

bool field_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

}  // namespace

std::string fill_kernel_template(std::string_view file, const TemplateFields& fields) {
  const auto& all = kernel_templates();
  const auto found = all.find(std::string(file));
  if (found == all.end()) throw Error("no kernel template named '" + std::string(file) + "'");
  const std::string_view text = found->second;
  std::string out;
  std::set<std::string> used;
  size_t at = 0;
  while (at < text.size()) {
    const size_t open = text.find('@', at);
    if (open == std::string_view::npos) break;
    size_t close = open + 1;
    while (close < text.size() && field_char(text[close])) ++close;
    out += text.substr(at, open - at);
    if (close == open + 1 || close >= text.size() || text[close] != '@') {
      out += '@';  // not a field
      at = open + 1;
      continue;
    }
    const std::string name(text.substr(open + 1, close - open - 1));
    const auto f = fields.find(name);
    if (f == fields.end()) {
      throw Error("kernel template '" + std::string(file) + "': field @" + name + "@ not filled");
    }
    out += f->second;
    used.insert(name);
    at = close + 1;
  }
  out += text.substr(std::min(at, text.size()));
  for (const auto& [name, value] : fields) {
    if (!used.count(name)) {
      throw Error("kernel template '" + std::string(file) + "' has no field @" + name + "@");
    }
  }
  return out;
}

std::string split_parts_declarations(uint32_t partials_binding) {
  return fill_kernel_template("split_parts.comp",
                              {{"P_BINDING", std::to_string(partials_binding)},
                               {"DONE_BINDING", std::to_string(partials_binding + 1)}});
}

}  // namespace mn::codegen
