// `mn run MODEL.onnx --input NAME=FILE.npy ... [--output-dir D] [--runs N] [--precision P]
// [--device D] [--profile] [--json]`: an ONNX model imported with its inputs' shapes taken from the .npy
// files, run on the device; every output written as NAME.npy in the model's element type.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <meganeura/data.h>
#include <meganeura/onnx.h>
#include <meganeura/session.h>
#include <meganeura/tensor_data.h>

#include "commands.h"
#include "wall_time.h"

namespace mn::cli {

namespace {

struct RunArgs {
  std::string model;
  std::vector<std::string> inputs;  // NAME=FILE
  std::string output_dir;
  int64_t runs = 1;
  std::string precision = "f32";
  std::string device;
  bool profile = false;
  bool json = false;
};

bool float_kind(ElemType t) {
  return t == ElemType::f16 || t == ElemType::bf16 || t == ElemType::f32 || t == ElemType::f64;
}
bool integer_kind(ElemType t) { return !float_kind(t) && t != ElemType::boolean; }

// An .npy file's values in the element type the model declares for the input: floats to
// floats and integers to integers (range-checked), BOOL to BOOL; other pairings are an error.
RawTensor input_as(const RawTensor& file, ElemType want, const std::string& what) {
  if (file.type == want) return file;
  const bool ok = (float_kind(file.type) && float_kind(want)) ||
                  (integer_kind(file.type) && integer_kind(want));
  if (!ok) {
    throw Error(what + ": the file holds " + elem_type_name(file.type) + ", the model input is " +
                elem_type_name(want));
  }
  // Integers past 32 bits are refused here: no input holds more on the device.
  return from_array(to_array(file, what), want, what);
}

std::map<std::string, RawTensor> read_inputs(const RunArgs& a,
                                             const std::vector<onnx::ValueInfo>& declared) {
  std::map<std::string, RawTensor> out;
  for (const std::string& spec : a.inputs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size()) {
      throw Error("--input '" + spec + "': expected NAME=FILE.npy");
    }
    const std::string name = spec.substr(0, eq), file = spec.substr(eq + 1);
    auto it = std::find_if(declared.begin(), declared.end(), [&](const auto& d) { return d.name == name; });
    if (it == declared.end()) {
      std::string names;
      for (const auto& d : declared) names += (names.empty() ? "" : ", ") + d.name;
      throw Error("--input '" + name + "': the model has no such input (its inputs: " + names + ")");
    }
    if (out.count(name) != 0) throw Error("--input '" + name + "' is given twice");
    out[name] = input_as(read_npy(file), it->type, file);
  }
  for (const auto& d : declared) {
    if (out.count(d.name) == 0) throw Error("the model's input '" + d.name + "' is not given (--input " + d.name + "=FILE.npy)");
  }
  return out;
}

// An output's file name: the output's name with path separators and other odd characters
// replaced.
std::string file_name_for(const std::string& output) {
  std::string s;
  for (char ch : output) s += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.') ? ch : '_';
  if (s.empty() || s[0] == '.') s = "_" + s;
  return s + ".npy";
}

void run_model(const RunArgs& a) {
  if (a.runs < 1) throw Error("--runs " + std::to_string(a.runs) + ": expected an integer >= 1");
  const auto t_import = Clock::now();
  const onnx::ModelFile file = onnx::ModelFile::read(a.model);
  const std::vector<onnx::ValueInfo> declared = file.inputs();
  const std::map<std::string, RawTensor> inputs = read_inputs(a, declared);
  onnx::ImportOptions options;
  for (const auto& [name, t] : inputs) {
    options.input_shapes[name] = t.shape;
    options.input_values[name] = t;  // used only where a value decides a shape
  }
  onnx::ImportedModel m = file.import(options);
  const double import_ms = ms_since(t_import);

  const auto t_build = Clock::now();
  SessionOptions so;
  so.device = a.device;
  so.precision = dtype_from_name(a.precision);
  so.profile = a.profile;
  for (const auto& [name, w] : m.weights) so.preset.insert(name);
  auto session = build_session(m.graph, so);
  m.load_weights(*session);
  for (const auto& info : m.inputs) {
    session->set(info.name, onnx::to_graph_value(inputs.at(info.name), info, "--input " + info.name));
  }
  const double build_ms = ms_since(t_build);

  std::vector<double> times;
  for (int64_t r = 0; r < a.runs; ++r) {
    const auto t = Clock::now();
    session->step();
    times.push_back(ms_since(t));
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];

  if (!a.output_dir.empty()) std::filesystem::create_directories(a.output_dir);
  nlohmann::json outputs = nlohmann::json::object();
  for (const auto& info : m.outputs) {
    RawTensor t = onnx::from_graph_value(session->get(info.name), info, "output '" + info.name + "'");
    nlohmann::json o = {{"shape", t.shape}, {"dtype", elem_type_name(t.type)}};
    if (!a.output_dir.empty()) {
      const auto path = std::filesystem::path(a.output_dir) / file_name_for(info.name);
      write_npy(path, t);
      o["file"] = path.string();
    }
    if (!a.json) {
      std::printf("%s: %s %s%s%s\n", info.name.c_str(), elem_type_name(t.type), shape_str(t.shape).c_str(),
                  o.contains("file") ? " -> " : "", o.contains("file") ? o["file"].get<std::string>().c_str() : "");
    }
    outputs[info.name] = o;
  }
  const MemorySummary mem = session->memory();
  // GPU time by kernel name over the last step, largest first.
  nlohmann::json kernels = nlohmann::json::array();
  double gpu_ms = 0;
  if (a.profile) {
    for (const KernelTotal& k : kernel_totals(session->profile())) {
      kernels.push_back({{"name", k.name}, {"ms", k.ms}, {"count", k.count}});
      gpu_ms += k.ms;
    }
  }
  if (a.json) {
    nlohmann::json out = {{"model", a.model},
                          {"opset", m.opset},
                          {"device", session->device_name()},
                          {"nodes", m.op_counts},
                          {"specialized_inputs", m.specialized_inputs},
                          {"outputs", outputs},
                          {"import_ms", import_ms},
                          {"build_ms", build_ms},
                          {"run_ms", median},
                          {"runs", a.runs},
                          {"arena_mib", static_cast<double>(mem.arena_bytes) / (1 << 20)},
                          {"dispatches", mem.dispatches}};
    if (a.profile) {
      out["gpu_ms"] = gpu_ms;
      out["kernels"] = kernels;
    }
    std::cout << out.dump() << std::endl;
  } else {
    std::printf("%s on %s: import %.1f ms, build %.1f ms, run %.3f ms (median of %lld)\n",
                a.model.c_str(), session->device_name().c_str(), import_ms, build_ms, median,
                static_cast<long long>(a.runs));
    if (a.profile) {
      std::printf("GPU %.3f ms with a timestamp around every kernel:\n", gpu_ms);
      for (const auto& k : kernels) {
        std::printf("  %9.3f ms  %4d  %s\n", k["ms"].get<double>(), k["count"].get<int>(),
                    k["name"].get<std::string>().c_str());
      }
    }
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto a = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "run an ONNX model on .npy inputs");
  cmd->add_option("model", a->model, "the .onnx file (external data beside it)")->required();
  cmd->add_option("--input", a->inputs, "NAME=FILE.npy for each model input (its shape binds the "
                                        "model's symbolic dimensions)");
  cmd->add_option("--output-dir", a->output_dir, "write each output there as NAME.npy");
  cmd->add_option("--runs", a->runs, "steps to run (the median time is reported)")->capture_default_str();
  cmd->add_option("--precision", a->precision, "f32, or bf16/f16 products (mixed precision)")
      ->capture_default_str();
  cmd->add_option("--device", a->device, "device index or name substring (default: $MN_DEVICE or the best)");
  cmd->add_flag("--profile", a->profile, "GPU time of every kernel in the last run (timestamps "
                                         "around each kernel slow the run a little)");
  cmd->add_flag("--json", a->json, "one JSON object on standard output");
  cmd->callback([a] { run_model(*a); });
}

}  // namespace mn::cli
