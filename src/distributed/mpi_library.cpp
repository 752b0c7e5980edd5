#include "distributed/mpi_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <meganeura/error.h>

namespace mn::dist {

namespace {

template <typename F>
void bind(void* lib, const std::string& file, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) throw Error("MPI library '" + file + "' has no symbol " + name + " (not Open MPI 4?)");
}

MpiLibrary load() {
  const char* env = std::getenv("MN_MPI_LIBRARY");
  const std::string file = env && *env ? env : "libmpi.so.40";
  // RTLD_GLOBAL: Open MPI's own components, loaded by it later, resolve its symbols globally.
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    const char* why = dlerror();
    throw Error("the MPI engine needs Open MPI's library '" + file + "', which cannot be loaded (" +
                (why ? why : "?") +
                "): install Debian's openmpi-bin and libopenmpi3, or set MN_MPI_LIBRARY");
  }
  MpiLibrary m;
  bind(lib, file, "MPI_Initialized", m.Initialized);
  bind(lib, file, "MPI_Finalized", m.Finalized);
  bind(lib, file, "MPI_Init_thread", m.Init_thread);
  bind(lib, file, "MPI_Finalize", m.Finalize);
  bind(lib, file, "MPI_Abort", m.Abort);
  bind(lib, file, "MPI_Comm_rank", m.Comm_rank);
  bind(lib, file, "MPI_Comm_size", m.Comm_size);
  bind(lib, file, "MPI_Comm_dup", m.Comm_dup);
  bind(lib, file, "MPI_Iallreduce", m.Iallreduce);
  bind(lib, file, "MPI_Ibcast", m.Ibcast);
  bind(lib, file, "MPI_Test", m.Test);
  bind(lib, file, "MPI_Error_string", m.Error_string);
  // The predefined handles are the addresses of these objects.
  bind(lib, file, "ompi_mpi_comm_world", m.comm_world);
  bind(lib, file, "ompi_mpi_float", m.type_float);
  bind(lib, file, "ompi_mpi_double", m.type_double);
  bind(lib, file, "ompi_mpi_byte", m.type_byte);
  bind(lib, file, "ompi_mpi_op_sum", m.op_sum);
  return m;
}

}  // namespace

std::string MpiLibrary::error_text(const char* call, int code) const {
  char text[512] = {};
  int length = 0;
  if (Error_string && Error_string(code, text, &length) == kSuccess) {
    return std::string(call) + " failed: " + std::string(text, static_cast<size_t>(length));
  }
  return std::string(call) + " failed with MPI error " + std::to_string(code);
}

const MpiLibrary& mpi_library() {
  static std::once_flag once;
  static MpiLibrary lib;
  static std::string failure;
  std::call_once(once, [] {
    try {
      lib = load();
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(failure);
  return lib;
}

}  // namespace mn::dist
