// The extension module meganeura._core; python/meganeura/__init__.py re-exports it.
#include "bindings.h"

PYBIND11_MODULE(_core, m) {
  using namespace mn::python;
  m.doc() = "meganeura: train and run neural networks on any Vulkan GPU.";
  auto nn = m.def_submodule("nn", "Modules in PyTorch's layout.");
  auto optim = m.def_submodule("optim", "Optimizers, schedules and the update counter.");
  auto data = m.def_submodule("data", "Data sets and tensor files.");
  auto reference = m.def_submodule("reference", "The CPU reference interpreter.");
  auto lm = m.def_submodule("lm", "Language models: tokenizers, generation, chat.");
  auto vision = m.def_submodule("vision", "Vision models in torchvision's layout.");
  auto distributed =
      m.def_submodule("distributed", "Data-parallel training over processes (MPI, NCCL).");
  bind_errors(m);
  bind_graph(m);
  bind_ops(m);
  bind_tensor_methods(m);
  bind_session(m);
  bind_optim(m, optim);
  bind_nn(nn);
  bind_vision(vision);
  bind_data(data);
  bind_trainer(m, data);
  bind_reference(reference);
  bind_lm(lm);
  bind_onnx(m);
  bind_distributed(distributed);
}
