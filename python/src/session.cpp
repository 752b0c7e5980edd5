// Sessions: compile a graph for a device, set inputs from NumPy arrays, step, read outputs.
#include <meganeura/session.h>

#include <cstring>

#include "bindings.h"

namespace mn::python {

namespace {

// The arrays a tensor of dtype `t` is written from: float tensors (f16 and bf16 included, which
// the session rounds) from float32, integers from int32 or uint32.
DType host_dtype(DType t) {
  if (t == DType::i32 || t == DType::u32) return t;
  return DType::f32;
}

// A non-NumPy value as an ndarray: objects with __dlpack__ (PyTorch, JAX, CuPy...) through
// numpy.from_dlpack, which shares their memory; anything else through numpy.asarray.
py::array as_ndarray(const py::handle& value, const std::string& where) {
  const auto np = py::module_::import("numpy");
  if (!py::hasattr(value, "__dlpack__")) return np.attr("asarray")(value);
  try {
    return np.attr("from_dlpack")(value);
  } catch (py::error_already_set& e) {
    throw Error(where + ": the tensor cannot be read in host memory through DLPack (" +
                std::string(e.what()) + "); copy it to the CPU first");
  }
}

// `value` as a C-contiguous array of host_dtype(type.dtype) with type's shape, converted only
// where it is not one already (a float32 array in C order is passed on as it is).
py::array host_array(const TensorType& type, const py::handle& value, const std::string& where) {
  // An ndarray is taken as it is (the common case, and the cheap one: set() is called per step);
  // a tensor of another library through DLPack, viewed in place.
  py::array given = py::isinstance<py::array>(value) ? py::reinterpret_borrow<py::array>(value)
                                                     : as_ndarray(value, where);
  const std::vector<py::ssize_t> given_shape(given.shape(), given.shape() + given.ndim());
  const std::vector<py::ssize_t> expected(type.shape.begin(), type.shape.end());
  if (given_shape != expected) {
    throw ShapeError(where + ": expected shape " + shape_tuple(expected) + " (" + type.str() +
                     "), got " + shape_tuple(given_shape));
  }
  const DType host = host_dtype(type.dtype);
  const char kind = given.dtype().kind();
  const py::dtype wanted = numpy_dtype(host);
  if (given.dtype().is(wanted) && (given.flags() & py::array::c_style)) return given;
  if (!is_float(host)) {
    // Integers are range-checked and floats refused (no silent truncation of labels).
    const Array a = to_array(given, host, where);
    return to_numpy(a);
  }
  if (kind != 'f' && kind != 'i' && kind != 'u' && kind != 'b') {
    throw Error(where + ": expected numbers, got an array of dtype " +
                py::str(given.dtype()).cast<std::string>());
  }
  return py::module_::import("numpy").attr("ascontiguousarray")(given, wanted);
}

void set_value(Session& s, const std::string& name, const py::handle& value,
               const std::optional<std::string>& program) {
  const std::string where = "Session.set '" + name + "'";
  const TensorType type = s.type_of(name);
  py::array host = host_array(type, value, where);
  if (program) {
    s.set(*program, name, to_array(host, type.dtype, where));
    return;
  }
  const auto* bytes = static_cast<const std::byte*>(host.data());
  s.set_raw(name, host_dtype(type.dtype),
            std::span<const std::byte>(bytes, static_cast<size_t>(host.nbytes())));
}

py::object get_value(const Session& s, const std::string& name,
                     const std::optional<std::string>& program) {
  if (program) return to_numpy(s.get(*program, name));
  const TensorType type = s.type_of(name);
  if (is_float(type.dtype)) return adopt_vector(s.get_f32(name), type.shape);
  return to_numpy(s.get(name));
}

SessionOptions options_from(const std::string& device, bool profile, bool time_steps,
                            std::optional<bool> validation, std::optional<bool> check_numerics,
                            std::optional<bool> check_indices, bool optimize,
                            const py::object& precision, const std::vector<std::string>& preset,
                            std::optional<uint64_t> memory_budget_bytes) {
  SessionOptions o;
  o.device = device;
  o.profile = profile;
  o.time_steps = time_steps;
  o.validation = validation;
  o.check_numerics = check_numerics;
  o.check_indices = check_indices;
  o.optimize = optimize;
  o.precision = to_dtype(precision, "Session precision");
  o.preset.insert(preset.begin(), preset.end());
  o.memory_budget_bytes = memory_budget_bytes;
  return o;
}

// A Graph, or a dict of program name -> Graph or (Graph, outputs read back every step).
std::unique_ptr<Session> build(const py::object& graphs, const SessionOptions& o) {
  if (py::isinstance<Graph>(graphs)) return build_session(graphs.cast<const Graph&>(), o);
  if (!py::isinstance<py::dict>(graphs)) {
    throw Error("Session: expected a Graph or a dict of program name -> Graph");
  }
  std::vector<SessionProgram> programs;
  for (auto [key, value] : graphs.cast<py::dict>()) {
    SessionProgram p;
    p.name = key.cast<std::string>();
    if (py::isinstance<py::tuple>(value)) {
      auto pair = value.cast<py::tuple>();
      if (pair.size() != 2) {
        throw Error("Session program '" + p.name + "': expected a Graph or (Graph, [outputs])");
      }
      p.graph = &pair[0].cast<const Graph&>();
      p.read_back = pair[1].cast<std::vector<std::string>>();
    } else {
      p.graph = &value.cast<const Graph&>();
    }
    programs.push_back(std::move(p));
  }
  return build_session(programs, o);
}

// step() or submit() of a program (the session's only one when unnamed), without the GIL.
void run_program(Session& s, const std::optional<std::string>& program, bool wait) {
  py::gil_scoped_release release;
  if (program && wait) {
    s.step(*program);
  } else if (program) {
    s.submit(*program);
  } else if (wait) {
    s.step();
  } else {
    s.submit();
  }
}

void bind_memory(py::module_& m) {
  py::class_<ProgramMemory>(m, "ProgramMemory")
      .def_readonly("name", &ProgramMemory::name)
      .def_readonly("own_bytes", &ProgramMemory::own_bytes)
      .def_readonly("transient_bytes", &ProgramMemory::transient_bytes)
      .def_readonly("dispatches", &ProgramMemory::dispatches)
      .def_readonly("barriers", &ProgramMemory::barriers)
      .def_readonly("activation_bytes", &ProgramMemory::activation_bytes)
      .def_readonly("backward_bytes", &ProgramMemory::backward_bytes)
      .def_readonly("workspace_bytes", &ProgramMemory::workspace_bytes);
  py::class_<MemorySummary>(m, "MemorySummary", "What fills a session's arena.")
      .def_readonly("arena_bytes", &MemorySummary::arena_bytes)
      .def_readonly("persistent_bytes", &MemorySummary::persistent_bytes)
      .def_readonly("naive_bytes", &MemorySummary::naive_bytes)
      .def_readonly("tensors", &MemorySummary::tensors)
      .def_readonly("dispatches", &MemorySummary::dispatches)
      .def_readonly("barriers", &MemorySummary::barriers)
      .def_readonly("shared_bytes", &MemorySummary::shared_bytes)
      .def_readonly("parameter_bytes", &MemorySummary::parameter_bytes)
      .def_readonly("state_bytes", &MemorySummary::state_bytes)
      .def_readonly("programs", &MemorySummary::programs);
}

}  // namespace

void bind_session(py::module_& m) {
  bind_memory(m);
  py::class_<Session>(m, "Session",
                      "A graph compiled for a device: every step is one GPU submission.")
      .def(py::init([](const py::object& graph, const std::string& device, bool profile,
                       bool time_steps, std::optional<bool> validation,
                       std::optional<bool> check_numerics, std::optional<bool> check_indices,
                       bool optimize, const py::object& precision,
                       const std::vector<std::string>& preset,
                       std::optional<uint64_t> memory_budget_bytes) {
             return build(graph, options_from(device, profile, time_steps, validation,
                                              check_numerics, check_indices, optimize,
                                              precision, preset, memory_budget_bytes));
           }),
           py::arg("graph"), py::kw_only(), py::arg("device") = "", py::arg("profile") = false,
           py::arg("time_steps") = false, py::arg("validation") = py::none(),
           py::arg("check_numerics") = py::none(), py::arg("check_indices") = py::none(),
           py::arg("optimize") = true, py::arg("precision") = DType::f32,
           py::arg("preset") = std::vector<std::string>{},
           py::arg("memory_budget_bytes") = py::none(),
           "Compiles `graph` (or a dict of programs sharing weights) for a device: a device "
           "index or name substring, else $MN_DEVICE, else the first discrete GPU, integrated "
           "GPU or the CPU (lavapipe). With memory_budget_bytes, an arena over it is an error "
           "saying what fills it.")
      .def(
          "set",
          [](Session& s, const std::string& name, const py::object& value,
             const std::optional<std::string>& program) { set_value(s, name, value, program); },
          py::arg("name"), py::arg("value"), py::arg("program") = py::none(),
          "Sets an input, parameter or state from an array of its shape (converted to its "
          "dtype; float32 arrays in C order are read in place).")
      .def("set_scalar", &Session::set_scalar, py::arg("name"), py::arg("value"))
      .def(
          "get",
          [](const Session& s, const std::string& name, const std::optional<std::string>& program) {
            return get_value(s, name, program);
          },
          py::arg("name"), py::arg("program") = py::none(),
          "An output of the last step, or a parameter's or state's value, as a NumPy array "
          "(float32 for every float dtype).")
      .def("__setitem__", [](Session& s, const std::string& name,
                             const py::object& value) { set_value(s, name, value, std::nullopt); })
      .def("__getitem__", [](const Session& s, const std::string& name) {
        return get_value(s, name, std::nullopt);
      })
      .def(
          "step",
          [](Session& s, const std::optional<std::string>& program) {
            run_program(s, program, /*wait=*/true);
          },
          py::arg("program") = py::none(), "One step: submit and wait.")
      .def(
          "submit",
          [](Session& s, const std::optional<std::string>& program) {
            run_program(s, program, /*wait=*/false);
          },
          py::arg("program") = py::none(), "Starts a step and returns at once.")
      .def(
          "wait",
          [](Session& s) {
            py::gil_scoped_release release;
            s.wait();
          },
          "Waits for the submitted step (raises what the step raised: an IndexError...).")
      .def_property_readonly("input_names", py::overload_cast<>(&Session::input_names, py::const_))
      .def_property_readonly("output_names",
                             py::overload_cast<>(&Session::output_names, py::const_))
      .def_property_readonly("parameter_names", &Session::parameter_names)
      .def_property_readonly("state_names", &Session::state_names)
      .def_property_readonly("program_names", &Session::program_names)
      .def(
          "type_of",
          [](const Session& s, const std::string& name) {
            const TensorType t = s.type_of(name);
            return py::make_tuple(py::tuple(py::cast(t.shape)), t.dtype);
          },
          py::arg("name"), "(shape, dtype) of a tensor of the session.")
      .def_property_readonly("device_name", &Session::device_name)
      .def("memory", &Session::memory)
      .def(
          "profile",
          [](const Session& s, const std::optional<std::string>& program) {
            std::vector<std::pair<std::string, double>> out;
            for (const auto& k : program ? s.profile(*program) : s.profile()) {
              out.emplace_back(k.name, k.ms);
            }
            return out;
          },
          py::arg("program") = py::none(),
          "(kernel, milliseconds) of the last step (profile=True).")
      .def("step_gpu_ms", &Session::step_gpu_ms, py::arg("program"));
}

}  // namespace mn::python
