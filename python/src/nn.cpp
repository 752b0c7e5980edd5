// nn modules in PyTorch's layout. A Python class deriving from nn.Module declares parameters
// (register_parameter), children (by assigning a module to an attribute, as in PyTorch) and a
// forward() of any signature; its parameters take the graph names PyTorch's state_dict keys.
#include <meganeura/nn.h>
#include <meganeura/session.h>
#include <meganeura/vision.h>

#include "bindings.h"

namespace mn::python {

namespace {

using nn::Module;
using ModulePtr = std::shared_ptr<Module>;

// The Module that Python classes derive from: forward() dispatches to the Python override.
class PyModule : public Module {
 public:
  using Module::Module;
  Tensor forward(Tensor x) override { PYBIND11_OVERRIDE(Tensor, Module, forward, x); }
};

// Module's protected declarations, reached through member pointers so that Python may call
// them on any module (a Python class declares its parameters from its __init__).
struct Declarations : Module {
  static void declare_parameter(Module& m, std::string name, Shape shape, Init init, DType dtype) {
    (m.*&Declarations::register_parameter)(std::move(name), std::move(shape), init, dtype);
  }
  static void declare_buffer(Module& m, std::string name, Shape shape, Init init, DType dtype) {
    (m.*&Declarations::register_buffer)(std::move(name), std::move(shape), init, dtype,
                                        std::nullopt);
  }
  static void adopt_child(Module& m, const std::string& name, ModulePtr child) {
    (m.*&Declarations::adopt)(name, std::move(child));
  }
  static Tensor graph_tensor(const Module& m, Graph& g, const std::string& name) {
    return (m.*&Declarations::tensor)(g, name);
  }
};

py::object entries_list(const std::vector<nn::StateEntry>& entries) {
  py::list out;
  for (const auto& e : entries) {
    out.append(py::make_tuple(e.key, py::tuple(py::cast(e.slot.type.shape)), e.slot.type.dtype));
  }
  return out;
}

// A state_dict given as a dict of arrays (NumPy, or anything np.asarray takes: torch tensors on
// the CPU), each converted to its slot's dtype; keys the module does not have are passed on so
// that the strict load names them.
nn::StateDict state_dict_from(const Module& m, const py::dict& values) {
  std::map<std::string, DType> types;
  for (const auto& e : m.state_entries()) types[e.key] = e.slot.type.dtype;
  nn::StateDict out;
  for (auto [key, value] : values) {
    const auto name = key.cast<std::string>();
    const auto it = types.find(name);
    std::optional<DType> dtype;
    if (it != types.end()) dtype = it->second;
    out[name] = to_array(value, dtype, m.where() + " load_state_dict '" + name + "'");
  }
  return out;
}

void bind_module(py::module_& nn) {
  py::class_<Module, PyModule, ModulePtr>(nn, "Module",
                                          "A module in PyTorch's layout: parameters and buffers "
                                          "named as state_dict keys.")
      .def(py::init<std::string>(), py::arg("kind") = "Module")
      .def("forward", &Module::forward, py::arg("x"), py::keep_alive<0, 2>())
      .def("__call__",
           [](const py::object& self, const py::args& args, const py::kwargs& kwargs) {
             return self.attr("forward")(*args, **kwargs);
           })
      .def("__setattr__",
           [](const py::object& self, const std::string& name, const py::object& value) {
             if (py::isinstance<Module>(value)) {
               Declarations::adopt_child(self.cast<Module&>(), name, value.cast<ModulePtr>());
             }
             py::module_::import("builtins").attr("object").attr("__setattr__")(self, name, value);
           })
      .def("__getattr__",
           [](const Module& m, const std::string& name) -> ModulePtr {
             for (const auto& [child, module] : m.named_children()) {
               if (child == name) return module;
             }
             throw py::attribute_error(m.where() + " has no attribute or child '" + name + "'");
           })
      .def_property_readonly("kind", &Module::kind)
      .def_property_readonly("path", &Module::path)
      .def_property_readonly("training", &Module::training)
      .def(
          "train", [](Module& m, bool on) -> Module& { return m.train(on); },
          py::arg("mode") = true, py::return_value_policy::reference)
      .def("eval", &Module::eval, py::return_value_policy::reference)
      .def(
          "seed", [](Module& m, uint64_t s) -> Module& { return m.seed(s); }, py::arg("seed"),
          py::return_value_policy::reference,
          "Seeds the initializers of the whole tree (each parameter draws from the seed and its "
          "name).")
      .def(
          "register_parameter",
          [](Module& m, std::string name, Shape shape, const Init& init, const py::object& dtype) {
            Declarations::declare_parameter(m, std::move(name), std::move(shape), init,
                                    to_dtype(dtype, m.where() + " register_parameter"));
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init::zeros(),
          py::arg("dtype") = DType::f32)
      .def(
          "register_buffer",
          [](Module& m, std::string name, Shape shape, const Init& init, const py::object& dtype) {
            Declarations::declare_buffer(m, std::move(name), std::move(shape), init,
                                 to_dtype(dtype, m.where() + " register_buffer"));
          },
          py::arg("name"), py::arg("shape"), py::arg("init") = Init::zeros(),
          py::arg("dtype") = DType::f32)
      .def(
          "register_module",
          [](const py::object& self, const std::string& name, const py::object& child) {
            self.attr("__setattr__")(name, child);
            return child;
          },
          py::arg("name"), py::arg("module"))
      .def(
          "tensor",
          [](const Module& m, Graph& g, const std::string& name) {
            return Declarations::graph_tensor(m, g, name);
          },
          py::arg("graph"), py::arg("name"), py::keep_alive<0, 2>(),
          "The graph tensor of this module's parameter or buffer `name` in `graph`.")
      .def("reset_init", &Module::reset_init, py::arg("name"), py::arg("init"),
           "Replaces the initializer of this module's parameter or buffer `name` (as "
           "torch.nn.init's functions do) for graphs built after the call.")
      .def("named_parameters",
           [](const Module& m) { return entries_list(m.named_parameters()); },
           "(key, shape, dtype) of every parameter, in PyTorch's order.")
      .def("named_buffers", [](const Module& m) { return entries_list(m.named_buffers()); })
      .def("state_keys",
           [](const Module& m) {
             std::vector<std::string> keys;
             for (const auto& e : m.state_entries()) keys.push_back(e.key);
             return keys;
           })
      .def("named_children", &Module::named_children)
      .def("child", &Module::child, py::arg("name"))
      .def(
          "state_dict",
          [](const Module& m, const Session& s) {
            py::dict out;
            for (const auto& [key, value] : nn::state_dict(m, s)) out[py::str(key)] = to_numpy(value);
            return out;
          },
          py::arg("session"), "The session's values of this module's state, keyed as PyTorch's.")
      .def(
          "load_state_dict",
          [](const Module& m, Session& s, const py::object& source) {
            if (py::isinstance<py::dict>(source)) {
              nn::load_state_dict(m, s, state_dict_from(m, source.cast<py::dict>()));
            } else {
              nn::load_state_dict(m, s, source.cast<std::filesystem::path>());
            }
          },
          py::arg("session"), py::arg("state_dict"),
          "Strict: every key exactly once (a dict of arrays or a safetensors file PyTorch wrote).")
      .def(
          "save_state_dict",
          [](const Module& m, const Session& s, const std::filesystem::path& path) {
            nn::save_state_dict(m, s, path);
          },
          py::arg("session"), py::arg("path"),
          "A safetensors file that torch's load_state_dict(safetensors.torch.load_file(path)) "
          "reads.")
      .def("__repr__", [](const Module& m) { return "<meganeura.nn." + m.where() + ">"; });
}

void bind_containers(py::module_& nn) {
  py::class_<nn::Sequential, Module, std::shared_ptr<nn::Sequential>>(nn, "Sequential")
      .def(py::init([](const py::args& modules) {
             auto s = std::make_shared<nn::Sequential>();
             for (const auto& m : modules) s->push_back(m.cast<ModulePtr>());
             return s;
           }),
           py::keep_alive<1, 2>())
      .def("append", &nn::Sequential::push_back, py::arg("module"), py::keep_alive<1, 2>())
      .def("__len__", &nn::Sequential::size)
      .def("__getitem__", &nn::Sequential::operator[], py::arg("index"));
  py::class_<nn::ModuleList, Module, std::shared_ptr<nn::ModuleList>>(nn, "ModuleList")
      .def(py::init([](const std::vector<ModulePtr>& modules) {
             auto l = std::make_shared<nn::ModuleList>();
             for (const auto& m : modules) l->push_back(m);
             return l;
           }),
           py::arg("modules") = std::vector<ModulePtr>{}, py::keep_alive<1, 2>())
      .def("append", &nn::ModuleList::push_back, py::arg("module"), py::keep_alive<1, 2>())
      .def("__len__", &nn::ModuleList::size)
      .def("__getitem__", &nn::ModuleList::operator[], py::arg("index"));
}

template <class M>
using ModuleClass = py::class_<M, Module, std::shared_ptr<M>>;

void bind_layers(py::module_& nn) {
  ModuleClass<nn::Linear>(nn, "Linear")
      .def(py::init<int64_t, int64_t, bool>(), py::arg("in_features"), py::arg("out_features"),
           py::arg("bias") = true)
      .def_readonly("in_features", &nn::Linear::in_features)
      .def_readonly("out_features", &nn::Linear::out_features);
  ModuleClass<nn::Embedding>(nn, "Embedding")
      .def(py::init<int64_t, int64_t, std::optional<int64_t>>(), py::arg("num_embeddings"),
           py::arg("embedding_dim"), py::arg("padding_idx") = py::none())
      .def_readonly("padding_idx", &nn::Embedding::padding_idx)
      .def_readonly("num_embeddings", &nn::Embedding::num_embeddings)
      .def_readonly("embedding_dim", &nn::Embedding::embedding_dim);
  ModuleClass<nn::LayerNorm>(nn, "LayerNorm")
      .def(py::init([](const py::object& shape, double eps, bool affine, bool bias) {
             return std::make_shared<nn::LayerNorm>(to_axes(shape), eps, affine, bias);
           }),
           py::arg("normalized_shape"), py::arg("eps") = 1e-5,
           py::arg("elementwise_affine") = true, py::arg("bias") = true);
  ModuleClass<nn::RMSNorm>(nn, "RMSNorm")
      .def(py::init([](const py::object& shape, std::optional<double> eps, bool affine) {
             return std::make_shared<nn::RMSNorm>(to_axes(shape), eps, affine);
           }),
           py::arg("normalized_shape"), py::arg("eps") = py::none(),
           py::arg("elementwise_affine") = true);
  ModuleClass<nn::Conv1d>(nn, "Conv1d")
      .def(py::init([](int64_t in, int64_t out, int64_t kernel_size, int64_t stride,
                       int64_t padding, int64_t dilation, int64_t groups, bool bias) {
             return std::make_shared<nn::Conv1d>(
                 in, out, kernel_size, nn::Conv1dConfig{stride, padding, dilation, groups, bias});
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("groups") = 1, py::arg("bias") = true);
  ModuleClass<nn::Conv2d>(nn, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, const py::object& kernel_size,
                       const py::object& stride, const py::object& padding,
                       const py::object& dilation, int64_t groups, bool bias) {
             nn::Conv2dConfig c;
             c.stride = to_pair(stride, "Conv2d stride");
             c.padding = to_pair(padding, "Conv2d padding");
             c.dilation = to_pair(dilation, "Conv2d dilation");
             c.groups = groups;
             c.bias = bias;
             return std::make_shared<nn::Conv2d>(in, out, to_pair(kernel_size, "Conv2d kernel_size"),
                                                 c);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("padding") = 0, py::arg("dilation") = 1,
           py::arg("groups") = 1, py::arg("bias") = true);
  ModuleClass<nn::BatchNorm2d>(nn, "BatchNorm2d")
      .def(py::init<int64_t, double, double, bool>(), py::arg("num_features"),
           py::arg("eps") = 1e-5, py::arg("momentum") = 0.1, py::arg("affine") = true);
  ModuleClass<nn::Dropout>(nn, "Dropout").def(py::init<double>(), py::arg("p") = 0.5);
  ModuleClass<nn::ReLU>(nn, "ReLU").def(py::init<>());
  ModuleClass<nn::SiLU>(nn, "SiLU").def(py::init<>());
  ModuleClass<nn::GELU>(nn, "GELU").def(py::init([](const std::string& approximate) {
                                           if (approximate != "none" && approximate != "tanh") {
                                             throw Error("GELU: approximate='" + approximate +
                                                         "', expected 'none' or 'tanh'");
                                           }
                                           return std::make_shared<nn::GELU>(
                                               approximate == "tanh" ? GeluApprox::tanh
                                                                     : GeluApprox::none);
                                         }),
                                         py::arg("approximate") = "none");
  ModuleClass<nn::Flatten>(nn, "Flatten").def(py::init<int64_t>(), py::arg("start_dim") = 1);
}

void bind_attention_modules(py::module_& nn) {
  ModuleClass<nn::MultiheadAttention>(nn, "MultiheadAttention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias) {
             return std::make_shared<nn::MultiheadAttention>(
                 embed_dim, num_heads, nn::MultiheadAttentionConfig{dropout, bias});
           }),
           py::arg("embed_dim"), py::arg("num_heads"), py::arg("dropout") = 0.0,
           py::arg("bias") = true)
      .def(
          "forward",
          [](nn::MultiheadAttention& a, Tensor query, std::optional<Tensor> key,
             std::optional<Tensor> value, std::optional<Tensor> mask, bool causal,
             std::optional<Tensor> key_padding_mask) {
            return a.forward(query, key.value_or(query), value.value_or(key.value_or(query)),
                             mask.value_or(Tensor{}), causal, key_padding_mask.value_or(Tensor{}));
          },
          py::arg("query"), py::arg("key") = py::none(), py::arg("value") = py::none(),
          py::arg("mask") = py::none(), py::arg("causal") = false,
          py::arg("key_padding_mask") = py::none(), py::keep_alive<0, 2>(),
          "Inputs [B, L, E] (batch first); key and value default to the query. "
          "key_padding_mask [B, Lk]: integers, nonzero where a key is left out (PyTorch's "
          "bool), or floats added to the scores.");
  ModuleClass<nn::TransformerBlock>(nn, "TransformerBlock")
      .def(py::init([](int64_t d_model, int64_t nhead, int64_t dim_feedforward, double dropout,
                       const std::string& activation, double eps, bool bias) {
             if (activation != "relu" && activation != "gelu") {
               throw Error("TransformerBlock: activation='" + activation +
                           "', expected 'relu' or 'gelu'");
             }
             nn::TransformerBlockConfig c;
             c.dim_feedforward = dim_feedforward;
             c.dropout = dropout;
             c.gelu = activation == "gelu";
             c.layer_norm_eps = eps;
             c.bias = bias;
             return std::make_shared<nn::TransformerBlock>(d_model, nhead, c);
           }),
           py::arg("d_model"), py::arg("nhead"), py::arg("dim_feedforward") = 2048,
           py::arg("dropout") = 0.1, py::arg("activation") = "relu",
           py::arg("layer_norm_eps") = 1e-5, py::arg("bias") = true)
      .def(
          "forward",
          [](nn::TransformerBlock& b, Tensor x, std::optional<Tensor> mask, bool causal,
             std::optional<Tensor> key_padding_mask) {
            return b.forward(x, mask.value_or(Tensor{}), causal,
                             key_padding_mask.value_or(Tensor{}));
          },
          py::arg("x"), py::arg("mask") = py::none(), py::arg("causal") = false,
          py::arg("src_key_padding_mask") = py::none(), py::keep_alive<0, 2>(),
          "torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=True).");
}

}  // namespace

void bind_nn(py::module_& nn) {
  bind_module(nn);
  bind_containers(nn);
  bind_layers(nn);
  bind_attention_modules(nn);
}

void bind_vision(py::module_& vision) {
  vision.def(
      "resnet",
      [](const py::object& depth, int64_t num_classes, int64_t in_channels,
         bool small_input_stem) {
        vision::ResNetConfig c;
        c.depth = py::isinstance<py::str>(depth) ? vision::resnet_depth(depth.cast<std::string>())
                                                 : depth.cast<int>();
        c.num_classes = num_classes;
        c.in_channels = in_channels;
        c.small_input_stem = small_input_stem;
        return vision::resnet(c);
      },
      py::arg("depth") = 18, py::kw_only(), py::arg("num_classes") = 1000,
      py::arg("in_channels") = 3, py::arg("small_input_stem") = false,
      "torchvision.models.resnet18/34/50/101/152 (depth as a number or 'resnet50'), its "
      "state_dict keys; small_input_stem: a 3x3 stride-1 stem without max pool for 28x28 or "
      "32x32 images.");
}

}  // namespace mn::python
