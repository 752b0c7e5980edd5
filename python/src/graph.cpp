// The graph language: dtypes, initializers, Graph and Tensor handles, gradients.
//
// A Tensor points at its Graph without owning it, so every Tensor handed to Python keeps the
// Python object it was made from alive (the graph, or the first tensor of the op that made it):
// a graph lives as long as any of its tensors.
#include <meganeura/autodiff.h>
#include <meganeura/graph.h>

#include <sstream>

#include "bindings.h"

namespace mn::python {

namespace {

std::string tensor_repr(const Tensor& t) {
  if (!t.valid()) return "Tensor(<none>)";
  const Node& n = t.graph().node(t.id());
  std::string s = "Tensor(%" + std::to_string(t.id()) + " = " + std::string(n.op_name());
  if (!n.name.empty()) s += " '" + n.name + "'";
  return s + " : " + t.type().str() + ")";
}

py::tuple shape_of(const Tensor& t) {
  py::tuple out(t.shape().size());
  for (size_t i = 0; i < t.shape().size(); ++i) out[i] = t.shape()[i];
  return out;
}

std::vector<std::string> names_of(const Graph& g, const std::vector<NodeId>& ids) {
  std::vector<std::string> out;
  for (NodeId id : ids) out.push_back(g.node(id).name);
  return out;
}

void bind_init(py::module_& m) {
  py::class_<Init>(m, "Init",
                   "A parameter initializer (deterministic for a seed on every machine).")
      .def_static("zeros", &Init::zeros)
      .def_static("ones", &Init::ones)
      .def_static("constant", &Init::constant, py::arg("value"))
      .def_static("normal", &Init::normal, py::arg("mean") = 0.0, py::arg("std") = 1.0,
                  py::arg("seed") = 0)
      .def_static("uniform", &Init::uniform, py::arg("low") = 0.0, py::arg("high") = 1.0,
                  py::arg("seed") = 0)
      .def_static("kaiming_normal", &Init::kaiming_normal, py::arg("seed") = 0,
                  py::arg("negative_slope") = 0.0)
      .def_static("kaiming_uniform", &Init::kaiming_uniform, py::arg("seed") = 0,
                  py::arg("negative_slope") = 0.0)
      .def_static("xavier_normal", &Init::xavier_normal, py::arg("seed") = 0,
                  py::arg("gain") = 1.0)
      .def_static("xavier_uniform", &Init::xavier_uniform, py::arg("seed") = 0,
                  py::arg("gain") = 1.0)
      .def_static("sinusoids", &Init::sinusoids, py::arg("max_timescale") = 10000.0)
      .def("values",
           [](const Init& init, const Shape& shape, const py::object& dtype) {
             return to_numpy(initialize(init, shape, to_dtype(dtype, "Init.values")));
           },
           py::arg("shape"), py::arg("dtype") = DType::f32,
           "The values this initializer gives a tensor of `shape`.")
      .def("__eq__", [](const Init& a, const Init& b) { return a == b; })
      .def("__repr__", [](const Init& i) {
        std::ostringstream os;
        os << "Init(kind=" << static_cast<int>(i.kind) << ", a=" << i.a << ", b=" << i.b
           << ", seed=" << i.seed << ")";
        return os.str();
      });
}

void bind_graph_class(py::module_& m) {
  py::class_<Graph>(m, "Graph",
                    "A computation graph. Tensors are handles to its nodes; ops on them append "
                    "nodes.")
      .def(py::init<>())
      .def(
          "input",
          [](Graph& g, const std::string& name, const Shape& shape, const py::object& dtype) {
            return g.input(name, shape, to_dtype(dtype, "Graph.input '" + name + "'"));
          },
          py::arg("name"), py::arg("shape"), py::arg("dtype") = DType::f32, py::keep_alive<0, 1>(),
          "A named input, set before each step (Session.set).")
      .def(
          "parameter",
          [](Graph& g, const std::string& name, const Shape& shape, const Init& init,
             const py::object& dtype) {
            return g.parameter(name, shape, init,
                               to_dtype(dtype, "Graph.parameter '" + name + "'"));
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init::zeros(),
          py::arg("dtype") = DType::f32, py::keep_alive<0, 1>(),
          "A trainable tensor, kept across steps.")
      .def(
          "state",
          [](Graph& g, const std::string& name, const Shape& shape, const Init& init,
             const py::object& dtype) {
            return g.state(name, shape, init, to_dtype(dtype, "Graph.state '" + name + "'"));
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init::zeros(),
          py::arg("dtype") = DType::f32, py::keep_alive<0, 1>(),
          "A persistent non-trainable tensor; it changes only through assign().")
      .def(
          "constant",
          [](Graph& g, const py::object& value, const py::object& dtype) {
            std::optional<DType> t;
            if (!dtype.is_none()) t = to_dtype(dtype, "Graph.constant");
            return g.constant(to_array(value, t, "Graph.constant"));
          },
          py::arg("value"), py::arg("dtype") = py::none(), py::keep_alive<0, 1>(),
          "A constant tensor holding `value` (a NumPy array or nested lists).")
      .def(
          "scalar",
          [](Graph& g, double value, const py::object& dtype) {
            return g.scalar(value, to_dtype(dtype, "Graph.scalar"));
          },
          py::arg("value"), py::arg("dtype") = DType::f32, py::keep_alive<0, 1>())
      .def("assign", &Graph::assign, py::arg("target"), py::arg("value"),
           "After each step `target` (a parameter or state) takes `value`.")
      .def("output", &Graph::output, py::arg("name"), py::arg("tensor"),
           "Marks `tensor` as the output `name`, read with Session.get(name).")
      .def("__len__", &Graph::size)
      .def("__str__", &Graph::str)
      .def("__repr__",
           [](const Graph& g) { return "<meganeura.Graph of " + std::to_string(g.size()) + " nodes>"; })
      .def_property_readonly("inputs", [](const Graph& g) { return names_of(g, g.inputs()); })
      .def_property_readonly("parameters",
                             [](const Graph& g) { return names_of(g, g.parameters()); })
      .def_property_readonly("states", [](const Graph& g) { return names_of(g, g.states()); })
      .def_property_readonly("outputs",
                             [](const Graph& g) {
                               std::vector<std::string> out;
                               for (const auto& [name, id] : g.outputs()) out.push_back(name);
                               return out;
                             })
      .def(
          "tensor",
          [](Graph& g, const std::string& name) {
            if (auto id = g.find_input(name)) return g.tensor(*id);
            if (auto id = g.find_persistent(name)) return g.tensor(*id);
            if (auto id = g.find_output(name)) return g.tensor(*id);
            throw Error("Graph.tensor: no input, parameter, state or output named '" + name + "'");
          },
          py::arg("name"), py::keep_alive<0, 1>(),
          "The input, parameter, state or output of that name.")
      .def("hash", &Graph::hash, "A hash of the structure, attributes and types.");
}

void bind_tensor_class(py::module_& m) {
  py::class_<Tensor>(m, "Tensor", "A handle to one node of a Graph.")
      .def_property_readonly("shape", &shape_of)
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def("numel", &Tensor::numel)
      .def("dim", &Tensor::dim, py::arg("axis"))
      .def_property_readonly("id", &Tensor::id)
      .def_property_readonly("op", [](const Tensor& t) {
        return std::string(t.graph().node(t.id()).op_name());
      })
      .def_property_readonly("name", [](const Tensor& t) { return t.graph().node(t.id()).name; })
      .def_property_readonly(
          "graph", [](const Tensor& t) -> Graph& { return t.graph(); },
          py::return_value_policy::reference, "The Graph this tensor belongs to.")
      .def("__repr__", &tensor_repr)
      .def("__len__", [](const Tensor& t) {
        if (t.rank() == 0) throw Error("len() of a 0-d tensor");
        return t.shape()[0];
      })
      .def("__bool__", [](const Tensor&) -> bool {
        throw Error(
            "a graph Tensor has no value until a session runs it: use mn.where for a "
            "condition, or Session.get for the value");
      })
      .def("__hash__", [](const Tensor& t) {
        return std::hash<const void*>()(&t.graph()) ^ static_cast<size_t>(t.id());
      })
      .def("__eq__", [](const Tensor& a, const Tensor& b) { return a == b; },
           "Identity of the node (mn.eq compares values).");
}

}  // namespace

py::list tensor_list(const std::vector<Tensor>& tensors, const py::handle& owner) {
  py::list out;
  for (const Tensor& t : tensors) {
    py::object obj = py::cast(t);
    py::detail::keep_alive_impl(obj, owner);
    out.append(obj);
  }
  return out;
}

void bind_graph(py::module_& m) {
  py::enum_<DType>(m, "DType", "Element types: f16 and bf16 are storage, arithmetic is f32.")
      .value("f32", DType::f32)
      .value("f16", DType::f16)
      .value("bf16", DType::bf16)
      .value("i32", DType::i32)
      .value("u32", DType::u32)
      .export_values();
  bind_init(m);
  bind_tensor_class(m);
  bind_graph_class(m);
  m.def(
      "gradients",
      [](py::object loss, const std::vector<Tensor>& wrt, std::optional<Tensor> cotangent) {
        return tensor_list(gradients(loss.cast<Tensor>(), wrt, cotangent.value_or(Tensor{})),
                           loss);
      },
      py::arg("loss"), py::arg("wrt"), py::arg("cotangent") = py::none(),
      "d(loss)/d(w) for each w of `wrt`, as graph tensors (reverse mode).");
}

}  // namespace mn::python
