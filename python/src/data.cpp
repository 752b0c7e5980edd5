// Data sets and tensor files: Fashion-MNIST (Debian's dataset-fashion-mnist) and safetensors
// as NumPy arrays.
#include <meganeura/audio.h>
#include <meganeura/data.h>
#include <meganeura/image.h>

#include <algorithm>

#include "bindings.h"

namespace mn::python {

namespace {

py::dict arrays_dict(const std::map<std::string, Array>& arrays) {
  py::dict out;
  for (const auto& [name, a] : arrays) out[py::str(name)] = to_numpy(a);
  return out;
}

// A classification data set from arrays: inputs [N, ...] (float32) and integer labels [N] in
// [0, classes); classes unset: the largest label + 1.
std::shared_ptr<const Dataset> dataset_of(const py::handle& inputs, const py::handle& labels,
                                          std::optional<int64_t> classes) {
  const auto np = py::module_::import("numpy");
  py::array_t<float, py::array::c_style | py::array::forcecast> x(np.attr("asarray")(inputs));
  const Array y = to_array(labels, DType::i32, "DataLoader labels");
  if (x.ndim() < 1 || y.rank() != 1 || x.shape(0) != y.shape[0]) {
    throw ShapeError("DataLoader: expected inputs [N, ...] and labels [N], got inputs " +
                     shape_tuple({x.shape(), x.shape() + x.ndim()}) + " and labels " +
                     shape_str(y.shape));
  }
  auto d = std::make_shared<Dataset>();
  d->sample_shape.assign(x.shape() + 1, x.shape() + x.ndim());
  d->inputs.assign(x.data(), x.data() + x.size());
  int64_t top = -1;
  for (double v : y.data) {
    d->labels.push_back(static_cast<int32_t>(v));
    top = std::max<int64_t>(top, static_cast<int64_t>(v));
  }
  for (int64_t c = 0; c < classes.value_or(top + 1); ++c) d->class_names.push_back(std::to_string(c));
  d->validate();
  return d;
}

// An image given as a path (PNG or JPEG) or as uint8 pixels [H, W, 3].
Image image_of(const py::object& value) {
  if (py::isinstance<py::str>(value) || py::hasattr(value, "__fspath__")) {
    return read_image(py::str(py::module_::import("os").attr("fspath")(value)).cast<std::string>());
  }
  py::array_t<uint8_t, py::array::c_style | py::array::forcecast> a(value);
  if (a.ndim() != 3 || a.shape(2) != 3) {
    throw ShapeError("image: expected uint8 pixels [height, width, 3], got shape " +
                     shape_tuple({a.shape(), a.shape() + a.ndim()}));
  }
  Image image;
  image.height = a.shape(0);
  image.width = a.shape(1);
  image.pixels.assign(a.data(), a.data() + a.size());
  return image;
}

void bind_images(py::module_& data) {
  data.def(
      "read_image",
      [](const std::filesystem::path& path) {
        Image image = read_image(path);
        const Shape shape{image.height, image.width, 3};
        return adopt_vector(std::move(image.pixels), shape);
      },
      py::arg("path"), "A PNG or JPEG file as uint8 RGB pixels [height, width, 3].");
  data.def(
      "imagenet_preprocess",
      [](const py::object& image) { return to_numpy(imagenet_preprocess(image_of(image))); },
      py::arg("image"),
      "torchvision's Resize(256), CenterCrop(224), ToTensor, Normalize(ImageNet) on a PIL "
      "image, computed as PIL and torchvision do: float32 [3, 224, 224] from a path or uint8 "
      "pixels [H, W, 3].");
}

void bind_audio(py::module_& data) {
  data.def(
      "read_wav",
      [](const std::filesystem::path& path) {
        Audio a = read_wav(path);
        const Shape shape{static_cast<int64_t>(a.samples.size())};
        return py::make_tuple(adopt_vector(std::move(a.samples), shape), a.sample_rate, a.channels);
      },
      py::arg("path"),
      "A WAV file (PCM 16/24/32 bits or float32) as (float32 mono samples, sample rate, the "
      "file's channel count); channels are averaged.");
  data.def(
      "log_mel_spectrogram",
      [](const py::object& samples, int64_t sample_rate, int64_t n_mels, int64_t pad_to_samples) {
        py::array_t<float, py::array::c_style | py::array::forcecast> x(
            py::module_::import("numpy").attr("asarray")(samples));
        if (x.ndim() != 1) throw ShapeError("log_mel_spectrogram: expected 1-D samples");
        LogMelOptions o;
        o.n_mels = n_mels;
        o.pad_to_samples = pad_to_samples;
        return to_numpy(log_mel_spectrogram(std::span<const float>(x.data(), static_cast<size_t>(x.size())),
                                            sample_rate, o));
      },
      py::arg("samples"), py::arg("sample_rate"), py::arg("n_mels") = 80,
      py::arg("pad_to_samples") = 480000,
      "Whisper's log-mel features float32 [n_mels, frames] as transformers' "
      "WhisperFeatureExtractor computes them (pad_to_samples=0: the audio's own length).");
}

}  // namespace

void bind_data(py::module_& data) {
  bind_images(data);
  bind_audio(data);
  py::class_<DataLoader>(data, "DataLoader",
                         "Batches of a classification data set, epoch after epoch, in the order "
                         "the C++ trainer uses (a pure function of the seed and the epoch).")
      .def(py::init([](const py::object& inputs, const py::object& labels, int64_t batch_size,
                       bool shuffle, uint64_t seed, bool drop_last, std::optional<int64_t> classes) {
             if (batch_size < 1) throw Error("DataLoader: batch_size must be >= 1");
             DataLoaderOptions o;
             o.batch_size = batch_size;
             o.shuffle = shuffle;
             o.seed = seed;
             o.drop_last = drop_last;
             return std::make_unique<DataLoader>(dataset_of(inputs, labels, classes), o);
           }),
           py::arg("inputs"), py::arg("labels"), py::kw_only(), py::arg("batch_size") = 32,
           py::arg("shuffle") = true, py::arg("seed") = 0, py::arg("drop_last") = false,
           py::arg("classes") = py::none())
      .def_property_readonly("batches_per_epoch", &DataLoader::batches_per_epoch)
      .def(
          "next",
          [](DataLoader& l) {
            Batch b;
            {
              py::gil_scoped_release release;
              b = l.next();
            }
            const Shape labels_shape{b.size()};
            py::dict out;
            out["inputs"] = adopt_vector(std::move(b.inputs), b.inputs_shape);
            out["labels"] = adopt_vector(std::move(b.labels), labels_shape);
            out["epoch"] = b.epoch;
            out["step"] = b.step;
            out["indices"] = b.indices;
            return out;
          },
          "The next batch: {'inputs', 'labels', 'epoch', 'step', 'indices'} (the last batch of "
          "an epoch may be short unless drop_last).")
      .def_property_readonly("position",
                             [](const DataLoader& l) {
                               const auto p = l.position();
                               return py::make_tuple(p.epoch, p.step);
                             })
      .def("seek", &DataLoader::seek, py::arg("epoch"), py::arg("step") = 0)
      .def("epoch_order", &DataLoader::epoch_order, py::arg("epoch"));
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
