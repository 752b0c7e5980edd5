#pragma once
// `mn train --model unet`: a DDPM U-Net trained on Fashion-MNIST, then sampled into a PNG grid.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include <meganeura/diffusion.h>

namespace mn::cli {

struct UnetRun {
  diffusion::DdpmTrainOptions train;  // optimizer, batch, epochs, seed, session, sampler, samples
  std::filesystem::path data;         // Fashion-MNIST's folder ("" : the default)
  std::optional<int64_t> limit;       // the first N training images
  std::filesystem::path save;         // the U-Net's weights (diffusers' keys), or none
  std::filesystem::path png;          // the samples as a grid
  bool json = false;
};

void train_unet(UnetRun run);

}  // namespace mn::cli
