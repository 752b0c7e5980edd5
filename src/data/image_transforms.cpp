// Image transforms on 8-bit RGB images as they run on PIL images: PIL's resampling
// (Resample.c: a filter of support 1 (bilinear) or 3 (Lanczos) widened by the scale when
// shrinking, coefficients normalized and turned into 22-bit fixed point, the horizontal pass
// first, each pass rounded to 8 bits), the center crop, and ToTensor + Normalize.
#include <algorithm>
#include <cmath>
#include <string>

#include <meganeura/error.h>
#include <meganeura/image.h>

namespace mn {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

// One output pixel's taps: the first input index and the fixed-point weights.
struct Taps {
  int64_t first = 0;
  std::vector<int32_t> weights;
};

double sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= 3.14159265358979323846;  // PIL's M_PI
  return std::sin(x) / x;
}

// PIL's filters: (support, weight at a distance x).
double filter_support(Resample f) { return f == Resample::lanczos ? 3.0 : 1.0; }
double filter_weight(Resample f, double x) {
  if (f == Resample::lanczos) return (-3.0 <= x && x < 3.0) ? sinc(x) * sinc(x / 3.0) : 0.0;
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// PIL's precompute_coeffs over the whole input, then normalize_coeffs_8bpc.
std::vector<Taps> filter_taps(Resample filter, int64_t in_size, int64_t out_size) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_support(filter) * filter_scale;
  std::vector<Taps> taps(static_cast<size_t>(out_size));
  std::vector<double> k;
  for (int64_t xx = 0; xx < out_size; ++xx) {
    const double center = (static_cast<double>(xx) + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    const int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t xmax = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
    k.assign(static_cast<size_t>(std::max<int64_t>(xmax, 0)), 0.0);
    double total = 0.0;
    for (int64_t x = 0; x < xmax; ++x) {
      const double w =
          filter_weight(filter, (static_cast<double>(x + xmin) - center + 0.5) * ss);
      k[static_cast<size_t>(x)] = w;
      total += w;
    }
    Taps& tap = taps[static_cast<size_t>(xx)];
    tap.first = xmin;
    for (double w : k) {
      const double v = total != 0.0 ? w / total : w;
      const double fixed = v * static_cast<double>(1 << kPrecisionBits);
      tap.weights.push_back(static_cast<int32_t>(v < 0 ? -0.5 + fixed : 0.5 + fixed));
    }
  }
  return taps;
}

uint8_t clip8(int64_t v) {
  const int64_t shifted = v >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(shifted, 0, 255));
}

// One pass along x (horizontal) or y (vertical), PIL's ImagingResampleHorizontal/Vertical_8bpc.
Image resample_pass(const Image& in, int64_t out_width, int64_t out_height, bool horizontal,
                    Resample filter) {
  const std::vector<Taps> taps = horizontal ? filter_taps(filter, in.width, out_width)
                                            : filter_taps(filter, in.height, out_height);
  Image out;
  out.width = out_width;
  out.height = out_height;
  out.pixels.resize(static_cast<size_t>(out_width * out_height * 3));
  for (int64_t y = 0; y < out_height; ++y) {
    for (int64_t x = 0; x < out_width; ++x) {
      const Taps& t = taps[static_cast<size_t>(horizontal ? x : y)];
      for (int c = 0; c < 3; ++c) {
        int64_t sum = int64_t{1} << (kPrecisionBits - 1);
        for (size_t i = 0; i < t.weights.size(); ++i) {
          const int64_t at = t.first + static_cast<int64_t>(i);
          sum += static_cast<int64_t>(horizontal ? in.at(y, at, c) : in.at(at, x, c)) * t.weights[i];
        }
        out.pixels[static_cast<size_t>((y * out_width + x) * 3 + c)] = clip8(sum);
      }
    }
  }
  return out;
}

}  // namespace

Image resize(const Image& image, int64_t width, int64_t height, Resample filter) {
  if (width < 1 || height < 1) {
    throw Error("resize: size " + std::to_string(width) + " x " + std::to_string(height) +
                " is not positive");
  }
  if (image.width < 1 || image.height < 1) throw Error("resize: empty image");
  // PIL skips a pass whose size does not change.
  Image h = width == image.width ? image : resample_pass(image, width, image.height, true, filter);
  return height == image.height ? h : resample_pass(h, width, height, false, filter);
}

Image resize_bilinear(const Image& image, int64_t width, int64_t height) {
  return resize(image, width, height, Resample::bilinear);
}

Image resize_shorter_side(const Image& image, int64_t size) {
  if (size < 1) throw Error("resize_shorter_side: size " + std::to_string(size) + " is not positive");
  const int64_t shorter = std::min(image.width, image.height);
  const int64_t longer = std::max(image.width, image.height);
  if (shorter < 1) throw Error("resize_shorter_side: empty image");
  const auto new_long = static_cast<int64_t>(static_cast<double>(size) * static_cast<double>(longer) /
                                             static_cast<double>(shorter));
  if (image.width <= image.height) {
    if (image.width == size) return image;
    return resize_bilinear(image, size, new_long);
  }
  if (image.height == size) return image;
  return resize_bilinear(image, new_long, size);
}

Image center_crop(const Image& image, int64_t width, int64_t height) {
  if (width > image.width || height > image.height || width < 1 || height < 1) {
    throw Error("center_crop: a crop of " + std::to_string(width) + " x " +
                std::to_string(height) + " from an image of " + std::to_string(image.width) +
                " x " + std::to_string(image.height));
  }
  // Python's round: ties to even (std::nearbyint in the default rounding mode).
  const auto top = static_cast<int64_t>(std::nearbyint(static_cast<double>(image.height - height) / 2.0));
  const auto left = static_cast<int64_t>(std::nearbyint(static_cast<double>(image.width - width) / 2.0));
  Image out;
  out.width = width;
  out.height = height;
  out.pixels.resize(static_cast<size_t>(width * height * 3));
  for (int64_t y = 0; y < height; ++y) {
    const uint8_t* row = image.pixels.data() + ((top + y) * image.width + left) * 3;
    std::copy(row, row + width * 3, out.pixels.begin() + y * width * 3);
  }
  return out;
}

Array normalized_chw(const Image& image, const std::array<double, 3>& mean,
                     const std::array<double, 3>& std) {
  Array out({3, image.height, image.width}, DType::f32);
  for (int c = 0; c < 3; ++c) {
    for (int64_t y = 0; y < image.height; ++y) {
      for (int64_t x = 0; x < image.width; ++x) {
        // ToTensor divides in f32; Normalize subtracts and divides in f32.
        const float v = static_cast<float>(image.at(y, x, c)) / 255.0f;
        const float n = (v - static_cast<float>(mean[static_cast<size_t>(c)])) /
                        static_cast<float>(std[static_cast<size_t>(c)]);
        out.data[static_cast<size_t>((c * image.height + y) * image.width + x)] = n;
      }
    }
  }
  return out;
}

Array imagenet_preprocess(const Image& image) {
  return normalized_chw(center_crop(resize_shorter_side(image, 256), 224, 224), kImageNetMean,
                        kImageNetStd);
}

}  // namespace mn
