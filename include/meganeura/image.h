#pragma once
// Images for the vision models: PNG and JPEG decoding (libpng, libjpeg-turbo) and the
// preprocessing of torchvision's ImageNet evaluation transform, pixel for pixel as torchvision
// computes it on PIL images:
//   Resize(256) -> CenterCrop(224) -> ToTensor() -> Normalize(mean, std)
#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

#include <meganeura/array.h>

namespace mn {

// 8-bit RGB pixels, row-major, channels last (what PIL's convert("RGB") holds).
struct Image {
  int64_t width = 0;
  int64_t height = 0;
  std::vector<uint8_t> pixels;  // height * width * 3

  uint8_t at(int64_t y, int64_t x, int c) const {
    return pixels[static_cast<size_t>((y * width + x) * 3 + c)];
  }
};

// A PNG or JPEG file (told apart by its first bytes), as RGB: gray is replicated, alpha dropped
// (as PIL's convert("RGB")), palettes expanded. mn::FormatError naming the file and what was
// wrong for anything else or a damaged file.
Image read_image(const std::filesystem::path& path);

// Writes `image` as an 8-bit RGB PNG, in full or not at all (a temporary file renamed over the
// target). mn::Error naming the file when it cannot be written or the image is empty or its
// pixels do not match its size.
void write_png(const std::filesystem::path& path, const Image& image);

// PIL's resampling filters: BILINEAR (a triangle of support 1) and LANCZOS (sinc windowed by
// sinc, support 3).
enum class Resample { bilinear, lanczos };
// PIL's Image.resize(..., filter): the filter widened by the scale when shrinking (antialiasing),
// in PIL's fixed-point arithmetic, horizontal pass first, rounded to 8 bits after each pass.
// mn::Error for a size below 1 or an empty image.
Image resize(const Image& image, int64_t width, int64_t height, Resample filter);
// PIL's Image.resize(..., BILINEAR) as torchvision's Resize calls it on PIL images.
Image resize_bilinear(const Image& image, int64_t width, int64_t height);
// torchvision's Resize(size) with one size: the shorter side becomes `size`, the longer one
// int(size * long / short).
Image resize_shorter_side(const Image& image, int64_t size);
// torchvision's CenterCrop: the top-left corner at round((H - h) / 2), round((W - w) / 2), ties
// to even as Python's round. mn::Error when the image is smaller than the crop.
Image center_crop(const Image& image, int64_t width, int64_t height);

// ToTensor then Normalize: [3, H, W] f32 of (pixel / 255 - mean[c]) / std[c].
Array normalized_chw(const Image& image, const std::array<double, 3>& mean,
                     const std::array<double, 3>& std);

inline constexpr std::array<double, 3> kImageNetMean = {0.485, 0.456, 0.406};
inline constexpr std::array<double, 3> kImageNetStd = {0.229, 0.224, 0.225};
// Resize(256), CenterCrop(224), ToTensor, Normalize with ImageNet's mean and std: [3, 224, 224].
Array imagenet_preprocess(const Image& image);

}  // namespace mn
