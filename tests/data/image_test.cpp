// Image transforms against PIL 9.4's own results (values printed by Debian's python3-pil for
// the same pixels: Image.fromarray(a).resize(size, Image.BILINEAR)), torchvision's crop
// arithmetic, and decoding refusals. tests python/tests/test_classify.py compares whole files
// and the whole ImageNet transform with PIL and torchvision.
#include <gtest/gtest.h>

#include <meganeura/error.h>
#include <meganeura/image.h>

#include "data/test_util.h"
#include "support/expect_error.h"

namespace mn {
namespace {

// 7 wide, 5 high: pixel value (index * 37) mod 256 over the flattened [5, 7, 3] pixels.
Image pattern() {
  Image im;
  im.width = 7;
  im.height = 5;
  for (int i = 0; i < 7 * 5 * 3; ++i) im.pixels.push_back(static_cast<uint8_t>(i * 37 % 256));
  return im;
}

TEST(ImageTransforms, BilinearResizeIsPils) {
  const Image im = pattern();
  EXPECT_EQ(resize_bilinear(im, 3, 2).pixels,
            (std::vector<uint8_t>{104, 86, 123, 146, 123, 100, 123, 160, 142, 105, 104, 141, 145,
                                  122, 118, 141, 161, 131}));
  EXPECT_EQ(resize_bilinear(im, 7, 3).pixels,
            (std::vector<uint8_t>{4,   41,  78,  115, 152, 189, 226, 7,   44,  81,  118, 155, 192,
                                  229, 10,  47,  84,  121, 158, 195, 232, 18,  55,  92,  129, 166,
                                  203, 240, 21,  58,  95,  132, 169, 206, 243, 24,  61,  98,  135,
                                  172, 209, 246, 32,  69,  106, 143, 180, 217, 108, 35,  72,  109,
                                  146, 183, 220, 111, 38,  75,  112, 149, 186, 223, 114}));
  EXPECT_EQ(resize_bilinear(im, 2, 5).pixels,
            (std::vector<uint8_t>{116, 88,  107, 121, 140, 112, 125, 97,  116, 130,
                                  149, 121, 134, 106, 125, 139, 158, 130, 143, 115,
                                  134, 148, 167, 139, 87,  106, 143, 139, 111, 94}));
  // Upscaling: the first row of PIL's 10 x 8.
  const Image up = resize_bilinear(im, 10, 8);
  EXPECT_EQ(std::vector<uint8_t>(up.pixels.begin(), up.pixels.begin() + 30),
            (std::vector<uint8_t>{0,  37, 74,  61, 98,  135, 139, 112, 149, 216,
                                  10, 47, 128, 75, 112, 116, 153, 100, 181, 218,
                                  12, 79, 116, 89, 93,  130, 167, 154, 191, 228}));
  EXPECT_EQ(resize_bilinear(im, 7, 5).pixels, im.pixels);
  EXPECT_THROW(resize_bilinear(im, 0, 5), Error);
}

TEST(ImageTransforms, ShorterSideAndCenterCropFollowTorchvision) {
  const Image im = pattern();  // 7 x 5: the height is the shorter side
  const Image r = resize_shorter_side(im, 3);
  EXPECT_EQ(r.height, 3);
  EXPECT_EQ(r.width, 4);  // int(3 * 7 / 5)
  EXPECT_EQ(resize_shorter_side(im, 5).pixels, im.pixels);
  // (7 - 4) / 2 = 1.5 rounds to 2 and (5 - 4) / 2 = 0.5 to 0: ties to even, as Python's round.
  const Image c = center_crop(im, 4, 4);
  EXPECT_EQ(c.at(0, 0, 0), im.at(0, 2, 0));
  EXPECT_EQ(c.at(3, 3, 2), im.at(3, 5, 2));
  EXPECT_THROW(center_crop(im, 8, 2), Error);
  const Array x = normalized_chw(c, {0.5, 0.5, 0.5}, {0.25, 0.5, 1.0});
  EXPECT_EQ(x.shape, (Shape{3, 4, 4}));
  EXPECT_FLOAT_EQ(static_cast<float>(x.data[16]), (c.at(0, 0, 1) / 255.0f - 0.5f) / 0.5f);
}

TEST(ImageDecode, RefusalsNameTheFile) {
  test::ScratchDir dir("image");
  test::write_bytes(dir / "text.png", {'h', 'e', 'l', 'l', 'o'});
  test::expect_format_error([&] { read_image(dir / "text.png"); },
                            {"text.png", "not a PNG or JPEG"});
  test::write_bytes(dir / "bad.png", {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13});
  test::expect_format_error([&] { read_image(dir / "bad.png"); }, {"bad.png", "PNG"});
  test::write_bytes(dir / "bad.jpg", {0xff, 0xd8, 0xff, 0xe0, 0, 16, 'J', 'F', 'I', 'F'});
  test::expect_format_error([&] { read_image(dir / "bad.jpg"); }, {"bad.jpg", "JPEG"});
  test::expect_format_error([&] { read_image(dir / "missing.jpg"); },
                            {"missing.jpg", "cannot open"});
}

TEST(ImageEncode, PngRoundTripsExactly) {
  test::ScratchDir dir("image");
  const Image im = pattern();
  write_png(dir / "p.png", im);
  const Image back = read_image(dir / "p.png");
  EXPECT_EQ(back.width, im.width);
  EXPECT_EQ(back.height, im.height);
  EXPECT_EQ(back.pixels, im.pixels);
  // Written over an existing file in full.
  Image one;
  one.width = one.height = 1;
  one.pixels = {1, 2, 3};
  write_png(dir / "p.png", one);
  EXPECT_EQ(read_image(dir / "p.png").pixels, one.pixels);
}

TEST(ImageEncode, RefusalsNameTheFileAndKeepTheOldOne) {
  test::ScratchDir dir("image");
  write_png(dir / "keep.png", pattern());
  Image bad = pattern();
  bad.pixels.pop_back();
  expect_error<Error>([&] { write_png(dir / "keep.png", bad); },
                      {"keep.png", "7 x 5", "104 bytes"});
  expect_error<Error>([&] { write_png(dir / "empty.png", Image{}); }, {"empty.png", "0 x 0"});
  EXPECT_EQ(read_image(dir / "keep.png").pixels, pattern().pixels);
  EXPECT_FALSE(std::filesystem::exists(dir / "empty.png"));
  expect_error<Error>([&] { write_png(dir / "no/such/dir.png", pattern()); }, {"dir.png"});
}

}  // namespace
}  // namespace mn
