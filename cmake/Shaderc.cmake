# Debian's libshaderc.so does not link (missing SPIRV-Tools symbols), so shaderc is linked
# statically: shaderc_combined plus glslang's static libraries in one link group.
set(_mn_libdir /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE})
set(_mn_shaderc_libs
  ${_mn_libdir}/libshaderc_combined.a
  ${_mn_libdir}/libglslang.a
  ${_mn_libdir}/libMachineIndependent.a
  ${_mn_libdir}/libGenericCodeGen.a
  ${_mn_libdir}/libOSDependent.a
  ${_mn_libdir}/libOGLCompiler.a
  ${_mn_libdir}/libSPIRV.a
  ${_mn_libdir}/libSPIRV-Tools-opt.a
  ${_mn_libdir}/libSPIRV-Tools.a)
foreach(_lib IN LISTS _mn_shaderc_libs)
  if(NOT EXISTS ${_lib})
    message(FATAL_ERROR "missing ${_lib}: install libshaderc-dev glslang-dev spirv-tools")
  endif()
endforeach()
add_library(mn_shaderc INTERFACE)
target_link_libraries(mn_shaderc INTERFACE
  "-Wl,--start-group" ${_mn_shaderc_libs} "-Wl,--end-group" Threads::Threads)
