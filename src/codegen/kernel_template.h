#pragma once
// Kernel templates: GLSL files under src/codegen/kernels/, compiled into the library
// (cmake/KernelTemplates.cmake), whose @NAME@ fields C++ fills with tiles, accessors and fused
// expressions. A field the template lacks, or one left unfilled, is an error: a kernel is never
// compiled from a half-filled text.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace mn::codegen {

using TemplateFields = std::map<std::string, std::string>;

// The template `file` (e.g. "matmul_tensor.comp") with every @NAME@ replaced by fields[NAME].
std::string fill_kernel_template(std::string_view file, const TemplateFields& fields);

// kernels/split_parts.comp for a kernel whose tiles are split among workgroups: the parts'
// results P at binding `partials_binding`, the tiles' counters after it, and
// last_to_finish(tile, parts).
std::string split_parts_declarations(uint32_t partials_binding);

// Every template, by file name.
const std::map<std::string, std::string_view>& kernel_templates();

}  // namespace mn::codegen
