// `mn train --model unet`: DDPM on Fashion-MNIST with the small U-Net, progress on standard
// error, the sampled images written as one PNG grid.
#include "train_unet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <meganeura/image.h>
#include <meganeura/nn.h>

namespace mn::cli {

namespace {

// samples [N, C, H, W] in [-1, 1] as gray (C = 1) or RGB (C = 3) tiles on a square-ish grid,
// 2 black pixels between tiles.
Image sample_grid(const Array& samples) {
  const int64_t n = samples.shape[0], c = samples.shape[1], h = samples.shape[2],
                w = samples.shape[3];
  const int64_t columns = static_cast<int64_t>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int64_t rows = (n + columns - 1) / columns, gap = 2;
  Image grid;
  grid.width = columns * (w + gap) + gap;
  grid.height = rows * (h + gap) + gap;
  grid.pixels.assign(static_cast<size_t>(grid.width * grid.height * 3), 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y0 = gap + (i / columns) * (h + gap), x0 = gap + (i % columns) * (w + gap);
    for (int64_t y = 0; y < h; ++y) {
      for (int64_t x = 0; x < w; ++x) {
        for (int64_t k = 0; k < 3; ++k) {
          const int64_t channel = c == 3 ? k : 0;
          const double v = samples.data[static_cast<size_t>(((i * c + channel) * h + y) * w + x)];
          const double byte = std::round((std::clamp(v, -1.0, 1.0) + 1.0) * 127.5);
          grid.pixels[static_cast<size_t>(((y0 + y) * grid.width + x0 + x) * 3 + k)] =
              static_cast<uint8_t>(byte);
        }
      }
    }
  }
  return grid;
}

}  // namespace

void train_unet(UnetRun run) {
  const Dataset& images = run.images;
  diffusion::DdpmTrainOptions& o = run.train;
  std::fprintf(stderr,
               "training a DDPM U-Net on Fashion-MNIST (%lld images), lr %g, batch %lld, "
               "%lld epoch(s)\n",
               static_cast<long long>(images.size()), o.optimizer.lr,
               static_cast<long long>(o.batch), static_cast<long long>(o.epochs));
  o.on_progress = [](const diffusion::DdpmTrainOptions::Progress& p) {
    const bool tenth = p.steps_per_epoch >= 10 && p.step % (p.steps_per_epoch / 10) == 0;
    if (!tenth && p.step != p.steps_per_epoch) return;
    std::fprintf(stderr, "epoch %lld/%lld step %lld/%lld loss %.4f %.1f samples/s\n",
                 static_cast<long long>(p.epoch + 1), static_cast<long long>(p.epochs),
                 static_cast<long long>(p.step), static_cast<long long>(p.steps_per_epoch), p.loss,
                 p.samples_per_second);
  };
  const diffusion::DdpmTrainResult r = diffusion::train_ddpm(images, o);
  if (!run.save.empty()) nn::save_state_dict(*r.unet, *r.session, run.save);
  if (!run.png.empty() && o.samples > 0) write_png(run.png, sample_grid(r.samples));
  const char* sampler = o.sampler.kind == diffusion::SamplerKind::ddim ? "ddim" : "ddpm";
  if (run.json) {
    nlohmann::json j = {{"model", "unet"},
                        {"final_loss", r.final_loss},
                        {"steps", r.steps},
                        {"seconds", r.seconds},
                        {"samples_per_second", r.samples_per_second},
                        {"sampler", sampler},
                        {"sampling_steps", o.sampler.steps},
                        {"sampled", o.samples},
                        {"sampling_seconds", r.sampling_seconds},
                        {"png", run.png.string()},
                        {"device", r.device}};
    std::cout << j.dump() << std::endl;
  } else {
    std::printf(
        "device %s: final loss %.4f, %lld steps in %.1f s (%.1f samples/s); %lld images "
        "by %s in %lld steps (%.2f s)%s%s\n",
        r.device.c_str(), r.final_loss, static_cast<long long>(r.steps), r.seconds,
        r.samples_per_second, static_cast<long long>(o.samples), sampler,
        static_cast<long long>(o.sampler.steps), r.sampling_seconds, run.png.empty() ? "" : " -> ",
        run.png.string().c_str());
  }
}

}  // namespace mn::cli
