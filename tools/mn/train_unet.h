#pragma once
// `mn train --model unet`: a DDPM U-Net trained on Fashion-MNIST, then sampled into a PNG grid.
#include <cstdint>
#include <filesystem>
#include <string>

#include <meganeura/diffusion.h>

namespace mn::cli {

struct UnetRun {
  diffusion::DdpmTrainOptions train;  // optimizer, batch, epochs, seed, session, sampler, samples
  Dataset images;                     // Fashion-MNIST's training images, nchw
  std::filesystem::path save;         // the U-Net's weights (diffusers' keys), or none
  std::filesystem::path png;          // the samples as a grid
  bool json = false;
};

void train_unet(UnetRun run);

}  // namespace mn::cli
