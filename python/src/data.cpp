// Data sets and tensor files: Fashion-MNIST (Debian's dataset-fashion-mnist) and safetensors
// as NumPy arrays.
#include <meganeura/data.h>

#include "bindings.h"

namespace mn::python {

namespace {

py::dict arrays_dict(const std::map<std::string, Array>& arrays) {
  py::dict out;
  for (const auto& [name, a] : arrays) out[py::str(name)] = to_numpy(a);
  return out;
}

}  // namespace

void bind_data(py::module_& data) {
  data.def(
      "load_fashion_mnist",
      [](const std::string& split, const std::string& layout, const std::filesystem::path& dir,
         std::optional<int64_t> max_samples) {
        if (split != "train" && split != "test") {
          throw Error("load_fashion_mnist: split='" + split + "', expected 'train' or 'test'");
        }
        if (layout != "flat" && layout != "nchw") {
          throw Error("load_fashion_mnist: layout='" + layout + "', expected 'flat' or 'nchw'");
        }
        Dataset d = load_fashion_mnist(split == "train" ? Split::train : Split::test,
                                       layout == "flat" ? ImageLayout::flat : ImageLayout::nchw,
                                       dir, max_samples);
        const Shape shape = d.inputs_shape();
        const Shape labels_shape{d.size()};
        return py::make_tuple(adopt_vector(std::move(d.inputs), shape),
                              adopt_vector(std::move(d.labels), labels_shape));
      },
      py::arg("split") = "train", py::arg("layout") = "flat", py::arg("dir") = "",
      py::arg("max_samples") = py::none(),
      "(images float32 [N, 784] or [N, 1, 28, 28] in [0, 1], labels int32 [N]); the files are "
      "looked for in `dir`, $MN_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist.");
  data.def("fashion_mnist_classes", &fashion_mnist_classes);
  data.def(
      "load_safetensors",
      [](const std::filesystem::path& path) { return arrays_dict(load_safetensors(path)); },
      py::arg("path"), "Every tensor of a safetensors file, by name.");
  data.def(
      "save_safetensors",
      [](const std::filesystem::path& path, const py::dict& tensors,
         const std::map<std::string, std::string>& metadata) {
        std::map<std::string, Array> arrays;
        for (auto [key, value] : tensors) {
          const auto name = key.cast<std::string>();
          arrays[name] = to_array(value, std::nullopt, "save_safetensors '" + name + "'");
        }
        save_safetensors(path, arrays, metadata);
      },
      py::arg("path"), py::arg("tensors"),
      py::arg("metadata") = std::map<std::string, std::string>{},
      "Writes the arrays (float32, int32, uint32) atomically: a failure leaves the old file.");
}

}  // namespace mn::python
