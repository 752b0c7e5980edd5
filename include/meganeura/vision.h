#pragma once
// Vision models in torchvision's layout: their parameter and buffer names are the state_dict
// keys of torchvision.models (conv1.weight, bn1.running_mean, layer1.0.conv1.weight,
// layer2.0.downsample.0.weight, fc.weight ...), so a torchvision checkpoint saved as safetensors
// loads by name (nn::load_state_dict) and a state_dict written here loads into torchvision.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <meganeura/nn.h>

namespace mn::vision {

struct ResNetConfig {
  int depth = 18;              // 18, 34 (basic blocks), 50, 101, 152 (bottlenecks)
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  // torchvision's stem is a 7×7 stride-2 convolution and a 3×3 stride-2 max pool (224² inputs
  // reach layer1 at 56²). For small images (28² Fashion-MNIST, 32² CIFAR) the small stem is a
  // 3×3 stride-1 convolution without the max pool, as the CIFAR ResNets use: conv1.weight is
  // then [64, in_channels, 3, 3] and every other key is unchanged.
  bool small_input_stem = false;
};

// torchvision.models.resnet{18,34,50,101,152}(num_classes=...): forward takes [N, C, H, W]
// images and returns [N, num_classes] logits. Training mode normalizes with batch statistics
// and updates the running ones; eval() uses them. Initialization as torchvision's: convolutions
// kaiming-normal (fan_out, ReLU), batch-norm weights 1 and biases 0, fc uniform ±1/√in.
// mn::Error for an unsupported depth or a non-positive size.
std::shared_ptr<nn::Module> resnet(const ResNetConfig& config);

// "resnet18", ..., "resnet152" -> the depth; mn::Error naming the supported ones otherwise.
int resnet_depth(const std::string& name);

// The configuration of a torchvision ResNet state_dict, from its tensors' names and shapes:
// basic or bottleneck blocks and their count per stage (the depth), fc.weight's classes,
// conv1.weight's input channels and stem (7×7, or 3×3 for the small stem). mn::Error naming
// what fits no ResNet.
ResNetConfig resnet_config_of(const std::map<std::string, Shape>& shapes);

}  // namespace mn::vision
