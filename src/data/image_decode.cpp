// PNG (libpng's simplified API) and JPEG (libjpeg-turbo) files decoded to 8-bit RGB.
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

#include <jpeglib.h>
#include <png.h>

#include <meganeura/error.h>
#include <meganeura/image.h>

namespace mn {

namespace {

// Images past this many pixels are refused before anything is allocated for them.
constexpr uint64_t kMaxPixels = uint64_t{1} << 28;

std::vector<uint8_t> file_bytes(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw FormatError(path.string() + ": cannot open the image file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw FormatError(path.string() + ": cannot read the image file");
  return bytes;
}

void check_size(const std::string& file, uint64_t width, uint64_t height) {
  if (width == 0 || height == 0 || width * height > kMaxPixels) {
    throw FormatError(file + ": image of " + std::to_string(width) + " x " +
                      std::to_string(height) + " pixels (at most 2^28 are read)");
  }
}

// RGBA read through the simplified API, alpha dropped: PIL's convert("RGB") does not composite.
Image decode_png(const std::vector<uint8_t>& bytes, const std::string& file) {
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  auto fail = [&](const char* stage) {
    const std::string message = png.message;
    png_image_free(&png);
    throw FormatError(file + ": PNG " + stage + ": " + message);
  };
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size())) fail("header");
  png.format = PNG_FORMAT_RGBA;
  check_size(file, png.width, png.height);
  std::vector<uint8_t> rgba(PNG_IMAGE_SIZE(png));
  if (!png_image_finish_read(&png, nullptr, rgba.data(), 0, nullptr)) fail("data");
  Image out;
  out.width = png.width;
  out.height = png.height;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  for (size_t i = 0, n = static_cast<size_t>(out.width * out.height); i < n; ++i) {
    std::memcpy(&out.pixels[i * 3], &rgba[i * 4], 3);
  }
  return out;
}

// libjpeg reports errors by calling error_exit, which must not return: it jumps back to
// decode_jpeg, whose only objects with destructors live outside the jump's range.
struct JpegErrors {
  jpeg_error_mgr manager;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_error_exit(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  info->err->format_message(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Decodes into `out` (sized before the jump target); false with errors.message on failure.
bool jpeg_to_rgb(const std::vector<uint8_t>& bytes, Image& out, JpegErrors& errors) {
  jpeg_decompress_struct info{};
  info.err = jpeg_std_error(&errors.manager);
  errors.manager.error_exit = jpeg_error_exit;
  errors.manager.output_message = [](j_common_ptr) {};  // warnings are not errors
  if (setjmp(errors.jump)) {
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  info.out_color_space = JCS_RGB;  // gray replicated, YCbCr and CMYK converted
  if (uint64_t{info.image_width} * info.image_height > kMaxPixels || info.image_width == 0) {
    std::snprintf(errors.message, sizeof errors.message,
                  "image of %u x %u pixels (at most 2^28 are read)", info.image_width,
                  info.image_height);
    jpeg_destroy_decompress(&info);
    return false;
  }
  jpeg_start_decompress(&info);
  out.width = info.output_width;
  out.height = info.output_height;
  out.pixels.resize(static_cast<size_t>(out.width * out.height * 3));
  while (info.output_scanline < info.output_height) {
    JSAMPROW row = out.pixels.data() + static_cast<size_t>(info.output_scanline) * out.width * 3;
    jpeg_read_scanlines(&info, &row, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return true;
}

Image decode_jpeg(const std::vector<uint8_t>& bytes, const std::string& file) {
  Image out;
  JpegErrors errors{};
  if (!jpeg_to_rgb(bytes, out, errors)) {
    throw FormatError(file + ": JPEG: " + std::string(errors.message));
  }
  return out;
}

}  // namespace

Image read_image(const std::filesystem::path& path) {
  const std::vector<uint8_t> bytes = file_bytes(path);
  const std::string file = path.string();
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return decode_png(bytes, file);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) {
    return decode_jpeg(bytes, file);
  }
  throw FormatError(file + ": not a PNG or JPEG file (its first bytes are neither signature)");
}

}  // namespace mn
