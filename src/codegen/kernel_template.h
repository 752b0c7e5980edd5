#pragma once
// Kernel templates: GLSL files under src/codegen/kernels/, compiled into the library
// (cmake/KernelTemplates.cmake), whose @NAME@ fields C++ fills with tiles, accessors and fused
// expressions. A field the template lacks, or one left unfilled, is an error: a kernel is never
// compiled from a half-filled text.
#include <map>
#include <string>
#include <string_view>

namespace mn::codegen {

using TemplateFields = std::map<std::string, std::string>;

// The template `file` (e.g. "matmul_tensor.comp") with every @NAME@ replaced by fields[NAME].
std::string fill_kernel_template(std::string_view file, const TemplateFields& fields);

// Every template, by file name.
const std::map<std::string, std::string_view>& kernel_templates();

}  // namespace mn::codegen
