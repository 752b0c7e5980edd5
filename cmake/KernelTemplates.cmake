# Kernel templates (src/codegen/kernels/*.comp) compiled into the library as strings:
# codegen/kernel_template.h looks them up by file name and fills their @NAME@ fields.
file(GLOB MN_KERNEL_TEMPLATES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/codegen/kernels/*.comp)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${MN_KERNEL_TEMPLATES})
set(_mn_entries "")
foreach(_file IN LISTS MN_KERNEL_TEMPLATES)
  get_filename_component(_name ${_file} NAME)
  file(READ ${_file} _text)
  string(FIND "${_text}" ")mn_template\"" _clash)
  if(NOT _clash EQUAL -1)
    message(FATAL_ERROR "${_file} contains the raw-string delimiter )mn_template\"")
  endif()
  string(APPEND _mn_entries "    {\"${_name}\", R\"mn_template(${_text})mn_template\"},\n")
endforeach()
set(MN_KERNEL_TEMPLATES_CPP ${CMAKE_BINARY_DIR}/generated/kernel_templates.cpp)
# Written through a copy so that an unchanged text does not rebuild (and @...@ stays as is).
file(WRITE ${MN_KERNEL_TEMPLATES_CPP}.in
"// Generated from src/codegen/kernels/*.comp by cmake/KernelTemplates.cmake.
#include <map>
#include <string>
#include <string_view>

namespace mn::codegen {
const std::map<std::string, std::string_view>& kernel_templates() {
  static const std::map<std::string, std::string_view> templates{
${_mn_entries}  };
  return templates;
}
}  // namespace mn::codegen
")
configure_file(${MN_KERNEL_TEMPLATES_CPP}.in ${MN_KERNEL_TEMPLATES_CPP} COPYONLY)
