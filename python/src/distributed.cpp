// Data-parallel training from Python: connect() gives the job's Communicator (MPI under mpirun,
// NCCL when started by environment or asked for), which the Trainer takes as `communicator`.
// Its collectives work on NumPy arrays in place and release the GIL while they wait.
#include <meganeura/distributed.h>

#include "bindings.h"

namespace mn::python {

namespace {

// A writable, C-contiguous float32 or float64 array: the collectives change it in place.
py::array in_place_array(const py::handle& value, const char* what) {
  if (!py::isinstance<py::array>(value)) {
    throw Error(std::string(what) + ": expected a NumPy array of float32 or float64");
  }
  py::array a = py::reinterpret_borrow<py::array>(value);
  if (!(a.flags() & py::array::c_style) || !a.writeable()) {
    throw Error(std::string(what) + ": the array must be C-contiguous and writable (it is "
                "changed in place)");
  }
  return a;
}

}  // namespace

void bind_distributed(py::module_& dist) {
  py::class_<Communicator, std::shared_ptr<Communicator>>(
      dist, "Communicator",
      "The processes of one data-parallel job, numbered 0 to size - 1. Every collective must "
      "be called by every process, in the same order, with the same sizes; one that does not "
      "complete within the timeout raises DistributedError.")
      .def_property_readonly("rank", &Communicator::rank)
      .def_property_readonly("size", &Communicator::size)
      .def_property_readonly("engine", &Communicator::engine, "'mpi' or 'nccl'")
      .def(
          "all_reduce_sum",
          [](Communicator& c, const py::handle& values) {
            py::array a = in_place_array(values, "Communicator.all_reduce_sum");
            const auto n = static_cast<size_t>(a.size());
            if (py::isinstance<py::array_t<float>>(a)) {
              std::span<float> s(static_cast<float*>(a.mutable_data()), n);
              py::gil_scoped_release release;
              c.all_reduce_sum(s);
            } else if (py::isinstance<py::array_t<double>>(a)) {
              std::span<double> s(static_cast<double*>(a.mutable_data()), n);
              py::gil_scoped_release release;
              c.all_reduce_sum(s);
            } else {
              throw Error("Communicator.all_reduce_sum: expected float32 or float64, got " +
                          py::str(a.dtype()).cast<std::string>());
            }
            return a;
          },
          py::arg("values"),
          "Sums the array over the processes, in place (every process gets the sums); returns "
          "it.")
      .def(
          "broadcast",
          [](Communicator& c, const py::handle& values, int root) {
            py::array a = in_place_array(values, "Communicator.broadcast");
            std::span<std::byte> s(static_cast<std::byte*>(a.mutable_data()),
                                   static_cast<size_t>(a.nbytes()));
            {
              py::gil_scoped_release release;
              c.broadcast(s, root);
            }
            return a;
          },
          py::arg("values"), py::arg("root") = 0,
          "Rank `root`'s array into every process's (same size everywhere), in place; returns "
          "it.")
      .def(
          "abort", [](Communicator& c, int code) { c.abort(code); }, py::arg("code") = 1,
          "Ends every process of the job with `code` (after an error the others cannot see).");
  dist.def(
      "connect",
      [](const std::string& engine, double timeout) {
        return connect_distributed(
            {.engine = distributed_engine_from_name(engine), .timeout_seconds = timeout});
      },
      py::arg("engine") = "auto", py::arg("timeout") = 0.0,
      "The job this process belongs to, or None to train alone. engine: 'auto' (MPI under "
      "mpirun, NCCL when started by environment: WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT; "
      "else None), 'mpi', 'nccl' or 'none'. timeout: seconds a collective may take "
      "(0: $MN_DISTRIBUTED_TIMEOUT, else 600).");
  dist.def("launched_by_mpi", &launched_by_mpi, "Whether mpirun (or another MPI launcher) "
                                                 "started this process.");
  dist.def("launched_by_env", &launched_by_env,
           "Whether the environment (WORLD_SIZE) says this process belongs to a job.");
}

}  // namespace mn::python
