// PNG files written through libpng's simplified API, atomically.
#include <png.h>

#include <meganeura/error.h>
#include <meganeura/image.h>

#include "data/atomic_file.h"

namespace mn {

void write_png(const std::filesystem::path& path, const Image& image) {
  const std::string file = path.string();
  if (image.width < 1 || image.height < 1 ||
      image.pixels.size() != static_cast<size_t>(image.width * image.height * 3)) {
    throw Error(file + ": cannot write an image of " + std::to_string(image.width) + " x " +
                std::to_string(image.height) + " pixels from " +
                std::to_string(image.pixels.size()) + " bytes");
  }
  png_image png{};
  png.version = PNG_IMAGE_VERSION;
  png.width = static_cast<png_uint_32>(image.width);
  png.height = static_cast<png_uint_32>(image.height);
  png.format = PNG_FORMAT_RGB;
  png_alloc_size_t size = 0;
  // The first call measures, the second writes.
  if (!png_image_write_to_memory(&png, nullptr, &size, 0, image.pixels.data(), 0, nullptr)) {
    throw Error(file + ": cannot encode the PNG: " + png.message);
  }
  std::vector<uint8_t> bytes(size);
  if (!png_image_write_to_memory(&png, bytes.data(), &size, 0, image.pixels.data(), 0, nullptr)) {
    throw Error(file + ": cannot encode the PNG: " + png.message);
  }
  data::AtomicFile out(path);
  out.write(bytes.data(), size);
  out.commit();
}

}  // namespace mn
