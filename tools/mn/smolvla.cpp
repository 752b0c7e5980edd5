// `mn smolvla [--weights FILE] [--prefix FILE | --prefix-length P --batch B] [--noise FILE.npy]
// [--output OUT.npy] [--json] ...`: SmolVLA's action expert denoising a chunk of actions from
// noise (num_steps Euler steps, one submission), over the VLM's keys and values of a prefix.
// Weights: a SmolVLAPolicy's model.safetensors (keys "model.<key>") or the expert's own
// state_dict; sizes read from them (head_dim given), or random weights of lerobot/smolvla_base.
// The prefix: a safetensors file of prefix_keys.N, prefix_values.N [B, P, kv_heads, head_dim]
// and prefix_mask [B, P], or random keys and values of a full prefix.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/error.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>
#include <meganeura/vla.h>

#include "commands.h"
#include "module_weights.h"
#include "wall_time.h"

namespace mn::cli {

namespace {

struct SmolVlaArgs {
  std::string weights, prefix, noise, output, device;
  int64_t prefix_length = 241, batch = 1, head_dim = 64, chunk = 50, steps = 10;
  int64_t self_attn_every = 2;
  uint64_t seed = 0;
  bool json = false;
};

const std::string kPolicyPrefix = "model.";

// The shape of `key` in a checkpoint, prefixed as a policy's or bare.
Shape shape_of(const SafetensorsReader& r, const std::string& file, const std::string& key) {
  if (const auto name = checkpoint_name(r, kPolicyPrefix, key)) return r.entry(*name).shape;
  throw FormatError(file + ": no tensor '" + kPolicyPrefix + key + "' (nor '" + key + "')");
}

int64_t rows(const Shape& s, const std::string& file, const std::string& key) {
  if (s.size() != 2) throw FormatError(file + ": '" + key + "' is not a matrix");
  return s[0];
}

int64_t heads_of(int64_t width, int64_t head_dim, const std::string& file, const std::string& key) {
  if (width % head_dim != 0) {
    throw FormatError(file + ": '" + key + "' has " + std::to_string(width) +
                      " outputs, not a multiple of --head-dim " + std::to_string(head_dim));
  }
  return width / head_dim;
}

vla::SmolVlaConfig config_of(const SmolVlaArgs& a) {
  vla::SmolVlaConfig c = vla::smolvla_base_config();
  c.chunk = a.chunk;
  c.num_steps = a.steps;
  c.self_attn_every_n_layers = a.self_attn_every;
  if (a.weights.empty()) return c;
  if (a.head_dim < 1) throw Error("mn smolvla: --head-dim must be positive");
  const SafetensorsReader r(a.weights);
  const std::string layer0 = "vlm_with_expert.lm_expert.layers.0.";
  const Shape in = shape_of(r, a.weights, "action_in_proj.weight");
  c.hidden = rows(in, a.weights, "action_in_proj.weight");
  c.max_action_dim = in[1];
  c.intermediate = rows(shape_of(r, a.weights, layer0 + "mlp.gate_proj.weight"), a.weights,
                        layer0 + "mlp.gate_proj.weight");
  c.head_dim = a.head_dim;
  for (auto [field, proj] : {std::pair{&c.heads, "q_proj"}, {&c.kv_heads, "k_proj"}}) {
    const std::string key = layer0 + "self_attn." + proj + ".weight";
    *field =
        heads_of(rows(shape_of(r, a.weights, key), a.weights, key), a.head_dim, a.weights, key);
  }
  c.layers = 0;
  while (checkpoint_name(
      r, kPolicyPrefix,
      "vlm_with_expert.lm_expert.layers." + std::to_string(c.layers) + ".input_layernorm.weight")) {
    ++c.layers;
  }
  return c;
}

// The prefix's tensors from a file, or random keys and values of a prefix without padding.
void set_prefix(Session& s, const SmolVlaArgs& a, const vla::SmolVlaConfig& c, int64_t batch,
                int64_t length) {
  if (!a.prefix.empty()) {
    const SafetensorsReader r(a.prefix);
    for (int64_t l = 0; l < c.layers; ++l) {
      for (const std::string& what : {"prefix_keys.", "prefix_values."}) {
        s.set(what + std::to_string(l), r.array(what + std::to_string(l)));
      }
    }
    const Array mask = r.array("prefix_mask");
    for (size_t i = 0; i < mask.data.size(); ++i) {
      if (mask.data[i] != 0.0 && mask.data[i] != 1.0) {
        throw FormatError(a.prefix + ": prefix_mask holds " + std::to_string(mask.data[i]) +
                          " at element " + std::to_string(i) +
                          " (1 for a real token, 0 for padding)");
      }
    }
    s.set("prefix_mask", mask);
    return;
  }
  std::mt19937_64 rng(a.seed + 1);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (int64_t l = 0; l < c.layers; ++l) {
    for (const std::string& what : {"prefix_keys.", "prefix_values."}) {
      Array kv({batch, length, c.kv_heads, c.head_dim}, DType::f32);
      for (double& v : kv.data) v = static_cast<float>(u(rng));
      s.set(what + std::to_string(l), kv);
    }
  }
  s.set("prefix_mask", Array::full({batch, length}, 1.0));
}

Array noise_of(const SmolVlaArgs& a, const Shape& shape) {
  if (!a.noise.empty()) {
    Array n = to_array(read_npy(a.noise), a.noise);
    if (n.shape != shape) {
      throw ShapeError(a.noise + ": the noise is " + TensorType{n.shape, DType::f32}.str() +
                       ", the expert denoises " + TensorType{shape, DType::f32}.str() +
                       " ([B, chunk, max_action_dim])");
    }
    return n;
  }
  Array n(shape, DType::f32);
  std::mt19937_64 rng(a.seed);
  std::normal_distribution<double> d(0.0, 1.0);
  for (double& v : n.data) v = static_cast<float>(d(rng));
  return n;
}

void run_smolvla(const SmolVlaArgs& a) {
  const vla::SmolVlaConfig c = config_of(a);
  int64_t batch = a.batch, length = a.prefix_length;
  if (!a.prefix.empty()) {  // the prefix file says how many sequences and tokens
    const Shape mask = SafetensorsReader(a.prefix).entry("prefix_mask").shape;
    if (mask.size() != 2) throw FormatError(a.prefix + ": prefix_mask must be [B, P]");
    batch = mask[0];
    length = mask[1];
  }
  vla::SmolVlaActionExpert expert(c);
  Graph g;
  const vla::VlmPrefix prefix = expert.prefix_inputs(g, batch, length);
  const Shape actions{batch, c.chunk, c.max_action_dim};
  g.output("actions", expert.sample(prefix, g.input("noise", actions)));
  SessionOptions so;
  so.device = a.device;
  if (!a.weights.empty()) {
    for (const nn::StateEntry& e : expert.state_entries()) so.preset.insert(e.graph_name);
  }
  const auto t0 = Clock::now();
  auto session = build_session(g, so);
  if (!a.weights.empty()) {
    nn::load_state_dict(expert, *session, module_weights(expert, a.weights, kPolicyPrefix));
  }
  set_prefix(*session, a, c, batch, length);
  session->set("noise", noise_of(a, actions));
  const double build_ms = ms_since(t0);
  const auto t1 = Clock::now();
  session->step();
  const Array out = session->get("actions");
  const double sample_ms = ms_since(t1);
  if (!a.output.empty()) write_npy(a.output, from_array(out));
  const nlohmann::json j = {{"actions", out.shape},     {"prefix", {batch, length}},
                            {"num_steps", c.num_steps}, {"layers", c.layers},
                            {"hidden", c.hidden},       {"build_ms", build_ms},
                            {"sample_ms", sample_ms},   {"device", session->device_name()}};
  if (a.json) {
    std::cout << j.dump() << std::endl;
  } else {
    std::printf("actions [%lld, %lld, %lld] from %lld steps over a prefix of %lld tokens\n",
                static_cast<long long>(batch), static_cast<long long>(c.chunk),
                static_cast<long long>(c.max_action_dim), static_cast<long long>(c.num_steps),
                static_cast<long long>(length));
    std::printf("build %.1f ms, denoising %.1f ms on %s\n", build_ms, sample_ms,
                session->device_name().c_str());
  }
}

}  // namespace

void add_smolvla_command(CLI::App& app) {
  auto a = std::make_shared<SmolVlaArgs>();
  auto* cmd = app.add_subcommand(
      "smolvla", "denoise a chunk of actions with SmolVLA's action expert over a VLM prefix");
  cmd->add_option("--weights", a->weights,
                  "a SmolVLA policy's model.safetensors, or the expert's state_dict (default: "
                  "random weights of lerobot/smolvla_base)");
  cmd->add_option("--head-dim", a->head_dim, "the attention heads' width (default 64)");
  cmd->add_option("--self-attn-every", a->self_attn_every,
                  "layer i self-attends when i % N == 0, else cross-attends (default 2)");
  cmd->add_option("--chunk", a->chunk, "actions denoised together (default 50)");
  cmd->add_option("--steps", a->steps, "Euler steps from noise to actions (default 10)");
  cmd->add_option("--prefix", a->prefix,
                  "safetensors of prefix_keys.N, prefix_values.N [B, P, kv_heads, head_dim] and "
                  "prefix_mask [B, P] (default: random keys and values)");
  cmd->add_option("--prefix-length", a->prefix_length, "tokens of a random prefix (default 241)");
  cmd->add_option("--batch", a->batch, "sequences with a random prefix (default 1)");
  cmd->add_option("--noise", a->noise, "the starting noise as .npy [B, chunk, max_action_dim]");
  cmd->add_option("--seed", a->seed, "seed of the random noise and prefix");
  cmd->add_option("--output", a->output, "write the actions as .npy");
  cmd->add_option("--device", a->device,
                  "device index or name substring (default: $MN_DEVICE or the best)");
  cmd->add_flag("--json", a->json, "one JSON object on standard output");
  cmd->callback([a] { run_smolvla(*a); });
}

}  // namespace mn::cli
