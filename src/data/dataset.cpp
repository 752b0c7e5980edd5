// In-memory data sets and MNIST-format loading (Fashion-MNIST from the Debian package).
#include <meganeura/data.h>
#include <meganeura/error.h>

#include <cstdlib>
#include <system_error>

namespace mn {

Shape Dataset::inputs_shape() const {
  Shape s{size()};
  s.insert(s.end(), sample_shape.begin(), sample_shape.end());
  return s;
}

Dataset Dataset::slice(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin > size() || count > size() - begin) {
    throw Error("Dataset::slice: samples [" + std::to_string(begin) + ", " +
                std::to_string(begin + count) + ") are outside the " + std::to_string(size()) +
                " samples");
  }
  Dataset out;
  out.sample_shape = sample_shape;
  out.class_names = class_names;
  const int64_t n = sample_numel();
  out.inputs.assign(inputs.begin() + begin * n, inputs.begin() + (begin + count) * n);
  out.labels.assign(labels.begin() + begin, labels.begin() + begin + count);
  return out;
}

void Dataset::validate() const {
  for (int64_t d : sample_shape) {
    if (d <= 0)
      throw Error("Dataset: sample shape " + shape_str(sample_shape) + " has an empty axis");
  }
  if (static_cast<int64_t>(inputs.size()) != size() * sample_numel()) {
    throw Error("Dataset: " + std::to_string(inputs.size()) + " input values for " +
                std::to_string(size()) + " samples of shape " + shape_str(sample_shape));
  }
  const auto classes = static_cast<int64_t>(class_names.size());
  for (int64_t i = 0; i < size(); ++i) {
    if (labels[i] < 0 || (classes > 0 && labels[i] >= classes)) {
      throw Error("Dataset: label " + std::to_string(labels[i]) + " of sample " +
                  std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
    }
  }
}

Dataset load_idx_images(const std::filesystem::path& images, const std::filesystem::path& labels,
                        ImageLayout layout, std::vector<std::string> class_names,
                        std::optional<int64_t> max_samples) {
  // The headers agree before any data is read, so a limit never hides a mismatch.
  const IdxInfo img_info = read_idx_info(images), lab_info = read_idx_info(labels);
  if (img_info.type != ElemType::u8 || img_info.shape.size() != 3) {
    throw FormatError(images.string() + ": expected u8 images [N, rows, cols], got " +
                      elem_type_name(img_info.type) + " " + shape_str(img_info.shape));
  }
  if (lab_info.type != ElemType::u8 || lab_info.shape.size() != 1) {
    throw FormatError(labels.string() + ": expected u8 labels [N], got " +
                      elem_type_name(lab_info.type) + " " + shape_str(lab_info.shape));
  }
  if (lab_info.shape[0] != img_info.shape[0]) {
    throw FormatError(labels.string() + ": " + std::to_string(lab_info.shape[0]) +
                      " labels for the " + std::to_string(img_info.shape[0]) + " images of " +
                      images.string());
  }
  const RawTensor img = read_idx(images, max_samples);
  const RawTensor lab = read_idx(labels, max_samples);
  const int64_t n = img.shape[0], rows = img.shape[1], cols = img.shape[2];
  if (rows == 0 || cols == 0) {
    throw FormatError(images.string() + ": images of " + std::to_string(rows) + "x" +
                      std::to_string(cols) + " pixels are empty");
  }
  Dataset d;
  d.sample_shape = layout == ImageLayout::flat ? Shape{rows * cols} : Shape{1, rows, cols};
  d.class_names = std::move(class_names);
  d.inputs.resize(img.bytes.size());
  for (size_t i = 0; i < img.bytes.size(); ++i)
    d.inputs[i] = static_cast<float>(img.bytes[i]) / 255.0f;
  d.labels.resize(static_cast<size_t>(n));
  const auto classes = static_cast<int64_t>(d.class_names.size());
  for (int64_t i = 0; i < n; ++i) {
    d.labels[i] = lab.bytes[i];
    if (classes > 0 && d.labels[i] >= classes) {
      throw FormatError(labels.string() + ": label " + std::to_string(d.labels[i]) + " at byte " +
                        std::to_string(8 + i) + " is not one of the " + std::to_string(classes) +
                        " classes");
    }
  }
  return d;
}

std::filesystem::path fashion_mnist_dir(const std::filesystem::path& dir) {
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("MN_FASHION_MNIST_DIR"); env && *env) return env;
  return "/usr/share/datasets/fashion-mnist";
}

const std::vector<std::string>& fashion_mnist_classes() {
  static const std::vector<std::string> names = {"T-shirt/top", "Trouser",   "Pullover", "Dress",
                                                 "Coat",        "Sandal",    "Shirt",    "Sneaker",
                                                 "Bag",         "Ankle boot"};
  return names;
}

namespace {

// The file as shipped (gzip) or gunzipped by the user.
std::filesystem::path find_file(const std::filesystem::path& dir, const std::string& stem,
                                const std::filesystem::path& given) {
  std::error_code ec;
  for (const std::string& name : {stem + ".gz", stem}) {
    if (std::filesystem::is_regular_file(dir / name, ec)) return dir / name;
  }
  std::string source = !given.empty() ? "the directory passed to load_fashion_mnist"
                       : std::getenv("MN_FASHION_MNIST_DIR") && *std::getenv("MN_FASHION_MNIST_DIR")
                           ? "$MN_FASHION_MNIST_DIR"
                           : "the default location";
  throw FormatError("Fashion-MNIST not found: " + (dir / (stem + ".gz")).string() + " (" + source +
                    ") does not exist; install the Debian package " +
                    "dataset-fashion-mnist (apt install dataset-fashion-mnist), or point "
                    "MN_FASHION_MNIST_DIR at a directory holding " +
                    stem + "[.gz]");
}

}  // namespace

Dataset load_fashion_mnist(Split split, ImageLayout layout, const std::filesystem::path& dir,
                           std::optional<int64_t> max_samples) {
  const std::filesystem::path root = fashion_mnist_dir(dir);
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const auto images = find_file(root, prefix + "-images-idx3-ubyte", dir);
  const auto labels = find_file(root, prefix + "-labels-idx1-ubyte", dir);
  return load_idx_images(images, labels, layout, fashion_mnist_classes(), max_samples);
}

}  // namespace mn
