#pragma once
// Open MPI's C library (libmpi.so.40), loaded at run time: the few entry points and predefined
// handles the MPI communicator uses. Declared here from Open MPI's ABI (every handle is a
// pointer to one of its predefined objects, MPI_IN_PLACE is (void*)1), so building meganeura
// needs no MPI headers and linking it no MPI library.
#include <string>

namespace mn::dist {

using MpiHandle = void*;  // MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request

struct MpiLibrary {
  int (*Initialized)(int*) = nullptr;
  int (*Finalized)(int*) = nullptr;
  int (*Init_thread)(int*, char***, int, int*) = nullptr;
  int (*Finalize)() = nullptr;
  int (*Abort)(MpiHandle, int) = nullptr;
  int (*Comm_rank)(MpiHandle, int*) = nullptr;
  int (*Comm_size)(MpiHandle, int*) = nullptr;
  int (*Comm_dup)(MpiHandle, MpiHandle*) = nullptr;
  int (*Iallreduce)(const void*, void*, int, MpiHandle, MpiHandle, MpiHandle, MpiHandle*) = nullptr;
  int (*Ibcast)(void*, int, MpiHandle, int, MpiHandle, MpiHandle*) = nullptr;
  int (*Test)(MpiHandle*, int*, void*) = nullptr;
  int (*Error_string)(int, char*, int*) = nullptr;

  MpiHandle comm_world = nullptr;
  MpiHandle type_float = nullptr, type_double = nullptr, type_byte = nullptr;
  MpiHandle op_sum = nullptr;

  static constexpr int kSuccess = 0;
  static constexpr int kThreadFunneled = 1;
  static inline void* const kInPlace = reinterpret_cast<void*>(1);

  // "MPI_Iallreduce failed: <Open MPI's message>" for a code other than MPI_SUCCESS.
  std::string error_text(const char* call, int code) const;
};

// The library, loaded once per process ($MN_MPI_LIBRARY names another file); an mn::Error
// saying what to install when it is missing or lacks an entry point.
const MpiLibrary& mpi_library();

}  // namespace mn::dist
