// The weights of a Hugging Face directory: model.safetensors or the shards that
// model.safetensors.index.json maps tensors to, checked against the config, and uploaded into
// a Session one tensor at a time.
#include <meganeura/causal_lm.h>
#include <meganeura/error.h>
#include <meganeura/hf.h>
#include <meganeura/session.h>

#include <set>

#include "io/hf_files.h"
#include "io/json_fields.h"

namespace mn {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

std::string file_list(const std::vector<fs::path>& files) {
  std::string out;
  for (const fs::path& f : files) out += (out.empty() ? "" : ", ") + f.string();
  return out;
}

void add_file(HfModel& m, const fs::path& file) {
  auto reader = std::make_shared<const SafetensorsReader>(file);
  for (const SafetensorsEntry& e : reader->entries()) {
    if (m.tensors.count(e.name)) {
      throw FormatError(file.string() + ": tensor '" + e.name + "' is also in " +
                        m.tensors.at(e.name).file.string());
    }
    m.tensors[e.name] = HfTensor{file, e, reader};
  }
  m.weight_files.push_back(file);
}

// A shard named by the index: a plain file name beside it (no directories, no "..").
fs::path shard_path(const io::JsonFields& index, const std::string& tensor,
                    const std::string& shard) {
  const fs::path p(shard);
  if (shard.empty() || p.has_parent_path() || p.is_absolute() || shard == "." || shard == "..")
    index.fail("weight_map." + tensor, "names '" + shard + "', not a file beside the index");
  fs::path full = fs::path(index.file()).parent_path() / p;
  if (!fs::is_regular_file(full)) {
    throw FormatError(index.file() + ": weight_map points tensor '" + tensor +
                      "' at the missing shard " + full.string());
  }
  return full;
}

void add_sharded(HfModel& m, const fs::path& index_path) {
  io::JsonFields index(io::read_text_file(index_path), index_path.string());
  const nlohmann::json& map = index.object().value("weight_map", nlohmann::json());
  if (!map.is_object() || map.empty())
    index.fail("weight_map", "must be a non-empty object of tensor name -> shard file");
  std::map<std::string, fs::path> owner;  // tensor -> shard, as the index says
  std::set<fs::path> shards;
  for (const auto& [tensor, shard] : map.items()) {
    if (!shard.is_string()) index.fail("weight_map." + tensor, "must be a file name string");
    owner[tensor] = shard_path(index, tensor, shard.get<std::string>());
    shards.insert(owner[tensor]);
  }
  for (const fs::path& s : shards) add_file(m, s);
  for (const auto& [tensor, shard] : owner) {
    auto it = m.tensors.find(tensor);
    if (it == m.tensors.end() || it->second.file != shard) {
      throw FormatError(index_path.string() + ": weight_map puts tensor '" + tensor + "' in " +
                        shard.string() + ", which does not hold it");
    }
  }
  for (const auto& [tensor, t] : m.tensors) {
    if (!owner.count(tensor)) {
      throw FormatError(t.file.string() + ": tensor '" + tensor + "' is not in the weight_map of " +
                        index_path.string());
    }
  }
}

DType file_dtype(const HfTensor& t) {
  switch (t.entry.type) {
    case ElemType::f32:
      return DType::f32;
    case ElemType::f16:
      return DType::f16;
    case ElemType::bf16:
      return DType::bf16;
    default:
      throw FormatError(t.file.string() + ": tensor '" + t.entry.name + "' is " +
                        elem_type_name(t.entry.type) + "; weights must be F32, F16 or BF16");
  }
}

[[noreturn]] void missing(const HfModel& m, const std::string& name) {
  throw FormatError("missing tensor '" + name + "' in " + m.dir.string() + " (searched " +
                    file_list(m.weight_files) + ")");
}

}  // namespace

void io::check_weight_files(const HfModel& m, const std::vector<ParameterSpec>& params,
                            const std::string& described_as) {
  const std::string config = (m.dir / "config.json").string();
  std::set<std::string> expected;
  for (const ParameterSpec& p : params) {
    expected.insert(p.name);
    auto it = m.tensors.find(p.name);
    if (it == m.tensors.end()) missing(m, p.name);
    const HfTensor& t = it->second;
    if (t.entry.shape != p.shape) {
      throw FormatError(t.file.string() + ": tensor '" + p.name + "' has shape " +
                        shape_str(t.entry.shape) + ", but " + config + " gives " +
                        shape_str(p.shape));
    }
    file_dtype(t);
  }
  for (const auto& [name, t] : m.tensors) {
    if (expected.count(name)) continue;
    std::string why = "not a parameter of " + described_as + " as " + config + " describes it";
    if (name == "lm_head.weight") why += " (tie_word_embeddings is true)";
    throw FormatError(t.file.string() + ": unexpected tensor '" + name + "': " + why);
  }
}

void io::add_weight_files(HfModel& m) {
  if (fs::exists(m.dir / kIndex)) {
    add_sharded(m, m.dir / kIndex);
  } else if (fs::exists(m.dir / kSingle)) {
    add_file(m, m.dir / kSingle);
  } else {
    throw FormatError(m.dir.string() + ": no weights (neither " + kSingle + " nor " + kIndex + ")");
  }
}


HfModel load_hf_model(const fs::path& dir) {
  if (!fs::is_directory(dir)) throw FormatError(dir.string() + ": not a directory");
  HfModel m;
  m.dir = dir;
  m.config = load_lm_config(dir / "config.json");
  const fs::path gen = dir / "generation_config.json";
  if (fs::exists(gen))
    m.generation = parse_generation_config(io::read_text_file(gen), gen.string());
  io::add_weight_files(m);
  io::check_weight_files(m, lm_parameters(m.config), architecture_name(m.config.architecture));
  return m;
}

void load_weights(Session& session, const HfModel& model) {
  const std::vector<std::string> names = session.parameter_names();
  const std::set<std::string> wanted(names.begin(), names.end());
  for (const auto& [name, t] : model.tensors) {
    if (!wanted.count(name)) {
      throw Error("load_weights: the session has no parameter '" + name + "' (from " +
                  t.file.string() + "); was its graph built from " + model.dir.string() +
                  "/config.json?");
    }
  }
  for (const std::string& name : names) {
    if (is_lora_parameter(name)) continue;  // adapters start from their own initialization
    auto it = model.tensors.find(name);
    if (it == model.tensors.end()) missing(model, name);
    const HfTensor& t = it->second;
    const TensorType want = session.type_of(name);
    if (t.entry.shape != want.shape) {
      throw FormatError(t.file.string() + ": tensor '" + name + "' has shape " +
                        shape_str(t.entry.shape) + ", but the session's parameter is " +
                        want.str());
    }
    const RawTensor raw = t.reader->raw(name);
    session.set_raw(name, file_dtype(t), std::as_bytes(std::span(raw.bytes)));
  }
}

}  // namespace mn
