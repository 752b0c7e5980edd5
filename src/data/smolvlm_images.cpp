// SmolVLMImageProcessor.preprocess on one image, and the prompt text SmolVLMProcessor puts in
// place of its <image> token. Sizes follow transformers' Python arithmetic (float division,
// int() truncation, math.ceil) so that the frames are the same pixels.
#include <cmath>
#include <string>

#include <meganeura/error.h>
#include <meganeura/vlm.h>

namespace mn {

namespace {

struct Size {
  int64_t height, width;
};

int64_t ceil_multiple(int64_t v, int64_t m) {
  return static_cast<int64_t>(std::ceil(static_cast<double>(v) / static_cast<double>(m))) * m;
}

// _resize_output_size_rescale_to_max_len (the longest edge becomes max_len, the other keeps the
// aspect ratio, made even), then _resize_output_size_scale_below_upper_bound (at most 4096).
Size longest_edge_size(Size s, int64_t max_len) {
  double aspect = static_cast<double>(s.width) / static_cast<double>(s.height);
  if (s.width >= s.height) {
    s.width = max_len;
    s.height = static_cast<int64_t>(static_cast<double>(s.width) / aspect);
    if (s.height % 2 != 0) ++s.height;
  } else {
    s.height = max_len;
    s.width = static_cast<int64_t>(static_cast<double>(s.height) * aspect);
    if (s.width % 2 != 0) ++s.width;
  }
  s = {std::max<int64_t>(s.height, 1), std::max<int64_t>(s.width, 1)};
  constexpr int64_t kMaxImageSize = 4096;
  aspect = static_cast<double>(s.width) / static_cast<double>(s.height);
  if (s.width >= s.height && s.width > kMaxImageSize) {
    s.width = kMaxImageSize;
    s.height = static_cast<int64_t>(static_cast<double>(s.width) / aspect);
  } else if (s.height > s.width && s.height > kMaxImageSize) {
    s.height = kMaxImageSize;
    s.width = static_cast<int64_t>(static_cast<double>(s.height) * aspect);
  }
  return {std::max<int64_t>(s.height, 1), std::max<int64_t>(s.width, 1)};
}

// resize_for_vision_encoder: both sides rounded up to multiples of the frame size.
Size frame_multiple_size(Size s, int64_t frame) {
  const double aspect = static_cast<double>(s.width) / static_cast<double>(s.height);
  if (s.width >= s.height) {
    s.width = ceil_multiple(s.width, frame);
    s.height = ceil_multiple(static_cast<int64_t>(static_cast<double>(s.width) / aspect), frame);
  } else {
    s.height = ceil_multiple(s.height, frame);
    s.width = ceil_multiple(static_cast<int64_t>(static_cast<double>(s.height) * aspect), frame);
  }
  return s;
}

Image resized(const Image& im, Size s, Resample filter) {
  if (im.width == s.width && im.height == s.height) return im;  // PIL returns a copy
  return resize(im, s.width, s.height, filter);
}

Image crop(const Image& im, int64_t x0, int64_t y0, int64_t x1, int64_t y1) {
  Image out;
  out.width = x1 - x0;
  out.height = y1 - y0;
  out.pixels.reserve(static_cast<size_t>(out.width * out.height * 3));
  for (int64_t y = y0; y < y1; ++y) {
    const auto* row = im.pixels.data() + (y * im.width + x0) * 3;
    out.pixels.insert(out.pixels.end(), row, row + out.width * 3);
  }
  return out;
}

// rescale (float64 product stored as float32) then normalize in float32, as transformers'
// image_transforms do, into frame `index` of `out`.
void write_frame(const Image& im, const SmolVlmImageProcessor& p, Array& out, int64_t index) {
  const int64_t hw = im.width * im.height;
  float mean[3], std[3];
  for (int c = 0; c < 3; ++c) {
    mean[c] = p.do_normalize ? static_cast<float>(p.image_mean[c]) : 0.0f;
    std[c] = p.do_normalize ? static_cast<float>(p.image_std[c]) : 1.0f;
  }
  const double scale = p.do_rescale ? p.rescale_factor : 1.0;
  double* base = out.data.data() + index * 3 * hw;
  for (int64_t i = 0; i < hw; ++i) {
    for (int c = 0; c < 3; ++c) {
      const auto v = static_cast<float>(static_cast<double>(im.pixels[i * 3 + c]) * scale);
      base[c * hw + i] = static_cast<double>((v - mean[c]) / std[c]);
    }
  }
}

std::string repeat(const std::string& s, int64_t n) {
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

}  // namespace

SmolVlmImage smolvlm_preprocess(const Image& image, const SmolVlmImageProcessor& p) {
  if (image.width < 1 || image.height < 1) throw Error("smolvlm_preprocess: empty image");
  if (p.longest_edge < 1 || p.max_image_size < 1) {
    throw Error("smolvlm_preprocess: the sizes must be positive (longest_edge " +
                std::to_string(p.longest_edge) + ", max_image_size " +
                std::to_string(p.max_image_size) + ")");
  }
  const int64_t m = p.max_image_size;
  Image im = image;
  if (p.do_resize) im = resized(im, longest_edge_size({im.height, im.width}, p.longest_edge), p.resample);
  std::vector<Image> frames;
  SmolVlmImage out;
  if (!p.do_image_splitting) {
    frames.push_back(resized(im, {m, m}, p.resample));
  } else {
    im = resized(im, frame_multiple_size({im.height, im.width}, m), p.resample);
    if (im.height > m || im.width > m) {
      out.rows = (im.height + m - 1) / m;
      out.cols = (im.width + m - 1) / m;
      const int64_t tile_h = (im.height + out.rows - 1) / out.rows;
      const int64_t tile_w = (im.width + out.cols - 1) / out.cols;
      for (int64_t r = 0; r < out.rows; ++r) {
        for (int64_t c = 0; c < out.cols; ++c) {
          frames.push_back(crop(im, c * tile_w, r * tile_h, std::min(c * tile_w + tile_w, im.width),
                                std::min(r * tile_h + tile_h, im.height)));
        }
      }
      im = resized(im, {m, m}, p.resample);
    }
    frames.push_back(std::move(im));
  }
  out.pixel_values = Array({static_cast<int64_t>(frames.size()), 3, m, m}, DType::f32);
  for (size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].width != m || frames[i].height != m) {
      throw Error("smolvlm_preprocess: frame " + std::to_string(i) + " is " +
                  std::to_string(frames[i].width) + " x " + std::to_string(frames[i].height) +
                  ", not " + std::to_string(m) + " x " + std::to_string(m));
    }
    write_frame(frames[i], p, out.pixel_values, static_cast<int64_t>(i));
  }
  return out;
}

std::string smolvlm_image_prompt(const SmolVlmImage& image, int64_t image_seq_len) {
  const std::string fake = "<fake_token_around_image>";
  const std::string tokens = repeat("<image>", image_seq_len);
  if (image.rows == 0 && image.cols == 0) return fake + "<global-img>" + tokens + fake;
  std::string out;
  for (int64_t r = 1; r <= image.rows; ++r) {
    for (int64_t c = 1; c <= image.cols; ++c) {
      out += fake + "<row_" + std::to_string(r) + "_col_" + std::to_string(c) + ">" + tokens;
    }
    out += "\n";
  }
  return out + "\n" + fake + "<global-img>" + tokens + fake;
}

std::string smolvlm_chat_prompt(const std::string& text, bool with_image,
                                const std::string& system) {
  std::string out = "<|im_start|>";
  if (!system.empty()) out += "System: " + system + "<end_of_utterance>\n";
  return out + "User:" + (with_image ? "<image>" : " ") + text + "<end_of_utterance>\nAssistant:";
}

std::string expand_image_tokens(const std::string& prompt, const std::vector<SmolVlmImage>& images,
                                int64_t image_seq_len) {
  const std::string placeholder = "<image>";
  std::string out;
  size_t from = 0, used = 0;
  for (size_t at = prompt.find(placeholder); at != std::string::npos;
       at = prompt.find(placeholder, from)) {
    if (used == images.size()) {
      throw Error("expand_image_tokens: the prompt has more <image> placeholders than the " +
                  std::to_string(images.size()) + " images given");
    }
    out += prompt.substr(from, at - from) + smolvlm_image_prompt(images[used++], image_seq_len);
    from = at + placeholder.size();
  }
  if (used != images.size()) {
    throw Error("expand_image_tokens: " + std::to_string(images.size()) + " images for " +
                std::to_string(used) + " <image> placeholders in the prompt");
  }
  return out + prompt.substr(from);
}

}  // namespace mn
