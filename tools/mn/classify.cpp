// `mn classify MODEL.safetensors IMAGE... [--labels FILE] [--top K] [--device D] [--json]`:
// a torchvision ResNet state_dict (its depth, classes and stem read from the tensors) run in
// evaluation mode on PNG or JPEG images after torchvision's ImageNet transform; the top classes
// of each image with their probabilities.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/image.h>
#include <meganeura/session.h>
#include <meganeura/vision.h>

#include "commands.h"

namespace mn::cli {

namespace {

struct ClassifyArgs {
  std::string model;
  std::vector<std::string> images;
  std::string labels;
  int64_t top = 5;
  std::string device;
  bool json = false;
};

// One label per line, as many as the model has classes.
std::vector<std::string> read_labels(const std::string& path, int64_t classes) {
  std::ifstream f(path);
  if (!f) throw FormatError(path + ": cannot open the labels file");
  std::vector<std::string> labels;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    labels.push_back(line);
  }
  while (!labels.empty() && labels.back().empty()) labels.pop_back();
  if (static_cast<int64_t>(labels.size()) != classes) {
    throw FormatError(path + ": " + std::to_string(labels.size()) + " labels, the model has " +
                      std::to_string(classes) + " classes");
  }
  return labels;
}

// The model's images as one batch [N, 3, 224, 224].
Array image_batch(const std::vector<std::string>& paths) {
  Array batch({static_cast<int64_t>(paths.size()), 3, 224, 224}, DType::f32);
  const size_t per_image = 3 * 224 * 224;
  for (size_t i = 0; i < paths.size(); ++i) {
    const Array x = imagenet_preprocess(read_image(paths[i]));
    std::copy(x.data.begin(), x.data.end(), batch.data.begin() + static_cast<ptrdiff_t>(i * per_image));
  }
  return batch;
}

void run_classify(const ClassifyArgs& a) {
  if (a.top < 1) throw Error("--top " + std::to_string(a.top) + ": expected an integer >= 1");
  std::map<std::string, Shape> shapes;
  const SafetensorsReader reader(a.model);
  for (const SafetensorsEntry& e : reader.entries()) shapes[e.name] = e.shape;
  vision::ResNetConfig config;
  try {
    config = vision::resnet_config_of(shapes);
  } catch (const Error& e) {
    throw Error(a.model + ": " + e.what());
  }
  if (config.in_channels != 3 || config.small_input_stem) {
    throw Error(a.model + ": the model takes " + std::to_string(config.in_channels) +
                "-channel images through the " + (config.small_input_stem ? "small" : "ImageNet") +
                " stem; mn classify runs torchvision's ImageNet transform for 3-channel "
                "ImageNet-stem models");
  }
  const std::vector<std::string> labels =
      a.labels.empty() ? std::vector<std::string>{} : read_labels(a.labels, config.num_classes);
  const Array batch = image_batch(a.images);

  auto net = vision::resnet(config);
  net->eval();
  Graph g;
  g.output("probabilities", softmax(net->forward(g.input("x", batch.shape)), -1));
  SessionOptions so;
  so.device = a.device;
  for (const nn::StateEntry& e : net->state_entries()) so.preset.insert(e.graph_name);
  auto session = build_session(g, so);
  nn::load_state_dict(*net, *session, a.model);
  session->set("x", batch);
  session->step();
  const Array p = session->get("probabilities");

  const int64_t classes = config.num_classes, top = std::min(a.top, classes);
  nlohmann::json out = {{"model", "resnet" + std::to_string(config.depth)},
                        {"device", session->device_name()},
                        {"images", nlohmann::json::array()}};
  for (size_t i = 0; i < a.images.size(); ++i) {
    const double* row = p.data.data() + static_cast<int64_t>(i) * classes;
    std::vector<int64_t> order(static_cast<size_t>(classes));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return row[x] > row[y]; });
    nlohmann::json ranked = nlohmann::json::array();
    if (!a.json) std::printf("%s\n", a.images[i].c_str());
    for (int64_t r = 0; r < top; ++r) {
      const int64_t c = order[static_cast<size_t>(r)];
      const std::string label = labels.empty() ? "" : labels[static_cast<size_t>(c)];
      ranked.push_back({{"class", c}, {"label", label}, {"probability", row[c]}});
      if (!a.json) {
        std::printf("  %.4f  %lld%s%s\n", row[c], static_cast<long long>(c),
                    label.empty() ? "" : "  ", label.c_str());
      }
    }
    out["images"].push_back({{"path", a.images[i]}, {"top", ranked}});
  }
  if (a.json) std::cout << out.dump() << std::endl;
}

}  // namespace

void add_classify_command(CLI::App& app) {
  auto a = std::make_shared<ClassifyArgs>();
  auto* cmd = app.add_subcommand(
      "classify", "classify PNG/JPEG images with a torchvision ResNet state_dict (safetensors)");
  cmd->add_option("model", a->model, "the state_dict as safetensors (resnet18 ... resnet152)")
      ->required();
  cmd->add_option("images", a->images, "PNG or JPEG files")->required();
  cmd->add_option("--labels", a->labels, "a file of one class name per line");
  cmd->add_option("--top", a->top, "classes shown per image")->capture_default_str();
  cmd->add_option("--device", a->device,
                  "device index or name substring (default: $MN_DEVICE or the best)");
  cmd->add_flag("--json", a->json, "one JSON object on standard output");
  cmd->callback([a] { run_classify(*a); });
}

}  // namespace mn::cli
