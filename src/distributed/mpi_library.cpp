#include "distributed/mpi_library.h"

#include "distributed/runtime_library.h"

namespace mn::dist {

namespace {

template <typename F>
void bind(const OpenedLibrary& lib, const char* name, F& fn) {
  dist::bind(lib, name, fn, "MPI library", "not Open MPI 4?");
}

MpiLibrary load() {
  // RTLD_GLOBAL: Open MPI's own components, loaded by it later, resolve its symbols globally.
  const OpenedLibrary lib = open_library("MN_MPI_LIBRARY", "libmpi.so.40", RTLD_NOW | RTLD_GLOBAL);
  if (!lib.handle) {
    throw Error("the MPI engine needs Open MPI's library '" + lib.file +
                "', which cannot be loaded (" + lib.missing_why +
                "): install Debian's openmpi-bin and libopenmpi3, or set MN_MPI_LIBRARY");
  }
  MpiLibrary m;
  bind(lib, "MPI_Initialized", m.Initialized);
  bind(lib, "MPI_Finalized", m.Finalized);
  bind(lib, "MPI_Init_thread", m.Init_thread);
  bind(lib, "MPI_Finalize", m.Finalize);
  bind(lib, "MPI_Abort", m.Abort);
  bind(lib, "MPI_Comm_rank", m.Comm_rank);
  bind(lib, "MPI_Comm_size", m.Comm_size);
  bind(lib, "MPI_Comm_dup", m.Comm_dup);
  bind(lib, "MPI_Iallreduce", m.Iallreduce);
  bind(lib, "MPI_Ibcast", m.Ibcast);
  bind(lib, "MPI_Test", m.Test);
  bind(lib, "MPI_Error_string", m.Error_string);
  // The predefined handles are the addresses of these objects.
  bind(lib, "ompi_mpi_comm_world", m.comm_world);
  bind(lib, "ompi_mpi_float", m.type_float);
  bind(lib, "ompi_mpi_double", m.type_double);
  bind(lib, "ompi_mpi_byte", m.type_byte);
  bind(lib, "ompi_mpi_op_sum", m.op_sum);
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

const MpiLibrary& mpi_library() { return load_once<MpiLibrary>(load); }

}  // namespace mn::dist
